"""``bayescope-cli zoo --tier paper|network --out DIR``: rebuild one tier of posteriors.

A *tier* is one model trained by every method on the same data with the same prior (where a
method has a prior), so that the columns of a comparison differ in method only:

- ``paper``: the D-SGHMC paper's softmax regression on MNIST (7,850 weights) under its N(0, 1)
  prior; full-batch HMC with four chains is the reference every other method is measured against.
- ``network``: LeNet-5 (6-16-120-84, 44,426 weights) on MNIST, for drawn digits, under N(0, 0.2²)
  (:data:`NETWORK_PRIOR_STD`); HMC is left out (see docs/zoo.md for why).
- ``faces``: a *feature tier*, a fixed feature extractor (dlib's 128-number face descriptor) and a
  softmax-regression head on it (1,032 weights, eight age groups) trained on UTKFace's fixed
  training split under N(0, σ²) (:data:`FACE_PRIOR_STD`, where the head's evidence peaks); full-batch
  HMC is the reference, as in the paper tier.
- ``features``: a softmax-regression head on the features of a person's own network (``--network``,
  TorchScript or torch.export, split at its last linear layer: :mod:`core.engine.networks`) over a
  folder of their images (``--dataset``, split by each file's hash), every method with the paper
  tier's settings and full-batch HMC as the reference. The network is imported first (its own head,
  ``features_network.pt``, is one more column when its classes are the folder's) and each
  image passes through it once: the features are kept in the user cache
  (:mod:`core.engine.data.features`), so every method, and a second build, reads them from there.

Each method runs as ``bayescope-cli train`` with the arguments its registry entry names for the
tier (``Method.tiers``, gathered in :data:`TIERS`; so a file is
the same as that command's), into ``DIR/<tier>_<model>_<method>.pt`` (a features tier's
``DIR/features_<method>.pt``: :func:`core.engine.tiers.file_name`). A file already there
and made with the same arguments is kept, so an interrupted rebuild goes on where it stopped.
Then every file is evaluated on the tier's test set (accuracy, NLL, ECE: MNIST's test digits, or
UTKFace's test faces) and on its out-of-distribution set where it has one (notMNIST letters against
digits; :data:`~core.commands.zoo_tiers.FACE_OOD` says why the face tier has none), and, where the
tier has a reference, its predictive distance to it; the table goes to ``DIR/zoo.json`` and
``DIR/zoo.md`` (docs/zoo.md quotes it). The tiers are defined in :mod:`core.commands.zoo_tiers`,
their files made in :mod:`core.commands.zoo_build` and measured in :mod:`core.commands.zoo_measure`.

``--jobs N`` trains N methods at a time, each in a process of its own with its share of the cores,
the longest first (:mod:`core.commands.zoo_jobs`); the files are those the one-at-a-time build makes.
It is the features tier's default on a machine of two cores or more (two at a time: its HMC and its
SG samplers are most of the build, and a sampler's memory-bound products gain little from a second
thread); the bundled tiers build one at a time unless it is given, and so does the window.

``--chains 0,1`` runs only those chains of each sampler named by ``--methods``, into
``DIR/parts/``, so that a run longer than one sitting can be made in parts; once the parts
hold every chain, they are joined (``bayescope-cli join``) into the method's file, the same
posterior as the run made in one go, and the tier is measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, replace
from pathlib import Path

from core.commands.console import (
    CLUSTER_HELP,
    bar_callback,
    check_cluster,
    check_seed,
    progress_bar,
    say,
)
from core.commands.zoo_build import (
    TierStage,
    already_made,
    build,
    chain_count,
    option_value,
    setting_overrides,
    train_arguments,
)
from core.commands.zoo_measure import markdown, measure
from core.commands.zoo_tiers import NETWORK_COLUMN, TIERS, Tier, TierSets
from core.engine.files import atomic_write, strict_json
from core.engine.inference import METHODS
from core.engine.inference.base import ProgressRecord
from core.engine.inference.recipes import (  # noqa: F401 (the tiers' priors, said here)
    FACE_PRIOR_STD,
    FEATURES_TIER,
    NETWORK_PRIOR_STD,
)
from core.engine.runner import observed, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayescope-cli zoo``."""
    parser.add_argument("--tier", required=True, choices=tuple(TIERS),
                        help="which model's set to rebuild (features: a network of your own on your images)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for the posterior files and the table")
    parser.add_argument("--data-dir", help="the data folder holding mnist/ and notmnist/ (faces: utkface/, "
                        "or UTKFace's archive or folder itself)")
    parser.add_argument("--methods", help="comma-separated subset of the tier's methods (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="use only the first N images of every set (a quick check)")
    parser.add_argument("--evaluate-only", action="store_true", help="train nothing: measure the files in DIR")
    parser.add_argument("--cluster", metavar="ADDRESS", help=f"train's --cluster: {CLUSTER_HELP}")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="train N methods at a time, each in a process of its own with its share of the cores "
                             "(default: 2 for the features tier on a machine of two cores or more, else 1)")
    parser.add_argument("--chains", metavar="LIST",
                        help="run only these chains (numbered from 0, e.g. 0,1) of the samplers named by "
                        "--methods, into DIR/parts; once every chain has run, the parts are joined and measured")
    own = parser.add_argument_group("--tier features: a network of your own and a folder of images")
    own.add_argument("--network", metavar="NET.pt|NET.pt2",
                     help="the network, saved with torch.jit.save or torch.export.save (see bayescope-cli import)")
    own.add_argument("--dataset", metavar="FOLDER", help="your images: class folders or a CSV manifest")
    own.add_argument("--head", metavar="NAME", help="the network's last linear layer, when several could be")
    own.add_argument("--image-size", type=int, metavar="N", help="the side it reads (or image_size in NET.json)")
    own.add_argument("--mean", metavar="M1,M2,M3", help="per-channel mean it standardises with (or in NET.json)")
    own.add_argument("--std", metavar="S1,S2,S3", help="per-channel standard deviation (or in NET.json)")
    own.add_argument("--classes", metavar="names.txt", help="its class names, one a line (or classes in NET.json)")
    own.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="a setting given to every method that has it, after the tier's own (e.g. a quick look: "
                          "--set epochs=5); the files record it")


