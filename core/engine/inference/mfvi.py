"""Mean-field variational inference, "Bayes by backprop" (Blundell et al. 2015).

q(θ) = N(μ, diag(σ²)), σ = softplus(ρ), μ initialised at the architecture's own
initialisation. Maximise the per-example ELBO

    L(μ, ρ) = (1/B) Σ_{b} E_q[log p(y_b | x_b, θ)] − KL[q ‖ p] / N.

With ``local_reparam`` (Kingma, Salimans & Welling 2015) every Linear layer samples its
pre-activation b ~ N(x μ_Wᵀ + μ_c, x² (σ_W²)ᵀ + σ_c²) independently per example (lower
variance, no weight sample) and every Conv2d layer one whole kernel per example, so each
example sees the noise of its own weight draw, as in prediction; with a Gaussian prior N(0, s²) the KL is exact,
KL = Σᵢ log(s/σᵢ) + (σᵢ² + μᵢ²)/(2s²) − ½. Otherwise θ = μ + σ ⊙ ε is drawn
(``naive`` or ``paired`` ε, −ε) and KL ≈ mean_s [log q(θ_s) − log p(θ_s)], as in
Le Folgoc et al.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import functional_call

from core.engine.inference.base import Dataset, FitGenerator
from core.engine.inference.elbo import (
    GaussianVIConfig,
    VariationalState,
    apply_gradients,
    info_from,
    initial_mean,
    make_state,
    mixture_step,
)
from core.engine.inference.gaussian_family import LowRankMixture, Prior, gaussian_kl_to_prior
from core.engine.inference.local_reparam import LocalReparameterisation
from core.engine.inference.variational import run_fit
from core.engine.models import ArchSpec


@dataclass(frozen=True)
class MfviConfig(GaussianVIConfig):
    """Hyperparameters of MF-VI: those of :class:`GaussianVIConfig` plus

    Attributes
    ----------
    local_reparam
        Sample Linear/Conv2d pre-activations instead of weights (Kingma et al. 2015);
        ``sampling`` and ``num_samples`` apply when it is off (``naive`` or ``paired``).
    """

    local_reparam: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sampling == "unscented":
            raise ValueError("MF-VI has no low-rank directions; use sampling 'naive' or 'paired'")


def init(config: MfviConfig, arch: ArchSpec, num_train: int, seed: int) -> VariationalState:
    """μ from the seeded architecture init, σ = init_std, optimiser and hooks ready."""
    model, mean = initial_mean(arch, seed)
    family = LowRankMixture(mean, config.init_std, rank=0)
    total = config.epochs * -(-num_train // config.batch_size)
    state = make_state(model, family, num_train, config.lr, total)
    if config.local_reparam:
        state.local = LocalReparameterisation(model)
    return state


def step(
    state: VariationalState,
    batch: tuple[torch.Tensor, torch.Tensor],
    generator: torch.Generator,
    config: MfviConfig,
) -> tuple[VariationalState, dict[str, float]]:
    """One Adam step on −ELBO/N; returns the progress values."""
    prior = Prior(config.prior, config.prior_std, config.prior_df)
    if state.local is None:
        return mixture_step(
            state,
            batch,
            generator,
            prior=prior,
            num_samples=config.num_samples,
            mode=config.sampling,
        )
    x, y = batch
    family: LowRankMixture = state.variational  # type: ignore[assignment]
    mean, std = family.mean[0], family.std()[0]
    layout = state.layout
    covered = state.local.covered()
    var = layout.unflatten(std.pow(2))
    means = layout.unflatten(mean)
    params = dict(means)
    if len(covered) < len(layout.names):
        # parameters outside Linear/Conv2d layers (none in the bundled models) are drawn
        theta = layout.unflatten(mean + std * torch.randn(mean.shape, generator=generator))
        params = {n: (means[n] if n in covered else theta[n]) for n in layout.names}
    state.local.variances = {n: v for n, v in var.items() if n in covered}
    state.local.generator = generator
    try:
        logits = functional_call(state.model, params, (x,))
    finally:
        state.local.variances = None
    ell = torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).mean()
    if prior.name == "gaussian":
        kl = gaussian_kl_to_prior(mean, std, prior.scale)
    else:
        draw = family.component_draws(0, 1, "naive", generator)
        kl = (family.log_prob(draw) - prior.log_prob(draw)).mean()
    kl = kl / state.num_train
    norm = apply_gradients(state, -(ell - kl))
    return state, info_from(ell, kl, logits.unsqueeze(0), y, norm)


def fit(config: MfviConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    return run_fit("mfvi", config, arch, data, seed, init, step, lambda _: {"family": "mean-field Gaussian", "rank": 0, "components": 1})
