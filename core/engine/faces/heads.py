"""Face posteriors: Bayesian softmax layers on face descriptors, predicting age groups.

The D-SGHMC paper's age experiment (Hernández et al., section 5.2) puts a softmax
regression, p(y | d, W, b) = softmax(W d + b), on a pretrained face descriptor d and
samples (W, b) with SGLD, SGHMC and D-SGHMC. Here any method of
:data:`core.engine.inference.METHODS` trains such a head on a :class:`~core.engine.inference.base.Dataset`
of descriptors (N, D) (:func:`core.engine.data.utkface.load_utkface`), with an architecture from
:func:`face_arch`; the result is an ordinary posterior whose ``predict_proba`` takes
descriptors (N, D).

A face posterior knows which descriptor it was trained on: :func:`core.engine.runner.fit_posterior`
records the training data's ``source``, which for UTKFace holds the descriptor's name,
version and dimension. :func:`check_descriptor` refuses descriptors of another kind (and
digit posteriors), and :func:`predict_age` is the checked way to predict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from core.engine.faces.age_groups import AGE_GROUP_NAMES
from core.engine.faces.descriptor import DescriptorInfo, DescriptorMismatchError
from core.engine.inference.base import Posterior
from core.engine.models import ArchSpec
from core.engine.naming import dataset_words, method_label

TASK = "age"


def face_arch(info: DescriptorInfo, name: str = "softmax", drop_rate: float = 0.0, hidden: int = 100) -> ArchSpec:
    """The architecture of a head over ``info``'s descriptors and the eight age groups."""
    return ArchSpec(name, num_classes=len(AGE_GROUP_NAMES), drop_rate=drop_rate, hidden=hidden, input_dim=info.dim)


def descriptor_of(posterior: Posterior) -> DescriptorInfo | None:
    """The descriptor a posterior was trained on, or None for a posterior of images.

    Read from ``info["descriptor"]`` or, as :func:`core.engine.runner.fit_posterior` records it,
    ``info["training_data"]["descriptor"]``. A damaged record raises ``ValueError``.
    """
    record: Any = posterior.info.get("descriptor")
    if record is None:
        training = posterior.info.get("training_data")
        record = training.get("descriptor") if isinstance(training, dict) else None
    if record is None:
        return None
    try:
        return DescriptorInfo.from_dict(record)
    except ValueError as exc:
        raise ValueError(f"the posterior's descriptor record is damaged ({exc})") from None


def is_face_posterior(posterior: Posterior) -> bool:
    """Whether the posterior reads face descriptors (and predicts age groups)."""
    return posterior.arch.input_dim > 0 and descriptor_of(posterior) is not None


def class_names_of(posterior: Posterior) -> tuple[str, ...] | None:
    """The age-group names for a face posterior, None for any other."""
    if is_face_posterior(posterior) and posterior.num_classes == len(AGE_GROUP_NAMES):
        return AGE_GROUP_NAMES
    return None


def check_descriptor(posterior: Posterior, info: DescriptorInfo) -> None:
    """Raise :class:`DescriptorMismatchError` unless ``posterior`` reads ``info``'s descriptors.

    A posterior of digit images, or one trained on another descriptor (another name,
    version or length), gets a sentence saying what it was trained on.
    """
    trained = descriptor_of(posterior)
    if trained is None or posterior.arch.input_dim == 0:
        raise DescriptorMismatchError(
            f"this {method_label(posterior.method)} posterior was trained on {dataset_words(posterior.dataset)}, "
            "not on face descriptors; choose a face posterior for the face mode"
        )
    if not trained.same_kind(info):
        raise DescriptorMismatchError(
            f"this posterior was trained on {trained.describe()} descriptors, but these are "
            f"{info.describe()}; train a head on the same descriptor"
        )
    if posterior.arch.input_dim != info.dim:
        raise DescriptorMismatchError(
            f"this posterior reads {posterior.arch.input_dim} features, but the {info.name} "
            f"descriptor has {info.dim}; the file is inconsistent"
        )


def as_descriptor_batch(descriptors: np.ndarray | torch.Tensor, info: DescriptorInfo) -> torch.Tensor:
    """``descriptors`` as a float32 tensor (N, D): one vector (D,) becomes (1, D)."""
    x = torch.as_tensor(np.asarray(descriptors) if not isinstance(descriptors, torch.Tensor) else descriptors)
    if x.ndim == 1:
        x = x.unsqueeze(0)
    if x.ndim != 2 or x.shape[1] != info.dim:
        raise DescriptorMismatchError(
            f"{info.name} descriptors have {info.dim} features, got an array of shape {tuple(x.shape)}"
        )
    x = x.to(torch.float32)
    if not torch.isfinite(x).all():
        raise ValueError("the descriptors hold NaN or infinite values")
    return x


def predict_age(
    posterior: Posterior,
    descriptors: np.ndarray | torch.Tensor,
    info: DescriptorInfo,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Age-group probabilities (S, N, 8) of descriptors (N, D) or (D,) of kind ``info``.

    Checks the posterior against the descriptor first (:func:`check_descriptor`).
    """
    check_descriptor(posterior, info)
    x = as_descriptor_batch(descriptors, info)
    s = posterior.check_prediction(num_samples, batch_size=len(x))
    return posterior.predict_proba(x, num_samples=s, generator=generator)


def expected_age_group(mean: np.ndarray) -> float:
    """Σ_k k·p̄_k: the mean predicted group index (a summary between neighbouring groups)."""
    mean = np.asarray(mean, dtype=np.float64)
    return float((np.arange(mean.shape[-1]) * mean).sum(-1))
