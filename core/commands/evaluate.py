"""``bayescope-cli evaluate``: metrics, OOD detection and the rotation sweep of posteriors on a data set
(or, with ``--corruption``, the same at corruption severities: :mod:`core.commands.evaluate_corruption`).

What was read (folders, files and their SHA-256) is recorded in ``evaluation.json``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from core.analysis.conformal_run import attach_conformal, guarantee_words
from core.analysis.evaluation import (
    FACE_TEST_SET,
    check_memory,
    evaluate,
    load_posteriors,
    resolve_dataset,
    resolve_image,
)
from core.analysis.evaluation_results import Evaluation, evaluation_tables
from core.analysis.metrics import rotation_angles
from core.analysis.ood_sets import AUROC_WORDS, ranking_changes
from core.analysis.scoring import SCORES
from core.commands import evaluate_corruption
from core.commands.console import (
    CLUSTER_HELP,
    add_device_argument,
    check_cluster,
    chosen_device,
    cluster_for,
    printable,
    say,
    say_where,
)
from core.engine.data.locate import sample_notice
from core.engine.files import file_sha256
from core.engine.inference.base import Dataset, ProgressRecord
from core.outputs.report import check_report_folder, write_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayescope-cli evaluate``."""
    parser.add_argument("--posterior", nargs="+", required=True, metavar="P", help="posterior file(s)")
    parser.add_argument("--dataset", default="mnist-test",
                        help="known name (mnist-test, mnist-train, notmnist), a folder of IDX files, or your "
                             "own images (class folders, CSV manifest, CIFAR binaries: their test split); "
                             f"{FACE_TEST_SET}: UTKFace's test split, for face heads (descriptors cached)")
    parser.add_argument("--ood", action="append", metavar="SET",
                        help="out-of-distribution set: a known name (notmnist; mnist-inverted, MNIST's test digits "
                             "dark on white), a folder of IDX files or a folder of images; give --ood several "
                             "times, or a comma list, to compare the AUROC of every score on each set")
    parser.add_argument("--data-dir", help="folder holding the known data sets (as <dir>/mnist, <dir>/notmnist, "
                                           "<dir>/utkface)")
    parser.add_argument("--download", action="store_true", help="download MNIST into the user cache if not found")
    parser.add_argument("--rotate", metavar="IMAGE",
                        help="rotation sweep of an image file or SET:INDEX (e.g. mnist-test:0)")
    parser.add_argument("--angle-step", type=float, default=10.0, help="sweep step in degrees (0–180)")
    parser.add_argument("--samples", type=int, help="posterior samples S (default: each posterior's own)")
    parser.add_argument("--limit", type=int, help="use only the first N images of each set")
    parser.add_argument("--level", type=float, default=0.9, help="credible band level of the sweep")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", default="png", choices=("png", "svg", "pdf"), help="figure format")
    parser.add_argument("--out", help="output folder (tables as CSV + JSON, figures, evaluation.json)")
    parser.add_argument("--cluster", metavar="ADDRESS", help=CLUSTER_HELP)
    parser.add_argument("--report", metavar="FILE.html",
                        help="one self-contained web page: figures (SVG), tables, provenance (as the app's "
                             "Export report)")
    evaluate_corruption.add_arguments(parser)
    parser.add_argument("--calibrate", action="store_true",
                        help="calibrate each posterior's conformal sets on the hash-chosen half of the test set "
                             "from this evaluation's own predictions, write the calibration beside each posterior "
                             "file, and measure coverage on the other half (the data set must be the posteriors' "
                             "test set; with --limit, of its first N images)")
    add_device_argument(parser)


def ood_specs(given: Sequence[str] | str | None) -> list[str]:
    """``--ood`` as a list of sets: each use of it, a comma list split (a path that exists is
    taken whole, commas and all); a set named twice counts once."""
    if given is None:
        return []
    out: list[str] = []
    for item in [given] if isinstance(given, str) else given:
        parts = [item] if Path(item).exists() else [part.strip() for part in item.split(",")]
        if any(not part for part in parts):
            raise ValueError(f"--ood {item!r} names an empty set: separate the sets with single commas")
        out += [part for part in parts if part not in out]
    return out


