"""HMC with a dense metric from the curvature at the mode (``metric="curvature"``).

Every expected value comes from a closed form or another library: the GGN from curvlinops,
moments of Gaussians from their covariance, the logistic posterior predictive from a grid
quadrature (tests/core/test_samplers.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from core.engine.inference import curvature, ggn, hmc
from core.engine.inference.base import Dataset
from core.engine.inference.lowrank_metric import LowRankMetric
from core.engine.models import ArchSpec, build_model
from core.engine.runner import drain
from tests.core.test_reliability_hmc import GaussianTarget, _rotation
from tests.core.test_samplers import ARCH_1D, _fit

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("bias", [True, False])
def test_the_linear_shortcut_is_the_exact_ggn(bias):
    curvlinops = pytest.importorskip("curvlinops")
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 4, bias=bias))
    x, y = torch.randn(50, 1, 3, 4, generator=g), torch.randint(0, 4, (50,), generator=g)
    names = [n for n, _ in model.named_parameters()]
    ours = ggn.linear_ggn(model, names, Dataset(x, y), batch_size=16)
    op = curvlinops.GGNLinearOperator(model, nn.CrossEntropyLoss(reduction="sum"), list(model.parameters()),
                                      [(x[:16], y[:16]), (x[16:], y[16:])], check_deterministic=False, num_data=50)
    theirs = (op @ torch.eye(ours.shape[0])).double()
    assert torch.allclose(ours, theirs, atol=1e-5 * float(theirs.abs().max()))


def test_the_linear_shortcut_declines_a_network_with_hidden_layers():
    model = build_model(ArchSpec("mlp", num_classes=3, image_size=4))
    names = [n for n, _ in model.named_parameters()]
    assert ggn.linear_ggn(model, names, Dataset(torch.rand(5, 1, 4, 4), torch.zeros(5, dtype=torch.long)), 8) is None


def _spd(d: int, seed: int, spread: float) -> torch.Tensor:
    q = torch.tensor(_rotation(d, seed))
    return q @ torch.diag(torch.logspace(0, np.log10(spread), d, dtype=torch.float64)) @ q.T


def test_dense_metric_momenta_velocity_and_spread_follow_m():
    mass = _spd(5, 0, 100.0)
    metric = curvature.DenseMetric(mass, {"theta": torch.Size([5])})
    g = torch.Generator().manual_seed(1)
    z = {"theta": torch.randn(40000, 5, generator=g)}
    r = metric.momentum(z)["theta"].double()
    assert torch.allclose(torch.cov(r.T), mass, rtol=0.05, atol=0.05 * float(mass.diagonal().min()))
    inverse = torch.linalg.inv(mass)
    spread = metric.spread(z)["theta"].double()
    assert torch.allclose(torch.cov(spread.T), inverse, rtol=0.05, atol=0.05 * float(inverse.diagonal().min()))
    some = {"theta": torch.randn(3, 5, generator=g)}
    v = metric.velocity(some)["theta"].double()
    assert torch.allclose(v, some["theta"].double() @ inverse, rtol=1e-4, atol=1e-5)
    white = metric.whiten(some)["theta"].double()  # L⁻¹g: the gradient where M is the identity
    assert torch.allclose(white @ white.T, some["theta"].double() @ inverse @ some["theta"].double().T, rtol=1e-4)
    assert torch.allclose(metric.spread(metric.whiten(some))["theta"].double(), v, rtol=1e-4, atol=1e-5)
    kinetic = 0.5 * (some["theta"].double() @ inverse * some["theta"].double()).sum(1)
    assert torch.allclose(metric.kinetic(some).double(), kinetic, rtol=1e-4)


class ShiftedGaussian(GaussianTarget):
    """N(mean, Σ) per chain."""

    def __init__(self, covariance: np.ndarray, mean: torch.Tensor) -> None:
        super().__init__(covariance)
        self.mean = mean.float()

    def log_prob_and_grad(self, params, batch):
        return super().log_prob_and_grad({"theta": params["theta"] - self.mean}, batch)


def test_find_mode_finds_a_gaussians_mean():
    cov = _spd(6, 2, 1e3).numpy()
    mean = torch.arange(6, dtype=torch.float32) - 2.5
    mode, logp = curvature.find_mode(ShiftedGaussian(cov, mean), {"theta": torch.zeros(1, 6)}, None)
    assert torch.allclose(mode["theta"][0], mean, atol=1e-3)
    assert logp == pytest.approx(0.0, abs=1e-4)


def _principal_moments(metric, cov: np.ndarray, num_leapfrog: int, seed: int,
                       mean: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
    """HMC's draws of N(mean, Σ) along Σ's principal axes: each chain's variance over the true one
    (chains × axes) and the pooled mean's error in posterior standard deviations (axes)."""
    config = hmc.HmcConfig(num_chains=4, num_warmup=100, num_samples=400, num_leapfrog=num_leapfrog,
                           step_size=0.1)
    g = torch.Generator().manual_seed(seed)
    params = {"theta": torch.randn(4, len(cov), generator=g)}
    mean = torch.zeros(len(cov)) if mean is None else mean
    result = drain(hmc.run(params, config=config, target=ShiftedGaussian(cov, mean), batch=None, generator=g,
                           metric=metric))
    w, v = np.linalg.eigh(cov)
    draws = (result.samples["theta"].double().numpy() - mean.double().numpy()) @ v
    return draws.var(axis=1, ddof=1) / w, draws.reshape(-1, len(w)).mean(0) / np.sqrt(w)


