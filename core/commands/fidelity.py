"""``bayescope-cli fidelity``: how far each posterior's predictive lies from a reference (HMC).

Per posterior, on the test set: mean KL(reference ‖ posterior) of the predictive
distributions, mean total variation and top-class agreement (Izmailov et al. 2021; the
definitions are in :mod:`core.analysis.fidelity`).
"""

from __future__ import annotations

import argparse
import json
import sys

from core.analysis.evaluation import FACE_TEST_SET, load_posteriors, resolve_dataset
from core.analysis.fidelity import fidelity_to_reference
from core.commands.console import check_seed, printable, say
from core.engine.files import file_sha256
from core.engine.inference.base import ProgressRecord
from core.engine.store import load_posterior


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayescope-cli fidelity``."""
    parser.add_argument("--reference", required=True, metavar="HMC.pt",
                        help="the reference posterior (HMC, the closest to exact there is)")
    parser.add_argument("--posterior", nargs="+", required=True, metavar="P",
                        help="posterior file(s) to measure against the reference")
    parser.add_argument("--dataset", default="mnist-test",
                        help="known name (mnist-test, mnist-train, notmnist) or a folder of IDX files")
    parser.add_argument("--data-dir", help="folder holding the known data sets (as <dir>/mnist, ...)")
    parser.add_argument("--download", action="store_true", help="download MNIST into the user cache if not found")
    parser.add_argument("--samples", type=int, help="posterior samples S (default: each posterior's own)")
    parser.add_argument("--limit", type=int, help="use only the first N images")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    """Carry out ``bayescope-cli fidelity``; print the table (or JSON); return the exit code."""
    from tqdm import tqdm

    from core.engine.runner import drain

    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1 image, got {args.limit}")
    if args.dataset == FACE_TEST_SET:
        raise ValueError(f"fidelity reads digit images; {FACE_TEST_SET} is not supported here yet")
    check_seed(args.seed)
    reference = load_posterior(args.reference)
    posteriors = load_posteriors(args.posterior)
    data = resolve_dataset(args.dataset, args.data_dir, download=args.download).first(args.limit)
    bar = tqdm(total=None, desc="fidelity", unit="batch", dynamic_ncols=True, file=sys.stderr,
               disable=args.json or None)

    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.set_description(printable(record.phase), refresh=False)
        bar.update(record.step - bar.n)

    name = f"reference: {reference.method}"
    try:
        report = drain(fidelity_to_reference((name, reference), posteriors, data,
                                             num_samples=args.samples, seed=args.seed), on_progress)
    finally:
        bar.close()
    if args.json:
        print(json.dumps({
            "reference": {"file": str(args.reference), "file_sha256": file_sha256(args.reference),
                          "method": reference.method, "is_hmc": reference.method == "hmc",
                          "samples": report.num_samples[name],
                          "accuracy": report.accuracy[name]},
            "dataset": report.dataset, "num_inputs": report.num_inputs, "seed": args.seed,
            "posteriors": [{**row, "file": str(path)} for row, path in zip(report.rows(), args.posterior, strict=True)],
        }, indent=2))
        return 0
    say(f"{report.dataset}: {report.num_inputs} images; reference {args.reference} "
        f"({reference.method}, {report.num_samples[name]} draws, accuracy {100 * report.accuracy[name]:.2f}%)")
    if reference.method != "hmc":
        say(f"note: the reference is {reference.method}, not HMC: these are distances between two "
            "approximations, not from the exact posterior")
    width = max([len("posterior"), *(len(n) for n in report.results)])
    say(f"{'posterior':{width}s} {'S':>5s} {'acc %':>7s} {'KL(ref‖it)':>11s} {'total var.':>10s} {'agree %':>8s}")
    for row in report.rows():
        say(f"{row['posterior']:{width}s} {row['samples']:5d} {100 * row['accuracy']:7.2f} "
            f"{row['kl']:11.4f} {row['total_variation']:10.4f} {100 * row['agreement']:8.2f}")
    say("KL: the information lost when the posterior's predictive stands in for the reference's "
        "(nats, 0 = the same); total var.: the most probability they disagree on, averaged over "
        "images (0 = the same, 1 = disjoint); agree: images where both predict the same class.")
    return 0