def ood_table_lines(tables: dict[str, list[dict]], sources: Sequence[dict], width: int) -> list[str]:
    """The AUROC of every score per OOD set, one block each, ``*`` on the best column of each score."""
    rows = tables.get("ood_sets", [])
    names = list(dict.fromkeys(row["posterior"] for row in rows))
    mark = len(names) > 1
    cols = {s: max(len(s), 7 if mark else 6) for s in SCORES}
    lines = ["OOD detection by AUROC: " + AUROC_WORDS
             + (" * marks the best column for that score on that set." if mark else "")]
    images = {source.get("name"): source.get("images") for source in sources}
    for set_name in dict.fromkeys(row["set"] for row in rows):
        count = images.get(set_name)
        lines.append(f"{set_name}" + (f" ({count:,} images)" if count else "") + ":")
        lines.append(f"{'OOD AUROC':{width}s} " + "  ".join(f"{s:<{cols[s]}s}" for s in SCORES))
        for name in names:
            cells = {r["score"]: r for r in rows if r["set"] == set_name and r["posterior"] == name}
            text = []
            for s in SCORES:
                row = cells.get(s)
                value = "n/a" if row is None or row["auroc"] is None else (
                    f"{row['auroc']:.4f}" + ("*" if mark and row["best"] else ""))
                text.append(f"{value:<{cols[s]}s}")
            lines.append(f"{name:{width}s} " + "  ".join(text))
    changes = ranking_changes(rows)
    if changes and mark:
        lines.append("The best column changes with the set for: " + "; ".join(
            f"{score} (" + ", ".join(f"{'/'.join(best) or 'none'} on {set_name}" for set_name, best in by_set.items())
            + ")" for score, by_set in changes.items()))
    return lines


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse out-of-range numbers before anything is loaded (one ``ValueError`` sentence)."""
    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be at least 1, got {args.samples}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1 image, got {args.limit}")
    if not 0.0 < args.level < 1.0:
        raise ValueError(f"--level must lie strictly between 0 and 1, got {args.level}")
    if not (0.0 < args.angle_step <= 180.0) or not math.isfinite(args.angle_step):
        raise ValueError(f"--angle-step must lie in (0, 180] degrees, got {args.angle_step}")
    if not getattr(args, "out", None) and not getattr(args, "report", None):
        raise ValueError("give --out FOLDER, --report FILE.html, or both")
    if not 0 <= args.seed < 2**63:
        raise ValueError(f"--seed must be a whole number from 0 to 2^63 - 1, got {args.seed}")
    check_cluster(getattr(args, "cluster", None))
    evaluate_corruption.check_arguments(args)


def _face_test_set(args: argparse.Namespace) -> Dataset:
    """The faces test split (``--limit`` faces spread over it: the window's seeded subset),
    descriptors with a progress bar; with a limit only those faces are described."""
    from tqdm import tqdm

    from core.engine.faces.testset import load_face_test_set, utkface_location
    from core.engine.runner import drain

    if ood_specs(args.ood) or args.rotate:
        raise ValueError(f"{FACE_TEST_SET} is evaluated without --ood and --rotate (face heads read "
                         "descriptors of faces: there is no out-of-distribution set or image sweep for them)")
    bar = tqdm(total=None, desc="describing faces", unit="face", dynamic_ncols=True, file=sys.stderr)

    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.update(record.step - bar.n)

    try:
        faces = drain(load_face_test_set(utkface_location(args.data_dir), limit=args.limit), on_progress)
    finally:
        bar.close()
    return faces.data


def _number(value: float | None) -> str:
    return f"{'n/a':>7s}" if value is None else f"{value:7.4f}"


def _calibrate_here(ev: Evaluation, data: Dataset, args: argparse.Namespace, shape: dict) -> None:
    """``--calibrate``: each posterior's calibration from this evaluation's predictions on the
    hash-chosen half of ``data``, written beside its file."""
    from core.analysis.conformal_run import calibrate_evaluation, training_images

    train = {name: training_images(result.posterior, args.data_dir, shape) for name, result in ev.results.items()}
    paths = dict(zip(ev.results, args.posterior, strict=True))
    for name, (calibration, written) in calibrate_evaluation(ev, data, paths, train, seed=args.seed).items():
        say(f"{name}: calibrated on {calibration.n:,} of {len(data):,} images; wrote {written}")


def say_conformal(ev: Evaluation, width: int) -> None:
    """The conformal table: coverage and mean set size of each score, with the guarantee."""
    if not ev.conformal:
        return
    rows = [(name, row) for name, entry in ev.conformal.items() for row in entry.get("rows", [])]
    if rows:
        level, n = rows[0][1]["level"], rows[0][1]["calibration_images"]
        say(f"conformal sets at {level:.0%} (calibrated on a held-out half of the test set; coverage measured on "
            "the other half)")
        say(f"{'posterior':{width}s} {'score':>9s} {'q̂':>7s} {'n cal':>6s} {'n eval':>6s} {'cover %':>8s} "
            f"{'guaranteed %':>15s} {'± s.e.':>6s} {'set size':>8s}")
        for name, row in rows:
            guarantee = f"{row['guaranteed_lower'] * 100:.1f}–{row['guaranteed_upper'] * 100:.2f}"
            flag = ("  (not the calibration's data set: no guarantee)" if not row["exchangeable"]
                    else "" if row["within_guarantee"] else "  (outside the guarantee by more than 3 s.e.)")
            qhat = "inf" if row["qhat"] is None else f"{row['qhat']:.4f}"
            say(f"{name:{width}s} {row['score']:>9s} {qhat:>7s} {row['calibration_images']:6d} "
                f"{row['evaluated_images']:6d} {row['coverage'] * 100:8.2f} {guarantee:>15s} "
                f"{row['sampling_error'] * 100:6.2f} {row['mean_set_size']:8.3f}{flag}")
        say(f"  {guarantee_words(level, n)}; s.e.: the measured coverage's sampling error (calibration and "
            "evaluated images); every row lies within 3 s.e. of the guarantee unless it says otherwise")
    for name, entry in ev.conformal.items():
        if "missing" in entry:
            say(f"{name}: {entry['missing']}")


def run(args: argparse.Namespace) -> int:
    """Carry out ``bayescope-cli evaluate``; print the summary; return the exit code."""
    from tqdm import tqdm

    from core.engine.runner import drain

    check_arguments(args)
    device = chosen_device(args)
    if args.out:
        check_report_folder(args.out)
    if args.report:
        from core.engine.files import check_output_file

        check_output_file(args.report, "the report")
    num_angles = int(math.floor(180.0 / args.angle_step + 1e-9)) + 1  # before allocating them
    posteriors = load_posteriors(args.posterior, device)
    check_memory(posteriors, args.samples, num_angles, bool(args.rotate))
    angles = rotation_angles(180.0, args.angle_step) if args.rotate else None
    files = {
        name: {"file": str(Path(path).absolute()), "file_sha256": file_sha256(path)}
        for name, path in zip(posteriors, args.posterior, strict=True)
    }
    arch = next(iter(posteriors.values())).arch  # a person's images are read as the models read
    shape = {"image_size": arch.image_size, "channels": arch.channels}
    if args.dataset == FACE_TEST_SET:
        data = _face_test_set(args)
    else:  # a person's images are split as the posteriors record, their training images left out
        trained_on = {name: p.info.get("training_data") for name, p in posteriors.items()}
        data = resolve_dataset(args.dataset, args.data_dir, download=args.download, trained_on=trained_on,
                               **shape).first(args.limit)
        note = (data.source.get("data_check") or {}).get("note")
        if note:
            say(f"note: {note}", sys.stderr)
    oods = [resolve_dataset(spec, args.data_dir, download=args.download, **shape).first(args.limit)
            for spec in ood_specs(args.ood)]
    label, image = resolve_image(args.rotate, args.data_dir) if args.rotate else (None, None)
    notice = sample_notice(data.source, *(other.source for other in oods), where="command line")
    if notice:
        say(notice)
    say_where("Evaluating", device)
    if getattr(args, "corruption", None):
        if len(oods) > 1:
            raise ValueError("--corruption evaluates against one --ood set at a time: give one, or run once per set")
        ood = oods[0] if oods else None
        meta = {"posterior_files": files, "data": {"name": data.name, "images": len(data), **data.source},
                "ood_data": None if ood is None else {"name": ood.name, "images": len(ood), **ood.source},
                "settings": {"num_samples": args.samples, "seed": args.seed, "level": args.level}}
        return evaluate_corruption.run_corruption(args, posteriors, data, ood, meta)
    bar = tqdm(total=None, desc="evaluate", unit="image", dynamic_ncols=True, file=sys.stderr)

    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.set_description(printable(record.phase), refresh=False)
        bar.update(record.step - bar.n)  # rate-limited by tqdm's mininterval

    try:
        with cluster_for(getattr(args, "cluster", None)) as cluster:
            ev = drain(
                evaluate(posteriors, data, oods, image, rotate_label=label, num_samples=args.samples,
                         seed=args.seed, angles=angles, level=args.level, executor=cluster),
                on_progress,
            )
    finally:
        bar.close()
    ev.settings["posterior_files"] = files
    if getattr(args, "calibrate", False):
        _calibrate_here(ev, data, args, shape)
        files = {name: {**entry, "file_sha256": file_sha256(entry["file"])} for name, entry in files.items()}
    attach_conformal(ev, data, dict(zip(posteriors, args.posterior, strict=True)), level=args.level,
                     sha256={name: entry["file_sha256"] for name, entry in files.items()})
    written = write_report(ev, args.out, args.format) if args.out else []
    tables = evaluation_tables(ev)
    if args.report:
        from core.outputs.report import write_html_report

        write_html_report(ev, args.report, tables)
    say(f"{ev.dataset}: {len(data)} images" + "".join(
        f"; OOD {source['name']}: {source['images']} images" for source in ev.ood_sources))
    width = max([len("posterior"), *(len(name) for name in ev.results)])  # whole names, never cut
    say(f"{'posterior':{width}s} {'S':>4s} {'C':>3s} {'acc %':>7s} {'NLL':>7s} {'Brier':>7s} {'ECE':>7s} {'cwECE':>7s}"
        f" {'smECE':>7s}")
    for row in tables["summary"]:
        say(f"{row['posterior']:{width}s} {row['samples']:4d} {row['chains']:3d} "
            f"{row['accuracy'] * 100:7.2f} {row['nll']:7.4f} {row['brier']:7.4f} "
            f"{row['ece']:7.4f} {row['classwise_ece']:7.4f} {_number(row.get('smooth_ece'))}")
    say_conformal(ev, width)
    if oods:
        for line in ood_table_lines(tables, ev.ood_sources, width):
            say(line)
    if args.out:
        say(f"wrote {len(written)} files to {args.out}")
    if args.report:
        say(f"wrote the report {args.report}")
    return 0
