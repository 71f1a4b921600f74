"""The share of exact inference's mass inside a method's interval, against known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.analysis.interval_mass import mass_inside

Z90 = 1.6448536269514722  # Φ⁻¹(0.95): a central 90 % interval is μ ± Z90·σ


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _gaussian_draws(mean: float, sd: float, draws: int, cells: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return mean + sd * torch.randn(draws, cells, 1, generator=g, dtype=torch.float64)


def test_an_exact_gaussian_interval_holds_its_level() -> None:
    """A method whose draws come from the posterior itself holds 90 % of it in its 90 % interval."""
    reference = _gaussian_draws(0.5, 0.05, 4000, 200, seed=1)
    method = _gaussian_draws(0.5, 0.05, 4000, 200, seed=2)
    shares = mass_inside(reference, method, level=0.9)
    assert shares.shape == (200,)
    # each share: binomial over 4000 draws (sd 0.005) plus the interval's own quantile error
    # (about 0.006 at 4000 draws); their mean over 200 cells has sd below 0.001
    assert abs(shares.mean() - 0.9) < 0.005


def test_a_gaussian_at_half_the_width_holds_the_known_smaller_share() -> None:
    """Half the posterior's sd: the interval μ ± Z90·σ/2 holds 2Φ(Z90/2) − 1 ≈ 0.589 of it."""
    known = 2 * _phi(Z90 / 2) - 1
    reference = _gaussian_draws(0.5, 0.05, 4000, 200, seed=3)
    method = _gaussian_draws(0.5, 0.025, 4000, 200, seed=4)
    shares = mass_inside(reference, method, level=0.9)
    assert abs(known - 0.5889) < 1e-3  # the analytic figure itself
    assert abs(shares.mean() - known) < 0.006
    # a negative control: the exact-width answer is far outside this tolerance
    assert abs(shares.mean() - 0.9) > 0.25


def test_an_interval_off_centre_by_two_sds_holds_the_known_share() -> None:
    """The right width, centred 2σ away: Φ(Z90 − 2) − Φ(−Z90 − 2) ≈ 0.36 (a wrong centre costs mass too)."""
    known = _phi(Z90 - 2) - _phi(-Z90 - 2)
    reference = _gaussian_draws(0.5, 0.05, 4000, 200, seed=5)
    method = _gaussian_draws(0.6, 0.05, 4000, 200, seed=6)
    assert abs(mass_inside(reference, method, level=0.9).mean() - known) < 0.008


def test_cells_the_reference_all_but_rules_out_are_not_scored() -> None:
    """Only cells with reference mean above 1 % count: a class at 0.5 % is left out."""
    g = torch.Generator().manual_seed(7)
    reference = torch.stack([0.5 + 0.01 * torch.randn(500, generator=g, dtype=torch.float64),
                             torch.full((500,), 0.005, dtype=torch.float64)], dim=-1)  # (500, 2)
    method = reference.clone()
    assert mass_inside(reference, method).shape == (1,)


def test_one_draw_has_no_interval_to_score() -> None:
    with pytest.raises(ValueError, match="at least 2 draws"):
        mass_inside(np.full((10, 3), 0.3), np.full((1, 3), 0.3))


def test_draws_of_different_quantities_are_refused() -> None:
    with pytest.raises(ValueError, match="different quantities"):
        mass_inside(np.full((10, 3), 0.3), np.full((10, 4), 0.3))
