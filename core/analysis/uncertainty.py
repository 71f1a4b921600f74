"""Uncertainty of a predictive given by S posterior samples of class probabilities.

For samples p_s (shape S×K, or S×N×K for a batch), with p̄ = mean_s p_s:

* total (predictive entropy)       H[p̄]
* aleatoric (expected entropy)     mean_s H[p_s]
* epistemic (mutual information)   H[p̄] − mean_s H[p_s]  (≥ 0 by Jensen; clamped at 0
  against rounding)

Entropies are in nats. The same split in variance form (law of total covariance)::

    diag(p̄) − p̄p̄ᵀ  =  E_s[diag(p_s) − p_s p_sᵀ]  +  Cov_s[p_s]
       total             aleatoric                 epistemic

with the covariance over samples taken with 1/S (the population form), so the two parts
add up to the total exactly. Also per-class histograms on fixed bins (comparable across
methods), per-class equal-tailed credible intervals, the K×K correlation of the class
probabilities across samples, and the Bhattacharyya overlap of the top two classes' sample
distributions with an "uncertain input" flag.

The credible interval is a pair of order statistics of the draws, chosen so that it holds at
least the level asked on average (:func:`interval_ranks`); with too few draws for that level
it holds less, and :func:`expected_coverage` says how much (78% from 8 draws at 90%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np
import torch

from core.analysis.summary_arrays import (
    as_numpy,
    bin_edges,
    bin_offsets,
    correlation_stacked,
    entropy_rows,
    top_two_rows,
)

DEFAULT_BINS = 20

#: Default threshold of :func:`is_uncertain` on the Bhattacharyya coefficient BC of the top
#: two classes' sample distributions. BC = 0.5 means, for two equal-variance Gaussians, means
#: about 2.35 standard deviations apart (BC = exp(−d²/8σ²)); it also bounds the error of
#: telling from one draw which of the two classes it came from to at least 6.7% and at most
#: 25% (½(1 − √(1 − BC²)) ≤ P_err ≤ BC/2). Above it the two classes are not told apart.
UNCERTAIN_THRESHOLD = 0.5

#: Standard deviation at or below which a class's probability counts as constant across
#: samples in :func:`class_correlation`.
CONSTANT_STD = 1e-12


def entropy(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in nats, with 0·log 0 = 0 (never −0: it would print as "-0.0000")."""
    p = p.clamp_min(0)
    return -(torch.special.xlogy(p, p)).sum(dim) + 0.0  # −0.0 + 0.0 is +0.0


def predictive_mean(samples: torch.Tensor) -> torch.Tensor:
    """p̄ = mean over the sample dimension (the first)."""
    return samples.mean(0)


def predictive_entropy(samples: torch.Tensor) -> torch.Tensor:
    """Total uncertainty H[p̄]."""
    return entropy(predictive_mean(samples))


def expected_entropy(samples: torch.Tensor) -> torch.Tensor:
    """Aleatoric uncertainty mean_s H[p_s]."""
    return entropy(samples).mean(0)


def mutual_information(samples: torch.Tensor) -> torch.Tensor:
    """Epistemic uncertainty H[p̄] − mean_s H[p_s], clamped at 0."""
    return (predictive_entropy(samples) - expected_entropy(samples)).clamp_min(0) + 0.0


@lru_cache(maxsize=64)  # the same two counts on every stroke
def interval_ranks(num_samples: int, level: float = 0.9) -> tuple[int, int]:
    """The ranks (j, k), 1 ≤ j ≤ k ≤ S, of the sorted draws that bound the interval at ``level``.

    For S independent draws from a continuous distribution F, the mass F(X₍ₖ₎) − F(X₍ⱼ₎)
    between the j-th and k-th smallest draws is Beta(k − j, S − k + j + 1) distributed, whatever
    F is, with mean (k − j)/(S + 1). The interval is the equal-tailed pair j = m,
    k = S + 1 − m with the largest m whose expected coverage (S + 1 − 2m)/(S + 1) is at least
    ``level``. When even the widest pair, the smallest and largest draw (m = 1), holds less
    on average, (S − 1)/(S + 1), it is that pair, and :func:`expected_coverage` says how much
    it holds: a 90% interval needs at least 19 draws (:func:`draws_for_level`).
    """
    if not 0 < level < 1:
        raise ValueError("level must lie strictly between 0 and 1")
    if num_samples < 1:
        raise ValueError("an interval needs at least one draw")
    # (S + 1 − 2m)/(S + 1) ≥ level  ⇔  m ≤ (1 − level)(S + 1)/2; the small slack keeps a
    # level given in decimals (0.9) from losing a rank to rounding.
    m = max(1, math.floor((1 - level) * (num_samples + 1) / 2 + 1e-9))
    return m, num_samples + 1 - m


