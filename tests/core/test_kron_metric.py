"""The Kronecker-factored metric (``metric="kron"``) of the mini-batch samplers, for networks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.engine.inference import dsghmc, sampling, sghmc, sgld
from core.engine.inference.base import Dataset
from core.engine.inference.curvature import KronMetric
from core.engine.inference.sample_store import StoragePlan
from core.engine.inference.sampling import FunctionTarget
from core.engine.models import ArchSpec
from core.engine.naming import fit_lines
from core.engine.runner import drain
from tests.core.test_hmc_metric import _spd

PRIOR_STD = 0.5


def _layer_metric(g: torch.Tensor, a: torch.Tensor, bias: bool) -> KronMetric:
    lg, qg = torch.linalg.eigh(g)
    la, qa = torch.linalg.eigh(a)
    return KronMetric([("w", "b" if bias else None, qg, lg, qa, la)], PRIOR_STD)


def _dense(g: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """G ⊗ A + I/σ² on [W b] flattened row by row (out × (in + 1))."""
    return torch.kron(g, a) + torch.eye(len(g) * len(a), dtype=torch.float64) / PRIOR_STD**2


def test_the_kron_root_is_the_inverse_square_root_of_the_kronecker_precision():
    """A convolution's kernel (4, 3, 2, 2) and bias: [W b] is 4 × 13. ``spread(whiten(g))`` is
    M⁻¹g and so is ``spread(spread(g))`` (a symmetric root, so ``spread(z)`` ~ N(0, M⁻¹)), chain by
    chain; a weight outside every layer gets the prior's σ alone."""
    g_factor, a_factor = _spd(4, 1, 300.0), _spd(13, 2, 1e3)
    metric = _layer_metric(g_factor, a_factor, bias=True)
    gen = torch.Generator().manual_seed(0)
    tree = {"w": torch.randn(2, 4, 3, 2, 2, generator=gen), "b": torch.randn(2, 4, generator=gen),
            "other": torch.randn(2, 5, generator=gen)}
    flat = torch.cat([tree["w"].reshape(2, 4, 12), tree["b"][..., None]], dim=-1).reshape(2, -1).double()
    expected = torch.linalg.solve(_dense(g_factor, a_factor), flat.T).T
    for result in (metric.spread(metric.whiten(tree)), metric.spread(metric.spread(tree))):
        got = torch.cat([result["w"].reshape(2, 4, 12), result["b"][..., None]], dim=-1).reshape(2, -1).double()
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-6 * float(expected.abs().max()))
        assert torch.allclose(result["other"], PRIOR_STD**2 * tree["other"])
        assert result["w"].shape == tree["w"].shape and result["b"].shape == tree["b"].shape


@pytest.mark.parametrize("module,config", [
    (sgld, sgld.SgldConfig(step_size=0.1, metric="kron")),
    (sghmc, sghmc.SghmcConfig(step_size=0.02, friction=0.3, metric="kron")),
], ids=["sgld", "sghmc"])
def test_kron_samplers_sample_an_ill_conditioned_kronecker_gaussian(module, config):
    """A 5 × 6 weight matrix whose Gaussian posterior has precision G ⊗ A + I/σ², spread 6·10³:1
    ((3·10⁴ + 4) / (1 + 4)) along rotated axes (what K-FAC assumes of a layer): moving by M⁻¹, 16 chains started three
    times too wide have every principal variance within 0.8–1.3× after 1,000 steps (SGLD's own
    step widens each by 1/√(1 − η/4), 1.3 % at η 0.1); the plain sampler, at a step the stiffest
    direction allows, still has axes several times too wide."""
    g_factor, a_factor = _spd(5, 3, 100.0), _spd(6, 4, 300.0)
    precision = _dense(g_factor, a_factor)
    target = FunctionTarget(lambda p, _batch: -0.5 * (p["w"] * _kron_product(g_factor, a_factor, p["w"])).sum((1, 2)))
    eigenvalues, axes = np.linalg.eigh(precision.numpy())

    def ratios(cfg, metric) -> np.ndarray:
        generator = torch.Generator().manual_seed(3)
        start = {"w": 3.0 * torch.randn(16, 5, 6, generator=generator) / math.sqrt(float(eigenvalues.min()))}
        state = module.init(start, config=cfg, generator=generator, metric=metric)
        draws = drain(sampling.sample_chains(
            module.step, state, config=cfg, target=target, batches=sampling.constant_batches(),
            num_steps=1000, plan=StoragePlan(burn_in=200, thin=4, num_draws=200), generator=generator,
        )).samples["w"].double().numpy()
        return (draws.reshape(-1, 30) @ axes).var(axis=0, ddof=1) * eigenvalues

    kron = ratios(config, _layer_metric(g_factor, a_factor, bias=False))
    assert kron.min() > 0.8 and kron.max() < 1.3, kron.round(2)
    plain = {"step_size": 2.0 / float(eigenvalues.max()) * 0.1} if module is sgld else {"step_size": 4e-5}
    loose = ratios(type(config)(**{**config.__dict__, **plain, "metric": "identity"}), None)
    assert loose.max() > 4, loose.round(2)  # axes still several times too wide


