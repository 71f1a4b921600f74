"""What the Dataset tab shows of several posteriors: every view's arrays, and the images behind them.

:class:`DatasetViews` holds the :class:`~core.analysis.evaluation_results.Evaluation`, its tables
(:func:`core.analysis.evaluation_results.evaluation_tables`, without the per-image one) and one
:class:`ColumnViews` per posterior with the arrays its plots draw (:func:`build_views`). The
test images behind a confusion cell or a histogram bin come from :func:`confusion_cell_images`
and :func:`histogram_bin_images`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.analysis.evaluation import ood_fields, ood_list, resolve_dataset, set_names
from core.analysis.evaluation_results import Evaluation, evaluation_tables
from core.analysis.metrics import (
    ECE_BINS,
    REJECTION_SCORES,
    ReliabilityDiagram,
    box_statistics,
    confusion_matrix,
    oracle_rejection_curve,
    per_class_error,
    rejection_curve,
    reliability_diagram,
    score_edges,
    score_histograms,
    soft_confusion_matrix,
)
from core.analysis.scoring import SCORES
from core.analysis.streaming import SAMPLE_BUDGET, chain_ids
from core.analysis.uncertainty import UNCERTAIN_THRESHOLD
from core.engine.faces.testset import FaceTestSet, is_face_set
from core.engine.inference.base import Dataset, Posterior, ProgressRecord

#: Each uncertainty score in words (every one is "higher = more uncertain").
SCORE_WORDS: dict[str, str] = {
    "total": "total uncertainty (entropy of the mean)",
    "aleatoric": "aleatoric (expected entropy)",
    "epistemic": "epistemic (mutual information)",
    "epistemic_variance": "epistemic (variance of the draws)",
    "one_minus_max_prob": "1 − highest mean probability",
    "top_two_overlap": "overlap of the top two classes",
}

#: The same in fewer words, for an axis too narrow for the above.
SHORT_SCORE_WORDS: dict[str, str] = {
    "total": "total uncertainty (nats)",
    "aleatoric": "aleatoric (nats)",
    "epistemic": "epistemic (nats)",
    "epistemic_variance": "epistemic variance",
    "one_minus_max_prob": "1 − top probability",
    "top_two_overlap": "top-two overlap",
}

#: Views that export, by the key that :func:`core.outputs.report.evaluation_figures` and
#: :func:`core.analysis.evaluation_results.evaluation_tables` use, with their titles.
DATASET_VIEWS: dict[str, str] = {
    "summary": "Metrics",
    "reliability": "Reliability diagram",
    "confusion_soft": "Soft confusion matrix",
    "confusion_hard": "Confusion matrix",
    "per_class_error": "Per-class error over chains",
    "rejection": "Accuracy when the most uncertain inputs are referred",
    "ood_histograms": "Uncertainty in and out of distribution",
    "ood_sets": "Telling each unfamiliar set apart (AUROC)",
}

#: The views that are tables only (exported as CSV or JSON, no figure).
TABLE_VIEWS = ("summary", "ood_sets")

#: A soft-confusion cell lists the images of its true class that give its predicted class at
#: least this mean probability (below it an image hardly contributes to the cell).
SOFT_CELL_MIN = 0.05


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
    ood: str | Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
) -> tuple[Dataset, Dataset | list[Dataset] | None]:
    """The test set and the optional OOD set (known names or IDX folders; a list of them gives a
    list), each cut to ``limit``."""
    from core.engine.runner import drain

    data, other, _ = drain(open_sets(dataset, ood, data_dir, limit))
    return data, other


def open_sets(
    dataset: str,
    ood: str | Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    *,
    cache_only: bool = False,
    image_size: int | None = None,
    channels: int | None = None,
    trained_on: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> Generator[ProgressRecord, None, tuple[Dataset, Dataset | None, FaceTestSet | None] | None]:
    """:func:`load_sets` with progress, and the photos of the faces test split.

    Folders of a person's images are read at ``image_size`` and ``channels`` (the models'),
    as :func:`core.analysis.evaluation.resolve_dataset` reads them; ``trained_on`` (column name →
    its posterior's ``info["training_data"]``) splits them as training did and compares the folder
    with that record (``data.source["data_check"]["note"]`` says what changed).

    The faces test split (:data:`core.engine.faces.testset.FACE_TEST_SET`) yields the descriptor
    extraction's progress (phase ``"descriptors"``), takes ``limit`` faces spread over the
    split (:func:`core.engine.faces.testset.spread_order`; only those are described), has no
    OOD set, and comes with its photos (the third item; None for other sets). With
    ``cache_only``, returns None rather than computing descriptors.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"the number of images must be at least 1, got {limit}")
    if is_face_set(dataset):
        if ood:
            raise ValueError("face heads are evaluated without an out-of-distribution set: they read descriptors "
                             "of faces, and no other set of faces with known ages is at hand")
        from core.engine.faces.testset import load_face_test_set, utkface_location

        # only the faces asked for are described (the first of the split's spread order)
        faces = yield from load_face_test_set(utkface_location(data_dir), cache_only=cache_only, limit=limit)
        if faces is None:
            return None
        return faces.data, None, faces
    shape = {"image_size": image_size, "channels": channels}
    data = resolve_dataset(dataset, data_dir, **shape, trained_on=trained_on).first(limit)
    if ood is None or isinstance(ood, str):
        other = resolve_dataset(ood, data_dir, **shape).first(limit) if ood else None
        return data, other, None
    return data, [resolve_dataset(spec, data_dir, **shape).first(limit) for spec in ood], None


