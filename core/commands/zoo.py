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
digits; :data:`FACE_OOD` says why the face tier has none), and, where the tier has a reference, its
predictive distance to it; the table goes to ``DIR/zoo.json`` and ``DIR/zoo.md`` (docs/zoo.md quotes it).

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
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.commands.console import (
    CLUSTER_HELP,
    USER_ERRORS,
    bar_callback,
    check_cluster,
    check_seed,
    describe_error,
    progress_bar,
    say,
)
from core.commands.zoo_jobs import (
    Job,
    JobCallbacks,
    default_workers,
    run_side_by_side,
    train_command,
    worker_threads,
)
from core.engine import tiers
from core.engine.files import atomic_write, strict_json
from core.engine.inference import METHODS
from core.engine.inference.base import ProgressRecord
from core.engine.inference.recipes import (  # noqa: F401 (the tiers' priors, said here)
    FACE_PRIOR_STD,
    FACES,
    FEATURES_SECONDS,
    FEATURES_TIER,
    NETWORK,
    NETWORK_PRIOR_STD,
    PAPER,
)
from core.engine.inference.sampling import chains_in_words
from core.engine.runner import observed, report


@dataclass(frozen=True)
class TierSets:
    """The images a tier's files are measured on: its training set (the draws' log posterior), its
    test set, and its out-of-distribution set (None where it has none)."""

    train: Any
    test: Any
    ood: Any | None


@dataclass(frozen=True)
class TierData:
    """Where a tier's images are, and what its table's columns measure them on, in words."""

    #: The test set, as the table says it ("the 10,000 MNIST test digits").
    test_words: str
    #: What the OOD AUROC tells apart, or why the tier has no such set (its column then says n/a).
    ood_words: str
    #: ``train``'s ``--data-dir`` from ``zoo``'s (None: none given).
    locate: Callable[[str | None], str | None]
    #: The sets, for ``zoo``'s arguments (``--data-dir``, ``--limit``).
    load: Callable[[argparse.Namespace], TierSets]


def _digit_sets(args: argparse.Namespace) -> TierSets:
    """MNIST's training and test digits and notMNIST's letters, each the first ``--limit``."""
    from core.analysis.evaluation import resolve_dataset

    return TierSets(*(resolve_dataset(name, args.data_dir).first(args.limit)
                      for name in ("mnist-train", "mnist-test", "notmnist")))


def _face_folder(data_dir: str | None) -> str | None:
    """UTKFace's archive or folder, found from ``--data-dir`` (its own, or a folder holding utkface/);
    None without one (``train`` then looks in the user cache)."""
    from core.engine.faces.testset import utkface_location

    return None if data_dir is None else str(utkface_location(data_dir))


def _face_sets(args: argparse.Namespace) -> TierSets:
    """UTKFace's fixed training and test splits of face descriptors, as ``train --dataset utkface``
    reads them (with ``--limit``, the same faces); no OOD set (:data:`FACE_OOD`)."""
    from core.engine.data.utkface import load_utkface
    from core.engine.runner import drain

    bar = progress_bar(0, "face descriptors")
    try:
        split = drain(load_utkface(_face_folder(args.data_dir), limit=args.limit), bar_callback(bar))
    finally:
        bar.close()
    return TierSets(split.train, split.test, None)


DIGITS = TierData("the 10,000 MNIST test digits", "notMNIST's letters against the test digits",
                  locate=lambda data_dir: data_dir, load=_digit_sets)
#: Why the face tier's OOD AUROC is n/a: a head's every input is the descriptor of a face the
#: detector found, and UTKFace's faces are the only ones here; a descriptor of something that is not
#: a face (a letter, noise of the descriptors' size) is an input the window never gives a head, so an
#: AUROC against it would measure nothing a person meets.
FACE_OOD = ("n/a: a head reads only descriptors of faces the detector found, and UTKFace's are the only "
            "faces here, so the tier has no out-of-distribution set")
