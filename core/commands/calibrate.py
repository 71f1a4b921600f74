"""``bayescope-cli calibrate``: calibrate each posterior's conformal sets on its held-out
calibration images and write the calibration beside the posterior file.

The calibration images are half of the posterior's test set, chosen by a hash of each image's
pixels (:mod:`core.analysis.conformal_run`); ``evaluate`` measures coverage on the other half.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.analysis.conformal import CONFORMAL_SCORES, DEFAULT_LEVEL, coverage_bounds
from core.analysis.conformal_run import calibrate_file
from core.analysis.evaluation import load_posteriors, resolve_dataset
from core.commands.console import add_device_argument, chosen_device, printable, say
from core.engine.calibration_file import sidecar_path
from core.engine.inference.base import ProgressRecord


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayescope-cli calibrate``."""
    parser.add_argument("--posterior", nargs="+", required=True, metavar="P", help="posterior file(s)")
    parser.add_argument("--dataset", default="mnist-test",
                        help="the posteriors' test set, half of which calibrates (default mnist-test; a "
                             "folder of your images is read as the posteriors split it)")
    parser.add_argument("--data-dir", help="folder holding the known data sets (as <dir>/mnist)")
    parser.add_argument("--samples", type=int, help="posterior samples S (default: each posterior's own)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the predictive's draws")
    add_device_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Carry out ``bayescope-cli calibrate``; return the exit code."""
    from tqdm import tqdm

    from core.engine.runner import drain

    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    if not 0 <= args.seed < 2**63:
        raise ValueError(f"--seed must be a whole number from 0 to 2^63 - 1, got {args.seed}")
    device = chosen_device(args)
    posteriors = load_posteriors(args.posterior, device)
    arch = next(iter(posteriors.values())).arch
    shape = {"image_size": arch.image_size, "channels": arch.channels}
    trained_on = {name: p.info.get("training_data") for name, p in posteriors.items()}
    data = resolve_dataset(args.dataset, args.data_dir, trained_on=trained_on, **shape)
    for (name, posterior), path in zip(posteriors.items(), args.posterior, strict=True):
        bar = tqdm(total=None, desc=f"{name} · calibrating", unit="step", dynamic_ncols=True, file=sys.stderr)

        def on_progress(record: ProgressRecord, bar: tqdm = bar) -> None:
            bar.total = record.total
            bar.set_description(printable(record.phase or "calibrating"), refresh=False)
            bar.update(record.step - bar.n)

        try:
            calibration, record, written = drain(calibrate_file(path, posterior, data, args.data_dir,
                                                                num_samples=args.samples, seed=args.seed),
                                                 on_progress)
        finally:
            bar.close()
        identity = record["identity"]
        low, high = coverage_bounds(DEFAULT_LEVEL, calibration.n)
        quantiles = ", ".join(f"{s} q̂ = {calibration.quantile(DEFAULT_LEVEL, s):.4f}" for s in CONFORMAL_SCORES)
        say(f"{name}: {calibration.n:,} of {identity['of_images']:,} images of {data.name} calibrate "
            f"({identity['left_out_as_training_images']} left out as training images); at 90 %: {quantiles}; "
            f"coverage guaranteed in [{low:.3f}, {high:.4f}]")
        say(f"  wrote {Path(written)}" if Path(written) == sidecar_path(path) else f"  wrote {written}")
    return 0
