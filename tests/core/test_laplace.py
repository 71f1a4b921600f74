"""The Laplace approximation: its curvature against closed forms, its predictive against exact
quadrature, its prior precision against the closed-form evidence of Bayesian linear regression,
the size refusal, and end to end (fit, save, load, predict) in every structure."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("curvlinops")

from core.engine.inference import get_method  # noqa: E402
from core.engine.inference.base import Dataset  # noqa: E402
from core.engine.inference.ggn import diag_ggn, full_ggn, kron_factors  # noqa: E402
from core.engine.inference.laplace import (  # noqa: E402
    LaplaceConfig,
    laplace_log_evidence,
    optimise_prior_precision,
)
from core.engine.models import ArchSpec  # noqa: E402
from core.engine.store import load_posterior, save_posterior  # noqa: E402


def _drain(run):
    while True:
        try:
            next(run)
        except StopIteration as stop:
            return stop.value


def _logistic_data(n: int = 400, slope: float = 1.5, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 1))
    y = (rng.random(n) < 1 / (1 + np.exp(-slope * x[:, 0]))).astype(np.int64)
    return Dataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y), "logistic")


def test_full_curvature_is_the_closed_form_ggn_and_diag_its_diagonal():
    """Two-class softmax regression without bias, w = (w₀, w₁): H = Σ xₙ² pₙ(1−pₙ) [[1, −1], [−1, 1]]."""
    data = _logistic_data(n=60)
    model = nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[-0.4], [0.9]]))
    p1 = torch.softmax(model(data.x), -1)[:, 1].double().detach()
    s = float((data.x[:, 0].double() ** 2 * p1 * (1 - p1)).sum())
    want = torch.tensor([[s, -s], [-s, s]], dtype=torch.float64)
    h = full_ggn(model, ["weight"], data, batch_size=16)
    torch.testing.assert_close(h, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_drain(diag_ggn(model, ["weight"], data, batch_size=16)), torch.diagonal(want),
                               rtol=1e-5, atol=1e-6)


def test_kron_factors_are_exact_for_one_image():
    """K-FAC's G ⊗ A is the exact GGN when there is one image (then E[g gᵀ ⊗ a aᵀ] = E[g gᵀ] ⊗ E[a aᵀ])."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3))
    data = Dataset(torch.randn(1, 3), torch.tensor([2]), "one")
    names = ["2.weight", "2.bias"]
    (g, a), = kron_factors(model, names, data, batch_size=1)
    kron = torch.kron(g, a)  # on [W b] row by row
    order = [o * 5 + i for o in range(3) for i in range(4)] + [o * 5 + 4 for o in range(3)]
    torch.testing.assert_close(kron[order][:, order], full_ggn(model, names, data, batch_size=1), rtol=1e-5, atol=1e-6)


def test_laplace_predictive_matches_grid_quadrature_on_logistic_regression():
    """Two weights, 400 points: the exact posterior predictive p(y=1 | x*, D) by quadrature on a
    grid against the Laplace (full GGN) predictive from draws: within 0.01 at every x*."""
    data = _logistic_data()
    prior_precision = 1.0
    x, y = data.x[:, 0].double().numpy(), data.y.numpy()
    grid = np.linspace(-6, 6, 601)
    w0, w1 = np.meshgrid(grid, grid, indexing="ij")
    logits = (w1 - w0)[..., None] * x  # p(y=1) = σ((w₁ − w₀) x)
    loglik = (y * -np.logaddexp(0, -logits) + (1 - y) * -np.logaddexp(0, logits)).sum(-1)
    logpost = loglik - 0.5 * prior_precision * (w0**2 + w1**2)
    weights = np.exp(logpost - logpost.max())
    weights /= weights.sum()
    # MAP by Newton on the same objective, then the Laplace Gaussian from the library's GGN
    model = nn.Linear(1, 2, bias=False).double()
    flat = np.unravel_index(np.argmax(logpost), logpost.shape)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[grid[flat[0]]], [grid[flat[1]]]]))
    for _ in range(20):
        w = model.weight[:, 0].detach()
        p1 = torch.sigmoid((w[1] - w[0]) * data.x[:, 0].double()).detach()
        r = data.y.double() - p1
        grad = torch.stack([-(r * data.x[:, 0].double()).sum(), (r * data.x[:, 0].double()).sum()]) - prior_precision * w
        s = float((data.x[:, 0].double() ** 2 * p1 * (1 - p1)).sum())
        hess = torch.tensor([[s, -s], [-s, s]], dtype=torch.float64) + prior_precision * torch.eye(2, dtype=torch.float64)
        with torch.no_grad():
            model.weight[:, 0] += torch.linalg.solve(hess, grad)
    dd = Dataset(data.x.double(), data.y, "logistic")
    cov = torch.linalg.inv(full_ggn(model, ["weight"], dd, batch_size=64) + prior_precision * torch.eye(2, dtype=torch.float64))
    draws = torch.distributions.MultivariateNormal(model.weight[:, 0].detach(), cov).sample((400_000,))
    for x_star in (-2.0, -0.5, 0.3, 1.0, 3.0):
        exact = float((weights / (1 + np.exp(-(w1 - w0) * x_star))).sum())
        laplace = float(torch.sigmoid((draws[:, 1] - draws[:, 0]) * x_star).mean())
        assert abs(exact - laplace) < 0.01, (x_star, exact, laplace)


