"""Every mode-based method starts at the mode (issue 46, item 2): the MAP's Newton and L-BFGS
fits against an independent Newton solve on a small softmax regression, the gradient norm in
``info``, the full Laplace's covariance against the inverse of the Hessian computed by autograd,
the memory refusal, and a deep ensemble of a convex model collapsing onto the MAP."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core.engine.inference import get_method
from core.engine.inference.base import Dataset
from core.engine.inference.map import MapConfig, converge, resolve_optimiser
from core.engine.models import ArchSpec, build_model

ARCH = ArchSpec("softmax", num_classes=3, input_dim=4)
PRIOR_STD = 0.7


def _drain(run):
    while True:
        try:
            next(run)
        except StopIteration as stop:
            return stop.value


def _data(n: int = 300, seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    w = torch.randn(3, 4, generator=g) * 2
    y = torch.multinomial(torch.softmax(x @ w.T, -1), 1, generator=g).squeeze(1)
    return Dataset(x, y, "toy")


def _neg_log_posterior(theta: torch.Tensor, data: Dataset) -> torch.Tensor:
    """−log p(θ | D) of softmax regression, θ = [W (3 × 4) row-major, b (3)], written out here."""
    w, b = theta[:12].reshape(3, 4), theta[12:]
    logits = data.x.double() @ w.T + b
    return (nn.functional.cross_entropy(logits, data.y, reduction="sum")
            + 0.5 * theta.square().sum() / PRIOR_STD**2)


def _independent_mode(data: Dataset) -> torch.Tensor:
    """Plain Newton with the dense Hessian from torch.autograd.functional, to machine precision."""
    theta = torch.zeros(15, dtype=torch.float64)
    for _ in range(50):
        g = torch.autograd.functional.jacobian(lambda t: _neg_log_posterior(t, data), theta)
        if float(g.norm()) < 1e-11:
            break
        h = torch.autograd.functional.hessian(lambda t: _neg_log_posterior(t, data), theta)
        theta = theta - torch.linalg.solve(h, g)
    return theta


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([model.linear.weight.detach().reshape(-1), model.linear.bias.detach()]).double()


@pytest.mark.parametrize("optimiser", ["newton", "lbfgs"])
def test_map_reaches_the_unique_mode_to_the_stated_gradient_norm(optimiser):
    data = _data()
    want = _independent_mode(data)
    model = build_model(ARCH)
    record = _drain(converge(model, data, PRIOR_STD, optimiser, grad_tol=1e-6, max_iter=500))
    assert record["converged"] and record["grad_norm"] <= 1e-6
    assert record["optimiser"] == optimiser
    torch.testing.assert_close(_flat(model), want, atol=1e-5, rtol=0)  # float32 weights
    assert record["log_posterior"] == pytest.approx(-float(_neg_log_posterior(want, data)), abs=1e-3)  # recorded to 3 decimals


def test_map_method_records_its_gradient_norm_and_log_posterior_in_info():
    data = _data()
    method = get_method("map")
    posterior = _drain(method.fit(MapConfig(prior_std=PRIOR_STD, grad_tol=1e-4), ARCH, data, 0))
    record = posterior.info["map"]
    assert record["optimiser"] == "newton"  # auto, on a model linear in its weights
    assert record["grad_norm"] <= 1e-4 and record["converged"]
    assert record["iterations"] >= 1
    want = _independent_mode(data)
    assert record["log_posterior"] == pytest.approx(-float(_neg_log_posterior(want, data)), abs=1e-3)  # recorded to 3 decimals
    # the float32 weights as stored are also measured, and are near the mode
    assert record["grad_norm_stored"] < 1e-2


def test_a_network_keeps_adam_and_newton_is_refused_for_it_in_words():
    lenet = build_model(ArchSpec("lenet5"))
    assert resolve_optimiser("auto", lenet) == "adam"
    with pytest.raises(ValueError, match="needs a model linear in its weights"):
        resolve_optimiser("newton", lenet)
    with pytest.raises(ValueError, match="optimiser must be one of"):
        MapConfig(optimiser="sgd")


def test_ensemble_members_of_a_convex_model_reach_the_same_mode_from_different_starts():
    data = _data()
    want = _independent_mode(data)
    method = get_method("ensemble")
    config = method.config_cls(num_members=3, prior_std=PRIOR_STD, optimiser="newton", grad_tol=1e-6)
    posterior = _drain(method.fit(config, ARCH, data, 0))
    weights = posterior.samples["linear.weight"][:, 0]
    assert weights.shape[0] == 3
    starts = [_flat(m) for m in _member_starts(3)]
    assert min(float((a - b).norm()) for a in starts for b in starts if a is not b) > 0.1  # they did start apart
    for m in range(3):
        flat = torch.cat([weights[m].reshape(-1), posterior.samples["linear.bias"][m, 0]]).double()
        torch.testing.assert_close(flat, want, atol=1e-5, rtol=0)
    assert all(r["grad_norm"] <= 1e-6 for r in posterior.info["map"])
    assert posterior.info["members_spread"] < 1e-4


def _member_starts(count: int) -> list[nn.Module]:
    from core.engine.inference.chains import ChainGenerators

    return ChainGenerators(0, list(range(count)), torch.device("cpu")).models(ARCH)


def test_full_laplace_covariance_is_the_inverse_of_the_hessian_at_the_mode():
    pytest.importorskip("curvlinops")
    data = _data()
    method = get_method("laplace")
    config = method.config_cls(prior_std=PRIOR_STD, structure="full", subset="all", prior_precision="prior",
                               grad_tol=1e-8)
    posterior = _drain(method.fit(config, ARCH, data, 0))
    assert posterior.info["map"]["grad_norm"] <= 1e-8
    mode = _independent_mode(data)
    h = torch.autograd.functional.hessian(lambda t: _neg_log_posterior(t, data), mode)  # includes 1/σ²
    chol = posterior.tensors["cholesky"]
    covariance = torch.cholesky_inverse(chol)
    torch.testing.assert_close(covariance, torch.linalg.inv(h), rtol=1e-4, atol=1e-6)
    # and the draws have that covariance (40,000 draws: within a few per cent)
    draws = posterior.sample_subset(40_000, torch.Generator().manual_seed(1)).double()
    torch.testing.assert_close(torch.cov(draws.T), torch.linalg.inv(h), rtol=0.05,
                               atol=0.05 * float(torch.linalg.inv(h).diagonal().max()))
    torch.testing.assert_close(posterior.mean.double(), mode, atol=1e-5, rtol=0)


def test_full_laplace_too_large_for_memory_is_refused_with_one_sentence():
    data = Dataset(torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,)), "tiny")
    method = get_method("laplace")
    config = method.config_cls(structure="full", subset="all", optimiser="adam", epochs=1, memory_budget_mb=512)
    with pytest.raises(ValueError) as caught:
        _drain(method.fit(config, ArchSpec("lenet5"), data, 0))
    message = str(caught.value)
    assert "full curvature of 44,426 weights" in message and "more than the" in message
    assert "use structure=kron" in message
    assert "\n" not in message and message.count(". ") == 0  # one sentence


def test_zoo_starts_laplace_and_swag_from_the_tier_map_and_records_its_name_only(tmp_path):
    import argparse

    from core.commands import zoo_build, zoo_tiers

    tier = zoo_tiers.TIERS["paper"]
    args = argparse.Namespace(seed=0, data_dir="/data", limit=None, cluster=None)
    argv = zoo_build.train_arguments(tier, "laplace", tmp_path / "paper_softmax_laplace.pt", args)
    assert argv[argv.index("--start-from") + 1] == str(tmp_path / "paper_softmax_map.pt")
    recorded = zoo_build.recorded_arguments(argv)
    assert recorded[recorded.index("--start-from") + 1] == "paper_softmax_map.pt"
    assert "--set" in zoo_build.train_arguments(tier, "map", tmp_path / "m.pt", args)  # optimiser=newton, said


def test_bundled_sampler_files_stay_valid_and_the_mode_based_ones_are_rebuilt():
    """Finding the curvature metric's mode by Newton changes no sampler's arguments, so ``zoo``
    keeps the bundled HMC, SGLD, SGHMC, D-SGHMC and VI files (and the Adam ensemble, whose
    arguments and default are unchanged); an old Adam MAP, whose arguments now ask for the mode,
    is rebuilt."""
    import argparse
    from pathlib import Path

    from core.commands import zoo_build, zoo_tiers

    folder = Path(__file__).resolve().parents[2] / "resources" / "models"
    tier = zoo_tiers.TIERS["paper"]
    if not (folder / tier.file_name("hmc")).is_file():
        pytest.skip("the paper tier's files are not in this checkout")
    args = argparse.Namespace(seed=0, data_dir=None, limit=None, cluster=None)
    for method in ("hmc", "sgld", "sghmc", "dsghmc", "mfvi", "snvi", "sgmmvi", "vdropout", "mc_dropout", "ensemble"):
        path = folder / tier.file_name(method)
        assert zoo_build.already_made(path, zoo_build.train_arguments(tier, method, path, args)), method
    for method in ("map",):
        path = folder / tier.file_name(method)
        record = __import__("core.engine.store", fromlist=["file_records"]).file_records(path)["info"]
        if record.get("map", {}).get("optimiser") == "newton":
            continue  # rebuilt already
        assert not zoo_build.already_made(path, zoo_build.train_arguments(tier, method, path, args)), method
