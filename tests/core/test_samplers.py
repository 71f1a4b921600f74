"""Statistical correctness of SGLD, SGHMC, D-SGHMC and HMC against closed-form answers.

Every expected value is computed here from a closed form (Gaussian moments, the conjugate
posterior of Bayesian linear regression, a quadrature of a 2-parameter logistic posterior);
none is copied from the samplers' own output. Tolerances are a few Monte Carlo standard
errors wide, and a sampler with its noise term removed is shown to fail the same checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from core.engine.inference import dsghmc, hmc, sampling, sghmc, sgld
from core.engine.inference.base import Dataset
from core.engine.inference.sample_store import StoragePlan
from core.engine.inference.sampling import FunctionTarget
from core.engine.models import ArchSpec
from core.engine.runner import drain

# ---------------------------------------------------------------------------- targets


@dataclass
class Gaussian:
    mean: torch.Tensor
    cov: torch.Tensor

    @property
    def dim(self) -> int:
        return len(self.mean)

    def target(self) -> FunctionTarget:
        precision = torch.linalg.inv(self.cov)

        def log_prob(params, batch):
            d = params["theta"] - self.mean
            return -0.5 * ((d @ precision) * d).sum(-1)

        return FunctionTarget(log_prob)


def gaussian_2d() -> Gaussian:
    return Gaussian(torch.tensor([1.0, -1.0]), torch.tensor([[1.0, 0.8], [0.8, 1.0]]))


def gaussian_10d() -> Gaussian:
    rng = np.random.default_rng(7)
    q, _ = np.linalg.qr(rng.normal(size=(10, 10)))
    eig = np.linspace(0.3, 2.0, 10)
    cov = (q * eig) @ q.T
    return Gaussian(torch.tensor(rng.normal(size=10), dtype=torch.float32),
                    torch.tensor(cov, dtype=torch.float32))


def moment_errors(draws: torch.Tensor, target: Gaussian) -> tuple[float, float]:
    """(largest |mean error| in units of marginal s.d., relative Frobenius error of the cov)."""
    x = draws.reshape(-1, target.dim).double()
    mean = x.mean(0)
    cov = torch.cov(x.T)
    sd = target.cov.diagonal().double().sqrt()
    mean_err = float(((mean - target.mean.double()) / sd).abs().max())
    cov_err = float(torch.linalg.norm(cov - target.cov.double()) / torch.linalg.norm(target.cov.double()))
    return mean_err, cov_err


# --------------------------------------------------------------------- running samplers

CHAINS = 256


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small tensors: one thread is fastest and keeps the shared CI machine usable."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _start(dim: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"theta": 2.0 * torch.randn(CHAINS, dim, generator=generator)}


def run_gaussian(name: str, target: Gaussian, seed: int = 0) -> torch.Tensor:
    """Draws (chains, draws, dim) of sampler ``name`` on ``target``."""
    generator = torch.Generator().manual_seed(seed)
    params = _start(target.dim, generator)
    tgt = target.target()
    if name == "hmc":
        config = hmc.HmcConfig(num_chains=CHAINS, num_warmup=150, num_samples=100,
                               num_leapfrog=5, step_size=0.2)
        result = drain(hmc.run(params, config=config, target=tgt, batch=None, generator=generator))
        return result.samples["theta"]
    if name == "sgld":
        module, config = sgld, sgld.SgldConfig(step_size=0.04)
    elif name == "sghmc":
        module, config = sghmc, sghmc.SghmcConfig(step_size=0.01, friction=0.2)
    else:
        module, config = dsghmc, dsghmc.DsghmcConfig(step_size=0.01, friction=0.2, drop_rate=0.0)
    state = module.init(params, config=config, generator=generator)
    plan = StoragePlan(burn_in=400, thin=5, num_draws=120)
    result = drain(sampling.sample_chains(
        module.step, state, config=config, target=tgt, batches=sampling.constant_batches(),
        num_steps=1000, plan=plan, generator=generator,
    ))
    return result.samples["theta"]


SAMPLERS = ["sgld", "sghmc", "dsghmc", "hmc"]
MEAN_TOL, COV_TOL = 0.12, 0.12


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("make_target", [gaussian_2d, gaussian_10d], ids=["2d", "10d"])
def test_gaussian_moments(name, make_target):
    target = make_target()
    mean_err, cov_err = moment_errors(run_gaussian(name, target), target)
    assert mean_err < MEAN_TOL, f"{name}: mean off by {mean_err:.3f} s.d."
    assert cov_err < COV_TOL, f"{name}: covariance off by {cov_err:.1%}"


@pytest.mark.parametrize("name", SAMPLERS)
def test_sampler_without_noise_fails_the_moment_check(name, monkeypatch):
    """Gradient ascent dressed up as a sampler collapses to the mode: the check must see it."""
    monkeypatch.setattr(
        sampling, "normal_like", lambda params, generator: {k: torch.zeros_like(v) for k, v in params.items()}
    )
    target = gaussian_2d()
    mean_err, cov_err = moment_errors(run_gaussian(name, target), target)
    assert not (mean_err < MEAN_TOL and cov_err < COV_TOL)
    assert cov_err > 3 * COV_TOL


# ------------------------------------------------------------- Bayesian linear regression


def linear_regression_problem():
    g = torch.Generator().manual_seed(3)
    n, d, noise_sd, prior_sd = 200, 3, 0.5, 1.0
    x = torch.randn(n, d, generator=g)
    w = torch.tensor([1.0, -2.0, 0.5])
    y = x @ w + noise_sd * torch.randn(n, generator=g)
    xd, yd = x.double(), y.double()
    precision = xd.T @ xd / noise_sd**2 + torch.eye(d, dtype=torch.float64) / prior_sd**2
    cov = torch.linalg.inv(precision)
    mean = cov @ xd.T @ yd / noise_sd**2

    def log_prob(params, idx):
        theta = params["theta"]  # (C, d)
        if idx is None:
            xb, yb, scale = x.expand(theta.shape[0], n, d), y.expand(theta.shape[0], n), 1.0
        else:
            xb, yb, scale = x[idx], y[idx], n / idx.shape[1]
        resid = yb - torch.einsum("cbd,cd->cb", xb, theta)
        return -0.5 * scale * resid.pow(2).sum(1) / noise_sd**2 - 0.5 * theta.pow(2).sum(1) / prior_sd**2

    return FunctionTarget(log_prob), mean, cov, n


def _index_batches(n: int, chains: int, batch: int, generator: torch.Generator):
    while True:
        order = torch.stack([torch.randperm(n, generator=generator) for _ in range(chains)])
        yield from order.split(batch, dim=1)


@pytest.mark.parametrize("name", SAMPLERS)
def test_bayesian_linear_regression(name):
    target, mean, cov, n = linear_regression_problem()
    generator = torch.Generator().manual_seed(1)
    chains = 256
    params = {"theta": torch.zeros(chains, 3)}
    if name == "hmc":
        config = hmc.HmcConfig(num_chains=chains, num_warmup=150, num_samples=100,
                               num_leapfrog=5, step_size=0.01)
        draws = drain(hmc.run(params, config=config, target=target, batch=None,
                              generator=generator)).samples["theta"]
    else:
        module, config = {
            "sgld": (sgld, sgld.SgldConfig(step_size=5e-5)),
            "sghmc": (sghmc, sghmc.SghmcConfig(step_size=5e-6, friction=0.1)),
            "dsghmc": (dsghmc, dsghmc.DsghmcConfig(step_size=5e-6, friction=0.1, drop_rate=0.0)),
        }[name]
        state = module.init(params, config=config, generator=generator)
        draws = drain(sampling.sample_chains(
            module.step, state, config=config, target=target,
            batches=_index_batches(n, chains, 50, generator), num_steps=1200,
            plan=StoragePlan(burn_in=400, thin=4, num_draws=200), generator=generator,
        )).samples["theta"]
    x = draws.reshape(-1, 3).double()
    sd = cov.diagonal().sqrt()
    assert ((x.mean(0) - mean) / sd).abs().max() < 0.15
    ratio = x.var(0) / cov.diagonal()
    assert ((ratio - 1).abs() < 0.15).all(), f"{name}: variance ratios {ratio.tolist()}"


# ------------------------------------------------------ Bayesian logistic regression


def logistic_problem():
    """1-d inputs, two classes, softmax regression with N(0, 1) priors on all 4 weights.

    Only the differences (w₁ − w₀, b₁ − b₀) enter the likelihood, and under independent
    N(0, 1) priors they are independent N(0, 2): the posterior predictive is that of a
    2-parameter logistic regression with N(0, 2) priors, which a grid quadrature gives.
    """
    g = torch.Generator().manual_seed(11)
    n = 40
    x = torch.randn(n, generator=g) * 1.5
    y = (torch.rand(n, generator=g) < torch.sigmoid(1.2 * x - 0.4)).long()
    data = Dataset(x.reshape(n, 1, 1, 1), y, "toy")
    x_test = torch.tensor([-3.0, -1.5, -0.5, 0.0, 0.5, 1.5, 3.0])
    grid = torch.linspace(-8, 8, 801, dtype=torch.float64)
    a, b = torch.meshgrid(grid, grid, indexing="ij")
    xd, yd = x.double(), y.double()
    logits = a[..., None] * xd + b[..., None]
    log_post = (yd * logits - torch.nn.functional.softplus(logits)).sum(-1) - (a**2 + b**2) / 4.0
    weight = torch.softmax(log_post.flatten(), 0).reshape(a.shape)
    exact = torch.stack([(weight * torch.sigmoid(a * t + b)).sum() for t in x_test.double()])
    return data, x_test.reshape(-1, 1, 1, 1), exact


ARCH_1D = ArchSpec("softmax", num_classes=2, image_size=1)


def _fit(method_fit, config):
    data, x_test, exact = logistic_problem()
    posterior = drain(method_fit(config, ARCH_1D, data, 0))
    return posterior.predict_proba(x_test)[..., 1].mean(0).double(), exact


@pytest.fixture(scope="module")
def hmc_reference():
    config = hmc.HmcConfig(num_chains=32, num_warmup=150, num_samples=250, num_leapfrog=6,
                           step_size=0.1, init="prior")
    predictive, exact = _fit(hmc.fit, config)
    return predictive, exact


def test_hmc_reference_matches_quadrature(hmc_reference):
    predictive, exact = hmc_reference
    assert (predictive - exact).abs().max() < 0.006


SG_CONFIGS = {
    "sgld": (sgld.fit, sgld.SgldConfig(num_chains=64, epochs=300, batch_size=10, burn_in_epochs=100,
                                       thin=4, step_size=2e-3)),
    "sghmc": (sghmc.fit, sghmc.SghmcConfig(num_chains=64, epochs=300, batch_size=10,
                                           burn_in_epochs=100, thin=10, step_size=2e-4,
                                           friction=0.1)),
    "dsghmc": (dsghmc.fit, dsghmc.DsghmcConfig(num_chains=64, epochs=300, batch_size=10,
                                               burn_in_epochs=100, thin=10, step_size=2e-4,
                                               friction=0.1, drop_rate=0.0)),
}


# The same samplers moving by M⁻¹, the posterior's curvature at its mode (steps in units of the
# posterior's own spread, so far larger than the plain ones; mini-batches of 20 of the 40 points)
SG_CONFIGS["sgld-curvature"] = (sgld.fit, sgld.SgldConfig(num_chains=64, epochs=1000, batch_size=20,
                                                          burn_in_epochs=200, thin=8, step_size=0.05,
                                                          metric="curvature"))
SG_CONFIGS["sghmc-curvature"] = (sghmc.fit, sghmc.SghmcConfig(num_chains=64, epochs=1000, batch_size=20,
                                                              burn_in_epochs=200, thin=8, step_size=0.01,
                                                              friction=0.2, metric="curvature",
                                                              init="overdispersed"))

# ... and by the same curvature Kronecker-factored (K-FAC at a short MAP fit; for networks)
SG_CONFIGS["sgld-kron"] = (sgld.fit, sgld.SgldConfig(num_chains=64, epochs=1000, batch_size=20,
                                                     burn_in_epochs=200, thin=8, step_size=0.05, metric="kron"))


@pytest.mark.parametrize("name", sorted(SG_CONFIGS))
def test_sg_predictive_agrees_with_hmc(name, hmc_reference):
    reference, exact = hmc_reference
    predictive, _ = _fit(*SG_CONFIGS[name])
    assert (predictive - reference).abs().max() < 0.008, (predictive - reference).tolist()
    assert (predictive - exact).abs().max() < 0.01


def test_moment_check_has_teeth():
    """Sanity of the check itself: exact draws pass, draws with 30% too little spread fail."""
    target = gaussian_2d()
    g = torch.Generator().manual_seed(0)
    chol = torch.linalg.cholesky(target.cov)
    z = torch.randn(CHAINS * 120, 2, generator=g)
    exact = target.mean + z @ chol.T
    assert max(moment_errors(exact, target)) < 0.06
    squeezed = target.mean + math.sqrt(0.7) * z @ chol.T
    assert moment_errors(squeezed, target)[1] > COV_TOL


def test_sgld_temperature_scales_the_covariance():
    """At temperature T SGLD targets p(θ)^(1/T): for a Gaussian, covariance T·Σ."""
    target = gaussian_2d()
    generator = torch.Generator().manual_seed(5)
    config = sgld.SgldConfig(step_size=0.04, temperature=0.5)
    state = sgld.init(_start(2, generator), config=config, generator=generator)
    draws = drain(sampling.sample_chains(
        sgld.step, state, config=config, target=target.target(),
        batches=sampling.constant_batches(), num_steps=1000,
        plan=StoragePlan(burn_in=400, thin=5, num_draws=120), generator=generator,
    )).samples["theta"]
    cold = Gaussian(target.mean, 0.5 * target.cov)
    mean_err, cov_err = moment_errors(draws, cold)
    assert mean_err < MEAN_TOL and cov_err < COV_TOL
    assert moment_errors(draws, target)[1] > 3 * COV_TOL


VARIANTS = {
    # RMSprop preconditioner adapted for 200 steps, then fixed (exact thereafter)
    "psgld": (sgld, sgld.SgldConfig(step_size=0.1, precondition=True, rms_epsilon=1e-3,
                                    rms_adapt_steps=200)),
    "psghmc": (sghmc, sghmc.SghmcConfig(step_size=0.01, friction=0.2, precondition=True,
                                        rms_epsilon=1e-3, rms_adapt_steps=200)),
    "sghmc-resample": (sghmc, sghmc.SghmcConfig(step_size=0.01, friction=0.2, resample_every=50)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("make_target", [gaussian_2d, gaussian_10d], ids=["2d", "10d"])
def test_sampler_variants_gaussian_moments(variant, make_target):
    module, config = VARIANTS[variant]
    target = make_target()
    generator = torch.Generator().manual_seed(0)
    state = module.init(_start(target.dim, generator), config=config, generator=generator)
    draws = drain(sampling.sample_chains(
        module.step, state, config=config, target=target.target(),
        batches=sampling.constant_batches(), num_steps=1000,
        plan=StoragePlan(burn_in=400, thin=5, num_draws=120), generator=generator,
    )).samples["theta"]
    mean_err, cov_err = moment_errors(draws, target)
    assert mean_err < MEAN_TOL and cov_err < COV_TOL, (mean_err, cov_err)


def _principal_variance_ratios(module, config, precision: torch.Tensor, metric, num_steps: int) -> np.ndarray:
    """The chains' variance along each principal axis of N(0, precision⁻¹), over the true one."""
    from tests.core.test_reliability_hmc import GaussianTarget

    cov = torch.linalg.inv(precision).numpy()
    generator = torch.Generator().manual_seed(3)
    start = {"theta": 3.0 * torch.randn(16, len(cov), generator=generator)}  # three times too wide
    state = module.init(start, config=config, generator=generator, metric=metric)
    draws = drain(sampling.sample_chains(
        module.step, state, config=config, target=GaussianTarget(cov), batches=sampling.constant_batches(),
        num_steps=num_steps, plan=StoragePlan(burn_in=num_steps // 5, thin=4, num_draws=num_steps // 5),
        generator=generator,
    )).samples["theta"].double().numpy()
    w, v = np.linalg.eigh(cov)
    return (draws.reshape(-1, len(cov)) @ v).var(axis=0, ddof=1) / w


@pytest.mark.parametrize("module,config", [
    (sgld, sgld.SgldConfig(step_size=0.1, metric="curvature")),
    (sghmc, sghmc.SghmcConfig(step_size=0.02, friction=0.3, metric="curvature")),
], ids=["sgld", "sghmc"])
def test_a_curvature_metric_samples_an_ill_conditioned_gaussian_the_plain_step_cannot(module, config):
    """20 dimensions, precisions spread 10⁴:1 along rotated axes (the paper tier's posterior
    spreads 5·10⁴:1): moving by M⁻¹ (M the precision, as the curvature at the mode of a Gaussian
    is), 16 chains started three times too wide have every principal variance within 0.8–1.25×
    after 1,000 steps; the plain sampler, whose step the stiffest direction bounds, still has
    its start's spread along the loosest."""
    from core.engine.inference.curvature import DenseMetric
    from tests.core.test_hmc_metric import _spd

    precision = _spd(20, 3, 1e4)
    metric = DenseMetric(precision, {"theta": torch.Size([20])})
    ratios = _principal_variance_ratios(module, config, precision, metric, 1000)
    assert ratios.min() > 0.8 and ratios.max() < 1.25, ratios.round(2)
    plain = {"step_size": 2e-4} if module is sgld else {"step_size": 4e-5}  # stable for λ_max = 10⁴
    ratios = _principal_variance_ratios(module, type(config)(**{**config.__dict__, **plain, "metric": "identity"}),
                                        precision, None, 1000)
    assert ratios[-1] > 4, ratios.round(2)  # the loosest axis: still about 9×, its start's


@pytest.mark.parametrize("eta", [0.4, 0.8])
def test_curvature_sgld_spreads_its_draws_by_its_step_as_the_docs_say(eta):
    """SGLD has no accept/reject step: even with exact gradients it samples a Gaussian wider than
    the target. Moving by M⁻¹, θ' = (1 − η/2)θ + √η z along every principal axis, so each
    variance is 1/(1 − η/4) of the target's (1.11 at η 0.4, 1.25 at 0.8), and over d weights the
    draws' log posterior sits d(η/4)/(2(1 − η/4)) below the posterior's own: the gap docs/zoo.md
    quotes for the paper tier's SGLD (7,850 weights: 100 at η 0.1, 50 at η 0.05)."""
    from core.engine.inference.curvature import DenseMetric
    from tests.core.test_hmc_metric import _spd

    precision = _spd(20, 3, 1e4)
    metric = DenseMetric(precision, {"theta": torch.Size([20])})
    config = sgld.SgldConfig(step_size=eta, metric="curvature")
    ratios = _principal_variance_ratios(sgld, config, precision, metric, 5000)
    expected = 1 / (1 - eta / 4)
    assert abs(ratios.mean() - expected) < 0.03 * expected, (ratios.mean(), expected)
    assert ratios.mean() > 1 + 0.5 * (expected - 1)  # wider than the target, not within its noise


def test_one_preconditioner_at_a_time_and_overdispersed_starts_only_with_a_curvature_metric():
    with pytest.raises(ValueError, match="choose one preconditioner"):
        sgld.SgldConfig(precondition=True, metric="curvature")
    with pytest.raises(ValueError, match="'identity', 'curvature' or 'kron'"):
        sghmc.SghmcConfig(metric="diagonal")
    with pytest.raises(ValueError, match="needs metric=curvature"):  # it spreads chains by the curvature
        sgld.SgldConfig(init="overdispersed")


def test_a_curvature_fit_records_its_fixed_preconditioner():
    data, _, _ = logistic_problem()
    config = sgld.SgldConfig(num_chains=2, epochs=4, batch_size=20, burn_in_epochs=1, thin=2, step_size=0.05,
                             metric="curvature")
    posterior = drain(sgld.fit(config, ARCH_1D, data, 0))
    record = posterior.info["preconditioner"]
    assert record["kind"] == "curvature" and record["fixed_before_draws"]
    assert record["mode_log_posterior"] >= max(max(c) for c in posterior.info["traces"]["log_posterior"]) - 1.0
    from core.engine.naming import fit_lines

    (line,) = fit_lines("sgld", posterior.info)
    assert "shape of the posterior around its peak" in line and "not what it samples" in line
    # with its settings, what its step does to its draws: 1/√(1 − 0.05/4) − 1 = 0.63 % wider
    line, widening = fit_lines("sgld", posterior.info, posterior.config)
    assert "about 0.6% wider in every direction" in widening
    assert fit_lines("sgld", posterior.info, {**posterior.config, "schedule": "polynomial"}) == [line]
