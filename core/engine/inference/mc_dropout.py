"""MC dropout (Gal & Ghahramani 2016, "Dropout as a Bayesian Approximation").

Training a network with dropout (drop rate r, keep probability p = 1 − r) and weight decay
λ on the per-example objective

    L(θ) = -(1/N) Σᵢ log p(yᵢ | xᵢ, θ) + λ ‖θ‖²

is variational inference with a Bernoulli variational family when

    λ = p · l² / (2 N τ),

where l is the prior length-scale (prior θ ~ N(0, I / l²)) and τ the model precision.
Prediction keeps dropout on and averages T stochastic passes; for regression the predictive
variance is τ⁻¹ + the sample variance of the outputs (τ is kept in the config for that).
Here the knob is the **drop rate** of the architecture; p in the formula is the keep
probability, as in the paper's appendix (z ~ Bernoulli(p), z = 0 drops the unit).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from core.engine.device import seeded_generator
from core.engine.inference.base import Dataset, DropoutPosterior, FitGenerator, optimise
from core.engine.models import ArchSpec, build_model


def weight_decay(drop_rate: float, length_scale: float, tau: float, n: int) -> float:
    """λ = (1 − drop_rate) · l² / (2 N τ): the weight decay equivalent to the prior."""
    return (1.0 - drop_rate) * length_scale**2 / (2.0 * n * tau)


def model_precision(drop_rate: float, length_scale: float, weight_decay: float, n: int) -> float:
    """τ = (1 − drop_rate) · l² / (2 N λ): the inverse of :func:`weight_decay`."""
    return (1.0 - drop_rate) * length_scale**2 / (2.0 * n * weight_decay)


@dataclass(frozen=True)
class McDropoutConfig:
    """Hyperparameters of MC dropout.

    Attributes
    ----------
    length_scale
        Prior length-scale l: prior θ ~ N(0, I / l²).
    tau
        Model precision τ. With l they fix the weight decay λ = p l² / (2 N τ).
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate.
    num_samples
        T, the number of stochastic forward passes at prediction.
    """

    length_scale: float = 1.0
    tau: float = 1.0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    num_samples: int = 100

    def __post_init__(self) -> None:
        if self.length_scale <= 0 or self.tau <= 0:
            raise ValueError("length_scale and tau must be positive")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or self.num_samples < 1:
            raise ValueError("epochs, batch_size, lr and num_samples must be positive")


def fit(config: McDropoutConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    if arch.drop_rate <= 0:
        raise ValueError("MC dropout needs a drop rate above 0 (set the architecture's drop_rate)")
    generator = seeded_generator(seed)
    # The initial weights come from torch's global generator (nn.init has no other); seed
    # it for this one build only, so the fit is reproducible and nothing else is disturbed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(arch)
    lam = weight_decay(arch.drop_rate, config.length_scale, config.tau, len(data))
    yield from optimise(
        model,
        data,
        epochs=config.epochs,
        batch_size=config.batch_size,
        lr=config.lr,
        penalty=lam,
        generator=generator,
    )
    params = {k: v.detach() for k, v in model.named_parameters()}
    posterior = DropoutPosterior(
        "mc_dropout", arch, asdict(config), seed, data.name, params, {"weight_decay": lam}
    )
    return posterior
