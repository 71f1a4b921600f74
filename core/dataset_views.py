"""Data-set views of several posteriors: a cached, cancellable evaluation and what each view draws.

The GUI's Dataset tab runs :func:`evaluate_dataset` in a worker. It evaluates each posterior
with :func:`core.evaluate.evaluate` (the CLI's own loop, batches and seeds, so the numbers
equal ``bayescope-cli evaluate``'s), yields progress in images, and keeps each posterior's
per-image results in the user cache under a key of everything that determines them
(:func:`cache_key`): the posterior file's SHA-256, the images and labels of both sets, the
number of samples, the seed, the batch rule and the code version. Entries are written
atomically, checked when read, and ignored (and removed) when damaged.

The result, :class:`DatasetViews`, holds the :class:`~core.evaluate.Evaluation`, its tables
(:func:`core.evaluate.evaluation_tables`, without the per-image one) and one
:class:`ColumnViews` per posterior with the arrays its plots draw. The test images behind a
confusion cell or a histogram bin come from :func:`confusion_cell_images` and
:func:`histogram_bin_images`. :func:`export_dataset_view` writes one view as the CLI writes it
(figure + CSV + JSON); :func:`write_html_report` writes the self-contained HTML report that
the GUI's "Export report" and ``bayescope-cli evaluate --report`` share.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import math
import os
import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from core.compare import provenance
from core.evaluate import (
    Evaluation,
    PosteriorEvaluation,
    evaluate,
    evaluation_figures,
    evaluation_tables,
    resolve_dataset,
)
from core.faces.testset import FaceTestSet, is_face_set
from core.inference.base import Dataset, Posterior, ProgressRecord
from core.io import atomic_write, check_output_file, code_version, sweep_stale_temp_files
from core.metrics import (
    ECE_BINS,
    REJECTION_SCORES,
    SAMPLE_BUDGET,
    SCORES,
    DatasetPredictions,
    ReliabilityDiagram,
    box_statistics,
    chain_ids,
    confusion_matrix,
    oracle_rejection_curve,
    per_class_error,
    rejection_curve,
    reliability_diagram,
    score_edges,
    score_histograms,
    soft_confusion_matrix,
)
from core.naming import METHOD_DESCRIPTIONS, method_label, plural
from core.uncertainty import UNCERTAIN_THRESHOLD

#: Bumped whenever what a cache entry holds, or how it is computed, changes.
CACHE_FORMAT = 1

#: The data sets in words (known names; a folder is shown by its name).
DATASET_WORDS: dict[str, str] = {
    "mnist-test": "MNIST test digits",
    "mnist-train": "MNIST training digits",
    "notmnist": "notMNIST letters",
    "notmnist-test": "notMNIST letters",
    "utkface-test": "UTKFace test faces",
    "utkface-dlib-resnet-v1-test": "UTKFace test faces",
}

#: Each uncertainty score in words (every one is "higher = more uncertain").
SCORE_WORDS: dict[str, str] = {
    "total": "total uncertainty (entropy of the mean)",
    "aleatoric": "aleatoric (expected entropy)",
    "epistemic": "epistemic (mutual information)",
    "epistemic_variance": "epistemic (variance of the draws)",
    "one_minus_max_prob": "1 − highest mean probability",
    "top_two_overlap": "overlap of the top two classes",
}

#: Views that export, by the key that :func:`core.evaluate.evaluation_figures` and
#: :func:`core.evaluate.evaluation_tables` use, with their titles.
DATASET_VIEWS: dict[str, str] = {
    "summary": "Metrics",
    "reliability": "Reliability diagram",
    "confusion_soft": "Soft confusion matrix",
    "confusion_hard": "Confusion matrix",
    "per_class_error": "Per-class error over chains",
    "rejection": "Accuracy when the most uncertain inputs are referred",
    "ood_histograms": "Uncertainty in and out of distribution",
}

#: A soft-confusion cell lists the images of its true class that give its predicted class at
#: least this mean probability (below it an image hardly contributes to the cell).
SOFT_CELL_MIN = 0.05


def dataset_words(name: str) -> str:
    """``"mnist-test"`` → ``"MNIST test digits"``; a folder's data set keeps its name."""
    return DATASET_WORDS.get(name, name)


