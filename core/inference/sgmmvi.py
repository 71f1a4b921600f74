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

from core.inference.base import Dataset, FitGenerator
from core.inference.variational import (
    LowRankMixture,
    Prior,
    PriorName,
    SamplingMode,
    VariationalState,
    factor_groups,
    group_size,
    initial_mean,
    make_state,
    mixture_step,
    run_fit,
)
from core.models import ArchSpec


@dataclass(frozen=True)
class SgmmviConfig:
    """Hyperparameters of sGMM-VI.

    Attributes
    ----------
    components
        C, the number of mixture components.
    rank
        K, the low-rank directions of each component (0: mixture of mean-field Gaussians).
    prior, prior_std, prior_df
        ``gaussian`` N(0, prior_std²) or ``student_t`` prior_std · t_{prior_df}, per weight.
    init_std, init_factor_std
        Initial σ and standard deviation of U's random initial entries.
    factor_lr
        Adam learning rate of U (smaller than ``lr``: see :func:`factor_groups`).
    sampling, num_samples
        Coupling and number of draws *per component* per step.
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate.
    predict_samples
        Default number of posterior draws at prediction.
    """

    components: int = 3
    rank: int = 2
    prior: PriorName = "gaussian"
    prior_std: float = 1.0
    prior_df: float = 3.0
    init_std: float = 0.01
    init_factor_std: float = 1e-3
    factor_lr: float = 1e-4
    sampling: SamplingMode = "paired"
    num_samples: int = 2
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    predict_samples: int = 100

    def __post_init__(self) -> None:
        Prior(self.prior, self.prior_std, self.prior_df)
        if self.components < 1 or self.rank < 0:
            raise ValueError("components must be ≥ 1 and rank ≥ 0")
        group_size(self.sampling, self.rank)
        if self.init_std <= 0 or self.init_factor_std < 0 or self.num_samples < 1:
            raise ValueError("init_std and num_samples must be positive")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or self.factor_lr <= 0:
            raise ValueError("epochs, batch_size and lr must be positive")


def init(config: SgmmviConfig, arch: ArchSpec, num_train: int, seed: int) -> VariationalState:
    """Component c's mean is the architecture's init under seed + c."""
    model, mean0 = initial_mean(arch, seed)
    means = [mean0] + [initial_mean(arch, seed + c)[1] for c in range(1, config.components)]
    g = torch.Generator().manual_seed(seed + 7919)
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
    generator = torch.Generator().manual_seed(seed)
    state = init(config, arch, len(data), seed)

    def one(s, batch, g):
        return step(s, batch, g, config)

    posterior = yield from run_fit(
        "sgmmvi", config, arch, data, seed, state, one, generator, lambda s: s.variational.state()
    )
    posterior.info.update(
        {
            "family": "mixture of diagonal + low-rank Gaussians",
            "rank": config.rank,
            "components": config.components,
            "weights": [round(float(w), 4) for w in posterior.log_weights.exp()],
        }
    )
    return posterior