def _principal_variance_ratios(metric, cov: np.ndarray, num_leapfrog: int, seed: int) -> np.ndarray:
    return _principal_moments(metric, cov, num_leapfrog, seed)[0]


def test_a_dense_metric_samples_a_correlated_gaussian_a_diagonal_one_cannot():
    """20 dimensions, standard deviations spread 100:1 along rotated axes (as correlated pixels
    are): with M the precision, every chain has every principal variance within 0.6-1.5×;
    adapted diagonal HMC, with the same number of gradients, does not."""
    cov = torch.linalg.inv(_spd(20, 3, 1e4)).numpy()
    dense = curvature.DenseMetric(torch.tensor(np.linalg.inv(cov)), {"theta": torch.Size([20])})
    ratios = _principal_variance_ratios(dense, cov, 5, seed=4)
    assert ratios.min() > 0.6 and ratios.max() < 1.5, ratios.round(2)
    diagonal = _principal_variance_ratios(None, cov, 5, seed=4)
    assert diagonal.min() < 0.6 or diagonal.max() > 1.5


def _identity_plus_low_rank(d: int = 20, seed: int = 5) -> torch.Tensor:
    """A precision that is one level (0.9-1.1) but for four directions (400, 30, 0.05, 0.01): the
    shape of the features head's curvature, at 20 weights."""
    values = torch.cat([torch.linspace(0.9, 1.1, d - 4, dtype=torch.float64),
                        torch.tensor([400.0, 30.0, 0.05, 0.01], dtype=torch.float64)])
    q = torch.tensor(_rotation(d, seed))
    return q @ torch.diag(values) @ q.T


CURVATURE_FORMS = {
    "dense": lambda precision: curvature.DenseMetric(precision, {"theta": torch.Size([len(precision)])}),
    "lowrank": lambda precision: LowRankMetric.of_precision(precision, {"theta": torch.Size([len(precision)])}),
}


