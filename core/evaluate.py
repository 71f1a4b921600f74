"""``bayescope-cli evaluate``: data-set evaluation of one or more posteriors, side by side.

:func:`evaluate` is a generator (progress records, then an :class:`Evaluation`) that the
GUI can run in a worker; :func:`evaluation_tables` and :func:`evaluation_figures` turn the
result into long-format tables and matplotlib figures; :func:`write_report` writes both
(CSV + JSON per table, one image per figure). Data sets are given as a known name
(``mnist-test``, ``mnist-train``, ``notmnist``) or the path of any folder with the IDX
files in MNIST layout; ``data_dir`` points the known names at a folder holding them in
sub-folders named after each data set (``<data_dir>/mnist``, ``<data_dir>/notmnist``), or at the
data set's own folder (one named after it). What was read (folders, files and their SHA-256)
is recorded in ``evaluation.json``.

The report is written into a temporary folder beside ``--out`` and renamed into place at the
end, so ``--out`` holds either the earlier report or the complete new one; a folder holding
other files is refused before anything is computed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import os
import re
import sys
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.data.datasets import DatasetNotFoundError, load_split
from core.data.preprocess import image_to_input, load_image
from core.inference.base import Dataset, Posterior, ProgressRecord
from core.io import (
    NotSavedError,
    atomic_write,
    check_output_folder,
    load_posterior,
    replacing_folder,
)
from core.memory import check_fits
from core.metrics import (
    ECE_BINS,
    REJECTION_SCORES,
    SAMPLE_BUDGET,
    SCORES,
    DatasetPredictions,
    box_statistics,
    brier_score,
    chain_ids,
    classwise_calibration_error,
    confusion_matrix,
    expected_calibration_error,
    negative_log_likelihood,
    ood_detection,
    oracle_rejection_curve,
    per_class_error,
    predict_dataset,
    rejection_curve,
    reliability_diagram,
    rotation_angles,
    rotation_sweep,
    score_edges,
    score_histograms,
    soft_confusion_matrix,
)
from core.metrics import accuracy as accuracy_of
from core.uncertainty import UNCERTAIN_THRESHOLD

#: Known data-set names → (data set, split).
DATASET_NAMES: dict[str, tuple[str, str]] = {
    "mnist-test": ("mnist", "test"),
    "mnist-train": ("mnist", "train"),
    "notmnist": ("notmnist", "test"),
    "notmnist-test": ("notmnist", "test"),
}
#: The faces test split (UTKFace, descriptors cached by core.faces): for face heads only.
FACE_TEST_SET = "utkface-test"


def resolve_dataset(
    spec: str,
    data_dir: str | os.PathLike | None = None,
    split: str = "test",
    download: bool = False,
) -> Dataset:
    """Load a data set given by a known name (:data:`DATASET_NAMES`) or an IDX folder.

    For a known name, only the data set's own folder is read: ``data_dir/<name>``, or
    ``data_dir`` itself when it is named after the data set; without ``data_dir``, the user
    cache (where ``download`` fetches MNIST when missing). A folder is read as its ``split``
    (default the ``t10k-*`` test files).

    Raises
    ------
    DatasetNotFoundError
        When the files are nowhere to be found, or the name is neither known nor a folder.
    """
    if spec == FACE_TEST_SET:  # descriptors read from the cache, or computed without progress
        from core.faces.testset import load_face_test_set, utkface_location
        from core.runner import drain

        return drain(load_face_test_set(utkface_location(data_dir))).data
    if spec in DATASET_NAMES:
        name, known_split = DATASET_NAMES[spec]
        root = None
        if data_dir is not None:
            base = Path(data_dir)
            if not base.is_dir():
                raise DatasetNotFoundError(f"data folder {base} does not exist")
            if (base / name).is_dir():
                root = base / name
            elif base.name.lower().replace("-", "").replace("_", "") == name:
                root = base
            else:
                # never fall back on data_dir itself: it may hold another data set's files
                raise DatasetNotFoundError(
                    f"no {name} folder in {base}: put the {name} files in {base / name}, "
                    f"or give their folder as the data set"
                )
        return load_split(name, known_split, root=root, download_if_missing=download)
    folder = Path(spec)
    if not folder.is_dir():
        known = ", ".join([*DATASET_NAMES, FACE_TEST_SET])
        raise DatasetNotFoundError(f"data set {spec!r} is neither a known name ({known}) nor a folder")
    return load_split(str(folder), split)


_IMAGE_REF = re.compile(r"^(?P<set>.+):(?P<index>\d+)$")


def resolve_image(spec: str, data_dir: str | os.PathLike | None = None) -> tuple[str, torch.Tensor]:
    """An image for the rotation sweep: an image file, or ``SET:INDEX`` (e.g. ``mnist-test:0``).

    Returns ``(label, image (1, 1, 28, 28))``.
    """
    path = Path(spec)
    match = _IMAGE_REF.match(spec)
    if not path.exists() and match:
        data = resolve_dataset(match["set"], data_dir)
        index = int(match["index"])
        if index >= len(data):
            raise ValueError(f"{spec}: {match['set']} has only {len(data)} images")
        label = data.class_names[int(data.y[index])] if data.class_names else str(int(data.y[index]))
        return f"{data.name}[{index}] (class {label})", data.x[index : index + 1]
    return path.name, image_to_input(load_image(path))


def load_posteriors(paths: Sequence[str | os.PathLike]) -> dict[str, Posterior]:
    """Load posterior files keyed by a unique display name (the file stem, numbered if repeated).

    Raises ``ValueError`` when they disagree on the number of classes or the image size.
    """
    out: dict[str, Posterior] = {}
    for path in paths:
        posterior = load_posterior(path)
        stem = Path(path).stem
        name, i = stem, 2
        while name in out:
            name, i = f"{stem}-{i}", i + 1
        out[name] = posterior
    if not out:
        raise ValueError("no posterior given")
    kinds = {(p.num_classes, p.arch.image_size, p.arch.input_dim) for p in out.values()}
    if len(kinds) > 1:
        listing = ", ".join(f"{n}: {p.num_classes} classes, "
                            + (f"{p.arch.input_dim}-d descriptors" if p.arch.input_dim else f"{p.arch.image_size}px")
                            for n, p in out.items())
        raise ValueError(f"posteriors cannot be compared: they disagree on classes or image size ({listing})")
    return out


@dataclass
class PosteriorEvaluation:
    """One posterior's per-example results on the data set, the OOD set and the sweep."""

    posterior: Posterior
    data: DatasetPredictions
    ood: DatasetPredictions | None = None
    rotation: Any = None  # RotationSweep