def _own_network(tier: Tier, folder: Path, args: argparse.Namespace) -> tuple[Tier, TierSets, bool]:
    """A features tier's start: the network imported (its own head saved as the tier's
    ``network`` column), the folder's features computed once (or read from the cache), the tier's
    ``train`` arguments pointed at them. Returns the tier, its sets (no OOD set) and whether the
    network's own head is a column (its classes are the folder's)."""
    from core.commands.import_ import _numbers
    from core.engine.data.features import folder_features
    from core.engine.import_weights import head_posterior, import_own_network, read_class_names
    from core.engine.runner import drain
    from core.engine.store import save_posterior

    _check_own(args)
    report(TierStage("network"))
    names = read_class_names(args.classes) if args.classes else ()
    posterior, split = import_own_network(args.network, head=args.head, image_size=args.image_size,
                                          mean=_numbers(args.mean, "--mean"), std=_numbers(args.std, "--std"),
                                          class_names=names)
    report(TierStage("features"))
    say(f"{Path(args.network).name}: split at {split.head}, {split.feature_dim} features, "
        f"{'colour' if split.input.channels == 3 else 'grey'} {split.input.image_size}×{split.input.image_size}")
    bar = progress_bar(0, "network features")
    try:
        data = drain(folder_features(split, args.dataset), bar_callback(bar))
    finally:
        bar.close()
    say(f"{len(data.train):,} training and {len(data.test):,} test images, "
        f"{'computed now' if data.computed else 'features read from the cache'} ({data.cache})")
    args.listing = data.stamp  # the listing the features were read for, not a second one
    names, theirs = tuple(split.input.class_names), tuple(data.class_names)
    own = set(names) == set(theirs)
    if own and names != theirs:  # the same classes in another order: the head's rows follow the folder's
        order = [names.index(n) for n in theirs]
        posterior = head_posterior(split, "map", split.weight[order], split.bias[order], posterior.dataset)
        posterior.info["class_names"] = list(theirs)
    imported = tier.path(folder, NETWORK_COLUMN)
    posterior.info["name"] = f"your network ({Path(args.network).name})"
    posterior.info["zoo"] = {"tier": tier.name, "arguments": ["import", "--network", str(args.network),
                                                              "--head", split.head]}
    save_posterior(posterior, imported)
    if not own:
        say(f"note: the network names its classes {', '.join(names)}, the folder {', '.join(theirs)}: its own "
            "last layer is not a column of the tier, whose heads learn the folder's classes", sys.stderr)
    tier = replace(tier, model=("--features-of", str(imported), "--dataset", str(args.dataset)))
    return tier, TierSets(data.train.first(args.limit), data.test.first(args.limit), None), own


