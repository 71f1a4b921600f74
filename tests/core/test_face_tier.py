"""The face tier (``zoo --tier faces``): a softmax-regression head on fixed features, HMC its reference.

HMC is the tier's reference only if it samples the head's exact posterior, so the first test runs
the tier's HMC (the dense curvature metric, four chains started around the mode) on a small head
and compares it with the exact posterior computed without any sampler of bayescope's: importance
sampling from a wide Student-t around the mode, 400,000 weighted draws in float64. The posterior
is chosen skewed (few points, nearly separable), so a Gaussian at the mode (Laplace) misses it by
more than the tolerance: the negative control that gives the comparison its teeth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.engine import convergence
from core.engine.inference import METHODS, hmc
from core.engine.inference.base import Dataset
from core.engine.models import ArchSpec
from core.engine.runner import drain

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PRIOR_STD = 3.0
ARCH = ArchSpec("softmax", num_classes=3, input_dim=2)
PROBE = torch.tensor([[0.0, 0.0], [1.5, 0.5], [-1.0, 1.5], [2.5, -2.0], [-2.0, -2.0]])


def _problem() -> Dataset:
    """24 points in 2-d, three classes around three centres, nearly separable."""
    g = torch.Generator().manual_seed(3)
    centres = torch.tensor([[1.2, 0.0], [-0.6, 1.0], [-0.6, -1.0]])
    y = torch.arange(24) % 3
    x = centres[y] + 0.55 * torch.randn(24, 2, generator=g)
    return Dataset(x, y)


def _log_posterior(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log p(y | x, W, b) + log N(W, b; 0, σ²I) for weight sets (S, K, D) and (S, K), float64."""
    logits = torch.einsum("skd,nd->snk", w, x) + b[:, None, :]
    ll = torch.log_softmax(logits, -1).gather(-1, y[None, :, None].expand(len(w), -1, 1)).sum((1, 2))
    return ll - 0.5 * (w.pow(2).sum((1, 2)) + b.pow(2).sum(1)) / PRIOR_STD**2


