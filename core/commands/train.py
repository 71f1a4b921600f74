"""``bayescope-cli train``: fit a posterior on a data set and save it.

``train`` checks every argument and the output path before training, saves the posterior
first and measures its test accuracy afterwards, so a failure or a cancel during that
measurement never loses the training.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from core.analysis.diagnostics import diagnose_progress, stored_figures
from core.commands.console import (
    CLUSTER_HELP,
    USER_ERRORS,
    add_device_argument,
    bar_callback,
    cancel_code,
    check_cluster,
    check_seed,
    chosen_device,
    cluster_for,
    describe_error,
    parse_settings,
    progress_bar,
    say,
    say_where,
)
from core.commands.info import convergence_text
from core.engine.data.datasets import load_split
from core.engine.data.folder import (
    MAX_FOLDER_SIZE,
    TEST_FRACTION,
    check_training_classes,
    folder_architecture,
    load_image_folder,
    streamed_refusal,
)
from core.engine.data.identity import start_classes
from core.engine.data.listing import image_folder
from core.engine.files import check_output_file, file_sha256
from core.engine.inference import METHODS, get_method
from core.engine.inference.base import Dataset, accuracy_progress
from core.engine.inference.chain_merge import chains_of_run
from core.engine.models import (
    ARCHITECTURES,
    RESNET_MIN_SIZE,
    ArchSpec,
    check_model_fits,
)
from core.engine.naming import method_label, plural, samples_used
from core.engine.runner import drain, fit_posterior, fit_posterior_on, start_weights
from core.engine.store import add_to_info, load_posterior, save_posterior
from core.engine.training_plan import small_folder_settings
from core.engine.training_words import chance_words, small_folder_words


def _train_plan(args: argparse.Namespace) -> tuple[object, object, ArchSpec, object, torch.device]:
    """Check every ``train`` argument (and the output path) before any data is read."""
    device = chosen_device(args)
    method = get_method(args.method)
    config = method.parse_settings(parse_settings(args.set))
    if args.hidden < 1:
        raise ValueError(f"--hidden must be at least 1 unit, got {args.hidden}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1 image, got {args.limit}")
    if args.eval_samples < 1:
        raise ValueError(f"--eval-samples must be at least 1, got {args.eval_samples}")
    if args.drop_rate is not None and not 0.0 <= args.drop_rate < 1.0:
        raise ValueError(f"--drop-rate must lie in [0, 1), got {args.drop_rate}")
    if args.keep_draws is not None:
        if not hasattr(config, "num_chains"):
            raise ValueError(f"--keep-draws thins a sampler's chains; {method_label(args.method)} has none")
        if args.keep_draws < 4:
            raise ValueError(f"--keep-draws must keep at least 4 draws of each chain, got {args.keep_draws}")
    check_seed(args.seed)
    check_cluster(args.cluster)
    args.chain_ids = chain_subset(args, method, config)
    drop = args.drop_rate if args.drop_rate is not None else method.default_drop_rate
    if getattr(args, "features_of", None):  # a head on a person's own network's features
        arch = _imported_network(args, drop).arch
    elif args.dataset == "utkface":  # a head over face descriptors, eight age groups
        from core.engine.faces import descriptor_info
        from core.engine.faces.heads import face_arch

        arch = face_arch(descriptor_info(), args.model or "lenet", drop, args.hidden)
    elif image_folder(args.dataset):  # classes, channels, size and standardisation come from the images
        arch = ArchSpec(args.model or "lenet", num_classes=2, drop_rate=drop, hidden=args.hidden)
        if args.image_size is not None and not RESNET_MIN_SIZE <= args.image_size <= MAX_FOLDER_SIZE:
            raise ValueError(f"--image-size must lie between {RESNET_MIN_SIZE} and {MAX_FOLDER_SIZE} pixels, "
                             f"got {args.image_size}")
        if not 0.0 < args.test_fraction < 1.0:
            raise ValueError(f"--test-fraction must lie strictly between 0 and 1, got {args.test_fraction}")
    else:
        arch = ArchSpec(args.model or "lenet", num_classes=10, drop_rate=drop, hidden=args.hidden)
    start = None
    if args.start_from:
        start = load_posterior(args.start_from)
        start_weights(method, start)  # refuses a method or a file that cannot start a fit
        arch = start.arch
    # weights, gradients and Adam's two moments, for every chain or member trained at once
    copies = 4 * max(1, chains_of_run(config))
    check_model_fits(arch, copies, f"training {copies // 4} {arch.name} model(s) of {arch.parameter_count():,} weights",
                     device)
    check_output_file(args.out, "the posterior")
    return method, config, arch, start, device


def _imported_network(args: argparse.Namespace, drop: float) -> Any:
    """``--features-of``: the imported network's MAP posterior (its network kept in the user
    cache), checked: a head on a network's features, trained on a folder of images."""
    from core.engine.models import FEATURES

    imported = load_posterior(args.features_of)
    if imported.arch.name != FEATURES:
        raise ValueError(f"{args.features_of} is not a network imported with bayescope-cli import --network, so it "
                         "has no features to train a head on")
    if not image_folder(args.dataset):
        raise ValueError(f"--features-of trains a head on the features of your images: --dataset must be a folder of "
                         f"class folders or a CSV manifest, not {args.dataset}")
    if args.model not in (None, "softmax"):
        raise ValueError("--features-of trains a softmax-regression head on the network's features; leave out "
                         "--model")
    if args.start_from:  # Laplace and SWAG of a features tier start from its MAP head (zoo's {map})
        start = load_posterior(args.start_from)
        if start.arch.name != FEATURES or start.arch.network != imported.arch.network:
            raise ValueError(f"{args.start_from} is not a head on the features of the same network, so it cannot "
                             "start this one; leave out --start-from or give the tier's MAP file")
    imported.arch = replace(imported.arch, drop_rate=drop)
    return imported


