"""Chain slots: every chain of a run computed in one matrix product, bit for bit as alone.

A run of ``count`` chains takes a product over all its chains (a softmax regression's logits and
gradient on a batch every chain sees, the dense curvature metric's products) in a fixed layout
of ``count`` *slots*: chain c always occupies slot c, its chain number, and a run of a subset of
the chains (``fit(..., chains=(2, 3))``, ``train --chains 2,3``) fills the other slots with zeros
and discards their results. The product then has the same shapes, and each chain's rows or
columns the same place in it, whichever chains run: the same BLAS kernel path, so chain c's
numbers are the same bits beside any neighbours, as the split runs that are merged later need
(:mod:`~core.engine.inference.sampling`, "Per-chain random streams").

Why that holds: a GEMM (and a triangular solve with several right-hand sides) blocks its work by
the shapes and strides of its operands, never by their values, and each output element is its
own sum over the shared dimension; so a column of logits, a row of the gradient or a column of
the solve is the same whatever the other slots hold. Checked on this machine's MKL with one and
two threads (softmax logits and gradient at 8,026 × 512 × 10 classes × 4 slots, products and
solves with a 5,130 × 5,130 matrix): the slot of a chain among random neighbours equals the chain
among zeros bit for bit (``tests/core/test_slots.py``). One product for the 4 chains instead of
four reads the shared operand once, not four times: the features tier's gradient and metric
products are memory-bound (docs/performance.md, "Building a feature tier").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ChainSlots:
    """Where each present chain sits among a run's ``count`` slots: chain ``ids[i]`` (row i of a
    chain-stacked tensor) in slot ``ids[i]``."""

    ids: tuple[int, ...]
    count: int

    def __post_init__(self) -> None:
        ids = tuple(int(c) for c in self.ids)
        object.__setattr__(self, "ids", ids)
        if not ids or len(set(ids)) != len(ids) or not all(0 <= c < self.count for c in ids):
            raise ValueError(f"chains {list(ids)} do not each take one of {self.count} slots")

    @classmethod
    def of(cls, chain_ids: Sequence[int], count: int) -> ChainSlots:
        """The slots of the chains ``chain_ids`` of a run of ``count`` chains."""
        return cls(tuple(chain_ids), int(count))

    @classmethod
    def all(cls, chains: int) -> ChainSlots:
        """Every chain present: chain c in slot c (a run of all its chains, or a caller that
        knows no chain numbers)."""
        return cls(tuple(range(chains)), chains)

    @property
    def full(self) -> bool:
        """Whether every slot holds a chain, in order (nothing to fill or drop)."""
        return self.ids == tuple(range(self.count))

    def place(self, x: torch.Tensor) -> torch.Tensor:
        """The chain-stacked ``x`` (C, ...) laid out in slots: (count, ...), zeros where no chain
        is, always a fresh contiguous tensor (a view's offset could change a kernel's path)."""
        if x.shape[0] != len(self.ids):
            raise ValueError(f"{x.shape[0]} chains given for the {len(self.ids)} chains in slots")
        out = torch.zeros((self.count, *x.shape[1:]), dtype=x.dtype, device=x.device)
        if self.full:
            return out.copy_(x)
        return out.index_copy_(0, torch.tensor(self.ids, device=x.device), x)

    def take(self, x: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """The present chains' part of ``x`` laid out in slots along ``dim``, in chain order."""
        if self.full:
            return x
        return x.index_select(dim, torch.tensor(self.ids, device=x.device))


def chain_slots(slots: ChainSlots | None, chains: int) -> ChainSlots:
    """``slots``, checked against the ``chains`` given, or every chain present when None."""
    if slots is None:
        return ChainSlots.all(chains)
    if len(slots.ids) != chains:
        raise ValueError(f"{chains} chains given for the {len(slots.ids)} chains in slots")
    return slots