def _split(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k, d = ARCH.num_classes, ARCH.input_dim
    return theta[:, :k * d].reshape(-1, k, d), theta[:, k * d:]


def _probe_probs(theta: torch.Tensor) -> torch.Tensor:
    w, b = _split(theta)
    return torch.softmax(torch.einsum("skd,nd->snk", w, PROBE.double()) + b[:, None, :], -1)  # (S, probe, K)


def _exact_moments(data: Dataset) -> dict[str, np.ndarray]:
    """Mean and sd of the probe's class probabilities under the exact posterior (importance sampling,
    a multivariate t with 4 degrees of freedom around the mode, covariance 2 A⁻¹), and the same
    under the Laplace approximation N(mode, A⁻¹)."""
    x, y = data.x.double(), data.y
    dim = ARCH.num_classes * (ARCH.input_dim + 1)

    def neg(theta: torch.Tensor) -> torch.Tensor:
        return -_log_posterior(*_split(theta[None]), x, y)[0]

    theta = torch.zeros(dim, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([theta], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = neg(theta)
        value.backward()
        return value

    opt.step(closure)
    mode = theta.detach()
    cov = torch.linalg.inv(torch.autograd.functional.hessian(neg, mode))
    g = torch.Generator().manual_seed(7)
    df, scale = 4.0, torch.linalg.cholesky(2.0 * cov)
    shift = float(-neg(mode))  # log w at the mode (where log q is 0): no weight overflows or vanishes
    total, weights_sum, squares, first, second = 200_000, 0.0, 0.0, 0.0, 0.0
    for _ in range(total // 50_000):
        z = torch.randn(50_000, dim, generator=g, dtype=torch.float64)
        chi2 = torch.distributions.Chi2(torch.tensor(df, dtype=torch.float64)).sample((50_000,))
        t = z / torch.sqrt(chi2 / df)[:, None]
        draws = mode + t @ scale.T
        # log q up to its constant: the t's density in the whitened coordinates
        log_q = -0.5 * (df + dim) * torch.log1p(t.pow(2).sum(1) / df)
        log_w = _log_posterior(*_split(draws), x, y) - log_q
        w = torch.exp(log_w - shift)
        p = _probe_probs(draws)
        weights_sum += float(w.sum())
        squares += float(w.pow(2).sum())
        first = first + (w[:, None, None] * p).sum(0)
        second = second + (w[:, None, None] * p.pow(2)).sum(0)
    # the proposal covers the posterior: an effective sample of 10,000 or more (27,000 here)
    assert weights_sum**2 / squares > 0.05 * total
    mean = first / weights_sum
    sd = (second / weights_sum - mean.pow(2)).clamp_min(0).sqrt()
    laplace = _probe_probs(mode + torch.randn(200_000, dim, generator=g, dtype=torch.float64)
                           @ torch.linalg.cholesky(cov).T)
    return {"mean": mean.numpy(), "sd": sd.numpy(),
            "laplace_mean": laplace.mean(0).numpy(), "laplace_sd": laplace.std(0).numpy()}


@pytest.fixture(scope="module")
def exact_and_hmc():
    data = _problem()
    exact = _exact_moments(data)
    config = hmc.HmcConfig(num_chains=4, metric="curvature", init="overdispersed", step_size=0.1,
                           num_warmup=100, num_samples=500, thin=1, num_leapfrog=8, prior_std=PRIOR_STD)
    posterior = drain(hmc.fit(config, ARCH, data, 0))
    probs = posterior.predict_proba(PROBE, posterior.num_samples).double()  # (chains·draws, probe, K)
    draws = probs.reshape(posterior.num_chains, posterior.num_draws, *probs.shape[1:]).numpy()
    return exact, draws


def test_hmc_on_a_small_softmax_head_converges(exact_and_hmc):
    _, draws = exact_and_hmc
    summary = convergence.summarise(draws, 1e-6)
    assert summary.rhat_max <= 1.01
    assert summary.ess_bulk_min >= 400


def test_hmc_on_a_small_softmax_head_has_the_exact_posteriors_moments(exact_and_hmc):
    exact, draws = exact_and_hmc
    pooled = draws.reshape(-1, *draws.shape[2:])
    ess = convergence.summarise(draws, 1e-6).ess_bulk_min
    # the first two moments within 4 of HMC's Monte Carlo standard errors (sd / √ESS; the
    # importance-sampled ones are several times sharper), and 10⁻³ for the float32 predictions
    mean, square = pooled.mean(0), (pooled**2).mean(0)
    tol_mean = 4 * pooled.std(0) / math.sqrt(ess) + 1e-3
    tol_square = 4 * (pooled**2).std(0) / math.sqrt(ess) + 1e-3
    exact_square = exact["sd"] ** 2 + exact["mean"] ** 2
    assert np.all(np.abs(mean - exact["mean"]) <= tol_mean)
    assert np.all(np.abs(square - exact_square) <= tol_square)
    # negative control: the Gaussian at the mode, a posterior of the same head that is not the exact
    # one, fails the same comparison
    laplace_square = exact["laplace_sd"] ** 2 + exact["laplace_mean"] ** 2
    assert (np.abs(exact["laplace_mean"] - exact["mean"]) > tol_mean).any()
    assert (np.abs(laplace_square - exact_square) > tol_square).any()


def _face_files() -> list:
    """The face tier's bundled files (the earlier heads they replace are not of the tier)."""
    from core.engine.resources import FACE_PREFIX, bundled_face_posteriors

    return [p for p in bundled_face_posteriors() if p.name.startswith(FACE_PREFIX)]


@pytest.mark.parametrize("path", _face_files(), ids=lambda p: p.stem)
def test_every_bundled_face_file_is_of_the_face_tier_and_its_samplers_converged(path, capsys):
    """What ``bayescope-cli info --json`` says of each bundled face head: the face tier, and for a
    sampler at least 100 draws kept and R̂ ≤ 1.01 over the probe's class probabilities (HMC, the
    reference, with a bulk ESS of at least 400)."""
    import json

    from core.commands.main import main

    assert main(["info", str(path), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["tier"] == "faces" and facts["architecture"]["input_dim"] == 128
    record = facts["convergence"]
    if facts["chains"] is None or facts["method"] in ("ensemble", "map"):  # no chains to compare
        assert record["status"] == "n/a"
        return
    assert facts["chains"] * facts["draws"] >= 100
    assert record["status"] == "measured" and record["rhat_max"] <= 1.01, record.get("rhat_max")
    if facts["method"] == "hmc":
        assert facts["chains"] >= 4 and record["ess_bulk_min"] >= 400


def test_the_face_tab_opens_the_face_tiers_files():
    from core.engine.resources import DEFAULT_FACE_POSTERIOR, bundled_face_posteriors

    files = _face_files()
    if not files:
        pytest.skip("the face tier's files are not bundled yet (bayescope-cli zoo --tier faces; docs/zoo.md)")
    assert bundled_face_posteriors() == files  # the earlier heads are left out beside their successors
    assert files[0].name == DEFAULT_FACE_POSTERIOR == "faces_softmax_hmc.pt"
    # the tier's methods, the Face tab's defaults among them (those not yet converged are not bundled)
    assert {p.name for p in files} <= {f"faces_softmax_{m}.pt" for m in METHODS}
    assert {f"faces_softmax_{m}.pt" for m in ("hmc", "mc_dropout", "mfvi", "laplace")} <= {p.name for p in files}
