"""Mixture of structured Gaussians, sGMM-VI (Le Folgoc et al., "Is MC Dropout Bayesian?").

q(θ) = Σ_c w_c N(μ_c, diag(σ_c²) + U_c U_cᵀ), w = softmax(a), C components of rank K.
Each μ_c starts at the architecture's own initialisation drawn with its own seed, so the
components start in different basins. The ELBO is stratified over components,

    L = Σ_c w_c (1/S) Σ_s [(1/B) Σ_b log p(y_b | x_b, θ_cs) − (log q(θ_cs) − log p(θ_cs)) / N],
    θ_cs = μ_c + σ_c ⊙ ε_s + U_c η_s,

so every component is reparameterised and the weights get exact gradients; log q is the
log-sum-exp of the components' Woodbury log-densities.

The mixture weights are kept at or above a floor, ``min_share``/C (half an equal share by
default), by projecting them after every step: the family is the mixtures whose every
component holds at least that weight. Left free, the weights of the paper tier's fit collapsed
onto one component (0.010 / 0.027 / 0.964), and a component of weight 0.01 gives one draw in a
hundred: shown as a mixture, such a posterior is one Gaussian. With the floor every component
gives at least a sixth of the draws (C = 3), so the mixture a column names is the one it shows;
where the data favour one component, the floored ones must still carry their share, and the
ELBO says what that costs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.engine.device import seeded_generator
from core.engine.inference.base import Dataset, FitGenerator
from core.engine.inference.elbo import (
    LowRankVIConfig,
    VariationalState,
    factor_groups,
    initial_mean,
    make_state,
    mixture_step,
)
from core.engine.inference.gaussian_family import LowRankMixture, Prior
from core.engine.inference.variational import run_fit
from core.engine.models import ArchSpec


@dataclass(frozen=True)
class SgmmviConfig(LowRankVIConfig):
    """Hyperparameters of sGMM-VI: those of :class:`LowRankVIConfig` (rank 0 gives a
    mixture of mean-field Gaussians; draws are *per component*) plus

    Attributes
    ----------
    components
        C, the number of mixture components.
    min_share
        The least weight of every component, as a share of an equal weight 1/C (0.5: at least
        half of it; 0: no floor, the weights may collapse onto one component).
    """

    rank: int = 2
    components: int = 3
    min_share: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.components < 1:
            raise ValueError("components must be ≥ 1")
        if not 0.0 <= self.min_share <= 1.0:
            raise ValueError("min_share must lie between 0 and 1 (a share of an equal weight)")


def floor_weights(logits: torch.Tensor, floor: float) -> None:
    """Project the mixture weights softmax(``logits``) in place onto {w : w ≥ floor, Σ w = 1}: the
    weights below the floor are raised to it and the others scaled down in proportion (again
    until none falls below; at most C rounds)."""
    with torch.no_grad():
        w = torch.softmax(logits, 0)
        if floor <= 0 or bool((w >= floor).all()):
            return
        fixed = torch.zeros_like(w, dtype=torch.bool)
        while True:
            budget = 1.0 - floor * int(fixed.sum())
            scaled = torch.where(fixed, torch.full_like(w, floor), w * budget / w[~fixed].sum())
            newly = ~fixed & (scaled < floor)
            if not bool(newly.any()):
                break
            fixed |= newly
        logits.copy_(scaled.log())


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
    floor_weights(state.variational.logits, config.min_share / config.components)  # type: ignore[arg-type]
    weights = state.variational.log_weights().detach().exp()  # type: ignore[operator]
    info["max_weight"] = float(weights.max())
    return state, info


def fit(config: SgmmviConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    return run_fit("sgmmvi", config, arch, data, seed, init, step, lambda posterior: {
        "family": "mixture of diagonal + low-rank Gaussians",
        "rank": config.rank,
        "components": config.components,
        "weight_floor": config.min_share / config.components,
        "weights": [round(float(w), 4) for w in posterior.log_weights.exp()],
    })
