"""HMC explores the whole target in every chain (issue 12): step-size jitter, Neal 2011 §5.4.

With ε and L fixed, a chain whose trajectory length is close to a period of the dynamics
returns near its start on every transition: it accepts almost everything and still explores
a fraction of the variance. Pooled moments over chains can hide that, so these tests look at
each chain's variance along each principal direction of a Gaussian target.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.engine.inference import hmc
from core.engine.runner import drain

#: Principal variances of the target (a 64:1 spread) along a random rotation of the axes.
EIGENVALUES = np.array([4.0, 1.0, 0.25, 0.0625])
#: Each chain's variance along each principal direction, as a fraction of the truth, must
#: lie here. With ~1000 draws the sampling error of a well-mixing chain is ~10-15%; a
#: periodic chain (the failure) reaches 0.3x-0.5x or 1.8x-2.7x, or stays put (0x).
TOLERANCE = (0.6, 1.5)


class GaussianTarget:
    """N(0, Σ) per chain with the exact gradient (no autograd, so the test runs in seconds)."""

    def __init__(self, covariance: np.ndarray) -> None:
        self.precision = torch.tensor(np.linalg.inv(covariance), dtype=torch.float32)

    def log_prob_and_grad(self, params, batch):
        theta = params["theta"]
        p_theta = theta @ self.precision  # Σ⁻¹ is symmetric
        return -0.5 * (theta * p_theta).sum(1), {"theta": -p_theta}


def _rotation(d: int, seed: int = 0) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def _per_chain_ratios(config: hmc.HmcConfig, covariance: np.ndarray, axes: np.ndarray,
                      variances: np.ndarray, seed: int) -> tuple[np.ndarray, float]:
    g = torch.Generator().manual_seed(seed)
    params = {"theta": torch.randn(config.num_chains, len(variances), generator=g)}
    result = drain(hmc.run(params, config=config, target=GaussianTarget(covariance), batch=None, generator=g))
    draws = result.samples["theta"].double().numpy() @ axes  # (chain, draw, principal axis)
    acceptance = float(result.traces["acceptance"][:, config.num_warmup:].mean())
    return draws.var(axis=1, ddof=1) / variances, acceptance


def _adapted(jitter: float) -> hmc.HmcConfig:
    return hmc.HmcConfig(num_chains=8, num_warmup=300, num_samples=1000, num_leapfrog=10,
                         step_size=0.1, step_size_jitter=jitter)


@pytest.mark.parametrize("seed", [1, 3])
def test_every_chain_explores_every_direction_after_warmup(seed):
    """With the default jitter, on the seeds where unjittered chains fail."""
    q = _rotation(len(EIGENVALUES))
    cov = q @ np.diag(EIGENVALUES) @ q.T
    ratios, acceptance = _per_chain_ratios(_adapted(hmc.HmcConfig().step_size_jitter), cov, q, EIGENVALUES, seed)
    assert acceptance > 0.6
    assert ratios.min() > TOLERANCE[0] and ratios.max() < TOLERANCE[1], ratios.round(2)


def test_without_jitter_adapted_chains_fail_the_same_tolerance():
    """The tolerance has teeth: without jitter, chains that accept nearly everything still fail
    it on at least two of six seeds. Which seeds lock into a near-periodic trajectory depends on
    the processor's rounding (seed 3 did on one machine, 0, 1, 2 and 5 on another), so no one
    seed is named."""
    q = _rotation(len(EIGENVALUES))
    cov = q @ np.diag(EIGENVALUES) @ q.T
    failed = 0
    for seed in range(6):
        ratios, acceptance = _per_chain_ratios(_adapted(0.0), cov, q, EIGENVALUES, seed)
        assert acceptance > 0.9  # it accepts nearly everything ...
        failed += ratios.min() < TOLERANCE[0] or ratios.max() > TOLERANCE[1]  # ... and still fails
    assert failed >= 2, failed


def test_jitter_breaks_an_exactly_periodic_trajectory():
    """Unit Gaussian, ε chosen so that L leapfrog steps rotate phase space by exactly 2π.

    For U = θ²/2 one leapfrog step of size ε is a rotation by φ = arccos(1 − ε²/2), so
    with L·φ = 2π every proposal lands back on its start: without jitter each chain is
    frozen at its initial point (variance 0, acceptance 1). With ε jittered by ±20% the
    same chains sample N(0, I).
    """
    d, L = 3, 10
    eps = math.sqrt(2.0 * (1.0 - math.cos(2.0 * math.pi / L)))
    eye = np.eye(d)
    frozen = hmc.HmcConfig(num_chains=4, num_warmup=0, num_samples=600, num_leapfrog=L, step_size=eps,
                           step_size_jitter=0.0, adapt_step_size=False, adapt_mass=False)
    ratios, acceptance = _per_chain_ratios(frozen, eye, eye, np.ones(d), 0)
    assert acceptance > 0.99 and ratios.max() < 1e-3
    jittered = hmc.HmcConfig(num_chains=4, num_warmup=0, num_samples=600, num_leapfrog=L, step_size=eps,
                             step_size_jitter=0.2, adapt_step_size=False, adapt_mass=False)
    ratios, _ = _per_chain_ratios(jittered, eye, eye, np.ones(d), 0)
    assert ratios.min() > TOLERANCE[0] and ratios.max() < TOLERANCE[1], ratios.round(2)


def test_jitter_is_validated():
    with pytest.raises(ValueError, match="step_size_jitter"):
        hmc.HmcConfig(step_size_jitter=1.0)