def _read_features(args: argparse.Namespace, arch: ArchSpec) -> tuple[Dataset, Dataset, ArchSpec, dict]:
    """The folder's images as the imported network's features (computed once, then read from the
    cache), the two splits and the head's architecture at the folder's classes."""
    from core.engine.data.features import folder_features
    from core.engine.networks import NetworkInput, split_network_for

    imported = load_posterior(args.features_of)
    split = split_network_for(arch.network, arch.head, NetworkInput(arch.image_size, arch.channels, arch.mean, arch.std))
    bar = progress_bar(0, "network features")
    try:
        data = drain(folder_features(split, args.dataset, test_fraction=args.test_fraction), bar_callback(bar))
    finally:
        bar.close()
    for note in data.notes():
        say(f"note: {note}", sys.stderr)
    say(f"{len(data.class_names)} classes, {len(data.train)} training and {len(data.test)} test images as "
        f"{split.feature_dim} features of {split.path.name} at {split.head} "
        f"({'computed now' if data.computed else 'read from the cache'}: {data.cache})")
    arch = replace(arch, num_classes=len(data.class_names))
    return data.train.first(args.limit), data.test.first(args.limit), arch, imported.info.get("network", {})


def chain_subset(args: argparse.Namespace, method: Any, config: Any) -> tuple[int, ...] | None:
    """The chains ``--chains`` names, checked against the run (None: all of them)."""
    if args.chains is None:
        return None
    label = method_label(args.method)
    count = chains_of_run(config)
    if not method.runs_chains or count < 1:
        raise ValueError(f"--chains runs some of a sampler's chains or an ensemble's members; {label} has none")
    try:
        chains = tuple(int(c) for c in args.chains.split(","))
    except ValueError:
        raise ValueError(f"--chains takes chain numbers separated by commas (e.g. 0,1), got {args.chains!r}") from None
    if any(not 0 <= c < count for c in chains) or len(set(chains)) != len(chains):
        raise ValueError(f"--chains names different chains among the run's {count}, numbered 0 to {count - 1}; "
                         f"got {args.chains}")
    if args.dataset == "utkface":  # said before any part trains, not by join after all of them
        raise ValueError("--chains trains parts of a run that join measures on its test images, which join finds "
                         "for digits (IDX files) and your own images but not for face descriptors; train the "
                         "whole run at once")
    for flag, given in (("--cluster", args.cluster), ("--start-from", args.start_from),
                        ("--keep-draws", args.keep_draws)):
        if given is not None:
            why = "keep draws when joining the parts" if flag == "--keep-draws" else "run the whole run"
            raise ValueError(f"--chains cannot go with {flag}: {why}")
    return chains


