"""The curvature at the mode as a scaled identity plus its main directions: a cheap fixed metric.

The dense curvature metric (:class:`~core.engine.inference.curvature.DenseMetric`) reads its
P × P matrix for every velocity M⁻¹r: at 5,130 weights (a head of 10 classes on 512 features)
that is 105 MB a leapfrog step, about half the step's time (docs/performance.md, "Building a
feature tier"). On such a head most of the spectrum of M is one level: at 8,026 images × 512
features its eigenvalues have median 1.02 and 99th percentile 2.15, with a few up to 31.9. With
U (P × k, orthonormal columns) the eigenvectors of the k eigenvalues Λ that stand out from that
level and c the level itself,

    M̃ = c (I − U Uᵀ) + U Λ Uᵀ,   M̃^a = c^a I + U (Λ^a − c^a) Uᵀ   (a = ½, −½, −1),

so every product the samplers take (the momentum M̃^½ z, the velocity M̃⁻¹ r, the spread and
whitening M̃^−½) is two thin products with U: 4·P·k multiply-adds a chain instead of P² (k = 256
of 5,130: a tenth; U is 5 MB). M̃ is M exactly along U and c elsewhere, so along a dropped
direction whose eigenvalue λ lies within a factor ``ratio`` of c the whitened posterior is
√(c/λ) wide instead of 1: a trajectory of time τ turns it by τ√(λ/c) instead of τ. Like any
fixed metric it changes how a sampler moves, not what it targets (HMC's Metropolis test keeps
the law exact whatever M̃ is).

The rule for k: c is the median eigenvalue of M; every eigenvalue outside [c/ratio, c·ratio]
is kept, the farthest from c (in log) first, at most ``cap`` of them (:data:`RATIO`,
:data:`RANK_CAP`). ``ratio=1, cap=P`` keeps the whole spectrum, and M̃ is then M.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Generator
from typing import Any

import torch

from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.inference.build_cache import once_per_build
from core.engine.inference.chains import Params
from core.engine.inference.curvature import DenseMetric, mode_and_curvature
from core.engine.inference.param_layout import ParamLayout
from core.engine.inference.slots import ChainSlots, chain_slots
from core.engine.models import ArchSpec

#: An eigenvalue of M is kept as its own direction when it lies outside a factor RATIO of the
#: median eigenvalue: the dropped directions are then at most √1.25 = 1.12 times too wide or too
#: narrow in the metric's units, and a trajectory of π/2 turns them by at most 1.76 instead of
#: 1.57 radians. On the features benchmark's head (8,026 images × 512 features, 5,130 weights) the
#: spectrum has a gap there: median 1.021, 95th percentile 1.126, none between 1.2 and 1.5 times
#: the median, and 90 eigenvalues above it up to 31.9 (none below): k = 90 at any RATIO from 1.2 to
#: 1.5 (docs/performance.md, "Building a feature tier").
RATIO = 1.25
#: At most this many directions (the farthest from the median first): U of 256 × 5,130 float32
#: weights is 5 MB against the dense metric's 105 MB, a product of 8 chains about 21 MFLOP.
RANK_CAP = 256


def split_spectrum(values: torch.Tensor, ratio: float = RATIO, cap: int = RANK_CAP) -> tuple[float, torch.Tensor]:
    """(c, kept): the bulk level c (the median of ``values``) and the indices of the eigenvalues
    kept as directions of their own (outside [c/ratio, c·ratio], at most ``cap``, farthest from c
    in log first)."""
    if ratio < 1 or cap < 0:
        raise ValueError("ratio must be at least 1 and cap not negative")
    c = float(values.median())
    distance = (values.double() / c).log().abs()
    outside = torch.nonzero(distance > math.log(ratio)).flatten()
    order = torch.argsort(distance[outside], descending=True, stable=True)
    return c, outside[order][:cap]


class LowRankMetric:
    """M̃ = c(I − UUᵀ) + UΛUᵀ over θ flattened in ``shapes``' order, shared by the chains, with the
    interface of :class:`~core.engine.inference.curvature.DenseMetric` (see the module's docstring).

    Each product is one product over the run's chain slots (:mod:`~core.engine.inference.slots`):
    (slots, P) × (P, k), scaled per direction, × (k, P), plus c^a times the input; the shapes and
    strides do not depend on which chains are present, so a chain's numbers are the same bits
    alone as beside others. Kept in ``dtype`` (float32 for the samplers; float64 to compare with
    the dense matrix).
    """

    def __init__(self, values: torch.Tensor, vectors: torch.Tensor, bulk: float, shapes: dict[str, torch.Size],
                 dtype: torch.dtype = torch.float32) -> None:
        if bulk <= 0 or bool((values <= 0).any()):
            raise ValueError("the metric's eigenvalues must be positive")
        self.shapes = shapes
        self.layout = ParamLayout(list(shapes.items()))
        self.about: dict[str, Any] = {}
        self.mode: Params = {}
        self.slots: ChainSlots | None = None
        self.dtype = dtype
        self.bulk = float(bulk)
        self.values = values.to(dtype)
        self.vectors = vectors.to(dtype).contiguous()  # U, (P, k)
        #: Λ^a − c^a per power a, in float64 before the cast (c^a I + U diag(·) Uᵀ is M̃^a)
        self._shift = {a: (values.double() ** a - self.bulk ** a).to(dtype) for a in (0.5, -0.5, -1.0)}

    @classmethod
    def of_precision(cls, mass: torch.Tensor, shapes: dict[str, torch.Size], ratio: float = RATIO,
                     cap: int = RANK_CAP, dtype: torch.dtype = torch.float32) -> LowRankMetric:
        """M̃ from the symmetric positive-definite ``mass`` M, eigendecomposed in its own dtype
        (float32 takes about half float64's time), by the rule of :func:`split_spectrum`."""
        values, vectors = torch.linalg.eigh(mass)
        bulk, kept = split_spectrum(values, ratio, cap)
        metric = cls(values[kept], vectors[:, kept], bulk, shapes, dtype)
        metric.about = {"rank": int(kept.numel()), "bulk": bulk, "ratio": ratio, "cap": cap,
                        "largest": float(values[-1]), "smallest": float(values[0])}
        return metric

    @property
    def rank(self) -> int:
        return int(self.values.numel())

    def in_slots(self, slots: ChainSlots) -> LowRankMetric:
        """This metric (its tensors shared, not copied) for a run whose chains sit in ``slots``."""
        placed = copy.copy(self)
        placed.slots = slots
        return placed

    def flatten(self, tree: Params) -> torch.Tensor:
        return torch.cat([tree[k].flatten(1) for k in self.shapes], dim=1).to(self.dtype)

    def unflatten(self, flat: torch.Tensor, like: Params) -> Params:
        return {k: v.to(like[k].dtype) for k, v in self.layout.unflatten(flat).items()}

    def _power(self, flat: torch.Tensor, power: float) -> torch.Tensor:
        """M̃^power times each chain's row of ``flat``, as fresh (chains, P) rows."""
        slots = chain_slots(self.slots, flat.shape[0])
        placed = slots.place(flat)
        along = (placed @ self.vectors) * self._shift[power]  # (slots, k)
        return slots.take(self.bulk ** power * placed + along @ self.vectors.T)

    def _apply(self, tree: Params, power: float) -> Params:
        return self.unflatten(self._power(self.flatten(tree), power), tree)

    def momentum(self, z: Params) -> Params:
        """M̃^½ z: a momentum r ~ N(0, M̃) from z ~ N(0, I)."""
        return self._apply(z, 0.5)

    def velocity(self, momentum: Params) -> Params:
        return self._apply(momentum, -1.0)

    def kinetic(self, momentum: Params) -> torch.Tensor:
        r = self.flatten(momentum)
        return 0.5 * (r * self._power(r, -1.0)).sum(1)

    def momentum_and_velocity(self, z: Params) -> tuple[Params, Params]:
        """(r, M̃⁻¹r) of r = M̃^½ z: M̃⁻¹r = M̃^−½ z."""
        return self.momentum(z), self.spread(z)

    def spread(self, z: Params) -> Params:
        """M̃^−½ z, a draw of N(0, M̃⁻¹) from z ~ N(0, I)."""
        return self._apply(z, -0.5)

    def whiten(self, g: Params) -> Params:
        """M̃^−½ g: ``spread(whiten(g))`` is M̃⁻¹g."""
        return self._apply(g, -0.5)


def lowrank_of_dense(dense: DenseMetric, ratio: float = RATIO, cap: int = RANK_CAP) -> LowRankMetric:
    """M̃ of the dense metric's M = L Lᵀ (rebuilt from its float32 factor L and eigendecomposed in
    float32: at 5,130 weights 21 s of CPU against 38 in float64 for the eigendecomposition, and
    M̃ is a metric, which needs no more than float32's precision), with its mode and records."""
    metric = LowRankMetric.of_precision(dense.chol @ dense.chol.T, dense.shapes, ratio, cap)
    metric.about = {**copy.deepcopy(dense.about), "kind": "curvature-lowrank", **metric.about}
    metric.mode = {k: v.clone() for k, v in dense.mode.items()}
    return metric


def _lowrank_inputs(arch: ArchSpec, data: Dataset, prior_std: float, dense: DenseMetric,
                    total: int = 0) -> tuple[Any, ...]:
    return arch, data, float(prior_std)  # ``dense`` is the curvature these determine


def _copy_metric(metric: LowRankMetric) -> LowRankMetric:
    fresh = copy.copy(metric)
    fresh.about, fresh.mode = copy.deepcopy(metric.about), {k: v.clone() for k, v in metric.mode.items()}
    return fresh


@once_per_build(_lowrank_inputs, _copy_metric)  # its eigendecomposition once per build (build_cache)
def lowrank_curvature(arch: ArchSpec, data: Dataset, prior_std: float, dense: DenseMetric,
                      total: int = 0) -> Generator[ProgressRecord, None, LowRankMetric]:
    """:func:`lowrank_of_dense` of ``dense``, the curvature :func:`mode_and_curvature` found for
    ``arch``, ``data`` and ``prior_std`` (called after it, not inside it: the build's store holds
    one lock at a time)."""
    yield ProgressRecord(0, total, {}, "main directions of the curvature")
    return lowrank_of_dense(dense)


def mode_and_lowrank_curvature(
    arch: ArchSpec, data: Dataset, prior_std: float, total: int = 0
) -> Generator[ProgressRecord, None, tuple[Params, float, LowRankMetric]]:
    """θ*, log p(θ* | D) and M̃ of the curvature there: :func:`mode_and_curvature` (shared with the
    build's samplers that take the dense metric), then its eigendecomposition (once per build)."""
    mode, mode_logp, dense = yield from mode_and_curvature(arch, data, prior_std, total)
    metric = yield from lowrank_curvature(arch, data, prior_std, dense, total)
    return mode, mode_logp, metric
