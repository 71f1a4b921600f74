"""Per-input prediction: S posterior samples for one image and their summary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.uncertainty import Summary, summarise
from core.engine.data.preprocess import image_to_input
from core.engine.inference.base import Posterior


@dataclass(frozen=True)
class Prediction:
    """What the per-input views draw for one posterior."""

    samples: torch.Tensor  # (S, K)
    summary: Summary


def predict_image(
    posterior: Posterior,
    image: np.ndarray | torch.Tensor,
    num_samples: int | None = None,
    seed: int | None = 0,
    level: float = 0.9,
) -> Prediction:
    """Class-probability samples and their summary for one 28×28 image (or a raw drawing).

    Randomness follows the one rule of :mod:`core.engine.inference.base`. ``seed=None`` (the
    interactive path) uses the posterior's own fixed bank: the same S dropout masks, input
    masks or variational weight draws on every call, so a drawing shown twice gets the same
    verdict, a drawing updated stroke by stroke is judged by the same S models, and no S·P
    normals are drawn per stroke. A ``seed`` gives fresh masks/draws from a generator seeded
    with it (reproducible for that seed).
    """
    x = image if isinstance(image, torch.Tensor) else image_to_input(image)
    return predict_input(posterior, x.reshape(1, 1, *x.shape[-2:]).float(), num_samples, seed, level)


def predict_features(
    posterior: Posterior,
    features: np.ndarray | torch.Tensor,
    num_samples: int | None = None,
    seed: int | None = 0,
    level: float = 0.9,
) -> Prediction:
    """:func:`predict_image` for one feature vector (D,), e.g. a face descriptor."""
    x = torch.as_tensor(np.asarray(features, dtype=np.float32)).reshape(1, -1)
    return predict_input(posterior, x, num_samples, seed, level)


def predict_input(
    posterior: Posterior,
    x: torch.Tensor,
    num_samples: int | None = None,
    seed: int | None = 0,
    level: float = 0.9,
) -> Prediction:
    """Samples and summary for a batch of one input already shaped for the posterior."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    samples = posterior.predict_proba(x, num_samples=num_samples, generator=generator)[:, 0]
    return Prediction(samples, summarise(samples, level=level))
