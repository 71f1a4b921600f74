"""SWAG: the Gaussian of stochastic weight averaging (Maddox, Izmailov, Garipov, Vetrov &
Wilson 2019, "A Simple Baseline for Bayesian Uncertainty in Deep Learning").

A network is first brought to the MAP of :mod:`core.engine.inference.map` (to the mode, by
Newton steps, on softmax regression; Adam for ``epochs`` on a network: ``optimiser``), then SGD with a constant learning rate keeps moving it around the optimum. Every
``1/snapshots_per_epoch`` of a pass the weights θ_i are taken (T snapshots in all) and summarised
as a Gaussian q(θ) = N(θ̄, ½ Σ_diag + ½ Σ_low-rank) with

    θ̄ = (1/T) Σᵢ θᵢ,                     Σ_diag = diag((1/T) Σᵢ θᵢ² − θ̄²),
    Σ_low-rank = D Dᵀ / (K − 1),          D = [θ_{T−K+1} − θ̄, …, θ_T − θ̄]   (P × K),

the deviations of the last K snapshots from the SWA mean (the paper's eq. for Σ_low-rank;
its Algorithm 1 subtracts running means instead, a shortcut that saves keeping the
snapshots, which are small here). Draws are θ = θ̄ + (1/√2) Σ_diag^{1/2} z₁ + D z₂ / √(2(K − 1))
with z₁ ~ N(0, I_P), z₂ ~ N(0, I_K). The result is a
:class:`~core.engine.inference.variational.VariationalPosterior` with one component
(diagonal scale √(Σ_diag/2), factors D/√(2(K − 1))), so it predicts, saves and loads as the
variational posteriors do.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from core.engine.device import seeded_generator
from core.engine.inference.base import Dataset, FitGenerator, ProgressRecord
from core.engine.inference.map import (
    GRAD_TOL,
    check_mode_settings,
    log_posterior_and_grad,
    train_to_mode,
)
from core.engine.inference.optimisation import minibatches, squared_norm
from core.engine.inference.param_layout import ParamLayout
from core.engine.inference.variational import VariationalPosterior
from core.engine.models import ArchSpec, build_model
from core.engine.models.dropout import dropout_generator


@dataclass(frozen=True)
class SwagConfig:
    """Hyperparameters of SWAG.

    Attributes
    ----------
    prior_std
        σ of the Gaussian prior behind the weight decay, in both phases.
    epochs, batch_size, lr, optimiser, grad_tol, max_iter
        The MAP phase (as :class:`~core.engine.inference.map.MapConfig`: ``auto`` runs Newton to
        the mode on softmax regression, Adam with a cosine-annealed rate for ``epochs`` on a network).
    swa_epochs, swa_lr, momentum
        The averaging phase: SGD with this constant learning rate and momentum.
    snapshots_per_epoch
        Snapshots taken per pass of the averaging phase (evenly spaced in steps).
    rank
        K, the number of last snapshots whose deviations make Σ_low-rank (≥ 2, at most the
        number of snapshots).
    predict_samples
        Weight draws per prediction.
    """

    prior_std: float = 1.0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    swa_epochs: int = 5
    swa_lr: float = 0.01
    momentum: float = 0.9
    snapshots_per_epoch: int = 4
    rank: int = 20
    predict_samples: int = 30
    optimiser: str = "auto"
    grad_tol: float = GRAD_TOL
    max_iter: int = 500

    def __post_init__(self) -> None:
        check_mode_settings(self.optimiser, self.grad_tol, self.max_iter)
        if self.prior_std <= 0 or self.lr <= 0 or self.swa_lr <= 0:
            raise ValueError("prior_std, lr and swa_lr must be positive")
        if min(self.epochs, self.batch_size, self.swa_epochs, self.snapshots_per_epoch) < 1:
            raise ValueError("epochs, batch_size, swa_epochs and snapshots_per_epoch must be at least 1")
        if not 0 <= self.momentum < 1:
            raise ValueError("momentum must lie in [0, 1)")
        if self.rank < 2:
            raise ValueError("rank must be at least 2 (the low-rank part is a sample covariance)")
        if self.rank > self.swa_epochs * self.snapshots_per_epoch:
            raise ValueError(
                f"rank {self.rank} needs at least {self.rank} snapshots, but swa_epochs × "
                f"snapshots_per_epoch gives {self.swa_epochs * self.snapshots_per_epoch}"
            )
        if self.predict_samples < 1:
            raise ValueError("predict_samples must be at least 1")


def swag_moments(snapshots: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """θ̄, Σ_diag (as a vector) and D of snapshots (T, P), from the last ``rank`` of them."""
    if not 2 <= rank <= snapshots.shape[0]:
        raise ValueError(f"rank must lie in [2, {snapshots.shape[0]}] for {snapshots.shape[0]} snapshots")
    s = snapshots.double()
    mean = s.mean(0)
    diag = (s.square().mean(0) - mean.square()).clamp_min(0.0)
    deviations = (s[-rank:] - mean).T  # (P, K)
    return mean, diag, deviations


def swag_tensors(snapshots: torch.Tensor, rank: int) -> dict[str, torch.Tensor]:
    """The one-component :class:`VariationalPosterior` tensors of SWAG's Gaussian."""
    mean, diag, deviations = swag_moments(snapshots, rank)
    return {
        "mean": mean.float().unsqueeze(0),
        "diag_std": (diag / 2).sqrt().float().unsqueeze(0),
        "factors": (deviations / math.sqrt(2 * (rank - 1))).float().unsqueeze(0),
        "log_weights": torch.zeros(1),
    }


