"""Stein's identity checks every sampler against its own target, with no reference sampler.

For a density p on ℝᵈ that vanishes fast enough at infinity, integration by parts gives, for
any constant c,

    E_p[(θ − c)ᵀ ∇log p(θ)] = Σᵢ E_p[(θᵢ − cᵢ) ∂ᵢ log p] = −Σᵢ ∫ p = −d.

So the mean over a sampler's draws of s(θ) = (θ − c)ᵀ∇log p(θ) must be −d, up to its Monte
Carlo error. The check needs ∇log p in closed form and nothing else: no quadrature, no
reference run, which is why it checks HMC too (the moment tests of ``test_samplers.py``
compare the mini-batch samplers with HMC on the model target). Draws with the right mean and
too wide a spread fail it (s scales with the spread: draws 1.1× too wide read about −1.21 d on
a Gaussian), and so do draws of the right spread around the wrong place, through c: with
c = 0 a shift δ of the draws adds −μᵀΣ⁻¹δ (linear in δ); with c at the centre it adds
−δᵀΣ⁻¹δ. Each check therefore uses two c, the target's centre and the origin.

Tolerance. The estimate's Monte Carlo standard error is sd(s)/√ESS, with ESS Stan's estimator
(:func:`core.engine.convergence.effective_sample_size`) on the split chains of s, as ArviZ's
``ess(method="mean")``: the draws' own autocorrelation sets it, not the test. A check passes
when |mean(s) + d| < Z·MCSE with Z = 4 (a two-sided false alarm rate of 6·10⁻⁵ per check, so
under 0.2 % over every check here).

A sampler without a Metropolis test has a bias of its own at a finite step: SGLD on a Gaussian
is 1/(1 − ηλ/4) too wide along an axis of precision λ. Where that bias is known in closed form
(SGLD and SGHMC on a Gaussian, whose discretised chains are linear), the test computes it and
asserts it is below a quarter of the tolerance, so that a pass says the sampler is right and
not only that its step happened to be small; the negative controls show that a bias the
tolerance is meant to see (a step 40× too large, a temperature of 1.21, draws scaled by 1.1,
HMC without its Metropolis test) fails.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import torch

from core.engine.convergence import effective_sample_size, split_chains
from core.engine.inference import dsghmc, hmc, sampling, sghmc, sgld
from core.engine.inference.base import Dataset
from core.engine.inference.sample_store import StoragePlan
from core.engine.models import ArchSpec
from core.engine.runner import drain

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Standard errors a check may be off by (see the module docstring).
Z = 4.0


# ---------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class SteinCheck:
    """mean(s) over the draws, its Monte Carlo standard error and the ESS it rests on."""

    estimate: float
    mcse: float
    ess: float
    dim: int

    @property
    def z(self) -> float:
        """How many standard errors mean(s) lies from −d."""
        return (self.estimate + self.dim) / self.mcse

    @property
    def passes(self) -> bool:
        return abs(self.z) < Z

    def __str__(self) -> str:
        return (f"mean (θ − c)ᵀ∇log p = {self.estimate:.4f} against −{self.dim} "
                f"(MCSE {self.mcse:.4f}, ESS {self.ess:.0f}, z {self.z:+.2f})")


def stein_check(draws: np.ndarray, grads: np.ndarray, c: np.ndarray) -> SteinCheck:
    """Stein's identity at draws (chains, draws, d) with ∇log p at each of them, shaped alike."""
    values = np.einsum("cnd,cnd->cn", draws - c, grads)
    ess = float(effective_sample_size(split_chains(values)))
    return SteinCheck(float(values.mean()), float(values.std(ddof=1)) / math.sqrt(ess), ess, draws.shape[-1])


# ------------------------------------------------------------------- a correlated Gaussian

D = 6
#: Principal variances 0.25 … 2 (an 8:1 spread) along a random rotation; a mean away from 0.
EIGENVALUES = np.linspace(0.25, 2.0, D)
_ROTATION, _ = np.linalg.qr(np.random.default_rng(46).normal(size=(D, D)))
COV = (_ROTATION * EIGENVALUES) @ _ROTATION.T
PRECISION = np.linalg.inv(COV)
MEAN = np.random.default_rng(5).normal(size=D)


def gaussian_grad(theta: np.ndarray) -> np.ndarray:
    """∇log N(θ; μ, Σ) = −Σ⁻¹(θ − μ), in float64."""
    return -(theta - MEAN) @ PRECISION


class GaussianTarget:
    """N(μ, Σ) per chain, with its exact gradient (no autograd: thousands of steps in a second)."""

    def __init__(self) -> None:
        self.mean = torch.tensor(MEAN, dtype=torch.float32)
        self.precision = torch.tensor(PRECISION, dtype=torch.float32)

    def log_prob_and_grad(self, params, batch):
        d = params["theta"] - self.mean
        pd = d @ self.precision
        return -0.5 * (d * pd).sum(1), {"theta": -pd}


