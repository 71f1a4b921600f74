"""Per-input prediction: S posterior samples for one image and their summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.uncertainty import (
    MaskSplit,
    Summary,
    mask_split,
    summarise_finite,
    with_mask_split,
)
from core.engine.data.preprocess import image_to_input
from core.engine.inference.base import Posterior, SampledPosterior
from core.engine.inference.dsghmc import InputDropoutPosterior, input_dropout

#: Input masks per weight draw for the weights / input-masks split of a posterior that masks
#: its inputs at prediction (D-SGHMC). Mask noise left in p_s after averaging M masks counts
#: as weight disagreement, about (input-mask part)/M: 16 keeps it near 5% of the masks' part
#: while one batched call of S × 16 inputs stays within a few milliseconds for LeNet.
MASKS_PER_DRAW = 16

#: Offset of the seed of the fixed masks of the split (``seed=None``), away from the bank of
#: :func:`core.engine.inference.base.interactive_generator`.
MASK_SPLIT_SEED_OFFSET = 7919


class ProbabilitiesNotFiniteError(ValueError):
    """A posterior's class probabilities for an input that are not finite numbers."""


def check_finite(samples: torch.Tensor, posterior: Posterior) -> torch.Tensor:
    """``samples`` (probabilities), or a :class:`ProbabilitiesNotFiniteError` sentence when any is
    NaN or infinite: a summary would otherwise name the class of a NaN (argmax of NaN is an index).
    (The window's columns are checked in their summaries' pass instead: :func:`predict_inputs`.)"""
    # one sum first: it is finite whenever every number is (probabilities cannot overflow it), so
    # the full elementwise check runs only when something is wrong or the sum overflowed
    if not math.isfinite(samples.detach().sum()) and not bool(torch.isfinite(samples).all()):
        raise not_finite_error(samples, posterior)
    return samples


def not_finite_error(samples: torch.Tensor, posterior: Posterior) -> ProbabilitiesNotFiniteError:
    """The sentence for ``samples`` (probabilities) that hold a NaN or an infinity: how many of
    the samples do."""
    bad = int((~torch.isfinite(samples)).flatten(1).any(1).sum()) if samples.ndim > 1 else 1
    return ProbabilitiesNotFiniteError(
        f"the {posterior.method} posterior's class probabilities for this input are not numbers in {bad} of "
        f"its {len(samples)} samples (its outputs overflow), so no class can be named; the posterior's "
        "weights or its input standardisation are out of range")


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
    return predict_input(posterior, image_batch(image), num_samples, seed, level)


def predict_features(
    posterior: Posterior,
    features: np.ndarray | torch.Tensor,
    num_samples: int | None = None,
    seed: int | None = 0,
    level: float = 0.9,
) -> Prediction:
    """:func:`predict_image` for one feature vector (D,), e.g. a face descriptor."""
    return predict_input(posterior, features_batch(features), num_samples, seed, level)


def image_batch(image: np.ndarray | torch.Tensor) -> torch.Tensor:
    """One 28×28 image (or a raw drawing, or the model input already made) as a batch of one
    shaped for the digit models, (1, 1, 28, 28)."""
    x = image if isinstance(image, torch.Tensor) else image_to_input(image)
    if x.dtype == torch.float32 and x.ndim == 4 and x.shape[:2] == (1, 1):  # as image_to_input makes it
        return x
    return x.reshape(1, 1, *x.shape[-2:]).float()


def features_batch(features: np.ndarray | torch.Tensor) -> torch.Tensor:
    """One feature vector (D,) as a batch of one, (1, D) float32."""
    return torch.as_tensor(np.asarray(features, dtype=np.float32)).reshape(1, -1)


def predict_input(
    posterior: Posterior,
    x: torch.Tensor,
    num_samples: int | None = None,
    seed: int | None = 0,
    level: float = 0.9,
) -> Prediction:
    """Samples and summary for a batch of one input already shaped for the posterior."""
    prediction = predict_inputs([(posterior, x, num_samples)], seed, level)[0]
    if isinstance(prediction, Exception):
        raise prediction
    return prediction


def predict_inputs(
    columns: Sequence[tuple[Posterior, torch.Tensor, int | None]],
    seed: int | None = 0,
    level: float = 0.9,
) -> list[Prediction | Exception]:
    """:func:`predict_input` of several posteriors, each on its own batch of one input with its
    own draw count (``(posterior, x, num_samples)``), their summaries and the check that their
    probabilities are numbers computed in one pass (:func:`~core.analysis.uncertainty.summarise_finite`:
    the window's columns on one stroke).
    Each prediction is what :func:`predict_input` gives for it alone. A posterior that raises
    gives its exception in its place, so that one broken posterior never keeps the others
    from judging the input."""
    drawn: list[tuple[torch.Tensor, torch.Generator | None] | Exception] = []
    for posterior, x, num_samples in columns:
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        try:
            drawn.append((posterior.predict_proba(x, num_samples=num_samples, generator=generator)[:, 0], generator))
        except Exception as exc:  # noqa: BLE001 — the caller says why, for this posterior only
            drawn.append(exc)
    summaries = iter(summarise_finite([d[0] for d in drawn if not isinstance(d, Exception)], level=level))
    predictions: list[Prediction | Exception] = []
    for (posterior, x, num_samples), outcome in zip(columns, drawn, strict=True):
        if isinstance(outcome, Exception):
            predictions.append(outcome)
            continue
        (samples, generator), summary = outcome, next(summaries)
        if summary is None:  # a NaN or an infinity among its probabilities: no class can be named
            predictions.append(not_finite_error(samples, posterior))
            continue
        if masks_inputs(posterior):
            if generator is None:  # the interactive path: the same masks on every call
                generator = torch.Generator().manual_seed(int(posterior.seed) + MASK_SPLIT_SEED_OFFSET)
            try:
                summary = with_mask_split(summary, input_mask_split(posterior, x, num_samples, generator))
            except Exception as exc:  # noqa: BLE001 — as above
                predictions.append(exc)
                continue
        predictions.append(Prediction(samples, summary))
    return predictions


def masks_inputs(posterior: Posterior) -> bool:
    """Whether the posterior draws random input masks at prediction (D-SGHMC, mask kept on)."""
    return (isinstance(posterior, InputDropoutPosterior) and posterior.mask_at_prediction
            and posterior.input_drop_rate > 0)


def input_mask_split(
    posterior: InputDropoutPosterior,
    x: torch.Tensor,
    num_samples: int | None,
    generator: torch.Generator,
    masks: int = MASKS_PER_DRAW,
) -> MaskSplit:
    """The weights / input-masks split (:class:`~core.analysis.uncertainty.MaskSplit`) of one
    input (a batch of one): every weight draw judges the same ``masks`` masked copies of x."""
    if x.shape[0] != 1:
        raise ValueError("the split is computed for one input at a time")
    masked = input_dropout(x.expand(masks, *x.shape[1:]), posterior.input_drop_rate, generator)
    # the weights' own prediction on inputs masked here (the base class's, which masks nothing)
    logits = SampledPosterior.predict_logits(posterior, masked, num_samples)  # (S, M, K)
    return mask_split(torch.softmax(logits.double(), dim=-1))