def _read_image_folder(args: argparse.Namespace, method: Any, config: Any, arch: ArchSpec,
                       start: Any, device: Any) -> tuple[Dataset, Dataset, ArchSpec]:
    """A person's images as two splits, and the architecture that reads them: its classes,
    channels, side and input standardisation (from the training images) taken from them."""
    given = start.arch if start is not None else None
    bar = progress_bar(0, "reading images")

    def on_image(done: int, total: int) -> None:
        bar.total, bar.n = total, done
        if done == total or done % 256 == 0:
            bar.refresh()

    try:
        data = load_image_folder(args.dataset, given.image_size if given else args.image_size,
                                 given.channels if given else None, test_fraction=args.test_fraction,
                                 on_image=on_image)
    finally:
        bar.close()
    check_training_classes(data, args.dataset)
    refusal = streamed_refusal(data, args.method, device)
    if refusal:
        hint = "use --limit N or another method" if args.method == "hmc" else "use --device cpu or --limit N"
        raise ValueError(f"{args.dataset} is {refusal}; {hint}")
    for note in data.notes():
        say(f"note: {note}", sys.stderr)
    streamed = " (streamed from disk)" if data.train.source.get("streamed") else ""
    say(f"{data.train.source['layout']}: {len(data.train.class_names)} classes, {len(data.train)} training and "
        f"{len(data.test)} test images, {'colour' if data.channels == 3 else 'grey'} "
        f"{data.image_size}×{data.image_size}{streamed}")
    if given is not None:
        train, test = start_classes(start, args.start_from, data.train, data.test, args.dataset)
        return train.first(args.limit), test.first(args.limit), given
    arch = folder_architecture(data, args.model, arch.drop_rate, arch.hidden)
    copies = 4 * max(1, chains_of_run(config))
    check_model_fits(arch, copies, f"training {copies // 4} {arch.name} model(s) of {arch.parameter_count():,} weights",
                     device)
    return data.train.first(args.limit), data.test.first(args.limit), arch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="mnist",
                        help="known name, folder of IDX files, or your own images: a folder of class folders, "
                             "a CSV manifest (path,label) or CIFAR binary files (see docs/data.md); "
                             "utkface: an age-group head on face descriptors")
    parser.add_argument("--data-dir", help="folder holding the data set's IDX files (utkface: its archive or folder)")
    parser.add_argument("--download", action="store_true", help="download MNIST if not found")
    parser.add_argument("--image-size", type=int, metavar="N",
                        help="your own images: the side they are resized and cropped to (default 32 for colour, "
                             "28 for grey; a grey model of another side judges photos, not drawn digits)")
    parser.add_argument("--test-fraction", type=float, default=TEST_FRACTION,
                        help="your own images without train/ and test/ folders: the share of the images "
                             f"held out for testing, each by a hash of its name (default {TEST_FRACTION}; "
                             "recorded in the posterior, which evaluate and join split the folder by)")
    parser.add_argument("--model", choices=ARCHITECTURES,
                        help="network (default: lenet; resnet for a folder of colour images)")
    parser.add_argument("--method", choices=sorted(METHODS), default="mc_dropout")
    parser.add_argument("--drop-rate", type=float, help="dropout drop rate (default 0.5 for MC dropout, else 0)")
    parser.add_argument("--hidden", type=int, default=100, help="MLP hidden width (at least 1)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="method setting, e.g. --set epochs=10 --set lr=1e-3 (see 'methods')")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int,
                        help="use only the first N images of the training set and of the test set")
    parser.add_argument("--eval-samples", type=int, default=30,
                        help="samples for the test accuracy, measured after the posterior is saved")
    parser.add_argument("--out", required=True, help="where to write the posterior (.pt)")
    parser.add_argument("--name", help="a name for the posterior, shown first in its column's title "
                        "(e.g. 'long run'), so that two runs of one method can be told apart")
    parser.add_argument("--storage", choices=("float32", "float16"), default="float32",
                        help="precision of the saved weights (float16 halves the file)")
    parser.add_argument("--keep-draws", type=int, metavar="N",
                        help="a sampler: measure convergence on every draw of the run, then keep N evenly spaced "
                        "draws of each chain in the file (a smaller file; the record says how many it was measured on)")
    parser.add_argument("--cluster", metavar="ADDRESS", help=CLUSTER_HELP)
    parser.add_argument("--chains", metavar="LIST",
                        help="run only these of a sampler's chains or an ensemble's members, numbered from 0 "
                        "(e.g. 0,1): the part of the whole run they are, saved unmeasured; join the parts "
                        "with bayescope-cli join")
    parser.add_argument("--features-of", metavar="IMPORTED.pt",
                        help="train a softmax-regression head on the features of a network of your own, imported "
                        "with bayescope-cli import --network into IMPORTED.pt; --dataset is a folder of your images, "
                        "each passed through the network once (the features are kept in the user cache)")
    parser.add_argument("--start-from", metavar="MAP.pt",
                        help="laplace, swag: start from this saved MAP posterior instead of training one "
                        "(its architecture is used; --model, --hidden and --drop-rate are ignored)")
    add_device_argument(parser)