@pytest.mark.parametrize("form", list(CURVATURE_FORMS))
def test_hmc_with_a_curvature_metric_meets_a_gaussian_s_mean_and_covariance(form):
    """20 dimensions, standard deviations from 0.05 to 10 along rotated axes: with M the precision,
    dense or as its level plus the four directions off it, every chain has every principal variance
    within 0.6-1.5× and the pooled mean lies within 0.2 standard deviations on every axis."""
    precision = _identity_plus_low_rank()
    metric = CURVATURE_FORMS[form](precision)
    assert form == "dense" or metric.rank == 4
    cov = torch.linalg.inv(precision).numpy()
    mean = torch.linspace(-3.0, 3.0, 20)
    ratios, error = _principal_moments(metric, cov, 5, seed=4, mean=mean)
    assert ratios.min() > 0.6 and ratios.max() < 1.5, ratios.round(2)
    assert np.abs(error).max() < 0.2, error.round(3)


def test_the_level_alone_without_the_directions_off_it_does_not_meet_the_covariance():
    """The negative control of the test above: the same harness with M̃ = cI (no directions kept)
    random-walks along the loosest axis and misses its variance."""
    precision = _identity_plus_low_rank()
    level = LowRankMetric.of_precision(precision, {"theta": torch.Size([20])}, cap=0)
    assert level.rank == 0
    ratios, _ = _principal_moments(level, torch.linalg.inv(precision).numpy(), 5, seed=4,
                                   mean=torch.linspace(-3.0, 3.0, 20))
    assert ratios.min() < 0.6 or ratios.max() > 1.5


@pytest.mark.parametrize("metric", hmc.CURVATURE_METRICS)
def test_curvature_hmc_matches_the_quadrature_of_a_logistic_posterior(metric):
    """The 4-weight softmax regression whose class shift only the prior holds (its predictive
    by grid quadrature): chains from overdispersed starts around the mode, M from its curvature
    (dense, or its level plus the directions off it)."""
    config = hmc.HmcConfig(num_chains=8, num_warmup=100, num_samples=250, num_leapfrog=4, step_size=0.3,
                           metric=metric, init="overdispersed")
    predictive, exact = _fit(hmc.fit, config)
    assert (predictive - exact).abs().max() < 0.006


def test_a_trajectory_length_gives_each_chain_its_own_steps_bit_for_bit():
    """With L_c per chain, chain c ends where a run of L_c steps for every chain ends it (the
    same bits: the chains that stopped keep their state while the others go on)."""
    cov = torch.linalg.inv(_spd(6, 1, 10.0)).numpy()
    target = GaussianTarget(cov)
    g = torch.Generator().manual_seed(3)
    theta = torch.randn(4, 6, generator=g)
    momentum = {"theta": torch.randn(4, 6, generator=g)}
    logp, grad = target.log_prob_and_grad({"theta": theta}, None)
    metric = hmc.DiagonalMetric({"theta": torch.ones(4, 6)})
    eps = torch.tensor([0.3, 0.1, 0.2, 0.25])
    steps = torch.tensor([2, 5, 3, 5])
    mixed = hmc.leapfrog({"theta": theta}, momentum, grad, eps, metric, steps, target, None)
    for length in (2, 3, 5):
        fixed = hmc.leapfrog({"theta": theta}, momentum, grad, eps, metric, length, target, None)
        rows = steps == length
        assert torch.equal(mixed[0]["theta"][rows], fixed[0]["theta"][rows])
        assert torch.equal(mixed[1]["theta"][rows], fixed[1]["theta"][rows])
        assert torch.equal(mixed[2][rows], fixed[2][rows])
        assert torch.equal(mixed[3]["theta"][rows], fixed[3]["theta"][rows])


def test_curvature_hmc_with_a_trajectory_length_matches_the_quadrature_of_a_logistic_posterior():
    """As with a fixed L: a chain's steps drawn from its own adapted step size keep the target
    exact (L_c is fixed once ε_c is, and the jitter is drawn independently of the state)."""
    config = hmc.HmcConfig(num_chains=8, num_warmup=100, num_samples=250, num_leapfrog=12, step_size=0.3,
                           trajectory_length=1.5, metric="curvature", init="overdispersed")
    predictive, exact = _fit(hmc.fit, config)
    assert (predictive - exact).abs().max() < 0.006


