"""``bayescope-cli fidelity``: how far each posterior's predictive lies from a reference (HMC).

Per posterior, on the test set: mean KL(reference ‖ posterior) of the predictive
distributions, mean total variation and top-class agreement (Izmailov et al. 2021; the
definitions are in :mod:`core.analysis.fidelity`), and the share of the reference's mass inside
each posterior's interval (:mod:`core.analysis.interval_mass`). ``--record`` writes that share
into each posterior file's ``info["interval_mass"]``, where the window's column reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.analysis.evaluation import load_posteriors, resolve_dataset
from core.analysis.fidelity import fidelity_to_reference
from core.analysis.interval_mass import interval_mass_to_reference, why_no_interval
from core.commands.console import check_seed, printable, say
from core.engine.files import file_sha256
from core.engine.inference.base import Dataset, Posterior, ProgressRecord
from core.engine.store import add_to_info, load_posterior


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayescope-cli fidelity``."""
    parser.add_argument("--reference", required=True, metavar="HMC.pt",
                        help="the reference posterior (HMC, the closest to exact there is)")
    parser.add_argument("--posterior", nargs="+", required=True, metavar="P",
                        help="posterior file(s) to measure against the reference")
    parser.add_argument("--dataset", default="mnist-test",
                        help="known name (mnist-test, mnist-train, notmnist; utkface-test for face heads) "
                        "or a folder of IDX files")
    parser.add_argument("--data-dir", help="folder holding the known data sets (as <dir>/mnist, ...)")
    parser.add_argument("--download", action="store_true", help="download MNIST into the user cache if not found")
    parser.add_argument("--samples", type=int, help="posterior samples S (default: each posterior's own)")
    parser.add_argument("--limit", type=int, help="use only the first N images")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--record", action="store_true",
                        help="write each posterior's interval mass into its file (info, read by the window)")


def interval_masses(reference: tuple[str, Posterior], posteriors: dict[str, Posterior], data: Dataset, *,
                    seed: int = 0, on_progress: Callable[[ProgressRecord], None] | None = None,
                    ) -> dict[str, dict[str, Any]]:
    """Each posterior's interval-mass record (:mod:`core.analysis.interval_mass`) under the
    reference on ``data``, or ``{"status": "n/a", "reason": ...}`` for one without an interval."""
    from core.engine.runner import drain

    ref_name, ref = reference
    records: dict[str, dict[str, Any]] = {}
    for name, posterior in posteriors.items():
        why = why_no_interval(posterior)
        if why is not None:
            records[name] = {"status": "n/a", "reason": why}
            continue
        mass = drain(interval_mass_to_reference(ref, posterior, data, seed=seed), on_progress or (lambda r: None))
        records[name] = {"status": "measured", **mass.record(),
                         "probe": f"the first {len(data)} images of {data.name}",
                         "reference": {"method": ref.method, "draws": mass.reference_draws}}
    return records


def record_interval_masses(records: dict[str, dict[str, Any]], paths: dict[str, str | Path]) -> None:
    """Write each measured record into its posterior's file as ``info["interval_mass"]``."""
    for name, record in records.items():
        if record.get("status") == "measured":
            add_to_info(paths[name], {"interval_mass": record})


def run(args: argparse.Namespace) -> int:
    """Carry out ``bayescope-cli fidelity``; print the table (or JSON); return the exit code."""
    from tqdm import tqdm

    from core.engine.runner import drain

    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1 image, got {args.limit}")
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
        masses = interval_masses((name, reference), posteriors, data, seed=args.seed, on_progress=on_progress)
    finally:
        bar.close()
    if args.record:
        record_interval_masses(masses, dict(zip(posteriors, args.posterior, strict=True)))
    if args.json:
        print(json.dumps({
            "reference": {"file": str(args.reference), "file_sha256": file_sha256(args.reference),
                          "method": reference.method, "is_hmc": reference.method == "hmc",
                          "samples": report.num_samples[name],
                          "accuracy": report.accuracy[name]},
            "dataset": report.dataset, "num_inputs": report.num_inputs, "seed": args.seed,
            "posteriors": [{**row, "interval_mass": masses[row["posterior"]], "file": str(path)}
                           for row, path in zip(report.rows(), args.posterior, strict=True)],
        }, indent=2))
        return 0
    say(f"{report.dataset}: {report.num_inputs} images; reference {args.reference} "
        f"({reference.method}, {report.num_samples[name]} draws, accuracy {100 * report.accuracy[name]:.2f}%)")
    if reference.method != "hmc":
        say(f"note: the reference is {reference.method}, not HMC: these are distances between two "
            "approximations, not from the exact posterior")
    width = max([len("posterior"), *(len(n) for n in report.results)])
    say(f"{'posterior':{width}s} {'S':>5s} {'acc %':>7s} {'KL(ref‖it)':>11s} {'total var.':>10s} {'agree %':>8s} "
        f"{'in interval':>15s}")
    for row in report.rows():
        say(f"{row['posterior']:{width}s} {row['samples']:5d} {100 * row['accuracy']:7.2f} "
            f"{row['kl']:11.4f} {row['total_variation']:10.4f} {100 * row['agreement']:8.2f} "
            f"{_mass_cell(masses[row['posterior']]):>15s}")
    say("KL: the information lost when the posterior's predictive stands in for the reference's "
        "(nats, 0 = the same); total var.: the most probability they disagree on, averaged over "
        "images (0 = the same, 1 = disjoint); agree: images where both predict the same class; "
        "in interval: the share of the reference's draws inside the posterior's interval (from as many "
        "draws as a column uses, at the level stated), mean over images × classes above 1 % (10th percentile).")
    if args.record:
        say("recorded the interval mass in " + ", ".join(str(args.posterior[i]) for i, n in enumerate(posteriors)
                                                           if masses[n].get("status") == "measured"))
    return 0


def _mass_cell(record: dict[str, Any]) -> str:
    """``"90%: 0.12 (0.01)"``: the level the interval holds, the mean share and its 10th percentile."""
    if record.get("status") != "measured":
        return "n/a"
    return f"{round(100 * record['stated_level'])}%: {record['mean']:.2f} ({record['p10']:.2f})"
