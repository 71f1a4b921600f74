"""What a data-set evaluation computed and its tables: :class:`Evaluation` (one
:class:`PosteriorEvaluation` per posterior) and :func:`evaluation_tables`, the long-format
tables behind the report, the CLI's files and the Dataset tab.

The run that fills them, :func:`core.analysis.evaluation.evaluate`, lives in
:mod:`core.analysis.evaluation`, which also exports these names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.analysis.calibration import top_label_smooth_ece
from core.analysis.metrics import (
    REJECTION_SCORES,
    box_statistics,
    brier_score,
    classwise_calibration_error,
    confusion_matrix,
    expected_calibration_error,
    negative_log_likelihood,
    ood_detection,
    oracle_rejection_curve,
    per_class_error,
    rejection_curve,
    reliability_diagram,
    score_edges,
    score_histograms,
    soft_confusion_matrix,
)
from core.analysis.metrics import accuracy as accuracy_of
from core.analysis.ood_sets import ood_set_rows
from core.analysis.scoring import SCORES
from core.analysis.streaming import DatasetPredictions
from core.analysis.uncertainty import UNCERTAIN_THRESHOLD
from core.engine.inference.base import Posterior


@dataclass
class PosteriorEvaluation:
    """One posterior's per-example results on the data set, the OOD set and the sweep."""

    posterior: Posterior
    data: DatasetPredictions
    ood: DatasetPredictions | None = None  # the first OOD set's (the histograms show it)
    rotation: Any = None  # RotationSweep
    #: Every OOD set's predictions by the set's name, in the order given (the first is ``ood``).
    ood_sets: dict[str, DatasetPredictions] = field(default_factory=dict)


@dataclass
class Evaluation:
    """Everything :func:`evaluate` computed (tables and figures are derived from it)."""

    dataset: str
    class_names: tuple[str, ...]
    results: dict[str, PosteriorEvaluation]
    ood_dataset: str | None = None  # the first OOD set
    rotation_label: str | None = None
    rotation_images: np.ndarray | None = None  # (A, H, W)
    settings: dict[str, Any] = field(default_factory=dict)
    data_source: dict[str, Any] = field(default_factory=dict)
    ood_source: dict[str, Any] | None = None
    #: Posterior name → its conformal sets' coverage on the data set
    #: (:func:`core.analysis.conformal_run.attach_conformal`: ``rows``, or ``missing``: a sentence).
    conformal: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Every OOD set's name (unique, the first is ``ood_dataset``) and what was read of it.
    ood_datasets: tuple[str, ...] = ()
    ood_sources: list[dict[str, Any]] = field(default_factory=list)

    def ood_names(self) -> tuple[str, ...]:
        """The OOD sets' names, in order (an evaluation made with one set names it alone)."""
        return self.ood_datasets or ((self.ood_dataset,) if self.ood_dataset else ())

    def ood_predictions(self, name: str) -> dict[str, DatasetPredictions]:
        """One posterior's predictions on every OOD set, by set name."""
        r = self.results[name]
        if r.ood_sets:
            return dict(r.ood_sets)
        return {self.ood_dataset or "OOD": r.ood} if r.ood is not None else {}


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
        # every OOD set, every score, every posterior: where a ranking changes between sets
        t["ood_sets"] = ood_set_rows({name: r.data.scores for name, r in ev.results.items()},
                                     {set_name: {name: ev.ood_predictions(name)[set_name].scores
                                                 for name in ev.results}
                                      for set_name in ev.ood_names()})
    if ev.rotation_label:
        t["rotation"], t["rotation_uncertainty"] = [], []
    if any(entry.get("rows") for entry in ev.conformal.values()):
        t["conformal"] = [{"posterior": name, **row} for name, entry in ev.conformal.items()
                          for row in entry.get("rows", [])]
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
            "smooth_ece": top_label_smooth_ece(proba, labels),
            "uncertain_fraction": float((d.scores["top_two_overlap"] > UNCERTAIN_THRESHOLD).mean()),
        }
        for score in ("total", "aleatoric", "epistemic"):
            row[f"mean_{score}"] = float(d.scores[score].mean())
        aps = next((c for c in ev.conformal.get(name, {}).get("rows", []) if c["score"] == "aps"), None)
        row.update({  # the adaptive sets' (APS) coverage, as a column shows them (None: not calibrated)
            "conformal_coverage": aps["coverage"] if aps else None,
            "conformal_set_size": aps["mean_set_size"] if aps else None,
            "conformal_guaranteed_lower": aps["guaranteed_lower"] if aps else None,
            "conformal_guaranteed_upper": aps["guaranteed_upper"] if aps else None,
        })
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
        every_set = [(ev.dataset, d), *ev.ood_predictions(name).items()]
        for set_name, preds in every_set:
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
