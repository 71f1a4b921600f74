"""The corruption half of ``bayescope-cli evaluate``: ``--corruption NAME --severities 0,1,...``
evaluates every posterior on the data set (and the OOD set) corrupted at each severity, and
``--sweep-image IMAGE`` sweeps one image's corruption, as the window's Sweep tab does.

Its options are added by :func:`add_arguments` and checked by :func:`check_arguments`; the
command calls :func:`run_corruption` once the posteriors and sets are loaded.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from core.analysis.corruption import DATASET_SEVERITIES, corruption_evaluation, corruption_sweep
from core.analysis.evaluation import resolve_image
from core.commands.console import printable, say
from core.engine.data.corruptions import CORRUPTIONS, MAX_SEVERITY
from core.engine.inference.base import Dataset, Posterior, ProgressRecord


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The corruption options of ``evaluate``."""
    parser.add_argument("--corruption", choices=tuple(CORRUPTIONS),
                        help="evaluate on the data set (and OOD set) corrupted at each of --severities: "
                             "accuracy and OOD AUROC against severity for each posterior (an MNIST-C-like "
                             "evaluation computed here); written with --out")
    parser.add_argument("--severities", default=",".join(f"{s:g}" for s in DATASET_SEVERITIES),
                        help="corruption severities, 0 (clean) to 5, separated by commas (default 0,1,2,3,4,5)")
    parser.add_argument("--sweep-image", metavar="IMAGE",
                        help="with --corruption: sweep one image file or SET:INDEX (e.g. mnist-test:0) at "
                             "severities 0–5 (occlusion: move a patch of --patch-severity across it)")
    parser.add_argument("--patch-severity", type=float, default=3.0,
                        help="the occlusion sweep's patch size as a severity, above 0 up to 5 (default 3)")


def parse_severities(text: str) -> tuple[float, ...]:
    """``"0,1,2.5"`` → (0.0, 1.0, 2.5); a ``ValueError`` sentence for anything else."""
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) and 0.0 <= v <= MAX_SEVERITY for v in values):
        raise ValueError(f"--severities must be numbers from 0 to {MAX_SEVERITY:g} separated by commas, "
                         f"got {text!r}")
    return values


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse combinations that mean nothing, before anything is loaded (one sentence each)."""
    corruption = getattr(args, "corruption", None)
    if getattr(args, "sweep_image", None) and not corruption:
        raise ValueError("--sweep-image sweeps a corruption: name it with --corruption (e.g. --corruption noise)")
    if not corruption:
        return
    parse_severities(args.severities)
    if not 0.0 < args.patch_severity <= MAX_SEVERITY:
        raise ValueError(f"--patch-severity must lie above 0 and at most {MAX_SEVERITY:g}, got {args.patch_severity:g}")
    if not args.out or args.report:
        raise ValueError("a corruption evaluation is written as a folder: give --out FOLDER (without --report)")
    if args.rotate:
        raise ValueError("--rotate and --corruption are separate runs: sweep the rotation without --corruption, "
                         "or a corruption of one image with --sweep-image")
    if getattr(args, "cluster", None):
        raise ValueError("a corruption evaluation runs on this machine: leave out --cluster")


def run_corruption(
    args: argparse.Namespace,
    posteriors: dict[str, Posterior],
    data: Dataset,
    ood: Dataset | None,
    meta: dict[str, Any],
) -> int:
    """Evaluate at every severity (and sweep the image), print the table, write ``--out``."""
    from tqdm import tqdm

    from core.engine.runner import drain
    from core.outputs.corruption import corruption_lines, write_corruption

    severities = parse_severities(args.severities)
    sweeps = {}
    if args.sweep_image:
        label, image = resolve_image(args.sweep_image, args.data_dir)
        import torch

        for name, posterior in posteriors.items():
            sweeps[name] = corruption_sweep(posterior, image, args.corruption, args.patch_severity,
                                            args.samples, torch.Generator().manual_seed(args.seed), args.level,
                                            seed=args.seed)
        meta = {**meta, "sweep_image": label}
    bar = tqdm(total=None, desc="evaluate", unit="image", dynamic_ncols=True, file=sys.stderr)

    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.set_description(printable(record.phase), refresh=False)
        bar.update(record.step - bar.n)

    try:
        result = drain(corruption_evaluation(posteriors, data, ood, args.corruption, severities,
                                             num_samples=args.samples, seed=args.seed), on_progress)
    finally:
        bar.close()
    k = next(iter(posteriors.values())).num_classes
    class_names = tuple(data.class_names[:k]) + tuple(str(j) for j in range(len(data.class_names), k))
    written = write_corruption(result, args.out, args.format, meta, sweeps, class_names)
    for line in corruption_lines(result):
        say(line)
    if sweeps:
        say(f"swept {meta['sweep_image']} ({args.corruption}) for every posterior")
    say(f"wrote {len(written)} files to {args.out}")
    return 0
