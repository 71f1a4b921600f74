"""Variational dropout with learned rates (Kingma, Salimans & Welling 2015).

Each weight of a Linear / Conv2d layer has q(w_ij) = N(θ_ij, α_ij θ_ij²) — Gaussian
dropout with rate α = p/(1 − p) — with α learned per weight (their "variational (B)",
independent weight noise) or shared per input unit (α_i for every weight leaving unit or
channel i). Biases are point estimates. Linear layers train with the local reparameterisation
trick,

    b_j = Σ_i a_i θ_ij + √(Σ_i a_i² α_ij θ_ij²) · ξ_j,   ξ_j ~ N(0, 1) per example,

which is exactly one example's outputs under a weight draw; a convolution draws one whole kernel
per example, as prediction does (per-position noise would train another model than the one
predicted: :class:`~core.engine.inference.local_reparam.LocalReparameterisation`). It uses
the log-uniform prior p(|w|) ∝ 1/|w|, whose KL has no closed form; the paper's fit
(their eq. 7 fit, valid for α ≤ 1, so α is projected onto (0, 1] after every step) is

    −KL[q(w_ij) ‖ p(w_ij)] ≈ const + ½ log α + c₁ α + c₂ α² + c₃ α³,
    c₁ = 1.16145124, c₂ = −1.50204118, c₃ = 0.58629921.

The constant is chosen so that KL = 0 at α = 1 (the bound is increasing in α on (0, 1],
so the reported KL is ≥ 0).

The limit α ≤ 1 stays, and it decides the spread of many weights: this KL falls as α grows
for every weight, so any weight the data do not need (a pixel blank in every image, the
shift all classes share) goes to the limit (77 % of the paper tier's, recorded as
``info["alpha_at_limit"]`` and said in the column's tooltip). Without the limit nothing would
stop them: under the log-uniform prior the objective keeps rewarding more noise and has no
optimum (Hron et al. 2018, "Variational Bayesian dropout: pitfalls and fixes"), so the
spread would be set by how long training ran rather than by a clip. Molchanov et al.'s
unbounded KL fit (2017) has the same flaw. The limit is the method as Kingma et al. defined
it; a proper prior (the other methods' N(0, 1)) is what removes it, which is mean-field VI.

The objective per example is
(1/B) Σ_b log p(y_b | x_b) − Σ KL / N. The fitted posterior is the diagonal Gaussian
σ_ij = √α_ij |θ_ij|, predicted by drawing weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call

from core.engine.inference.base import Dataset, FitGenerator
from core.engine.inference.elbo import (
    VariationalState,
    apply_gradients,
    info_from,
    initial_mean,
    make_state,
)
from core.engine.inference.local_reparam import LocalReparameterisation
from core.engine.inference.param_layout import ParamLayout
from core.engine.inference.variational import run_fit
from core.engine.models import ArchSpec

AlphaSharing = Literal["per_weight", "per_unit"]
"""``per_weight``: one α per weight; ``per_unit``: one α per input unit (or input channel)."""

C1, C2, C3 = 1.16145124, -1.50204118, 0.58629921


def kl_log_uniform(log_alpha: torch.Tensor) -> torch.Tensor:
    """Kingma et al.'s approximation of KL[N(θ, αθ²) ‖ log-uniform], zero at α = 1 (elementwise)."""
    alpha = log_alpha.exp()
    neg_kl = 0.5 * log_alpha + C1 * alpha + C2 * alpha**2 + C3 * alpha**3
    return (C1 + C2 + C3) - neg_kl


@dataclass(frozen=True)
class VdropoutConfig:
    """Hyperparameters of variational dropout.

    Attributes
    ----------
    alpha
        ``per_weight`` or ``per_unit`` sharing of the learned noise α.
    init_alpha
        Initial α (α = p/(1−p): 0.25 ↔ drop rate 0.2, 1 ↔ 0.5).
    alpha_lr
        Adam learning rate of log α (the means use ``lr``).
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate.
    predict_samples
        Default number of posterior draws at prediction.
    """

    alpha: AlphaSharing = "per_weight"
    init_alpha: float = 0.05
    alpha_lr: float = 1e-2
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    predict_samples: int = 100

    def __post_init__(self) -> None:
        if self.alpha not in ("per_weight", "per_unit"):
            raise ValueError("alpha must be 'per_weight' or 'per_unit'")
        if not 0 < self.init_alpha <= 1:
            raise ValueError("init_alpha must lie in (0, 1]")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or self.alpha_lr <= 0:
            raise ValueError("epochs, batch_size, lr and alpha_lr must be positive")


