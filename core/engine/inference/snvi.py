"""Structured Gaussian VI, sN-VI (Le Folgoc et al., "Is MC Dropout Bayesian?").

q(θ) = N(μ, Σ) over *all* P parameters jointly, Σ = diag(σ²) + U Uᵀ, U ∈ ℝᴾˣᴷ,
σ = softplus(ρ); μ starts at the architecture's own initialisation. Draws are
θ = μ + σ ⊙ ε + U η (ε ~ N(0, I_P), η ~ N(0, I_K)), coupled by the sampling mode
(``naive``, ``paired`` μ ± δ, or ``unscented``: 2K draws along √K·R e_k, R ∈ O(K) random,
and mirrors). The per-example objective is

    L = (1/S) Σ_s [(1/B) Σ_b log p(y_b | x_b, θ_s) − (log q(θ_s) − log p(θ_s)) / N],

with log q by Woodbury / the matrix-determinant lemma (M = I_K + Uᵀ D⁻¹ U):
log q(θ) = −½ [P log 2π + Σ log σᵢ² + log|M| + dᵀD⁻¹d − ‖L⁻¹ Uᵀ D⁻¹ d‖²], d = θ − μ,
L = chol(M). Cost O(P K² + K³) and memory O(P K) per step.
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
class SnviConfig(LowRankVIConfig):
    """Hyperparameters of sN-VI: those of :class:`LowRankVIConfig` (rank K ≥ 1; draws per
    step are rounded up to whole groups: 2 for ``paired``, 2K for ``unscented``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rank < 1:
            raise ValueError("sN-VI needs rank ≥ 1 (rank 0 is MF-VI: method 'mfvi')")


def init(config: SnviConfig, arch: ArchSpec, num_train: int, seed: int) -> VariationalState:
    """μ from the seeded architecture init, σ = init_std, U small and random."""
    model, mean = initial_mean(arch, seed)
    g = seeded_generator(seed + 1)
    family = LowRankMixture(
        mean, config.init_std, rank=config.rank, factor_std=config.init_factor_std, generator=g
    )
    total = config.epochs * -(-num_train // config.batch_size)
    return make_state(model, family, num_train, config.lr, total, factor_groups(family, config))


def step(
    state: VariationalState,
    batch: tuple[torch.Tensor, torch.Tensor],
    generator: torch.Generator,
    config: SnviConfig,
) -> tuple[VariationalState, dict[str, float]]:
    """One Adam step on the negative per-example ELBO."""
    prior = Prior(config.prior, config.prior_std, config.prior_df)
    return mixture_step(
        state, batch, generator, prior=prior, num_samples=config.num_samples, mode=config.sampling
    )


def fit(config: SnviConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    return run_fit("snvi", config, arch, data, seed, init, step, lambda _: {"family": "diagonal + low-rank Gaussian", "rank": config.rank, "components": 1})