# ----------------------------------------------------------------------------- request


@dataclass(frozen=True)
class EvaluationItem:
    """One posterior to evaluate: its display name, the posterior, and its file (for the cache)."""

    name: str
    posterior: Posterior
    source: str | os.PathLike | None = None


def unique_names(names: Sequence[str]) -> list[str]:
    """The names, a repeated one numbered: ``["a", "a"]`` → ``["a", "a (2)"]``."""
    out: list[str] = []
    for name in names:
        candidate, i = name, 2
        while candidate in out:
            candidate, i = f"{name} ({i})", i + 1
        out.append(candidate)
    return out


def load_sets(
    dataset: str,
    ood: str | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
) -> tuple[Dataset, Dataset | None]:
    """The test set and the optional OOD set (known names or IDX folders), each cut to ``limit``."""
    from core.runner import drain

    data, other, _ = drain(open_sets(dataset, ood, data_dir, limit))
    return data, other


def open_sets(
    dataset: str,
    ood: str | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    *,
    cache_only: bool = False,
) -> Generator[ProgressRecord, None, tuple[Dataset, Dataset | None, FaceTestSet | None] | None]:
    """:func:`load_sets` with progress, and the photos of the faces test split.

    The faces test split (:data:`core.faces.testset.FACE_TEST_SET`) yields the descriptor
    extraction's progress (phase ``"descriptors"``; nothing when they are cached), takes
    ``limit`` faces spread over the split, has no OOD set, and comes with its photos
    (the third item; None for other sets). With ``cache_only``, returns None rather than
    computing descriptors.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"the number of images must be at least 1, got {limit}")
    if is_face_set(dataset):
        if ood:
            raise ValueError("face heads are evaluated without an out-of-distribution set: they read descriptors "
                             "of faces, and no other set of faces with known ages is at hand")
        from core.faces.testset import load_face_test_set, utkface_location

        faces = yield from load_face_test_set(utkface_location(data_dir), cache_only=cache_only)
        if faces is None:
            return None
        faces = faces.spread(limit)
        return faces.data, None, faces
    data = resolve_dataset(dataset, data_dir).first(limit)
    other = resolve_dataset(ood, data_dir).first(limit) if ood else None
    return data, other, None


# ----------------------------------------------------------------------------- cache


def cache_folder() -> Path:
    """Where evaluations are kept: ``<user cache>/bayescope/evaluations``."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "evaluations"


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dataset_sha256(data: Dataset) -> str:
    """SHA-256 of a data set's images and labels as the models see them (so of its count too)."""
    h = hashlib.sha256()
    h.update(repr((tuple(data.x.shape), str(data.x.dtype))).encode())
    h.update(np.ascontiguousarray(data.x.numpy()))  # hashed in place, never copied
    h.update(np.ascontiguousarray(data.y.numpy().astype(np.int64)))
    return h.hexdigest()


