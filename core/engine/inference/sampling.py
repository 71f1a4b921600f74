"""The samplers' shared run: targets, the loop of steps, their batches and trace diagnostics.

Parameters of C chains are a dict of tensors with a leading chain dimension (C, ...)
(:data:`~core.engine.inference.chains.Params`). A *target* returns the log posterior of every
chain, log p(θ_c | D) up to a constant, and its gradient; a sampler's
``step(state, batch, generator, *, config, target)`` moves all chains at once.
:func:`sample_chains` runs the steps with burn-in and thinning, keeps per-chain traces and fills
a :class:`~core.engine.inference.sample_store.SampleStore` (leading dims (chain, draw)) within
its memory budget; :func:`fit_sgmcmc` is the ``fit`` of a mini-batch sampler on a classifier.
:func:`diagnostics` summarises scalar traces with :mod:`core.engine.convergence`
(rank-normalised split-R̂ and bulk ESS, Vehtari et al. 2021), the same estimators as the probe
diagnostics. Each chain draws from its own random stream (:mod:`~core.engine.inference.chains`),
so chains run in parts and joined (:mod:`~core.engine.inference.chain_merge`) are the run's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from core.engine import convergence
from core.engine.inference import softmax_target
from core.engine.inference.base import Dataset, ProgressRecord, SampledPosterior
from core.engine.inference.chains import (
    ChainGenerators,
    Params,
    chain_randn,
    chains_in_words,
    resolve_chains,
    stack_chains,
)
from core.engine.inference.sample_store import (
    BudgetPolicy,
    SampleStore,
    StoragePlan,
    bytes_per_draw,
    plan_storage,
    warn_plan,
)
from core.engine.inference.slots import ChainSlots
from core.engine.models import ArchSpec, build_model


class SamplerDivergedError(FloatingPointError):
    """The log posterior of a chain became NaN or infinite, or fell by many orders of magnitude.

    ``chains`` (the run's chain numbers) and ``step`` (1-based) say where, for a window to word it.
    """

    def __init__(self, message: str, chains: Sequence[int] = (), step: int = 0) -> None:
        super().__init__(message)
        self.chains, self.step = tuple(chains), step


#: A chain whose log posterior falls more than this many times max(1, |its best so far|) below
#: that best has diverged, though its numbers are still finite: SGHMC on LeNet-5 went from
#: −1.5·10⁵ to −10¹⁴ (weights' norm 127 → 8·10⁶) and ran on to the end. A sampler that still
#: samples stays within a few times its best (a log density is defined up to a constant, so
#: the fall is measured from the best, with at least 1 as its scale: a Gaussian target's
#: best is near 0).
DIVERGED_FALL = 1e6


# ------------------------------------------------------------------------------ targets


class Target(Protocol):
    """A log density over chain-stacked parameters."""

    def log_prob_and_grad(self, params: Params, batch: Any) -> tuple[torch.Tensor, Params]:
        """Log posterior of each chain, shape (C,), and its gradient (same shapes as params)."""
        ...


class FunctionTarget:
    """A target from ``log_prob(params, batch) -> (C,)``; gradients by autograd.

    Chains are independent, so the gradient of the sum over chains is each chain's own.
    """

    def __init__(self, log_prob: Callable[[Params, Any], torch.Tensor]) -> None:
        self.log_prob = log_prob

    def log_prob_and_grad(self, params: Params, batch: Any) -> tuple[torch.Tensor, Params]:
        with torch.enable_grad():
            leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            value = self.log_prob(leaves, batch)
            grads = torch.autograd.grad(value.sum(), list(leaves.values()))
        return value.detach(), {k: g.detach() for k, g in zip(leaves, grads, strict=True)}


class ModelTarget(FunctionTarget):
    """Posterior of a classifier: (N/B) Σ_batch log p(y | x, θ) − ‖θ‖² / (2σ²).

    ``batch`` is ``(x, y)`` with a leading chain dim, ``x`` (C, B, ...) and ``y`` (C, B): each
    chain sees its own mini-batch (and, for D-SGHMC, its own input mask); with ``shared_batch``
    it is one ``(x, y)`` that every chain sees (full-batch HMC), never copied per chain.
    The model runs in eval mode (dropout off), under ``vmap(functional_call)`` over the chains,
    or chain by chain for a shared batch and for a convolutional network on a CPU (faster). A
    softmax regression (the paper tier's model, every feature tier's head) skips autograd: its
    log posterior and gradient are computed in closed form (:mod:`~core.engine.inference.softmax_target`;
    the face tier's SGHMC step went from about 26 to 16 ms of CPU, 2 cores at load 10), on a
    shared batch as one product over the chain ``slots`` of the run (None: the chains given are
    all of the run's; :mod:`~core.engine.inference.slots`).
    """

    def __init__(self, model: nn.Module, num_data: int, prior_std: float, shared_batch: bool = False,
                 slots: ChainSlots | None = None) -> None:
        self.model = model.eval()
        #: where the chains given sit among the run's chains (None: they are all of them), for the
        #: closed form's one product over the chains on a shared batch
        self.slots = slots
        self.num_data = num_data
        self.prior_std = prior_std
        self.shared_batch = shared_batch
        self.convolutional = any(isinstance(m, nn.Conv2d) for m in model.modules())
        #: True or False fixes how per-chain batches are computed (benchmarks/bench_scale.py compares
        #: the two); None: chain by chain for a convolutional network on a CPU, else under vmap
        self.chain_by_chain: bool | None = None
        #: a softmax regression's log posterior and gradient in closed form
        #: (:mod:`~core.engine.inference.softmax_target`), else by autograd; False forces autograd
        self.closed_form = softmax_target.has_closed_form(self.model)
        super().__init__(self._log_prob)

    def log_prob_and_grad(self, params: Params, batch: Any) -> tuple[torch.Tensor, Params]:
        if self.closed_form:
            return softmax_target.log_prob_and_grad(self.model, params, batch, self.num_data, self.prior_std,
                                                    self.shared_batch, self.slots)
        return super().log_prob_and_grad(params, batch)

    def _log_prob(self, params: Params, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        model = self.model
        shared = self.shared_batch  # one (x, y) for every chain (full-batch HMC), else (C, B, ...)
        by_chain = self.chain_by_chain
        if by_chain is None:
            by_chain = self.convolutional and x.device.type == "cpu"
        if shared or by_chain:
            # chain by chain, not one product over the stacked weights. With one input for all:
            # on the full MNIST set 0.28 s per gradient of 4 chains against 0.85-1.07 s for vmap
            # over a copied input (2 cores; one product over all chains took 0.12 s), and a chain
            # does the same arithmetic alone as beside others, bit for bit, as the cluster's split
            # runs need. With convolutions on a CPU, where vmap makes the chains' convolutions one
            # grouped convolution: 4 LeNet-5 chains on mini-batches of 100 took 23 ms a gradient
            # against 31 ms under vmap (2 cores; benchmarks/bench_scale.py, part d). Without them vmap's
            # batched products are as fast or faster (MLP 3.2 against 4.7 ms) and, unlike a
            # multithreaded product per chain, add in the same order whatever the thread count
            lik = torch.stack([
                -nn.functional.cross_entropy(
                    functional_call(model, {k: v[c] for k, v in params.items()}, (x if shared else x[c],)),
                    y if shared else y[c], reduction="sum")
                for c in range(next(iter(params.values())).shape[0])
            ])
            return self.num_data / y.shape[-1] * lik + gaussian_log_prior(params, self.prior_std)

        def log_lik(p: Params, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            logits = functional_call(model, p, (xb,))
            return -nn.functional.cross_entropy(logits, yb, reduction="sum")

        return self.num_data / y.shape[1] * vmap(log_lik)(params, x, y) + gaussian_log_prior(params, self.prior_std)


def gaussian_log_prior(params: Params, prior_std: float) -> torch.Tensor:
    """log N(θ_c; 0, σ²I) per chain, up to a constant: shape (C,)."""
    sq = sum(p.flatten(1).pow(2).sum(1) for p in params.values())
    return -0.5 * sq / prior_std**2


# ------------------------------------------------------------------------ tensor helpers


def normal_like(params: Params, generator: torch.Generator | ChainGenerators) -> Params:
    """Independent standard normal draws shaped like ``params`` (the samplers' only noise)."""
    return {k: chain_randn(v.shape, generator, v.dtype, v.device) for k, v in params.items()}


def per_chain(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape a (C,) tensor to broadcast against ``like`` (C, ...)."""
    return value.reshape(-1, *([1] * (like.ndim - 1)))


def chain_norm(tree: Params) -> torch.Tensor:
    """Euclidean norm of each chain's flattened parameters: shape (C,)."""
    return sum(v.flatten(1).pow(2).sum(1) for v in tree.values()).sqrt()



@dataclass
class RmsPreconditioner:
    """Diagonal RMSprop preconditioner G = 1 / (λ + √V), V ← ρV + (1 − ρ) g ⊙ g.

    Li, Chen, Carlson & Carin (2016), "Preconditioned SGLD"; the Γ(θ) correction term is
    dropped, as in their experiments. While G adapts the chain is therefore only
    approximately invariant (on a Gaussian with exact gradients the covariance comes out
    ~20% off); once :meth:`update` is called with ``adapt=False`` G stays fixed, and a
    constant preconditioner needs no correction.
    """

    decay: float
    epsilon: float
    square: Params = field(default_factory=dict)
    current: Params = field(default_factory=dict)

    def update(self, grad: Params, adapt: bool = True) -> Params:
        if self.current and not adapt:
            return self.current
        if not self.square:
            self.square = {k: g.pow(2) for k, g in grad.items()}
        else:
            for k, g in grad.items():
                self.square[k].mul_(self.decay).addcmul_(g, g, value=1.0 - self.decay)
        self.current = {k: 1.0 / (self.epsilon + v.sqrt()) for k, v in self.square.items()}
        return self.current


def check_metric(metric: str, precondition: bool) -> None:
    """Refuse a mini-batch sampler's metric other than identity, curvature or kron, or both kinds
    of preconditioner at once."""
    if metric not in ("identity", "curvature", "kron"):
        raise ValueError(f"metric must be 'identity', 'curvature' or 'kron', got {metric!r}")
    if metric != "identity" and precondition:
        raise ValueError(f"choose one preconditioner: precondition=true (RMSprop, adapted per weight) or "
                         f"metric={metric} (the posterior's curvature at its mode), not both")


def preconditioner_adapting(adapt_steps: int, t: int) -> bool:
    """Whether an RMSprop preconditioner still adapts at step t (``adapt_steps`` < 0: always)."""
    return adapt_steps < 0 or t < adapt_steps

# ---------------------------------------------------------------------------- the loop


@dataclass
class ChainResult:
    """What :func:`sample_chains` returns."""

    samples: Params
    traces: dict[str, torch.Tensor]
    """Per-chain traces (C, steps) of every per-chain info value, burn-in included."""
    state: Any
    plan: StoragePlan


def sample_chains(
    step: Callable[..., tuple[Any, dict[str, torch.Tensor]]],
    state: Any,
    *,
    config: Any,
    target: Target,
    batches: Iterator[Any],
    num_steps: int,
    plan: StoragePlan,
    generator: torch.Generator,
    phase: str = "sampling",
    report_every: int = 50,
    step_offset: int = 0,
    total: int | None = None,
) -> Generator[ProgressRecord, None, ChainResult]:
    """Run ``num_steps`` steps of all chains, keeping every ``plan.thin``-th after burn-in.

    ``step(state, batch, generator, config=..., target=...)`` returns the new state and an
    info dict of per-chain (C,) tensors (``log_posterior`` at least) and scalars; the state
    exposes ``params``. Progress records carry the chain means. Raises
    :class:`SamplerDivergedError` when a chain's log posterior is no longer finite, or has fallen
    from the best it reached by more than :data:`DIVERGED_FALL` times that best's size.
    """
    store = SampleStore(state.params, plan.num_draws)
    # Each trace is one tensor of all the steps, filled in place: a small tensor kept per step,
    # allocated between the step's large temporaries, fragmented the heap until a run grew by
    # about 180 kB a step (a 300,000-step run reached 24 GB).
    traces: dict[str, torch.Tensor] = {}
    total = total if total is not None else num_steps
    best: torch.Tensor | None = None  # each chain's highest log posterior so far
    for t in range(num_steps):
        state, info = step(state, next(batches), generator, config=config, target=target)
        logp = info["log_posterior"].detach().float()
        best = logp if best is None else torch.maximum(best, logp)
        infinite = ~torch.isfinite(logp)
        fell = logp < best - DIVERGED_FALL * best.abs().clamp(min=1.0)
        if bool((infinite | fell).any()):  # one synchronisation per step, as the finiteness check had
            # rows are the chains this fit runs; a subset's row 0 may be the run's chain 2
            ids = getattr(generator, "chain_ids", range(len(logp)))
            if bool(infinite.any()):
                bad = [ids[i] for i in torch.nonzero(infinite).flatten()]
                raise SamplerDivergedError(
                    f"the log posterior of {chains_in_words(bad)} became non-finite at step {t + 1}; "
                    "lower the step size", bad, t + 1)
            bad = [ids[i] for i in torch.nonzero(fell).flatten()]
            raise SamplerDivergedError(
                f"the log posterior of {chains_in_words(bad)} fell from {float(best[fell][0]):.3g} to "
                f"{float(logp[fell][0]):.3g} at step {t + 1}: the chain diverged; lower the step size", bad, t + 1)
        for k, v in info.items():
            v = torch.as_tensor(v, dtype=torch.float32).detach()
            if k not in traces:
                traces[k] = v.new_full((*v.shape, num_steps), float("nan"))  # NaN where a step gave none
            traces[k][..., t] = v
        kept = t - plan.burn_in + 1
        if kept > 0 and kept % plan.thin == 0 and store.filled < store.num_draws:
            store.append(state.params)
        if (t + 1) % report_every == 0 or t + 1 == num_steps:
            yield ProgressRecord(
                step_offset + t + 1,
                total,
                {k: float(torch.as_tensor(v).float().mean()) for k, v in info.items()},
                phase if t >= plan.burn_in else "burn-in",
            )
    return ChainResult(store.result(), traces, state, plan)


def epoch_batches(
    data: Dataset, num_chains: int, batch_size: int, generator: torch.Generator | ChainGenerators,
    ordered: bool = True,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless per-chain mini-batches: each chain its own random order, epoch after epoch.

    Yields ``(x, y)`` of shapes (C, B, ...) and (C, B); the last batch of an epoch may be
    smaller (the same size for all chains). With :class:`ChainGenerators` chain c's order
    comes from its own stream.

    The batches are gathered into the same two tensors (one pair per batch shape) every step,
    so a batch is valid until the next one is drawn: no 25 MB allocation a step for
    mini-batches of 2,000 and four chains. (A 30,000-step run of those grew by about 1 MB a
    step until the machine ran out of memory; most of that was the per-step trace tensors of
    :func:`sample_chains`, since removed. With those gone, fresh batches grew a run by 24 MB
    and no further, reused ones by none.)

    With ``ordered=False``, a batch that holds every example (``batch_size`` ≥ N: a feature tier's
    full-batch SGLD and SGHMC) is the data themselves in their stored order, one tensor every
    chain sees (expanded over the chains, not copied): the gradient is a sum over the examples,
    the same in any order up to rounding, and each step no longer copies C × N inputs (4 × 8,000
    features of 512: 65 MB a step). The orders are drawn all the same, so a chain's stream, and so
    its noise, stays what it was. A sampler that draws something per batch position (D-SGHMC's
    input masks) keeps ``ordered=True``: its masks would meet other examples.
    """
    n = len(data)
    buffers: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}
    whole = not ordered and batch_size >= n
    while True:
        if isinstance(generator, ChainGenerators):
            orders = generator.randperm(n)
        else:
            orders = torch.stack([torch.randperm(n, generator=generator) for _ in range(num_chains)])
        if whole:
            yield over_chains(data.x, num_chains), over_chains(data.y, num_chains)
            continue
        for idx in orders.split(batch_size, dim=1):
            shape = tuple(idx.shape)
            if shape not in buffers:
                buffers[shape] = (data.x.new_empty((*shape, *data.x.shape[1:])), data.y.new_empty(shape))
            x, y = buffers[shape]
            flat = idx.reshape(-1).to(data.x.device)
            torch.index_select(data.x, 0, flat, out=x.view(-1, *data.x.shape[1:]))
            torch.index_select(data.y, 0, flat.to(data.y.device), out=y.view(-1))
            yield x, y


def over_chains(t: torch.Tensor, num_chains: int) -> torch.Tensor:
    """``t`` seen by every chain: (C, ...) with stride 0 along the chains, not copied. Unlike
    ``expand``, which gives a dim of size 1 a nonzero stride, this keeps stride 0 for one chain
    too, so that a target knows the batch is one that every chain sees (a run of one chain of a
    full-batch run then computes as the whole run does: :mod:`~core.engine.inference.slots`)."""
    return t.as_strided((num_chains, *t.shape), (0, *t.stride()), t.storage_offset())


def constant_batches(batch: Any = None) -> Iterator[Any]:
    """The same batch forever (full-batch samplers and densities without data)."""
    while True:
        yield batch


# --------------------------------------------------------------------------- diagnostics


def diagnostics(traces: dict[str, torch.Tensor], burn_in: int) -> dict[str, float]:
    """R̂ and ESS of every per-chain trace after burn-in, keyed ``rhat_<name>``, ``ess_<name>``."""
    out: dict[str, float] = {}
    for name, trace in traces.items():
        if trace.ndim != 2 or trace.shape[0] < 1:
            continue
        kept = trace[:, burn_in:].cpu().numpy()  # traces of a GPU run live on the GPU
        if kept.shape[1] < 4 or np.ptp(kept) == 0:
            continue
        out[f"rhat_{name}"] = float(convergence.rhat(kept))
        out[f"ess_{name}"] = float(convergence.ess_bulk(kept))
    return out


def downsampled_traces(traces: dict[str, torch.Tensor], points: int = 500) -> dict[str, list]:
    """Per-chain traces thinned to at most ``points`` values, as plain lists (for ``info``)."""
    out = {}
    for name, trace in traces.items():
        if trace.ndim != 2:
            continue
        step = max(1, math.ceil(trace.shape[1] / points))
        out[name] = trace[:, ::step].tolist()
    return out




# ------------------------------------------------------------------- SG-MCMC on models

InitName = Literal["default", "prior"]
"""Starting values: ``"default"``: the architecture's own initialisation, drawn per chain;
``"prior"``: a draw θ ~ N(0, σ²I) from the prior (the D-SGHMC authors' choice)."""


@dataclass(frozen=True)
class ChainConfig:
    """Settings every mini-batch sampler shares.

    Attributes
    ----------
    num_chains
        Independent chains, run together (vectorised over a leading chain dim).
    epochs, batch_size
        Length of the run in passes over the data, and the mini-batch size B.
    burn_in_epochs
        Epochs discarded before the first stored draw.
    thin
        Steps between stored draws.
    prior_std
        σ of the isotropic Gaussian prior N(0, σ²I) on all weights and biases.
    init
        ``"default"`` or ``"prior"`` starting values (see :data:`InitName`).
    memory_budget_mb
        Most memory the stored draws may take.
    on_budget
        ``"refuse"`` (stop before sampling, with the numbers) or ``"thin"`` (thin more, warn).
    """

    num_chains: int = 4
    epochs: int = 20
    batch_size: int = 100
    burn_in_epochs: int = 5
    thin: int = 500
    prior_std: float = 1.0
    init: InitName = "default"
    memory_budget_mb: float = 1024.0
    on_budget: BudgetPolicy = "refuse"

    def __post_init__(self) -> None:
        if self.num_chains < 1 or self.epochs < 1 or self.batch_size < 1 or self.thin < 1:
            raise ValueError("num_chains, epochs, batch_size and thin must be positive")
        if not 0 <= self.burn_in_epochs < self.epochs:
            raise ValueError("burn_in_epochs must lie in [0, epochs)")
        if self.prior_std <= 0 or self.memory_budget_mb <= 0:
            raise ValueError("prior_std and memory_budget_mb must be positive")
        metric = getattr(self, "metric", "identity")
        if self.init == "overdispersed" and metric == "kron":
            raise ValueError("init=overdispersed spreads chains twice the posterior's width around the mode, and "
                             "metric=kron's layer-by-layer curvature overstates that width along some directions "
                             "(on LeNet-5 such starts wrecked the network and SGLD diverged within 6 steps); use "
                             "init=default with metric=kron, or metric=curvature")
        if self.init == "overdispersed" and metric != "curvature":
            raise ValueError("init=overdispersed spreads chains around the mode by the curvature; it needs "
                             "metric=curvature")
        if self.init not in ("default", "prior", "overdispersed"):
            raise ValueError(f"init must be 'default', 'prior' or 'overdispersed', got {self.init!r}")
        if self.on_budget not in ("refuse", "thin"):
            raise ValueError(f"on_budget must be 'refuse' or 'thin', got {self.on_budget!r}")


def initial_params(arch: ArchSpec, init: InitName, prior_std: float, generators: ChainGenerators) -> Params:
    """Chain-stacked starting values for ``arch``, one chain per stream of ``generators``.

    Each chain's model initialises itself from its own stream (:meth:`ChainGenerators.models`);
    ``"prior"`` then draws θ_c ~ N(0, σ²I) from it. The models are built on the CPU and moved
    to the generators' device.
    """
    params = {k: v.to(generators.device) for k, v in stack_chains(generators.models(arch)).items()}
    if init == "prior":
        params = {k: prior_std * v for k, v in normal_like(params, generators).items()}
    return params


def fit_sgmcmc(
    method: str,
    init: Callable[..., Any],
    step: Callable[..., tuple[Any, dict[str, torch.Tensor]]],
    config: ChainConfig,
    arch: ArchSpec,
    data: Dataset,
    seed: int,
    make_posterior: Callable[[Params, dict[str, Any]], Any] | None = None,
    chains: Sequence[int] | None = None,
    metric: Any = None,
    ordered_batches: bool = False,
) -> Generator[ProgressRecord, None, Any]:
    """The ``fit`` of a mini-batch sampler on a classifier: chains, burn-in, thinning, store.

    ``chains`` runs a subset of the ``config.num_chains`` chains (None: all): the result holds
    exactly those chains of the full run (:mod:`~core.engine.inference.chains`), ready for
    :func:`~core.engine.inference.chain_merge.merge_chains`. Its storage plan is the full run's: the
    memory budget is for all ``config.num_chains`` chains, so a subset thins as the whole run
    would. ``metric``, a fixed
    :class:`~core.engine.inference.curvature.DenseMetric` (the sampler's ``config.metric``), goes
    to ``init`` and is recorded in ``info["preconditioner"]``. ``ordered_batches``: a step that
    draws something per batch position (D-SGHMC's masks) gets its batches in their drawn order
    even when one holds every example (:func:`epoch_batches`).

    Returns a :class:`~core.engine.inference.base.SampledPosterior` (or ``make_posterior(samples,
    info)``) whose ``info`` holds the chain numbers, R̂ and ESS of the log posterior and of ‖θ‖
    over the chains it holds, the storage plan and per-chain traces downsampled to 500 points.
    """
    chain_ids = resolve_chains(chains, config.num_chains)
    generators = ChainGenerators(seed, chain_ids, data.x.device)
    slots = ChainSlots.of(chain_ids, config.num_chains)  # one product over the run's chains: chain c in slot c
    metric = metric.in_slots(slots) if metric is not None else None
    overdispersed = config.init == "overdispersed"
    params = initial_params(arch, "default" if overdispersed else config.init, config.prior_std, generators)
    if overdispersed:  # θ* + 2 M^(-1/2) z: twice the posterior's spread around its mode, as HMC's chains
        spread = metric.spread(normal_like(params, generators))
        params = {k: metric.mode[k] + 2.0 * spread[k] for k in params}
    target = ModelTarget(build_model(arch).to(data.x.device), len(data), config.prior_std, slots=slots)
    steps_per_epoch = math.ceil(len(data) / config.batch_size)
    num_steps = config.epochs * steps_per_epoch
    plan = plan_storage(
        num_steps,
        config.burn_in_epochs * steps_per_epoch,
        config.thin,
        bytes_per_draw(params) // len(chain_ids) * config.num_chains,
        config.memory_budget_mb,
        config.on_budget,
    )
    warn_plan(plan)
    state = init(params, config=config, generator=generators, **({"metric": metric} if metric is not None else {}))
    batches = epoch_batches(data, len(chain_ids), config.batch_size, generators, ordered=ordered_batches)
    result = yield from sample_chains(
        step, state, config=config, target=target, batches=batches, num_steps=num_steps,
        plan=plan, generator=generators,
    )
    info: dict[str, Any] = {
        "num_chains": len(chain_ids),
        "chain_ids": list(chain_ids),
        "num_draws": int(next(iter(result.samples.values())).shape[1]),
        "thin": plan.thin,
        "burn_in_steps": plan.burn_in,
        "num_steps": num_steps,
        **diagnostics(result.traces, plan.burn_in),
        "traces": downsampled_traces(result.traces),
    }
    if plan.message:
        info["sample_store"] = plan.message
    if getattr(config, "precondition", False):
        adapt = int(getattr(config, "rms_adapt_steps", -1))
        info["preconditioner"] = {"kind": "rmsprop", "adapt_steps": adapt,
                                  "fixed_before_draws": 0 <= adapt <= plan.burn_in}
    if metric is not None:
        info["preconditioner"] = {**metric.about, "fixed_before_draws": True}
    if make_posterior is not None:
        return make_posterior(result.samples, info)
    return SampledPosterior(method, arch, asdict(config), seed, data.name, result.samples, info)