def expected_coverage(num_samples: int, level: float = 0.9) -> float:
    """The share of the posterior's mass the interval of :func:`credible_interval` holds on
    average over sets of ``num_samples`` independent draws: (k − j)/(S + 1).

    At least ``level`` once S ≥ :func:`draws_for_level`; below, less (0 for one draw). Draws
    that are correlated (successive draws of one chain) hold less than this on average.
    """
    j, k = interval_ranks(num_samples, level)
    return (k - j) / (num_samples + 1)


def draws_for_level(level: float = 0.9) -> int:
    """The fewest draws whose widest interval holds ``level`` on average: (S − 1)/(S + 1) ≥ level."""
    if not 0 < level < 1:
        raise ValueError("level must lie strictly between 0 and 1")
    s = max(1, math.ceil((1 + level) / (1 - level) - 1e-9))
    while (s - 1) / (s + 1) < level - 1e-12:  # guard the rounding of the division above
        s += 1
    return s


def credible_interval(samples: torch.Tensor, level: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """Equal-tailed per-class interval from the samples' order statistics: (lower, upper).

    The j-th and k-th smallest draws of :func:`interval_ranks`, so the interval holds at least
    ``level`` of the posterior's mass on average when there are draws enough, and exactly
    :func:`expected_coverage` (stated wherever the interval is shown) when there are not.
    Linear interpolation between order statistics (``torch.quantile``) was used before: from 8
    draws its "90%" interval held 70% on average ((S − 1)·level/(S + 1) for uniform draws).
    """
    j, k = interval_ranks(samples.shape[0], level)
    ordered = samples.sort(dim=0).values
    return ordered[j - 1], ordered[k - 1]


def interval_label(num_samples: int, level: float = 0.9) -> str:
    """The interval's name in words, with the level it really holds, e.g. "90% interval", or
    "78% interval (90% asked)" from 8 draws, "no interval (1 draw)"."""
    if num_samples < 2:
        return "no interval (1 draw)"
    held, asked = round(100 * expected_coverage(num_samples, level)), round(100 * level)
    return f"{held}% interval" if held == asked else f"{held}% interval ({asked}% asked)"


def interval_note(num_samples: int, level: float = 0.9) -> str:
    """One or two sentences on what the interval holds at this number of draws."""
    asked = f"{100 * level:g}%"
    if num_samples < 2:
        return "One draw has no spread: there is no interval, only the draw itself."
    held = f"{100 * expected_coverage(num_samples, level):.0f}%"
    need = draws_for_level(level)
    if num_samples < need:
        return (f"{asked} asked, but {num_samples} draws are too few: even the widest interval, "
                f"from the smallest to the largest draw, would hold on average only {held} of "
                f"many more draws from the same posterior. {need} draws or more give {asked}.")
    j, k = interval_ranks(num_samples, level)
    return (f"From the {_nth(j, 'smallest')} to the {_nth(num_samples + 1 - k, 'largest')} of "
            f"{num_samples} draws, so that it would hold on average {held} of many more draws "
            f"from the same posterior ({asked} asked).")


def _nth(n: int, word: str) -> str:
    """"smallest", "2nd smallest", "11th smallest"..."""
    if n == 1:
        return word
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix} {word}"


