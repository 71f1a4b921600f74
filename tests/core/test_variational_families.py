"""Variational families: log-densities, entropies, KL terms and sampling modes against closed forms."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal, Normal, StudentT, kl_divergence

from core.engine.inference.elbo import elbo_terms
from core.engine.inference.gaussian_family import (
    LowRankMixture,
    Prior,
    gaussian_kl_to_prior,
    lowrank_entropy,
    lowrank_log_prob,
    mixture_log_prob,
    mixture_sample,
    standard_noise,
)
from core.engine.inference.vdropout import kl_log_uniform

D = torch.float64


def _params(p, k, c=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(c, p, generator=g, dtype=D)
    std = torch.rand(c, p, generator=g, dtype=D) + 0.2
    factors = torch.randn(c, p, k, generator=g, dtype=D)
    return mean, std, factors


def _dense(mean, std, factors):
    return MultivariateNormal(mean, torch.diag(std**2) + factors @ factors.T)


@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_lowrank_log_prob_and_entropy_match_dense_gaussian(k):
    mean, std, factors = _params(6, k)
    theta = torch.randn(20, 6, generator=torch.Generator().manual_seed(1), dtype=D) * 2
    ref = _dense(mean[0], std[0], factors[0])
    got = lowrank_log_prob(theta, mean[0], std[0], factors[0])
    torch.testing.assert_close(got, ref.log_prob(theta), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(lowrank_entropy(std[0], factors[0]), ref.entropy())


def test_lowrank_log_prob_in_float32_on_many_parameters_matches_float64():
    mean, std, factors = _params(5000, 4)
    theta = mean[0] + torch.randn(3, 5000, dtype=D) * std[0]
    exact = lowrank_log_prob(theta, mean[0], std[0], factors[0])
    single = lowrank_log_prob(theta.float(), mean[0].float(), std[0].float(), factors[0].float())
    torch.testing.assert_close(single.double(), exact, rtol=1e-5, atol=0.05)


def test_mixture_log_prob_matches_weighted_dense_components():
    mean, std, factors = _params(5, 2, c=3)
    logw = torch.log(torch.tensor([0.2, 0.5, 0.3], dtype=D))
    theta = torch.randn(15, 5, generator=torch.Generator().manual_seed(2), dtype=D)
    dense = torch.stack(
        [
            _dense(mean[c], std[c], factors[c]).log_prob(theta).exp() * logw[c].exp()
            for c in range(3)
        ]
    ).sum(0)
    torch.testing.assert_close(mixture_log_prob(theta, mean, std, factors, logw), dense.log())


def test_family_module_log_prob_uses_softplus_scale():
    mean = torch.zeros(4, dtype=D)
    fam = LowRankMixture(
        mean, 0.3, rank=2, factor_std=0.5, generator=torch.Generator().manual_seed(0)
    )
    torch.testing.assert_close(fam.std(), torch.full((1, 4), 0.3, dtype=D))
    theta = torch.randn(7, 4, dtype=D)
    ref = _dense(mean, torch.full((4,), 0.3, dtype=D), fam.factors[0].detach())
    torch.testing.assert_close(fam.log_prob(theta).detach(), ref.log_prob(theta))


def test_gaussian_kl_to_prior_matches_torch_distributions():
    mean, std, _ = _params(30, 0)
    ref = kl_divergence(Normal(mean[0], std[0]), Normal(torch.zeros(30, dtype=D), 1.7)).sum()
    torch.testing.assert_close(gaussian_kl_to_prior(mean[0], std[0], 1.7), ref)


@pytest.mark.parametrize("name", ["gaussian", "student_t"])
def test_prior_log_density_matches_torch_distributions(name):
    theta = torch.randn(4, 9, dtype=D) * 3
    prior = Prior(name, scale=0.7, df=2.5)
    ref = Normal(0.0, 0.7) if name == "gaussian" else StudentT(2.5, 0.0, 0.7)
    torch.testing.assert_close(prior.log_prob(theta), ref.log_prob(theta).sum(-1))


def test_paired_draws_average_to_the_mean_exactly():
    fam = LowRankMixture(torch.randn(50, dtype=D), 0.4, rank=3, factor_std=1.0)
    draws = fam.component_draws(0, 10, "paired", torch.Generator().manual_seed(0)).detach()
    pairs = (draws[:5] + draws[5:]) / 2
    torch.testing.assert_close(pairs, fam.mean.detach().expand(5, -1))
    assert not torch.allclose(draws[0], draws[1])


def test_unscented_groups_reproduce_the_low_rank_covariance_exactly():
    k = 4
    eps, eta = standard_noise(2 * k, 30, k, "unscented", torch.Generator().manual_seed(3), D)
    torch.testing.assert_close(eta.mean(0), torch.zeros(k, dtype=D))
    torch.testing.assert_close(eta.T @ eta / (2 * k), torch.eye(k, dtype=D))
    torch.testing.assert_close(eps[:k] + eps[k:], torch.zeros(k, 30, dtype=D))
    # the low-rank part of the draws has empirical covariance U Uᵀ exactly
    u = torch.randn(30, k, dtype=D)
    low = eta @ u.T
    torch.testing.assert_close(low.T @ low / (2 * k), u @ u.T)


def test_sampling_modes_reject_incomplete_groups_and_rankless_unscented():
    with pytest.raises(ValueError, match="groups of 2"):
        standard_noise(3, 5, 1, "paired")
    with pytest.raises(ValueError, match="rank"):
        standard_noise(4, 5, 0, "unscented")


@pytest.mark.parametrize("mode", ["naive", "paired", "unscented"])
def test_every_mode_draws_from_the_right_gaussian(mode):
    mean, std, factors = _params(4, 2)
    fam = LowRankMixture(mean[0], std[0], rank=2)
    with torch.no_grad():
        fam.factors.copy_(factors)
    draws = fam.component_draws(0, 40000, mode, torch.Generator().manual_seed(4)).detach()
    cov = torch.diag(std[0] ** 2) + factors[0] @ factors[0].T
    torch.testing.assert_close(draws.mean(0), mean[0], atol=0.05, rtol=0)
    torch.testing.assert_close(torch.cov(draws.T), cov, atol=0.08, rtol=0.03)


def test_mixture_sampling_matches_the_mixture_moments():
    mean, std, factors = _params(3, 1, c=2)
    logw = torch.log(torch.tensor([0.3, 0.7], dtype=D))
    draws = mixture_sample(60000, mean, std, factors, logw, torch.Generator().manual_seed(5))
    w = logw.exp()
    m = (w[:, None] * mean).sum(0)
    second = sum(
        w[c] * (torch.diag(std[c] ** 2) + factors[c] @ factors[c].T + torch.outer(mean[c], mean[c]))
        for c in range(2)
    )
    torch.testing.assert_close(draws.mean(0), m, atol=0.03, rtol=0)
    torch.testing.assert_close(torch.cov(draws.T), second - torch.outer(m, m), atol=0.06, rtol=0.03)


@pytest.mark.parametrize("mode", ["naive", "paired", "unscented"])
def test_elbo_is_exactly_log_evidence_when_q_is_the_target(mode):
    """log p̃ − log q is constant under q = p, so any draw gives ELBO = log Z exactly."""
    mean, std, factors = _params(5, 2)
    target = _dense(mean[0], std[0], factors[0])
    fam = LowRankMixture(mean[0], std[0], rank=2)
    with torch.no_grad():
        fam.factors.copy_(factors)
    log_z = 3.25

    terms = elbo_terms(
        fam,
        lambda t: target.log_prob(t) + log_z,
        lambda t: t.new_zeros(t.shape[0]),
        num_samples=4,
        mode=mode,
        generator=torch.Generator().manual_seed(0),
    )
    assert terms.elbo.item() == pytest.approx(log_z, abs=1e-9)


def test_stratified_mixture_elbo_weights_components_by_their_weights():
    fam = LowRankMixture(torch.zeros(2, 3, dtype=D), 1.0, rank=0, components=2)
    with torch.no_grad():
        fam.mean[1] += 10.0
        fam.logits.copy_(torch.log(torch.tensor([0.25, 0.75], dtype=D)))
    terms = elbo_terms(
        fam, lambda t: t[:, 0], lambda t: t.new_zeros(t.shape[0]), 2, "paired", torch.Generator()
    )
    # E_q[θ₀] = 0.25 · 0 + 0.75 · 10, exact under paired draws
    assert terms.log_likelihood.item() == pytest.approx(7.5)


def _expected_log_abs_normal(alpha: float) -> float:
    """E[log|ε|], ε ~ N(1, α), by quadrature (scipy), the non-constant part of the exact KL."""
    from scipy import integrate, stats

    s = math.sqrt(alpha)

    def f(e):
        return math.log(abs(e)) * stats.norm.pdf(e, 1.0, s)

    lo, hi = 1 - 12 * s, 1 + 12 * s
    pieces = [(lo, 0.0), (0.0, hi)] if lo < 0 else [(lo, hi)]
    return sum(integrate.quad(f, a, b, limit=200)[0] for a, b in pieces)


def test_variational_dropout_kl_fit_tracks_the_exact_kl_differences():
    """KL[N(θ, αθ²) ‖ log-uniform] = −½ log α + E[log|ε|] + const (Kingma et al., eq. 7 context)."""
    assert kl_log_uniform(torch.tensor(0.0)).item() == pytest.approx(0.0, abs=1e-7)
    ref_alpha = 1.0
    exact_ref = _expected_log_abs_normal(ref_alpha)
    for alpha in (0.05, 0.2, 0.5, 0.8):
        exact = -0.5 * math.log(alpha) + _expected_log_abs_normal(alpha) - exact_ref
        fit = kl_log_uniform(torch.tensor(math.log(alpha))).item()
        assert fit == pytest.approx(exact, abs=0.02)
    values = kl_log_uniform(torch.linspace(-6, 0, 50))
    assert (values.diff() < 0).all() and (values >= 0).all()