FACE_DATA = TierData("UTKFace's test faces (20 % of each age group, seed 0; docs/faces.md)", FACE_OOD,
                     locate=_face_folder, load=_face_sets)

def _own_sets(args: argparse.Namespace) -> TierSets:
    """A features tier's sets come with its network (:func:`_own_network`), never from here."""
    raise ValueError("the features tier's images are read with its network (--network, --dataset)")


#: A features tier's images: the hash split of a person's folder, its features read from the cache
#: (:func:`_own_network`); a folder of their own classes has no out-of-distribution set.
OWN_DATA = TierData("the test images of your folder (its hash split: docs/data.md)",
                    "n/a: a folder of your own images has no out-of-distribution set",
                    locate=lambda data_dir: data_dir, load=_own_sets)


@dataclass(frozen=True)
class Tier:
    """One model and the ``train`` arguments of every method on it."""

    name: str
    model: tuple[str, ...]  # the ``train`` arguments that fix the model and its data
    methods: dict[str, tuple[str, ...]]
    reference: str | None  # the method every other is measured against
    rhat_target: float  # the largest R̂ a sampled posterior of this tier may have
    words: str
    data: TierData = DIGITS
    model_label: str = ""  # the model's part of the file names (default: the --model given)
    #: Built on a person's own network and images (``--network``, ``--dataset``): none is bundled,
    #: each is built where it is used.
    own: bool = False

    @property
    def model_name(self) -> str:
        return self.model_label or self.model[self.model.index("--model") + 1]

    def file_name(self, method: str) -> str:
        """``method``'s file name (:func:`core.engine.tiers.file_name`; the bundled files')."""
        return tiers.file_name(self.name, self.model_name, method)

    def path(self, folder: Path, method: str) -> Path:
        """``method``'s file in ``folder`` (:func:`core.engine.tiers.tier_file`)."""
        return tiers.tier_file(folder, self.name, self.model_name, method)


def tier_methods(tier: str, like: str | None = None) -> dict[str, tuple[str, ...]]:
    """The ``train`` arguments of every method in ``tier``, from the method registry, the tier's
    reference first (every other method is measured against it); a method that names no settings
    for ``tier`` takes those it names for the tier ``like``."""
    reference = tiers.REFERENCES.get(tier)
    ordered = sorted(METHODS.values(), key=lambda m: m.name != reference)  # stable: registry order after
    return {m.name: ("--method", m.name, *(m.tiers[tier] if tier in m.tiers else m.tiers[like]))
            for m in ordered if tier in m.tiers or (like is not None and like in m.tiers)}


TIERS: dict[str, Tier] = {
    PAPER: Tier(PAPER, ("--model", "softmax"), tier_methods(PAPER), reference=tiers.REFERENCES[PAPER],
                rhat_target=1.01,
                words="softmax regression (the D-SGHMC paper's model), every method, HMC as the reference"),
    NETWORK: Tier(NETWORK, ("--model", "lenet5"), tier_methods(NETWORK), reference=None, rhat_target=1.1,
                  words="LeNet-5, a network that reads drawn digits well, every method but HMC"),
    FACES: Tier(FACES, ("--dataset", "utkface", "--model", "softmax"), tier_methods(FACES),
                reference=tiers.REFERENCES[FACES], rhat_target=1.01,
                words="softmax regression on the face descriptor (eight age groups), every method, "
                      "HMC as the reference", data=FACE_DATA),
    FEATURES_TIER: Tier(FEATURES_TIER, ("--features-of", "IMPORTED.pt", "--dataset", "FOLDER"),
                        tier_methods(FEATURES_TIER, like=PAPER), reference=tiers.REFERENCES[FEATURES_TIER],
                        rhat_target=1.01, model_label="features",
                        words="a softmax-regression head on your own network's features, every method, HMC as "
                              "the reference", data=OWN_DATA, own=True),
}
#: The column of a features tier that is the imported network itself (its own last layer).
NETWORK_COLUMN = "network"


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