def class_histograms(samples: torch.Tensor, bins: int = DEFAULT_BINS) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class histograms of p_s,k over s on fixed bins spanning [0, 1].

    Returns ``(counts, edges)``: counts of shape (..., K, bins) as fractions of S (each row
    sums to 1), and the ``bins + 1`` edges. Fixed edges make methods comparable.
    """
    if bins < 1:
        raise ValueError("bins must be positive")
    s = samples.shape[0]
    idx = (samples.clamp(0, 1) * bins).long().clamp_max(bins - 1)  # p = 1 goes in the last bin
    counts = torch.zeros(*samples.shape[1:], bins, dtype=torch.float32)
    counts.scatter_add_(-1, idx.movedim(0, -1), torch.ones(idx.movedim(0, -1).shape))
    return counts / s, torch.linspace(0, 1, bins + 1)


def aleatoric_covariance(samples: torch.Tensor) -> torch.Tensor:
    """E_s[diag(p_s) − p_s p_sᵀ] for samples (S, ..., K): shape (..., K, K)."""
    outer = samples.unsqueeze(-1) * samples.unsqueeze(-2)
    return torch.diag_embed(samples).sub(outer).mean(0)


def epistemic_covariance(samples: torch.Tensor) -> torch.Tensor:
    """Cov_s[p_s] with 1/S normalisation for samples (S, ..., K): shape (..., K, K)."""
    centred = samples - samples.mean(0)
    return (centred.unsqueeze(-1) * centred.unsqueeze(-2)).mean(0)


def predictive_covariance(samples: torch.Tensor) -> torch.Tensor:
    """diag(p̄) − p̄p̄ᵀ, the covariance of the one-hot class drawn from p̄: shape (..., K, K)."""
    mean = predictive_mean(samples)
    return torch.diag_embed(mean) - mean.unsqueeze(-1) * mean.unsqueeze(-2)


@dataclass(frozen=True)
class VarianceDecomposition:
    """Per-class variances (the diagonals, shape (..., K)) and their sums over classes.

    ``total = aleatoric + epistemic`` class by class: total_k = p̄_k(1 − p̄_k),
    aleatoric_k = E_s[p_sk(1 − p_sk)], epistemic_k = Var_s[p_sk].
    """

    total: torch.Tensor
    aleatoric: torch.Tensor
    epistemic: torch.Tensor

    @property
    def total_sum(self) -> torch.Tensor:
        return self.total.sum(-1)

    @property
    def aleatoric_sum(self) -> torch.Tensor:
        return self.aleatoric.sum(-1)

    @property
    def epistemic_sum(self) -> torch.Tensor:
        return self.epistemic.sum(-1)


def variance_decomposition(samples: torch.Tensor) -> VarianceDecomposition:
    """Diagonals of the variance split for samples (S, ..., K), without forming K×K matrices."""
    mean = predictive_mean(samples)
    aleatoric = (samples * (1 - samples)).mean(0)
    epistemic = (samples - mean).pow(2).mean(0)
    return VarianceDecomposition(mean * (1 - mean), aleatoric, epistemic)


def class_correlation(samples: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of the class probabilities across samples (S, ..., K): (..., K, K).

    Negative entries show classes that trade probability mass between samples. A class whose
    probability is constant over the samples (standard deviation ≤ :data:`CONSTANT_STD`, e.g.
    with one sample or a MAP posterior) has no defined correlation: its row and column are
    set to 0 and its diagonal entry to 1, so the matrix stays a valid (positive
    semi-definite) correlation matrix and a constant class is shown as trading with nobody.
    """
    cov = epistemic_covariance(samples.double())
    std = torch.diagonal(cov, dim1=-2, dim2=-1).clamp_min(0).sqrt()
    varying = std > CONSTANT_STD
    safe = torch.where(varying, std, torch.ones_like(std))
    corr = cov / (safe.unsqueeze(-1) * safe.unsqueeze(-2))
    both = varying.unsqueeze(-1) & varying.unsqueeze(-2)
    corr = torch.where(both, corr.clamp(-1, 1), torch.zeros_like(corr))
    eye = torch.eye(corr.shape[-1], dtype=torch.bool)
    return torch.where(eye, torch.ones_like(corr), corr).to(samples.dtype)


