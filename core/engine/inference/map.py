"""Maximum a posteriori estimate: the point-mass limit every posterior is compared with.

With a Gaussian prior θ ~ N(0, σ²I) and N training examples, the MAP estimate minimises
the per-example objective

    L(θ) = -(1/N) Σᵢ log p(yᵢ | xᵢ, θ) + ‖θ‖² / (2 N σ²),

optimised with Adam on mini-batches. The result is a :class:`SampledPosterior` with one
chain and one draw, so it predicts through the same vectorised path as the samplers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from core.engine.device import seeded_generator
from core.engine.inference.base import Dataset, FitGenerator, SampledPosterior, optimise
from core.engine.models import ArchSpec, build_model


@dataclass(frozen=True)
class MapConfig:
    """Hyperparameters of MAP training.

    Attributes
    ----------
    prior_std
        σ of the isotropic Gaussian prior on all weights and biases.
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate.
    """

    prior_std: float = 1.0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3

    def __post_init__(self) -> None:
        if self.prior_std <= 0:
            raise ValueError("prior_std must be positive")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs, batch_size and lr must be positive")


def fit(config: MapConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    generator = seeded_generator(seed)
    torch.manual_seed(seed)
    model = build_model(arch)
    penalty = 1.0 / (2.0 * len(data) * config.prior_std**2)
    yield from optimise(
        model,
        data,
        epochs=config.epochs,
        batch_size=config.batch_size,
        lr=config.lr,
        penalty=penalty,
        generator=generator,
    )
    samples = {k: v.detach()[None, None] for k, v in model.named_parameters()}
    return SampledPosterior("map", arch, asdict(config), seed, data.name, samples)