def dataset_sha256(data: Dataset) -> str:
    """SHA-256 of a data set's images and labels as the models see them (so of its count too)."""
    h = hashlib.sha256()
    h.update(repr((tuple(data.x.shape), str(data.x.dtype))).encode())
    h.update(np.ascontiguousarray(data.x.numpy()))  # hashed in place, never copied
    h.update(np.ascontiguousarray(data.y.numpy().astype(np.int64)))
    return h.hexdigest()


def batch_size_for(posterior: Posterior, num_samples: int | None) -> int:
    """Images per batch, as :func:`core.analysis.evaluation.evaluate` chooses them by default.

    Batches decide which random masks each image gets, so the same rule gives the CLI's numbers.
    """
    return max(1, SAMPLE_BUDGET // len(chain_ids(posterior, num_samples)))


@dataclass(frozen=True)
class HistogramPair:
    """One score's histogram on the test set and the OOD set, as fractions, on shared ``edges``."""

    edges: np.ndarray
    in_fraction: np.ndarray
    ood_fraction: np.ndarray | None


@dataclass
class ColumnViews:
    """What one posterior's column of the Dataset tab draws (K classes, C chains).

    ``summary`` is the row of :func:`core.analysis.evaluation_results.evaluation_tables`' summary table;
    ``ood`` maps each score to its AUROC and AUPR (rows of the ood_detection table: the first OOD
    set); ``ood_sets`` maps every OOD set to score → its row of the ood_sets table (AUROC, AUPR,
    rank among the columns, best).
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
    ood_sets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

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
    ood: Dataset | None = None  # the first OOD set (its images are behind the histograms' bars)
    #: For the faces test split: the photo behind each row of ``data`` (None for images).
    faces: FaceTestSet | None = None
    #: Every OOD set, in order (the first is ``ood``).
    ood_sets: list[Dataset] = field(default_factory=list)

    def column(self, name: str) -> ColumnViews:
        return next(c for c in self.columns if c.name == name)


def _evaluation_shell(data: Dataset, ood: Dataset | Sequence[Dataset] | None, num_samples: int | None, seed: int,
                      num_classes: int) -> Evaluation:
    """The fields :func:`core.analysis.evaluation.evaluate` fills besides the results (for cached runs)."""
    class_names = data.class_names or tuple(str(k) for k in range(num_classes))
    oods = ood_list(ood)
    return Evaluation(
        dataset=data.name, class_names=tuple(class_names), results={},
        settings={"num_samples": num_samples, "seed": seed, "level": 0.9,
                  "ece_bins": ECE_BINS, "uncertain_threshold": UNCERTAIN_THRESHOLD},
        data_source={"name": data.name, "images": len(data), **data.source},
        **ood_fields(oods, set_names(oods)),
    )


def build_views(ev: Evaluation, data: Dataset, ood: Dataset | Sequence[Dataset] | None = None,
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
        per_set: dict[str, dict[str, dict[str, Any]]] = {set_name: {} for set_name in ev.ood_names()}
        for row in tables.get("ood_sets", []):
            if row["posterior"] == name:
                per_set[row["set"]][row["score"]] = row
        columns.append(ColumnViews(
            name=name, summary=summary, classwise_ece=classwise,
            reliability=reliability_diagram(d.mean_proba, d.labels),
            soft_confusion=soft_confusion_matrix(d.mean_proba, d.labels),
            hard_confusion=confusion_matrix(d.predictions, d.labels, k),
            per_class_error=errors, error_box=box_statistics(errors),
            rejection=rejection, oracle=(rates, oracle_rejection_curve(acc[0], rates)),
            histograms=histograms, ood=ood_rows, cached=bool((cached or {}).get(name, False)),
            ood_sets=per_set,
        ))
    oods = ood_list(ood)
    return DatasetViews(ev, tables, columns, data, oods[0] if oods else None, ood_sets=oods)


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
    faces = is_face_set(views.evaluation.dataset)  # "faces aged 0-2 predicted as 3-7"
    digits = all(len(n) == 1 and n.isdigit() for n in names)  # "7s predicted as 1"; other names quoted
    called = names[predicted_class] if digits or faces else f"“{names[predicted_class]}”"
    members = (f"faces aged {names[true_class]}" if faces
               else f"{names[true_class]}s" if digits else f"true class “{names[true_class]}”")
    if soft:
        chosen = np.flatnonzero((d.labels == true_class) & (p >= SOFT_CELL_MIN))
        text = f"{members} given at least {SOFT_CELL_MIN:.0%} probability of being {called}"
    else:
        chosen = np.flatnonzero((d.labels == true_class) & (d.predictions == predicted_class))
        text = f"{members} predicted as {called}"
    order = np.argsort(-p[chosen], kind="stable")
    return ImageSelection(chosen[order], views.evaluation.dataset, text)


def histogram_bin_indices(scores: np.ndarray, edges: np.ndarray, bin_index: int) -> np.ndarray:
    """Indices of the values in bin ``bin_index`` of :func:`core.analysis.metrics.score_histograms`.

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