def run(args: argparse.Namespace) -> int:
    method, config, arch, start, device = _train_plan(args)
    network: dict = {}
    if getattr(args, "features_of", None):
        train, test, arch, network = _read_features(args, arch)
        changes = small_folder_settings(config, len(train), parse_settings(args.set))
        if changes:
            config = replace(config, **changes)
            say(f"note: {small_folder_words(changes, len(train))}", sys.stderr)
    elif args.dataset == "utkface":  # descriptors computed once (cached, resumable), fixed split
        from core.engine.data.utkface import load_utkface

        bar = progress_bar(0, "face descriptors")
        try:
            split = drain(load_utkface(args.data_dir, limit=args.limit), bar_callback(bar))
        finally:
            bar.close()
        train, test = split.train, split.test
    elif image_folder(args.dataset):
        train, test, arch = _read_image_folder(args, method, config, arch, start, device)
        # a small folder's defaults: enough steps a pass and in all (what --set names is kept)
        changes = small_folder_settings(config, len(train), parse_settings(args.set))
        if changes:
            config = replace(config, **changes)
            say(f"note: {small_folder_words(changes, len(train))}", sys.stderr)
    else:
        train = load_split(args.dataset, "train", root=args.data_dir, download_if_missing=args.download)
        test = load_split(args.dataset, "test", root=args.data_dir, download_if_missing=args.download)
        if start is not None:
            train, test = start_classes(start, args.start_from, train, test, args.dataset)
        train, test = train.first(args.limit), test.first(args.limit)
    if not train.source.get("official", True) and args.dataset in ("mnist",):
        say(f"note: the files in {train.source['folder']} are not the official MNIST files; "
            f"the data set is recorded as {train.name}", sys.stderr)
    say_where("Training", device)
    bar = progress_bar(0, f"{args.method} {arch.name}")
    try:
        source = None if start is None else {"file": str(Path(args.start_from).absolute()),
                                             "file_sha256": file_sha256(args.start_from)}
        with cluster_for(args.cluster) as cluster:
            if cluster is None:
                run = fit_posterior(method, config, arch, train, args.seed, start, source, device,
                                    chains=args.chain_ids)
            else:  # chains (members) as tasks; the samples are those of the run here
                run = fit_posterior_on(cluster, method, config, arch, train, args.seed, start, source,
                                       device=str(device or "cpu"))
            posterior = drain(run, bar_callback(bar))
    finally:
        bar.close()
    if len(train.class_names) == arch.num_classes:  # the outputs' names, in output order (info prints them)
        posterior.info["class_names"] = list(train.class_names)
    if args.name and args.name.strip():
        posterior.info["name"] = args.name.strip()
    if network:  # the network the head sits on: its checksum, head, input size, mean/std, class names
        posterior.info["network"] = network
    try:
        path = save_posterior(posterior, args.out, storage=args.storage)  # save first: never lose a fit
    except KeyboardInterrupt as exc:
        say("cancelled while saving: the posterior was not saved", sys.stderr)
        return cancel_code(exc)
    wall = posterior.info.get("train_seconds", 0.0)
    say(f"trained in {wall:.0f} s, saved to {path}")
    if args.chain_ids is not None:
        say(f"this is a part of the run: {plural(len(args.chain_ids), 'chain')} of {chains_of_run(config)} "
            f"({', '.join(map(str, args.chain_ids))}), not measured; when every chain has run, join the parts "
            "with bayescope-cli join PART... --out FILE")
        return 0
    return measure_and_save(posterior, path, test, args.seed, args.eval_samples, args.keep_draws, args.storage)


