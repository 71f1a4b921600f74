"""Did the chains converge? Rank-normalised split-R̂ and bulk/tail ESS (numbers only).

Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021), "Rank-normalization, folding, and
localization: an improved R̂ for assessing convergence of MCMC", Bayesian Analysis 16(2).

Every function takes draws shaped ``(chains, draws, ...)`` and works on each trailing element
at once (vectorised: one R̂ per image × class on a probe set is one call):

- **split**: each chain is cut into its first and second half (the middle draw of an odd
  count is dropped), so one chain that drifts also counts as disagreeing halves;
- **rank-normalise**: all draws of one element are replaced by their pooled ranks r
  (ties averaged) mapped through the normal quantile, z = Φ⁻¹((r − 3/8) / (S + 1/4)), so heavy
  tails or a bounded quantity (a probability near 0 or 1) do not break the variance ratios;
- **R̂ bulk** is the classic split-R̂ of the z-scores, √((n − 1)/n + B/(nW)); **R̂ tail**
  the same of the folded split draws |x − median|; :func:`rhat` is the larger of the two, as the
  paper recommends. 1 means the chains agree; 1.01 is the paper's threshold, 1.1 the
  looser one networks rarely meet;
- **ESS bulk** is the effective sample size of the z-scores, with Geyer's initial positive
  and monotone sequences on the multi-chain autocorrelation (Stan's estimator); **ESS tail**
  the smaller ESS of the indicators x ≤ q₀.₀₅ and x ≤ q₀.₉₅.

These follow ArviZ's ``rhat(method="rank")`` and ``ess(method="bulk" | "tail")`` step for
step; ``tests/core/test_convergence.py`` checks them against ArviZ. An element whose draws are
all equal has R̂ NaN (no variance to compare) and ESS equal to its number of draws, as in ArviZ.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

#: The fewest chains, and draws per chain, split-R̂ is defined for (the words for a record
#: below them: :func:`core.engine.naming.why_not_measurable`).
MIN_CHAINS = 2
MIN_DRAWS = 4

#: Draws (chains × draws × elements) that one pass of R̂ or ESS takes at once. The passes work
#: on many copies of their input (ranks, z-scores, folded draws, a padded FFT of every lag), so
#: a probe set's 10,000 probabilities of 4 × 840 draws at once peaked at 6.3 GiB; elements are
#: independent, so they go in slices of this many draws (2 MB; a pass then peaks near 17 MB) with
#: the same results, no slower (4 × 800 draws of 3,000 elements: 11.5 s sliced, 14.1 s at once).
CHUNK_DRAWS = 1 << 18


def _in_chunks(measure: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``measure`` of (C, N, ...) draws taken over slices of the trailing elements (at most
    :data:`CHUNK_DRAWS` draws each) and joined: memory bounded whatever the element count."""

    @functools.wraps(measure)
    def chunked(draws: np.ndarray) -> np.ndarray:
        x = _as_draws(draws)
        c, n, trailing = x.shape[0], x.shape[1], x.shape[2:]
        flat = x.reshape(c, n, -1)
        step = max(1, CHUNK_DRAWS // max(1, c * n))
        if flat.shape[2] <= step:
            return measure(x)
        parts = [measure(flat[:, :, i : i + step]) for i in range(0, flat.shape[2], step)]
        return np.concatenate(parts, axis=-1).reshape(trailing)

    return chunked


def _as_draws(draws: np.ndarray) -> np.ndarray:
    x = np.asarray(draws, dtype=np.float64)
    if x.ndim < 2:
        raise ValueError(f"draws must be shaped (chains, draws, ...), got shape {x.shape}")
    return x


def split_chains(draws: np.ndarray) -> np.ndarray:
    """(C, N, ...) → (2C, N // 2, ...): each chain's first and last halves as chains."""
    x = _as_draws(draws)
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half :]], axis=0)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1…S of each column of (S, K) values, ties given the mean of their ranks."""
    s = values.shape[0]
    order = np.argsort(values, axis=0, kind="stable")
    ordered = np.take_along_axis(values, order, axis=0)
    index = np.broadcast_to(np.arange(s)[:, None], ordered.shape)
    starts = np.ones(ordered.shape, dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    ends = np.ones(ordered.shape, dtype=bool)
    ends[:-1] = starts[1:]
    first = np.maximum.accumulate(np.where(starts, index, 0), axis=0)
    last = np.minimum.accumulate(np.where(ends, index, s - 1)[::-1], axis=0)[::-1]
    ranks = np.empty(values.shape)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=0)
    return ranks


def rank_normalise(draws: np.ndarray) -> np.ndarray:
    """Pooled ranks of each trailing element's draws (ties averaged), through Φ⁻¹ (Blom)."""
    x = _as_draws(draws)
    c, n = x.shape[:2]
    size = c * n
    ranks = average_ranks(x.reshape(size, -1))
    z = torch.special.ndtri(torch.from_numpy((ranks - 0.375) / (size + 0.25))).numpy()
    return z.reshape(x.shape)