def test_a_negative_trajectory_length_is_refused():
    with pytest.raises(ValueError, match="trajectory_length"):
        hmc.HmcConfig(trajectory_length=-1.0)


def test_curvature_fit_records_the_mode_and_its_metric():
    from tests.core.test_samplers import logistic_problem

    data, _, _ = logistic_problem()
    config = hmc.HmcConfig(num_chains=2, num_warmup=10, num_samples=10, num_leapfrog=3, step_size=0.3,
                           metric="curvature")
    posterior = drain(hmc.fit(config, ARCH_1D, data, 0))
    assert posterior.info["metric"] == "curvature"
    assert posterior.info["mode_log_posterior"] >= max(max(c) for c in posterior.info["traces"]["log_posterior"]) - 1e-3


def test_overdispersed_starts_need_the_curvature_metric():
    with pytest.raises(ValueError, match="needs metric=curvature"):
        hmc.HmcConfig(init="overdispersed")
    with pytest.raises(ValueError, match="metric must be"):
        hmc.HmcConfig(metric="dense")


def test_a_network_too_large_for_a_dense_metric_is_refused_in_words():
    arch = ArchSpec("lenet")
    params = {k: v.unsqueeze(0) for k, v in build_model(arch).state_dict().items()}
    data = Dataset(torch.rand(4, 1, 28, 28), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="use metric=diagonal"):
        curvature.curvature_metric(arch, params, data, 1.0)


def test_the_carried_velocity_is_the_metrics_product_and_a_step_reads_the_matrix_once(monkeypatch):
    """The trajectory carries v = M⁻¹r and M⁻¹∇log p by linearity instead of multiplying again:
    at its end both equal the products computed afresh (to float32's rounding), and a transition
    of L steps reads the dense matrix L + 1 times plus one triangular half (the momentum's
    velocity), where it used to read it L + 3 times."""
    cov = torch.linalg.inv(_spd(12, 2, 100.0)).numpy()
    target = GaussianTarget(cov)
    dense = curvature.DenseMetric(torch.tensor(np.linalg.inv(cov)), {"theta": torch.Size([12])})
    g = torch.Generator().manual_seed(5)
    theta = {"theta": torch.randn(4, 12, generator=g)}
    momentum, velocity = dense.momentum_and_velocity({"theta": torch.randn(4, 12, generator=g)})
    torch.testing.assert_close(velocity["theta"], dense.velocity(momentum)["theta"], rtol=1e-4, atol=1e-5)
    _, grad = target.log_prob_and_grad(theta, None)
    eps = torch.tensor([0.2, 0.1, 0.15, 0.2])
    _, r, v, _, g_end, u_end = hmc.trajectory(theta, momentum, velocity, grad, dense.velocity(grad), eps, dense,
                                              torch.tensor([3, 6, 4, 6]), target, None)
    torch.testing.assert_close(v["theta"], dense.velocity(r)["theta"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(u_end["theta"], dense.velocity(g_end)["theta"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(hmc._kinetic(r, v), dense.kinetic(r), rtol=1e-5, atol=1e-4)
    reads = []

    def counted(name):
        product = getattr(curvature.DenseMetric, name)
        return lambda self, *a, **k: reads.append(name) or product(self, *a, **k)

    for name in ("_rows", "_solve"):
        monkeypatch.setattr(curvature.DenseMetric, name, counted(name))
    config = hmc.HmcConfig(num_chains=4, num_leapfrog=5, step_size=0.1, metric="curvature")
    state = hmc.init(theta, config=config, target=target, metric=dense)
    state, _ = hmc.step(state, None, g, config=config, target=target)  # the first also finds M⁻¹∇log p
    reads.clear()
    hmc.step(state, None, g, config=config, target=target)
    assert sorted(reads) == sorted(["_rows"] * (5 + 1) + ["_solve"])