def bhattacharyya_coefficient(
    p: torch.Tensor, q: torch.Tensor, dim: int = -1
) -> torch.Tensor:
    """BC = Σ_b √(p_b q_b) of two histograms (normalised along ``dim``): 1 identical, 0 disjoint."""
    return (p.clamp_min(0) * q.clamp_min(0)).sqrt().sum(dim)


def top_two(samples: torch.Tensor) -> torch.Tensor:
    """Indices of the two classes with the largest mean probability: shape (..., 2)."""
    return predictive_mean(samples).topk(2, dim=-1).indices


def top_two_overlap(samples: torch.Tensor, bins: int = DEFAULT_BINS) -> torch.Tensor:
    """Bhattacharyya coefficient of the top two classes' sample distributions: shape (...).

    Each class's samples p_s,k are binned on the fixed bins of :func:`class_histograms`, so
    a single sample (MAP) gives 1 exactly when the two probabilities share a bin.
    """
    hist, _ = class_histograms(samples, bins)  # (..., K, bins)
    idx = top_two(samples)  # (..., 2)
    pair = hist.gather(-2, idx.unsqueeze(-1).expand(*idx.shape, bins))
    return bhattacharyya_coefficient(pair[..., 0, :], pair[..., 1, :])


def is_uncertain(overlap: torch.Tensor | float, threshold: float = UNCERTAIN_THRESHOLD) -> torch.Tensor:
    """The "uncertain input" flag: top-two overlap strictly above ``threshold``."""
    return torch.as_tensor(overlap) > threshold


@dataclass(frozen=True)
class MaskSplit:
    """The entropy split of a posterior that also draws random input masks at prediction
    (D-SGHMC with the mask kept on), in nats, from S weight draws × M masks each::

        H[p̄]  =  mean_s,m H[p_sm]  +  (mean_s H[p_s] − mean_s,m H[p_sm])  +  (H[p̄] − mean_s H[p_s])
        total     aleatoric            input masks                         weights

    with p_s = mean_m p_sm (draw s with its masks averaged) and p̄ = mean_s p_s. ``weights`` is
    the mutual information between the class and the weights, the part more data can shrink;
    ``input_masks`` the mutual information with the masks given the weights: noise added on
    purpose at prediction, which no amount of data removes. The three add up to ``total``
    exactly (the chain rule of mutual information); ``input_masks + weights`` is what the
    plain split over the S masked draws calls epistemic.
    """

    total: float
    aleatoric: float
    input_masks: float
    weights: float
    masks_per_draw: int

    @property
    def epistemic(self) -> float:
        """Weights and input masks together: the plain split's mutual information."""
        return self.input_masks + self.weights


def _weights_information(samples: torch.Tensor) -> float:
    """H[mean_s p_s] − mean_s H[p_s] with p_s = mean_m p_sm, for samples (S, M, K)."""
    per_draw = samples.mean(1)
    return float(entropy(per_draw.mean(0)) - entropy(per_draw).mean())


def mask_split(samples: torch.Tensor) -> MaskSplit:
    """:class:`MaskSplit` of probabilities (S, M, K): S weight draws, each under the same M masks.

    With the same masks for every weight draw, draws that share their weights share their
    p_s exactly, so ``weights`` is 0 for them and not M-mask noise. Mask noise left in p_s
    after averaging M masks still adds about c/M to the weights' part (25% too much with
    16 masks on the bundled D-SGHMC LeNet); the estimate is corrected by the two halves of
    the masks (Richardson: 2·I_M − mean(I_M/2 of each half) removes the c/M term; 10% too
    much left there), and kept within [0, total − aleatoric].
    """
    if samples.ndim != 3:
        raise ValueError(f"expected samples of shape (S, M, K), got {tuple(samples.shape)}")
    samples = samples.double()
    m = samples.shape[1]
    total = float(entropy(samples.mean((0, 1))))
    aleatoric = float(entropy(samples).mean())
    both = max(total - aleatoric, 0.0)  # weights + input masks, ≥ 0 by Jensen
    weights = _weights_information(samples)
    if m >= 2:
        half = m // 2
        halves = (_weights_information(samples[:, :half]) + _weights_information(samples[:, half:2 * half])) / 2
        weights = 2 * weights - halves
    weights = min(max(weights, 0.0), both) + 0.0  # +0.0: −0.0 never prints
    return MaskSplit(total=total, aleatoric=aleatoric, input_masks=both - weights + 0.0,
                     weights=weights, masks_per_draw=m)


