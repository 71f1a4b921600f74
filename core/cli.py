"""``bayescope-cli``: train posteriors, predict images, evaluate and reproduce, headless.

Every failure a user can cause (missing data, a bad image, a posterior from another
version, an out-of-range number, a full disk) ends with a one-line ``error: ...`` on stderr
and exit code 2. A cancelled run (Ctrl-C) exits with 130, SIGTERM with 143; both leave no
partial file and say what, if anything, was written. ``train`` checks every argument and
the output path before training, saves the posterior first and measures its test accuracy
afterwards, so a failure or a cancel during that measurement never loses the training.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

import torch

from core.data.datasets import DatasetContentError, DatasetNotFoundError, load_split
from core.data.idx import IdxFormatError
from core.data.preprocess import EmptyDrawingError, ImageLoadError, image_to_input, load_image
from core.faces.descriptor import DescriptorUnavailableError
from core.inference import METHODS, get_method
from core.inference.base import ProgressRecord, accuracy_progress
from core.io import (
    NotSavedError,
    PosteriorFileError,
    check_output_file,
    load_posterior,
    save_posterior,
)
from core.memory import MemoryEstimateError
from core.models import ARCHITECTURES, ArchSpec, check_model_fits
from core.resources import default_posterior_path
from core.runner import Terminated, drain, fit_posterior, signals_raise
from core.uncertainty import summarise

USER_ERRORS = (
    DatasetNotFoundError,
    DatasetContentError,
    IdxFormatError,
    ImageLoadError,
    EmptyDrawingError,
    PosteriorFileError,
    MemoryEstimateError,
    NotSavedError,
    FloatingPointError,
    ValueError,
    FileNotFoundError,
    PermissionError,
    OSError,
    DescriptorUnavailableError,
)
#: Seeds index torch generators, which take 64-bit values.
MAX_SEED = 2**63 - 1


def _settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"setting {pair!r} is not of the form NAME=VALUE")
        out[key] = value
    return out


def _progress_bar(total_hint: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total_hint or None, desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr)


def _check_seed(seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"--seed must be a whole number from 0 to 2^63 - 1, got {seed}")


def _train_plan(args: argparse.Namespace) -> tuple[object, object, ArchSpec]:
    """Check every ``train`` argument (and the output path) before any data is read."""
    method = get_method(args.method)
    config = method.parse_settings(_settings(args.set))
    if args.hidden < 1:
        raise ValueError(f"--hidden must be at least 1 unit, got {args.hidden}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1 image, got {args.limit}")
    if args.eval_samples < 1:
        raise ValueError(f"--eval-samples must be at least 1, got {args.eval_samples}")
    if args.drop_rate is not None and not 0.0 <= args.drop_rate < 1.0:
        raise ValueError(f"--drop-rate must lie in [0, 1), got {args.drop_rate}")
    _check_seed(args.seed)
    drop = args.drop_rate if args.drop_rate is not None else (0.5 if method.needs_dropout else 0.0)
    if args.dataset == "utkface":  # a head over face descriptors, eight age groups
        from core.faces import descriptor_info
        from core.faces.heads import face_arch

        arch = face_arch(descriptor_info(), args.model, drop, args.hidden)
    else:
        arch = ArchSpec(args.model, num_classes=10, drop_rate=drop, hidden=args.hidden)
    # weights, gradients and Adam's two moments, for every chain or member trained at once
    copies = 4 * max(int(getattr(config, "num_chains", 1)), int(getattr(config, "num_members", 1)))
    check_model_fits(arch, copies, f"training {copies // 4} {arch.name} model(s) of {arch.parameter_count():,} weights")
    check_output_file(args.out, "the posterior")
    return method, config, arch


def _bar_callback(bar):
    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.n = record.step
        bar.set_postfix({k: f"{v:.4g}" for k, v in record.values.items()}, refresh=False)
        bar.refresh()

    return on_progress


def cmd_train(args: argparse.Namespace) -> int:
    method, config, arch = _train_plan(args)
    if args.dataset == "utkface":  # descriptors computed once (cached, resumable), fixed split
        from core.data.utkface import load_utkface

        bar = _progress_bar(0, "face descriptors")
        try:
            split = drain(load_utkface(args.data_dir, limit=args.limit), _bar_callback(bar))
        finally:
            bar.close()
        train, test = split.train, split.test
    else:
        train = load_split(args.dataset, "train", root=args.data_dir, download_if_missing=args.download)
        test = load_split(args.dataset, "test", root=args.data_dir, download_if_missing=args.download)
        train, test = train.first(args.limit), test.first(args.limit)
    if not train.source.get("official", True) and args.dataset in ("mnist",):
        print(f"note: the files in {train.source['folder']} are not the official MNIST files; "
              f"the data set is recorded as {train.name}", file=sys.stderr)
    bar = _progress_bar(0, f"{args.method} {args.model}")
    try:
        posterior = drain(fit_posterior(method, config, arch, train, args.seed), _bar_callback(bar))
    finally:
        bar.close()
    try:
        path = save_posterior(posterior, args.out, storage=args.storage)  # save first: never lose a fit
    except KeyboardInterrupt as exc:
        print("cancelled while saving: the posterior was not saved", file=sys.stderr)
        return _cancel_code(exc)
    wall = posterior.info.get("train_seconds", 0.0)
    print(f"trained in {wall:.0f} s, saved to {path}")
    bar = _progress_bar(0, "test accuracy")
    generator = torch.Generator().manual_seed(args.seed)
    try:
        try:
            acc = drain(accuracy_progress(posterior, test, args.eval_samples, generator), _bar_callback(bar))
        finally:
            bar.close()  # before any message, so that it stays the last line
    except KeyboardInterrupt as exc:
        print(f"cancelled: the posterior is saved in {path}; its test accuracy was not measured", file=sys.stderr)
        return _cancel_code(exc)
    except (*USER_ERRORS, MemoryError) as exc:
        print(f"error: the posterior is saved in {path}, but its test accuracy could not be measured: "
              f"{_describe(exc)}", file=sys.stderr)
        return 2
    posterior.info.update(
        {"test_accuracy": acc, "eval_samples": args.eval_samples,
         "test_data": {"name": test.name, "images": len(test), **test.source}}
    )
    try:
        save_posterior(posterior, path, storage=args.storage)
    except (KeyboardInterrupt, *USER_ERRORS) as exc:
        reason = "cancelled" if isinstance(exc, KeyboardInterrupt) else _describe(exc)
        print(f"error: the posterior is saved in {path} without its test accuracy "
              f"({acc * 100:.2f}%), which could not be added: {reason}", file=sys.stderr)
        return 2
    print(f"test accuracy {acc * 100:.2f}% ({args.eval_samples} samples, {len(test)} images), "
          f"recorded in {path}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    if args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    if not 0.0 < args.level < 1.0:
        raise ValueError(f"--level must lie strictly between 0 and 1, got {args.level}")
    _check_seed(args.seed)
    if args.task == "age":
        from core.faces.cli import run_predict

        return run_predict(args)
    path = Path(args.posterior) if args.posterior else default_posterior_path()
    posterior = load_posterior(path)
    if posterior.arch.input_dim:
        raise ValueError(f"{path} predicts age groups from face descriptors, not digits; use --task age")
    posterior.check_prediction(args.samples, batch_size=1)  # refuses with the memory estimate
    image = load_image(args.image)
    try:
        x = image_to_input(image)
    except EmptyDrawingError:
        raise EmptyDrawingError(
            f"{args.image}: the image is empty (no ink stands out from its background); "
            "choose an image of a digit"
        ) from None
    generator = torch.Generator().manual_seed(args.seed)
    samples = posterior.predict_proba(x, num_samples=args.samples, generator=generator)[:, 0]
    summary = summarise(samples, level=args.level)
    names = [str(k) for k in range(posterior.num_classes)]
    result = {
        "image": str(args.image),
        "posterior": str(path),
        "method": posterior.method,
        "predicted_class": summary.predicted_class,
        "num_samples": summary.num_samples,
        "credible_level": args.level,
        "classes": summary.class_records(names),
        "uncertainty": summary.uncertainty_record(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{posterior.describe()}  ({summary.num_samples} samples)")
    print(f"predicted class: {names[summary.predicted_class]}")
    print(f"{'class':>5}  {'mean':>6}  {int(args.level * 100)}% interval")
    for row in result["classes"]:
        print(f"{row['class']:>5}  {row['mean']:6.3f}  [{row['lower']:.3f}, {row['upper']:.3f}]")
    u = result["uncertainty"]
    print(f"uncertainty (nats): total {u['total']:.4f} = aleatoric {u['aleatoric']:.4f}"
          f" + epistemic {u['epistemic']:.4f}")
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    for name, method in sorted(METHODS.items()):
        settings = ", ".join(f"{f.name}={f.default}" for f in fields(method.config_cls))
        print(f"{name:12s} {method.summary}\n{'':12s} settings: {settings}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from core.evaluate import run

    return run(args)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from core.reproduce import load_all

    return load_all()[args.target].run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bayescope-cli", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="fit a posterior on a data set and save it")
    train.add_argument("--dataset", default="mnist",
                       help="known name or folder of IDX files; utkface: an age-group head on face descriptors")
    train.add_argument("--data-dir", help="folder holding the data set's IDX files (utkface: its archive or folder)")
    train.add_argument("--download", action="store_true", help="download MNIST if not found")
    train.add_argument("--model", choices=ARCHITECTURES, default="lenet")
    train.add_argument("--method", choices=sorted(METHODS), default="mc_dropout")
    train.add_argument("--drop-rate", type=float, help="dropout drop rate (default 0.5 for MC dropout, else 0)")
    train.add_argument("--hidden", type=int, default=100, help="MLP hidden width (at least 1)")
    train.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="method setting, e.g. --set epochs=10 --set lr=1e-3 (see 'methods')")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--limit", type=int,
                       help="use only the first N images of the training set and of the test set")
    train.add_argument("--eval-samples", type=int, default=30,
                       help="samples for the test accuracy, measured after the posterior is saved")
    train.add_argument("--out", required=True, help="where to write the posterior (.pt)")
    train.add_argument("--storage", choices=("float32", "float16"), default="float32",
                       help="precision of the saved weights (float16 halves the file)")
    train.set_defaults(func=cmd_train)

    predict = sub.add_parser("predict", help="classify an image with uncertainty")
    predict.add_argument("image", help="PNG/JPEG of a digit (any size; dark-on-light is inverted), or a photo with --task age")
    predict.add_argument("--posterior", help="posterior file (default: the bundled MC-dropout LeNet; "
                         "with --task age the bundled SGHMC face head)")
    predict.add_argument("--samples", type=int, default=100, help="posterior samples S (at least 1)")
    predict.add_argument("--level", type=float, default=0.9, help="credible interval level")
    predict.add_argument("--seed", type=int, default=0)
    predict.add_argument("--json", action="store_true", help="print one JSON object")
    predict.add_argument("--task", choices=("digit", "age"), default="digit",
                         help="digit: classify a digit; age: find the face in a photo, predict its age group")
    predict.add_argument("--face", type=int, default=1, help="with --task age: which face, 1 = the largest")
    predict.set_defaults(func=cmd_predict)

    methods = sub.add_parser("methods", help="list inference methods and their settings")
    methods.set_defaults(func=cmd_methods)

    from core.evaluate import add_arguments as add_evaluate_arguments

    evaluate = sub.add_parser("evaluate", help="evaluate posteriors on a data set: metrics, OOD, sweep")
    add_evaluate_arguments(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)

    from core.compare import add_arguments as add_compare_arguments
    from core.compare import run as run_compare

    compare = sub.add_parser("compare", help="judge one image with several posteriors; write a report folder")
    add_compare_arguments(compare)
    compare.set_defaults(func=run_compare)

    from core.reproduce import load_all

    reproduce = sub.add_parser("reproduce", help="reproduce a paper's experiment")
    targets = reproduce.add_subparsers(dest="target", required=True)
    for name, rep in load_all().items():
        p = targets.add_parser(name, help=rep.summary)
        rep.add_arguments(p)
    reproduce.set_defaults(func=cmd_reproduce)
    return parser


def _cancel_code(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 128 + the signal's number for SIGTERM (143) or SIGHUP."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def _describe(exc: BaseException) -> str:
    """One sentence for an error: its own words, or the system's reason and the file."""
    if isinstance(exc, MemoryError):
        return "the computer ran out of memory; use fewer samples or a smaller data set"
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, NotSavedError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror[0].lower()}{exc.strerror[1:]}"
    return str(exc) or "the operation failed"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with signals_raise():  # SIGTERM unwinds like Ctrl-C: temporary files are removed
            return args.func(args)
    except KeyboardInterrupt as exc:
        stopped = "terminated" if isinstance(exc, Terminated) else "cancelled"
        print(f"{stopped}: nothing was written", file=sys.stderr)
        return _cancel_code(exc)
    except (*USER_ERRORS, MemoryError) as exc:
        print(f"error: {_describe(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