def stored_draw_figures(path: Path, test: Dataset, seed: int) -> dict[str, Any] | None:
    """R̂ and ESS of the draws the file at ``path`` stores, measured on the file as saved (as
    ``bayescope-cli diagnose`` reads it) and added to its diagnostics as ``"stored"``; None when
    they cannot be measured (the file keeps the run's figures alone)."""
    try:
        stored = drain(diagnose_progress(load_posterior(path), test, seed), lambda record: None)
    except (*USER_ERRORS, MemoryError):
        return None
    if stored.get("status") != "measured":
        return None
    figures = stored_figures(stored, seed)
    record = load_posterior(path).info["diagnostics"]
    add_to_info(path, {"diagnostics": {**record, "stored": figures}})
    return figures


def measure_and_save(posterior: Any, path: Path, test: Dataset, seed: int, eval_samples: int,
                     keep_draws: int | None, storage: str) -> int:
    """Measure a saved posterior's test accuracy and convergence, keep ``keep_draws`` draws of
    each chain, and save it again at ``path`` with them: ``train``'s last steps, and ``join``'s."""
    bar = progress_bar(0, "test accuracy")
    generator = torch.Generator().manual_seed(seed)
    try:
        try:
            acc = drain(accuracy_progress(posterior, test, eval_samples, generator), bar_callback(bar))
            used = samples_used(posterior, eval_samples)  # a MAP holds 1, a probit predicts 1
        finally:
            bar.close()  # before any message, so that it stays the last line
    except KeyboardInterrupt as exc:
        say(f"cancelled: the posterior is saved in {path}; its test accuracy was not measured", sys.stderr)
        return cancel_code(exc)
    except (*USER_ERRORS, MemoryError) as exc:
        say(f"error: the posterior is saved in {path}, but its test accuracy could not be measured: "
            f"{describe_error(exc)}", sys.stderr)
        return 2
    posterior.info.update(
        {"test_accuracy": acc, "eval_samples": used,
         "test_data": {"name": test.name, "images": len(test), **test.source}}
    )
    # Whether the chains agree, on the first test images (their labels unread): kept in the file.
    bar = progress_bar(0, "convergence")
    try:
        try:
            posterior.info["diagnostics"] = drain(diagnose_progress(posterior, test, seed), bar_callback(bar))
        finally:
            bar.close()
    except KeyboardInterrupt as exc:
        say(f"cancelled: the posterior is saved in {path}; its test accuracy ({acc * 100:.2f}%) and "
            "convergence were not recorded", sys.stderr)
        return cancel_code(exc)
    except (*USER_ERRORS, MemoryError) as exc:
        posterior.info["diagnostics"] = {"status": "not measured", "reason": describe_error(exc)}
    if keep_draws is not None and getattr(posterior, "num_draws", 0) > keep_draws:
        posterior = posterior.keeping(keep_draws)
        if posterior.info["diagnostics"].get("status") == "measured":
            posterior.info["diagnostics"]["kept_draws"] = keep_draws
    try:
        save_posterior(posterior, path, storage=storage)
    except (KeyboardInterrupt, *USER_ERRORS) as exc:
        reason = "cancelled" if isinstance(exc, KeyboardInterrupt) else describe_error(exc)
        say(f"error: the posterior is saved in {path} without its test accuracy "
            f"({acc * 100:.2f}%), which could not be added: {reason}", sys.stderr)
        return 2
    record = posterior.info["diagnostics"]
    if record.get("kept_draws") and record.get("status") == "measured":
        record["stored"] = stored_draw_figures(path, test, seed)  # what diagnose FILE reproduces
    say(f"test accuracy {acc * 100:.2f}% ({plural(used, 'sample')}, {len(test)} images), "
        f"recorded in {path}")
    chance = chance_words(acc, posterior.arch.num_classes, len(test))
    if chance:
        say(f"note: {chance}")
    say(f"convergence: {convergence_text(posterior.info['diagnostics'])}")
    return 0
