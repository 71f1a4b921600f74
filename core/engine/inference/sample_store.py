"""Where a run's draws go: the storage plan decided before sampling, and the store of draws.

:func:`plan_storage` decides the thinning before the first step so that the kept draws, with
leading dims (chain, draw), never exceed the memory budget: it refuses with the numbers
(:class:`SampleBudgetError`), or thins further and warns (:class:`SampleBudgetWarning`).
:class:`SampleStore` holds the draws, preallocated.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal

import torch

from core.engine.inference.chains import Params

BudgetPolicy = Literal["refuse", "thin"]
"""What a full sample store does: ``"refuse"`` raises before sampling starts; ``"thin"``
keeps every k-th draw instead (k as small as fits) and warns."""


class SampleBudgetError(ValueError):
    """Storing the requested draws would exceed the memory budget."""


class SampleBudgetWarning(UserWarning):
    """The sample store thinned the chains further to stay within its memory budget."""



def bytes_per_draw(params: Params) -> int:
    """Bytes of one draw of all chains (float32)."""
    return sum(v.numel() for v in params.values()) * 4


@dataclass(frozen=True)
class StoragePlan:
    """How many draws a run keeps: every ``thin``-th step after ``burn_in``."""

    burn_in: int
    thin: int
    num_draws: int
    message: str = ""


def plan_storage(
    num_steps: int,
    burn_in: int,
    thin: int,
    draw_bytes: int,
    budget_mb: float,
    policy: BudgetPolicy = "refuse",
) -> StoragePlan:
    """Decide the thinning before sampling so the store never exceeds ``budget_mb``.

    Raises
    ------
    SampleBudgetError
        With ``policy="refuse"`` when the draws would not fit, or when not even one fits.
    """
    if not 0 <= burn_in < num_steps:
        raise ValueError(f"burn-in ({burn_in}) must be below the number of steps ({num_steps})")
    if thin < 1:
        raise ValueError("thin must be at least 1")
    budget = budget_mb * 2**20
    draws = (num_steps - burn_in) // thin
    if draws < 1:
        raise ValueError(f"thinning by {thin} after {burn_in} burn-in steps keeps no draw")
    needed = draws * draw_bytes
    if needed <= budget:
        return StoragePlan(burn_in, thin, draws)
    fits = int(budget // draw_bytes)
    text = (
        f"storing {draws} draws needs {needed / 2**20:.1f} MB, over the sample budget of "
        f"{budget_mb:g} MB"
    )
    if policy == "refuse" or fits < 1:
        raise SampleBudgetError(
            f"{text}; raise memory_budget_mb, thin more, sample fewer chains or steps"
        )
    new_thin = math.ceil((num_steps - burn_in) / fits)
    draws = (num_steps - burn_in) // new_thin
    return StoragePlan(
        burn_in, new_thin, draws, f"{text}: thinning by {new_thin} instead of {thin} ({draws} draws)"
    )


class SampleStore:
    """Preallocated draws with leading dims (chain, draw)."""

    def __init__(self, template: Params, num_draws: int) -> None:
        self.samples = {
            k: torch.empty((v.shape[0], num_draws, *v.shape[1:]), dtype=torch.float32)
            for k, v in template.items()
        }
        self.num_draws = num_draws
        self.filled = 0

    def append(self, params: Params) -> None:
        if self.filled >= self.num_draws:
            raise IndexError("the sample store is full")
        for k, v in params.items():
            self.samples[k][:, self.filled] = v.detach()
        self.filled += 1

    def result(self) -> Params:
        return {k: v[:, : self.filled] for k, v in self.samples.items()}


def warn_plan(plan: StoragePlan) -> None:
    if plan.message:
        warnings.warn(plan.message, SampleBudgetWarning, stacklevel=3)