def chosen_methods(tier: Tier, args: argparse.Namespace) -> list[str]:
    """The methods ``--methods`` names (checked to be the tier's), or all of the tier's."""
    if not args.methods:
        return list(tier.methods)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in tier.methods]
    if unknown:
        raise ValueError(f"the {tier.name} tier has no method {', '.join(unknown)}; it has {', '.join(tier.methods)}")
    return methods


def _check_own(args: argparse.Namespace) -> None:
    if not args.network or not args.dataset:
        raise ValueError("the features tier needs --network (your classifier, saved with torch.jit.save or "
                         "torch.export.save) and --dataset (a folder of your images in class folders)")


# ------------------------------------------------------------------ the run, observed (the window)


@dataclass(frozen=True)
class TierProgress:
    """One report of an observed build: its stage, and the progress record within it (None: the
    stage has just begun)."""

    stage: TierStage
    record: ProgressRecord | None = None


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """``bayescope-cli zoo``'s arguments ``argv`` (without the command's name), as the command reads them."""
    parser = argparse.ArgumentParser(prog="bayescope-cli zoo")
    add_arguments(parser)
    return parser.parse_args(argv)


def own_tier_arguments(network: str | Path, dataset: str | Path, out: str | Path, *, methods: list[str] | None = None,
                       head: str | None = None, settings: tuple[str, ...] = ()) -> list[str]:
    """The command line (after ``bayescope-cli zoo``) that builds the features tier of ``network`` over
    the images in ``dataset`` into ``out``: what the window runs, and what it shows a person to run."""
    argv = ["--tier", FEATURES_TIER, "--network", str(network), "--dataset", str(dataset), "--out", str(out)]
    if methods:
        argv += ["--methods", ",".join(methods)]
    if head:
        argv += ["--head", head]
    for setting in settings:
        argv += ["--set", setting]
    return argv


def observed_build(argv: list[str]) -> Generator[TierProgress, None, int]:
    """``bayescope-cli zoo ARGV`` as a generator: the command's own :func:`run` (no second
    implementation), in a thread of its own (:func:`core.engine.runner.observed`), its stages and
    progress records yielded, its exit code returned. Closing it cancels the build as Ctrl-C does:
    the files made so far are kept, and the same build again goes on from them."""
    args = parse_arguments(argv)
    stage = TierStage("network")
    inner = observed(run, args)
    try:
        while True:
            try:
                item = next(inner)
            except StopIteration as stop:
                return stop.value
            if isinstance(item, TierStage):
                stage = item
                yield TierProgress(stage)
            else:
                yield TierProgress(stage, item)
    finally:
        inner.close()


