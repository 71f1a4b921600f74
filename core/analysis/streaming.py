"""A data set streamed through a posterior in steps sized by their bytes: the per-image
results (:class:`DatasetPredictions`), never the S×N×K draws.

:func:`predict_dataset` predicts a step at a time (stored draws in one call of their logits,
a posterior that draws at prediction block by block with each block's generator) and scores
it a part at a time (:class:`core.analysis.scoring.PartScorer`); :func:`evaluation_step_bytes`
and :func:`result_bytes` are what the memory check weighs before the first image.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.predictive import ProbabilitiesNotFiniteError
from core.analysis.scoring import (
    SCORE_PAIR_BYTES,
    SCORE_TEMPORARY_BYTES,
    SCORES,
    PartScorer,
    score_images,
)
from core.engine.device import generator_on, on_device, to_host
from core.engine.inference.base import Dataset, Posterior, ProgressRecord, SampledPosterior
from core.engine.inference.dsghmc import InputDropoutPosterior
from core.engine.inference.variational import VariationalPosterior
from core.engine.models import image_features

#: The *draw block* of a posterior that draws at prediction (dropout masks, weight draws): the
#: images that share one generator are ``SAMPLE_BUDGET // S`` (at least 1). It fixes which
#: draws each image gets, so it stays as it was when the batches were that size; several
#: blocks now go through one step of :func:`predict_dataset` together.
SAMPLE_BUDGET = 4096
#: Bytes one step of :func:`predict_dataset` may hold: the forward pass's activations and the
#: probabilities of its images (each posterior's weights come on top). Large enough that a
#: posterior with many draws reads its weights once for hundreds of images (HMC's 800 draws
#: of softmax regression are 25 MB: at 5 images a step, reading them cost more than the
#: arithmetic); small enough to stay far below any machine's memory.
STEP_BYTES = 96 << 20
#: Bytes of float32 logits one call of a posterior with stored draws returns (at most the
#: size of its weights, if they are larger): see :func:`step_images`. At 2 MB instead of 4 the
#: face tier's SGHMC (655 images a step instead of 1,310) evaluated its 4,623 test descriptors
#: in 0.85 of the time and its SGLD in 0.96 (CPU time, minima and medians of 11 runs
#: alternating in one process, load 10-13); its HMC (163 images instead of 327) in the same
#: (1.07 of the minima, 0.99 of the medians).
FORWARD_BYTES = 2 << 20
#: Blocks' worth of memory a run that draws at prediction may hold: one block's buffers and
#: what the allocator keeps of the blocks before it, whether they were in its step or in the
#: steps before (measured: the rise of the process's peak was 2.4-3x one block's buffers for
#: D-SGHMC's input masks and MC dropout on the face tier, and up to 2.5x for MC dropout on the
#: paper tier, whose steps are one block each; one block's with a fixed mmap threshold,
#: ``MALLOC_MMAP_THRESHOLD_``). glibc serves these buffers (12 MB each for the paper tier's
#: MC dropout) from its heap, not by mmap, once a larger block has been freed (loading MNIST
#: raises the threshold to 28-30 MB, its 10,000 images in float32), keeps the freed ones there,
#: and lays out each block's anew around them.
ALLOCATOR_HOLD = 3


@dataclass
class DatasetPredictions:
    """Per-example results of one posterior on one data set (N examples, K classes, C chains).

    Attributes
    ----------
    mean_proba
        p̄ (N, K), float64.
    labels
        True classes (N,).
    scores
        Each of :data:`SCORES` → (N,) float64.
    chain_predictions
        Predicted class of each chain's own mean predictive (C, N).
    num_samples
        Posterior samples S per input.
    """

    mean_proba: np.ndarray
    labels: np.ndarray
    scores: dict[str, np.ndarray]
    chain_predictions: np.ndarray
    num_samples: int

    @property
    def num_classes(self) -> int:
        return self.mean_proba.shape[1]

    @property
    def num_chains(self) -> int:
        return self.chain_predictions.shape[0]

    @property
    def predictions(self) -> np.ndarray:
        return self.mean_proba.argmax(1)

    @property
    def correct(self) -> np.ndarray:
        return self.predictions == self.labels


def chain_ids(posterior: Posterior, num_samples: int | None = None) -> torch.Tensor:
    """Chain of each of the S samples that ``predict_proba(x, num_samples)`` returns.

    A :class:`~core.engine.inference.base.SampledPosterior` has chains as its leading dimension;
    any other posterior counts as one chain.
    """
    ids = getattr(posterior, "chain_ids", None)
    if callable(ids):
        return ids(num_samples)
    s = num_samples or posterior.default_num_samples
    return torch.zeros(s, dtype=torch.long)


def draws_fixed(posterior: Posterior) -> bool:
    """Whether ``posterior`` predicts the same draws whatever generator it is given: stored
    weight samples (HMC, SG-MCMC, ensembles, MAP) without masks drawn at prediction."""
    return isinstance(posterior, SampledPosterior) and (
        type(posterior).predict_proba is SampledPosterior.predict_proba)


#: The ``predict_proba`` of the posteriors that draw at prediction whose probabilities are the
#: float32 softmax of ``predict_logits`` called with the same images, draws and generator: the
#: variational family (MF-VI, sN-VI, sGMM-VI, SWAG) and D-SGHMC's input masks. Laplace is not
#: among them (its probit predictive has no logits); MC dropout has no ``predict_logits``.
_SOFTMAX_OF_LOGITS = (VariationalPosterior.predict_proba, InputDropoutPosterior.predict_proba)


def scored_from_logits(posterior: Posterior) -> bool:
    """Whether :func:`predict_dataset` scores ``posterior``'s logits (their softmax taken in
    float64 by the scorer) instead of its float32 probabilities: stored draws
    (:func:`draws_fixed`), and a posterior that draws at prediction whose probabilities are
    the softmax of its logits, drawn block by block with the same generators, so each image
    gets the draws it got before. Their float32 softmax cost a cheap model (the face tier's
    128-input heads) as much as its product, and the scorer's logarithm of every rounded
    probability as much again; from the logits the scores are exact (to 1e-13,
    ``tests/core/test_scores_from_logits.py``)."""
    return draws_fixed(posterior) or type(posterior).predict_proba in _SOFTMAX_OF_LOGITS


def logits_on_own_device(posterior: Posterior, x: torch.Tensor, num_samples: int | None,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """``posterior.predict_logits(x, num_samples[, generator])`` run where the posterior lives,
    as every ``predict_proba`` runs (``core.engine.inference.base._predicts_on_own_device``):
    the images through a features head's network first, on a GPU the images moved there and
    a generator that draws there, the logits brought back to the CPU, where the scorer takes
    their softmax. ``predict_logits`` itself has no such wrapper, and a posterior on a GPU
    refused images on the CPU. Stored draws (:func:`draws_fixed`) take no generator."""
    device = posterior.device
    x = image_features(posterior.arch, x)
    args: tuple = () if draws_fixed(posterior) else (generator,)
    if device.type == "cpu":
        return posterior.predict_logits(x, num_samples, *args)
    with on_device(device):
        args = tuple(generator_on(g, device) for g in args)
        out = posterior.predict_logits(x.to(device), num_samples, *args)
    return to_host(out)


def _image_bytes(posterior: Posterior, num_samples: int, fixed: bool) -> float:
    """Bytes one image adds to a step of :func:`predict_dataset`, its S·K float32
    probabilities included.

    A posterior with stored draws predicts a step at once from one shared input, so per image
    it holds the input twice (as read and standardised) and, per draw, the activations of the
    layers after the first and the S·K logits twice (the product and its bias added; their
    softmax is the scorer's, in float64);
    one that draws at prediction holds what its own estimate says
    (:meth:`~core.engine.inference.base.Posterior.prediction_bytes`).
    """
    k = posterior.num_classes
    if fixed:
        arch = posterior.arch
        d = arch.input_dim or arch.input_size
        later = max(arch.activations_per_image() - 2 * d, 0)
        activations = 4.0 * (2 * d + num_samples * (later + 2 * k))
    else:
        activations = posterior.prediction_bytes(num_samples, 2) - posterior.prediction_bytes(num_samples, 1)
    return activations + 4.0 * num_samples * k


def step_images(posterior: Posterior, num_samples: int, block: int, fixed: bool | None = None) -> int:
    """Images per step of :func:`predict_dataset`: as many as :data:`STEP_BYTES` holds, a whole
    number of draw blocks of ``block`` images when the posterior draws at prediction."""
    fixed = draws_fixed(posterior) if fixed is None else fixed
    images = max(1, int(STEP_BYTES // _image_bytes(posterior, num_samples, fixed)))
    if fixed:
        # stored draws predict a step in one call, whose outputs (logits, their softmax) are
        # S·K values an image: kept to FORWARD_BYTES they stay in the cache and the allocator's
        # heap between the forward pass's own passes over them; larger, a cheap model's forward
        # ran at half its speed (the face tier's HMC, 128 inputs: 265 ms at 1,548 images a
        # step against 135 at 516; its SGHMC's whole evaluation at 1,310 images a step took
        # 1.18 times its time at 655). Never smaller than the weights, read once a step (the
        # paper tier's HMC: 25 MB of weights, slower at 200 images a step than at 605).
        weights = 4.0 * num_samples * posterior.arch.parameter_count()
        outputs = 4.0 * num_samples * posterior.num_classes
        images = min(images, max(1, int(max(FORWARD_BYTES, weights) // outputs)))
        return images
    return max(1, images // block) * block



def evaluation_step_bytes(posterior: Posterior, num_samples: int, block: int, images: int) -> float:
    """Peak bytes of :func:`predict_dataset` on ``images`` images besides its results: the
    weights a prediction reads or draws, one step's prediction, and the scoring of a part.

    A posterior with stored draws predicts a step in one call. One that draws at prediction
    predicts a step block by block into one buffer of the step's probabilities; a block's
    own buffers (masks, masked copies of the inputs, drawn outputs) are freed before the
    next, but the allocator keeps freed buffers in its heap for reuse (glibc's dynamic mmap
    threshold), those of earlier steps as well as those of the step's earlier blocks, so the
    process holds up to :data:`ALLOCATOR_HOLD` blocks' worth, never more than the run's blocks."""
    fixed = draws_fixed(posterior)
    step = min(step_images(posterior, num_samples, block, fixed), max(images, 1))
    k = posterior.num_classes
    scored = min(step, score_images(num_samples, k))
    scoring = (SCORE_TEMPORARY_BYTES * k + SCORE_PAIR_BYTES) * num_samples * scored
    if fixed:
        weights = 4.0 * num_samples * posterior.arch.parameter_count()
        return weights + step * _image_bytes(posterior, num_samples, fixed) + scoring
    one = min(block, step)
    weights = posterior.prediction_bytes(num_samples, 0)
    drawn = posterior.prediction_bytes(num_samples, one) - weights + 4.0 * num_samples * k * one
    held = min(ALLOCATOR_HOLD, math.ceil(max(images, 1) / one))
    return weights + held * drawn + 4.0 * num_samples * k * step + scoring


def result_bytes(images: int, num_classes: int, num_chains: int) -> float:
    """Bytes of the per-image results :func:`predict_dataset` keeps (:class:`DatasetPredictions`):
    p̄ and the scores in float64, each chain's predicted class, the labels."""
    return 8.0 * images * (num_classes + len(SCORES) + num_chains + 1)


def predict_dataset(
    posterior: Posterior,
    data: Dataset,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
    batch_size: int | None = None,
    batch_generator: Callable[[int], torch.Generator] | None = None,
    *,
    chains: torch.Tensor | None = None,
) -> Generator[ProgressRecord, None, DatasetPredictions]:
    """Stream ``data`` through ``posterior``; yield progress per step, return the results.

    ``batch_size`` is the draw block (default ``SAMPLE_BUDGET // S`` images): block i draws
    from ``batch_generator(i)`` when given (its own generator, so that any run of whole
    blocks gives the same result wherever it runs), else from ``generator``. A step predicts
    as many images as :data:`STEP_BYTES` holds (:func:`step_images`: whole blocks, each with
    its own generator, for a posterior that draws at prediction; one call for stored draws,
    which no generator changes) and scores them in parts of :data:`SCORE_BYTES`, so memory
    holds one step, never the S×N×K tensor, and the results are those of block-by-block
    prediction. Each record's ``values`` hold ``examples`` (images done). Stop iterating to cancel.
    ``chains`` is :func:`chain_ids` of ``posterior`` and ``num_samples`` where the caller has it.
    """
    chains = chain_ids(posterior, num_samples) if chains is None else chains
    s = len(chains)
    block = batch_size or max(1, SAMPLE_BUDGET // s)
    fixed = draws_fixed(posterior)
    from_logits = fixed or scored_from_logits(posterior)
    step = step_images(posterior, s, block, fixed)
    n, k = len(data), posterior.num_classes
    mean: torch.Tensor | None = None  # the results, made at the first of several parts
    scores: torch.Tensor | None = None  # a row per score
    chain_preds: torch.Tensor | None = None
    scorer: PartScorer | None = None
    step_buffer: torch.Tensor | None = None
    total_steps = math.ceil(n / step)
    for i, start in enumerate(range(0, n, step)):
        stop = min(start + step, n)
        if fixed:
            # stored draws: their logits, whose softmax the scorer takes in float64 (the float32
            # softmax cost the face tier's HMC as much as its whole forward pass, and the
            # logarithm of its rounded probabilities, one a class, as much again)
            samples = logits_on_own_device(posterior, data.x if step >= n else data.x[start:stop], num_samples)
        else:
            firsts = range(start, stop, block)
            for first in firsts:
                g = batch_generator(first // block) if batch_generator is not None else generator
                images = data.x[first : min(first + block, stop)]
                drawn = (logits_on_own_device(posterior, images, num_samples, g) if from_logits
                         else posterior.predict_proba(images, num_samples=num_samples, generator=g))
                if len(firsts) == 1:  # one block: nothing to join
                    samples = drawn
                    break
                if step_buffer is None:
                    # the step's probabilities (or logits) in one buffer made once for the run,
                    # each block copied in as it comes (blocks kept in a list and joined held the
                    # step's twice; the memory estimate counts this one buffer); logits laid out
                    # image by image, as one product makes them and the scorer reads them
                    shape = (step, drawn.shape[0], k) if from_logits else (drawn.shape[0], step, k)
                    step_buffer = torch.empty(shape, dtype=drawn.dtype)
                    if from_logits:
                        step_buffer = step_buffer.transpose(0, 1)
                step_buffer[:, first - start : first - start + drawn.shape[1]].copy_(drawn)
                del drawn
            else:
                samples = step_buffer[:, : stop - start]
        if scorer is None:
            if samples.shape[0] != s:
                if callable(getattr(posterior, "chain_ids", None)):
                    raise ValueError(f"posterior returned {samples.shape[0]} samples, expected {s}")
                s = samples.shape[0]  # a chainless posterior with its own default: one chain
                chains = torch.zeros(s, dtype=torch.long)
            part = min(score_images(s, k), step, n)
            scorer = PartScorer(chains, k, part)
        for a in range(0, stop - start, part):
            b = min(a + part, stop - start)
            scored = scorer.score(samples[:, a:b], logits=from_logits)
            if scored is None:  # never an argmax of NaN, never a NaN in a metric
                proba = torch.softmax(samples.double(), -1) if from_logits else samples
                bad = int((~torch.isfinite(proba)).any(0).flatten(1).any(1).sum())
                raise ProbabilitiesNotFiniteError(
                    f"the {posterior.method} posterior's class probabilities are not numbers for {bad} of the "
                    f"images {start + 1:,} to {stop:,} of {data.name} (its outputs overflow), so they cannot be "
                    "scored; the posterior's weights or its input standardisation are out of range")
            if b - a == n:  # the whole set in one part: the scorer's results (tensors of their own) are the run's
                mean, scores, chain_preds = scored
                continue
            if mean is None:
                mean = torch.empty(n, k, dtype=torch.float64)
                scores = torch.empty(len(SCORES), n, dtype=torch.float64)
                chain_preds = torch.empty(scorer.num_chains, n, dtype=torch.long)
            out = slice(start + a, start + b)
            mean[out], scores[:, out], chain_preds[:, out] = scored
        del samples
        yield ProgressRecord(i + 1, total_steps, {"examples": float(stop)}, "eval")
    if mean is None or scores is None:  # no image
        mean, scores = torch.empty(0, k, dtype=torch.float64), torch.empty(len(SCORES), 0, dtype=torch.float64)
    return DatasetPredictions(
        mean_proba=mean.numpy(),
        labels=data.y.numpy().astype(np.int64),
        scores=dict(zip(SCORES, scores.numpy(), strict=True)),  # rows of one array: a tensor's rows cost a torch call each
        chain_predictions=chain_preds.numpy() if chain_preds is not None else np.zeros((1, 0), np.int64),
        num_samples=s,
    )


def merge_predictions(parts: Sequence[DatasetPredictions]) -> DatasetPredictions:
    """The predictions of consecutive slices of a data set, joined in order: what
    :func:`predict_dataset` returns for the whole set when each slice drew as it would have."""
    if not parts:
        raise ValueError("no predictions to merge")
    counts = {p.num_samples for p in parts}
    if len(counts) != 1:
        raise ValueError(f"the slices were predicted with different sample counts: {sorted(counts)}")
    return DatasetPredictions(
        mean_proba=np.concatenate([p.mean_proba for p in parts]),
        labels=np.concatenate([p.labels for p in parts]),
        scores={key: np.concatenate([p.scores[key] for p in parts]) for key in parts[0].scores},
        chain_predictions=np.concatenate([p.chain_predictions for p in parts], axis=1),
        num_samples=parts[0].num_samples,
    )
