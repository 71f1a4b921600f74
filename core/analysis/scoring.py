"""The per-image scores of a posterior's draws, a part of a data set at a time.

:class:`PartScorer` takes p̄, the six uncertainty scores of :data:`SCORES` and each chain's
predicted class from S draws of n images, from the draws' class probabilities or, for stored
draws (:func:`core.analysis.streaming.predict_dataset`), from their logits; :func:`batch_scores`
is the same for one tensor of probabilities. :class:`ClassOrder` and :func:`first_argmax` read
the classes' order of few-class rows faster than torch's own reductions.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch

from core.analysis.predictive import ProbabilitiesNotFiniteError
from core.analysis.uncertainty import DEFAULT_BINS

#: Bytes of float64 probabilities scored at once: the scores' passes over the draws then run
#: in the processor's cache instead of main memory (2-4x faster on the 2-core machine).
SCORE_BYTES = 4 << 20
#: Bytes per draw-image-class the scoring holds besides the float32 probabilities: the
#: float64 copy and one float64 temporary (:class:`PartScorer`'s buffers).
SCORE_TEMPORARY_BYTES = 16
#: Bytes per draw-image the scoring holds besides: the top two classes' pair of probabilities
#: in float64, their bins and their histograms' cells (int32), and the normaliser of each
#: draw's logits (float64), each a buffer made once; and the logarithms of the normalisers'
#: products (float64, one for each 1-8 draws) while Σ_s log Z_s is summed.
SCORE_PAIR_BYTES = 48

#: The per-example uncertainty scores, each "higher = more uncertain".
SCORES: tuple[str, ...] = (
    "total",  # predictive entropy H[p̄] (nats)
    "aleatoric",  # expected entropy E_s H[p_s]
    "epistemic",  # mutual information
    "epistemic_variance",  # Σ_k Var_s[p_sk]
    "one_minus_max_prob",  # 1 − max_k p̄_k
    "top_two_overlap",  # Bhattacharyya coefficient of the top two classes
)


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
    scored = PartScorer(torch.zeros(s, dtype=torch.long), k, max(n, 1), bins).score(samples)
    if scored is None:
        raise ProbabilitiesNotFiniteError("some class probabilities are not numbers, so they cannot be scored")
    return dict(zip(SCORES, scored[1], strict=True))


class PartScorer:
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
        self.s, self.k, self.bins, self.images = s, k, bins, images
        self.chains = chains
        self.ones = torch.ones(1, s, dtype=torch.float64)
        self.ones_k = torch.ones(k, dtype=torch.float64)
        self.ones_sk = torch.ones(s * k, dtype=torch.float64)
        if s == 1:  # one draw (MAP): one chain, no sort to find it
            self.present, counts = chains, torch.ones(1, dtype=torch.long)
        else:  # chains that received a sample
            self.present, counts = torch.unique(chains, return_counts=True)
        self.num_chains = len(self.present)
        self.chain_counts = counts.double().unsqueeze(1)
        # a chain's draws are one run of rows (SampledPosterior's order): its sum is one
        # product with its own rows; in any other order, a product with its 0/1 weights
        runs = s == 1 or bool((chains[1:] >= chains[:-1]).all())
        edges = [0, *torch.cumsum(counts, 0).tolist()]
        self.chain_rows = [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)] if runs else None
        # chains of as many draws each, one run of rows each: their sums one reduction
        self.chain_length = s // self.num_chains if runs and bool((counts == counts[0]).all()) else None
        # flat, so that a part of fewer images is one contiguous (S, n·K) block, which the
        # softmax of logits views as (S·n, K) rows
        self.draws = torch.empty(s * images * k, dtype=torch.float64)
        self.temporary = torch.empty(s * images * k, dtype=torch.float64)

    # What only some paths use is made on first use: one draw's logits (MAP) need none of it,
    # and a scorer is made for every data set evaluated, where the face MAP's whole scoring is
    # a few hundred µs.
    @functools.cached_property
    def member(self) -> torch.Tensor:
        """Each chain's 0/1 weights of the draws (C, S)."""
        return (self.chains.unsqueeze(0) == self.present.unsqueeze(1)).double()

    @functools.cached_property
    def sums(self) -> torch.Tensor:
        """The three per-class sums of a part, (3, n·K) contiguous, flat."""
        return torch.empty(3 * self.images * self.k, dtype=torch.float64)

    @functools.cached_property
    def cells(self) -> torch.Tensor:
        """Each image's two histograms' first cells (images, 2), int32 as the bins."""
        return self.bins * torch.arange(2 * self.images, dtype=torch.int32).view(self.images, 2)

    @functools.cached_property
    def norms(self) -> torch.Tensor:
        """The normaliser Z of each draw's logits of a part, flat."""
        return torch.empty(self.s * self.images, dtype=torch.float64)

    @functools.cached_property
    def pair(self) -> torch.Tensor:
        """The top two classes' probabilities of each draw of a part, flat."""
        return torch.empty(self.s * self.images * 2, dtype=torch.float64)

    @functools.cached_property
    def pair_bins(self) -> torch.Tensor:
        """Their bins with each image's and class's first cell added, flat, int32."""
        return torch.empty(self.s * self.images * 2, dtype=torch.int32)

    @functools.cached_property
    def draw_cells(self) -> torch.Tensor:
        """Each image's two histograms' first cells, for its top two classes of each draw laid
        out image by image, (images, S, 2), for the logits' path. Added as (n, 1, 2), broadcast
        over the draws, the offsets cost 4-5 times a plain sum of two tensors (the face
        ensemble's 5 draws of 4,623 images: 0.21 against 0.04 ms)."""
        return self.cells.unsqueeze(1).expand(self.images, self.s, 2).contiguous()

    def score(self, part: torch.Tensor, logits: bool = False,
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """p̄ (n, K), the scores (len(SCORES), n) in the order of :data:`SCORES` and each
        chain's arg-max (C, n) of ``part`` (S, n, K): class probabilities, never negative, or
        with ``logits`` the draws' logits, whose softmax is taken here in float64
        (:meth:`_softmax`). None where some p̄ is not finite (a draw that is not a number
        makes its image's p̄ one), for the caller to word."""
        if logits:
            return self._score_logits(part)
        s, n, k = part.shape
        d = self.draws[: s * n * k].view(s, n * k)
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
        # each class's histogram is its own, so binning only the top two gives their rows exactly
        pair = self.pair[: s * n * 2].view(s, n, 2)
        torch.gather(d.view(s, n, k), -1, order.top_two().unsqueeze(0).expand(s, n, 2), out=pair)
        overlap = self._overlap_of_pair(pair, self.cells[:n])
        sums = self.sums[: 3 * n * k].view(3, n * k)
        torch.clamp_min(mean.view(1, -1), _TINY, out=sums[:1]).log_().mul_(mean.view(1, -1))
        t = self.temporary[: s * n * k].view(s, n * k)
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

    def _score_logits(self, part: torch.Tensor, shift: bool = False,
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """:meth:`score` of logits ``part`` (S, n, K), taken in their own memory order.

        Stored draws' logits come from one product of the images with every draw's weights,
        laid out image by image, (n, S, K) in memory: they are scored so, where laying them out
        draw by draw cost as much again as the softmax. Each image's draws are then one
        contiguous row of S·K values, so the per-image sums over draws and classes (of p z and
        of p²) are one matrix-vector product, and p̄ a sum over the middle dimension.

        The logits are exponentiated as they are, or with ``shift`` (where that fails: see
        :meth:`_softmax`) less each draw's largest.
        """
        s, n, k = part.shape
        z = self.draws[: s * n * k].view(n, s * k)
        p = self.temporary[: s * n * k].view(n, s * k)
        z.view(n, s, k).copy_(part.transpose(0, 1))  # float64 before anything else
        if s == 1:
            return self._one_draw_logits(part, z, p, shift)
        norms = self._softmax(z, p, shift)
        if norms is None:
            return None if shift else self._score_logits(part, shift=True)
        draws = p.view(n, s, k)
        chain_sums = None
        if 1 < self.num_chains < s and self.chain_length is not None:
            chain_sums = draws.view(n, self.num_chains, self.chain_length, k).sum(2).transpose(0, 1)  # (C, n, K)
            mean = chain_sums.sum(0).div_(s)
        elif 1 < self.num_chains < s and self.chain_rows is not None:
            chain_sums = torch.stack([draws[:, r].sum(1) for r in self.chain_rows])
            mean = chain_sums.sum(0).div_(s)
        elif 1 < self.num_chains < s:  # chains whose draws are not runs of rows: their 0/1 weights
            chain_sums = torch.einsum("cs,nsk->cnk", self.member, draws)
            mean = chain_sums.sum(0).div_(s)
        else:
            mean = draws.sum(1).div_(s)
        # p̄ is finite here: _softmax accepted every Z as a finite number above 0, so every p is
        # one (a NaN or an infinite logit fails its check), and needs no check of its own
        order = ClassOrder(mean)
        # each draw's entropy log Z − Σ_k p_k z_k, summed over the draws: Σ_s log Z_s less the
        # sum of the row p·z (no logarithm a value, one for every few draws)
        entropy_sum = _sum_of_logs(norms.view(n, s), self.ones_sk).sub_(torch.mul(p, z, out=z) @ self.ones_sk[: s * k])
        if not shift and not math.isfinite(float(entropy_sum.sum())):  # 0 · (−∞) where a logit is −∞
            return self._score_logits(part, shift=True)
        if self.num_chains == 1:
            chain_preds = order.first.unsqueeze(0)
        elif chain_sums is None:  # one draw a chain (an ensemble's members): its own p
            chain_preds = first_argmax(draws.transpose(0, 1))
        else:
            chain_preds = first_argmax(chain_sums.div_(self.chain_counts.unsqueeze(1)))
        pair = self.pair[: n * s * 2].view(n, s, 2)
        torch.gather(draws, -1, order.top_two().unsqueeze(1).expand(n, s, 2), out=pair)
        overlap = self._overlap_of_pair(pair, self.draw_cells[:n])
        plogp = self.sums[: n * k].view(n, k)
        total = (torch.clamp_min(mean, _TINY, out=plogp).log_().mul_(mean) @ self.ones_k).neg_() + 0.0
        # an entropy is never negative; the two sums' rounding could take a 0 a little below it
        aleatoric = entropy_sum.div_(s).clamp_min_(0)
        # Σ_k Var_s p_k = (Σ_s Σ_k p² − S Σ_k p̄²) / S, as the probabilities' path takes it; the
        # image's Σ p² as its row's squared norm, one read of the row (half a product and a sum;
        # draws certain of one class give sqrt(S)², a few 1e-16 from S, where a product with
        # ones gives S exactly and cost 2-5 % of the scoring)
        squares = torch.linalg.vector_norm(p, dim=1).square_()
        variance = squares.sub_(mean.square() @ self.ones_k * s).div_(s).clamp_min_(0)
        scores = torch.stack([
            total,
            aleatoric,
            (total - aleatoric).clamp_min_(0) + 0.0,
            variance,
            1 - order.largest,
            overlap,
        ])
        return mean, scores, chain_preds

    def _one_draw_logits(self, part: torch.Tensor, z: torch.Tensor, e: torch.Tensor, shift: bool,
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """:meth:`_score_logits` of one draw (MAP), its logits ``z`` (n, K) already in float64:
        the same arithmetic and the same bits, without what several draws need. p̄ is the draw's
        softmax, divided straight into the result (the sum over one draw and its division by 1
        were two more passes), and its entropy log Z − Σ_k p z without a sum of log Z over one
        draw. ``e`` is the buffer of the exponentials."""
        n, k = z.shape
        mean = torch.empty(n, k, dtype=torch.float64)
        norms = self._softmax(z, e, shift, into=mean)
        if norms is None:
            return None if shift else self._score_logits(part, shift=True)
        entropy = norms.log_().sub_(torch.mul(mean, z, out=z) @ self.ones_k)
        if not shift and not math.isfinite(float(entropy.sum())):  # 0 · (−∞) where a logit is −∞
            return self._score_logits(part, shift=True)
        order = ClassOrder(mean)
        return mean, self._one_draw(mean, order, entropy), order.first.unsqueeze(0)

    def _overlap_of_pair(self, pair: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
        """The overlap of each image's two histograms from ``pair``, the top two classes'
        probabilities of its S draws, (S, n, 2) or (n, S, 2), float64: binned by
        class_histograms' rule, (clamp(p, 0, 1)·bins).long() at most bins − 1, in one clamp of
        p·bins (the same bin for every p: p·bins ≥ bins − 1 lands in the last either way), each
        bin offset by its image's and class's first cell (``cells``, broadcast to ``pair``) and
        counted at once. The bins are int32 (torch converts to int64 at a quarter of the speed),
        and they and the pair live in buffers of the scorer's, so that no part pays for fresh
        memory (1 MB each for the face HMC's parts)."""
        n = pair.numel() // (2 * self.s)
        which = self.pair_bins[: pair.numel()].view(pair.shape)
        which.copy_(pair.mul_(self.bins).clamp_(0, self.bins - 1))  # truncated toward 0, as .long()
        which += cells
        counts = torch.bincount(which.view(-1), minlength=2 * n * self.bins).view(n, 2, self.bins)
        return _overlap(counts, self.s)

    def _softmax(self, z: torch.Tensor, p: torch.Tensor, shift: bool,
                 into: torch.Tensor | None = None) -> torch.Tensor | None:
        """The softmax of float64 logits ``z`` (rows of K classes) into ``p``, and Z of each row
        (its draw and image, one value a row, in :attr:`norms`); ``z`` is left as
        the logits the entropies need (log p = z − log Z). None where the logits need a
        ``shift`` they were not given, or, shifted, are not numbers or +∞ (the softmax of
        float32 logits is not one there either).

        Each draw's entropy is then log Z − Σ_k p_k z_k: one logarithm a draw instead of one a
        class, and exact to rounding where the logarithm of a float32 probability is not (it
        carries that probability's rounding, about 6e-8 of it). Unshifted, Z must lie within
        e^±:data:`UNSHIFTED` (no overflow, no underflow, a cancellation of log Z and Σ p z
        below 1e-14); finding each draw's largest logit costs torch as much as the exponential,
        so it is done only for the parts that need it.
        """
        k = self.k
        if shift:
            logits = z.view(-1, k)
            logits.sub_(logits.amax(1, keepdim=True))
            logits.clamp_min_(-_HUGE)  # −∞ (a class that cannot be) gives p = 0 and p·z = 0, not NaN
        torch.exp(z, out=p)
        rows = p.view(-1, k)
        norms = torch.mv(rows, self.ones_k, out=self.norms[: len(rows)])
        low, high = torch.aminmax(norms)
        # shifted, Z lies in [1, K] unless a logit was NaN or +∞; NaN fails either comparison
        if not (float(low) > _UNSHIFTED_LOW and float(high) < _UNSHIFTED_HIGH):
            return None
        if into is None:
            rows.div_(norms.unsqueeze(1))
        else:  # the probabilities into a tensor of their own, ``p`` left as the exponentials
            torch.div(rows, norms.unsqueeze(1), out=into.view(-1, k))
        return norms

    def _one_draw(self, p: torch.Tensor, order: ClassOrder, entropy: torch.Tensor | None = None) -> torch.Tensor:
        """The scores of one draw p (n, K), as :meth:`score` computes them for S draws with the
        parts that are 0 by construction left out: the same bits, without the S·N·K passes and
        the histograms that cost a one-draw posterior (MAP) more than its forward pass. Its
        aleatoric entropy is its total; the mutual information and variance are 0; two
        one-draw histograms overlap fully (1) where the two classes share a bin, else not at all
        (the top two values decide it, whichever of two equal classes topk would name)."""
        n, k = p.shape
        scores = torch.empty(len(SCORES), n, dtype=torch.float64)  # each row written in place
        if entropy is None:
            row = self.sums[: n * k].view(n, k)
            torch.clamp_min(p, _TINY, out=row).log_().mul_(p)
            torch.mv(row, self.ones_k, out=scores[0]).neg_().add_(0.0)  # never −0
        else:  # from the logits (:meth:`_score_logits`), never below 0
            torch.clamp_min(entropy, 0, out=scores[0])
        scores[1] = scores[0]
        scores[2:4] = 0.0
        torch.sub(1, order.largest, out=scores[4])
        first, second = ((v.clamp(0, 1) * self.bins).long().clamp_max_(self.bins - 1)
                         for v in (order.largest, order.second_value()))
        scores[5] = first == second
        return scores


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
#: (about 5 µs an operation against 40-120 ns a row). p̄'s order and 4 chains' arg-max, CPU
#: time at load 6, classes-first against torch's own: 655 rows 442 against 200 µs (8 classes),
#: 1,024 rows 490 against 339, 2,000 rows 709 against 648, 4,623 rows 1,178 against 1,469
#: (10 classes: 2,000 rows 543 against 603); the face SGHMC's parts of 655 images paid 1-1.6 ns
#: a draw-image-class value for it at 512.
CLASS_ORDER_ROWS = 2048


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


def _sum_of_logs(norms: torch.Tensor, ones: torch.Tensor) -> torch.Tensor:
    """Σ_s log Z_s of each row of ``norms`` (n, S), Z within e^±:data:`UNSHIFTED`: the
    logarithms of products of up to 8 draws' Z (each product within e^±512, far from float64's
    range; a rounding of 1e-16 of the product a factor, against the logarithm's own), a logarithm
    for every 8 draws instead of one a draw. The products fold each row's halves in place while
    S is even, so ``norms`` is overwritten. The logarithms are summed as a product with ``ones``
    (at least S of them): a sum over a short last dimension costs torch 40-120 ns a row."""
    m = norms.shape[1]
    for _ in range(3):
        if m % 2:
            break
        m //= 2
        norms[:, :m].mul_(norms[:, m : 2 * m])
    return norms[:, :m].log() @ ones[:m]


def _plogp(p: torch.Tensor) -> torch.Tensor:
    """p log p elementwise, 0 for p = 0, in one new tensor (clamp, then log and product in
    place: a third of ``xlogy``'s time, which tests every element in a scalar loop)."""
    terms = torch.clamp_min(p, _TINY)  # 0 · log(_TINY) is 0 where 0 · log 0 would be NaN
    return terms.log_().mul_(p)


def _overlap(counts: torch.Tensor, s: int) -> torch.Tensor:
    """The Bhattacharyya coefficient of each image's two histograms ``counts`` (n, 2, bins) of
    S draws, in float64: bhattacharyya_coefficient's float32 arithmetic (its clamp at 0 changes
    no count), the same bits.

    torch's float32 square root takes 7 times as long for 0 as for any other value here
    (0.34 against 0.05 ms for 92,000 values), and most bins of the two classes' histograms
    meet no draw of the other (the face ensemble: 0.48 ms of a 4.7 ms scoring): the empty
    products are rooted as 1 (whose root is 1) and set back to 0, so every other value is
    rooted by the same operation as before and summed in the same order. The flag of an
    empty bin is 1 − min(2S²·product, 1), exactly 0 or 1 (a product that is not 0 is at least
    about 1/S²): torch's comparison (0.12 ms) and ``masked_fill`` (0.1 ms each) cost more
    than they saved."""
    fractions = counts.float() / s  # float32, as class_histograms
    products = fractions[:, 0] * fractions[:, 1]
    empty = torch.mul(products, 2.0 * s * s).clamp_max_(1.0).neg_().add_(1.0)
    return products.add_(empty).sqrt_().sub_(empty).sum(-1).double()


#: The smallest positive float64: p·log p of a p below it is below 1e-305, so flooring p there
#: changes no entropy, and 0 · log(_TINY) is 0 where 0 · log 0 would be NaN.
_TINY = float(torch.finfo(torch.float64).tiny)
#: Logits whose normaliser Z = Σ_k e^z_k lies within e^±UNSHIFTED are exponentiated as they
#: are: |log Z| and the p-weighted mean Σ_k p_k z_k are then below about UNSHIFTED, so the
#: entropy log Z − Σ p z loses at most a few 1e-14 to their cancellation, and no e^z that
#: carries Z overflows or leaves the normal float64 range.
UNSHIFTED = 64.0
_UNSHIFTED_LOW, _UNSHIFTED_HIGH = math.exp(-UNSHIFTED), math.exp(UNSHIFTED)
#: A floor for shifted logits: −∞ (a class with no mass) becomes a number whose e^z is 0.
_HUGE = 1e300




def score_images(num_samples: int, num_classes: int) -> int:
    """Images scored at once: :data:`SCORE_BYTES` of float64 probabilities."""
    return max(1, SCORE_BYTES // (8 * num_samples * num_classes))

