"""``bayescope-cli train``: fit a posterior on a data set and save it.

``train`` checks every argument and the output path before training, saves the posterior
first and measures its test accuracy afterwards, so a failure or a cancel during that
measurement never loses the training.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from core.commands.console import (
    CLUSTER_HELP,
    USER_ERRORS,
    bar_callback,
    cancel_code,
    check_cluster,
    check_seed,
    cluster_for,
    describe_error,
    parse_settings,
    progress_bar,
    say,
)
from core.engine.data.datasets import load_split
from core.engine.files import check_output_file, file_sha256
from core.engine.inference import METHODS, get_method
from core.engine.inference.base import accuracy_progress
from core.engine.models import ARCHITECTURES, ArchSpec, check_model_fits
from core.engine.naming import plural, samples_used
from core.engine.runner import drain, fit_posterior, fit_posterior_on, start_weights
from core.engine.store import load_posterior, save_posterior


def _train_plan(args: argparse.Namespace) -> tuple[object, object, ArchSpec, object]:
    """Check every ``train`` argument (and the output path) before any data is read."""
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
    check_seed(args.seed)
    check_cluster(args.cluster)
    drop = args.drop_rate if args.drop_rate is not None else (0.5 if method.needs_dropout else 0.0)
    if args.dataset == "utkface":  # a head over face descriptors, eight age groups
        from core.engine.faces import descriptor_info
        from core.engine.faces.heads import face_arch

        arch = face_arch(descriptor_info(), args.model, drop, args.hidden)
    else:
        arch = ArchSpec(args.model, num_classes=10, drop_rate=drop, hidden=args.hidden)
    start = None
    if args.start_from:
        start = load_posterior(args.start_from)
        start_weights(method, start)  # refuses a method or a file that cannot start a fit
        arch = start.arch
    # weights, gradients and Adam's two moments, for every chain or member trained at once
    copies = 4 * max(int(getattr(config, "num_chains", 1)), int(getattr(config, "num_members", 1)))
    check_model_fits(arch, copies, f"training {copies // 4} {arch.name} model(s) of {arch.parameter_count():,} weights")
    check_output_file(args.out, "the posterior")
    return method, config, arch, start


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="mnist",
                        help="known name or folder of IDX files; utkface: an age-group head on face descriptors")
    parser.add_argument("--data-dir", help="folder holding the data set's IDX files (utkface: its archive or folder)")
    parser.add_argument("--download", action="store_true", help="download MNIST if not found")
    parser.add_argument("--model", choices=ARCHITECTURES, default="lenet")
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
    parser.add_argument("--cluster", metavar="ADDRESS", help=CLUSTER_HELP)
    parser.add_argument("--start-from", metavar="MAP.pt",
                        help="laplace, swag: start from this saved MAP posterior instead of training one "
                        "(its architecture is used; --model, --hidden and --drop-rate are ignored)")


def run(args: argparse.Namespace) -> int:
    method, config, arch, start = _train_plan(args)
    if args.dataset == "utkface":  # descriptors computed once (cached, resumable), fixed split
        from core.engine.data.utkface import load_utkface

        bar = progress_bar(0, "face descriptors")
        try:
            split = drain(load_utkface(args.data_dir, limit=args.limit), bar_callback(bar))
        finally:
            bar.close()
        train, test = split.train, split.test
    else:
        train = load_split(args.dataset, "train", root=args.data_dir, download_if_missing=args.download)
        test = load_split(args.dataset, "test", root=args.data_dir, download_if_missing=args.download)
        train, test = train.first(args.limit), test.first(args.limit)
    if not train.source.get("official", True) and args.dataset in ("mnist",):
        say(f"note: the files in {train.source['folder']} are not the official MNIST files; "
            f"the data set is recorded as {train.name}", sys.stderr)
    bar = progress_bar(0, f"{args.method} {args.model}")
    try:
        source = None if start is None else {"file": str(Path(args.start_from).absolute()),
                                             "file_sha256": file_sha256(args.start_from)}
        with cluster_for(args.cluster) as cluster:
            if cluster is None:
                run = fit_posterior(method, config, arch, train, args.seed, start, source)
            else:  # chains (members) as tasks; the samples are those of the run here
                run = fit_posterior_on(cluster, method, config, arch, train, args.seed, start, source)
            posterior = drain(run, bar_callback(bar))
    finally:
        bar.close()
    if args.name and args.name.strip():
        posterior.info["name"] = args.name.strip()
    try:
        path = save_posterior(posterior, args.out, storage=args.storage)  # save first: never lose a fit
    except KeyboardInterrupt as exc:
        say("cancelled while saving: the posterior was not saved", sys.stderr)
        return cancel_code(exc)
    wall = posterior.info.get("train_seconds", 0.0)
    say(f"trained in {wall:.0f} s, saved to {path}")
    bar = progress_bar(0, "test accuracy")
    generator = torch.Generator().manual_seed(args.seed)
    try:
        try:
            acc = drain(accuracy_progress(posterior, test, args.eval_samples, generator), bar_callback(bar))
            used = samples_used(posterior, args.eval_samples)  # a MAP holds 1, a probit predicts 1
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
    try:
        save_posterior(posterior, path, storage=args.storage)
    except (KeyboardInterrupt, *USER_ERRORS) as exc:
        reason = "cancelled" if isinstance(exc, KeyboardInterrupt) else describe_error(exc)
        say(f"error: the posterior is saved in {path} without its test accuracy "
            f"({acc * 100:.2f}%), which could not be added: {reason}", sys.stderr)
        return 2
    say(f"test accuracy {acc * 100:.2f}% ({plural(used, 'sample')}, {len(test)} images), "
        f"recorded in {path}")
    return 0