def fit(config: SwagConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    """Train the MAP network, then average around it."""
    generator = seeded_generator(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(arch)
    steps_per_epoch = math.ceil(len(data) / config.batch_size)
    total = config.swa_epochs * steps_per_epoch
    mode = yield from train_to_mode(model, data, prior_std=config.prior_std, optimiser=config.optimiser,
                                    grad_tol=config.grad_tol, max_iter=config.max_iter, epochs=config.epochs,
                                    batch_size=config.batch_size, lr=config.lr, generator=generator)
    return (yield from _swag(model, config, arch, data, seed, generator, 0, total, mode))


def fit_from(weights: dict[str, torch.Tensor], config: SwagConfig, arch: ArchSpec, data: Dataset,
             seed: int) -> FitGenerator:
    """Average around given MAP weights (a saved MAP posterior's); ``epochs`` is not used."""
    model = build_model(arch)
    model.load_state_dict(weights)
    total = config.swa_epochs * math.ceil(len(data) / config.batch_size)
    log_post, grad_norm = log_posterior_and_grad(model, data, config.prior_std)
    mode = {"optimiser": "a saved MAP", "grad_norm": float(f"{grad_norm:.3g}"), "log_posterior": round(log_post, 3)}
    return (yield from _swag(model, config, arch, data, seed, seeded_generator(seed), 0, total, mode))


def _penalty(config: SwagConfig, data: Dataset) -> float:
    return 1.0 / (2.0 * len(data) * config.prior_std**2)


def _swag(model: nn.Module, config: SwagConfig, arch: ArchSpec, data: Dataset, seed: int,
          generator: torch.Generator, done: int, total: int, mode: dict | None = None) -> FitGenerator:
    snapshots = yield from _averaging_phase(model, data, config, _penalty(config, data), generator, done, total)
    tensors = swag_tensors(torch.stack(snapshots), config.rank)
    info = {"snapshots": len(snapshots), "rank": config.rank, "family": "SWAG Gaussian (diagonal + low-rank)",
            "components": 1}
    if mode is not None:  # where the averaging started
        info["map"] = mode
    return VariationalPosterior("swag", arch, asdict(config), seed, data.name, tensors, info)


def _averaging_phase(
    model: nn.Module, data: Dataset, config: SwagConfig, penalty: float, generator: torch.Generator,
    done: int, total: int,
) -> FitGenerator:
    """Constant-rate SGD from the MAP weights; returns the flat snapshots θ₁ … θ_T."""
    layout = ParamLayout.of(model)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=config.swa_lr, momentum=config.momentum)
    steps_per_epoch = math.ceil(len(data) / config.batch_size)
    # the steps after which a snapshot is taken: evenly spaced, the last at the end of a pass
    marks = {round((j + 1) * steps_per_epoch / config.snapshots_per_epoch) for j in range(config.snapshots_per_epoch)}
    snapshots: list[torch.Tensor] = []
    window_loss, window_steps = 0.0, 0
    model.train()
    try:
        with dropout_generator(model, generator):
            for _ in range(config.swa_epochs):
                for i, idx in enumerate(minibatches(len(data), config.batch_size, generator), start=1):
                    nll = nn.functional.cross_entropy(model(data.x[idx]), data.y[idx])
                    loss = nll + penalty * squared_norm(params)
                    if not math.isfinite(loss.item()):
                        raise FloatingPointError(
                            "SWAG's averaging phase diverged (the loss is not finite): lower swa_lr"
                        )
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    done += 1
                    window_loss += nll.item()
                    window_steps += 1
                    if i in marks:
                        snapshots.append(layout.flatten({n: p.detach() for n, p in model.named_parameters()}).clone())
                    if done % 20 == 0 or done == total:
                        # the mean since the last report, as every training loop reports its loss
                        yield ProgressRecord(done, total, {"loss": window_loss / window_steps,
                                                           "snapshots": float(len(snapshots))}, "averaging")
                        window_loss, window_steps = 0.0, 0
    finally:
        model.eval()
    return snapshots
