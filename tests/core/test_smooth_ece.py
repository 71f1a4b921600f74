"""SmoothECE (Błasiok & Nakkiran 2023) against hand computations and a direct implementation of
its definition, and classwise ECE against its definition."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.calibration import (
    reflected_kernel,
    smooth_ece,
    smooth_ece_at,
    smooth_ece_bandwidth,
    top_label_smooth_ece,
)
from core.analysis.metrics import classwise_calibration_error, expected_calibration_error


def direct_smooth_ece_at(f: np.ndarray, y: np.ndarray, sigma: float) -> float:
    """The definition term by term: ∫₀¹ |(1/n) Σᵢ K̃_σ(t, fᵢ)(yᵢ − fᵢ)| dt, the kernel's
    reflections summed out to ±4 periods, the integral by the trapezoid rule on 10,001 points,
    the predictions where they are (no grid)."""
    t = np.linspace(0.0, 1.0, 10_001)
    kernel = reflected_kernel(t, f, sigma, reflections=4)
    return float(np.trapezoid(np.abs(kernel @ (y - f)) / len(f), t))


@pytest.fixture
def arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    f = np.concatenate([rng.beta(6, 1.5, 150), [0.0, 1.0, 0.003, 0.999]])  # the ends too
    y = (rng.random(len(f)) < np.clip(f, 0, 1) ** 1.6).astype(np.float64)
    return f, y


@pytest.mark.parametrize("sigma", [0.02, 0.05, 0.2])
def test_matches_the_definition(arrays, sigma: float) -> None:
    f, y = arrays
    assert smooth_ece_at(f, y, sigma) == pytest.approx(direct_smooth_ece_at(f, y, sigma), rel=2e-3)


def test_reflected_kernel_keeps_its_mass_in_the_unit_interval() -> None:
    t = np.linspace(0, 1, 10_001)
    for f in (0.0, 0.01, 0.5, 0.97, 1.0):
        mass = np.trapezoid(reflected_kernel(t, [f], 0.1)[:, 0], t)
        assert mass == pytest.approx(1.0, abs=1e-6)


def test_one_sign_residuals_give_their_mean() -> None:
    """Residuals of one sign: |E[K̃(t, f)(y − f)]| integrates to |mean(y − f)| at every σ (the
    kernel holds mass 1 on [0, 1]); so the fixed point is that mean."""
    f = np.array([0.1, 0.3, 0.35, 0.6])
    y = np.ones(4)  # residuals 0.9, 0.7, 0.65, 0.4: mean 0.6625
    for sigma in (0.01, 0.1, 0.5):
        assert smooth_ece_at(f, y, sigma) == pytest.approx(0.6625, rel=1e-3)
    assert smooth_ece(f, y) == pytest.approx(0.6625, rel=1e-3)


def test_one_prediction_value() -> None:
    """Every prediction 0.8, outcomes 1 in 6 of 10: smECE_σ = |0.6 − 0.8| = 0.2 at every σ."""
    f = np.full(10, 0.8)
    y = np.array([1, 1, 1, 1, 1, 1, 0, 0, 0, 0], dtype=float)
    assert smooth_ece(f, y) == pytest.approx(0.2, rel=1e-3)


def test_bandwidth_is_the_fixed_point(arrays) -> None:
    f, y = arrays
    sigma = smooth_ece_bandwidth(f, y)
    assert smooth_ece_at(f, y, sigma) == pytest.approx(sigma, abs=1e-5)
    assert smooth_ece(f, y) == pytest.approx(sigma, abs=1e-5)


def test_calibrated_beats_miscalibrated() -> None:
    rng = np.random.default_rng(2)
    f = rng.random(20_000)
    calibrated = (rng.random(len(f)) < f).astype(float)
    overconfident = (rng.random(len(f)) < 0.5 + 0.5 * (f - 0.5)).astype(float)  # truth half as far from 0.5
    assert smooth_ece(f, calibrated) < 0.02
    # the gap |f − (0.5 + (f − 0.5)/2)| = |f − 0.5|/2 averages 0.125 over uniform f; smoothing shrinks it a little
    assert 0.10 < smooth_ece(f, overconfident) < 0.13


def test_top_label_uses_confidence_and_correctness() -> None:
    proba = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.6, 0.3, 0.1]])
    labels = np.array([0, 0, 0])  # right, wrong, right
    f, y = np.array([0.7, 0.8, 0.6]), np.array([1.0, 0.0, 1.0])
    assert top_label_smooth_ece(proba, labels) == pytest.approx(smooth_ece(f, y))


def test_classwise_ece_is_the_mean_of_one_vs_rest_binned_ece() -> None:
    rng = np.random.default_rng(9)
    proba = rng.dirichlet(np.ones(4), 300)
    labels = rng.integers(0, 4, 300)
    mean, per_class = classwise_calibration_error(proba, labels, bins=10)
    for k in range(4):  # class k by hand: 10 equal bins of p̄_k, |mean p̄_k − share of label k| weighted
        p, hit = proba[:, k], (labels == k).astype(float)
        which = np.minimum((p * 10).astype(int), 9)
        gap = sum(abs(p[which == b].mean() - hit[which == b].mean()) * (which == b).sum()
                  for b in range(10) if (which == b).any()) / len(p)
        assert per_class[k] == pytest.approx(gap)
    assert mean == pytest.approx(per_class.mean())
    assert expected_calibration_error(proba, labels) >= 0
