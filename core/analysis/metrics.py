"""Data-set metrics of a posterior: calibration, confusion, rejection, OOD detection, sweeps.

:func:`core.analysis.streaming.predict_dataset` streams a data set through a posterior and
keeps only per-example results (:class:`~core.analysis.streaming.DatasetPredictions`: the mean
predictive p̄, the uncertainty scores of :mod:`core.analysis.scoring` and each chain's
predicted class), never the S×N×K sample tensor. The metric functions here work on plain
arrays, so they are tested on synthetic inputs:

* :func:`accuracy`, :func:`negative_log_likelihood`, :func:`brier_score`
* :func:`expected_calibration_error` (top-label, 15 equal-width bins),
  :func:`classwise_calibration_error`, :func:`reliability_diagram`
* :func:`confusion_matrix` (hard counts) and :func:`soft_confusion_matrix` (mean p̄ per
  true class, the D-SGHMC paper's "correlation matrix" of true vs predicted class)
* :func:`per_class_error` per chain and :func:`box_statistics` (the paper's Figs. 5, 11)
* :func:`rejection_curve`: accuracy on the retained inputs when the most uncertain are referred
* :func:`auroc`, :func:`average_precision`, :func:`ood_detection`, :func:`score_histograms`
* :func:`rotation_sweep` (Gal & Ghahramani's rotated digit)
* :func:`drop_rate_sensitivity` (the D-SGHMC paper's Figs. 2, 9)
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.scoring import SCORES
from core.analysis.uncertainty import (
    credible_interval,
    expected_coverage,
    expected_entropy,
    mutual_information,
    predictive_entropy,
)
from core.engine.data.preprocess import rotate
from core.engine.inference.base import Posterior, ProgressRecord

ECE_BINS = 15

#: The scores by which inputs are referred in :func:`rejection_curve` (entropy form).
REJECTION_SCORES: tuple[str, ...] = ("total", "epistemic", "aleatoric")


def score_range(score: str, num_classes: int) -> tuple[float, float]:
    """The fixed range of a score, so histograms are comparable across methods and sets."""
    if score in ("total", "aleatoric", "epistemic"):
        return 0.0, math.log(num_classes)
    if score in ("epistemic_variance", "one_minus_max_prob"):
        return 0.0, 1.0 - 1.0 / num_classes
    if score == "top_two_overlap":
        return 0.0, 1.0
    raise ValueError(f"unknown score {score!r}; choose from {SCORES}")


# ----------------------------------------------------------------------------- basic metrics


def _check(proba: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    proba, labels = np.asarray(proba, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    if proba.ndim != 2 or labels.shape != (proba.shape[0],):
        raise ValueError(f"expected proba (N, K) and labels (N,), got {proba.shape} and {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= proba.shape[1]):
        raise ValueError(f"labels must lie in [0, {proba.shape[1]}), got {labels.min()}..{labels.max()}")
    return proba, labels


def accuracy(proba: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of examples whose most probable class is the true one."""
    proba, labels = _check(proba, labels)
    return float((proba.argmax(1) == labels).mean())


def negative_log_likelihood(proba: np.ndarray, labels: np.ndarray, eps: float = 1e-12) -> float:
    """Mean −log p̄_y (nats); probabilities are floored at ``eps`` to keep it finite."""
    proba, labels = _check(proba, labels)
    return float(-np.log(np.maximum(proba[np.arange(len(labels)), labels], eps)).mean())


def brier_score(proba: np.ndarray, labels: np.ndarray) -> float:
    """Mean Σ_k (p̄_k − 1[y = k])², the multi-class Brier score in [0, 2]."""
    proba, labels = _check(proba, labels)
    target = np.eye(proba.shape[1])[labels]
    return float(((proba - target) ** 2).sum(1).mean())


@dataclass(frozen=True)
class ReliabilityDiagram:
    """Per confidence bin: edges (B+1,), counts, mean confidence and accuracy (B,).

    Empty bins have NaN confidence and accuracy.
    """

    edges: np.ndarray
    counts: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray

    @property
    def ece(self) -> float:
        """Σ_b (n_b / N) |acc_b − conf_b| over non-empty bins."""
        n = self.counts.sum()
        if n == 0:
            return float("nan")
        filled = self.counts > 0
        gaps = np.abs(self.accuracy[filled] - self.confidence[filled])
        return float((self.counts[filled] / n * gaps).sum())


