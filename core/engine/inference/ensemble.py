"""Deep ensembles (Lakshminarayanan, Pritzel & Blundell 2017, "Simple and Scalable Predictive
Uncertainty Estimation using Deep Ensembles").

M networks θ₁ … θ_M, each from its own random initialisation and its own mini-batch order,
are trained independently to the MAP objective of :mod:`core.engine.inference.map`,

    θ_m = argmin −(1/N) Σᵢ log p(yᵢ | xᵢ, θ) + ‖θ‖² / (2 N σ²),

and the predictive is the uniform mixture p(y | x) = (1/M) Σ_m p(y | x, θ_m). (The paper's
optional adversarial training is not used.) Members are stored as the M chains, one draw
each, of a :class:`SampledPosterior`, so they predict in one vectorised call. Member m's
initial weights, mini-batch order and (for architectures with dropout) training masks come
from its own stream, seeded by :func:`~core.engine.inference.sampling.chain_seed` (seed, m),
so the ensemble is reproducible from its seed and a subset of members (``fit(...,
chains=(1, 3))``) is exactly those members of the whole ensemble, ready for
:func:`~core.engine.inference.sampling.merge_chains`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from core.engine.inference.base import (
    Dataset,
    FitGenerator,
    ProgressRecord,
    SampledPosterior,
    optimise,
)
from core.engine.inference.sampling import ChainGenerators, resolve_chains, stack_chains
from core.engine.models import ArchSpec, build_model


@dataclass(frozen=True)
class EnsembleConfig:
    """Hyperparameters of a deep ensemble.

    Attributes
    ----------
    num_members
        M, the number of independently trained networks.
    prior_std
        σ of the Gaussian prior behind each member's weight decay.
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate, per member.
    """

    num_members: int = 5
    prior_std: float = 1.0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3

    def __post_init__(self) -> None:
        if self.num_members < 1 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("num_members, epochs, batch_size and lr must be positive")
        if self.prior_std <= 0:
            raise ValueError("prior_std must be positive")


def fit(
    config: EnsembleConfig, arch: ArchSpec, data: Dataset, seed: int, chains: Sequence[int] | None = None
) -> FitGenerator:
    """Train the members (all, or the subset ``chains`` of member numbers) one after another."""
    member_ids = resolve_chains(chains, config.num_members)
    streams = ChainGenerators(seed, member_ids)
    penalty = 1.0 / (2.0 * len(data) * config.prior_std**2)
    members = []
    for i, (m, member_gen, member_seed) in enumerate(zip(member_ids, streams.generators, streams.model_seeds(), strict=True)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(member_seed)
            model = build_model(arch)
        for record in optimise(
            model, data, epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
            penalty=penalty, generator=member_gen,
        ):
            yield ProgressRecord(
                i * record.total + record.step,
                len(member_ids) * record.total,
                {**record.values, "member": float(m + 1)},
                f"member {m + 1}/{config.num_members}",
            )
        members.append(model)
    samples = {k: v.unsqueeze(1) for k, v in stack_chains(members).items()}
    info = {"num_members": len(member_ids), "chain_ids": list(member_ids)}
    return SampledPosterior("ensemble", arch, asdict(config), seed, data.name, samples, info)
