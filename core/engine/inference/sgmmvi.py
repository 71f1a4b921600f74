"""Mixture of structured Gaussians, sGMM-VI (Le Folgoc et al., "Is MC Dropout Bayesian?").

q(θ) = Σ_c w_c N(μ_c, diag(σ_c²) + U_c U_cᵀ), w = softmax(a), C components of rank K.
Each μ_c starts at the architecture's own initialisation drawn with its own seed, so the
components start in different basins. The ELBO is stratified over components,

    L = Σ_c w_c (1/S) Σ_s [(1/B) Σ_b log p(y_b | x_b, θ_cs) − (log q(θ_cs) − log p(θ_cs)) / N],
    θ_cs = μ_c + σ_c ⊙ ε_s + U_c η_s,

so every component is reparameterised and the weights get exact gradients; log q is the
log-sum-exp of the components' Woodbury log-densities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.engine.device import seeded_generator
from core.engine.inference.base import Dataset, FitGenerator
from core.engine.inference.variational import (
    LowRankMixture,
    LowRankVIConfig,
    Prior,
    VariationalState,
    factor_groups,
    initial_mean,
    make_state,
    mixture_step,
    run_fit,
)
from core.engine.models import ArchSpec


@dataclass(frozen=True)
class SgmmviConfig(LowRankVIConfig):
    """Hyperparameters of sGMM-VI: those of :class:`LowRankVIConfig` (rank 0 gives a
    mixture of mean-field Gaussians; draws are *per component*) plus

    Attributes
    ----------
    components
        C, the number of mixture components.
    """

    rank: int = 2
    components: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.components < 1:
            raise ValueError("components must be ≥ 1")


def init(config: SgmmviConfig, arch: ArchSpec, num_train: int, seed: int) -> VariationalState:
    """Component c's mean is the architecture's init under seed + c."""
    model, mean0 = initial_mean(arch, seed)
    means = [mean0] + [initial_mean(arch, seed + c)[1] for c in range(1, config.components)]
    g = seeded_generator(seed + 7919)
    family = LowRankMixture(
        torch.stack(means),
        config.init_std,
        rank=config.rank,
        components=config.components,
        factor_std=config.init_factor_std,
        generator=g,
    )
    total = config.epochs * -(-num_train // config.batch_size)
    return make_state(model, family, num_train, config.lr, total, factor_groups(family, config))


def step(
    state: VariationalState,
    batch: tuple[torch.Tensor, torch.Tensor],
    generator: torch.Generator,
    config: SgmmviConfig,
) -> tuple[VariationalState, dict[str, float]]:
    """One Adam step on the negative stratified per-example ELBO."""
    prior = Prior(config.prior, config.prior_std, config.prior_df)
    state, info = mixture_step(
        state, batch, generator, prior=prior, num_samples=config.num_samples, mode=config.sampling
    )
    weights = state.variational.log_weights().detach().exp()  # type: ignore[operator]
    info["max_weight"] = float(weights.max())
    return state, info


def fit(config: SgmmviConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    return run_fit("sgmmvi", config, arch, data, seed, init, step, lambda posterior: {
        "family": "mixture of diagonal + low-rank Gaussians",
        "rank": config.rank,
        "components": config.components,
        "weights": [round(float(w), 4) for w in posterior.log_weights.exp()],
    })
