"""The ELBO and the training loop every variational method shares (Le Folgoc et al.).

The ELBO uses log q(θ) at the drawn samples (not a closed-form entropy), as in the paper:
ELBO ≈ Σ_s [log p(D | θ_s) + log p(θ_s) − log q(θ_s)] / S. For a mixture it is stratified over
components, ELBO = Σ_c w_c E_{q_c}[log p(D, θ) − log q(θ)], so the weights get exact gradients
and each component is reparameterised (:func:`elbo_terms`). The settings the Gaussian families
share (:class:`GaussianVIConfig`, :class:`LowRankVIConfig`), the state a fit carries from step to
step (:class:`VariationalState`), one Adam step (:func:`apply_gradients`), the loop over
mini-batches (:func:`train_loop`) and one full-θ ELBO step (:func:`mixture_step`) live here; the
families are in :mod:`core.engine.inference.gaussian_family`, the fitted posterior and
``run_fit`` in :mod:`core.engine.inference.variational`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.inference.gaussian_family import (
    LowRankMixture,
    Prior,
    PriorName,
    SamplingMode,
    group_size,
)
from core.engine.inference.local_reparam import LocalReparameterisation
from core.engine.inference.optimisation import minibatches
from core.engine.inference.param_layout import ParamLayout, stacked_logits
from core.engine.models import ArchSpec, build_model

# ----------------------------------------------------------------------------- the ELBO


@dataclass
class ElboTerms:
    """Monte-Carlo ELBO terms (weighted over components), with gradients."""

    log_likelihood: torch.Tensor
    log_prior: torch.Tensor
    log_q: torch.Tensor
    draws: torch.Tensor
    weights: torch.Tensor

    @property
    def kl(self) -> torch.Tensor:
        return self.log_q - self.log_prior

    @property
    def elbo(self) -> torch.Tensor:
        return self.log_likelihood - self.kl


def elbo_terms(
    family: LowRankMixture,
    log_likelihood: Callable[[torch.Tensor], torch.Tensor],
    log_prior: Callable[[torch.Tensor], torch.Tensor],
    num_samples: int,
    mode: SamplingMode,
    generator: torch.Generator | None = None,
) -> ElboTerms:
    """Stratified ELBO: Σ_c w_c (1/S) Σ_s [log p(D|θ_cs) + log p(θ_cs) − log q(θ_cs)].

    ``log_likelihood`` and ``log_prior`` map draws (S, P) to (S,).
    """
    s = family.draws_per_component(num_samples, mode)
    draws = torch.cat(
        [family.component_draws(c, s, mode, generator) for c in range(family.num_components)], 0
    )
    weights = family.log_weights().exp().repeat_interleave(s) / s
    return ElboTerms(
        (weights * log_likelihood(draws)).sum(),
        (weights * log_prior(draws)).sum(),
        (weights * family.log_prob(draws)).sum(),
        draws,
        weights,
    )


def fit_density(
    family: LowRankMixture,
    log_target: Callable[[torch.Tensor], torch.Tensor],
    *,
    steps: int,
    lr: float,
    num_samples: int,
    mode: SamplingMode,
    generator: torch.Generator,
) -> list[float]:
    """Maximise E_q[log p̃(θ) − log q(θ)] for an unnormalised log-density; return the ELBO trace."""
    opt = torch.optim.Adam([p for p in family.parameters() if p.requires_grad], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    trace = []

    def flat(theta: torch.Tensor) -> torch.Tensor:
        return theta.new_zeros(theta.shape[0])

    for _ in range(steps):
        terms = elbo_terms(family, log_target, flat, num_samples, mode, generator)
        opt.zero_grad(set_to_none=True)
        (-terms.elbo).backward()
        opt.step()
        sched.step()
        trace.append(terms.elbo.item())
    return trace


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class GaussianVIConfig:
    """Settings every Gaussian variational family shares (MF-VI, sN-VI, sGMM-VI).

    Attributes
    ----------
    prior, prior_std, prior_df
        ``gaussian`` N(0, prior_std²) or ``student_t`` prior_std · t_{prior_df}, per weight.
    init_std
        Initial σ of every weight (μ starts at the architecture's initialisation).
    sampling, num_samples
        Coupling of the draws (``naive``, ``paired``, ``unscented``) and draws per step.
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate.
    predict_samples
        Default number of posterior draws at prediction.
    """

    prior: PriorName = "gaussian"
    prior_std: float = 1.0
    prior_df: float = 3.0
    init_std: float = 0.01
    sampling: SamplingMode = "paired"
    num_samples: int = 2
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    predict_samples: int = 100

    def __post_init__(self) -> None:
        Prior(self.prior, self.prior_std, self.prior_df)  # validates
        if self.init_std <= 0 or self.num_samples < 1 or self.predict_samples < 1:
            raise ValueError("init_std, num_samples and predict_samples must be positive")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs, batch_size and lr must be positive")


@dataclass(frozen=True)
class LowRankVIConfig(GaussianVIConfig):
    """:class:`GaussianVIConfig` plus the low-rank factors U of sN-VI and sGMM-VI.

    Attributes
    ----------
    rank
        K, the number of low-rank directions.
    init_factor_std
        Standard deviation of U's random initial entries.
    factor_lr
        Adam learning rate of U (smaller than ``lr``: see :func:`factor_groups`).
    """

    rank: int = 4
    init_factor_std: float = 1e-3
    factor_lr: float = 1e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rank < 0 or self.init_factor_std < 0 or self.factor_lr <= 0:
            raise ValueError("rank and init_factor_std must be ≥ 0 and factor_lr positive")
        group_size(self.sampling, self.rank)


# ----------------------------------------------------------------------------- training loop


@dataclass
class VariationalState:
    """What a variational fit carries from step to step.

    Attributes
    ----------
    model
        The architecture, evaluated functionally (its own parameters are never trained).
    layout
        Flat-vector layout of the model's parameters.
    variational
        Module holding the variational parameters (a :class:`~core.engine.inference.gaussian_family.LowRankMixture` or a method's own).
    optimiser, scheduler
        Adam with a cosine-annealed learning rate over the variational parameters.
    num_train
        N, the training-set size that scales the likelihood against the KL.
    step
        Steps taken so far.
    local
        Local-reparameterisation hooks on the model, when the method uses them.
    """

    model: nn.Module
    layout: ParamLayout
    variational: nn.Module
    optimiser: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    num_train: int
    step: int = 0
    local: LocalReparameterisation | None = None


def make_state(
    model: nn.Module,
    variational: nn.Module,
    num_train: int,
    lr: float,
    total_steps: int,
    param_groups: list[dict[str, Any]] | None = None,
) -> VariationalState:
    """Adam (cosine-annealed) over ``variational``'s parameters or the given groups."""
    groups = param_groups or [p for p in variational.parameters() if p.requires_grad]
    opt = torch.optim.Adam(groups, lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(total_steps, 1))
    return VariationalState(model, ParamLayout.of(model), variational, opt, sched, num_train)


def factor_groups(family: LowRankMixture, config: Any) -> list[dict[str, Any]]:
    """Adam groups: U at ``config.factor_lr``, everything else at ``config.lr``.

    Adam moves every coordinate by about its learning rate whatever the gradient's size, so
    with noisy ELBO gradients U would random-walk to a large norm (its entropy reward is
    tiny per coordinate); a smaller rate for U keeps that walk short.
    """
    rest = [p for n, p in family.named_parameters() if n != "factors" and p.requires_grad]
    return [
        {"params": rest, "lr": config.lr},
        {"params": [family.factors], "lr": config.factor_lr},
    ]


def batch_log_likelihood(
    state: VariationalState, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-draw mean log p(y | x, θ) over the batch (S,) and the logits (S, B, K)."""
    logits = stacked_logits(state.model, state.layout, theta, x)
    logp = torch.log_softmax(logits, -1).gather(-1, y.expand(logits.shape[0], -1).unsqueeze(-1))
    return logp.squeeze(-1).mean(-1), logits


def apply_gradients(state: VariationalState, loss: torch.Tensor) -> float:
    """One Adam step on ``loss``; returns the gradient norm."""
    state.optimiser.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for p in state.variational.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])) if params else 0.0
    state.optimiser.step()
    state.scheduler.step()
    state.step += 1
    if not math.isfinite(loss.item()):
        raise FloatingPointError(
            f"the negative ELBO became {loss.item()} at step {state.step}; lower the learning rate"
        )
    return float(norm)


def train_loop(
    state: VariationalState,
    data: Dataset,
    *,
    epochs: int,
    batch_size: int,
    step: Callable[
        [VariationalState, tuple[torch.Tensor, torch.Tensor], torch.Generator],
        tuple[VariationalState, dict[str, float]],
    ],
    generator: torch.Generator,
    report_every: int = 20,
) -> Generator[ProgressRecord, None, None]:
    """Run ``step`` over mini-batches, yielding the mean of its info over the steps since the
    previous report (every ``report_every`` steps and at each pass's end; the mean does not restart,
    and so does not drop, at a pass boundary).

    Each info holds ``elbo``, ``expected_log_likelihood`` and ``kl`` (all per training
    example: ELBO/N = E_q[log p(y|x,θ)]_batch-mean − KL/N) plus ``loss`` = −elbo.
    """
    steps_per_epoch = math.ceil(len(data) / batch_size)
    total = epochs * steps_per_epoch
    sums: dict[str, float] = {}
    steps_summed = 0
    for epoch in range(epochs):
        seen = 0
        for count, idx in enumerate(minibatches(len(data), batch_size, generator), start=1):
            state, info = step(state, (data.x[idx], data.y[idx]), generator)
            seen += len(idx)
            steps_summed += 1
            for k, v in info.items():
                sums[k] = sums.get(k, 0.0) + v
            if state.step % report_every == 0 or count == steps_per_epoch:
                values = {k: v / steps_summed for k, v in sums.items()}
                values["epoch"] = epoch + seen / len(data)
                values["lr"] = state.scheduler.get_last_lr()[0]
                yield ProgressRecord(state.step, total, values)
                sums, steps_summed = {}, 0


def info_from(
    ell: torch.Tensor,
    kl_per_example: torch.Tensor,
    logits: torch.Tensor,
    y: torch.Tensor,
    grad_norm: float,
) -> dict[str, float]:
    """Progress values of one step (floats, detached)."""
    ell_value, kl_value = ell.item(), kl_per_example.item()
    elbo = ell_value - kl_value
    probs = torch.softmax(logits.detach().reshape(-1, *logits.shape[-2:]), -1).mean(0)
    return {
        "elbo": elbo,
        "loss": -elbo,
        "expected_log_likelihood": ell_value,
        "kl": kl_value,
        "train_accuracy": float((probs.argmax(-1) == y).float().mean()),
        "grad_norm": grad_norm,
    }


def initial_mean(arch: ArchSpec, seed: int) -> tuple[nn.Module, torch.Tensor]:
    """The architecture's own initialisation (seeded) as the variational mean."""
    torch.manual_seed(seed)
    model = build_model(arch)
    for p in model.parameters():
        p.requires_grad_(False)
    return model, ParamLayout.of(model).flatten(dict(model.named_parameters())).detach().clone()


def mixture_step(
    state: VariationalState,
    batch: tuple[torch.Tensor, torch.Tensor],
    generator: torch.Generator,
    *,
    prior: Prior,
    num_samples: int,
    mode: SamplingMode,
) -> tuple[VariationalState, dict[str, float]]:
    """One stochastic ELBO step for a :class:`LowRankMixture` with draws of the full θ."""
    x, y = batch
    family: LowRankMixture = state.variational  # type: ignore[assignment]
    cache: dict[str, torch.Tensor] = {}

    def log_lik(theta: torch.Tensor) -> torch.Tensor:
        ll, cache["logits"] = batch_log_likelihood(state, theta, x, y)
        return ll

    terms = elbo_terms(family, log_lik, prior.log_prob, num_samples, mode, generator)
    kl = terms.kl / state.num_train
    norm = apply_gradients(state, -(terms.log_likelihood - kl))
    return state, info_from(terms.log_likelihood, kl, cache["logits"], y, norm)
