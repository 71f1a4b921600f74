"""The array helpers of :func:`core.analysis.uncertainty.summarise_many`: its numbers for several
posteriors' draws stacked as (C, S, K) float64, each the same as the torch helper of
:mod:`core.analysis.uncertainty` that defines it, in as few numpy calls as it takes (on arrays of
a few hundred numbers each call costs its 1–3 µs of overhead, not its arithmetic)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch


def as_numpy(samples: torch.Tensor) -> np.ndarray:
    """The draws as a numpy array, float32 or float64 as they came (other types as float64)."""
    samples = samples.detach().cpu()
    return (samples if samples.dtype in (torch.float32, torch.float64) else samples.double()).numpy()


@lru_cache(maxsize=16)
def bin_offsets(c: int, k: int, bins: int) -> np.ndarray:
    """(c·K + k)·bins for every posterior c and class k, shaped (C, 1, K) against the draws."""
    return (np.arange(c * k, dtype=np.int64) * bins).reshape(c, 1, k)


@lru_cache(maxsize=4)
def bin_edges(bins: int) -> np.ndarray:
    """The fixed edges of :func:`~core.analysis.uncertainty.class_histograms` (torch's linspace,
    kept; copied per summary)."""
    edges = torch.linspace(0, 1, bins + 1).numpy()
    edges.flags.writeable = False
    return edges


def correlation_stacked(centred: np.ndarray, constant_std: float) -> np.ndarray:
    """:func:`~core.analysis.uncertainty.class_correlation` of each of C posteriors' draws already
    centred on their mean, (C, S, K) float64 → (C, K, K); classes whose standard deviation is at
    or below ``constant_std`` count as constant."""
    k = centred.shape[2]
    # one matrix product (a seventh of the outer products' time): its sums run in another order
    # than the definition's mean of outer products, so a correlation may differ from it by about
    # 1e-16 (of 600,000 float32 entries from random draws, 40 differed, all by under 2e-16:
    # correlations near 0); every other number of a summary is the definition's bit for bit
    cov = np.matmul(centred.transpose(0, 2, 1), centred) / centred.shape[1]
    std = np.sqrt(cov.diagonal(0, 1, 2))  # (C, K): sums of squares, never below 0 (methods: no dispatch)
    if np.minimum.reduce(std, None) > constant_std:  # the usual case: no class constant (nor a NaN)
        corr = cov / (std[:, :, None] * std[:, None, :])
        np.minimum(np.maximum(corr, -1.0, out=corr), 1.0, out=corr)
    else:
        varying = std > constant_std
        safe = np.where(varying, std, 1.0)
        corr = np.where(varying[:, :, None] & varying[:, None, :],
                        np.minimum(np.maximum(cov / (safe[:, :, None] * safe[:, None, :]), -1.0), 1.0), 0.0)
    corr.reshape(-1, k * k)[:, ::k + 1] = 1.0  # the diagonals (corr is C-contiguous: a view)
    return corr


def top_two_rows(mean: np.ndarray) -> list[tuple[int, int]]:
    """The two classes of largest mean per row of ``mean`` (C, K), as
    :func:`~core.analysis.uncertainty.top_two` orders them: in Python (µs), by ``topk`` itself
    where a tie among the three largest, a NaN or K < 3 leaves the order to its rule for ties."""
    k = mean.shape[1]
    tops = []
    for row in mean.tolist():
        if k >= 3:
            order = sorted(range(k), key=row.__getitem__, reverse=True)[:3]
            if row[order[0]] > row[order[1]] > row[order[2]]:  # no tie among them, no NaN
                tops.append((order[0], order[1]))
                continue
        first, second = torch.tensor(row, dtype=torch.float64).topk(2).indices.tolist()
        tops.append((first, second))
    return tops


#: The smallest positive float64 (subnormal): max(p, it) is p for every p > 0.
TINIEST = float(np.nextafter(0.0, 1.0))


def entropy_rows(p: np.ndarray) -> np.ndarray:
    """:func:`~core.analysis.uncertainty.entropy` along the last axis of a float64 array
    (0·log 0 = 0, never −0)."""
    p = np.maximum(p, 0.0)
    # log p where p > 0 (no positive float is below TINIEST); where p = 0 a finite log whose
    # product with p is ±0, made +0 below: xlogy's 0·log 0 = 0, two calls fewer than log(where=)
    logs = np.log(np.maximum(p, TINIEST))
    logs *= p
    return -np.add.reduce(logs, -1) + 0.0