def _rhat_plain(x: np.ndarray) -> np.ndarray:
    """Gelman–Rubin R̂ of (C, N, ...) chains (already split or normalised as wanted)."""
    n = x.shape[1]
    within = x.var(axis=1, ddof=1).mean(axis=0)
    between = n * x.mean(axis=1).var(axis=0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _median_fold(x: np.ndarray) -> np.ndarray:
    c, n = x.shape[:2]
    median = np.median(x.reshape(c * n, *x.shape[2:]), axis=0)
    return np.abs(x - median)


def _valid(x: np.ndarray, min_chains: int) -> bool:
    return x.shape[0] >= min_chains and x.shape[1] >= MIN_DRAWS


def _nan_like(x: np.ndarray) -> np.ndarray:
    return np.full(x.shape[2:], np.nan)


@_in_chunks
def rhat_bulk(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split-R̂ of the draws' location (the bulk)."""
    x = _as_draws(draws)
    if not _valid(x, MIN_CHAINS):
        return _nan_like(x)
    return _masked_nan(x, _rhat_plain(rank_normalise(split_chains(x))))


@_in_chunks
def rhat_tail(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split-R̂ of the folded draws |x − median| (the scale, the tails)."""
    x = _as_draws(draws)
    if not _valid(x, MIN_CHAINS):
        return _nan_like(x)
    return _masked_nan(x, _rhat_plain(rank_normalise(_median_fold(split_chains(x)))))


def rhat(draws: np.ndarray) -> np.ndarray:
    """max(R̂ bulk, R̂ tail) per trailing element (Vehtari et al. 2021's recommendation).

    NaN where the draws are fewer than 2 chains of 4, hold a NaN, or are all equal.
    """
    return np.fmax(rhat_bulk(draws), rhat_tail(draws)) if _valid(_as_draws(draws), MIN_CHAINS) \
        else _nan_like(_as_draws(draws))


def rhat_of_shuffles(draws: np.ndarray, orders: list[np.ndarray]) -> list[np.ndarray]:
    """:func:`rhat` of the draws pooled over chains and draws, dealt out in each of ``orders``
    (permutations of the C·N pooled draws) into chains of the same length: what perfectly mixed
    chains of these draws give.

    Equal to ``rhat(pooled[order].reshape(x.shape))`` for each order, bit for bit, at a fraction
    of its cost: the bulk and tail z-scores are ranks of the pooled draws (of their distances from
    the pooled median), which a new order only deals out anew, so they are ranked once, not once
    per order (on a probe set of 4 × 500 draws, eight orders took 60 s of CPU ranked each time).
    With an odd number of draws a chain's middle draw is left out of the split, which a new order
    changes, so each order is then ranked as :func:`rhat` does.
    """
    x = _as_draws(draws)
    c, n = x.shape[:2]
    pooled = x.reshape(c * n, *x.shape[2:])
    if not _valid(x, MIN_CHAINS) or n % 2:
        return [rhat(pooled[order].reshape(x.shape)) for order in orders]
    # an even split keeps every draw, so its pooled ranks are those of all the draws
    bulk = _pooled_scores(pooled, fold=False)
    tail = _pooled_scores(pooled, fold=True)
    bad = np.isnan(x).any(axis=(0, 1))
    return [np.where(bad, np.nan, np.fmax(_rhat_plain(split_chains(bulk[order].reshape(x.shape))),
                                          _rhat_plain(split_chains(tail[order].reshape(x.shape)))))
            for order in orders]


def _pooled_scores(pooled: np.ndarray, fold: bool) -> np.ndarray:
    """Rank-normalised (S, ...) pooled draws, or their distances from the pooled median
    (``fold``), as :func:`rhat_bulk` and :func:`rhat_tail` compute them for any split of them."""
    values = _median_fold(pooled[None])[0] if fold else pooled
    size = values.shape[0]
    flat = values.reshape(size, -1)
    step = max(1, CHUNK_DRAWS // max(1, size))  # memory bounded as in _in_chunks
    out = np.concatenate([rank_normalise(flat[None, :, i : i + step])[0] for i in range(0, flat.shape[1], step)],
                         axis=-1)
    return out.reshape(values.shape)


def _masked_nan(x: np.ndarray, values: np.ndarray) -> np.ndarray:
    """NaN where an element's draws hold a NaN (ArviZ's validity check)."""
    bad = np.isnan(x).any(axis=(0, 1))
    return np.where(bad, np.nan, values)


def _autocovariance(x: np.ndarray) -> np.ndarray:
    """Autocovariance of each chain at every lag, (C, N, ...), by FFT (divided by N)."""
    n = x.shape[1]
    centred = x - x.mean(axis=1, keepdims=True)
    size = 2 ** math.ceil(math.log2(2 * n))
    f = np.fft.rfft(centred, n=size, axis=1)
    return np.fft.irfft(f * np.conj(f), n=size, axis=1)[:, :n] / n


def effective_sample_size(chains: np.ndarray) -> np.ndarray:
    """ESS of (C, N, ...) chains, per trailing element: Stan's estimator, as ArviZ's ``_ess``.

    ρ̂_t = 1 − (W − mean_c acov_c(t)) / var⁺; pairs ρ̂_{2k} + ρ̂_{2k+1} are summed while
    positive (Geyer's initial positive sequence) and made non-increasing (initial monotone
    sequence); τ̂ = −1 + 2 Σ ρ̂_t, at least 1 / log₁₀(C·N); ESS = C·N / τ̂.
    """
    x = _as_draws(chains)
    c, n = x.shape[:2]
    trailing = x.shape[2:]
    x = x.reshape(c, n, -1)
    k = x.shape[2]
    acov = _autocovariance(x)
    mean_var = acov[:, 0].mean(axis=0) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if c > 1:
        var_plus = var_plus + x.mean(axis=1).var(axis=0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var - acov.mean(axis=0)) / var_plus  # (N, K), every lag
    out = np.zeros((n, k))
    out[0] = 1.0
    even = np.ones(k)
    odd = rho[1].copy() if n > 1 else np.zeros(k)
    if n > 1:
        out[1] = odd
    t_end = np.ones(k, dtype=np.int64)  # each element's t when its positive sequence ended
    t = 1
    while t < n - 3:
        enter = (even + odd) > 0.0
        if not enter.any():
            break
        e, o = rho[t + 1], rho[t + 2]
        even = np.where(enter, e, even)
        odd = np.where(enter, o, odd)
        keep = enter & ((e + o) >= 0)
        out[t + 1] = np.where(keep, e, out[t + 1])
        out[t + 2] = np.where(keep, o, out[t + 2])
        t_end = np.where(enter, t + 2, t_end)
        t += 2
    max_t = t_end - 2
    columns = np.arange(k)
    improve = even > 0
    out[max_t[improve] + 1, columns[improve]] = even[improve]
    t = 1
    while t <= max_t.max() - 2:
        active = t <= max_t - 2
        previous = out[t - 1] + out[t]
        larger = active & ((out[t + 1] + out[t + 2]) > previous)
        out[t + 1] = np.where(larger, previous / 2.0, out[t + 1])
        out[t + 2] = np.where(larger, previous / 2.0, out[t + 2])
        t += 2
    lags = np.arange(n)[:, None]
    tau = -1.0 + 2.0 * np.where(lags <= max_t, out, 0.0).sum(axis=0) + out[max_t + 1, columns]
    total = c * n
    tau = np.maximum(tau, 1.0 / np.log10(total))
    ess = total / tau
    ess = np.where(np.isnan(out).any(axis=0), np.nan, ess)
    constant = (x.max(axis=(0, 1)) - x.min(axis=(0, 1))) < np.finfo(float).resolution
    ess = np.where(constant, float(total), ess)
    ess = np.where(np.isnan(x).any(axis=(0, 1)), np.nan, ess)
    return ess.reshape(trailing)


@_in_chunks
def ess_bulk(draws: np.ndarray) -> np.ndarray:
    """ESS of the rank-normalised split chains: how many independent draws the centre is worth."""
    x = _as_draws(draws)
    if not _valid(x, 1):
        return _nan_like(x)
    return _masked_nan(x, effective_sample_size(rank_normalise(split_chains(x))))


@_in_chunks
def ess_tail(draws: np.ndarray) -> np.ndarray:
    """min(ESS of x ≤ q₀.₀₅, ESS of x ≤ q₀.₉₅) on split chains: what the 5% and 95% quantiles are worth."""
    x = _as_draws(draws)
    if not _valid(x, 1):
        return _nan_like(x)
    c, n = x.shape[:2]
    pooled = x.reshape(c * n, *x.shape[2:])
    lower, upper = np.quantile(pooled, [0.05, 0.95], axis=0)
    ess_lower = effective_sample_size(split_chains((x <= lower).astype(np.float64)))
    ess_upper = effective_sample_size(split_chains((x <= upper).astype(np.float64)))
    return _masked_nan(x, np.minimum(ess_lower, ess_upper))


@dataclass(frozen=True)
class Convergence:
    """The worst of each diagnostic over every element of a set of draws, and each element's R̂
    (NaN for the elements left out), so that a caller needs not compute it again."""

    rhat_max: float
    ess_bulk_min: float
    ess_tail_min: float
    rhat: np.ndarray = field(repr=False, compare=False)


def summarise(draws: np.ndarray, min_spread: float = 0.0) -> Convergence:
    """Largest R̂ and smallest bulk and tail ESS over every trailing element.

    Elements whose draws all lie within ``min_spread`` of one another are skipped: they tell
    nothing about mixing (a probability that is 1 in every draw, or that moves by one float32
    step), yet tied values can give them an infinite R̂ or an ESS equal to the draw count by
    convention. An infinite R̂ of an element that does vary is kept: it is the worst.
    """
    x = _as_draws(draws)
    varies = spread(x) > min_spread

    def worst(values: np.ndarray, pick) -> float:
        kept = values[varies & ~np.isnan(values)]
        return float(pick(kept)) if kept.size else float("nan")

    per_element = np.where(varies, rhat(x), np.nan)
    return Convergence(worst(per_element, np.max), worst(ess_bulk(x), np.min), worst(ess_tail(x), np.min),
                       per_element)


def spread(draws: np.ndarray) -> np.ndarray:
    """Largest minus smallest draw of each trailing element."""
    x = _as_draws(draws)
    return np.ptp(x, axis=(0, 1))
