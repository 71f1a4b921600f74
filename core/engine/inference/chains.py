"""The chains of a run: their numbers, their seeds and random streams, their stacked weights.

Parameters of C chains are a dict of tensors with a leading chain dimension (C, ...): :data:`Params`.

Per-chain random streams
------------------------
In a fit, chain c of a run with seed s draws everything about itself (its initial weights,
its mini-batch order, its noise, D-SGHMC's input masks, HMC's momentum, jitter and
acceptance uniforms) from its own ``torch.Generator`` seeded by :func:`chain_seed` (s, c),
held by a :class:`ChainGenerators`. Every draw has the shape of one chain, so a chain's
numbers do not depend on which other chains run beside it: chains (0, 1, 2, 3) run
together, one at a time, or as subsets on different machines (``fit(..., chains=(2, 3))``, then
:func:`~core.engine.inference.chain_merge.merge_chains`) give the same chains, up to the float rounding
of batched kernels (on the same kind of device: CPU and CUDA generators differ). A softmax head's products
on a batch every chain sees and the dense curvature metric's are one product over the run's
chain slots (:mod:`~core.engine.inference.slots`: chain c in slot c, zeros in the slots of the
chains a subset leaves out), so those chains are the same bit for bit. Nothing in a step
couples chains: preconditioners, HMC's step-size and mass adaptation are per chain; the
storage plan of a subset is the plan of the whole run
(:func:`~core.engine.inference.sampling.fit_sgmcmc`); only a divergence in one chain stops the run it is part of, and progress records show chain means.
A plain ``torch.Generator`` is still accepted wherever a ``ChainGenerators`` is: it draws
for all chains at once (one stream), as densities without chain identity and the
statistical tests do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import nn

from core.engine.models import ArchSpec, build_model

Params = dict[str, torch.Tensor]
"""Chain-stacked parameters: a tensor per weight name, leading dimension the chains (C, ...)."""


def chain_seed(seed: int, chain: int) -> int:
    """The seed of chain (or ensemble member) ``chain`` of a fit with seed ``seed``.

    The first 8 bytes, big-endian, of SHA-256 of the ASCII text ``"bayescope-chain:{seed}:{chain}"``,
    with the top bit cleared (a non-negative 63-bit integer, which ``torch.Generator.manual_seed``
    takes on every device). A hash rather than ``seed + chain`` so that neighbouring seeds do
    not share chains (seed 0's chain 1 is not seed 1's chain 0); hashlib rather than numpy's
    ``SeedSequence`` so that the value is fixed by this text alone, across library versions.
    """
    if chain < 0:
        raise ValueError(f"a chain number is at least 0, got {chain}")
    digest = hashlib.sha256(f"bayescope-chain:{int(seed)}:{int(chain)}".encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


class ChainGenerators:
    """One ``torch.Generator`` per chain, seeded by :func:`chain_seed` (seed, c) for c in ``chain_ids``.

    Every draw is made chain by chain with the shape of one chain and stacked, so chain c's
    numbers are the same whichever chains run with it. The generators live on ``device``
    (where the parameters are), so a CUDA run draws on the GPU.
    """

    def __init__(self, seed: int, chain_ids: Sequence[int], device: torch.device | str = "cpu") -> None:
        self.seed = int(seed)
        self.chain_ids = tuple(int(c) for c in chain_ids)
        self.device = torch.device(device)
        self.generators = [
            torch.Generator(device=self.device).manual_seed(chain_seed(self.seed, c)) for c in self.chain_ids
        ]

    def __len__(self) -> int:
        return len(self.generators)

    def _check(self, chains: int) -> None:
        if chains != len(self.generators):
            raise ValueError(f"a draw for {chains} chains from the generators of {len(self)} chains")

    def _draws(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str | None,
               fill: str) -> torch.Tensor:
        """Draws of shape (C, *shape[1:]), row c filled in place (``fill``: ``normal_`` or
        ``uniform_``) from chain c's generator."""
        self._check(shape[0])
        out = torch.empty(tuple(shape), dtype=dtype, device=self.device)
        for row, g in zip(out, self.generators, strict=True):
            getattr(row, fill)(generator=g)
        return out.to(device) if device is not None else out

    def randn(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
              device: torch.device | str | None = None) -> torch.Tensor:
        """Standard normal draws of shape (C, *shape[1:]), row c from chain c's generator."""
        return self._draws(shape, dtype, device, "normal_")

    def rand(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
             device: torch.device | str | None = None) -> torch.Tensor:
        """Uniform [0, 1) draws of shape (C, *shape[1:]), row c from chain c's generator."""
        return self._draws(shape, dtype, device, "uniform_")

    def randperm(self, n: int) -> torch.Tensor:
        """A random order of 0 … n−1 per chain: (C, n) on the CPU (where the data lie)."""
        return torch.stack([torch.randperm(n, generator=g, device=self.device).cpu() for g in self.generators])

    def models(self, arch: ArchSpec) -> list[nn.Module]:
        """One freshly initialised model per chain, on the CPU: each initialises itself with
        torch's global generator (forked, so the caller's stays as it was) seeded by an integer
        drawn first from the chain's own stream."""
        models = []
        for g in self.generators:
            seed = int(torch.randint(0, 2**62, (1,), generator=g, device=self.device))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                models.append(build_model(arch))
        return models