@dataclass(frozen=True)
class TierEstimate:
    """A measured forecast of a features tier's build: seconds per stage, in the build's order
    (``"features"``, then each method by its registry key)."""

    stages: tuple[tuple[str, float], ...]
    images: int
    train_images: int
    cached: bool  # the features are in the cache: no image is read
    #: What the network is: the layer it is split at, its features' length, what it reads, its checksum.
    head: str = ""
    features: int = 0
    channels: int = 3
    image_size: int = 0
    sha256: str = ""
    #: The folder's classes (its sub-folders' names).
    class_names: tuple[str, ...] = ()
    #: Methods whose steps could not be timed (their stage counts 0 seconds).
    unmeasured: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.stages)

    def seconds_left(self, stage: TierStage, fraction: float, elapsed: float) -> float | None:
        """Seconds the build has left: the estimate of what is still to run, at ``fraction`` (0 … 1) of
        ``stage``, blended with the build's own pace over its ``elapsed`` seconds as
        :func:`~core.engine.training_plan.seconds_left` blends a run's; None while measuring (unestimated)."""
        from core.engine.training_plan import ESTIMATE_WEIGHT_SECONDS

        if stage.kind == "measuring":
            return None
        names = [n for n, _ in self.stages]
        current = "features" if stage.kind in ("network", "features") else stage.method
        at = names.index(current) if current in names else 0
        done = sum(s for _, s in self.stages[:at]) + fraction * self.stages[at][1]
        left = max(0.0, self.seconds - done)
        if done <= 0 or elapsed <= 0:
            return left
        weight = elapsed / (elapsed + ESTIMATE_WEIGHT_SECONDS)
        return left * (weight * elapsed / done + 1.0 - weight)

    def done_share(self, stage: TierStage, fraction: float) -> float:
        """The share (0 … 1) of the estimated time done at ``fraction`` of ``stage``."""
        if stage.kind == "measuring" or self.seconds <= 0:
            return 1.0 if stage.kind == "measuring" else 0.0
        names = [n for n, _ in self.stages]
        current = "features" if stage.kind in ("network", "features") else stage.method
        at = names.index(current) if current in names else 0
        return min(1.0, (sum(s for _, s in self.stages[:at]) + fraction * self.stages[at][1]) / self.seconds)


def estimate_own_tier(argv: list[str]) -> Generator[ProgressRecord, None, TierEstimate]:
    """Measure what ``bayescope-cli zoo ARGV`` (the features tier) will take here: the images once
    through the network (none when their features are cached), then each method's training as the
    build will run it (its tier settings, ``--set``, a small folder's defaults), a few of its steps
    timed (:func:`core.engine.training_plan.estimate_duration`) on a head of the network's feature
    length. Laplace and SWAG are timed with a mode of their own, which the build takes from the MAP:
    their estimate is an upper bound."""
    from core.commands.console import parse_settings
    from core.commands.import_ import _numbers
    from core.engine.data.features import features_cached, folder_listing, training_images
    from core.engine.import_weights import read_class_names
    from core.engine.models import ArchSpec
    from core.engine.networks import network_input, open_network
    from core.engine.training_plan import estimate_duration, network_seconds, small_folder_settings

    args = parse_arguments(argv)
    tier = TIERS[args.tier]
    _check_own(args)
    methods = chosen_methods(tier, args)
    names = read_class_names(args.classes) if args.classes else ()
    split = open_network(args.network, lambda shape: network_input(
        args.network, image_size=args.image_size, mean=_numbers(args.mean, "--mean"), std=_numbers(args.std, "--std"),
        class_names=names, program_shape=shape), args.head)
    listing = folder_listing(args.dataset)
    images, cached = len(listing.paths), features_cached(split, listing)
    yield ProgressRecord(0, len(methods) + 1, {}, phase="measuring")
    stages = [("features", 0.0 if cached else network_seconds(split, images))]
    unmeasured: list[str] = []
    num_train = max(1, training_images(listing))
    for i, method in enumerate(methods, 1):
        argv_m = [*tier.methods[method], *setting_overrides(method, args)]
        chosen = parse_settings([argv_m[j + 1] for j, a in enumerate(argv_m) if a == "--set"])
        config = METHODS[method].parse_settings(chosen)
        changes = small_folder_settings(config, num_train, chosen)
        config = replace(config, **changes) if changes else config
        drop = float(option_value(list(argv_m), "--drop-rate") or METHODS[method].default_drop_rate)
        head = ArchSpec("softmax", num_classes=len(listing.class_names), input_dim=split.feature_dim, drop_rate=drop)
        try:
            estimate = yield from estimate_duration(method, config, head, num_train)
        except ValueError:  # a probe too short for the method (SWAG's rank needs its snapshots): not measured
            unmeasured.append(method)
            stages.append((method, 0.0))
        else:
            stages.append((method, estimate.seconds))
        yield ProgressRecord(i, len(methods) + 1, {}, phase="measuring")
    return TierEstimate(tuple(stages), images, num_train, cached, split.head, split.feature_dim, split.input.channels,
                        split.input.image_size, split.sha256, tuple(listing.class_names), tuple(unmeasured))