def batch_size_for(posterior: Posterior, num_samples: int | None) -> int:
    """Images per batch, as :func:`core.evaluate.evaluate` chooses them by default.

    Batches decide which random masks each image gets, so the same rule gives the CLI's numbers.
    """
    return max(1, SAMPLE_BUDGET // len(chain_ids(posterior, num_samples)))


def cache_key(
    posterior_sha256: str,
    data_sha256: str,
    ood_sha256: str | None,
    num_samples: int | None,
    seed: int,
    batch_size: int,
) -> str:
    """The cache key of one posterior's evaluation: a SHA-256 of everything that determines it."""
    record = {
        "format": CACHE_FORMAT, "code": code_version(), "posterior": posterior_sha256,
        "data": data_sha256, "ood": ood_sha256, "num_samples": num_samples, "seed": int(seed),
        "batch_size": int(batch_size), "ece_bins": ECE_BINS,
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _pack(prefix: str, preds: DatasetPredictions) -> dict[str, np.ndarray]:
    arrays = {
        f"{prefix}mean_proba": preds.mean_proba, f"{prefix}labels": preds.labels,
        f"{prefix}chain_predictions": preds.chain_predictions,
        f"{prefix}num_samples": np.asarray(preds.num_samples),
    }
    arrays.update({f"{prefix}score_{k}": v for k, v in preds.scores.items()})
    return arrays


def _unpack(prefix: str, arrays: Any, labels: np.ndarray) -> DatasetPredictions:
    mean = np.asarray(arrays[f"{prefix}mean_proba"], dtype=np.float64)
    stored = np.asarray(arrays[f"{prefix}labels"], dtype=np.int64)
    chains = np.asarray(arrays[f"{prefix}chain_predictions"], dtype=np.int64)
    n = len(labels)
    if mean.ndim != 2 or mean.shape[0] != n or not np.array_equal(stored, labels) or chains.shape[1:] != (n,):
        raise ValueError("the cached results do not match the data set")
    scores = {k: np.asarray(arrays[f"{prefix}score_{k}"], dtype=np.float64) for k in SCORES}
    if any(v.shape != (n,) for v in scores.values()) or not np.isfinite(mean).all():
        raise ValueError("the cached results are damaged")
    return DatasetPredictions(mean, stored, scores, chains, int(arrays[f"{prefix}num_samples"]))


def read_cache(path: Path, data: Dataset, ood: Dataset | None) -> tuple[DatasetPredictions, DatasetPredictions | None] | None:
    """A cache entry's predictions, or None when it is missing or damaged (then it is removed)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as arrays:
            preds = _unpack("data_", arrays, data.y.numpy().astype(np.int64))
            other = _unpack("ood_", arrays, ood.y.numpy().astype(np.int64)) if ood is not None else None
    except Exception:  # noqa: BLE001 — any unreadable entry is simply recomputed
        path.unlink(missing_ok=True)
        return None
    return preds, other


def write_cache(path: Path, result: PosteriorEvaluation) -> bool:
    """Store one posterior's predictions atomically; False when the cache cannot be written."""
    arrays = _pack("data_", result.data)
    if result.ood is not None:
        arrays.update(_pack("ood_", result.ood))
    try:
        atomic_write(path, lambda fh: np.savez(fh, **arrays), "a cached evaluation")
    except OSError:
        return False  # a full or read-only cache costs a recomputation, never the evaluation
    return True


def clear_cache(folder: str | os.PathLike | None = None) -> int:
    """Delete every cached evaluation (and stale temporary files); return how many entries went."""
    folder = Path(folder) if folder is not None else cache_folder()
    removed = 0
    if not folder.is_dir():
        return 0
    sweep_stale_temp_files(folder)
    for entry in folder.glob("*.npz"):
        try:
            entry.unlink()
            removed += 1
        except OSError:
            pass
    return removed


# ----------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class HistogramPair:
    """One score's histogram on the test set and the OOD set, as fractions, on shared ``edges``."""

    edges: np.ndarray
    in_fraction: np.ndarray
    ood_fraction: np.ndarray | None


@dataclass
class ColumnViews:
    """What one posterior's column of the Dataset tab draws (K classes, C chains).

    ``summary`` is the row of :func:`core.evaluate.evaluation_tables`' summary table;
    ``ood`` maps each score to its AUROC and AUPR (rows of the ood_detection table).
    """

    name: str
    summary: dict[str, Any]
    classwise_ece: np.ndarray  # (K,)
    reliability: ReliabilityDiagram
    soft_confusion: np.ndarray  # (K, K)
    hard_confusion: np.ndarray  # (K, K) counts
    per_class_error: np.ndarray  # (C, K)
    error_box: dict[str, np.ndarray]  # min, q1, median, q3, max, mean over chains, each (K,)
    rejection: dict[str, tuple[np.ndarray, np.ndarray]]
    oracle: tuple[np.ndarray, np.ndarray]
    histograms: dict[str, HistogramPair]
    ood: dict[str, dict[str, float]] = field(default_factory=dict)
    cached: bool = False

    @property
    def num_chains(self) -> int:
        return self.per_class_error.shape[0]

    @property
    def hard_confusion_rows(self) -> np.ndarray:
        """The confusion counts as shares of each true class's images (NaN rows where none)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.hard_confusion / self.hard_confusion.sum(1, keepdims=True)


@dataclass
class DatasetViews:
    """Everything the Dataset tab shows and exports, columns in the order given."""

    evaluation: Evaluation
    tables: dict[str, list[dict[str, Any]]]
    columns: list[ColumnViews]
    data: Dataset
    ood: Dataset | None = None
    #: For the faces test split: the photo behind each row of ``data`` (None for images).
    faces: FaceTestSet | None = None

    def column(self, name: str) -> ColumnViews:
        return next(c for c in self.columns if c.name == name)


def _evaluation_shell(data: Dataset, ood: Dataset | None, num_samples: int | None, seed: int,
                      num_classes: int) -> Evaluation:
    """The fields :func:`core.evaluate.evaluate` fills besides the results (for cached runs)."""
    class_names = data.class_names or tuple(str(k) for k in range(num_classes))
    return Evaluation(
        dataset=data.name, class_names=tuple(class_names), results={},
        ood_dataset=ood.name if ood is not None else None,
        settings={"num_samples": num_samples, "seed": seed, "level": 0.9,
                  "ece_bins": ECE_BINS, "uncertain_threshold": UNCERTAIN_THRESHOLD},
        data_source={"name": data.name, "images": len(data), **data.source},
        ood_source=None if ood is None else {"name": ood.name, "images": len(ood), **ood.source},
    )


def evaluate_dataset(
    items: Sequence[EvaluationItem],
    data: Dataset,
    ood: Dataset | None = None,
    *,
    num_samples: int | None = None,
    seed: int = 0,
    use_cache: bool = True,
    cache_only: bool = False,
    folder: str | os.PathLike | None = None,
) -> Generator[ProgressRecord, None, DatasetViews | None]:
    """Evaluate every posterior on ``data`` (and ``ood``), from the cache where possible.

    Yields a :class:`ProgressRecord` per batch whose ``step``/``total`` count images over all
    posteriors and sets; ``phase`` is the posterior's name and ``values`` hold ``index`` (its
    position), ``images_done`` and ``images_total`` (its own images, test and OOD set
    together) and ``cached`` (1.0 when it came from the cache). Stop iterating to cancel:
    nothing of an unfinished posterior is stored. Returns a :class:`DatasetViews`, or None
    when ``cache_only`` is set and some posterior is not in the cache (nothing is computed).
    """
    if not items:
        raise ValueError("no posterior to evaluate: add a column first")
    names = unique_names([item.name for item in items])
    folder = Path(folder) if folder is not None else cache_folder()
    per_posterior = len(data) + (len(ood) if ood is not None else 0)
    total = per_posterior * len(items)
    data_sha = dataset_sha256(data) if use_cache else ""
    ood_sha = dataset_sha256(ood) if use_cache and ood is not None else None
    shell = _evaluation_shell(data, ood, num_samples, seed, items[0].posterior.num_classes)
    files: dict[str, dict[str, str]] = {}
    cached: dict[str, bool] = {}
    yield ProgressRecord(0, total, {"index": 0.0, "images_done": 0.0, "images_total": float(per_posterior),
                                    "cached": 0.0}, names[0])
    for index, (name, item) in enumerate(zip(names, items, strict=True)):
        b = batch_size_for(item.posterior, num_samples)
        path = None
        if item.source is not None:
            sha = file_sha256(item.source)
            files[name] = {"file": str(Path(item.source).absolute()), "file_sha256": sha}
            if use_cache:
                path = folder / f"{cache_key(sha, data_sha, ood_sha, num_samples, seed, b)}.npz"
        hit = read_cache(path, data, ood) if path is not None else None
        base = index * per_posterior
        if hit is None and cache_only:
            return None
        if hit is not None:
            shell.results[name] = PosteriorEvaluation(item.posterior, hit[0], hit[1])
            cached[name] = True
            yield ProgressRecord(base + per_posterior, total, {
                "index": float(index), "images_done": float(per_posterior),
                "images_total": float(per_posterior), "cached": 1.0}, name)
            continue
        data_batches = math.ceil(len(data) / b)
        run = evaluate({name: item.posterior}, data, ood, num_samples=num_samples, seed=seed, batch_size=b)
        try:
            while True:
                record = next(run)
                done = int(record.values.get("examples", 0)) + (len(data) if record.step > data_batches else 0)
                yield ProgressRecord(base + done, total, {
                    "index": float(index), "images_done": float(done),
                    "images_total": float(per_posterior), "cached": 0.0}, name)
        except StopIteration as stop:
            result = stop.value.results[name]
        finally:
            run.close()
        shell.results[name] = result
        cached[name] = False
        if path is not None:
            write_cache(path, result)
    if files:
        shell.settings["posterior_files"] = files
    return build_views(shell, data, ood, cached)


def build_views(ev: Evaluation, data: Dataset, ood: Dataset | None = None,
                cached: dict[str, bool] | None = None) -> DatasetViews:
    """The tables and every column's arrays of an evaluation (the per-image table left out)."""
    tables = evaluation_tables(ev)
    tables.pop("scores", None)
    k = len(ev.class_names)
    edges = {
        score: score_edges(score, k, [
            preds.scores[score] for r in ev.results.values() for preds in (r.data, r.ood) if preds is not None
        ])
        for score in SCORES
    }
    columns = []
    for name, r in ev.results.items():
        d = r.data
        summary = next(row for row in tables["summary"] if row["posterior"] == name)
        classwise = np.array([row["ece"] if row["ece"] is not None else np.nan
                              for row in tables["classwise_ece"] if row["posterior"] == name], dtype=np.float64)
        errors = per_class_error(d.chain_predictions, d.labels, k)
        rejection = {s: rejection_curve(d.correct, d.scores[s]) for s in REJECTION_SCORES}
        rates, acc = rejection["total"]
        histograms = {}
        for score in SCORES:
            in_frac, _ = score_histograms(d.scores[score], score, k, edges=edges[score])
            ood_frac = score_histograms(r.ood.scores[score], score, k, edges=edges[score])[0] if r.ood is not None else None
            histograms[score] = HistogramPair(edges[score], in_frac, ood_frac)
        ood_rows = {row["score"]: {key: row[key] for key in ("auroc", "aupr_in", "aupr_out")}
                    for row in tables.get("ood_detection", []) if row["posterior"] == name}
        columns.append(ColumnViews(
            name=name, summary=summary, classwise_ece=classwise,
            reliability=reliability_diagram(d.mean_proba, d.labels),
            soft_confusion=soft_confusion_matrix(d.mean_proba, d.labels),
            hard_confusion=confusion_matrix(d.predictions, d.labels, k),
            per_class_error=errors, error_box=box_statistics(errors),
            rejection=rejection, oracle=(rates, oracle_rejection_curve(acc[0], rates)),
            histograms=histograms, ood=ood_rows, cached=bool((cached or {}).get(name, False)),
        ))
    return DatasetViews(ev, tables, columns, data, ood)


def run_evaluation(
    items: Sequence[EvaluationItem],
    dataset: str,
    ood: str | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    *,
    num_samples: int | None = None,
    seed: int = 0,
    use_cache: bool = True,
    cache_only: bool = False,
    folder: str | os.PathLike | None = None,
) -> Generator[ProgressRecord, None, DatasetViews | None]:
    """Load the sets (:func:`open_sets`), then :func:`evaluate_dataset`; the GUI's worker runs this.

    The first record (``phase`` "loading", total 0) comes before the files are read. For the
    faces test split, the descriptor extraction's records follow (``phase`` "descriptors",
    ``step``/``total`` in faces) when they are not cached yet; the views then carry the
    photos (:attr:`DatasetViews.faces`). The descriptor extraction runs dlib: iterate this in a
    plain thread, not a Qt pool thread (see :class:`app.workers.PythonThreadCall`).
    """
    yield ProgressRecord(0, 0, {}, "loading")
    sets = yield from open_sets(dataset, ood, data_dir, limit, cache_only=cache_only)
    if sets is None:
        return None
    data, other, faces = sets
    views = yield from evaluate_dataset(items, data, other, num_samples=num_samples, seed=seed,
                                        use_cache=use_cache, cache_only=cache_only, folder=folder)
    if views is not None:
        views.faces = faces
    return views


# ----------------------------------------------------------------------------- images behind a plot


@dataclass(frozen=True)
class ImageSelection:
    """Test images behind one cell or bar: their indices in the set, most telling first."""

    indices: np.ndarray
    set_name: str
    description: str


def confusion_cell_images(views: DatasetViews, name: str, true_class: int, predicted_class: int,
                          soft: bool = False) -> ImageSelection:
    """The images behind a confusion-matrix cell of one posterior.

    Hard cell: exactly the images of ``true_class`` predicted as ``predicted_class``, the most
    confident mistakes (highest p̄ of the predicted class) first. Soft cell: the images of
    ``true_class`` that give ``predicted_class`` a mean probability of at least
    :data:`SOFT_CELL_MIN`, highest first.
    """
    d = views.evaluation.results[name].data
    names = views.evaluation.class_names
    p = d.mean_proba[:, predicted_class]
    members = (f"faces aged {names[true_class]}" if is_face_set(views.evaluation.dataset)
               else f"{names[true_class]}s")
    if soft:
        chosen = np.flatnonzero((d.labels == true_class) & (p >= SOFT_CELL_MIN))
        text = (f"{members} given at least {SOFT_CELL_MIN:.0%} probability of "
                f"being {names[predicted_class]}")
    else:
        chosen = np.flatnonzero((d.labels == true_class) & (d.predictions == predicted_class))
        text = f"{members} predicted as {names[predicted_class]}"
    order = np.argsort(-p[chosen], kind="stable")
    return ImageSelection(chosen[order], views.evaluation.dataset, text)


def histogram_bin_indices(scores: np.ndarray, edges: np.ndarray, bin_index: int) -> np.ndarray:
    """Indices of the values in bin ``bin_index`` of :func:`core.metrics.score_histograms`.

    Bins are [lo, hi) except the last, [lo, hi]; values outside the edges count in the end
    bins, as there.
    """
    values = np.clip(np.asarray(scores, dtype=np.float64), edges[0], edges[-1])
    which = np.searchsorted(edges, values, side="right") - 1
    which = np.clip(which, 0, len(edges) - 2)
    return np.flatnonzero(which == bin_index)


def histogram_bin_images(views: DatasetViews, name: str, score: str, bin_index: int,
                         ood: bool = False) -> ImageSelection:
    """The images of the test (or OOD) set whose ``score`` falls in one histogram bin,
    the most uncertain first."""
    r = views.evaluation.results[name]
    preds = r.ood if ood else r.data
    if preds is None:
        raise ValueError("no out-of-distribution set was evaluated")
    column = views.column(name)
    edges = column.histograms[score].edges
    chosen = histogram_bin_indices(preds.scores[score], edges, bin_index)
    order = np.argsort(-preds.scores[score][chosen], kind="stable")
    set_name = views.evaluation.ood_dataset if ood else views.evaluation.dataset
    text = f"{SCORE_WORDS.get(score, score)} from {edges[bin_index]:.3g} to {edges[bin_index + 1]:.3g}"
    return ImageSelection(chosen[order], set_name or "", text)


# ----------------------------------------------------------------------------- export


def export_dataset_view(views: DatasetViews, view: str, path: str | os.PathLike) -> list[Path]:
    """Write one view of every posterior side by side, as ``bayescope-cli evaluate`` does.

    ``.png``/``.svg`` → the figure plus ``<stem>.csv`` and ``<stem>.json`` beside it;
    ``.csv``/``.json`` → the numbers only. The metrics view has no figure (CSV or JSON only).
    """
    from core.input_figures import _export, writing_into

    if view not in DATASET_VIEWS:
        raise ValueError(f"unknown view {view!r}; choose from {', '.join(DATASET_VIEWS)}")
    rows = views.tables.get(view, [])
    if view == "ood_histograms":
        rows = views.tables.get("ood_histograms", [])
        if not rows:
            raise ValueError("no out-of-distribution set was evaluated, so there are no histograms to export")
    path = Path(path)
    if view == "summary":
        if path.suffix.lower() not in (".csv", ".json"):
            raise ValueError("the metrics are a table: export them as .csv or .json")
        from core.evaluate import write_table

        with writing_into(path.parent):
            return write_table(rows, path.parent, path.stem, formats=(path.suffix.lower().lstrip("."),))

    def figure() -> Any:
        return evaluation_figures(views.evaluation)[view]

    return _export(figure, rows, path)


# ----------------------------------------------------------------------------- HTML report

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; } h3 { font-size: 1.05em; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; max-width: 60em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f3f3f3; } td.text { text-align: left; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
"""

#: What each figure shows, for a person who never read the papers.
_CAPTIONS: dict[str, str] = {
    "reliability": "Reliability: for the inputs a posterior answers with a given confidence, how often it is "
                   "right. Bars on the dashed diagonal mean the confidence can be trusted; the hatched gaps "
                   "are the calibration error (ECE is their weighted mean).",
    "confusion_soft": "Soft confusion: for each true class (row), the mean probability given to each class "
                      "(column), as the D-SGHMC paper's correlation matrices. Mass off the diagonal shows which "
                      "classes a posterior hesitates between.",
    "confusion_hard": "Confusion: for each true class (row), the share of its images predicted as each class.",
    "per_class_error": "Error rate per true class; for posteriors with several chains, a box over the chains "
                       "and a dot per chain (the D-SGHMC paper's box plots).",
    "rejection": "Accuracy on the inputs kept when the most uncertain are referred to a person, by each "
                 "uncertainty score; the dotted line is the best possible (errors referred first).",
    "ood_histograms": "How uncertain each posterior is on the test set and on the out-of-distribution set, per "
                      "score (log scale). The further apart, the better the score tells unfamiliar inputs "
                      "apart (AUROC: 0.5 = chance, 1 = perfect).",
    "rotation": "One image rotated from 0° to 180°: class probabilities and uncertainty against the angle.",
}

_SVG_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.S)
_SVG_ID = re.compile(r'(\bid="|href="#|url\(#)')


def _inline_svg(fig: Any, prefix: str) -> str:
    """A figure as inline SVG (text kept as text), its ids prefixed so several can share a page."""
    import matplotlib

    buffer = io.StringIO()
    # a fixed salt and no date: the same evaluation gives the same page, from the app or the CLI
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "bayescope"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = _SVG_PROLOG.sub("", buffer.getvalue(), count=1)
    return _SVG_ID.sub(lambda m: m.group(1) + prefix, text)


def _cell(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, float):
        return f"<td>{value:.{digits}f}</td>" if math.isfinite(value) else "<td>–</td>"
    if isinstance(value, int):
        return f"<td>{value:,}</td>"
    if value is None:
        return "<td>–</td>"
    return f'<td class="text">{html.escape(str(value))}</td>'


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def report_provenance(ev: Evaluation) -> dict[str, Any]:
    """Where everything in the report comes from: settings, data sets and posteriors."""
    files = ev.settings.get("posterior_files", {})
    return {
        "bayescope": code_version(),
        "settings": {k: v for k, v in ev.settings.items() if k != "posterior_files"},
        "data": ev.data_source,
        "ood_data": ev.ood_source,
        "posteriors": {
            name: {**provenance(r.posterior, files.get(name, {}).get("file")),
                   "file_sha256": files.get(name, {}).get("file_sha256"),
                   "samples_used": r.data.num_samples, "chains": r.data.num_chains}
            for name, r in ev.results.items()
        },
    }


def report_html(ev: Evaluation, tables: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """The self-contained HTML report of an evaluation: figures as inline SVG, tables, provenance."""
    tables = tables if tables is not None else evaluation_tables(ev)
    n = len(ev.results)
    data_words = dataset_words(ev.dataset)
    images = ev.data_source.get("images")
    heading = f"{plural(n, 'posterior')} on the {data_words}"
    if ev.ood_dataset:
        heading += f", against the {dataset_words(ev.ood_dataset)}"
    asked = ev.settings.get("num_samples")
    settings = [f"{images:,} test images" if isinstance(images, int) else "",
                f"{ev.ood_source['images']:,} out-of-distribution images" if ev.ood_source else "",
                f"up to {plural(asked, 'draw')} per posterior" if asked else "each posterior's own number of draws",
                f"seed {ev.settings.get('seed')}", f"{ev.settings.get('ece_bins', ECE_BINS)} calibration bins"]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>bayescope: {html.escape(heading)}</title>", f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(heading)}</h1>",
        f"<p>{html.escape('; '.join(s for s in settings if s))}.</p>",
        "<h2>At a glance</h2>",
    ]
    summary_rows = [
        [row["posterior"], method_label(row["method"]), row["samples"], row["chains"],
         None if row["accuracy"] is None else 100 * row["accuracy"], row["nll"], row["brier"], row["ece"],
         row["classwise_ece"], None if row["uncertain_fraction"] is None else 100 * row["uncertain_fraction"]]
        for row in tables["summary"]
    ]
    parts.append(_table(["posterior", "method", "draws", "chains", "accuracy %", "NLL (nats)", "Brier",
                         "ECE", "classwise ECE", "uncertain %"], summary_rows))
    parts.append("<p>NLL: mean −log of the probability given to the true class. Brier: mean squared distance "
                 "between the probabilities and the true class. ECE: mean gap between confidence and accuracy. "
                 f"Uncertain: the top two classes' draws overlap (Bhattacharyya coefficient above "
                 f"{UNCERTAIN_THRESHOLD:g}).</p>")
    if tables.get("ood_detection"):
        parts.append(f"<h2>Telling the {html.escape(dataset_words(ev.ood_dataset or ''))} apart</h2>")
        parts.append(_table(
            ["posterior", "score", "AUROC", "AUPR (out-of-distribution)", "AUPR (in-distribution)"],
            [[row["posterior"], SCORE_WORDS.get(row["score"], row["score"]), row["auroc"], row["aupr_out"],
              row["aupr_in"]] for row in tables["ood_detection"]]))
    parts.append("<h2>Figures</h2>")
    for i, (key, fig) in enumerate(evaluation_figures(ev).items()):
        title = DATASET_VIEWS.get(key, "Rotation sweep" if key == "rotation" else key)
        parts.append(f'<figure id="{key}"><h3>{html.escape(title)}</h3>{_inline_svg(fig, f"f{i}-")}'
                     f"<figcaption>{html.escape(_CAPTIONS.get(key, ''))}</figcaption></figure>")
    names = list(ev.class_names)
    parts.append("<h2>Per class</h2><h3>Classwise calibration error</h3>")
    parts.append(_table(["posterior", *names], [
        [name, *[row["ece"] for row in tables["classwise_ece"] if row["posterior"] == name]] for name in ev.results]))
    parts.append("<h3>Error rate per true class (%, median over chains)</h3>")
    parts.append(_table(["posterior", *names], [
        [name, *[None if row["median"] is None else 100 * row["median"]
                 for row in tables["per_class_error_box"] if row["posterior"] == name]] for name in ev.results]))
    record = report_provenance(ev)
    parts.append("<h2>Provenance</h2>")
    for name, info in record["posteriors"].items():
        words = METHOD_DESCRIPTIONS.get(info["method"], "")
        parts.append(f"<h3>{html.escape(name)}</h3><p>{html.escape(words)}</p>")
        parts.append(f"<pre>{html.escape(json.dumps(info, indent=2, default=str))}</pre>")
    parts.append("<h3>Data and settings</h3>")
    rest = {k: v for k, v in record.items() if k != "posteriors"}
    parts.append(f"<pre>{html.escape(json.dumps(rest, indent=2, default=str))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html_report(ev: Evaluation, path: str | os.PathLike,
                      tables: dict[str, list[dict[str, Any]]] | None = None) -> Path:
    """Write :func:`report_html` to ``path`` atomically (a failure leaves no partial file)."""
    path = Path(path)
    check_output_file(path, "the report")
    page = report_html(ev, tables).encode("utf-8")
    return atomic_write(path, lambda fh: fh.write(page), "the report")