@dataclass(frozen=True)
class Summary:
    """Everything the per-input views show for one input and one posterior (K classes)."""

    mean: torch.Tensor  # (K,)
    lower: torch.Tensor  # (K,)
    upper: torch.Tensor  # (K,)
    histograms: torch.Tensor  # (K, bins)
    bin_edges: torch.Tensor  # (bins + 1,)
    total: float
    aleatoric: float
    epistemic: float
    num_samples: int
    # Variance form, correlation and overlap (defaults keep older constructors working).
    total_variance: torch.Tensor | None = None  # (K,) p̄_k(1 − p̄_k)
    aleatoric_variance: torch.Tensor | None = None  # (K,) E_s[p_sk(1 − p_sk)]
    epistemic_variance: torch.Tensor | None = None  # (K,) Var_s[p_sk]
    correlation: torch.Tensor | None = None  # (K, K)
    top_two: tuple[int, int] = (0, 1)
    overlap: float = 0.0  # Bhattacharyya coefficient of the top two classes
    uncertain: bool = False  # overlap > threshold
    level: float = 0.9  # the credible level asked for lower/upper
    #: for a posterior that draws input masks at prediction (D-SGHMC): its epistemic part
    #: split into weights and input masks; ``total``, ``aleatoric`` and ``epistemic`` then
    #: come from the same S × M masked predictions (see :func:`with_mask_split`)
    masks: MaskSplit | None = None

    @property
    def expected_coverage(self) -> float:
        """The share of the posterior's mass the interval holds on average at this number of
        draws (:func:`expected_coverage`): below ``level`` with too few draws."""
        return expected_coverage(self.num_samples, self.level)

    @property
    def interval_label(self) -> str:
        """E.g. "90% interval", "78% interval (90% asked)" (:func:`interval_label`)."""
        return interval_label(self.num_samples, self.level)

    def interval_record(self) -> dict[str, float | int]:
        """The interval's level as asked and as held, as written to JSON."""
        return {"level": self.level, "expected_coverage": self.expected_coverage,
                "num_samples": self.num_samples}

    @cached_property
    def predicted_class(self) -> int:
        # found once: the window's views ask for it several times a column on every update
        return int(self.mean.argmax())

    def class_records(self, names: Sequence[str], key: str = "class") -> list[dict[str, object]]:
        """Per class, as written to JSON: its name (under ``key``), mean and interval."""
        return [{key: name, "mean": float(self.mean[k]), "lower": float(self.lower[k]),
                 "upper": float(self.upper[k])} for k, name in enumerate(names)]

    @property
    def epistemic_defined(self) -> bool:
        """Whether the draws can disagree: with one draw the mutual information is 0 by
        construction, not a measurement, and is reported as n/a (None)."""
        return self.num_samples > 1

    def uncertainty_record(self) -> dict[str, float | int | str | None]:
        """The entropy split in nats, as written to JSON (epistemic None for one draw).

        For a posterior with input masks at prediction, ``epistemic`` is split further into
        ``epistemic_weights`` (what more data can reduce) and ``input_masks`` (noise of the
        masks themselves), with ``masks_per_draw``.
        """
        record: dict[str, float | int | str | None] = {
            "total": self.total, "aleatoric": self.aleatoric,
            "epistemic": self.epistemic if self.epistemic_defined else None}
        if self.masks is not None:
            record.update(epistemic_is="weights + input masks",
                          epistemic_weights=self.masks.weights if self.epistemic_defined else None,
                          input_masks=self.masks.input_masks, masks_per_draw=self.masks.masks_per_draw)
        return record


def with_mask_split(summary: Summary, split: MaskSplit) -> Summary:
    """``summary`` whose entropy split is the S × M one of ``split``: total, aleatoric and
    epistemic (= weights + input masks) from the same masked predictions, so they add up."""
    return replace(summary, total=split.total, aleatoric=split.aleatoric, epistemic=split.epistemic,
                   masks=split)


