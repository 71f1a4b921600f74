"""Data-set metrics of a posterior: calibration, confusion, rejection, OOD detection, sweeps.

Two layers. :func:`predict_dataset` streams a data set through a posterior in batches and
keeps only per-example results (:class:`DatasetPredictions`: the mean predictive p̄, the
uncertainty scores and each chain's predicted class), never the S×N×K sample tensor. The
metric functions then work on plain arrays, so they are tested on synthetic inputs:

* :func:`accuracy`, :func:`negative_log_likelihood`, :func:`brier_score`
* :func:`expected_calibration_error` (top-label, 15 equal-width bins),
  :func:`classwise_calibration_error`, :func:`reliability_diagram`
* :func:`confusion_matrix` (hard counts) and :func:`soft_confusion_matrix` (mean p̄ per
  true class, the D-SGHMC paper's "correlation matrix" of true vs predicted class)
* :func:`per_class_error` per chain and :func:`box_statistics` (the paper's Figs. 5, 11)
* :func:`rejection_curve`: accuracy on the retained inputs when the most uncertain are referred
* :func:`auroc`, :func:`average_precision`, :func:`ood_detection`, :func:`score_histograms`
* :func:`rotation_sweep` (Gal & Ghahramani's rotated digit)
* :func:`drop_rate_sensitivity` (the D-SGHMC paper's Figs. 2, 9)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.analysis.predictive import ProbabilitiesNotFiniteError
from core.analysis.uncertainty import (
    DEFAULT_BINS,
    credible_interval,
    expected_coverage,
    expected_entropy,
    mutual_information,
    predictive_entropy,
)
from core.engine.data.preprocess import rotate
from core.engine.inference.base import Dataset, Posterior, ProgressRecord, SampledPosterior

ECE_BINS = 15
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
#: Bytes of float32 probabilities one call of a posterior with stored draws returns (at most
#: the size of its weights, if they are larger): see :func:`step_images`.
FORWARD_BYTES = 4 << 20
#: Bytes of float64 probabilities scored at once: the scores' passes over the draws then run
#: in the processor's cache instead of main memory (2-4x faster on the 2-core machine).
SCORE_BYTES = 4 << 20
#: Bytes per draw-image-class the scoring holds besides the float32 probabilities: the
#: float64 copy and one float64 temporary (:class:`_PartScorer`'s buffers).
SCORE_TEMPORARY_BYTES = 16
#: Blocks' worth of memory a run that draws at prediction may hold: one block's buffers and
#: what the allocator keeps of the blocks before it (measured: the rise of the process's peak
#: was 2.4-3x one block's buffers for D-SGHMC's input masks and MC dropout on the face tier,
#: and one block's with a fixed mmap threshold, ``MALLOC_MMAP_THRESHOLD_``).
ALLOCATOR_HOLD = 3
#: Bytes per draw-image the top two classes' histograms hold while scored: the pair of
#: probabilities in float64 and their bins as int64.
SCORE_PAIR_BYTES = 32

#: The per-example uncertainty scores, each "higher = more uncertain".
SCORES: tuple[str, ...] = (
    "total",  # predictive entropy H[p̄] (nats)
    "aleatoric",  # expected entropy E_s H[p_s]
    "epistemic",  # mutual information
    "epistemic_variance",  # Σ_k Var_s[p_sk]
    "one_minus_max_prob",  # 1 − max_k p̄_k
    "top_two_overlap",  # Bhattacharyya coefficient of the top two classes
)

#: The scores by which inputs are referred in :func:`rejection_curve` (entropy form).
REJECTION_SCORES: tuple[str, ...] = ("total", "epistemic", "aleatoric")


def score_range(score: str, num_classes: int) -> tuple[float, float]:
    """The fixed range of a score, so histograms are comparable across methods and sets."""
    if score in ("total", "aleatoric", "epistemic"):
        return 0.0, math.log(num_classes)
    if score in ("epistemic_variance", "one_minus_max_prob"):
        return 0.0, 1.0 - 1.0 / num_classes
    if score == "top_two_overlap":
        return 0.0, 1.0
    raise ValueError(f"unknown score {score!r}; choose from {SCORES}")


# ----------------------------------------------------------------------------- streaming


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


def batch_scores(samples: torch.Tensor, bins: int = DEFAULT_BINS) -> dict[str, torch.Tensor]:
    """Every score of :data:`SCORES` for samples (S, N, K): each (N,), float64.

    The same numbers (to about 1e-14; the tests hold them to 1e-12) as :func:`~core.analysis.uncertainty.predictive_entropy`,
    :func:`~core.analysis.uncertainty.expected_entropy`, :func:`~core.analysis.uncertainty.mutual_information`,
    :func:`~core.analysis.uncertainty.variance_decomposition` and
    :func:`~core.analysis.uncertainty.top_two_overlap` give, in fewer passes over the S·N·K
    draws: each entropy is taken once (the mutual information reuses both), the variance
    form's unused aleatoric part is skipped, and only the top two classes are binned.
    """
    s, n, k = samples.shape
    scored = _PartScorer(torch.zeros(s, dtype=torch.long), k, max(n, 1), bins).score(samples)
    if scored is None:
        raise ProbabilitiesNotFiniteError("some class probabilities are not numbers, so they cannot be scored")
    return dict(zip(SCORES, scored[1], strict=True))


class _PartScorer:
    """p̄, the scores and each chain's arg-max for parts of at most ``images`` images of S
    draws of K classes, with the float64 buffers allocated once for a whole run.

    Every sum over the draws is a matrix-vector product (a reduction over the leading
    dimension walks memory with a stride: 10-50 times slower here; a product of several rows
    at once took 4x one row's time), divided by S afterwards as ``mean`` does, so draws that
    agree (one draw, or probabilities of exactly 0 and 1) give p̄ exactly and the entropy and
    variance parts that are 0 by construction exactly 0. The float64 copy and one temporary
    are the only S·N·K buffers, made once: a new one for each part cost its page faults
    again (≈ 1 ms for 4 MB). The three per-class sums (p̄ log p̄, Σ_s p log p and
    Σ_s (p − p̄)², taken as Σ_s p² − S·p̄²) share one buffer, so one product with a vector of
    ones gives them per image. With several chains, each a run of rows, p̄ is the sum of the
    chains' own sums, so the draws are read once for both.
    """

    def __init__(self, chains: torch.Tensor, num_classes: int, images: int, bins: int = DEFAULT_BINS) -> None:
        s, k = len(chains), num_classes
        self.s, self.k, self.bins = s, k, bins
        self.ones = torch.ones(1, s, dtype=torch.float64)
        self.ones_k = torch.ones(k, dtype=torch.float64)
        present, counts = torch.unique(chains, return_counts=True)  # chains that received a sample
        self.num_chains = len(present)
        self.chain_counts = counts.double().unsqueeze(1)
        # a chain's draws are one run of rows (SampledPosterior's order): its sum is one
        # product with its own rows; in any other order, a product with its 0/1 weights
        runs = bool((chains[1:] >= chains[:-1]).all())
        edges = [0, *torch.cumsum(counts, 0).tolist()]
        self.chain_rows = [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)] if runs else None
        self.member = (chains.unsqueeze(0) == present.unsqueeze(1)).double()  # (C, S)
        self.draws = torch.empty(s, images * k, dtype=torch.float64)
        self.temporary = torch.empty(s, images * k, dtype=torch.float64)
        self.sums = torch.empty(3 * images * k, dtype=torch.float64)  # (3, n·K) of a part, contiguous
        self.cells = bins * torch.arange(2 * images).view(images, 2)  # each image's two histograms

    def score(self, part: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """p̄ (n, K), the scores (len(SCORES), n) in the order of :data:`SCORES` and each
        chain's arg-max (C, n) of probabilities ``part`` (S, n, K), never negative; None
        where some p̄ is not finite (a draw that is not a number makes its image's p̄ one),
        for the caller to word."""
        s, n, k = part.shape
        d = self.draws[:, : n * k]
        d.view(s, n, k).copy_(part)  # float64 before any sum, as the uncertainty module does
        chain_sums = None
        if 1 < self.num_chains < s and self.chain_rows is not None:
            # several chains of several draws: each chain's sum, one product with its own rows,
            # and p̄ the sum of those few rows, so the draws are read once for both (p̄ then
            # rounds as a sum of C partial sums, a few 1e-17 from one sum over all S)
            chain_sums = torch.cat([self.ones[:, : r.stop - r.start] @ d[r] for r in self.chain_rows])
            mean = ((self.ones[:, : self.num_chains] @ chain_sums) / s).view(n, k)
        else:
            mean = ((self.ones @ d) / s).view(n, k)
        if not math.isfinite(float(mean.sum())):  # before any arg-max or bin of a NaN
            return None
        order = ClassOrder(mean)  # p̄'s arg-max, top two and largest value, read once
        if s == 1:
            return mean, self._one_draw(mean, order), order.first.unsqueeze(0)
        if self.num_chains == 1:
            chain_preds = order.first.unsqueeze(0)  # its mean is p̄
        elif self.num_chains == s and self.chain_rows is not None:
            # one draw a chain (an ensemble's members): its own mean; their float32 values order
            # the classes as the float64 copy does, and are half its bytes to lay out anew
            chain_preds = first_argmax(part.detach().cpu())
        else:
            if chain_sums is None:  # chains whose draws are not runs of rows: their 0/1 weights
                chain_sums = self.member @ d
            chain_preds = first_argmax((chain_sums / self.chain_counts).view(-1, n, k))
        top = order.top_two()  # (n, 2), the classes topk picks
        # each class's histogram is its own, so binning only the top two gives their rows exactly
        pair = d.view(s, n, k).gather(-1, top.unsqueeze(0).expand(s, n, 2))  # binned in float64, as before
        # class_histograms' rule, (clamp(p, 0, 1)·bins).long() at most bins − 1, in one clamp of
        # p·bins: the same bin for every p (p·bins ≥ bins − 1 lands in the last either way)
        which = pair.mul_(self.bins).clamp_(0, self.bins - 1).long()
        which += self.cells[:n]
        counts = torch.bincount(which.view(-1), minlength=2 * n * self.bins).view(n, 2, self.bins)
        fractions = counts.float() / s  # float32, as class_histograms
        # bhattacharyya_coefficient's float32 arithmetic (its clamp at 0 changes no count)
        overlap = (fractions[:, 0] * fractions[:, 1]).sqrt_().sum(-1).double()
        sums = self.sums[: 3 * n * k].view(3, n * k)
        torch.clamp_min(mean.view(1, -1), _TINY, out=sums[:1]).log_().mul_(mean.view(1, -1))
        t = self.temporary[:, : n * k]
        torch.clamp_min(d, _TINY, out=t)  # p log p: 0 · log(_TINY) is 0 where 0 · log 0 would be NaN
        torch.mm(self.ones, t.log_().mul_(d), out=sums[1:2])
        # Σ_s (p − p̄)² as Σ_s p² − S·p̄²: one pass over the draws fewer; its rounding, about
        # 1e-16 · Σ_s p², is far below the scores' 1e-12, and draws that agree on 0 and 1 sum
        # exactly, so their variance stays exactly 0 (the clamp keeps a rounding above 0)
        torch.mm(self.ones, torch.mul(d, d, out=t), out=sums[2:])
        sums[2:].view(-1).sub_(mean.view(-1).square().mul_(s))
        # Σ_k of the three, a matrix-vector product: a sum over a last dimension of 10 costs
        # 40-120 ns a row in torch, the product a few
        per_image = (sums.view(3 * n, k) @ self.ones_k).view(3, n)
        total = per_image[0].neg() + 0.0  # never −0
        aleatoric = per_image[1].div(-s) + 0.0
        scores = torch.stack([
            total,
            aleatoric,
            (total - aleatoric).clamp_min_(0) + 0.0,
            per_image[2].div_(s).clamp_min_(0),
            1 - order.largest,
            overlap,
        ])
        return mean, scores, chain_preds

    def _one_draw(self, p: torch.Tensor, order: ClassOrder) -> torch.Tensor:
        """The scores of one draw p (n, K), as :meth:`score` computes them for S draws with the
        parts that are 0 by construction left out: the same bits, without the S·N·K passes and
        the histograms that cost a one-draw posterior (MAP) more than its forward pass. Its
        aleatoric entropy is its total; the mutual information and variance are 0; two
        one-draw histograms overlap fully (1) where the two classes share a bin, else not at all
        (the top two values decide it, whichever of two equal classes topk would name)."""
        n, k = p.shape
        row = self.sums[: n * k].view(n, k)
        torch.clamp_min(p, _TINY, out=row).log_().mul_(p)
        total = (row @ self.ones_k).neg_() + 0.0  # never −0
        pair = torch.stack([order.largest, order.second_value()], 1)
        which = (pair.clamp_(0, 1) * self.bins).long().clamp_max_(self.bins - 1)
        zero = torch.zeros(n, dtype=torch.float64)
        return torch.stack([total, total, zero, zero, 1 - order.largest, (which[:, 0] == which[:, 1]).double()])


def _classes_first(x: torch.Tensor) -> torch.Tensor:
    """``x`` (..., n, K) as a contiguous (..., K, n) copy: a reduction over a short last
    dimension (arg-max, topk over K = 10 classes) costs 20-120 ns an image in torch on the
    CPU, the same reduction over the classes laid out first one pass of n-long rows. numpy's
    transposing copy is 4-6 times torch's (0.05 against 0.3 ms for 10,000 × 10 float32)."""
    return torch.from_numpy(np.ascontiguousarray(np.swapaxes(x.numpy(), -1, -2)))


def _first_index(t: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """The first class (along dim −2 of ``t`` (..., K, n)) equal to ``value`` (..., n): the
    smallest index, as torch's arg-max names the first of equal largest values."""
    k = t.shape[-2]
    small = torch.uint8 if k < 256 else torch.int32  # a quarter of the bytes to weigh for few classes
    descending = torch.arange(k, 0, -1, dtype=small).view(k, 1)  # class j weighs K − j
    return k - ((t == value.unsqueeze(-2)) * descending).amax(-2).long()


#: Rows from which the classes are laid out first for their arg-max and top two: below it
#: the copy and the dozen operations on it cost more than torch's own arg-max and topk
#: (about 5 µs an operation against 40-120 ns a row).
CLASS_ORDER_ROWS = 512


def first_argmax(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(-1)`` of ``x`` (..., n, K) without NaN, the first of equal largest values as
    torch names it, in a fraction of its time for few classes (see :func:`_classes_first`)."""
    if x.shape[-2] < CLASS_ORDER_ROWS:
        return x.argmax(-1)
    t = _classes_first(x)
    return _first_index(t, t.amax(-2))


class ClassOrder:
    """The arg-max, the largest value and the top two classes of each row of p̄ (n, K), from
    one copy with the classes laid out first (:func:`_classes_first`).

    :meth:`top_two` names the classes ``topk(2)`` names. topk's order among equal values is
    its own (neither first nor last), so the rows where the second and third largest values
    are equal, where the choice of the second class could change what is binned, take topk's
    own answer; elsewhere the pair is the same set, and the overlap, a product of the two
    classes' fractions, is the same either way round.
    """

    def __init__(self, mean: torch.Tensor) -> None:
        self.mean = mean
        self._rest: torch.Tensor | None = None
        self._topk: Any = None
        if len(mean) < CLASS_ORDER_ROWS:  # few rows: torch's own reductions are cheaper
            self._topk = mean.topk(min(2, mean.shape[1]), dim=-1)
            self.largest = self._topk.values[:, 0]
            self.first = mean.argmax(-1)
            return
        self.t = _classes_first(mean)  # (K, n)
        self.largest = self.t.amax(0)
        self.first = _first_index(self.t, self.largest)

    def _without_first(self) -> torch.Tensor:
        if self._rest is None:
            self._rest = self.t.clone().scatter_(0, self.first.unsqueeze(0), -math.inf)
        return self._rest

    def second_value(self) -> torch.Tensor:
        """The second largest value of each row (the largest again where two share it)."""
        if self.mean.shape[1] < 2:
            return self.largest.clone()
        return self._topk.values[:, 1] if self._topk is not None else self._without_first().amax(0)

    def top_two(self) -> torch.Tensor:
        """(n, 2): the two classes of largest p̄, those of ``mean.topk(2, dim=-1).indices``."""
        if self._topk is not None:
            return self._topk.indices
        rest = self._without_first()
        value = rest.amax(0)
        second = _first_index(rest, value)
        top = torch.stack([self.first, second], 1)
        if rest.shape[0] > 2:
            third = rest.scatter(0, second.unsqueeze(0), -math.inf).amax(0)
            tied = (third == value).nonzero().view(-1)
            if len(tied):  # which of the equal classes topk names is topk's to say
                top[tied] = self.mean[tied].topk(2, dim=-1).indices
        return top


def _plogp(p: torch.Tensor) -> torch.Tensor:
    """p log p elementwise, 0 for p = 0, in one new tensor (clamp, then log and product in
    place: a third of ``xlogy``'s time, which tests every element in a scalar loop)."""
    terms = torch.clamp_min(p, _TINY)  # 0 · log(_TINY) is 0 where 0 · log 0 would be NaN
    return terms.log_().mul_(p)


#: The smallest positive float64: p·log p of a p below it is below 1e-305, so flooring p there
#: changes no entropy, and 0 · log(_TINY) is 0 where 0 · log 0 would be NaN.
_TINY = float(torch.finfo(torch.float64).tiny)


def draws_fixed(posterior: Posterior) -> bool:
    """Whether ``posterior`` predicts the same draws whatever generator it is given: stored
    weight samples (HMC, SG-MCMC, ensembles, MAP) without masks drawn at prediction."""
    return isinstance(posterior, SampledPosterior) and (
        type(posterior).predict_proba is SampledPosterior.predict_proba)


def _image_bytes(posterior: Posterior, num_samples: int, fixed: bool) -> float:
    """Bytes one image adds to a step of :func:`predict_dataset`, its S·K float32
    probabilities included.

    A posterior with stored draws predicts a step at once from one shared input, so per image
    it holds the input twice (as read and standardised) and, per draw, the activations of the
    layers after the first and the S·K outputs three times (logits, biased logits, softmax);
    one that draws at prediction holds what its own estimate says
    (:meth:`~core.engine.inference.base.Posterior.prediction_bytes`).
    """
    k = posterior.num_classes
    if fixed:
        arch = posterior.arch
        d = arch.input_dim or arch.input_size
        later = max(arch.activations_per_image() - 2 * d, 0)
        activations = 4.0 * (2 * d + num_samples * (later + 3 * k))
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
        # step against 135 at 516). Never smaller than the weights, read once a step (the paper
        # tier's HMC: 25 MB of weights, slower at 200 images a step than at 605).
        weights = 4.0 * num_samples * posterior.arch.parameter_count()
        outputs = 4.0 * num_samples * posterior.num_classes
        images = min(images, max(1, int(max(FORWARD_BYTES, weights) // outputs)))
        return images
    return max(1, images // block) * block


def score_images(num_samples: int, num_classes: int) -> int:
    """Images scored at once: :data:`SCORE_BYTES` of float64 probabilities."""
    return max(1, SCORE_BYTES // (8 * num_samples * num_classes))


def evaluation_step_bytes(posterior: Posterior, num_samples: int, block: int, images: int) -> float:
    """Peak bytes of :func:`predict_dataset` on ``images`` images besides its results: the
    weights a prediction reads or draws, one step's prediction, and the scoring of a part.

    A posterior with stored draws predicts a step in one call. One that draws at prediction
    predicts a step block by block into one buffer of the step's probabilities; a block's
    own buffers (masks, masked copies of the inputs, drawn outputs) are freed before the
    next, but the allocator keeps freed buffers in its heap for reuse (glibc's dynamic mmap
    threshold), so the process holds up to :data:`ALLOCATOR_HOLD` blocks' worth, never more
    than the step's blocks and one."""
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
    held = min(ALLOCATOR_HOLD, math.ceil(step / one) + 1)
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
    """
    chains = chain_ids(posterior, num_samples)
    s = len(chains)
    block = batch_size or max(1, SAMPLE_BUDGET // s)
    fixed = draws_fixed(posterior)
    step = step_images(posterior, s, block, fixed)
    n, k = len(data), posterior.num_classes
    mean = torch.empty(n, k, dtype=torch.float64)
    scores = torch.empty(len(SCORES), n, dtype=torch.float64)  # a row per score
    chain_preds: torch.Tensor | None = None
    scorer: _PartScorer | None = None
    step_buffer: torch.Tensor | None = None
    total_steps = math.ceil(n / step)
    for i, start in enumerate(range(0, n, step)):
        stop = min(start + step, n)
        if fixed:
            samples = posterior.predict_proba(data.x[start:stop], num_samples=num_samples, generator=generator)
        else:
            firsts = range(start, stop, block)
            for first in firsts:
                g = batch_generator(first // block) if batch_generator is not None else generator
                drawn = posterior.predict_proba(data.x[first : min(first + block, stop)],
                                                num_samples=num_samples, generator=g)
                if len(firsts) == 1:  # one block: nothing to join
                    samples = drawn
                    break
                if step_buffer is None:
                    # the step's probabilities in one buffer made once for the run, each block
                    # copied in as it comes (blocks kept in a list and joined held the step's
                    # probabilities twice; the memory estimate counts this one buffer)
                    step_buffer = torch.empty(drawn.shape[0], step, k, dtype=drawn.dtype)
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
            scorer = _PartScorer(chains, k, part)
            chain_preds = torch.empty(scorer.num_chains, n, dtype=torch.long)
        for a in range(0, stop - start, part):
            b = min(a + part, stop - start)
            scored = scorer.score(samples[:, a:b])
            if scored is None:  # never an argmax of NaN, never a NaN in a metric
                bad = int((~torch.isfinite(samples)).any(0).flatten(1).any(1).sum())
                raise ProbabilitiesNotFiniteError(
                    f"the {posterior.method} posterior's class probabilities are not numbers for {bad} of the "
                    f"images {start + 1:,} to {stop:,} of {data.name} (its outputs overflow), so they cannot be "
                    "scored; the posterior's weights or its input standardisation are out of range")
            out = slice(start + a, start + b)
            mean[out], scores[:, out], chain_preds[:, out] = scored
        del samples
        yield ProgressRecord(i + 1, total_steps, {"examples": float(stop)}, "eval")
    return DatasetPredictions(
        mean_proba=mean.numpy(),
        labels=data.y.numpy().astype(np.int64),
        scores={key: row.numpy() for key, row in zip(SCORES, scores, strict=True)},
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


# ----------------------------------------------------------------------------- basic metrics


def _check(proba: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    proba, labels = np.asarray(proba, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    if proba.ndim != 2 or labels.shape != (proba.shape[0],):
        raise ValueError(f"expected proba (N, K) and labels (N,), got {proba.shape} and {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= proba.shape[1]):
        raise ValueError(f"labels must lie in [0, {proba.shape[1]}), got {labels.min()}..{labels.max()}")
    return proba, labels


def accuracy(proba: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of examples whose most probable class is the true one."""
    proba, labels = _check(proba, labels)
    return float((proba.argmax(1) == labels).mean())


def negative_log_likelihood(proba: np.ndarray, labels: np.ndarray, eps: float = 1e-12) -> float:
    """Mean −log p̄_y (nats); probabilities are floored at ``eps`` to keep it finite."""
    proba, labels = _check(proba, labels)
    return float(-np.log(np.maximum(proba[np.arange(len(labels)), labels], eps)).mean())


def brier_score(proba: np.ndarray, labels: np.ndarray) -> float:
    """Mean Σ_k (p̄_k − 1[y = k])², the multi-class Brier score in [0, 2]."""
    proba, labels = _check(proba, labels)
    target = np.eye(proba.shape[1])[labels]
    return float(((proba - target) ** 2).sum(1).mean())


@dataclass(frozen=True)
class ReliabilityDiagram:
    """Per confidence bin: edges (B+1,), counts, mean confidence and accuracy (B,).

    Empty bins have NaN confidence and accuracy.
    """

    edges: np.ndarray
    counts: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray

    @property
    def ece(self) -> float:
        """Σ_b (n_b / N) |acc_b − conf_b| over non-empty bins."""
        n = self.counts.sum()
        if n == 0:
            return float("nan")
        filled = self.counts > 0
        gaps = np.abs(self.accuracy[filled] - self.confidence[filled])
        return float((self.counts[filled] / n * gaps).sum())


def _binned(confidence: np.ndarray, hit: np.ndarray, bins: int) -> ReliabilityDiagram:
    edges = np.linspace(0.0, 1.0, bins + 1)
    # Bins are (lo, hi], the first also holds 0; a confidence of exactly 1 lands in the last.
    index = np.clip(np.ceil(confidence * bins).astype(np.int64) - 1, 0, bins - 1)
    counts = np.bincount(index, minlength=bins).astype(np.float64)
    conf_sum = np.bincount(index, weights=confidence, minlength=bins)
    hit_sum = np.bincount(index, weights=hit.astype(np.float64), minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return ReliabilityDiagram(edges, counts, conf_sum / counts, hit_sum / counts)


def reliability_diagram(proba: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> ReliabilityDiagram:
    """Top-label reliability: confidence max_k p̄_k against accuracy, in equal-width bins."""
    proba, labels = _check(proba, labels)
    return _binned(proba.max(1), proba.argmax(1) == labels, bins)


def expected_calibration_error(proba: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> float:
    """Top-label ECE (Guo et al. 2017) with ``bins`` equal-width confidence bins."""
    return reliability_diagram(proba, labels, bins).ece


def classwise_calibration_error(
    proba: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS
) -> tuple[float, np.ndarray]:
    """Classwise ECE (Kull et al. 2019): for each class k, the ECE of p̄_k against 1[y = k].

    Returns ``(mean over classes, per-class values (K,))``.
    """
    proba, labels = _check(proba, labels)
    per_class = np.array(
        [_binned(proba[:, k], labels == k, bins).ece for k in range(proba.shape[1])]
    )
    return float(per_class.mean()), per_class


def confusion_matrix(predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Counts (K, K): row = true class, column = predicted class."""
    predictions, labels = np.asarray(predictions, np.int64), np.asarray(labels, np.int64)
    flat = labels * num_classes + predictions
    return np.bincount(flat, minlength=num_classes**2).reshape(num_classes, num_classes)


def soft_confusion_matrix(proba: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean p̄ of each class over the examples of each true class: (K, K), rows sum to 1.

    Rows of classes without examples are NaN.
    """
    proba, labels = _check(proba, labels)
    k = proba.shape[1]
    sums = np.zeros((k, k))
    np.add.at(sums, labels, proba)
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts[:, None]


def per_class_error(chain_predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Error rate of each chain on each true class: (C, K); NaN for classes without examples.

    ``chain_predictions`` (C, N) holds each chain's predicted class (a 1-d array is one chain).
    """
    preds = np.atleast_2d(np.asarray(chain_predictions, np.int64))
    labels = np.asarray(labels, np.int64)
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
    errors = np.stack(
        [np.bincount(labels, weights=(p != labels).astype(np.float64), minlength=num_classes) for p in preds]
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return errors / counts


def box_statistics(values: np.ndarray) -> dict[str, np.ndarray]:
    """Box-plot numbers over the first axis of ``values`` (C, K): min, q1, median, q3, max, mean.

    A class with no value at all (NaN in every chain: no test image of that class) gets NaN
    statistics, quietly: it is a fact about the data set, not a numerical accident.
    """
    values = np.asarray(values, dtype=np.float64)
    empty = np.isnan(values).all(axis=0)
    filled = np.where(empty, 0.0, values)
    q = np.nanquantile(filled, [0.0, 0.25, 0.5, 0.75, 1.0], axis=0)
    q[:, empty] = np.nan
    mean = np.nanmean(filled, axis=0)
    mean[empty] = np.nan
    return {"min": q[0], "q1": q[1], "median": q[2], "q3": q[3], "max": q[4], "mean": mean}


# ----------------------------------------------------------------------------- rejection


def default_rejection_rates() -> np.ndarray:
    """0, 0.01, ..., 0.95."""
    return np.round(np.arange(0, 96) / 100, 2)


def rejection_curve(
    correct: np.ndarray, scores: np.ndarray, rates: Sequence[float] | np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Accuracy on the inputs kept when the fraction ``rate`` with the highest scores is referred.

    At each rate, ⌊rate·N⌋ inputs are referred, most uncertain first. Among tied scores the
    choice is random, and the curve is its expectation (so a constant score gives a flat
    curve at the overall accuracy, whatever the input order). Returns
    ``(rates, accuracies)``; NaN where nothing is kept.
    """
    correct = np.asarray(correct, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    rates = default_rejection_rates() if rates is None else np.asarray(rates, dtype=np.float64)
    if np.any((rates < 0) | (rates > 1)):
        raise ValueError("rejection rates must lie in [0, 1]")
    n = len(correct)
    order = np.argsort(-scores, kind="stable")  # most uncertain first
    s, c = scores[order], correct[order]
    # groups of equal scores: [start, end) in sorted order and their numbers correct
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], n]
    group_correct = np.add.reduceat(c, starts) if n else np.zeros(0)
    after = np.r_[np.cumsum(group_correct[::-1])[::-1][1:], 0.0]  # correct in later groups
    referred = np.floor(rates * n + 1e-9).astype(np.int64)
    kept = n - referred
    g = np.clip(np.searchsorted(ends, referred, side="right"), 0, max(len(starts) - 1, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        if n:
            # within the partly referred group, each input is kept with equal probability
            size = ends[g] - starts[g]
            kept_in_group = np.clip(ends[g] - referred, 0, size)
            kept_correct = after[g] + group_correct[g] * kept_in_group / size
        else:
            kept_correct = np.zeros(len(rates))
        acc = np.where(kept > 0, kept_correct / np.maximum(kept, 1), np.nan)
    return rates, acc


def oracle_rejection_curve(accuracy_at_zero: float, rates: np.ndarray) -> np.ndarray:
    """Best possible curve: the errors are referred first, min(1, acc / (1 − rate))."""
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, accuracy_at_zero / np.maximum(1.0 - np.asarray(rates), 1e-12))


# ----------------------------------------------------------------------------- OOD


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    average = ends - (counts - 1) / 2.0
    return average[inverse]


def auroc(negatives: np.ndarray, positives: np.ndarray) -> float:
    """Area under the ROC curve for telling positives (higher scores) from negatives.

    Equals P(score⁺ > score⁻) + ½ P(score⁺ = score⁻) (Mann–Whitney U / n⁺n⁻).
    """
    neg = np.asarray(negatives, dtype=np.float64).ravel()
    pos = np.asarray(positives, dtype=np.float64).ravel()
    if len(neg) == 0 or len(pos) == 0:
        raise ValueError("AUROC needs at least one positive and one negative")
    ranks = _average_ranks(np.concatenate([neg, pos]))
    u = ranks[len(neg) :].sum() - len(pos) * (len(pos) + 1) / 2.0
    return float(u / (len(pos) * len(neg)))


def average_precision(negatives: np.ndarray, positives: np.ndarray) -> float:
    """Area under the precision–recall curve (positives = higher scores), step-wise.

    AP = Σ_t (R_t − R_{t−1}) P_t over the distinct score thresholds t, highest first; tied
    scores enter together.
    """
    neg = np.asarray(negatives, dtype=np.float64).ravel()
    pos = np.asarray(positives, dtype=np.float64).ravel()
    if len(pos) == 0:
        raise ValueError("average precision needs at least one positive")
    scores = np.concatenate([pos, neg])
    is_pos = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    order = np.argsort(-scores, kind="stable")
    scores, is_pos = scores[order], is_pos[order]
    last_of_group = np.r_[scores[1:] != scores[:-1], True]
    tp = np.cumsum(is_pos)[last_of_group]
    predicted = (np.arange(1, len(scores) + 1))[last_of_group]
    precision = tp / predicted
    recall = tp / len(pos)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


@dataclass(frozen=True)
class OodResult:
    """Detection of OOD inputs by one score (higher = more likely OOD)."""

    score: str
    auroc: float | None  # None: the score is the same for every image (n/a, not 0.5)
    aupr_out: float | None  # OOD as positives
    aupr_in: float | None  # in-distribution as positives, by −score


def ood_detection(in_scores: Mapping[str, np.ndarray], ood_scores: Mapping[str, np.ndarray]) -> list[OodResult]:
    """AUROC and AUPR (both ways) of every score present in both mappings."""
    out = []
    for name in in_scores:
        if name not in ood_scores:
            continue
        a, b = np.asarray(in_scores[name]), np.asarray(ood_scores[name])
        if np.ptp(np.concatenate([a.ravel(), b.ravel()])) == 0:
            # e.g. the mutual information of a one-draw posterior, 0 by construction: an AUROC
            # of 0.5 would read as a measured failure to detect, so it is n/a
            out.append(OodResult(name, None, None, None))
            continue
        out.append(OodResult(name, auroc(a, b), average_precision(a, b), average_precision(-b, -a)))
    return out


def score_edges(
    score: str, num_classes: int, values: Sequence[np.ndarray] = (), bins: int = 30
) -> np.ndarray:
    """Bin edges shared by every histogram of one score in a comparison.

    They span the score's theoretical range (:func:`score_range`), cut down to the largest
    value in ``values`` (all posteriors and sets together) so that small scores, such as
    the mutual information of a few ensemble members, do not all fall into the first bin.
    """
    lo, hi = score_range(score, num_classes)
    top = max((float(np.max(v)) for v in values if len(v)), default=hi)
    if lo < top < hi:
        hi = top * (1 + 1e-9)
    return np.linspace(lo, hi, bins + 1)


def score_histograms(
    scores: np.ndarray, score: str, num_classes: int, bins: int = 30, edges: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of a score as fractions of the inputs: (fractions, edges).

    ``edges`` default to the score's full fixed range (:func:`score_range`); values outside
    are counted in the first or last bin.
    """
    if edges is None:
        edges = score_edges(score, num_classes, bins=bins)
    clipped = np.clip(np.asarray(scores, dtype=np.float64), edges[0], edges[-1])
    counts, _ = np.histogram(clipped, bins=edges)
    return counts / max(len(clipped), 1), edges


# ----------------------------------------------------------------------------- rotation sweep


@dataclass(frozen=True)
class RotationSweep:
    """Predictions for one image rotated through ``angles`` (A,) degrees (K classes).

    ``median``, ``lower``, ``upper`` and ``mean`` are (A, K) per-class probabilities (the
    band is the equal-tailed credible interval at ``level``); ``total``, ``aleatoric`` and
    ``epistemic`` are (A,) entropies in nats.
    """

    angles: np.ndarray
    mean: np.ndarray
    median: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    total: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray
    level: float
    #: the share of the posterior the band holds on average at this number of draws
    #: (:func:`core.analysis.uncertainty.expected_coverage`), below ``level`` with too few
    expected_coverage: float | None = None
    #: what was swept, in words ("rotation", "Gaussian noise": :mod:`core.analysis.corruption`),
    #: and what ``angles`` holds, with its unit (the plots' horizontal axis)
    swept: str = "rotation"
    axis: str = "angle (degrees)"
    #: the swept quantity's column name in tables ("angle", "severity", "patch_centre_px")
    parameter: str = "angle"
    #: ``axis`` in fewer words, for a narrow plot ("" when ``axis`` is short already)
    axis_short: str = ""


def rotation_angles(stop: float = 180.0, step: float = 10.0, start: float = 0.0) -> np.ndarray:
    """start, start + step, ..., stop (inclusive when it falls on the grid)."""
    if step <= 0:
        raise ValueError("the angle step must be positive")
    count = int(math.floor((stop - start) / step + 1e-9)) + 1
    return start + step * np.arange(count)


def rotation_sweep(
    posterior: Posterior,
    image: torch.Tensor,
    angles: Sequence[float] | np.ndarray | None = None,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
    level: float = 0.9,
) -> RotationSweep:
    """Rotate one image (H, W), (1, H, W) or (1, 1, H, W) through ``angles`` and predict.

    Defaults to 0–180° in 10° steps. All rotations go through the posterior as one batch.
    """
    angles = rotation_angles() if angles is None else np.asarray(angles, dtype=np.float64)
    image = torch.as_tensor(image, dtype=torch.float32)
    image = image.reshape(1, 1, *image.shape[-2:])
    batch = rotate(image.expand(len(angles), -1, -1, -1), torch.as_tensor(angles, dtype=torch.float32))
    return batch_sweep(posterior, batch, angles, num_samples, generator, level)


def batch_sweep(
    posterior: Posterior,
    batch: torch.Tensor,
    values: np.ndarray,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
    level: float = 0.9,
    swept: str = "rotation",
    axis: str = "angle (degrees)",
    parameter: str = "angle",
    axis_short: str = "",
) -> RotationSweep:
    """Predict ``batch`` (A, C, H, W), one image per swept value ``values`` (A,), as one batch and
    summarise it per value: the shared half of the rotation and corruption sweeps."""
    samples = posterior.predict_proba(batch, num_samples=num_samples, generator=generator).double()
    lower, upper = credible_interval(samples, level)
    return RotationSweep(
        angles=np.asarray(values, dtype=np.float64),
        mean=samples.mean(0).numpy(),
        median=torch.quantile(samples, 0.5, dim=0).numpy(),
        lower=lower.numpy(),
        upper=upper.numpy(),
        total=predictive_entropy(samples).numpy(),
        aleatoric=expected_entropy(samples).numpy(),
        epistemic=mutual_information(samples).numpy(),
        level=level,
        expected_coverage=expected_coverage(samples.shape[0], level),
        swept=swept,
        axis=axis,
        parameter=parameter,
        axis_short=axis_short,
    )


# ----------------------------------------------------------------------------- drop rate


@dataclass(frozen=True)
class DropRateSensitivity:
    """Accuracy over chains for each drop rate (R rates): the D-SGHMC paper's Figs. 2, 9."""

    rates: np.ndarray  # (R,)
    accuracies: list[np.ndarray]  # R arrays, one accuracy per chain
    mean: np.ndarray
    std: np.ndarray  # sample standard deviation over chains (ddof=1; 0 for one chain)
    median: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray

    def rows(self) -> list[dict[str, float]]:
        return [
            {"drop_rate": float(r), "chains": len(a), "mean": float(m), "std": float(s),
             "median": float(md), "min": float(lo), "max": float(hi)}
            for r, a, m, s, md, lo, hi in zip(
                self.rates, self.accuracies, self.mean, self.std, self.median,
                self.minimum, self.maximum, strict=True,
            )
        ]


def drop_rate_sensitivity(accuracies: Mapping[float, Sequence[float]]) -> DropRateSensitivity:
    """Summarise per-rate, per-chain accuracies ``{drop_rate: [acc_chain0, ...]}``, by rate."""
    if not accuracies:
        raise ValueError("no drop rates given")
    rates = np.array(sorted(accuracies), dtype=np.float64)
    arrays = [np.asarray(accuracies[r], dtype=np.float64).ravel() for r in sorted(accuracies)]
    if any(len(a) == 0 for a in arrays):
        raise ValueError("every drop rate needs at least one chain's accuracy")
    return DropRateSensitivity(
        rates=rates,
        accuracies=arrays,
        mean=np.array([a.mean() for a in arrays]),
        std=np.array([a.std(ddof=1) if len(a) > 1 else 0.0 for a in arrays]),
        median=np.array([np.median(a) for a in arrays]),
        minimum=np.array([a.min() for a in arrays]),
        maximum=np.array([a.max() for a in arrays]),
    )


def rotation_sweeps(
    posteriors: Sequence[tuple[str, Posterior, int | None]],
    image: torch.Tensor | np.ndarray,
    angles: Sequence[float] | np.ndarray | None = None,
    level: float = 0.9,
    seed: int | None = 0,
) -> Generator[ProgressRecord, None, dict[str, RotationSweep]]:
    """:func:`rotation_sweep` for several posteriors ``(key, posterior, num_samples)``.

    Yields a :class:`ProgressRecord` after each posterior (``values["done"]`` is its index)
    so a worker can show progress and stop between posteriors; returns the sweeps by key.
    """
    sweeps: dict[str, RotationSweep] = {}
    total = len(posteriors)
    yield ProgressRecord(0, total, {}, phase="sweep")
    for i, (key, posterior, num_samples) in enumerate(posteriors):
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        sweeps[key] = rotation_sweep(posterior, torch.as_tensor(np.asarray(image, dtype=np.float32)),
                                     angles, num_samples, generator, level)
        yield ProgressRecord(i + 1, total, {"done": float(i)}, phase="sweep")
    return sweeps