def chain_randn(shape: Sequence[int], generator: torch.Generator | ChainGenerators,
                dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """N(0, 1) draws of shape (C, ...): per chain from :class:`ChainGenerators`, else in one call."""
    if isinstance(generator, ChainGenerators):
        return generator.randn(shape, dtype, device)
    return torch.randn(tuple(shape), generator=generator, dtype=dtype, device=device)


def chain_rand(shape: Sequence[int], generator: torch.Generator | ChainGenerators,
               dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """U[0, 1) draws of shape (C, ...): per chain from :class:`ChainGenerators`, else in one call."""
    if isinstance(generator, ChainGenerators):
        return generator.rand(shape, dtype, device)
    return torch.rand(tuple(shape), generator=generator, dtype=dtype, device=device)


def chains_in_words(chains: Sequence[int]) -> str:
    """"chain 2", "chains 1 and 3", "chains 0, 1 and 3" ("no chain" for none)."""
    names = [str(int(c)) for c in chains]
    if not names:
        return "no chain"
    if len(names) == 1:
        return f"chain {names[0]}"
    return f"chains {', '.join(names[:-1])} and {names[-1]}"


def resolve_chains(chains: Sequence[int] | None, num_chains: int) -> tuple[int, ...]:
    """The chain numbers a fit runs: all of 0 … num_chains−1, or the given subset, sorted.

    Raises ``ValueError`` with a sentence for an empty subset, a repeated chain or one
    outside the run.
    """
    if chains is None:
        return tuple(range(num_chains))
    ids = [int(c) for c in chains]
    if not ids:
        raise ValueError("a fit runs at least one chain; the subset of chains is empty")
    if len(set(ids)) != len(ids):
        twice = sorted({c for c in ids if ids.count(c) > 1})
        raise ValueError(f"the subset names {chains_in_words(twice)} twice")
    bad = [c for c in ids if not 0 <= c < num_chains]
    if bad:
        raise ValueError(f"{chains_in_words(bad)} {'lies' if len(bad) == 1 else 'lie'} outside the run's "
                         f"{num_chains} chains (0 to {num_chains - 1})")
    return tuple(sorted(ids))



def stack_chains(models: list[nn.Module]) -> Params:
    """Parameters of several models with a leading chain dimension."""
    names = [k for k, _ in models[0].named_parameters()]
    return {
        k: torch.stack([dict(m.named_parameters())[k].detach() for m in models]) for k in names
    }