class DropoutRates(nn.Module):
    """Means θ (flat, P) and log α for the weights of every Linear / Conv2d layer."""

    def __init__(
        self,
        layout: ParamLayout,
        mean: torch.Tensor,
        layers: dict[str, nn.Module],
        sharing: AlphaSharing,
        init_alpha: float,
    ) -> None:
        super().__init__()
        self.layout = layout
        self.mean = nn.Parameter(mean.clone())
        self.noisy: dict[str, str] = {}
        self.log_alpha = nn.ParameterDict()
        for prefix in layers:
            name = f"{prefix}.weight" if prefix else "weight"
            shape = layout.shapes[name]
            if sharing == "per_unit":  # one α per input unit / channel, broadcast over the rest
                shape = torch.Size([1, shape[1], *([1] * (len(shape) - 2))])
            key = name.replace(".", "__")
            self.noisy[name] = key
            self.log_alpha[key] = nn.Parameter(torch.full(shape, math.log(init_alpha)))

    def alphas(self) -> dict[str, torch.Tensor]:
        return {n: self.log_alpha[k].exp() for n, k in self.noisy.items()}

    def variances(self) -> dict[str, torch.Tensor]:
        """α θ² for every noisy weight (biases are deterministic)."""
        means = self.layout.unflatten(self.mean)
        return {n: a * means[n].pow(2) for n, a in self.alphas().items()}

    def kl(self) -> torch.Tensor:
        total = self.mean.new_zeros(())
        for n, k in self.noisy.items():
            la = self.log_alpha[k].expand(self.layout.shapes[n])
            total = total + kl_log_uniform(la).sum()
        return total

    def project(self) -> None:
        """α ∈ (0, 1], where the KL fit holds."""
        with torch.no_grad():
            for p in self.log_alpha.values():
                p.clamp_(min=-20.0, max=0.0)

    def state(self) -> dict[str, torch.Tensor]:
        std = torch.zeros_like(self.mean)
        with torch.no_grad():
            views = self.layout.unflatten(std)
            for n, var in self.variances().items():
                views[n].copy_(var.sqrt())
        p = self.mean.shape[0]
        return {
            "mean": self.mean.detach().clone().unsqueeze(0),
            "diag_std": std.unsqueeze(0),
            "factors": torch.zeros(1, p, 0),
            "log_weights": torch.zeros(1),
        }


def init(config: VdropoutConfig, arch: ArchSpec, num_train: int, seed: int) -> VariationalState:
    """θ from the seeded architecture init, α = init_alpha everywhere, hooks installed."""
    model, mean = initial_mean(arch, seed)
    local = LocalReparameterisation(model)
    rates = DropoutRates(ParamLayout.of(model), mean, local.layers, config.alpha, config.init_alpha)
    total = config.epochs * -(-num_train // config.batch_size)
    groups = [
        {"params": [rates.mean], "lr": config.lr},
        {"params": list(rates.log_alpha.values()), "lr": config.alpha_lr},
    ]
    state = make_state(model, rates, num_train, config.lr, total, groups)
    state.local = local
    return state


def step(
    state: VariationalState,
    batch: tuple[torch.Tensor, torch.Tensor],
    generator: torch.Generator,
    config: VdropoutConfig,
) -> tuple[VariationalState, dict[str, float]]:
    """One Adam step on −ELBO/N, each example's layer outputs drawn as under its own weight draw."""
    x, y = batch
    rates: DropoutRates = state.variational  # type: ignore[assignment]
    assert state.local is not None
    state.local.variances = rates.variances()
    state.local.generator = generator
    try:
        logits = functional_call(state.model, state.layout.unflatten(rates.mean), (x,))
    finally:
        state.local.variances = None
    ell = torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).mean()
    kl = rates.kl() / state.num_train
    norm = apply_gradients(state, -(ell - kl))
    rates.project()
    info = info_from(ell, kl, logits.unsqueeze(0), y, norm)
    with torch.no_grad():
        la = torch.cat([p.reshape(-1) for p in rates.log_alpha.values()])
        info["mean_alpha"] = float(la.exp().mean())
    return state, info


#: α within this of its upper limit 1 counts as held there by the limit (the audit's 0.95).
AT_LIMIT = 0.95


def share_at_limit(mean: torch.Tensor, std: torch.Tensor) -> float:
    """The share of the noisy weights (σ > 0; biases are not) whose α = (σ/θ)² is at the limit."""
    noisy = std > 0
    alpha = (std[noisy] / mean[noisy].abs().clamp_min(torch.finfo(mean.dtype).tiny)).pow(2)
    return float((alpha >= AT_LIMIT).float().mean()) if alpha.numel() else 0.0


def fit(config: VdropoutConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    return run_fit("vdropout", config, arch, data, seed, init, step, lambda posterior: {
        "family": "variational dropout (log-uniform prior)", "rank": 0,
        "alpha_at_limit": round(share_at_limit(posterior.mean[0], posterior.diag_std[0]), 4)})