def _kron_product(g: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(G ⊗ A + I/σ²) vec(W) as matrices, per chain: G W A + W/σ²."""
    return g.float() @ w @ a.float() + w / PRIOR_STD**2


def _tiny_digits() -> Dataset:
    gen = torch.Generator().manual_seed(0)
    return Dataset(torch.rand(96, 1, 28, 28, generator=gen), torch.randint(0, 10, (96,), generator=gen), "toy")


@pytest.mark.parametrize("module,config", [
    (sgld, sgld.SgldConfig(num_chains=2, epochs=2, batch_size=32, burn_in_epochs=1, thin=1, step_size=1e-3,
                           prior_std=0.2, metric="kron")),
    (dsghmc, dsghmc.DsghmcConfig(num_chains=2, epochs=2, batch_size=32, burn_in_epochs=1, thin=1,
                                 step_size=1e-4, friction=0.1, prior_std=0.2, metric="kron")),
], ids=["sgld", "dsghmc"])
def test_a_network_fit_with_the_kron_metric_records_it_and_says_so(module, config):
    """LeNet-5 end to end: a short MAP, K-FAC at it, the chains; the file records the metric and
    the column's words say the steps follow the posterior layer by layer."""
    arch = ArchSpec("lenet5", num_classes=10, drop_rate=0.5 if module is dsghmc else 0.0)
    phases = []
    posterior = drain(module.fit(config, arch, _tiny_digits(), 0), lambda record: phases.append(record.phase))
    assert phases[0] == "finding the mode" and "curvature at the mode" in phases and phases[-1] == "sampling"
    assert set(phases) <= {"finding the mode", "curvature at the mode", "burn-in", "sampling"}
    record = posterior.info["preconditioner"]
    assert record["kind"] == "kron" and record["fixed_before_draws"] and record["map_epochs"] > 0
    assert math.isfinite(record["mode_log_posterior"])
    assert all(torch.isfinite(v).all() for v in posterior.samples.values())
    assert any("layer by layer" in line for line in fit_lines(posterior.method, posterior.info, posterior.config))


def test_kron_is_refused_beside_rmsprop_and_with_overdispersed_starts():
    """K-FAC overstates the posterior's width along some directions: chains started twice that
    width around the MAP wrecked LeNet-5 (SGLD diverged within 6 steps), so that start is refused
    with the reason and what to use instead."""
    with pytest.raises(ValueError, match="choose one preconditioner"):
        sghmc.SghmcConfig(precondition=True, metric="kron")
    with pytest.raises(ValueError, match="overstates that width.*use init=default with metric=kron"):
        sgld.SgldConfig(metric="kron", init="overdispersed")
    sgld.SgldConfig(metric="curvature", init="overdispersed")  # the exact curvature's width


def test_the_kron_metrics_map_fit_leaves_torchs_global_generator_alone():
    """The MAP behind the metric draws its initial weights and batches from its own seed: torch's
    global generator is where it was (the MAP method's fit reseeds it; this phase used to)."""
    from core.engine.inference.curvature import kron_mode_and_metric

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    metric = drain(kron_mode_and_metric(ArchSpec("lenet5", num_classes=10), _tiny_digits(), 0.2, seed=5))
    assert torch.equal(torch.random.get_rng_state(), before)
    assert math.isfinite(metric.about["mode_log_posterior"]) and set(metric.mode) == set(metric.covered)


def test_without_curvlinops_the_kron_metric_says_what_needs_it(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "curvlinops", None)  # import curvlinops now fails
    config = sgld.SgldConfig(num_chains=2, epochs=1, batch_size=32, thin=1, burn_in_epochs=0, metric="kron")
    with pytest.raises(ValueError, match=r"scaling a sampler's steps by the curvature layer by layer \(metric=kron\) "
                                         r"needs the curvature package curvlinops"):
        drain(sgld.fit(config, ArchSpec("lenet5", num_classes=10), _tiny_digits(), 0))
