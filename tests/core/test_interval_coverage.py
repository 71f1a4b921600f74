"""The credible interval holds what it says it holds: a simulation with known distributions.

S draws from a distribution whose CDF F is known; the interval is built as the window builds
it; the mass F(upper) − F(lower) of the TRUE distribution inside it, averaged over many
repetitions, must match the stated :func:`expected_coverage`. The tolerance is four Monte-Carlo
standard errors, from the Beta(k − j, S + 1 − k + j) spread of one repetition's coverage
(Beta variance ab/((a + b)²(a + b + 1))): a correct interval fails it about once in 16,000.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from core.analysis.uncertainty import (
    credible_interval,
    draws_for_level,
    expected_coverage,
    interval_label,
    interval_ranks,
    summarise,
)

REPEATS = 20_000

#: Known distributions: a symmetric one, a bounded one like a class probability, a skewed one.
DISTRIBUTIONS = {
    "normal": stats.norm(loc=0.3, scale=2.0),
    "beta(0.3, 3)": stats.beta(0.3, 3.0),  # most draws near 0, a long tail: a minor class
    "lognormal": stats.lognorm(s=1.0),
}


def _simulated_coverage(dist, s: int, level: float, seed: int) -> tuple[float, float]:
    """Mean coverage of the interval over REPEATS sets of s draws, and one repeat's std."""
    draws = torch.as_tensor(dist.rvs(size=(s, REPEATS), random_state=seed), dtype=torch.float64)
    lower, upper = credible_interval(draws, level)
    coverage = dist.cdf(upper.numpy()) - dist.cdf(lower.numpy())
    return float(coverage.mean()), float(coverage.std())


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("s", [2, 5, 8, 20, 100])
def test_the_stated_coverage_is_the_true_mass_inside(name, s):
    level = 0.9
    j, k = interval_ranks(s, level)
    a, b = k - j, s + 1 - (k - j)
    stated = expected_coverage(s, level)
    # independent of the code's formula: the mean and spread of Beta(a, b)
    assert stated == pytest.approx(a / (a + b), abs=1e-12)
    beta_sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    got, sd = _simulated_coverage(DISTRIBUTIONS[name], s, level, seed=s)
    assert sd == pytest.approx(beta_sd, rel=0.05)  # the whole Beta law, not only its mean
    assert got == pytest.approx(stated, abs=4 * beta_sd / math.sqrt(REPEATS))


@pytest.mark.parametrize("s", [2, 5, 8, 20, 100])
def test_enough_draws_hold_the_level_and_too_few_say_so(s):
    held = expected_coverage(s, 0.9)
    # Order statistics 1 and S (the widest pair) hold (S − 1)/(S + 1): 90% needs S ≥ 19.
    if s < 19:
        assert held == pytest.approx((s - 1) / (s + 1))
        assert interval_label(s, 0.9) == f"{round(100 * held)}% interval (90% asked)"
    else:
        assert 0.9 <= held < 0.9 + 2 / (s + 1)  # one rank pair more would drop below 90%
    assert draws_for_level(0.9) == 19
    assert draws_for_level(0.95) == 39  # (S − 1)/(S + 1) ≥ 0.95 ⇔ S ≥ 39


def test_the_old_interpolated_interval_held_less_than_it_said():
    """The test can tell: torch.quantile's linear interpolation, the old interval, held about
    (S − 1)·level/(S + 1) = 70% at S = 8 (exactly so for uniform draws), far outside the
    tolerance around the 90% it was labelled with."""
    dist, s = stats.uniform(), 8
    draws = torch.as_tensor(dist.rvs(size=(s, REPEATS), random_state=1), dtype=torch.float64)
    q = torch.quantile(draws, torch.tensor([0.05, 0.95], dtype=torch.float64), dim=0)
    old = float((dist.cdf(q[1].numpy()) - dist.cdf(q[0].numpy())).mean())
    assert old == pytest.approx(7 * 0.9 / 9, abs=0.005)
    assert abs(old - 0.9) > 0.15


def test_ranks_and_values_of_a_known_sample():
    # 9 draws 1..9 at 80%: m ≤ 0.2·10/2 = 1, so the 1st and 9th smallest; 8/10 = 80% held.
    samples = torch.arange(1.0, 10.0)[torch.randperm(9, generator=torch.Generator().manual_seed(0))].unsqueeze(1)
    lower, upper = credible_interval(samples, 0.8)
    assert (float(lower[0]), float(upper[0])) == (1.0, 9.0)
    assert expected_coverage(9, 0.8) == pytest.approx(0.8)
    # at 50%: m ≤ 0.5·10/2 = 2.5 → 2nd and 8th smallest, 6/10 held
    lower, upper = credible_interval(samples, 0.5)
    assert (float(lower[0]), float(upper[0])) == (2.0, 8.0)
    assert expected_coverage(9, 0.5) == pytest.approx(0.6)


def test_one_draw_has_no_interval_and_the_summary_records_the_coverage():
    summary = summarise(torch.tensor([[0.2, 0.8]]))
    assert summary.expected_coverage == 0.0 and summary.interval_label == "no interval (1 draw)"
    summary = summarise(torch.softmax(torch.randn(8, 3, generator=torch.Generator().manual_seed(0)), -1))
    assert summary.interval_record() == {"level": 0.9, "expected_coverage": pytest.approx(7 / 9), "num_samples": 8}
    assert summary.interval_label == "78% interval (90% asked)"