#: In a tier's arguments, the tier's own MAP file in the same folder (``--start-from {map}``: Laplace
#: and SWAG start from the mode the MAP method found, instead of finding it again).
MAP_FILE = "{map}"


def train_arguments(tier: Tier, method: str, out: Path, args: argparse.Namespace) -> list[str]:
    """The ``bayescope-cli train`` command line that makes ``method``'s file of ``tier``."""
    given = [str(tier.path(out.parent, "map")) if a == MAP_FILE else a for a in tier.methods[method]]
    argv = ["train", *tier.model, *given, *_overrides(method, args), "--seed", str(args.seed), "--out", str(out)]
    data_dir = tier.data.locate(args.data_dir)
    if data_dir:
        argv += ["--data-dir", data_dir]
    if args.limit:
        argv += ["--limit", str(args.limit)]
    if getattr(args, "cluster", None):
        argv += ["--cluster", args.cluster]
    return argv


def _overrides(method: str, args: argparse.Namespace) -> list[str]:
    """``zoo --set`` for ``method``: those of its settings it has (the others' are left out)."""
    from core.commands.console import parse_settings

    known = METHODS[method].defaults()
    chosen = parse_settings(getattr(args, "set", None) or [])
    return [part for name, value in chosen.items() if name.replace("-", "_") in known
            for part in ("--set", f"{name}={value}")]