def _binned(confidence: np.ndarray, hit: np.ndarray, bins: int) -> ReliabilityDiagram:
    edges = np.linspace(0.0, 1.0, bins + 1)
    # Bins are (lo, hi], the first also holds 0; a confidence of exactly 1 lands in the last.
    index = np.clip(np.ceil(confidence * bins).astype(np.int64) - 1, 0, bins - 1)
    counts = np.bincount(index, minlength=bins).astype(np.float64)
    conf_sum = np.bincount(index, weights=confidence, minlength=bins)
    hit_sum = np.bincount(index, weights=hit.astype(np.float64), minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return ReliabilityDiagram(edges, counts, conf_sum / counts, hit_sum / counts)


def reliability_diagram(proba: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> ReliabilityDiagram:
    """Top-label reliability: confidence max_k p̄_k against accuracy, in equal-width bins."""
    proba, labels = _check(proba, labels)
    return _binned(proba.max(1), proba.argmax(1) == labels, bins)


def expected_calibration_error(proba: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> float:
    """Top-label ECE (Guo et al. 2017) with ``bins`` equal-width confidence bins."""
    return reliability_diagram(proba, labels, bins).ece


def classwise_calibration_error(
    proba: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS
) -> tuple[float, np.ndarray]:
    """Classwise ECE (Kull et al. 2019): for each class k, the ECE of p̄_k against 1[y = k].

    Returns ``(mean over classes, per-class values (K,))``.
    """
    proba, labels = _check(proba, labels)
    per_class = np.array(
        [_binned(proba[:, k], labels == k, bins).ece for k in range(proba.shape[1])]
    )
    return float(per_class.mean()), per_class


def confusion_matrix(predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Counts (K, K): row = true class, column = predicted class."""
    predictions, labels = np.asarray(predictions, np.int64), np.asarray(labels, np.int64)
    flat = labels * num_classes + predictions
    return np.bincount(flat, minlength=num_classes**2).reshape(num_classes, num_classes)


def soft_confusion_matrix(proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean p̄ of each class over the examples of each true class: (K, K), rows sum to 1.

    Rows of classes without examples are NaN.
    """
    proba, labels = _check(proba, labels)
    k = proba.shape[1]
    sums = np.zeros((k, k))
    np.add.at(sums, labels, proba)
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts[:, None]


def per_class_error(chain_predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Error rate of each chain on each true class: (C, K); NaN for classes without examples.

    ``chain_predictions`` (C, N) holds each chain's predicted class (a 1-d array is one chain).
    """
    preds = np.atleast_2d(np.asarray(chain_predictions, np.int64))
    labels = np.asarray(labels, np.int64)
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
    errors = np.stack(
        [np.bincount(labels, weights=(p != labels).astype(np.float64), minlength=num_classes) for p in preds]
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return errors / counts


def box_statistics(values: np.ndarray) -> dict[str, np.ndarray]:
    """Box-plot numbers over the first axis of ``values`` (C, K): min, q1, median, q3, max, mean.

    A class with no value at all (NaN in every chain: no test image of that class) gets NaN
    statistics, quietly: it is a fact about the data set, not a numerical accident.
    """
    values = np.asarray(values, dtype=np.float64)
    empty = np.isnan(values).all(axis=0)
    filled = np.where(empty, 0.0, values)
    q = np.nanquantile(filled, [0.0, 0.25, 0.5, 0.75, 1.0], axis=0)
    q[:, empty] = np.nan
    mean = np.nanmean(filled, axis=0)
    mean[empty] = np.nan
    return {"min": q[0], "q1": q[1], "median": q[2], "q3": q[3], "max": q[4], "mean": mean}


# ----------------------------------------------------------------------------- rejection


def default_rejection_rates() -> np.ndarray:
    """0, 0.01, ..., 0.95."""
    return np.round(np.arange(0, 96) / 100, 2)


def rejection_curve(
    correct: np.ndarray, scores: np.ndarray, rates: Sequence[float] | np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Accuracy on the inputs kept when the fraction ``rate`` with the highest scores is referred.

    At each rate, ⌊rate·N⌋ inputs are referred, most uncertain first. Among tied scores the
    choice is random, and the curve is its expectation (so a constant score gives a flat
    curve at the overall accuracy, whatever the input order). Returns
    ``(rates, accuracies)``; NaN where nothing is kept.
    """
    correct = np.asarray(correct, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    rates = default_rejection_rates() if rates is None else np.asarray(rates, dtype=np.float64)
    if np.any((rates < 0) | (rates > 1)):
        raise ValueError("rejection rates must lie in [0, 1]")
    n = len(correct)
    order = np.argsort(-scores, kind="stable")  # most uncertain first
    s, c = scores[order], correct[order]
    # groups of equal scores: [start, end) in sorted order and their numbers correct
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], n]
    group_correct = np.add.reduceat(c, starts) if n else np.zeros(0)
    after = np.r_[np.cumsum(group_correct[::-1])[::-1][1:], 0.0]  # correct in later groups
    referred = np.floor(rates * n + 1e-9).astype(np.int64)
    kept = n - referred
    g = np.clip(np.searchsorted(ends, referred, side="right"), 0, max(len(starts) - 1, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        if n:
            # within the partly referred group, each input is kept with equal probability
            size = ends[g] - starts[g]
            kept_in_group = np.clip(ends[g] - referred, 0, size)
            kept_correct = after[g] + group_correct[g] * kept_in_group / size
        else:
            kept_correct = np.zeros(len(rates))
        acc = np.where(kept > 0, kept_correct / np.maximum(kept, 1), np.nan)
    return rates, acc


def oracle_rejection_curve(accuracy_at_zero: float, rates: np.ndarray) -> np.ndarray:
    """Best possible curve: the errors are referred first, min(1, acc / (1 − rate))."""
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, accuracy_at_zero / np.maximum(1.0 - np.asarray(rates), 1e-12))


# ----------------------------------------------------------------------------- OOD


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    average = ends - (counts - 1) / 2.0
    return average[inverse]


def auroc(negatives: np.ndarray, positives: np.ndarray) -> float:
    """Area under the ROC curve for telling positives (higher scores) from negatives.

    Equals P(score⁺ > score⁻) + ½ P(score⁺ = score⁻) (Mann–Whitney U / n⁺n⁻).
    """
    neg = np.asarray(negatives, dtype=np.float64).ravel()
    pos = np.asarray(positives, dtype=np.float64).ravel()
    if len(neg) == 0 or len(pos) == 0:
        raise ValueError("AUROC needs at least one positive and one negative")
    ranks = _average_ranks(np.concatenate([neg, pos]))
    u = ranks[len(neg) :].sum() - len(pos) * (len(pos) + 1) / 2.0
    return float(u / (len(pos) * len(neg)))


def average_precision(negatives: np.ndarray, positives: np.ndarray) -> float:
    """Area under the precision–recall curve (positives = higher scores), step-wise.

    AP = Σ_t (R_t − R_{t−1}) P_t over the distinct score thresholds t, highest first; tied
    scores enter together.
    """
    neg = np.asarray(negatives, dtype=np.float64).ravel()
    pos = np.asarray(positives, dtype=np.float64).ravel()
    if len(pos) == 0:
        raise ValueError("average precision needs at least one positive")
    scores = np.concatenate([pos, neg])
    is_pos = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    order = np.argsort(-scores, kind="stable")
    scores, is_pos = scores[order], is_pos[order]
    last_of_group = np.r_[scores[1:] != scores[:-1], True]
    tp = np.cumsum(is_pos)[last_of_group]
    predicted = (np.arange(1, len(scores) + 1))[last_of_group]
    precision = tp / predicted
    recall = tp / len(pos)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


@dataclass(frozen=True)
class OodResult:
    """Detection of OOD inputs by one score (higher = more likely OOD)."""

    score: str
    auroc: float | None  # None: the score is the same for every image (n/a, not 0.5)
    aupr_out: float | None  # OOD as positives
    aupr_in: float | None  # in-distribution as positives, by −score


def ood_detection(in_scores: Mapping[str, np.ndarray], ood_scores: Mapping[str, np.ndarray]) -> list[OodResult]:
    """AUROC and AUPR (both ways) of every score present in both mappings."""
    out = []
    for name in in_scores:
        if name not in ood_scores:
            continue
        a, b = np.asarray(in_scores[name]), np.asarray(ood_scores[name])
        if np.ptp(np.concatenate([a.ravel(), b.ravel()])) == 0:
            # e.g. the mutual information of a one-draw posterior, 0 by construction: an AUROC
            # of 0.5 would read as a measured failure to detect, so it is n/a
            out.append(OodResult(name, None, None, None))
            continue
        out.append(OodResult(name, auroc(a, b), average_precision(a, b), average_precision(-b, -a)))
    return out


def score_edges(
    score: str, num_classes: int, values: Sequence[np.ndarray] = (), bins: int = 30
) -> np.ndarray:
    """Bin edges shared by every histogram of one score in a comparison.

    They span the score's theoretical range (:func:`score_range`), cut down to the largest
    value in ``values`` (all posteriors and sets together) so that small scores, such as
    the mutual information of a few ensemble members, do not all fall into the first bin.
    """
    lo, hi = score_range(score, num_classes)
    top = max((float(np.max(v)) for v in values if len(v)), default=hi)
    if lo < top < hi:
        hi = top * (1 + 1e-9)
    return np.linspace(lo, hi, bins + 1)


def score_histograms(
    scores: np.ndarray, score: str, num_classes: int, bins: int = 30, edges: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of a score as fractions of the inputs: (fractions, edges).

    ``edges`` default to the score's full fixed range (:func:`score_range`); values outside
    are counted in the first or last bin.
    """
    if edges is None:
        edges = score_edges(score, num_classes, bins=bins)
    clipped = np.clip(np.asarray(scores, dtype=np.float64), edges[0], edges[-1])
    counts, _ = np.histogram(clipped, bins=edges)
    return counts / max(len(clipped), 1), edges


# ----------------------------------------------------------------------------- rotation sweep


@dataclass(frozen=True)
class RotationSweep:
    """Predictions for one image rotated through ``angles`` (A,) degrees (K classes).

    ``median``, ``lower``, ``upper`` and ``mean`` are (A, K) per-class probabilities (the
    band is the equal-tailed credible interval at ``level``); ``total``, ``aleatoric`` and
    ``epistemic`` are (A,) entropies in nats.
    """

    angles: np.ndarray
    mean: np.ndarray
    median: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    total: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray
    level: float
    #: the share of the posterior the band holds on average at this number of draws
    #: (:func:`core.analysis.uncertainty.expected_coverage`), below ``level`` with too few
    expected_coverage: float | None = None
    #: what was swept, in words ("rotation", "Gaussian noise": :mod:`core.analysis.corruption`),
    #: and what ``angles`` holds, with its unit (the plots' horizontal axis)
    swept: str = "rotation"
    axis: str = "angle (degrees)"
    #: the swept quantity's column name in tables ("angle", "severity", "patch_centre_px")
    parameter: str = "angle"
    #: ``axis`` in fewer words, for a narrow plot ("" when ``axis`` is short already)
    axis_short: str = ""


def rotation_angles(stop: float = 180.0, step: float = 10.0, start: float = 0.0) -> np.ndarray:
    """start, start + step, ..., stop (inclusive when it falls on the grid)."""
    if step <= 0:
        raise ValueError("the angle step must be positive")
    count = int(math.floor((stop - start) / step + 1e-9)) + 1
    return start + step * np.arange(count)


def rotation_sweep(
    posterior: Posterior,
    image: torch.Tensor,
    angles: Sequence[float] | np.ndarray | None = None,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
    level: float = 0.9,
) -> RotationSweep:
    """Rotate one image (H, W), (1, H, W) or (1, 1, H, W) through ``angles`` and predict.

    Defaults to 0–180° in 10° steps. All rotations go through the posterior as one batch.
    """
    angles = rotation_angles() if angles is None else np.asarray(angles, dtype=np.float64)
    image = torch.as_tensor(image, dtype=torch.float32)
    image = image.reshape(1, 1, *image.shape[-2:])
    batch = rotate(image.expand(len(angles), -1, -1, -1), torch.as_tensor(angles, dtype=torch.float32))
    return batch_sweep(posterior, batch, angles, num_samples, generator, level)


def batch_sweep(
    posterior: Posterior,
    batch: torch.Tensor,
    values: np.ndarray,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
    level: float = 0.9,
    swept: str = "rotation",
    axis: str = "angle (degrees)",
    parameter: str = "angle",
    axis_short: str = "",
) -> RotationSweep:
    """Predict ``batch`` (A, C, H, W), one image per swept value ``values`` (A,), as one batch and
    summarise it per value: the shared half of the rotation and corruption sweeps."""
    samples = posterior.predict_proba(batch, num_samples=num_samples, generator=generator).double()
    lower, upper = credible_interval(samples, level)
    return RotationSweep(
        angles=np.asarray(values, dtype=np.float64),
        mean=samples.mean(0).numpy(),
        median=torch.quantile(samples, 0.5, dim=0).numpy(),
        lower=lower.numpy(),
        upper=upper.numpy(),
        total=predictive_entropy(samples).numpy(),
        aleatoric=expected_entropy(samples).numpy(),
        epistemic=mutual_information(samples).numpy(),
        level=level,
        expected_coverage=expected_coverage(samples.shape[0], level),
        swept=swept,
        axis=axis,
        parameter=parameter,
        axis_short=axis_short,
    )


# ----------------------------------------------------------------------------- drop rate


@dataclass(frozen=True)
class DropRateSensitivity:
    """Accuracy over chains for each drop rate (R rates): the D-SGHMC paper's Figs. 2, 9."""

    rates: np.ndarray  # (R,)
    accuracies: list[np.ndarray]  # R arrays, one accuracy per chain
    mean: np.ndarray
    std: np.ndarray  # sample standard deviation over chains (ddof=1; 0 for one chain)
    median: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray

    def rows(self) -> list[dict[str, float]]:
        return [
            {"drop_rate": float(r), "chains": len(a), "mean": float(m), "std": float(s),
             "median": float(md), "min": float(lo), "max": float(hi)}
            for r, a, m, s, md, lo, hi in zip(
                self.rates, self.accuracies, self.mean, self.std, self.median,
                self.minimum, self.maximum, strict=True,
            )
        ]


def drop_rate_sensitivity(accuracies: Mapping[float, Sequence[float]]) -> DropRateSensitivity:
    """Summarise per-rate, per-chain accuracies ``{drop_rate: [acc_chain0, ...]}``, by rate."""
    if not accuracies:
        raise ValueError("no drop rates given")
    rates = np.array(sorted(accuracies), dtype=np.float64)
    arrays = [np.asarray(accuracies[r], dtype=np.float64).ravel() for r in sorted(accuracies)]
    if any(len(a) == 0 for a in arrays):
        raise ValueError("every drop rate needs at least one chain's accuracy")
    return DropRateSensitivity(
        rates=rates,
        accuracies=arrays,
        mean=np.array([a.mean() for a in arrays]),
        std=np.array([a.std(ddof=1) if len(a) > 1 else 0.0 for a in arrays]),
        median=np.array([np.median(a) for a in arrays]),
        minimum=np.array([a.min() for a in arrays]),
        maximum=np.array([a.max() for a in arrays]),
    )


def rotation_sweeps(
    posteriors: Sequence[tuple[str, Posterior, int | None]],
    image: torch.Tensor | np.ndarray,
    angles: Sequence[float] | np.ndarray | None = None,
    level: float = 0.9,
    seed: int | None = 0,
) -> Generator[ProgressRecord, None, dict[str, RotationSweep]]:
    """:func:`rotation_sweep` for several posteriors ``(key, posterior, num_samples)``.

    Yields a :class:`ProgressRecord` after each posterior (``values["done"]`` is its index)
    so a worker can show progress and stop between posteriors; returns the sweeps by key.
    """
    sweeps: dict[str, RotationSweep] = {}
    total = len(posteriors)
    yield ProgressRecord(0, total, {}, phase="sweep")
    for i, (key, posterior, num_samples) in enumerate(posteriors):
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        sweeps[key] = rotation_sweep(posterior, torch.as_tensor(np.asarray(image, dtype=np.float32)),
                                     angles, num_samples, generator, level)
        yield ProgressRecord(i + 1, total, {"done": float(i)}, phase="sweep")
    return sweeps