def summarise(
    samples: torch.Tensor,
    level: float = 0.9,
    bins: int = DEFAULT_BINS,
    threshold: float = UNCERTAIN_THRESHOLD,
) -> Summary:
    """Summarise samples of shape (S, K) for one input (everything the per-input views show).

    The same numbers as the functions above (:func:`credible_interval`, :func:`class_histograms`,
    :func:`entropy`, :func:`class_correlation` ...), computed in float64 numpy: the window runs
    this for every column on every stroke, and on arrays this small each torch operation costs
    its call overhead (about 60 of them took 0.4 ms, four to eight times the forward pass of a
    softmax-regression column). Every tensor field is bit for bit what those functions give but
    the correlation (to 2e-16: a matrix product sums in its own order), and the entropies agree
    to 1e-15 (``tests/core/test_uncertainty.py``); the overlap's root and sum still come from
    torch, and the top two from its ``topk`` wherever a tie leaves the order to its rule
    (:mod:`core.analysis.summary_arrays` holds the array helpers).
    """
    return summarise_many([samples], level, bins, threshold)[0]


def summarise_many(
    samples: Sequence[torch.Tensor],
    level: float = 0.9,
    bins: int = DEFAULT_BINS,
    threshold: float = UNCERTAIN_THRESHOLD,
) -> list[Summary]:
    """:func:`summarise` of each (S, K) array of ``samples`` (several posteriors on one input),
    bit for bit, in one numpy pass per shape: arrays of the same (S, K) are stacked, so the
    fixed cost of the ~40 array operations is paid once per request rather than once per column
    (the window's four columns of a preview share one pass)."""
    return _summarise_groups(samples, level, bins, threshold, finite_only=False)  # type: ignore[return-value]


def summarise_finite(
    samples: Sequence[torch.Tensor],
    level: float = 0.9,
    bins: int = DEFAULT_BINS,
    threshold: float = UNCERTAIN_THRESHOLD,
) -> list[Summary | None]:
    """:func:`summarise_many`, with None in place of the summary of draws that hold a NaN or an
    infinity (a summary would name the class of a NaN: the argmax of NaN is an index). The check
    is one pass over each shape's stacked draws, not one per posterior; the others' summaries are
    the same numbers as :func:`summarise_many` gives them."""
    return _summarise_groups(samples, level, bins, threshold, finite_only=True)


def _summarise_groups(
    samples: Sequence[torch.Tensor], level: float, bins: int, threshold: float, finite_only: bool
) -> list[Summary | None]:
    """The summaries of :func:`summarise_many`, one stacked pass per shape (``finite_only``: None
    for draws not all finite, as :func:`summarise_finite` says)."""
    for one in samples:
        if one.ndim != 2:
            raise ValueError(f"expected samples of shape (S, K), got {tuple(one.shape)}")
    if bins < 1:
        raise ValueError("bins must be positive")
    summaries: list[Summary | None] = [None] * len(samples)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, one in enumerate(samples):
        groups.setdefault(tuple(one.shape), []).append(i)
    for members in groups.values():
        # float32 or float64 in, float64 out: one conversion for the group (exact either way)
        arrays = [as_numpy(samples[i]) for i in members]
        p = (arrays[0][None] if len(arrays) == 1 else np.stack(arrays)).astype(np.float64)  # (C, S, K)
        if finite_only and not np.logical_and.reduce(np.isfinite(p), None):
            finite = np.isfinite(p).all((1, 2))  # each posterior's draws are summarised on their own
            members = [i for i, kept in zip(members, finite.tolist(), strict=True) if kept]
            p = p[finite]
            if not members:
                continue
        for i, summary in zip(members, _summarise_stacked(p, level, bins, threshold), strict=True):
            summaries[i] = summary
    return summaries