@dataclass
class Evaluation:
    """Everything :func:`evaluate` computed (tables and figures are derived from it)."""

    dataset: str
    class_names: tuple[str, ...]
    results: dict[str, PosteriorEvaluation]
    ood_dataset: str | None = None
    rotation_label: str | None = None
    rotation_images: np.ndarray | None = None  # (A, H, W)
    settings: dict[str, Any] = field(default_factory=dict)
    data_source: dict[str, Any] = field(default_factory=dict)
    ood_source: dict[str, Any] | None = None


def _check_data(posteriors: dict[str, Posterior], data: Dataset, role: str) -> None:
    p = next(iter(posteriors.values()))
    if p.arch.input_dim:  # a head over face descriptors reads vectors (N, D)
        from core.faces.descriptor import DescriptorInfo
        from core.faces.heads import check_descriptor

        if data.x.ndim != 2:
            raise ValueError(f"{role} {data.name} holds images; these posteriors read "
                             f"{p.arch.input_dim}-number face descriptors (choose {FACE_TEST_SET})")
        if "descriptor" in data.source:
            for posterior in posteriors.values():
                check_descriptor(posterior, DescriptorInfo.from_dict(data.source["descriptor"]))
        if data.x.shape[1] != p.arch.input_dim:
            raise ValueError(f"{role} {data.name} has vectors of {data.x.shape[1]} numbers; "
                             f"the posteriors read {p.arch.input_dim}")
    else:
        side = p.arch.image_size
        if data.x.ndim == 2:
            raise ValueError(f"{role} {data.name} holds face descriptors; these posteriors read "
                             f"{side}×{side} images (evaluate face heads on it)")
        if tuple(data.x.shape[1:]) != (1, side, side):
            raise ValueError(
                f"{role} {data.name} has images of shape {tuple(data.x.shape[1:])}; "
                f"the posteriors expect (1, {side}, {side})"
            )
    if role == "data set" and len(data) and int(data.y.max()) >= p.num_classes:
        raise ValueError(
            f"{data.name} has labels up to {int(data.y.max())}, the posteriors only {p.num_classes} classes"
        )
    if len(data) == 0:
        raise ValueError(f"{role} {data.name} is empty")


