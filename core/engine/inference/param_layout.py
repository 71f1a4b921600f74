"""The weights of any torch model as one flat vector θ ∈ ℝᴾ, and the model evaluated at many θ.

A :class:`ParamLayout` names the slices of θ that hold each parameter, so that a posterior over
θ (a variational family, SWAG's or Laplace's Gaussian, a sampler's metric) can hand the model
stacked weight sets (S, P) and :func:`stacked_logits` evaluates all of them at once
(:func:`core.engine.models.stacked.stacked_forward`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from core.engine.models.stacked import stacked_forward


class ParamLayout:
    """The named parameters of a model as slices of one flat vector θ ∈ ℝᴾ."""

    def __init__(self, named_shapes: list[tuple[str, torch.Size]]) -> None:
        self.names = [n for n, _ in named_shapes]
        self.shapes = {n: torch.Size(s) for n, s in named_shapes}
        self.offsets: dict[str, tuple[int, int]] = {}
        start = 0
        for name, shape in named_shapes:
            size = math.prod(shape)
            self.offsets[name] = (start, start + size)
            start += size
        self.size = start

    @classmethod
    def of(cls, model: nn.Module) -> ParamLayout:
        return cls([(n, p.shape) for n, p in model.named_parameters()])

    def flatten(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """Concatenate ``params`` (no leading dims) into a vector of length P."""
        return torch.cat([params[n].reshape(-1) for n in self.names])

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of ``theta`` (..., P) as named tensors (..., *shape)."""
        lead = theta.shape[:-1]
        return {
            n: theta[..., a:b].reshape(*lead, *self.shapes[n]) for n, (a, b) in self.offsets.items()
        }


def stacked_logits(
    model: nn.Module,
    layout: ParamLayout,
    theta: torch.Tensor,
    x: torch.Tensor,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Logits (S, N, K) of the model at each row of ``theta`` (S, P) (see
    :func:`core.engine.models.stacked.stacked_forward`)."""
    return stacked_forward(model, layout.unflatten(theta), x, chunk_size)