def test_laplace_evidence_is_the_closed_form_evidence_of_bayesian_linear_regression():
    """With a Gaussian likelihood the Laplace evidence at θ*(δ) is exact: log N(y | 0, σ²I + XXᵀ/δ);
    and iterating the optimiser with θ*(δ) lands on the closed form's maximiser."""
    from scipy.optimize import minimize_scalar

    rng = np.random.default_rng(3)
    n, d, noise = 40, 5, 0.5
    x = rng.normal(size=(n, d))
    y = x @ rng.normal(scale=0.7, size=d) + noise * rng.normal(size=n)
    h = x.T @ x / noise**2
    lam = torch.tensor(np.linalg.eigvalsh(h))

    def theta_star(delta):
        return np.linalg.solve(h + delta * np.eye(d), x.T @ y / noise**2)

    def exact(delta):
        cov = noise**2 * np.eye(n) + x @ x.T / delta
        sign, logdet = np.linalg.slogdet(cov)
        return -0.5 * (y @ np.linalg.solve(cov, y) + logdet + n * math.log(2 * math.pi))

    for delta in (0.1, 1.0, 7.0):
        t = theta_star(delta)
        loglik = -0.5 * (np.sum((y - x @ t) ** 2) / noise**2 + n * math.log(2 * math.pi * noise**2))
        assert laplace_log_evidence(loglik, float(t @ t), lam, delta) == pytest.approx(exact(delta), rel=1e-9)
    best = minimize_scalar(lambda log_d: -exact(math.exp(log_d)), bounds=(-10, 10), method="bounded",
                           options={"xatol": 1e-10}).x
    delta = 1.0
    for _ in range(200):
        delta = optimise_prior_precision(lam, float(theta_star(delta) @ theta_star(delta)))
    assert delta == pytest.approx(math.exp(best), rel=1e-4)


def test_a_full_curvature_of_all_of_lenet_is_refused_with_a_sentence_before_training():
    config = LaplaceConfig(subset="all", structure="full")
    run = get_method("laplace").fit(config, ArchSpec("lenet", num_classes=10), Dataset(torch.zeros(4, 1, 28, 28), torch.zeros(4, dtype=torch.long)), 0)
    with pytest.raises(ValueError, match=r"full curvature of 431,080 weights .* would need about .*; use structure=kron"):
        next(run)


@pytest.mark.parametrize("structure", ["kron", "diag", "full"])
def test_laplace_fits_saves_loads_and_its_probit_variance_is_the_draws_variance(structure, tmp_path, two_halves):
    data = two_halves
    arch = ArchSpec("mlp", num_classes=2, hidden=16)
    config = LaplaceConfig(epochs=2, batch_size=64, structure=structure, prior_precision="marglik")
    posterior = _drain(get_method("laplace").fit(config, arch, data, seed=1))
    assert posterior.info["prior_precision"] > 0 and posterior.info["subset_weights"] == 16 * 2 + 2
    loaded = load_posterior(save_posterior(posterior, tmp_path / "laplace.pt"))
    assert loaded.method == "laplace" and loaded.default_num_samples == 30
    proba = loaded.predict_proba(data.x[:40])
    assert proba.shape == (30, 40, 2)
    assert (proba.mean(0).argmax(-1) == data.y[:40]).float().mean() > 0.9
    # the closed-form logit variance of the last layer equals that of many drawn weight sets
    mu, var = loaded.logit_covariance_diagonal(data.x[:40])
    logits = loaded.predict_logits(data.x[:40], num_samples=20_000, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(logits.mean(0), mu, atol=0.05 * float(var.sqrt().max()) + 1e-4, rtol=0)
    torch.testing.assert_close(logits.var(0), var, rtol=0.06, atol=1e-6)
    probit = load_posterior(save_posterior(
        _drain(get_method("laplace").fit(LaplaceConfig(epochs=2, batch_size=64, structure=structure,
                                                       predictive="probit"), arch, data, seed=1)),
        tmp_path / "probit.pt"))
    p = probit.predict_proba(data.x[:40])
    assert p.shape == (1, 40, 2) and probit.fixed_num_samples == 1
    torch.testing.assert_close(p.sum(-1), torch.ones(1, 40))


def test_probit_is_refused_for_all_layers_in_words():
    with pytest.raises(ValueError, match="probit predictive needs subset=last_layer"):
        LaplaceConfig(subset="all", predictive="probit")


def test_the_cli_fits_laplace_and_swag_from_a_saved_map_and_refuses_what_cannot_start(tiny_mnist, tmp_path, capsys):
    from core.commands.main import main

    common = ["--data-dir", str(tiny_mnist), "--model", "softmax", "--eval-samples", "5"]
    assert main(["train", *common, "--method", "map", "--set", "epochs=2", "--out", str(tmp_path / "map.pt")]) == 0
    assert load_posterior(tmp_path / "map.pt").info["eval_samples"] == 1  # what was used: a MAP holds one draw
    assert "(1 sample, 100 images)" in capsys.readouterr().out
    for method in ("laplace", "swag"):
        out = tmp_path / f"{method}.pt"
        settings = ["--set", "swa_epochs=2", "--set", "rank=4"] if method == "swag" else []
        assert main(["train", *common, "--method", method, "--start-from", str(tmp_path / "map.pt"),
                     *settings, "--out", str(out)]) == 0
        posterior = load_posterior(out)
        assert posterior.info["started_from"]["method"] == "map"
        assert posterior.info["started_from"]["file_sha256"]
        assert posterior.info["test_accuracy"] > 0.9
    capsys.readouterr()
    assert main(["train", *common, "--method", "sghmc", "--start-from", str(tmp_path / "map.pt"),
                 "--out", str(tmp_path / "x.pt")]) == 2
    assert "cannot start from a saved posterior" in capsys.readouterr().err
    assert main(["train", *common, "--method", "laplace", "--start-from", str(tmp_path / "swag.pt"),
                 "--out", str(tmp_path / "y.pt")]) == 2
    assert "the file holds a swag posterior" in capsys.readouterr().err
