"""How far an HMC trajectory should run: the lag-1 autocorrelation of x and of x² on a Gaussian.

On a standard Gaussian with the identity metric, leapfrog steps of size ε are a linear map of
(x, r): one step is A(ε) = [[1 − ε²/2, ε], [−ε(1 − ε²/4), 1 − ε²/2]], so a proposal of L steps
moves x to a·x + b·r with (a, b) the first row of A(ε)^L, r ~ N(0, 1) fresh. Then
corr(x, x') = E[a] and corr(x², x'²) = E[a²] (Cov(x², (ax + br)²) = 2a², Var x² = 2), the mean
taken over the jitter u ~ U(1 − j, 1 + j) of the step. For small ε, a = cos(εLu): a trajectory
of T ≈ π/2 makes both x and x² nearly independent, while T = 2.5 leaves x anticorrelated (good
for the mean) and x² correlated at about cos² T (bad for the spread, which the folded R̂ and the
tail ESS measure). The expected values are computed here from A(ε) by quadrature over u, not
taken from the sampler.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.engine.inference import hmc, recipes
from core.engine.runner import drain
from tests.core.test_reliability_hmc import GaussianTarget

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _leapfrog_row(eps: float, steps: int) -> np.ndarray:
    """(a, b): x after ``steps`` leapfrog steps of size ``eps`` from (x, r) on U = x²/2."""
    one = np.array([[1 - eps**2 / 2, eps], [-eps * (1 - eps**2 / 4), 1 - eps**2 / 2]])
    return np.linalg.matrix_power(one, steps)[0]


def _expected_lag_one(eps: float, length: float, jitter: float, nodes: int = 801) -> tuple[float, float]:
    """(E[a], E[a²]) over u ~ U(1 − j, 1 + j), with L = ⌈T/ε⌉ as ``hmc.step`` takes it."""
    steps = math.ceil(length / eps)
    us = np.linspace(1 - jitter, 1 + jitter, nodes)
    a = np.array([_leapfrog_row(eps * u, steps)[0] for u in us])
    return float(np.trapezoid(a, us) / (2 * jitter)), float(np.trapezoid(a**2, us) / (2 * jitter))


def _lag_one(draws: np.ndarray) -> tuple[float, float]:
    """Lag-1 autocorrelation of x and of x² from (chains, draws, d) draws of N(0, I) (known moments)."""
    x, y = draws[:, :-1], draws[:, 1:]
    return float((x * y).mean()), float(((x**2 - 1) * (y**2 - 1)).mean() / 2)


def test_the_closed_form_is_a_rotation_for_small_steps():
    a, b = _leapfrog_row(1e-3, 1571)
    assert a == pytest.approx(math.cos(1.571), abs=1e-3) and b == pytest.approx(math.sin(1.571), abs=1e-3)


def test_a_quarter_period_decorrelates_x_squared_where_2_5_does_not():
    """hmc.py's numbers: T = 2.5, j = 0.5 gives E[cos τ] ≈ −0.6 and E[cos² τ] ≈ 0.53; T = π/2
    gives 0 and 0.18 (j = 0.5), 0.07 (j = 0.3)."""
    assert _expected_lag_one(1e-2, 2.5, 0.5) == pytest.approx((-0.61, 0.53), abs=0.02)
    assert _expected_lag_one(1e-2, math.pi / 2, 0.5) == pytest.approx((0.0, 0.18), abs=0.02)
    assert _expected_lag_one(1e-2, math.pi / 2, 0.3)[1] == pytest.approx(0.07, abs=0.02)


@pytest.mark.parametrize(("length", "jitter"), [(math.pi / 2, 0.5), (math.pi / 2, 0.2), (2.5, 0.5)])
def test_lag_one_autocorrelation_of_x_and_x_squared_match_the_leapfrog_map(length, jitter):
    """100 independent coordinates, 4 chains of 600 draws, ε = 0.1 fixed (acceptance ≈ 1)."""
    config = hmc.HmcConfig(num_chains=4, num_warmup=0, num_samples=600, num_leapfrog=100, step_size=0.1,
                           step_size_jitter=jitter, trajectory_length=length, adapt_step_size=False,
                           adapt_mass=False)
    g = torch.Generator().manual_seed(0)
    params = {"theta": torch.randn(config.num_chains, 100, generator=g)}
    result = drain(hmc.run(params, config=config, target=GaussianTarget(np.eye(100)), batch=None, generator=g))
    measured = _lag_one(result.samples["theta"].double().numpy())
    expected = _expected_lag_one(0.1, length, jitter)
    assert measured == pytest.approx(expected, abs=0.03)


def test_the_features_tiers_trajectory_leaves_x_squared_nearly_independent():
    """The features tier's own trajectory settings on a whitened Gaussian (what the curvature
    metric makes of its posterior), ε adapted as in the tier: x² (what the folded R̂ sees) keeps
    the lag-1 autocorrelation of its closed form plus the share of rejected proposals (a
    rejection repeats the draw), far below T = 2.5's (≈ 0.5 before rejections)."""
    sets = dict(recipes.FEATURES_HMC[i + 1].split("=") for i, a in enumerate(recipes.FEATURES_HMC) if a == "--set")
    length = float(sets["trajectory_length"])
    jitter = float(sets.get("step_size_jitter", hmc.HmcConfig.step_size_jitter))
    config = hmc.HmcConfig(num_chains=4, num_warmup=int(sets["num_warmup"]), num_samples=400,
                           num_leapfrog=int(sets["num_leapfrog"]), step_size=float(sets["step_size"]),
                           step_size_jitter=jitter, trajectory_length=length,
                           target_accept=float(sets["target_accept"]), adapt_mass=False)
    g = torch.Generator().manual_seed(1)
    params = {"theta": torch.randn(config.num_chains, 200, generator=g)}
    result = drain(hmc.run(params, config=config, target=GaussianTarget(np.eye(200)), batch=None, generator=g))
    _, squared = _lag_one(result.samples["theta"].double().numpy())
    accepted = float(result.traces["acceptance"][:, config.num_warmup:].mean())
    ideal = float(np.mean([_expected_lag_one(float(e), length, jitter)[1] for e in result.state.step_size]))
    assert ideal < 0.15
    assert squared == pytest.approx(1 - accepted + accepted * ideal, abs=0.06)
