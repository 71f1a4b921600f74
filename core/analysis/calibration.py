"""Calibration beyond bins: SmoothECE (Błasiok & Nakkiran 2023, "Smooth ECE: principled
reliability diagrams via kernel smoothing").

For predictions f ∈ [0, 1] and outcomes y ∈ {0, 1} (here: the top class's p̄ and whether it was
right), the residual y − f is smoothed with a Gaussian kernel of width σ *reflected at 0 and 1*
(the law of π(f + σZ), π folding ℝ onto [0, 1] by reflection), so no mass leaks out of [0, 1]:

    K̃_σ(t, f) = Σ_{k ∈ ℤ} φ_σ(t − f − 2k) + φ_σ(t + f − 2k),   t ∈ [0, 1],
    smECE_σ    = ∫₀¹ | E[K̃_σ(t, f) (y − f)] | dt.

smECE_σ falls as σ grows, and SmoothECE is smECE at the one σ* where smECE_σ* = σ*: the
bandwidth is chosen by the data, no bin count to pick. Here the integral is taken on a grid of
:data:`GRID` cells with the residuals spread onto it by linear interpolation (as the authors'
``relplot`` does); the reflections are the grid mirrored into one period of length 2, smoothed
by a circular convolution (FFT) with the Gaussian wrapped on that period; σ* is found by
bisection. :func:`reflected_kernel` writes K̃ out term by term, for the tests' direct sums.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: Cells of the grid on [0, 1] the smoothed residual is integrated on.
GRID = 1000
#: Reflections of the kernel summed on each side (σ ≤ 1: the next ones weigh < φ(3)).
REFLECTIONS = 3


def _spread(f: np.ndarray, r: np.ndarray, m: int) -> np.ndarray:
    """Residuals ``r`` at ``f`` spread onto the m + 1 grid points j/m by linear interpolation,
    divided by n (the mean, not the sum)."""
    pos = np.clip(f, 0.0, 1.0) * m
    low = np.minimum(np.floor(pos).astype(np.int64), m - 1)
    w = pos - low
    out = np.bincount(low, r * (1 - w), minlength=m + 1) + np.bincount(low + 1, r * w, minlength=m + 1)
    return out / len(f)


def reflected_kernel(t: Any, f: Any, sigma: float, reflections: int = REFLECTIONS) -> np.ndarray:
    """K̃_σ(t, f) (len(t), len(f)): the Gaussian kernel reflected at 0 and 1."""
    t = np.asarray(t, dtype=np.float64)[:, None]
    f = np.asarray(f, dtype=np.float64)[None, :]
    out = np.zeros((t.shape[0], f.shape[1]))
    norm = 1.0 / (sigma * math.sqrt(2 * math.pi))
    for k in range(-reflections, reflections + 1):
        out += np.exp(-0.5 * ((t - f - 2 * k) / sigma) ** 2) + np.exp(-0.5 * ((t + f - 2 * k) / sigma) ** 2)
    return out * norm


def smooth_ece_at(f: Any, y: Any, sigma: float, grid: int = GRID) -> float:
    """smECE_σ of predictions ``f`` (n,) in [0, 1] and outcomes ``y`` (n,) in {0, 1}."""
    f = np.asarray(f, dtype=np.float64).reshape(-1)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if len(f) == 0:
        return math.nan
    points = np.linspace(0.0, 1.0, grid + 1)
    return float(np.trapezoid(np.abs(_smoothed(_spread(f, y - f, grid), sigma, grid)), points))


def _smoothed(spread: np.ndarray, sigma: float, m: int) -> np.ndarray:
    """Σ_j spread_j K̃_σ(i/m, j/m) for i = 0 … m: a point at g in (0, 1) and its mirror −g on the
    circle of length 2 (the reflections at 0 and 1 are the wraps of that circle); the ends, their
    own mirrors, count twice, as K̃(t, 0) = 2 Σ_k φ_σ(t − 2k)."""
    circle = np.concatenate([spread, spread[-2:0:-1]])  # positions 0 … 2m − 1
    circle[0] *= 2
    circle[m] *= 2
    d = np.arange(2 * m) / m
    d = np.minimum(d, 2.0 - d)  # circular distance
    wrapped = sum(np.exp(-0.5 * ((d + 2 * k) / sigma) ** 2) for k in range(-REFLECTIONS, REFLECTIONS + 1))
    wrapped = wrapped / (sigma * math.sqrt(2 * math.pi))  # the weights carry 1/n already
    out = np.fft.irfft(np.fft.rfft(circle) * np.fft.rfft(wrapped), n=2 * m)
    return out[: m + 1]


def smooth_ece_bandwidth(f: Any, y: Any, grid: int = GRID, tol: float = 1e-6) -> float:
    """σ*: the fixed point smECE_σ = σ (bisection; smECE_σ − σ falls as σ grows)."""
    low, high = 1e-4, 1.0
    if smooth_ece_at(f, y, low, grid) <= low:
        return low
    while high - low > tol:
        mid = 0.5 * (low + high)
        if smooth_ece_at(f, y, mid, grid) > mid:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def smooth_ece(f: Any, y: Any, grid: int = GRID) -> float:
    """SmoothECE: smECE at its own bandwidth σ* (equal to σ* up to the bisection's tolerance)."""
    if len(np.asarray(f).reshape(-1)) == 0:
        return math.nan
    sigma = smooth_ece_bandwidth(f, y, grid)
    return smooth_ece_at(f, y, sigma, grid)


def top_label_smooth_ece(proba: Any, labels: Any, grid: int = GRID) -> float:
    """SmoothECE of the top class: f = max p̄, y = 1[the top class is the label] (what binned
    top-label ECE measures with bins)."""
    p = np.asarray(proba, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    return smooth_ece(p.max(-1), p.argmax(-1) == y, grid)


__all__ = ["GRID", "reflected_kernel", "smooth_ece", "smooth_ece_at", "smooth_ece_bandwidth",
           "top_label_smooth_ece"]
