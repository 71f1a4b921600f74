"""Stochastic gradient Langevin dynamics (Welling & Teh 2011, "Bayesian Learning via
Stochastic Gradient Langevin Dynamics", eq. 4).

With a mini-batch B of the N training points, ĝ(θ) = ∇log p(θ) + (N/|B|) Σ_{i∈B} ∇log p(yᵢ|xᵢ,θ)
and a step size ηₜ, every chain moves by

    θₜ₊₁ = θₜ + ½ ηₜ G ĝ(θₜ) + N(0, ηₜ T G),

where T is the temperature (T = 1 samples the posterior, T < 1 the "cold" p(θ|D)^{1/T}) and
G the preconditioner: I; RMSprop's G = diag(1 / (λ + √V)), V ← ρV + (1−ρ) ĝ ⊙ ĝ (Li et al.
2016, pSGLD, without its Γ(θ) term); or ``metric="curvature"``: G = M⁻¹, the inverse of the
posterior precision at the mode, computed once before the first step, for models whose P × P
matrix fits (Ahn, Korattikara & Welling 2012 precondition by the Fisher information in the same
spirit; :mod:`~core.engine.inference.curvature`); or ``metric="kron"``: the same with M
Kronecker-factored per layer (K-FAC at a MAP, plus the prior), for networks whose P × P matrix
will not fit. A constant G leaves the target unchanged.
The step size is constant or decays polynomially,

    ηₜ = η₀ · (b / (b + t))^γ,   γ ∈ (0.5, 1],

which is Welling & Teh's a(b + t)^(−γ) with a = η₀ b^γ; b = 1, γ = 0.55, η₀ = 1e-4 is the
schedule of Edward's ``SGLD`` used by the D-SGHMC authors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch

from core.engine.inference import sampling
from core.engine.inference.base import Dataset, FitGenerator
from core.engine.inference.chains import ChainGenerators, Params
from core.engine.inference.curvature import DenseMetric, fixed_metric
from core.engine.inference.sampling import ChainConfig, RmsPreconditioner, Target
from core.engine.models import ArchSpec

Schedule = Literal["constant", "polynomial"]
"""``"constant"``: ηₜ = η₀; ``"polynomial"``: ηₜ = η₀ (b / (b + t))^γ."""
MetricName = Literal["identity", "curvature", "kron"]
"""The fixed preconditioner: ``"identity"`` (none), ``"curvature"`` (M⁻¹ at the mode, dense) or
``"kron"`` (M⁻¹ with M Kronecker-factored per layer, for networks;
:class:`~core.engine.inference.curvature.KronMetric`)."""
SgInit = Literal["default", "prior", "overdispersed"]
"""``sampling.InitName`` and ``overdispersed``: θ* + 2 M^(-1/2) z around the mode (curvature
metric only), as HMC's chains start."""


@dataclass(frozen=True)
class SgldConfig(ChainConfig):
    """Hyperparameters of SGLD (plus the chain settings of :class:`ChainConfig`).

    Attributes
    ----------
    step_size
        η₀, the first (or only) step size.
    schedule
        ``"constant"`` or ``"polynomial"`` decay (see :data:`Schedule`).
    decay_offset, decay_power
        b and γ of the polynomial schedule.
    temperature
        T; the injected noise has variance ηₜ T G.
    precondition
        Use the RMSprop preconditioner G.
    rms_decay, rms_epsilon
        ρ and λ of the preconditioner.
    rms_adapt_steps
        Steps during which G adapts; afterwards it stays fixed, which makes the chain exact
        (a constant G needs no Γ term). −1: adapt throughout, as published (approximate).
    metric
        ``"curvature"``: G = M⁻¹ from the posterior's curvature at its mode, fixed before the
        first step (instead of RMSprop's); ``"kron"``: the same, M Kronecker-factored per layer;
        ``"identity"``: none.
    """

    step_size: float = 1e-5
    schedule: Schedule = "constant"
    decay_offset: float = 1.0
    decay_power: float = 0.55
    temperature: float = 1.0
    precondition: bool = False
    rms_decay: float = 0.99
    rms_epsilon: float = 1e-5
    rms_adapt_steps: int = -1
    metric: MetricName = "identity"
    init: SgInit = "default"

    def __post_init__(self) -> None:
        super().__post_init__()
        sampling.check_metric(self.metric, self.precondition)
        if self.step_size <= 0 or self.temperature < 0 or self.decay_offset <= 0:
            raise ValueError("step_size and decay_offset must be positive, temperature >= 0")
        if self.schedule not in ("constant", "polynomial"):
            raise ValueError(f"schedule must be 'constant' or 'polynomial', got {self.schedule!r}")
        if not 0 <= self.rms_decay < 1 or self.rms_epsilon <= 0:
            raise ValueError("rms_decay must lie in [0, 1) and rms_epsilon be positive")


