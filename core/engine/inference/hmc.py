"""Hamiltonian Monte Carlo, full batch (Neal 2011; eqs. 4–14 of Hernández et al., D-SGHMC),
with Stan-style warm-up (Hoffman & Gelman 2014, Algorithm 5; Stan reference manual §15.2).

With potential U(θ) = −log p(θ | D) and momentum r ~ N(0, M), the Hamiltonian is
H(θ, r) = U(θ) + ½ rᵀ M⁻¹ r. L leapfrog steps of size ε,

    r ← r − (ε/2) ∇U(θ),   θ ← θ + ε M⁻¹ r,   r ← r − (ε/2) ∇U(θ),

propose (θ*, r*), accepted with probability min(1, exp(H(θ, r) − H(θ*, r*))) (Metropolis).
A proposal whose energy error exceeds ``max_energy_error`` (or is not finite) is a
*divergence* and is rejected. During warm-up the step size is tuned per chain by dual
averaging towards ``target_accept``:

    H̄ₜ = (1 − 1/(t + t₀)) H̄ₜ₋₁ + (δ − aₜ)/(t + t₀),   log εₜ = μ − √t/γ · H̄ₜ,
    log ε̄ₜ = t^(−κ) log εₜ + (1 − t^(−κ)) log ε̄ₜ₋₁,

with μ = log(10 ε₀), γ = 0.05, t₀ = 10, κ = 0.75; sampling uses ε̄. Every transition
(warm-up and sampling) draws its step size per chain as ε·u, u ~ U(1 − j, 1 + j) with
j = ``step_size_jitter`` (Neal 2011, §5.4): with ε and L fixed, a chain whose trajectory
length εL is close to a period of the target's dynamics keeps returning near where it
started and explores a fraction of the variance while accepting almost every proposal;
the jitter breaks that resonance (a leapfrog step of size ε·u is still reversible and
volume-preserving, so the Metropolis test stays exact). j = 0.5 by default: on a Gaussian
with a 64:1 spread of variances, every one of 8 adapted chains then stays within 0.8-1.2×
the true variance along every principal direction, against 0.3-2.7× without jitter and
0.7-1.3× with j = 0.2 (``tests/core/test_reliability_hmc.py``). The diagonal of M⁻¹ is
set to the regularised variance (n/(n+5)) σ̂² + 10⁻³ · 5/(n+5) of the draws in each of
Stan's doubling windows (75-step initial buffer, 25-step first window, 50-step final
buffer, shrunk to 15%/75%/10% for short warm-ups), and dual averaging restarts after each.

A diagonal M cannot follow a posterior whose weights are correlated: softmax regression on
MNIST, whose neighbouring pixels move together and whose class weights are identified only
up to a shared shift (held by the prior alone), has posterior standard deviations spread over
more than two orders of magnitude along directions no diagonal lines up with, and diagonal
HMC did not converge on it in 700 iterations (docs/zoo.md). ``metric="curvature"`` sets M to
the posterior precision at the mode instead, a dense matrix (Girolami & Calderhead 2011 use
it as a fixed metric; Stan's ``dense_e`` estimates it from warm-up draws):

    M = H(θ*) + I/σ²,   θ* = argmax log p(θ | D) (L-BFGS, full batch),

H the generalised Gauss-Newton matrix of the negative log-likelihood, which for the
softmax's cross-entropy is its exact Hessian. Momenta are r = L z (M = L Lᵀ, z ~ N(0, I)),
the kinetic energy ½ rᵀ M⁻¹ r; only ε is tuned in warm-up. Where the posterior is nearly
Gaussian every direction then has about unit scale, and trajectories of a few steps cross
it. The metric changes only the proposals, so the Metropolis test keeps the target exact.
``init="overdispersed"`` starts chain c at θ* + 2 M^(-1/2) z_c: twice the posterior's
spread around its mode, so that chains which agree at the end have come from different
places (what split-R̂ needs to mean convergence).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import torch

from core.engine.inference import sampling
from core.engine.inference.base import Dataset, FitGenerator, ProgressRecord, SampledPosterior
from core.engine.inference.chains import ChainGenerators, Params, chain_rand, resolve_chains
from core.engine.inference.curvature import (
    DenseMetric,
    mode_and_curvature,
)
from core.engine.inference.lowrank_metric import LowRankMetric, mode_and_lowrank_curvature
from core.engine.inference.sample_store import BudgetPolicy, bytes_per_draw, plan_storage, warn_plan
from core.engine.inference.sampling import ChainResult, Target, per_chain
from core.engine.inference.slots import ChainSlots
from core.engine.models import ArchSpec, build_model

MetricName = Literal["diagonal", "curvature", "curvature-lowrank"]
#: The metrics taken from the curvature at the mode (and so the ones ``init="overdispersed"`` can use).
CURVATURE_METRICS = ("curvature", "curvature-lowrank")
#: ``sampling.InitName`` and ``overdispersed`` (around the mode, curvature metric only).
HmcInit = Literal["default", "prior", "overdispersed"]


@dataclass(frozen=True)
class HmcConfig:
    """Hyperparameters of HMC.

    Attributes
    ----------
    num_chains
        Independent chains, run together.
    num_warmup, num_samples
        Warm-up (adaptation, discarded) and sampling iterations.
    thin
        Iterations between stored draws.
    num_leapfrog
        L, leapfrog steps per proposal (with ``trajectory_length``, the most a proposal takes).
    trajectory_length
        T > 0: each chain takes L_c = ⌈T/ε_c⌉ steps (at most ``num_leapfrog``), ε_c its own step
        size before the jitter, so that a proposal travels about T in the metric's units whatever
        step warm-up adapts to: with the curvature metric T is in posterior standard deviations
        (a whitened Gaussian's half period is π). A fixed L instead travels ε·L, which on a head of
        5,130 weights (ε ≈ 0.1) is too short and on one of 650 (ε ≈ 0.25) comes near a whole
        period, where a chain keeps returning near its start. L_c depends on chain c's own ε
        only, so a chain computes the same bits alone as beside others. 0 (default): every
        proposal takes ``num_leapfrog`` steps.

        Why about π/2: on a whitened Gaussian a trajectory of time τ moves each coordinate
        x → x cos τ + r sin τ (r the fresh momentum), so the lag-1 autocorrelation of x is
        E[cos τ] but that of x², what a draw's spread and tails depend on (the folded R̂ and the
        tail ESS), is E[cos² τ], over the jitter's τ = T·u. T = 2.5 with j = 0.5 gives x an
        antithetic −0.6 (bulk ESS above the draw count) and x² +0.53 (its ESS about a third of
        the draws, and the folded R̂ the larger one); T = π/2 gives 0 and 0.18 (0.07 with
        j = 0.3) in fewer steps. A rejected proposal repeats the draw and adds its share
        (1 − acceptance) to both. ``tests/core/test_hmc_trajectory.py`` checks both against the
        leapfrog map's closed form.
    step_size
        ε₀, the starting step size (and the fixed one when ``adapt_step_size`` is off).
    step_size_jitter
        j: each transition uses ε·u with u ~ U(1 − j, 1 + j), per chain (0 turns it off).
    target_accept
        δ, the acceptance rate dual averaging aims at.
    adapt_step_size, adapt_mass
        Tune ε by dual averaging; tune the diagonal mass matrix in windows (``diagonal``
        metric only).
    metric
        ``diagonal``: M diagonal, tuned in warm-up; ``curvature``: M the posterior precision
        at the mode, dense (see the module's docstring; for models of up to about 20,000
        weights: M takes 16·P² bytes); ``curvature-lowrank``: the same M as a scaled identity
        plus its main directions (:mod:`~core.engine.inference.lowrank_metric`: a product costs
        a tenth or less of the dense one's where most of M's spectrum is one level).
    max_energy_error
        An energy error above this marks a divergent, rejected proposal.
    prior_std, memory_budget_mb, on_budget
        As in :class:`~core.engine.inference.sampling.ChainConfig`.
    init
        As there, or ``overdispersed``: θ* + 2 M^(-1/2) z (``curvature`` metric only).
    """

    num_chains: int = 4
    num_warmup: int = 500
    num_samples: int = 500
    thin: int = 1
    num_leapfrog: int = 20
    step_size: float = 1e-3
    step_size_jitter: float = 0.5
    trajectory_length: float = 0.0
    target_accept: float = 0.8
    adapt_step_size: bool = True
    adapt_mass: bool = True
    metric: MetricName = "diagonal"
    max_energy_error: float = 1000.0
    prior_std: float = 1.0
    init: HmcInit = "default"
    memory_budget_mb: float = 1024.0
    on_budget: BudgetPolicy = "refuse"

    def __post_init__(self) -> None:
        if self.num_chains < 1 or self.num_samples < 1 or self.num_warmup < 0:
            raise ValueError("num_chains and num_samples must be positive, num_warmup >= 0")
        if self.thin < 1 or self.num_leapfrog < 1 or self.step_size <= 0:
            raise ValueError("thin, num_leapfrog and step_size must be positive")
        if not 0 < self.target_accept < 1:
            raise ValueError("target_accept must lie in (0, 1)")
        if not self.trajectory_length >= 0:
            raise ValueError("trajectory_length must be 0 (off) or positive")
        if not 0 <= self.step_size_jitter < 1:
            raise ValueError("step_size_jitter must lie in [0, 1)")
        if self.prior_std <= 0 or self.max_energy_error <= 0:
            raise ValueError("prior_std and max_energy_error must be positive")
        if self.metric not in ("diagonal", *CURVATURE_METRICS):
            raise ValueError(f"metric must be diagonal, curvature or curvature-lowrank, got {self.metric!r}")
        if self.init == "overdispersed" and self.metric not in CURVATURE_METRICS:
            raise ValueError("init=overdispersed spreads chains around the mode by the curvature; "
                             "it needs metric=curvature or curvature-lowrank")


class DiagonalMetric:
    """M = diag(1/m) per chain, ``inv_mass`` m a tree shaped as the chain-stacked θ."""

    def __init__(self, inv_mass: Params) -> None:
        self.inv_mass = inv_mass

    def momentum(self, z: Params) -> Params:
        return {k: z[k] / self.inv_mass[k].sqrt() for k in z}

    def velocity(self, momentum: Params) -> Params:
        return {k: self.inv_mass[k] * r for k, r in momentum.items()}

    def kinetic(self, momentum: Params) -> torch.Tensor:
        return 0.5 * sum((r.pow(2) * self.inv_mass[k]).flatten(1).sum(1) for k, r in momentum.items())

    def momentum_and_velocity(self, z: Params) -> tuple[Params, Params]:
        """(r, M⁻¹r) of the momentum r drawn from z ~ N(0, I)."""
        return self.momentum(z), {k: z[k] * self.inv_mass[k].sqrt() for k in z}


Metric = DiagonalMetric | DenseMetric | LowRankMetric


@dataclass
class HmcState:
    """Current θ with its log posterior and gradient, per-chain ε, and the metric M; with
    ``grad_velocity`` M⁻¹∇log p(θ), kept from the trajectory that reached θ (None: not yet known,
    or M has changed since)."""

    params: Params
    log_posterior: torch.Tensor
    grad: Params
    step_size: torch.Tensor
    metric: Metric
    grad_velocity: Params | None = None


def init(
    params: Params, *, config: HmcConfig, target: Target, batch: Any = None, metric: Metric | None = None
) -> HmcState:
    params = {k: v.clone().float() for k, v in params.items()}
    logp, grad = target.log_prob_and_grad(params, batch)
    chains = logp.shape[0]
    return HmcState(
        params,
        logp,
        grad,
        torch.full((chains,), float(config.step_size)),
        metric or DiagonalMetric({k: torch.ones_like(v) for k, v in params.items()}),
    )


def leapfrog(
    params: Params,
    momentum: Params,
    grad: Params,
    step_size: torch.Tensor,
    metric: Metric,
    num_steps: int | torch.Tensor,
    target: Target,
    batch: Any,
) -> tuple[Params, Params, torch.Tensor, Params]:
    """L leapfrog steps of every chain; returns (θ*, r*, log p(θ*), ∇log p(θ*)).

    ``num_steps``: one L for all chains, or L_c per chain (C,): chain c then stops after its
    L_c-th step (its θ, r, log p and gradient kept as they were there) while the others go on;
    its numbers are the same bits as a run of L_c steps."""
    theta, r, _, logp, g, _ = trajectory(params, momentum, metric.velocity(momentum), grad, metric.velocity(grad),
                                         step_size, metric, num_steps, target, batch)
    return theta, r, logp, g


def trajectory(
    params: Params,
    momentum: Params,
    velocity: Params,
    grad: Params,
    grad_velocity: Params,
    step_size: torch.Tensor,
    metric: Metric,
    num_steps: int | torch.Tensor,
    target: Target,
    batch: Any,
) -> tuple[Params, Params, Params, torch.Tensor, Params, Params]:
    """:func:`leapfrog` carrying the velocity v = M⁻¹r along: returns (θ*, r*, v*, log p(θ*),
    ∇log p(θ*), M⁻¹∇log p(θ*)) from ``velocity`` = M⁻¹r and ``grad_velocity`` = M⁻¹∇log p(θ).

    M⁻¹ is linear, so each kick r ← r + (ε/2)g moves v by (ε/2)M⁻¹g: a step reads the metric once,
    for M⁻¹ of its new gradient, which serves both of that gradient's kicks (this step's second half
    and the next step's first), and the kinetic energy ½ rᵀv needs no product of its own. With the
    dense metric (105 MB at 5,130 weights) a transition of L steps reads it L + 1½ times (the
    momentum Lz and its velocity L⁻ᵀz, a triangular half), not L + 3 (momentum, two kinetic
    energies and the L velocities)."""
    per_chain_steps = num_steps if isinstance(num_steps, torch.Tensor) else None
    most = int(num_steps.max()) if per_chain_steps is not None else num_steps
    theta, r, v, g, u = dict(params), dict(momentum), dict(velocity), grad, grad_velocity
    logp = torch.zeros(step_size.shape)
    for i in range(most):
        before = (dict(theta), dict(r), dict(v), logp, g, u)
        for k in theta:
            half = 0.5 * per_chain(step_size, theta[k])
            r[k] = r[k] + half * g[k]  # ∇log p = −∇U
            v[k] = v[k] + half * u[k]
            theta[k] = theta[k] + per_chain(step_size, theta[k]) * v[k]
        logp, g = target.log_prob_and_grad(theta, batch)
        u = metric.velocity(g)
        for k in theta:
            half = 0.5 * per_chain(step_size, theta[k])
            r[k] = r[k] + half * g[k]
            v[k] = v[k] + half * u[k]
        if per_chain_steps is not None and bool((per_chain_steps <= i).any()):  # some chains are done
            moving = per_chain_steps > i
            old_theta, old_r, old_v, old_logp, old_g, old_u = before
            theta = {k: torch.where(per_chain(moving, x), x, old_theta[k]) for k, x in theta.items()}
            r = {k: torch.where(per_chain(moving, x), x, old_r[k]) for k, x in r.items()}
            v = {k: torch.where(per_chain(moving, x), x, old_v[k]) for k, x in v.items()}
            g = {k: torch.where(per_chain(moving, x), x, old_g[k]) for k, x in g.items()}
            u = {k: torch.where(per_chain(moving, x), x, old_u[k]) for k, x in u.items()}
            logp = torch.where(moving, logp, old_logp)
    return theta, r, v, logp, g, u


def _kinetic(momentum: Params, velocity: Params) -> torch.Tensor:
    """½ rᵀM⁻¹r of each chain from r and its velocity v = M⁻¹r."""
    return 0.5 * sum((momentum[k] * velocity[k]).flatten(1).sum(1) for k in momentum)


def step(
    state: HmcState,
    batch: Any,
    generator: torch.Generator | ChainGenerators,
    *,
    config: HmcConfig,
    target: Target,
) -> tuple[HmcState, dict[str, torch.Tensor]]:
    """One HMC transition (momentum draw, jittered leapfrog, Metropolis test) of every chain."""
    momentum, velocity = state.metric.momentum_and_velocity(sampling.normal_like(state.params, generator))
    h0 = -state.log_posterior + _kinetic(momentum, velocity)
    grad_velocity = state.grad_velocity if state.grad_velocity is not None else state.metric.velocity(state.grad)
    step_size = state.step_size
    num_steps: int | torch.Tensor = config.num_leapfrog
    if config.trajectory_length > 0:  # from ε before its jitter: the jitter varies the length too
        num_steps = torch.ceil(config.trajectory_length / step_size).clamp(1, config.num_leapfrog).to(torch.int64)
    if config.step_size_jitter > 0:
        u = chain_rand(step_size.shape, generator, step_size.dtype, step_size.device)
        step_size = step_size * (1.0 + config.step_size_jitter * (2.0 * u - 1.0))
    theta, r, v, logp, grad, grad_velocity_end = trajectory(
        state.params, momentum, velocity, state.grad, grad_velocity, step_size, state.metric,
        num_steps, target, batch,
    )
    h1 = -logp + _kinetic(r, v)
    error = h1 - h0
    finite = torch.isfinite(error)
    divergent = ~finite | (error > config.max_energy_error)
    accept_prob = torch.where(finite, torch.exp(torch.clamp(-error, max=0.0)), 0.0)
    accept_prob = torch.where(divergent, 0.0, accept_prob)
    u = chain_rand(accept_prob.shape, generator, accept_prob.dtype, accept_prob.device)
    accept = u < accept_prob
    new_params = {
        k: torch.where(per_chain(accept, v), theta[k], v) for k, v in state.params.items()
    }
    new_grad = {k: torch.where(per_chain(accept, v), grad[k], v) for k, v in state.grad.items()}
    new_grad_velocity = {k: torch.where(per_chain(accept, x), grad_velocity_end[k], x) for k, x in grad_velocity.items()}
    new_logp = torch.where(accept, logp, state.log_posterior)
    info = {
        "log_posterior": new_logp,
        "acceptance": accept_prob,
        "step_size": state.step_size.clone(),
        "divergent": divergent.float(),
        "param_norm": sampling.chain_norm(new_params),
    }
    return replace(state, params=new_params, log_posterior=new_logp, grad=new_grad,
                   grad_velocity=new_grad_velocity), info


# --------------------------------------------------------------------------- adaptation


@dataclass
class DualAveraging:
    """Per-chain dual-averaging state (Hoffman & Gelman 2014, Algorithm 5)."""

    mu: torch.Tensor
    target_accept: float
    h_bar: torch.Tensor
    log_eps_bar: torch.Tensor
    t: int = 0
    gamma: float = 0.05
    t0: float = 10.0
    kappa: float = 0.75

    @classmethod
    def start(cls, step_size: torch.Tensor, target_accept: float) -> DualAveraging:
        zeros = torch.zeros_like(step_size)
        return cls(torch.log(10.0 * step_size), target_accept, zeros, zeros.clone())

    def update(self, accept_prob: torch.Tensor) -> torch.Tensor:
        """Record one acceptance probability per chain; return the next ε to try."""
        self.t += 1
        t = self.t
        w = 1.0 / (t + self.t0)
        self.h_bar = (1 - w) * self.h_bar + w * (self.target_accept - accept_prob)
        log_eps = self.mu - math.sqrt(t) / self.gamma * self.h_bar
        eta = t ** (-self.kappa)
        self.log_eps_bar = eta * log_eps + (1 - eta) * self.log_eps_bar
        return log_eps.exp()

    def final(self) -> torch.Tensor:
        return self.log_eps_bar.exp()


def adaptation_windows(num_warmup: int) -> list[int]:
    """Warm-up iterations (1-based counts) at whose end Stan updates the mass matrix."""
    init_buffer, term_buffer, base = 75, 50, 25
    if num_warmup < 20:
        return []
    if init_buffer + term_buffer + base > num_warmup:
        init_buffer = int(0.15 * num_warmup)
        term_buffer = int(0.1 * num_warmup)
        base = num_warmup - init_buffer - term_buffer
    ends = []
    start, size = init_buffer, base
    last = num_warmup - term_buffer
    while start < last:
        end = start + size
        if end + 2 * size > last:  # the next window would not fit: stretch this one
            end = last
        ends.append(end)
        start, size = end, 2 * size
    return ends


def warmup(
    state: HmcState,
    *,
    config: HmcConfig,
    target: Target,
    batch: Any,
    generator: torch.Generator | ChainGenerators,
    total: int,
) -> Generator[ProgressRecord, None, tuple[HmcState, dict[str, torch.Tensor]]]:
    """Adapt ε (dual averaging) and a diagonal M⁻¹ (windows); return the state and traces."""
    da = DualAveraging.start(state.step_size, config.target_accept)
    diagonal = isinstance(state.metric, DiagonalMetric)
    ends = adaptation_windows(config.num_warmup) if config.adapt_mass and diagonal else []
    window: list[Params] = []
    starts = _window_starts(config.num_warmup, ends) if ends else []
    window_start = starts[0] if starts else config.num_warmup
    traces: dict[str, list[torch.Tensor]] = {}
    for t in range(config.num_warmup):
        state, info = step(state, batch, generator, config=config, target=target)
        for k, v in info.items():
            traces.setdefault(k, []).append(v)
        if config.adapt_step_size:
            state.step_size = da.update(info["acceptance"])
        if ends and t >= window_start:
            window.append({k: v.clone() for k, v in state.params.items()})
        if ends and t + 1 == ends[0]:
            state.metric = DiagonalMetric(_regularised_variance(window))
            state.grad_velocity = None  # M⁻¹∇log p was the old M's
            window = []
            ends, starts = ends[1:], starts[1:]
            window_start = starts[0] if starts else config.num_warmup
            if config.adapt_step_size:
                da = DualAveraging.start(state.step_size, config.target_accept)
        if (t + 1) % 20 == 0 or t + 1 == config.num_warmup:
            yield ProgressRecord(
                t + 1, total, {k: float(v.float().mean()) for k, v in info.items()}, "warmup"
            )
    if config.adapt_step_size and config.num_warmup > 0:
        state.step_size = da.final()
    stacked = {k: torch.stack(v, dim=-1) for k, v in traces.items()}
    return state, stacked


def _window_starts(num_warmup: int, ends: list[int]) -> list[int]:
    init_buffer = 75 if num_warmup >= 150 else int(0.15 * num_warmup)
    return [init_buffer, *ends[:-1]]


def _regularised_variance(window: list[Params]) -> Params:
    n = len(window)
    out = {}
    for k in window[0]:
        draws = torch.stack([w[k] for w in window])
        var = draws.var(dim=0, unbiased=True) if n > 1 else torch.ones_like(draws[0])
        out[k] = (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))
    return out


def run(
    params: Params,
    *,
    config: HmcConfig,
    target: Target,
    batch: Any,
    generator: torch.Generator | ChainGenerators,
    draw_bytes: int | None = None,
    metric: Metric | None = None,
) -> Generator[ProgressRecord, None, ChainResult]:
    """Warm up, then sample: the whole HMC run on any target, chain-stacked ``params``.

    ``draw_bytes`` is the size of one draw that the memory budget is planned for (default:
    one draw of ``params``); a fit that runs a subset of its chains passes the whole run's,
    so that the subset thins as the whole run would. ``metric`` fixes M (default: a diagonal
    one, tuned in warm-up when ``config.adapt_mass``).
    """
    total = config.num_warmup + config.num_samples
    state = init(params, config=config, target=target, batch=batch, metric=metric)
    plan = plan_storage(
        config.num_samples, 0, config.thin,
        bytes_per_draw(params) if draw_bytes is None else draw_bytes,
        config.memory_budget_mb, config.on_budget,
    )
    warn_plan(plan)
    state, warm_traces = yield from warmup(
        state, config=config, target=target, batch=batch, generator=generator, total=total
    )
    result = yield from sampling.sample_chains(
        step, state, config=config, target=target, batches=sampling.constant_batches(batch),
        num_steps=config.num_samples, plan=plan, generator=generator,
        report_every=20, step_offset=config.num_warmup, total=total,
    )
    result.traces = {
        k: torch.cat([warm_traces[k], v], dim=-1) if k in warm_traces else v
        for k, v in result.traces.items()
    }
    return result


def summary(result: ChainResult, num_warmup: int) -> dict[str, Any]:
    """Acceptance rate, divergences and step sizes of the sampling phase, plus R̂ and ESS."""
    acc = result.traces["acceptance"][:, num_warmup:]
    div = result.traces["divergent"][:, num_warmup:]
    return {
        "acceptance_rate": float(acc.mean()),
        "divergences": int(div.sum()),
        "step_size": result.state.step_size.tolist(),
        **sampling.diagnostics(
            {k: result.traces[k] for k in ("log_posterior", "param_norm")}, num_warmup
        ),
    }


def fit(
    config: HmcConfig, arch: ArchSpec, data: Dataset, seed: int, chains: Sequence[int] | None = None
) -> FitGenerator:
    """Full-batch HMC on a classifier: every chain (or the subset ``chains``) from its own stream.

    Chain c draws its starting weights, momenta, jitter and acceptance uniforms from
    :func:`~core.engine.inference.chains.chain_seed` (seed, c); warm-up adapts each chain
    on its own, so a subset holds exactly those chains of the full run.
    """
    chain_ids = resolve_chains(chains, config.num_chains)
    generator = ChainGenerators(seed, chain_ids, data.x.device)
    slots = ChainSlots.of(chain_ids, config.num_chains)  # one product over the run's chains: chain c in slot c
    start_init = "default" if config.init == "overdispersed" else config.init
    params = sampling.initial_params(arch, start_init, config.prior_std, generator)
    target = sampling.ModelTarget(build_model(arch).to(data.x.device), len(data), config.prior_std, shared_batch=True,
                                  slots=slots)
    chains = len(chain_ids)
    batch = (data.x, data.y)
    metric, extra = None, {}
    if config.metric in CURVATURE_METRICS:
        build = mode_and_curvature if config.metric == "curvature" else mode_and_lowrank_curvature
        mode, mode_logp, metric = yield from build(arch, data, config.prior_std, config.num_warmup + config.num_samples)
        extra = {"metric": config.metric, "mode_log_posterior": mode_logp}
        if isinstance(metric, LowRankMetric):
            extra["metric_rank"] = metric.rank
            extra["metric_bulk"] = metric.bulk
        metric = metric.in_slots(slots)
        if config.init == "overdispersed":
            spread = metric.spread(sampling.normal_like(params, generator))
            params = {k: mode[k] + 2.0 * spread[k] for k in params}
    result = yield from run(
        params, config=config, target=target, batch=batch, generator=generator,
        draw_bytes=bytes_per_draw(params) // chains * config.num_chains, metric=metric,
    )
    info = {
        **extra,
        "num_chains": chains,
        "chain_ids": list(chain_ids),
        "num_draws": int(next(iter(result.samples.values())).shape[1]),
        **summary(result, config.num_warmup),
        "traces": sampling.downsampled_traces(result.traces),
    }
    return SampledPosterior("hmc", arch, asdict(config), seed, data.name, result.samples, info)
