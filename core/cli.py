"""``bayescope-cli``: train posteriors, predict images, evaluate and reproduce, headless.

Every failure a user can cause (missing data, a bad image, a posterior from another
version) ends with a one-line ``error: ...`` on stderr and exit code 2; a cancelled run
(Ctrl-C) exits with 130 and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path

import torch

from core.data.datasets import DatasetNotFoundError, load_split
from core.data.idx import IdxFormatError
from core.data.preprocess import EmptyDrawingError, ImageLoadError, image_to_input, load_image
from core.inference import METHODS, get_method
from core.inference.base import ProgressRecord, accuracy
from core.io import PosteriorFileError, load_posterior, save_posterior
from core.models import ARCHITECTURES, ArchSpec
from core.resources import default_posterior_path
from core.runner import drain
from core.uncertainty import summarise

USER_ERRORS = (
    DatasetNotFoundError,
    IdxFormatError,
    ImageLoadError,
    EmptyDrawingError,
    PosteriorFileError,
    FloatingPointError,
    ValueError,
    FileNotFoundError,
    PermissionError,
    OSError,
)


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


def cmd_train(args: argparse.Namespace) -> int:
    method = get_method(args.method)
    config = method.parse_settings(_settings(args.set))
    drop = args.drop_rate if args.drop_rate is not None else (0.5 if method.needs_dropout else 0.0)
    arch = ArchSpec(args.model, num_classes=10, drop_rate=drop, hidden=args.hidden)
    train = load_split(args.dataset, "train", root=args.data_dir, download_if_missing=args.download)
    test = load_split(args.dataset, "test", root=args.data_dir, download_if_missing=args.download)
    if args.limit:
        train = train.subset(slice(0, args.limit))
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    bar = _progress_bar(0, f"{args.method} {args.model}")

    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.n = record.step
        bar.set_postfix({k: f"{v:.4g}" for k, v in record.values.items()}, refresh=False)
        bar.refresh()

    try:
        posterior = drain(method.fit(config, arch, train, args.seed), on_progress)
    finally:
        bar.close()
    wall = time.perf_counter() - start
    acc = accuracy(posterior, test, num_samples=args.eval_samples)
    posterior.info.update(
        {"test_accuracy": acc, "train_seconds": round(wall, 1), "eval_samples": args.eval_samples}
    )
    path = save_posterior(posterior, args.out, storage=args.storage)
    print(f"test accuracy {acc * 100:.2f}% ({args.eval_samples} samples), "
          f"trained in {wall:.0f} s, saved to {path}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    path = Path(args.posterior) if args.posterior else default_posterior_path()
    posterior = load_posterior(path)
    image = load_image(args.image)
    x = image_to_input(image)
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
        "classes": [
            {"class": names[k], "mean": float(summary.mean[k]),
             "lower": float(summary.lower[k]), "upper": float(summary.upper[k])}
            for k in range(len(names))
        ],
        "uncertainty": {"total": summary.total, "aleatoric": summary.aleatoric,
                        "epistemic": summary.epistemic},
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
    train.add_argument("--dataset", default="mnist", help="known name or folder of IDX files")
    train.add_argument("--data-dir", help="folder holding the data set's IDX files")
    train.add_argument("--download", action="store_true", help="download MNIST if not found")
    train.add_argument("--model", choices=ARCHITECTURES, default="lenet")
    train.add_argument("--method", choices=sorted(METHODS), default="mc_dropout")
    train.add_argument("--drop-rate", type=float, help="dropout drop rate (default 0.5 for MC dropout, else 0)")
    train.add_argument("--hidden", type=int, default=100, help="MLP hidden width")
    train.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="method setting, e.g. --set epochs=10 --set lr=1e-3 (see 'methods')")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--limit", type=int, help="use only the first N training images")
    train.add_argument("--eval-samples", type=int, default=30, help="samples for the test accuracy")
    train.add_argument("--out", required=True, help="where to write the posterior (.pt)")
    train.add_argument("--storage", choices=("float32", "float16"), default="float32",
                       help="precision of the saved weights (float16 halves the file)")
    train.set_defaults(func=cmd_train)

    predict = sub.add_parser("predict", help="classify an image with uncertainty")
    predict.add_argument("image", help="PNG/JPEG of a digit (any size; dark-on-light is inverted)")
    predict.add_argument("--posterior", help="posterior file (default: the bundled MC-dropout LeNet)")
    predict.add_argument("--samples", type=int, default=100, help="posterior samples S")
    predict.add_argument("--level", type=float, default=0.9, help="credible interval level")
    predict.add_argument("--seed", type=int, default=0)
    predict.add_argument("--json", action="store_true", help="print one JSON object")
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("cancelled: nothing was written", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