CHAINS = 1024


def _gaussian_start(generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Chains started twice the target's spread around its mean."""
    chol = torch.tensor(np.linalg.cholesky(COV), dtype=torch.float32)
    z = torch.randn(CHAINS, D, generator=generator)
    return {"theta": torch.tensor(MEAN, dtype=torch.float32) + 2.0 * z @ chol.T}


#: Mini-batch samplers on the Gaussian (exact gradients): burn-in, steps, thinning.
SG_GAUSSIAN = {
    "sgld": (sgld, sgld.SgldConfig(step_size=0.01)),
    "sghmc": (sghmc, sghmc.SghmcConfig(step_size=0.004, friction=0.1)),
}
SG_STEPS, SG_BURN_IN, SG_THIN = 3500, 1500, 10


def run_gaussian(name: str, seed: int = 0, **overrides) -> np.ndarray:
    """Draws (chains, draws, D) of sampler ``name`` on the Gaussian, as float64."""
    generator = torch.Generator().manual_seed(seed)
    params = _gaussian_start(generator)
    target = GaussianTarget()
    if name == "hmc":
        config = hmc.HmcConfig(**{"num_chains": CHAINS, "num_warmup": 200, "num_samples": 200,
                                  "num_leapfrog": 5, "step_size": 0.2, **overrides})
        result = drain(hmc.run(params, config=config, target=target, batch=None, generator=generator))
        return result.samples["theta"].double().numpy()
    module, config = SG_GAUSSIAN[name]
    config = type(config)(**{**config.__dict__, **overrides})
    state = module.init(params, config=config, generator=generator)
    plan = StoragePlan(burn_in=SG_BURN_IN, thin=SG_THIN, num_draws=(SG_STEPS - SG_BURN_IN) // SG_THIN)
    result = drain(sampling.sample_chains(
        module.step, state, config=config, target=target, batches=sampling.constant_batches(),
        num_steps=SG_STEPS, plan=plan, generator=generator,
    ))
    return result.samples["theta"].double().numpy()


def stationary_stein(name: str, config) -> float:
    """E[(θ − μ)ᵀ∇log p] under the stationary law of the *discretised* chain on the Gaussian.

    Both chains are linear in θ (and v) with Gaussian noise, x' = A x + ξ, ξ ~ N(0, Q), so the
    stationary covariance S solves S = A S Aᵀ + Q (a discrete Lyapunov equation) and the
    stationary mean is μ; then E[s] = −tr(Σ⁻¹ S_θθ). It is −d only as the step goes to 0.
    SGLD: θ' − μ = (I − ½ηP)(θ − μ) + √(ηT) z. SGHMC: v' = (1 − α)v − ηP(θ − μ) + √(2αη) z,
    θ' − μ = (θ − μ) + v'.
    """
    eye = np.eye(D)
    if name == "sgld":
        a = eye - 0.5 * config.step_size * PRECISION
        q = config.step_size * config.temperature * eye
        s = scipy.linalg.solve_discrete_lyapunov(a, q)
    else:
        eta, alpha = config.step_size / config.mass, config.friction
        a = np.block([[eye - eta * PRECISION, (1 - alpha) * eye], [-eta * PRECISION, (1 - alpha) * eye]])
        q = 2 * (alpha - config.noise_estimate) * eta * np.block([[eye, eye], [eye, eye]])
        s = scipy.linalg.solve_discrete_lyapunov(a, q)[:D, :D]
    return -float(np.trace(PRECISION @ s))


def test_the_check_passes_exact_draws_and_fails_draws_ten_percent_too_wide():
    """The check itself: independent draws of the target pass with both c; the same draws
    scaled by 1.1 about the mean (E[s] = −1.21 d) fail with both."""
    rng = np.random.default_rng(0)
    exact = MEAN + rng.standard_normal((64, 400, D)) @ np.linalg.cholesky(COV).T
    for c in (MEAN, np.zeros(D)):
        check = stein_check(exact, gaussian_grad(exact), c)
        assert check.passes, check
        assert 0.5 * exact.shape[0] * exact.shape[1] < check.ess < 2 * exact.shape[0] * exact.shape[1]
        wide = MEAN + 1.1 * (exact - MEAN)
        check = stein_check(wide, gaussian_grad(wide), c)
        assert not check.passes, check
    # the same for a shift of a fifth of the smallest s.d. along every axis: c = 0 sees it
    shifted = exact + 0.2 * math.sqrt(EIGENVALUES[0])
    assert not stein_check(shifted, gaussian_grad(shifted), np.zeros(D)).passes


@pytest.mark.parametrize("name", ["sgld", "sghmc", "hmc"])
def test_every_sampler_satisfies_steins_identity_on_a_correlated_gaussian(name):
    """D-SGHMC is not here: without inputs to mask it is SGHMC, step for step; its masked target
    is checked on the logistic regression below."""
    draws = run_gaussian(name)
    grads = gaussian_grad(draws)
    checks = {label: stein_check(draws, grads, c) for label, c in (("mean", MEAN), ("origin", np.zeros(D)))}
    if name != "hmc":  # the step's own bias, in closed form, is well inside what the check can see
        _, config = SG_GAUSSIAN[name]
        bias = stationary_stein(name, config) + D
        assert abs(bias) < 0.25 * Z * checks["mean"].mcse, (bias, str(checks["mean"]))
    for label, check in checks.items():
        assert check.passes, f"{name}, c at the {label}: {check}"


def test_sgld_with_a_step_forty_times_too_large_fails():
    """η = 0.4 (40× the step checked above): the discretised chain is 1/(1 − ηλ/4) too wide along
    each axis; its Stein mean, in closed form −7.18 against −6, is what the check must see, and
    the draws read it (−7.20)."""
    config = sgld.SgldConfig(step_size=0.4)
    expected = stationary_stein("sgld", config)
    assert expected < -D - 0.5
    draws = run_gaussian("sgld", step_size=0.4)
    check = stein_check(draws, gaussian_grad(draws), MEAN)
    assert not check.passes, check
    assert abs(check.estimate - expected) < Z * check.mcse, (expected, str(check))  # and reads the chain's own law


def test_sgld_at_the_wrong_temperature_fails():
    """T = 1.21 samples N(μ, 1.21 Σ): s averages −1.21 d, as for draws 1.1× too wide."""
    draws = run_gaussian("sgld", temperature=1.21)
    check = stein_check(draws, gaussian_grad(draws), MEAN)
    assert not check.passes, check


def test_hmc_without_its_metropolis_test_fails(monkeypatch):
    """A fixed step of 0.75 (jittered 0.375-1.125): with its Metropolis test HMC passes; with every
    proposal accepted (the acceptance uniforms set to 0, which also fixes the jitter at its low
    end, 0.375) the leapfrog's energy error goes uncorrected and the draws come out too wide."""
    settings = {"num_warmup": 50, "adapt_step_size": False, "step_size": 0.75}
    draws = run_gaussian("hmc", **settings)
    check = stein_check(draws, gaussian_grad(draws), MEAN)
    assert check.passes, check
    real = hmc.chain_rand
    monkeypatch.setattr(hmc, "chain_rand", lambda shape, generator, dtype=torch.float32, device="cpu":
                        torch.zeros_like(real(shape, generator, dtype, device)))
    draws = run_gaussian("hmc", **settings)
    check = stein_check(draws, gaussian_grad(draws), MEAN)
    assert not check.passes, check


# --------------------------------------------- logistic regression on the samplers' own model

ARCH_1D = ArchSpec("softmax", num_classes=2, image_size=1)
PRIOR_STD = 1.0


def logistic_data() -> Dataset:
    """40 points, one input each, two classes: a softmax regression of d = 4 weights (the class
    weights' shift is held by the N(0, 1) prior, so the posterior is proper and not Gaussian)."""
    g = torch.Generator().manual_seed(11)
    n = 40
    x = torch.randn(n, generator=g) * 1.5
    y = (torch.rand(n, generator=g) < torch.sigmoid(1.2 * x - 0.4)).long()
    return Dataset(x.reshape(n, 1, 1, 1), y, "toy")


def flat_weights(samples: dict[str, torch.Tensor]) -> np.ndarray:
    """Stored draws as (chains, draws, 4): [w₀, w₁, b₀, b₁]."""
    w, b = samples["linear.weight"], samples["linear.bias"]
    return torch.cat([w.flatten(2), b.flatten(2)], dim=-1).double().numpy()


def _class_residuals(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """onehot(yᵢ) − softmax(w xᵢ + b) at every draw: (..., n, 2)."""
    w, b = theta[..., :2], theta[..., 2:]
    logits = x[:, None] * w[..., None, :] + b[..., None, :]
    logits = logits - logits.max(-1, keepdims=True)
    prob = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return np.eye(2)[y] - prob


def logistic_grad(theta: np.ndarray, data: Dataset, drop_rate: float = 0.0) -> np.ndarray:
    """∇log p(θ | D) of the softmax regression in closed form, at θ (..., 4), float64.

    With input dropout at rate r (D-SGHMC) the sampler's target is exp(E_z log p(D | x̃, θ)) p(θ),
    x̃ᵢ = xᵢ zᵢ / (1 − r): its mean mini-batch gradient. A point has one input, so zᵢ takes two
    values and E_z log p(yᵢ | x̃ᵢ, θ) = (1 − r) log p(yᵢ | xᵢ/(1 − r), θ) + r log p(yᵢ | 0, θ).
    ∂/∂w of a point at input u is (onehot(y) − softmax(w u + b)) u, ∂/∂b the same without u.
    """
    x = data.x.flatten().double().numpy()
    y = data.y.numpy()
    keep = 1.0 - drop_rate
    res = _class_residuals(theta, x / keep, y)  # (..., n, 2)
    grad_w = keep * (res * (x / keep)[:, None]).sum(-2)
    grad_b = keep * res.sum(-2)
    if drop_rate > 0:
        grad_b = grad_b + drop_rate * _class_residuals(theta, np.zeros_like(x), y).sum(-2)
    return np.concatenate([grad_w, grad_b], axis=-1) - theta / PRIOR_STD**2


def logistic_mode(data: Dataset, drop_rate: float = 0.0) -> np.ndarray:
    """The target's mode, where the closed-form gradient vanishes (a constant c for the check)."""
    result = scipy.optimize.root(lambda t: logistic_grad(t, data, drop_rate), np.zeros(4), method="hybr")
    assert result.success
    return result.x


#: The samplers as the paper tier runs them on softmax regression (docs/zoo.md): SGLD and SGHMC
#: moving by the curvature at the mode from overdispersed starts, HMC with the dense metric, and
#: D-SGHMC with input masks at drop rate 0.5 (here by the curvature too, as the network tier's moves
#: by its Kronecker-factored one: plain, its chains mixed over ~1,000 steps along the direction only
#: the prior holds, 8× fewer effective draws for the same time). Mini-batches of 20 of the 40 points.
_CHAIN_SETTINGS = {"num_chains": 64, "epochs": 300, "batch_size": 20, "burn_in_epochs": 50, "thin": 2,
                   "metric": "curvature", "init": "overdispersed"}
LOGISTIC = {
    "sgld": (sgld.fit, sgld.SgldConfig(step_size=0.05, **_CHAIN_SETTINGS)),
    "sghmc": (sghmc.fit, sghmc.SghmcConfig(step_size=0.01, friction=0.2, **_CHAIN_SETTINGS)),
    "dsghmc": (dsghmc.fit, dsghmc.DsghmcConfig(step_size=0.01, friction=0.2, drop_rate=0.5, **_CHAIN_SETTINGS)),
    "hmc": (hmc.fit, hmc.HmcConfig(num_chains=8, num_warmup=100, num_samples=250, num_leapfrog=3, step_size=0.5,
                                   metric="curvature", init="overdispersed")),
}


@functools.cache
def logistic_draws(name: str) -> np.ndarray:
    """Draws (chains, draws, 4) of ``name``'s fit on :func:`logistic_data`, at seed 0."""
    fit, config = LOGISTIC[name]
    return flat_weights(drain(fit(config, ARCH_1D, logistic_data(), 0)).samples)


def test_the_closed_form_gradient_is_the_model_targets():
    """∇log p written out above agrees with the samplers' own target (autograd through the
    model) at random weights, so the checks below hold the fits to the posterior they sample."""
    from core.engine.models import build_model

    data = logistic_data()
    target = sampling.ModelTarget(build_model(ARCH_1D), len(data), PRIOR_STD, shared_batch=True)
    params = {"linear.weight": 2 * torch.randn(5, 2, 1), "linear.bias": 2 * torch.randn(5, 2)}
    _, grad = target.log_prob_and_grad(params, (data.x, data.y))
    theta = flat_weights({k: v[:, None] for k, v in params.items()})[:, 0]
    np.testing.assert_allclose(flat_weights({k: v[:, None] for k, v in grad.items()})[:, 0],
                               logistic_grad(theta, data), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(LOGISTIC))
def test_every_sampler_satisfies_steins_identity_on_a_logistic_regression_posterior(name):
    """The fit's stored draws, ∇log p of the target it samples (for D-SGHMC the masked one)."""
    _, config = LOGISTIC[name]
    drop_rate = getattr(config, "drop_rate", 0.0)
    data = logistic_data()
    draws = logistic_draws(name)
    grads = logistic_grad(draws, data, drop_rate)
    for label, c in (("mode", logistic_mode(data, drop_rate)), ("origin", np.zeros(4))):
        check = stein_check(draws, grads, c)
        assert check.passes, f"{name}, c at the {label}: {check}"


def test_dsghmc_samples_the_masked_posterior_not_the_clean_one():
    """The same D-SGHMC draws held against the posterior without masks fail: the check tells the
    two targets apart (the masks shrink the slope's likelihood, so the draws spread wider than
    the clean posterior; its Stein mean reads about −6.4 against −4)."""
    data = logistic_data()
    draws = logistic_draws("dsghmc")
    check = stein_check(draws, logistic_grad(draws, data, 0.0), logistic_mode(data))
    assert not check.passes, check