def _summarise_stacked(p: np.ndarray, level: float, bins: int, threshold: float) -> list[Summary]:
    """The summaries of C posteriors' draws stacked as (C, S, K) float64. Every reduction runs
    along the draws' axis as it did for one (S, K) array (row after row, or along the classes
    innermost), so each column's numbers do not depend on what it was stacked with.

    Written for few operations: on arrays of a few hundred numbers each numpy call costs its
    1–3 µs of overhead, not its arithmetic, and this runs for every column on every stroke."""
    c, s, k = p.shape
    j, m = interval_ranks(s, level)
    ordered = np.sort(p, axis=1)
    # class_histograms: p = 1 goes in the last bin; counts as fractions of S in float32; each
    # posterior's and class's own bins by one offset (c·K + k)·bins
    # (p·bins clamped to [0, bins − 1], then cut: the same bin as p clamped first, two calls fewer)
    index = np.minimum(np.maximum(p * bins, 0.0), bins - 1).astype(np.int64)
    index += bin_offsets(c, k, bins)
    counts = np.bincount(index.ravel(), minlength=c * k * bins).reshape(c, k, bins)
    hist = np.divide(counts, np.float32(s), dtype=np.float32)  # float32(count) / float32(S)
    mean = np.add.reduce(p, 1) / s  # (C, K)
    # the entropies of the draws and of their mean in one pass: the mean as draw S + 1
    entropies = entropy_rows(np.concatenate((p, mean[:, None, :]), axis=1))  # (C, S + 1)
    total, aleatoric = entropies[:, s], np.add.reduce(entropies[:, :s], 1) / s
    centred = p - mean[:, None, :]
    # the float32 numbers of each summary, one row per posterior, converted once
    singles = np.empty((c, 6 * k + k * k))
    singles[:, :k] = mean
    singles[:, k:2 * k] = ordered[:, j - 1]
    singles[:, 2 * k:3 * k] = ordered[:, m - 1]
    np.multiply(mean, 1 - mean, out=singles[:, 3 * k:4 * k])
    np.add.reduce(p * (1 - p), 1, out=singles[:, 4 * k:5 * k])  # both parts divided by S at once
    np.add.reduce(centred * centred, 1, out=singles[:, 5 * k:6 * k])
    singles[:, 4 * k:6 * k] /= s
    singles[:, 6 * k:] = correlation_stacked(centred, CONSTANT_STD).reshape(c, k * k)
    singles = singles.astype(np.float32)
    # the top two classes and their overlap as top_two and top_two_overlap find them (torch's
    # topk wherever a tie makes its order matter), its float32 root and sum; h₁h₂ is the same
    # IEEE product
    tops = top_two_rows(mean)
    product = np.empty((c, bins), np.float32)  # histograms hold no negatives
    for i, (first, second) in enumerate(tops):  # plain indexing: a fraction of fancy indexing's cost
        np.multiply(hist[i, first], hist[i, second], out=product[i])
    # the root in torch: its float32 sqrt is not correctly rounded (numpy's is), so they differ
    overlaps = torch.from_numpy(product).sqrt_().sum(-1).tolist()
    # is_uncertain compares float32 with float32: as doubles, exactly the same comparison
    above = float(np.float32(threshold))
    edges = bin_edges(bins)
    summaries = []
    for i, ((first, second), t, a) in enumerate(zip(tops, total.tolist(), aleatoric.tolist(), strict=True)):
        row = singles[i]
        # tensors on views of this posterior's own row: each holds its own numbers only
        summaries.append(Summary(
            mean=torch.from_numpy(row[:k]),
            lower=torch.from_numpy(row[k:2 * k]),
            upper=torch.from_numpy(row[2 * k:3 * k]),
            histograms=torch.from_numpy(hist[i]),
            bin_edges=torch.from_numpy(edges.copy()),
            total=t,
            aleatoric=a,
            epistemic=max(t - a, 0.0) + 0.0,  # max(−0.0, 0.0) is −0.0
            num_samples=s,
            total_variance=torch.from_numpy(row[3 * k:4 * k]),
            aleatoric_variance=torch.from_numpy(row[4 * k:5 * k]),
            epistemic_variance=torch.from_numpy(row[5 * k:6 * k]),
            correlation=torch.from_numpy(row[6 * k:].reshape(k, k)),
            top_two=(first, second),
            overlap=overlaps[i],
            uncertain=overlaps[i] > above,
            level=level,
        ))
    return summaries

