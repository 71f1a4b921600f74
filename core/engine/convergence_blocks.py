"""The probe pass's R̂, ESS and shuffled floor, computed element by element in blocks (numbers only).

:func:`summarise_with_shuffles` gives what :func:`core.engine.convergence.summarise` and
:func:`~core.engine.convergence.rhat_of_shuffles` give (Vehtari et al. 2021's rank-normalised
split-R̂, bulk and tail ESS, and R̂ of the same draws dealt out at random into chains), to
within 1e-12 (``tests/core/test_convergence_blocks.py``), for the probe's thousands of class
probabilities at a fraction of their cost. Those two stay the reference, checked against ArviZ.

Each element's draws are one row of a block, (elements, draws), so that every step reads them
along the row while the block stays in the cache, and

- **one sort a row ranks the bulk**, and the same sorted row gives the pooled median (the fold's
  centre) and the 5 % and 95 % quantiles (the tail ESS's indicators), as ``np.median`` and
  ``np.quantile`` give them, bit for bit; a second sort ranks the folded draws |x − median|;
- **ESS takes one inverse FFT an element**, not one a chain: the chains' autocovariances are
  averaged, and the inverse transform is linear, so their power spectra are averaged first;
  Geyer's initial positive and monotone sequences are found for all elements at once, as running
  minima of the lag pairs' sums, instead of a loop over lags;
- **a shuffle's R̂ needs only its chains' sums of z-scores**: the z-scores are ranks of the pooled
  draws, which a new order only deals out anew, and within-chain variance is the pooled sum of
  squares (the same for every order) less the chains' means, so the eight shuffles' chain sums
  are one matrix product of the block with a 0/1 matrix of which draw each order deals to which
  chain;
- **an odd number of draws a chain** leaves each chain's middle draw out of the split, a different
  one for each order, so an order's z-scores are no longer the pooled ones dealt anew: each order
  strikes its C middle draws from the one sort of the row and ranks what is left
  (:func:`_odd_block`). On 8 chains × 25 draws of 10,000 probabilities (what the feature tiers'
  sampler files keep) that took 1.6 s of CPU against 4.4 s for the reference functions, alternating
  at load 1.5 (``benchmarks/bench_odd_kept_draws.py``); 24 draws take 0.5 s.

On 8 chains × 500 draws of 10,000 probe probabilities (a 512-feature head's SGHMC) the pass took
49.8 and 48.3 s of CPU before (ranked once, by (draws, elements) slices) and 10.9 and 10.5 now,
alternating at load 7–9 (``benchmarks/measure_probe_pass.py``; docs/performance.md, "Building a
feature tier").
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from core.engine import convergence
from core.engine.convergence import Convergence

#: Draws (elements × chains × draws) one block holds: 2 MB of float64 (65 elements of 8 × 500
#: draws), so that a block and its few copies (ranks, z-scores, folds) stay near the core between
#: the steps that read them, and the per-block steps are few. On 8 × 500 draws of 10,000
#: probabilities 2¹⁷ to 2¹⁹ were alike within the load's noise (12.9–19.8 s at load 6–10) and 2²⁰
#: slower (14.9 s against 13.2 for 2¹⁸ in the same run).
BLOCK_DRAWS = 1 << 18

#: The quantiles whose indicators give the tail ESS.
TAIL_QUANTILES = (0.05, 0.95)


def summarise_with_shuffles(draws: np.ndarray, min_spread: float,
                            orders: list[np.ndarray]) -> tuple[Convergence, list[np.ndarray]]:
    """``summarise(draws, min_spread)`` and ``rhat_of_shuffles`` of the elements that vary beyond
    ``min_spread``, each within 1e-12, by blocks of elements (the module's docstring says how).

    ``orders`` are permutations of the C·N pooled draws (chain-major); each shuffle's R̂ is an
    array over the varying elements, in their order. With an odd number of draws a chain's middle
    draw is left out of the split, which an order changes: each order's kept draws are then ranked
    from the one sort of all of them (:func:`_odd_block`). With too few chains or draws nothing is
    measured: that goes to the reference functions.
    """
    x = convergence._as_draws(draws)
    c, n = x.shape[:2]
    varies = convergence.spread(x) > min_spread
    if not convergence._valid(x, convergence.MIN_CHAINS):
        return (convergence.summarise(x, min_spread),
                convergence.rhat_of_shuffles(x[:, :, varies], orders))
    flat = x.reshape(c * n, -1)
    kept = np.flatnonzero(varies.ravel())
    if n % 2:
        block = functools.partial(_odd_block, c=c, n=n, orders=[np.asarray(o) for o in orders])
    else:
        block = functools.partial(_block, c=c, dealt=_dealt(orders, c, n))
    step = max(1, BLOCK_DRAWS // (c * n))
    parts = [block(np.ascontiguousarray(flat[:, kept[i : i + step]].T)) for i in range(0, kept.size, step)]
    rhat, ess_bulk, ess_tail = (np.concatenate([p[k] for p in parts]) if parts else np.empty(0) for k in range(3))
    shuffled = np.concatenate([p[3] for p in parts], axis=1) if parts else np.empty((len(orders), 0))
    per_element = np.full(varies.shape, np.nan)
    per_element[varies] = rhat
    summary = Convergence(_worst(rhat, np.max), _worst(ess_bulk, np.min), _worst(ess_tail, np.min), per_element)
    return summary, list(shuffled)


def _worst(values: np.ndarray, pick) -> float:
    kept = values[~np.isnan(values)]
    return float(pick(kept)) if kept.size else float("nan")


def _dealt(orders: list[np.ndarray], c: int, n: int) -> np.ndarray:
    """(C·N, orders × 2C) 0/1 matrix: which split chain of each order each pooled draw is dealt to
    (each order's chains cut into their first and last halves, as ``split_chains`` cuts them)."""
    s, half = c * n, n // 2
    dealt = np.zeros((s, 2 * c * len(orders)))
    for k, order in enumerate(orders):
        chain = np.empty(s, dtype=np.int64)  # split chain of each position of the dealt-out draws
        positions = np.arange(s).reshape(c, n)
        chain[positions[:, :half].ravel()] = np.repeat(np.arange(c), half)
        chain[positions[:, half:].ravel()] = c + np.repeat(np.arange(c), half)
        dealt[np.asarray(order), 2 * c * k + chain] = 1.0
    return dealt


def _block(values: np.ndarray, c: int, dealt: np.ndarray):
    """R̂, bulk ESS, tail ESS and the shuffles' R̂ of each row of (elements, C·N) pooled draws."""
    b, s = values.shape
    n, mid = s // c, s // 2
    order = np.argsort(values, axis=1)
    ordered = np.take_along_axis(values, order, axis=1)
    bulk = _normal_scores(ordered, order)
    median = _median(ordered)
    # sorted, the folded draws |x − median| are two ascending runs (those below the median read
    # backwards, then those above), which a stable sort (a merge sort) joins in one merge
    folded = np.abs(ordered - median[:, None])
    runs = np.concatenate([folded[:, mid - 1 :: -1], folded[:, mid:]], axis=1)
    merged = np.argsort(runs, axis=1, kind="stable")
    fold_ordered = np.take_along_axis(runs, merged, axis=1)
    fold_order = np.take_along_axis(np.concatenate([order[:, mid - 1 :: -1], order[:, mid:]], axis=1), merged, axis=1)
    tail = _normal_scores(fold_ordered, fold_order)
    # a split chain is a chain's first or last half: rows of (elements, 2C, N/2), chain-major
    split_bulk, split_tail = bulk.reshape(b, 2 * c, n // 2), tail.reshape(b, 2 * c, n // 2)
    # folded draws all alike (two values in equal numbers): no variance to compare, R̂ tail 0/0 as
    # in exact arithmetic, which rounding in the means must not turn into a number
    flat_fold = fold_ordered[:, 0] == fold_ordered[:, -1]
    with np.errstate(divide="ignore", invalid="ignore"):
        rhat = np.fmax(_rhat_rows(split_bulk), np.where(flat_fold, np.nan, _rhat_rows(split_tail)))
    ess_bulk = _ess_rows(split_bulk)
    lower, upper = (_quantile(ordered, q) for q in TAIL_QUANTILES)
    ess_tail = np.minimum(_ess_rows((values <= lower[:, None]).astype(np.float64).reshape(b, 2 * c, n // 2)),
                          _ess_rows((values <= upper[:, None]).astype(np.float64).reshape(b, 2 * c, n // 2)))
    shuffled_bulk, shuffled_tail = _shuffled_rhat(np.concatenate([bulk, tail]), dealt, c).reshape(-1, 2, b).transpose(1, 0, 2)
    shuffled = np.fmax(shuffled_bulk, np.where(flat_fold, np.nan, shuffled_tail))
    return rhat, ess_bulk, ess_tail, shuffled


def _odd_block(values: np.ndarray, c: int, n: int, orders: list[np.ndarray]):
    """:func:`_block`'s four figures for an odd number of draws N a chain, whose split leaves each
    chain's middle draw out (``convergence.split_chains``).

    The draws left out differ from one order to the next, and so do the ranks of those kept; but
    the kept draws of any order, sorted, are all the draws sorted with the C left out struck from
    them. So each row is sorted once, and each order (the run's own first) strikes its C middle
    draws, takes the normal scores of the S − C kept ranks, the median of the kept draws, their
    folds (two ascending runs, one merge) and their split chains' R̂, as :func:`_block` does for
    all the draws. The tail ESS's quantiles are of every draw, middle ones included, as
    ``convergence.ess_tail`` takes them.
    """
    b, s = values.shape
    half = n // 2
    order = np.argsort(values, axis=1)
    ordered = np.take_along_axis(values, order, axis=1)
    middles = np.arange(c) * n + half  # the position of each chain's middle draw
    column = np.full(s, -1)  # each position's column among the kept ones, chain-major (−1: a middle)
    column[np.delete(np.arange(s), middles)] = np.arange(s - c)

    def split_scores(dealt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bulk and tail z-scores of the split chains (elements, 2C, N // 2) of the draws dealt out
        by ``dealt`` (the pooled draw at each position), and whether their folds are all alike."""
        left_out = np.zeros(s, dtype=bool)
        left_out[dealt[middles]] = True
        keep = ~left_out[order]  # C struck from each sorted row
        dealt_column = np.empty(s, dtype=np.int64)
        dealt_column[dealt] = column  # the column each pooled draw is dealt to
        kept_ordered = ordered[keep].reshape(b, s - c)
        kept_columns = dealt_column[order[keep]].reshape(b, s - c)
        bulk, tail, flat_fold = _kept_scores(kept_ordered, kept_columns)
        return bulk.reshape(b, 2 * c, half), tail.reshape(b, 2 * c, half), flat_fold

    def split_rhat(bulk: np.ndarray, tail: np.ndarray, flat_fold: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.fmax(_rhat_rows(bulk), np.where(flat_fold, np.nan, _rhat_rows(tail)))

    bulk, tail, flat_fold = split_scores(np.arange(s))
    rhat = split_rhat(bulk, tail, flat_fold)
    ess_bulk = _ess_rows(bulk)
    own = np.take(values, np.delete(np.arange(s), middles), axis=1).reshape(b, 2 * c, half)
    lower, upper = (_quantile(ordered, q)[:, None, None] for q in TAIL_QUANTILES)
    ess_tail = np.minimum(_ess_rows((own <= lower).astype(np.float64)), _ess_rows((own <= upper).astype(np.float64)))
    shuffled = np.empty((len(orders), b))
    for k, dealt in enumerate(orders):
        shuffled[k] = split_rhat(*split_scores(dealt))
    return rhat, ess_bulk, ess_tail, shuffled


def _kept_scores(ordered: np.ndarray, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bulk and tail z-scores of each row's kept draws, given sorted with the column each goes to
    (an even number of them), in those columns; and whether each row's folds are all alike."""
    b, kept = ordered.shape
    mid = kept // 2
    rows = (np.arange(b) * kept)[:, None]
    bulk, tail = np.empty((b, kept)), np.empty((b, kept))
    bulk.ravel()[(rows + columns).ravel()] = _sorted_scores(ordered).ravel()
    folded = np.abs(ordered - _median(ordered)[:, None])
    runs = np.concatenate([folded[:, mid - 1 :: -1], folded[:, mid:]], axis=1)
    merged = np.argsort(runs, axis=1, kind="stable")
    fold_ordered = np.take_along_axis(runs, merged, axis=1)
    fold_columns = np.take_along_axis(np.concatenate([columns[:, mid - 1 :: -1], columns[:, mid:]], axis=1), merged,
                                      axis=1)
    tail.ravel()[(rows + fold_columns).ravel()] = _sorted_scores(fold_ordered).ravel()
    return bulk, tail, fold_ordered[:, 0] == fold_ordered[:, -1]


@functools.cache
def _score_table(s: int) -> np.ndarray:
    """Φ⁻¹((r − 3/8) / (S + 1/4)) of every rank r = 1, 1.5, …, S that ties can give, at index 2r − 2:
    each computed as :func:`core.engine.convergence.rank_normalise` computes it, once."""
    ranks = np.arange(2 * s - 1) / 2.0 + 1.0
    return torch.special.ndtri(torch.from_numpy((ranks - 0.375) / (s + 0.25))).numpy()


def _normal_scores(ordered: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each row's rank-normalised scores (ranks with ties averaged, through Φ⁻¹) from its sorted
    values and their order: :func:`core.engine.convergence.rank_normalise`'s, bit for bit."""
    scores = np.empty(ordered.shape)
    np.put_along_axis(scores, order, _sorted_scores(ordered), axis=1)
    return scores


def _sorted_scores(ordered: np.ndarray) -> np.ndarray:
    """The rank-normalised scores of each sorted row, in its sorted order."""
    s = ordered.shape[1]
    table = _score_table(s)
    starts = np.ones(ordered.shape, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    if starts.all():  # no ties: a draw's rank is its place in the order
        return np.broadcast_to(table[::2], ordered.shape)
    # a tie's first and last places, whose mean is its rank
    index = np.broadcast_to(np.arange(s), ordered.shape)
    ends = np.ones(ordered.shape, dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    first = np.maximum.accumulate(np.where(starts, index, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, index, s - 1)[:, ::-1], axis=1)[:, ::-1]
    return table[first + last]


def _median(ordered: np.ndarray) -> np.ndarray:
    """Each sorted row's median, as ``np.median`` gives it (the mean of the two middle values)."""
    s = ordered.shape[1]
    middle = ordered[:, (s - 1) // 2 : s // 2 + 1]
    return middle.mean(axis=1)


def _quantile(ordered: np.ndarray, q: float) -> np.ndarray:
    """Each sorted row's ``q`` quantile as ``np.quantile``'s default ("linear") gives it, bit for
    bit: the virtual index (S − 1)·q, the two values around it, and numpy's interpolation between
    them (from the nearer one)."""
    s = ordered.shape[1]
    virtual = (s - 1) * q
    below = math.floor(virtual)
    if virtual >= s - 1:
        return ordered[:, -1].copy()
    gamma = virtual - below
    a, b = ordered[:, below], ordered[:, below + 1]
    difference = b - a
    return b - difference * (1 - gamma) if gamma >= 0.5 else a + difference * gamma


def _rhat_rows(split: np.ndarray) -> np.ndarray:
    """Split-R̂ of each row of (elements, chains, draws), as ``convergence._rhat_plain``."""
    n = split.shape[2]
    within = split.var(axis=2, ddof=1).mean(axis=1)
    between = n * split.mean(axis=2).var(axis=1, ddof=1)
    return np.sqrt((between / within + n - 1) / n)


def _shuffled_rhat(scores: np.ndarray, dealt: np.ndarray, c: int) -> np.ndarray:
    """(orders, elements) split-R̂ of each row's (elements, C·N) z-scores dealt out by each order.

    Every order splits all C·N draws into 2C chains of N/2, so the within-chain variances' sum is
    the pooled sum of squares about the pooled mean less N/2 times the chains' squared mean
    deviations; the scores are centred first, so the subtraction loses nothing (the chains' means
    lie near the pooled one)."""
    b, s = scores.shape
    half, chains = s // (2 * c), 2 * c
    centred = scores - scores.mean(axis=1, keepdims=True)
    squares = np.einsum("ij,ij->i", centred, centred)
    means = (centred @ dealt).reshape(b, -1, chains).transpose(1, 0, 2) / half  # (orders, elements, chains)
    between = half * means.var(axis=2, ddof=1)
    within = (squares - half * (means * means).sum(axis=2)) / (chains * (half - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + half - 1) / half)


def _ess_rows(split: np.ndarray) -> np.ndarray:
    """ESS of each row of (elements, chains, draws): ``convergence.effective_sample_size``'s Stan
    estimator, with the chains' power spectra averaged before one inverse FFT and Geyer's
    sequences taken as running minima over the lag pairs."""
    b, c, n = split.shape
    size = 2 ** math.ceil(math.log2(2 * n))
    spectrum = np.fft.rfft(split - split.mean(axis=2, keepdims=True), n=size, axis=2).view(np.float64)
    # |F|² = re² + im², averaged over the chains (the spectrum read as its real and imaginary parts)
    power = np.einsum("bcki,bcki->bk", spectrum.reshape(b, c, -1, 2), spectrum.reshape(b, c, -1, 2)) / c
    acov = np.fft.irfft(power, n=size, axis=1)[:, :n] / n  # the chains' mean autocovariance
    mean_var = acov[:, 0] * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if c > 1:
        var_plus = var_plus + split.mean(axis=2).var(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var[:, None] - acov) / var_plus[:, None]  # (elements, lags)
    tau = _geyer_tau(rho, n)
    total = c * n
    ess = total / np.maximum(tau, 1.0 / np.log10(total))
    constant = (split.max(axis=(1, 2)) - split.min(axis=(1, 2))) < np.finfo(float).resolution
    return np.where(constant, float(total), ess)


def _geyer_tau(rho: np.ndarray, n: int) -> np.ndarray:
    """τ̂ = −1 + 2 Σ ρ̂_t of each row of autocorrelations, truncated and smoothed as Stan and ArviZ
    do it (``convergence.effective_sample_size``'s loops, all lags at once).

    The pairs P_k = ρ̂_2k + ρ̂_2k+1 (with ρ̂_0 = 1) are summed while positive: the first pair
    that is not ends the sequence, unless the lags run out first (pairs up to the one starting
    at lag n − 3). Each pair kept is lowered to the smallest before it (monotone sequence), and
    the ending pair's even lag is added alone when positive (or when its pair sums to 0, as the
    loop kept it then)."""
    b = rho.shape[0]
    last = max(0, math.ceil((n - 4) / 2))  # pairs after the first the loop can reach
    even = rho[:, 2 : 2 * last + 1 : 2]
    pairs = np.concatenate([1.0 + rho[:, 1:2] if n > 1 else np.ones((b, 1)), even + rho[:, 3 : 2 * last + 2 : 2]],
                           axis=1)  # (elements, last + 1)
    ended = ~(pairs > 0)  # NaN ends it, as in the loop
    stop = np.where(ended.any(axis=1), ended.argmax(axis=1), last + 1)
    stop = np.minimum(stop, last)  # pairs kept before the ending one
    monotone = np.minimum.accumulate(pairs, axis=1)
    kept = np.where(np.arange(last + 1) < stop[:, None], monotone, 0.0).sum(axis=1)
    rows = np.arange(b)
    ending_even = np.where(stop > 0, np.concatenate([np.ones((b, 1)), even], axis=1)[rows, stop], 1.0)
    ending_pair = pairs[rows, stop]
    tail = np.where((ending_even > 0) | (ending_pair >= 0), ending_even, 0.0)
    return -1.0 + 2.0 * kept + tail
