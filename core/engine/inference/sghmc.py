"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin 2014, "Stochastic
Gradient Hamiltonian Monte Carlo", eq. 15; eq. 18 of Hernández et al., D-SGHMC).

With the mini-batch gradient ĝ(θ) = ∇log p(θ) + (N/|B|) Σ_{i∈B} ∇log p(yᵢ|xᵢ,θ), the learning
rate η, friction α, gradient-noise estimate β̂ and mass M, every chain moves by

    v ← (1 − α) v + (η/M) G ĝ(θ) + N(0, 2 (α − β̂) (η/M) G),
    θ ← θ + v,

where v = εM⁻¹r is the scaled momentum (Chen et al. §3.2: η = ε²M⁻¹, α = εM⁻¹C,
β̂ = εM⁻¹B̂, so a mass M rescales the learning rate) and G is I, the RMSprop
preconditioner of :mod:`core.engine.inference.sgld`, or (``metric="curvature"``) the inverse of
the posterior precision at the mode, fixed before the first step: a mass matrix shaped as the
posterior (:mod:`~core.engine.inference.curvature`; ``metric="kron"``: Kronecker-factored per
layer, for networks). The momentum starts at 0 and may be resampled,
v ~ N(0, (η/M) G), every ``resample_every`` steps (Chen et al. resample it periodically).

Edward's ``SGHMC``, run by the D-SGHMC authors, is the case β̂ = 0, α = friction/2,
η = step_size · 0.01: v ← (1 − ½ friction) v + η ĝ + N(0, η · friction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from core.engine.inference import sampling
from core.engine.inference.base import Dataset, FitGenerator
from core.engine.inference.chains import ChainGenerators, Params
from core.engine.inference.curvature import DenseMetric, fixed_metric
from core.engine.inference.sampling import ChainConfig, RmsPreconditioner, Target
from core.engine.inference.sgld import MetricName, SgInit
from core.engine.models import ArchSpec


@dataclass(frozen=True)
class SghmcConfig(ChainConfig):
    """Hyperparameters of SGHMC (plus the chain settings of :class:`ChainConfig`).

    Attributes
    ----------
    step_size
        η, the learning rate (ε² M⁻¹ in Chen et al.'s notation).
    friction
        α ∈ (0, 1], the fraction of momentum lost per step.
    noise_estimate
        β̂ ∈ [0, α), the estimated gradient noise subtracted from the injected noise.
    mass
        M; the effective learning rate is η / M.
    precondition, rms_decay, rms_epsilon
        The optional RMSprop preconditioner G = 1 / (λ + √V).
    rms_adapt_steps
        Steps during which G adapts, then fixed (exact); −1: adapt throughout (approximate).
    resample_every
        Redraw the momentum every this many steps (0: never).
    metric
        ``"curvature"``: G = M⁻¹ from the posterior's curvature at its mode, fixed before the
        first step (instead of RMSprop's); ``"kron"``: the same, M Kronecker-factored per layer;
        ``"identity"``: none.
    """

    step_size: float = 1e-6
    friction: float = 0.05
    noise_estimate: float = 0.0
    mass: float = 1.0
    precondition: bool = False
    rms_decay: float = 0.99
    rms_epsilon: float = 1e-5
    rms_adapt_steps: int = -1
    resample_every: int = 0
    metric: MetricName = "identity"
    init: SgInit = "default"

    def __post_init__(self) -> None:
        super().__post_init__()
        sampling.check_metric(self.metric, self.precondition)
        if self.step_size <= 0 or self.mass <= 0:
            raise ValueError("step_size and mass must be positive")
        if not 0 < self.friction <= 1:
            raise ValueError(f"friction must lie in (0, 1], got {self.friction}")
        if not 0 <= self.noise_estimate < self.friction:
            raise ValueError("noise_estimate must lie in [0, friction)")
        if self.resample_every < 0:
            raise ValueError("resample_every must be >= 0")
        if not 0 <= self.rms_decay < 1 or self.rms_epsilon <= 0:
            raise ValueError("rms_decay must lie in [0, 1) and rms_epsilon be positive")


@dataclass
class SghmcState:
    """Chain-stacked parameters θ, scaled momenta v (with the curvature metric kept whitened,
    w = Lᵀv where M = LLᵀ), step counter and preconditioner."""

    params: Params
    momentum: Params
    t: int = 0
    preconditioner: RmsPreconditioner | None = None
    metric: DenseMetric | None = None


def init(params: Params, *, config: SghmcConfig, generator: torch.Generator | ChainGenerators,
         metric: DenseMetric | None = None) -> SghmcState:
    pre = RmsPreconditioner(config.rms_decay, config.rms_epsilon) if config.precondition else None
    return SghmcState(
        {k: v.clone() for k, v in params.items()},
        {k: torch.zeros_like(v) for k, v in params.items()},
        0,
        pre,
        metric,
    )


def step(
    state: SghmcState,
    batch: object,
    generator: torch.Generator | ChainGenerators,
    *,
    config: SghmcConfig,
    target: Target,
) -> tuple[SghmcState, dict[str, torch.Tensor]]:
    """One SGHMC update of every chain."""
    eta = config.step_size / config.mass
    alpha, beta = config.friction, config.noise_estimate
    logp, grad = target.log_prob_and_grad(state.params, batch)
    precond = (
        state.preconditioner.update(grad, adapt=sampling.preconditioner_adapting(config.rms_adapt_steps, state.t))
        if state.preconditioner is not None
        else None
    )
    momentum = state.momentum
    metric = state.metric
    if config.resample_every and state.t % config.resample_every == 0 and state.t > 0:
        fresh = sampling.normal_like(momentum, generator)  # v ~ N(0, ηG); with the metric w = Lᵀv ~ N(0, ηI)
        momentum = {
            k: (eta * (precond[k] if precond is not None else 1.0)) ** 0.5 * fresh[k]
            for k in momentum
        }
    noise = sampling.normal_like(state.params, generator)
    # With the metric G = M⁻¹ = L⁻ᵀL⁻¹ the momentum is kept whitened, w = Lᵀv: w ← (1 − α)w + η L⁻¹ĝ
    # + N(0, 2(α − β̂)η I) and θ ← θ + L⁻ᵀw, which is v's update (drift M⁻¹ĝ, noise N(0, 2(α − β̂)η M⁻¹))
    # in two triangular products
    drift = metric.whiten(grad) if metric is not None else grad
    new_v = {}
    for k in state.params:
        g = precond[k] if precond is not None else 1.0
        new_v[k] = (
            (1.0 - alpha) * momentum[k]
            + eta * g * drift[k]
            + (2.0 * (alpha - beta) * eta * g) ** 0.5 * noise[k]
        )
    move = metric.spread(new_v) if metric is not None else new_v
    new_theta = {k: theta + move[k] for k, theta in state.params.items()}
    info = {
        "log_posterior": logp,
        "param_norm": sampling.chain_norm(new_theta),
        "grad_norm": sampling.chain_norm(grad),
        "step_size": torch.tensor(eta),
    }
    return replace(state, params=new_theta, momentum=new_v, t=state.t + 1), info


def fit(
    config: SghmcConfig, arch: ArchSpec, data: Dataset, seed: int, chains: Sequence[int] | None = None
) -> FitGenerator:
    """Run the chains (all, or the subset ``chains``; see :func:`~core.engine.inference.sampling.fit_sgmcmc`)."""
    metric = yield from fixed_metric(config, arch, data, seed)
    posterior = yield from sampling.fit_sgmcmc("sghmc", init, step, config, arch, data, seed, chains=chains,
                                               metric=metric)
    return posterior