def recorded_arguments(argv: list[str]) -> list[str]:
    """``argv`` without the output path, the data folder and the cluster: what makes a file what it
    is (the chains of a run on a cluster are those of the same run here); a ``--start-from`` file
    by its name alone (the folder is where the tier is)."""
    kept = _without(argv, ("--out", "--data-dir", "--cluster"))
    return [Path(a).name if i and kept[i - 1] == "--start-from" else a for i, a in enumerate(kept)]


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` without each of ``options`` and its value."""
    kept, skip = [], False
    for a in argv:
        if not skip and a not in options:
            kept.append(a)
        skip = a in options and not skip
    return kept


def _kept(path: Path, argv: list[str], listing: str | None = None) -> bool:
    """Whether ``path`` holds a posterior made by ``argv`` already (then it is not retrained); with
    ``listing`` (a features tier's folder, :func:`core.engine.data.features.listing_stamp`), made from
    the folder as it is now."""
    from core.engine.store import file_records

    if not path.is_file():
        return False
    try:
        zoo = file_records(path)["info"].get("zoo", {})
        return zoo.get("arguments") == recorded_arguments(argv) and zoo.get("listing") == listing
    except (*USER_ERRORS, OSError):  # a damaged or older file is rebuilt
        return False


def _train(argv: list[str]) -> int:
    """``bayescope-cli train`` with ``argv`` (its name first), in this process."""
    return train_command(argv)


def build(tier: Tier, methods: list[str], folder: Path, args: argparse.Namespace) -> int:
    """Train every method of ``tier`` not yet in ``folder``; return the exit code of the first failure.
    The methods share what they would each compute alike: the samplers' mode and curvature
    (:mod:`~core.engine.inference.build_cache`). With ``--jobs`` above 1 (the features tier's default
    on a machine of two cores or more) they train side by side (:mod:`core.commands.zoo_jobs`)."""
    from core.engine.inference.build_cache import shared_within_build

    workers = jobs_for(tier, methods, args)
    if workers > 1:
        return _build_side_by_side(tier, methods, folder, args, workers)
    with shared_within_build():
        return _build_methods(tier, methods, folder, args)


def jobs_for(tier: Tier, methods: list[str], args: argparse.Namespace) -> int:
    """How many methods ``args`` trains at a time: ``--jobs``, or by default
    :func:`~core.commands.zoo_jobs.default_workers` for the features tier built from the command
    line, one for the other tiers (their bundled files were made one at a time) and in the window
    (whose estimate and progress follow one method at a time)."""
    from core.engine.runner import observing

    given = getattr(args, "jobs", None)
    if given is not None:
        if given < 1:
            raise ValueError(f"--jobs must be at least 1, got {given}")
        if given > 1 and (getattr(args, "chains", None) or getattr(args, "cluster", None)):
            raise ValueError("--jobs trains methods side by side on this machine; leave out --cluster and --chains")
        return min(given, max(1, len(methods)))
    if not tier.own or observing() or getattr(args, "chains", None):
        return 1
    return default_workers(len(methods))


def _record_zoo(tier: Tier, path: Path, argv: list[str], listing: str | None) -> None:
    """Write into ``path``'s file, just made by ``train argv``, the tier it belongs to and the
    arguments that made it (what a rebuild compares to keep it)."""
    from core.engine.store import load_posterior, save_posterior

    posterior = load_posterior(path)
    posterior.info["zoo"] = {"tier": tier.name, "arguments": recorded_arguments(argv),
                             **({"listing": listing} if listing else {})}
    save_posterior(posterior, path, storage="float16" if "float16" in argv else "float32")


def _build_methods(tier: Tier, methods: list[str], folder: Path, args: argparse.Namespace) -> int:
    for i, method in enumerate(methods, 1):
        path = tier.path(folder, method)
        argv = train_arguments(tier, method, path, args)
        listing = getattr(args, "listing", None)
        kept = _kept(path, argv, listing)
        report(TierStage("method", method, i - 1, len(methods), kept=kept))
        if kept:
            say(f"[{i}/{len(methods)}] {method}: kept {path.name} (made with the same arguments)")
            continue
        if args.chains:
            code = _build_part(tier, method, path, argv, args, f"[{i}/{len(methods)}] {method}")
            if code != 0:
                return code
            continue
        say(f"[{i}/{len(methods)}] {method}: bayescope-cli {' '.join(argv)}")
        try:
            code = _train(argv)
        except KeyboardInterrupt:
            say(f"cancelled during {method}: the files made so far are kept in {folder}, and running the same "
                "command again goes on from there", sys.stderr)
            raise
        except (*USER_ERRORS, MemoryError) as exc:
            code = 2
            say(f"error: {describe_error(exc)}", sys.stderr)
            report(TierStage("failed", method, i - 1, len(methods), words=describe_error(exc)))
        if code != 0:
            say(f"error: {method} of the {tier.name} tier failed (exit {code}); the files made so far are kept, "
                "and running the same command again goes on from here", sys.stderr)
            return code
        _record_zoo(tier, path, argv, listing)
    return 0


#: The shared results' folder of a build whose methods train side by side (removed at its end).
SHARED_FOLDER = ".build-shared"


def _build_side_by_side(tier: Tier, methods: list[str], folder: Path, args: argparse.Namespace, workers: int) -> int:
    """:func:`build` with ``workers`` methods at a time, each in a process of its own
    (:func:`~core.commands.zoo_jobs.run_side_by_side`), the longest first; the lines and the
    stages as the one-at-a-time build gives them, numbered in the order the methods start."""
    from tqdm import tqdm

    from core.commands.console import printable

    listing = getattr(args, "listing", None)
    count = len(methods)
    numbers: dict[str, int] = {}
    jobs: list[Job] = []
    for method in methods:
        path = tier.path(folder, method)
        argv = train_arguments(tier, method, path, args)
        if _kept(path, argv, listing):
            numbers[method] = len(numbers) + 1
            report(TierStage("method", method, numbers[method] - 1, count, kept=True))
            say(f"[{numbers[method]}/{count}] {method}: kept {path.name} (made with the same arguments)")
            continue
        jobs.append(Job(method, tuple(argv), cost=schedule_seconds(tier, method)))
    pending = {j.method for j in jobs}
    # Laplace and SWAG start from the tier's MAP file: while the MAP is still to train, they wait for it
    jobs = [replace(j, after=("map",)) if MAP_FILE in tier.methods[j.method] and "map" in pending - {j.method}
            else j for j in jobs]
    if not jobs:
        return 0
    workers = min(workers, len(jobs))
    threads = worker_threads(workers)
    say(f"training {len(jobs)} of the {count} methods {workers} at a time, each in a process of its own "
        f"({threads} thread{'s' if threads > 1 else ''} each), the longest first")
    bars: dict[str, Any] = {}
    began: dict[str, float] = {}
    finished: list[str] = []

    def line(text: str, error: bool = False) -> None:
        tqdm.write(printable(text), file=sys.stderr if error else sys.stdout)

    def started(job: Job) -> None:
        numbers[job.method] = len(numbers) + 1
        began[job.method] = time.monotonic()
        report(TierStage("method", job.method, count - len(pending) + len(finished), count))
        line(f"[{numbers[job.method]}/{count}] {job.method}: bayescope-cli {' '.join(job.argv)}")
        bars[job.method] = progress_bar(0, job.method)

    def record(job: Job, item: ProgressRecord) -> None:
        report(item)
        bar = bars.get(job.method)
        if bar is not None:
            bar.set_description(f"{job.method}{': ' + item.phase if item.phase else ''}", refresh=False)
            bar_callback(bar)(item)

    def said(job: Job, text: str, error: bool) -> None:
        line(f"  {job.method}: {text}", error)

    def ended(job: Job, code: int, words: str, cpu: float) -> None:
        bar = bars.pop(job.method, None)
        if bar is not None:
            bar.close()
        if code == 0:
            _record_zoo(tier, tier.path(folder, job.method), list(job.argv), listing)
            finished.append(job.method)
            line(f"[{numbers[job.method]}/{count}] {job.method}: done in "
                 f"{(time.monotonic() - began[job.method]) / 60:.1f} min ({cpu / 60:.1f} min of CPU)")
            return
        if words:
            line(f"error: {words}", True)
        report(TierStage("failed", job.method, count - len(pending) + len(finished), count, words=words))
        line(f"error: {job.method} of the {tier.name} tier failed (exit {code}); the files made so far are kept, "
             "and running the same command again goes on from here" + (
                 f" (the methods still training, {', '.join(bars)}, finish first)" if bars else ""), True)

    try:
        return run_side_by_side(jobs, workers, threads, folder / SHARED_FOLDER,
                                JobCallbacks(started, record, said, ended))
    except KeyboardInterrupt:
        running = ", ".join(bars)
        say(f"cancelled{' during ' + running if running else ''}: the files made so far are kept in {folder}, "
            "and running the same command again goes on from there", sys.stderr)
        raise
    finally:
        for bar in bars.values():
            bar.close()


def schedule_seconds(tier: Tier, method: str) -> float:
    """What ``method`` is expected to take in ``tier``, for the order of a side-by-side build: the
    features tier's measured seconds (:data:`~core.engine.inference.recipes.FEATURES_SECONDS`), 0
    for a method or tier not measured (those keep the tier's order, after the measured ones)."""
    return float(FEATURES_SECONDS.get(method, 0.0)) if tier.name == FEATURES_TIER else 0.0


def _part_arguments(argv: list[str], chains: str, out: Path) -> list[str]:
    """``train``'s arguments for the chains ``chains`` of the run ``argv``: kept in float32 with
    every draw (the draws are thinned and stored as the run says when the parts are joined)."""
    return [*_without(argv, ("--keep-draws", "--storage", "--out")), "--chains", chains, "--out", str(out)]


def _chain_count(argv: list[str] | tuple[str, ...]) -> int:
    """The number of chains ``train``'s arguments ``argv`` run (0: a method without chains)."""
    return int(dict(a.split("=", 1) for a in argv if a.startswith("num_chains=")).get("num_chains", 0))


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _build_part(tier: Tier, method: str, path: Path, argv: list[str], args: argparse.Namespace, head: str) -> int:
    """Run the chains ``args.chains`` of ``method``'s run into ``DIR/parts``; join the parts into
    ``path`` once they hold every chain. Returns an exit code."""
    from core.commands import join
    from core.engine.store import file_records, load_posterior, save_posterior

    parts = path.parent / "parts"
    parts.mkdir(exist_ok=True)
    out = parts / f"{path.stem}.chains-{args.chains.replace(',', '-')}.pt"
    part_argv = _part_arguments(argv, args.chains, out)
    if _kept(out, part_argv):
        say(f"{head}: kept {out.name} (made with the same arguments)")
    else:
        say(f"{head}: bayescope-cli {' '.join(part_argv)}")
        code = _train(part_argv)
        if code != 0:
            say(f"error: chains {args.chains} of {method} failed (exit {code})", sys.stderr)
            return code
        posterior = load_posterior(out)
        posterior.info["zoo"] = {"tier": tier.name, "arguments": recorded_arguments(part_argv)}
        save_posterior(posterior, out)
    whole = recorded_arguments(_without(argv, ("--keep-draws", "--storage")))  # a part's, but for --chains
    done: dict[int, Path] = {}
    for candidate in sorted(parts.glob(f"{path.stem}.chains-*.pt")):
        try:
            records = file_records(candidate)
        except (*USER_ERRORS, OSError):
            continue
        made = records["info"].get("zoo", {}).get("arguments", [])
        if "--chains" in made and _without(made, ("--chains",)) == whole:
            done.update({int(c): candidate for c in records["info"].get("chain_ids", [])})
    count = _chain_count(argv)
    missing = [c for c in range(count) if c not in done]
    if missing:
        say(f"{head}: {chains_in_words(sorted(done))} of {count} {'has' if len(done) == 1 else 'have'} run; "
            f"the rest: bayescope-cli zoo --tier {tier.name} --methods {method} --chains {','.join(map(str, missing))} --out {path.parent}")
        return 0
    keep, storage = _option(argv, "--keep-draws"), _option(argv, "--storage") or "float32"
    join_argv = [*sorted(set(map(str, done.values()))), "--out", str(path), "--storage", storage,
                 *(["--keep-draws", keep] if keep else []), *(["--data-dir", args.data_dir] if args.data_dir else [])]
    say(f"{head}: every chain has run; bayescope-cli join {' '.join(join_argv)}")
    parser = argparse.ArgumentParser(prog="bayescope-cli join")
    join.add_arguments(parser)
    code = join.run(parser.parse_args(join_argv))
    if code != 0:
        return code
    posterior = load_posterior(path)
    posterior.info["zoo"] = {"tier": tier.name, "arguments": recorded_arguments(argv),
                             "joined_from": sorted(p.name for p in set(done.values()))}
    save_posterior(posterior, path, storage=storage)
    return 0


def measure(tier: Tier, methods: list[str], folder: Path, args: argparse.Namespace,
            sets: TierSets | None = None) -> list[dict[str, Any]]:
    """One row per method: convergence, test-set quality, OOD detection and distance to the reference,
    on ``sets`` (by default the tier's own, :attr:`Tier.data`)."""
    from core.analysis.conformal_run import calibrate_evaluation
    from core.analysis.evaluation import evaluate, evaluation_tables
    from core.analysis.fidelity import fidelity_to_reference
    from core.commands.info import convergence_record, summary
    from core.engine.runner import drain
    from core.engine.store import file_records, load_posterior

    paths = {m: tier.path(folder, m) for m in methods}
    posteriors = {m: load_posterior(p) for m, p in paths.items()}
    sets = tier.data.load(args) if sets is None else sets
    test, ood = sets.test, sets.ood
    bar = progress_bar(0, "evaluating")
    try:
        ev = drain(evaluate(posteriors, test, ood, seed=args.seed), bar_callback(bar))
        tables = evaluation_tables(ev)
        distance = {}
        if tier.reference in posteriors:
            others = {m: p for m, p in posteriors.items() if m != tier.reference}
            if others:
                report = drain(fidelity_to_reference((tier.reference, posteriors[tier.reference]), others, test,
                                                     seed=args.seed), bar_callback(bar))
                distance = {m: f.record() for m, f in report.results.items()}
        levels = record_levels(tier, posteriors, paths, sets.train, bar)
        masses = {}
        if tier.reference in posteriors:  # after record_levels, which rewrites the files it scores
            from core.analysis.diagnostics import probe_set
            from core.commands.fidelity import interval_masses, record_interval_masses

            others = {m: p for m, p in posteriors.items() if m != tier.reference}
            masses = interval_masses((tier.reference, posteriors[tier.reference]), others,
                                     probe_set(test), seed=args.seed, on_progress=bar_callback(bar))
            record_interval_masses(masses, paths)
        if tier.own:  # after the last rewrite of the files: a calibration names its file's SHA-256
            # A person's own tier then shows conformal sets in the window without a command to
            # run (the bundled tiers' are made by ``calibrate``, docs/zoo.md): from the tier's own
            # evaluation of its test split, no second pass. The folder's split already leaves the
            # training images out, so none are checked against.
            calibrate_evaluation(ev, test, paths, seed=args.seed)
    finally:
        bar.close()
    auroc = {(r["posterior"], r["score"]): r["auroc"] for r in tables.get("ood_detection", [])}  # none without OOD images
    rows = []
    for row in tables["summary"]:
        m = row["posterior"]
        records = file_records(paths[m])
        facts, record = summary(records), convergence_record(records)
        rows.append({
            "method": m, "label": facts["method_label"] if m in METHODS else facts["name"] or m,
            "chains": record.get("chains"),
            "draws": facts["draws"], "measured_draws": facts["measured_draws"],
            "rhat": record.get("rhat_max"), "ess_bulk": record.get("ess_bulk_min"),
            "acceptance": facts["acceptance"], "accuracy": row["accuracy"], "nll": row["nll"], "ece": row["ece"],
            "ood_auroc_total": auroc.get((m, "total")), "ood_auroc_epistemic": auroc.get((m, "epistemic")),
            **{f"to_{tier.reference}_{k}": v for k, v in distance.get(m, {}).items() if not k.startswith("per_")},
            "interval_mass": masses.get(m, {}).get("mean"), "interval_mass_p10": masses.get(m, {}).get("p10"),
            "interval_level": masses.get(m, {}).get("stated_level"),
            "log_posterior_mean": levels.get(m, {}).get("mean"), "log_posterior_sd": levels.get(m, {}).get("sd"),
            "elbo_per_epoch": records["info"].get("elbo_per_epoch"),
            "mixture_weights": records["info"].get("weights"),
            "file_mb": paths[m].stat().st_size / 1e6, "train_seconds": facts["train_seconds"],
            "command": "bayescope-cli " + " ".join(records["info"].get("zoo", {}).get("arguments", [])),
        })
    return rows


def record_levels(tier: Tier, posteriors: dict, paths: dict[str, Path], train: Any,
                  bar: Any) -> dict[str, dict[str, Any]]:
    """Where the tier's reference is among ``posteriors``: the exact log posterior of the weight
    draws of every posterior of its model and prior over the training set, the reference's own included,
    returned by method and written into each other file as ``info["log_posterior_level"]`` with
    the reference's beside it (the window's column says it). The reference's file, and files
    whose draws belong to another model or prior, are left as they are."""
    from core.analysis.fidelity import log_posterior_level, why_not_level
    from core.engine.runner import drain
    from core.engine.store import save_posterior

    if tier.reference not in posteriors:
        return {}
    ref = posteriors[tier.reference]
    scored = {m: p for m, p in posteriors.items() if why_not_level(p, ref) is None}
    prior_std = float(ref.config.get("prior_std", 1.0))
    levels = {m: drain(log_posterior_level(p, train, prior_std), bar_callback(bar)).record() for m, p in scored.items()}
    for m, posterior in scored.items():
        if m == tier.reference:
            continue
        posterior.info["log_posterior_level"] = {
            **levels[m], "data": f"the {len(train):,} training images", "prior_std": prior_std,
            "reference": {"method": tier.reference, **levels[tier.reference]}}
        storage = "float16" if "float16" in posterior.info.get("zoo", {}).get("arguments", []) else "float32"
        save_posterior(posterior, paths[m], storage=storage)
    return levels


def _cell(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _level_cell(row: dict[str, Any]) -> str:
    mean, sd = row.get("log_posterior_mean"), row.get("log_posterior_sd")
    return "n/a" if mean is None else f"{mean:,.0f} ± {sd:,.0f}".replace("-", "−")


def _mass_cell(row: dict[str, Any]) -> str:
    mean, p10, level = row.get("interval_mass"), row.get("interval_mass_p10"), row.get("interval_level")
    if mean is None:
        return "n/a"
    held = "" if level is None or round(100 * level) == 90 else f"; its interval holds {100 * level:.0f} %"
    return f"{mean:.2f} ({p10:.2f}{held})"


def markdown(tier: Tier, rows: list[dict[str, Any]]) -> str:
    """The tier's table as Markdown, one row per method."""
    ref = tier.reference
    head = ["method", "chains × draws", "R̂", "bulk ESS", "accuracy", "NLL", "ECE", "OOD AUROC (total)",
            "OOD AUROC (epistemic)"] + ([f"KL({ref} ‖ ·)", "TV", "top-class agreement",
                                         f"{ref}'s mass in its 90 % interval (10th pct.)",
                                         "log posterior of the draws"] if ref else []) + [
            "MB", "train s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        draws = f"{r['chains']} × {r['draws']}" if r["chains"] else "n/a"
        if r["chains"] and r.get("measured_draws") not in (None, r["draws"]):  # R̂ and ESS from the whole run
            draws += f" (of {r['measured_draws']:,})"
        cells = [r["label"], draws, _cell(r["rhat"]), _cell(r["ess_bulk"], 0), f"{r['accuracy'] * 100:.2f} %",
                 _cell(r["nll"]), _cell(r["ece"]), _cell(r["ood_auroc_total"]), _cell(r["ood_auroc_epistemic"])]
        if ref:
            cells += [_cell(r.get(f"to_{ref}_kl"), 4), _cell(r.get(f"to_{ref}_total_variation"), 4),
                      _cell(r.get(f"to_{ref}_agreement")), _mass_cell(r), _level_cell(r)]
        cells += [f"{r['file_mb']:.1f}", _cell(r["train_seconds"], 0)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


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
class TierStage:
    """Where a tier's build is, handed to an observer (:func:`core.engine.runner.report`; the
    window's training dialog) as the run reaches it; the command line prints its own lines.

    ``kind``: ``"network"`` (the network read and split), ``"features"`` (every image through it
    once, or read from the cache), ``"method"`` (``method`` trained, or ``kept`` when its file was
    made with the same arguments; ``done`` of ``count`` methods before it), ``"failed"`` (``method``
    could not be trained, ``words`` says why) and ``"measuring"`` (every file measured on the test
    images)."""

    kind: str
    method: str = ""
    done: int = 0
    count: int = 0
    kept: bool = False
    words: str = ""


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
        argv_m = [*tier.methods[method], *_overrides(method, args)]
        chosen = parse_settings([argv_m[j + 1] for j, a in enumerate(argv_m) if a == "--set"])
        config = METHODS[method].parse_settings(chosen)
        changes = small_folder_settings(config, num_train, chosen)
        config = replace(config, **changes) if changes else config
        drop = float(_option(list(argv_m), "--drop-rate") or METHODS[method].default_drop_rate)
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
        whole = [m for m in methods if not _chain_count(tier.methods[m])]
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
        if not all(_kept(tier.path(folder, m), train_arguments(tier, m, tier.path(folder, m), args),
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