@dataclass
class SgldState:
    """Chain-stacked parameters, the step counter t, the preconditioner's running V or the fixed
    dense metric."""

    params: Params
    t: int = 0
    preconditioner: RmsPreconditioner | None = None
    metric: DenseMetric | None = None


def init(params: Params, *, config: SgldConfig, generator: torch.Generator | ChainGenerators,
         metric: DenseMetric | None = None) -> SgldState:
    pre = RmsPreconditioner(config.rms_decay, config.rms_epsilon) if config.precondition else None
    return SgldState({k: v.clone() for k, v in params.items()}, 0, pre, metric)


def step_size_at(config: SgldConfig, t: int) -> float:
    """ηₜ of the configured schedule."""
    if config.schedule == "constant":
        return config.step_size
    b = config.decay_offset
    return config.step_size * (b / (b + t)) ** config.decay_power


def step(
    state: SgldState,
    batch: object,
    generator: torch.Generator | ChainGenerators,
    *,
    config: SgldConfig,
    target: Target,
) -> tuple[SgldState, dict[str, torch.Tensor]]:
    """One SGLD update of every chain."""
    eta = step_size_at(config, state.t)
    logp, grad = target.log_prob_and_grad(state.params, batch)
    noise = sampling.normal_like(state.params, generator)
    precond = (
        state.preconditioner.update(grad, adapt=sampling.preconditioner_adapting(config.rms_adapt_steps, state.t))
        if state.preconditioner is not None
        else None
    )
    if state.metric is not None:  # G = M⁻¹ = L⁻ᵀL⁻¹: θ + L⁻ᵀ(½η L⁻¹ĝ + √(ηT) z), drift M⁻¹ĝ, noise N(0, ηT M⁻¹)
        white = state.metric.whiten(grad)
        move = state.metric.spread({k: 0.5 * eta * white[k] + (eta * config.temperature) ** 0.5 * noise[k]
                                    for k in white})
        new = {k: theta + move[k] for k, theta in state.params.items()}
    else:
        new = {}
        for k, theta in state.params.items():
            g = precond[k] if precond is not None else 1.0
            scale = (eta * config.temperature * g) ** 0.5
            new[k] = theta + 0.5 * eta * g * grad[k] + scale * noise[k]
    info = {
        "log_posterior": logp,
        "param_norm": sampling.chain_norm(new),
        "grad_norm": sampling.chain_norm(grad),
        "step_size": torch.tensor(eta),
    }
    return replace(state, params=new, t=state.t + 1), info


def fit(
    config: SgldConfig, arch: ArchSpec, data: Dataset, seed: int, chains: Sequence[int] | None = None
) -> FitGenerator:
    """Run the chains (all, or the subset ``chains``; see :func:`~core.engine.inference.sampling.fit_sgmcmc`)."""
    metric = yield from fixed_metric(config, arch, data, seed)
    posterior = yield from sampling.fit_sgmcmc("sgld", init, step, config, arch, data, seed, chains=chains,
                                               metric=metric)
    return posterior