def run(args: argparse.Namespace) -> int:
    """Carry out ``bayescope-cli zoo``: build (or keep) every file, then measure them all."""
    tier = TIERS[args.tier]
    check_seed(args.seed)
    own_options = [o for o in ("network", "dataset", "head", "image_size", "mean", "std", "classes")
                   if getattr(args, o, None)]
    if not tier.own and own_options:
        raise ValueError(f"--{own_options[0].replace('_', '-')} belongs to the features tier (a network of your own); "
                         f"the {tier.name} tier's model is fixed")
    check_cluster(getattr(args, "cluster", None))  # before hours of training, not at the first sampler
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1 image, got {args.limit}")
    methods = chosen_methods(tier, args)
    if getattr(args, "chains", None):
        try:
            args.chains = ",".join(str(int(c)) for c in args.chains.split(","))
        except ValueError:
            raise ValueError(f"--chains takes chain numbers separated by commas (e.g. 0,1), got {args.chains!r}") from None
        whole = [m for m in methods if not chain_count(tier.methods[m])]
        if not args.methods or whole:
            raise ValueError("--chains runs chains of samplers: name them with --methods"
                             + (f" ({', '.join(whole)} run no chains)" if args.methods else ""))
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    data, columns = None, list(methods)
    if tier.own:
        if args.cluster or getattr(args, "chains", None):
            raise ValueError("the features tier runs here in one go; leave out --cluster and --chains")
        tier, data, own = _own_network(tier, folder, args)
        columns = [*methods, *([NETWORK_COLUMN] if own else [])]
    if not args.evaluate_only:
        code = build(tier, methods, folder, args)
        if code != 0:
            return code
        if not all(already_made(tier.path(folder, m), train_arguments(tier, m, tier.path(folder, m), args),
                         getattr(args, "listing", None)) for m in methods):
            say("not measured: a run has chains still to run")
            return 0
    report(TierStage("measuring", done=len(methods), count=len(methods)))
    rows = measure(tier, columns, folder, args, data)
    table = markdown(tier, rows)
    record = strict_json({"tier": tier.name, "words": tier.words, "test": tier.data.test_words,
                          "ood": tier.data.ood_words, "rows": rows}, indent=2)
    atomic_write(folder / "zoo.json", lambda f: f.write(record.encode()))
    atomic_write(folder / "zoo.md", lambda f: f.write(table.encode()))
    for line in table.splitlines():
        say(line)
    late = [f"{r['label']} ({r['rhat']:.3f})" for r in rows if r["rhat"] is not None and r["rhat"] > tier.rhat_target]
    if late:
        say(f"above the {tier.name} tier's R̂ target of {tier.rhat_target}: {', '.join(late)}")
    say(f"the {tier.name} tier took {(time.monotonic() - started) / 60:.1f} min; table in {folder / 'zoo.md'}")
    return 0