def evaluate(
    posteriors: dict[str, Posterior],
    data: Dataset,
    ood: Dataset | None = None,
    rotate_image: torch.Tensor | None = None,
    *,
    rotate_label: str | None = None,
    num_samples: int | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    angles: Sequence[float] | np.ndarray | None = None,
    level: float = 0.9,
) -> Generator[ProgressRecord, None, Evaluation]:
    """Evaluate every posterior on ``data`` (and ``ood``, and a rotation sweep of one image).

    Yields one :class:`ProgressRecord` per batch over all posteriors and sets (phase names
    the posterior and set) and returns an :class:`Evaluation`. Each posterior draws from its
    own generator seeded with ``seed``, so results do not depend on the order given.
    """
    _check_data(posteriors, data, "data set")
    if ood is not None:
        _check_data(posteriors, ood, "OOD set")
    plans = []
    for name, posterior in posteriors.items():
        s = len(chain_ids(posterior, num_samples))
        b = batch_size or max(1, SAMPLE_BUDGET // s)
        plans.append((name, posterior, b))
    total = sum(
        math.ceil(len(data) / b) + (math.ceil(len(ood) / b) if ood is not None else 0)
        for _, _, b in plans
    ) + (len(plans) if rotate_image is not None else 0)
    angles = rotation_angles() if angles is None else np.asarray(angles, dtype=np.float64)
    done = 0
    results: dict[str, PosteriorEvaluation] = {}
    for name, posterior, b in plans:
        generator = torch.Generator().manual_seed(seed)
        outputs = []
        for subset in (data, ood):
            if subset is None:
                outputs.append(None)
                continue
            run = predict_dataset(posterior, subset, num_samples, generator, batch_size=b)
            try:
                while True:
                    record = next(run)
                    yield ProgressRecord(done + record.step, total, record.values, f"{name} · {subset.name}")
            except StopIteration as stop:
                outputs.append(stop.value)
            done += record.total
        sweep = None
        if rotate_image is not None:
            sweep = rotation_sweep(posterior, rotate_image, angles, num_samples, generator, level)
            done += 1
            yield ProgressRecord(done, total, {}, f"{name} · rotation")
        results[name] = PosteriorEvaluation(posterior, outputs[0], outputs[1], sweep)
    images = None
    if rotate_image is not None:
        from core.data.preprocess import rotate

        image = torch.as_tensor(rotate_image, dtype=torch.float32)
        image = image.reshape(1, 1, *image.shape[-2:])
        batch = image.expand(len(angles), -1, -1, -1)
        images = rotate(batch, torch.as_tensor(angles, dtype=torch.float32))[:, 0].numpy()
    # One name per class of the posteriors: a folder's names only reach its largest label.
    k = next(iter(posteriors.values())).num_classes
    given = tuple(data.class_names[:k])
    class_names = given + tuple(str(j) for j in range(len(given), k))
    return Evaluation(
        dataset=data.name,
        class_names=tuple(class_names),
        results=results,
        ood_dataset=ood.name if ood is not None else None,
        rotation_label=rotate_label,
        rotation_images=images,
        settings={"num_samples": num_samples, "seed": seed, "level": level,
                  "ece_bins": ECE_BINS, "uncertain_threshold": UNCERTAIN_THRESHOLD},
        data_source={"name": data.name, "images": len(data), **data.source},
        ood_source=None if ood is None else {"name": ood.name, "images": len(ood), **ood.source},
    )


# ----------------------------------------------------------------------------- tables


Table = list[dict[str, Any]]


def _f(x: Any) -> Any:
    """Plain JSON-friendly number (NaN → None)."""
    if isinstance(x, (np.integer, int)) and not isinstance(x, bool):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    return x


def evaluation_tables(ev: Evaluation) -> dict[str, Table]:
    """Every table behind the report, in long format (one row per number group)."""
    names = ev.class_names
    t: dict[str, Table] = {k: [] for k in (
        "summary", "classwise_ece", "reliability", "confusion_soft", "confusion_hard",
        "per_class_error", "per_class_error_box", "rejection", "scores",
    )}
    if ev.ood_dataset:
        t["ood_detection"], t["ood_histograms"] = [], []
    if ev.rotation_label:
        t["rotation"], t["rotation_uncertainty"] = [], []
    shared_edges = {  # one set of bins per score across posteriors and sets, as in the figure
        score: score_edges(score, len(names), [
            preds.scores[score] for r in ev.results.values() for preds in (r.data, r.ood) if preds is not None
        ])
        for score in SCORES
    }
    for name, r in ev.results.items():
        d, p = r.data, r.posterior
        proba, labels = d.mean_proba, d.labels
        k = d.num_classes
        cw_mean, cw = classwise_calibration_error(proba, labels)
        row = {
            "posterior": name, "method": p.method, "arch": p.arch.name,
            "drop_rate": p.arch.drop_rate, "dataset": ev.dataset, "examples": len(labels),
            "samples": d.num_samples, "chains": d.num_chains,
            "accuracy": accuracy_of(proba, labels),
            "nll": negative_log_likelihood(proba, labels),
            "brier": brier_score(proba, labels),
            "ece": expected_calibration_error(proba, labels),
            "classwise_ece": cw_mean,
            "uncertain_fraction": float((d.scores["top_two_overlap"] > UNCERTAIN_THRESHOLD).mean()),
        }
        for score in ("total", "aleatoric", "epistemic"):
            row[f"mean_{score}"] = float(d.scores[score].mean())
        t["summary"].append(row)
        t["classwise_ece"] += [{"posterior": name, "class": names[j], "ece": cw[j]} for j in range(k)]
        diagram = reliability_diagram(proba, labels)
        for b in range(len(diagram.counts)):
            t["reliability"].append({
                "posterior": name, "bin": b, "lower": diagram.edges[b], "upper": diagram.edges[b + 1],
                "count": int(diagram.counts[b]), "confidence": diagram.confidence[b],
                "accuracy": diagram.accuracy[b],
            })
        soft = soft_confusion_matrix(proba, labels)
        hard = confusion_matrix(d.predictions, labels, k)
        for i in range(k):
            for j in range(k):
                base = {"posterior": name, "true": names[i], "predicted": names[j]}
                t["confusion_soft"].append({**base, "mean_probability": soft[i, j]})
                t["confusion_hard"].append({**base, "count": int(hard[i, j])})
        errors = per_class_error(d.chain_predictions, labels, k)
        for c in range(errors.shape[0]):
            t["per_class_error"] += [
                {"posterior": name, "chain": c, "class": names[j], "error_rate": errors[c, j]}
                for j in range(k)
            ]
        box = box_statistics(errors)
        t["per_class_error_box"] += [
            {"posterior": name, "class": names[j], **{s: box[s][j] for s in box}} for j in range(k)
        ]
        correct = d.correct
        for score in REJECTION_SCORES:
            rates, acc = rejection_curve(correct, d.scores[score])
            oracle = oracle_rejection_curve(acc[0], rates)
            t["rejection"] += [
                {"posterior": name, "score": score, "rate": rates[i], "accuracy": acc[i],
                 "oracle_accuracy": oracle[i]}
                for i in range(len(rates))
            ]
        sets = [(ev.dataset, d)] + ([(ev.ood_dataset, r.ood)] if r.ood is not None else [])
        for set_name, preds in sets:
            for i in range(len(preds.labels)):
                t["scores"].append({
                    "posterior": name, "set": set_name, "index": i, "label": int(preds.labels[i]),
                    "predicted": int(preds.mean_proba[i].argmax()),
                    **{s: preds.scores[s][i] for s in SCORES},
                })
        if r.ood is not None:
            for res in ood_detection(d.scores, r.ood.scores):
                t["ood_detection"].append({
                    "posterior": name, "score": res.score, "auroc": res.auroc,
                    "aupr_in": res.aupr_in, "aupr_out": res.aupr_out,
                })
            for score in SCORES:
                edges = shared_edges[score]
                for set_name, preds in sets:
                    frac, edges = score_histograms(preds.scores[score], score, k, edges=edges)
                    t["ood_histograms"] += [
                        {"posterior": name, "score": score, "set": set_name, "lower": edges[b],
                         "upper": edges[b + 1], "fraction": frac[b]}
                        for b in range(len(frac))
                    ]
        if r.rotation is not None:
            sw = r.rotation
            for a, angle in enumerate(sw.angles):
                t["rotation"] += [
                    {"posterior": name, "angle": angle, "class": names[j], "mean": sw.mean[a, j],
                     "median": sw.median[a, j], "lower": sw.lower[a, j], "upper": sw.upper[a, j]}
                    for j in range(k)
                ]
                t["rotation_uncertainty"].append({
                    "posterior": name, "angle": angle, "total": sw.total[a],
                    "aleatoric": sw.aleatoric[a], "epistemic": sw.epistemic[a],
                })
    return {key: [{c: _f(v) for c, v in row.items()} for row in rows] for key, rows in t.items()}


def write_table(
    rows: Table, out_dir: str | os.PathLike, name: str, formats: Sequence[str] = ("csv", "json")
) -> list[Path]:
    """Write ``name.csv`` and ``name.json`` (``{"columns": [...], "data": [[...], ...]}``).

    ``formats`` picks which of the two to write (both by default).
    """
    out_dir = Path(out_dir)
    columns = list(rows[0]) if rows else []
    data = [[row.get(c) for c in columns] for row in rows]

    def write_csv(fh: Any) -> None:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        writer = csv.writer(text)
        writer.writerow(columns)
        writer.writerows([["" if v is None else v for v in r] for r in data])
        text.flush()
        text.detach()

    def write_json(fh: Any) -> None:
        fh.write(json.dumps({"columns": columns, "data": data}).encode())

    writers = {"csv": write_csv, "json": write_json}
    return [atomic_write(out_dir / f"{name}.{fmt}", writers[fmt]) for fmt in formats]


# ----------------------------------------------------------------------------- figures


def evaluation_figures(ev: Evaluation) -> dict[str, Any]:
    """Every figure of the report, by file stem (matplotlib Figures)."""
    from core import figures as fg

    res = ev.results
    k = len(ev.class_names)
    out = {
        "reliability": fg.reliability_figure(
            {n: reliability_diagram(r.data.mean_proba, r.data.labels) for n, r in res.items()}
        ),
        "confusion_soft": fg.confusion_figure(
            {n: soft_confusion_matrix(r.data.mean_proba, r.data.labels) for n, r in res.items()},
            ev.class_names, f"Soft confusion: mean p̄ per true class ({ev.dataset})",
        ),
        "confusion_hard": fg.confusion_figure(
            {n: confusion_matrix(r.data.predictions, r.data.labels, k) for n, r in res.items()},
            ev.class_names, f"Confusion, fraction of each true class ({ev.dataset})", normalise_rows=True,
        ),
        "per_class_error": fg.per_class_error_figure(
            {n: per_class_error(r.data.chain_predictions, r.data.labels, k) for n, r in res.items()},
            ev.class_names,
        ),
    }
    curves, oracle = {}, {}
    for n, r in res.items():
        curves[n] = {s: rejection_curve(r.data.correct, r.data.scores[s]) for s in REJECTION_SCORES}
        rates, acc = curves[n]["total"]
        oracle[n] = (rates, oracle_rejection_curve(acc[0], rates))
    out["rejection"] = fg.rejection_figure(curves, oracle)
    if ev.ood_dataset:
        aurocs = {
            n: {o.score: o.auroc for o in ood_detection(r.data.scores, r.ood.scores)}
            for n, r in res.items()
        }
        out["ood_histograms"] = fg.ood_histogram_figure(
            {n: r.data.scores for n, r in res.items()},
            {n: r.ood.scores for n, r in res.items()},
            aurocs, k, ev.dataset, ev.ood_dataset,
        )
    if ev.rotation_label:
        fig = fg.rotation_figure({n: r.rotation for n, r in res.items()}, ev.class_names, ev.rotation_images)
        fig.suptitle(f"Rotation sweep of {ev.rotation_label}", fontsize=10)
        out["rotation"] = fig
    return out


REPORT_FORMAT = "bayescope-evaluation"
_REPORT_SUFFIXES = {".csv", ".json", ".png", ".svg", ".pdf"}


def is_report_folder(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier evaluation report (and nothing else)."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return False
    return (folder / "evaluation.json").is_file() and all(
        e.is_file() and not e.is_symlink() and e.suffix.lower() in _REPORT_SUFFIXES for e in entries
    )


def check_report_folder(out_dir: str | os.PathLike) -> Path:
    """Refuse, before evaluating, an ``--out`` that a report must not replace."""
    return check_output_folder(out_dir, is_report_folder, "the evaluation report")


def write_report(ev: Evaluation, out_dir: str | os.PathLike, figure_format: str = "png") -> list[Path]:
    """Write every table (CSV + JSON), every figure and ``evaluation.json``; return the paths.

    Everything goes into a temporary folder that replaces ``out_dir`` (new, empty, or an
    earlier report) in one rename at the end: a failure, a full disk or Ctrl-C leave
    ``out_dir`` as it was.
    """
    final = check_report_folder(out_dir)
    written: list[str] = []
    try:
        with replacing_folder(final, is_report_folder, "the evaluation report") as tmp:
            _write_report_files(ev, tmp, figure_format, written)
    except NotSavedError:
        raise
    except OSError as exc:
        # the temporary folder is gone: name the folder the person chose, not the stand-in
        reason = exc.strerror or "the system refused the write"
        raise NotSavedError(
            f"could not write the report into {final}: {reason[0].lower()}{reason[1:]}; "
            "nothing was changed there"
        ) from None
    return [final / name for name in written]


def _write_report_files(ev: Evaluation, tmp: Path, figure_format: str, written: list[str]) -> None:
    """Write the report's files into ``tmp``, appending each file name to ``written``."""
    from core.figures import save_figure

    tables = evaluation_tables(ev)
    for name, rows in tables.items():
        written += [p.name for p in write_table(rows, tmp, name)]
    for name, fig in evaluation_figures(ev).items():
        written.append(save_figure(fig, tmp / f"{name}.{figure_format}").name)
    meta = {
        "format": REPORT_FORMAT,
        "dataset": ev.dataset, "ood_dataset": ev.ood_dataset, "rotation": ev.rotation_label,
        "data": ev.data_source, "ood_data": ev.ood_source,
        "class_names": list(ev.class_names), "settings": ev.settings,
        "posteriors": {
            n: {"method": r.posterior.method, "arch": r.posterior.arch.to_dict(),
                "config": r.posterior.config, "seed": r.posterior.seed,
                "trained_on": r.posterior.dataset,
                "training_data": r.posterior.info.get("training_data"),
                **ev.settings.get("posterior_files", {}).get(n, {})}
            for n, r in ev.results.items()
        },
        "summary": tables["summary"],
        "ood_detection": tables.get("ood_detection", []),
    }
    atomic_write(tmp / "evaluation.json",
                 lambda fh: fh.write(json.dumps(meta, indent=2, default=str).encode()))
    written.append("evaluation.json")


# ----------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayescope-cli evaluate``."""
    parser.add_argument("--posterior", nargs="+", required=True, metavar="P", help="posterior file(s)")
    parser.add_argument("--dataset", default="mnist-test",
                        help="known name (mnist-test, mnist-train, notmnist) or a folder of IDX files; "
                             f"{FACE_TEST_SET}: UTKFace's test split, for face heads (descriptors cached)")
    parser.add_argument("--ood", help="out-of-distribution set (known name or folder), e.g. notmnist")
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
    parser.add_argument("--report", metavar="FILE.html",
                        help="one self-contained web page: figures (SVG), tables, provenance (as the app's "
                             "Export report)")


def _file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


def check_memory(
    posteriors: dict[str, Posterior],
    num_samples: int | None,
    num_angles: int,
    rotate: bool,
) -> None:
    """Estimate, per posterior, the largest allocation of the evaluation; refuse what cannot fit.

    Data-set batches hold about ``SAMPLE_BUDGET`` sample-inputs; the rotation sweep sends
    all A angles through the posterior at once and keeps S·A·K probabilities (float64, with
    their quantile copies).
    """
    for name, posterior in posteriors.items():
        s = posterior.check_prediction(num_samples, batch_size=1)
        posterior.check_prediction(s, batch_size=max(1, SAMPLE_BUDGET // s))
        if rotate:
            k = posterior.num_classes
            side = posterior.arch.image_size
            nbytes = posterior.prediction_bytes(s, num_angles) + 8.0 * 4 * s * num_angles * k
            nbytes += 4.0 * 2 * num_angles * side * side
            check_fits(nbytes, f"a rotation sweep of {num_angles} angles with {s} samples of {name}",
                       "use a larger --angle-step or fewer --samples")


def _face_test_set(args: argparse.Namespace) -> Dataset:
    """The faces test split (``--limit`` faces spread over it), descriptors with a progress bar."""
    from tqdm import tqdm

    from core.faces.testset import load_face_test_set, utkface_location
    from core.runner import drain

    if args.ood or args.rotate:
        raise ValueError(f"{FACE_TEST_SET} is evaluated without --ood and --rotate (face heads read "
                         "descriptors of faces: there is no out-of-distribution set or image sweep for them)")
    bar = tqdm(total=None, desc="describing faces", unit="face", dynamic_ncols=True, file=sys.stderr)

    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.update(record.step - bar.n)

    try:
        faces = drain(load_face_test_set(utkface_location(args.data_dir)), on_progress)
    finally:
        bar.close()
    return faces.spread(args.limit).data


def run(args: argparse.Namespace) -> int:
    """Carry out ``bayescope-cli evaluate``; print the summary; return the exit code."""
    from tqdm import tqdm

    from core.runner import drain

    check_arguments(args)
    if args.out:
        check_report_folder(args.out)
    if args.report:
        from core.io import check_output_file

        check_output_file(args.report, "the report")
    num_angles = int(math.floor(180.0 / args.angle_step + 1e-9)) + 1  # before allocating them
    posteriors = load_posteriors(args.posterior)
    check_memory(posteriors, args.samples, num_angles, bool(args.rotate))
    angles = rotation_angles(180.0, args.angle_step) if args.rotate else None
    files = {
        name: {"file": str(Path(path).absolute()), "file_sha256": _file_sha256(path)}
        for name, path in zip(posteriors, args.posterior, strict=True)
    }
    if args.dataset == FACE_TEST_SET:
        data = _face_test_set(args)
    else:
        data = resolve_dataset(args.dataset, args.data_dir, download=args.download).first(args.limit)
    ood = resolve_dataset(args.ood, args.data_dir, download=args.download) if args.ood else None
    ood = ood.first(args.limit) if ood is not None else None
    label, image = resolve_image(args.rotate, args.data_dir) if args.rotate else (None, None)
    bar = tqdm(total=None, desc="evaluate", unit="batch", dynamic_ncols=True, file=sys.stderr)

    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.set_description(record.phase, refresh=False)
        bar.update(record.step - bar.n)  # rate-limited by tqdm's mininterval

    try:
        ev = drain(
            evaluate(posteriors, data, ood, image, rotate_label=label, num_samples=args.samples,
                     seed=args.seed, angles=angles, level=args.level),
            on_progress,
        )
    finally:
        bar.close()
    ev.settings["posterior_files"] = files
    written = write_report(ev, args.out, args.format) if args.out else []
    tables = evaluation_tables(ev)
    if args.report:
        from core.dataset_views import write_html_report

        write_html_report(ev, args.report, tables)
    print(f"{ev.dataset}: {len(data)} images" + (f"; OOD {ev.ood_dataset}: {len(ood)} images" if ood else ""))
    print(f"{'posterior':20s} {'S':>4s} {'C':>3s} {'acc %':>7s} {'NLL':>7s} {'Brier':>7s} {'ECE':>7s} {'cwECE':>7s}")
    for row in tables["summary"]:
        print(f"{row['posterior'][:20]:20s} {row['samples']:4d} {row['chains']:3d} "
              f"{row['accuracy'] * 100:7.2f} {row['nll']:7.4f} {row['brier']:7.4f} "
              f"{row['ece']:7.4f} {row['classwise_ece']:7.4f}")
    if ood is not None:
        print("OOD AUROC  " + "  ".join(f"{s}" for s in SCORES))
        for name in ev.results:
            values = {r["score"]: r["auroc"] for r in tables["ood_detection"] if r["posterior"] == name}
            print(f"{name[:20]:20s} " + "  ".join(f"{values[s]:.4f}" for s in SCORES))
    if args.out:
        print(f"wrote {len(written)} files to {args.out}")
    if args.report:
        print(f"wrote the report {args.report}")
    return 0
