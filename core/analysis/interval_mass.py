"""How much of the exact posterior each method's credible interval holds (numbers only).

A column's "90 % interval" for a class probability p_k is a statement about its own
approximation: 90 % of *its* draws of p_k lie inside. Beside the marks of exact inference
(the tier's reference, HMC) a person reads it as a statement about the posterior. This module
measures the share of the reference's belief the interval really holds: for every probe
input x and class k where the reference's mean probability exceeds :data:`MIN_MASS`,

    m(x, k) = (1/R) Σ_r 𝟙[ l_k(x) ≤ p_k^(r)(x) ≤ u_k(x) ],

where p^(1…R) are the reference's draws and [l_k, u_k] the method's equal-tailed interval
(:func:`core.analysis.uncertainty.credible_interval`, the one the column draws, from the
number of draws the column uses). An interval as wide as the posterior's gives m ≈ its level;
one too narrow gives less (a Gaussian at half the posterior's width: 2Φ(z/2) − 1 ≈ 0.59 for a
90 % interval); one too wide gives more. The record keeps the mean over cells, the 10th
percentile and the minimum.

The record, as kept in a posterior file's ``info["interval_mass"]``::

    {"level": 0.9 (asked), "stated_level": 0.9 (what the interval holds at these draws),
     "draws": 100, "mean": 0.09, "p10": 0.0, "min": 0.0, "cells": 1234, "min_mass": 0.01,
     "probe": "the first 1000 images of mnist-test",
     "reference": {"method": "hmc", "draws": 800}}
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.analysis.uncertainty import credible_interval, expected_coverage
from core.engine.inference.base import Dataset, Posterior, ProgressRecord, check_data_fits
from core.engine.naming import samples_used

#: Cells (input × class) whose reference mean probability is at most this are left out: a
#: class the reference all but rules out has no interval worth scoring.
MIN_MASS = 0.01
#: The number of draws a column uses at rest in the window (its Samples box's default).
WINDOW_SAMPLES = 100
#: Images per batch (reference draws × images × classes doubles stay near 64 MB for 800 draws).
BATCH = 1000


@dataclass(frozen=True)
class IntervalMass:
    """The share of the reference's draws inside a method's interval, per scored cell."""

    level: float  # the level asked
    stated_level: float  # what the interval holds at ``draws`` (:func:`expected_coverage`)
    draws: int  # the method's draws behind the interval
    reference_draws: int
    per_cell: np.ndarray = field(repr=False)  # (cells,) in [0, 1]

    @property
    def mean(self) -> float:
        return float(self.per_cell.mean()) if len(self.per_cell) else float("nan")

    @property
    def p10(self) -> float:
        return float(np.quantile(self.per_cell, 0.1)) if len(self.per_cell) else float("nan")

    def record(self) -> dict[str, Any]:
        """Mean, 10th percentile, minimum and what they were measured on, as written to JSON."""
        empty = not len(self.per_cell)
        return {"level": self.level, "stated_level": self.stated_level, "draws": self.draws,
                "mean": None if empty else self.mean, "p10": None if empty else self.p10,
                "min": None if empty else float(self.per_cell.min()), "cells": int(len(self.per_cell)),
                "min_mass": MIN_MASS}


def mass_inside(reference: torch.Tensor | np.ndarray, method: torch.Tensor | np.ndarray,
                level: float = 0.9, min_mass: float = MIN_MASS) -> np.ndarray:
    """Per scored cell, the share of ``reference``'s draws (R, …) inside ``method``'s (S, …)
    equal-tailed ``level`` interval; cells whose reference mean is at most ``min_mass`` are
    left out. The trailing shapes must agree (e.g. inputs × classes)."""
    ref = torch.as_tensor(np.asarray(reference, dtype=np.float64))
    draws = torch.as_tensor(np.asarray(method, dtype=np.float64))
    if ref.shape[1:] != draws.shape[1:]:
        raise ValueError(f"the reference's and the method's draws describe different quantities: "
                         f"{tuple(ref.shape[1:])} against {tuple(draws.shape[1:])}")
    if len(draws) < 2:
        raise ValueError("one draw has no interval: the method needs at least 2 draws")
    lower, upper = credible_interval(draws, level)
    inside = ((ref >= lower) & (ref <= upper)).double().mean(0)
    scored = ref.mean(0) > min_mass
    return inside[scored].numpy()


def why_no_interval(posterior: Posterior, num_samples: int | None = None) -> str | None:
    """Why ``posterior`` has no interval to score (one draw: a MAP fit), or None."""
    draws = samples_used(posterior, WINDOW_SAMPLES if num_samples is None else int(num_samples))
    return "it holds one draw, which has no interval" if draws < 2 else None


def interval_mass_to_reference(
    reference: Posterior,
    posterior: Posterior,
    data: Dataset,
    *,
    level: float = 0.9,
    num_samples: int | None = None,
    seed: int = 0,
) -> Generator[ProgressRecord, None, IntervalMass]:
    """:class:`IntervalMass` of ``posterior``'s interval under ``reference`` (all its draws) on
    ``data`` (the probe set). ``num_samples``: the method's draws (None: as many as a column
    uses at rest, :data:`WINDOW_SAMPLES` or all it holds if fewer). Yields progress per batch."""
    check_data_fits(reference.arch, data, "the probe set", "the reference", labels=False)
    check_data_fits(posterior.arch, data, "the probe set", "the posterior", labels=False)
    if posterior.num_classes != reference.num_classes:
        raise ValueError(f"the posterior has {posterior.num_classes} classes and the reference "
                         f"{reference.num_classes}: their intervals cannot be compared")
    why = why_no_interval(posterior, num_samples)
    if why is not None:
        raise ValueError(f"no interval to score: {why}")
    draws = samples_used(posterior, WINDOW_SAMPLES if num_samples is None else int(num_samples))
    ref_generator, generator = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    parts, ref_draws = [], 0
    for start in range(0, len(data), BATCH):
        x = data.x[start:start + BATCH]
        ref = reference.predict_proba(x, generator=ref_generator)
        ref_draws = ref.shape[0]
        parts.append(mass_inside(ref, posterior.predict_proba(x, num_samples=draws, generator=generator), level))
        yield ProgressRecord(step=min(start + BATCH, len(data)), total=len(data), phase="interval mass")
    return IntervalMass(level=level, stated_level=expected_coverage(draws, level), draws=draws,
                        reference_draws=ref_draws, per_cell=np.concatenate(parts))
