"""Dropout as a posterior runs it: a model's :class:`~core.engine.models.Dropout` layers drawing their
masks from an explicit ``torch.Generator`` (training reproducible from a seed, torch's global
generator untouched), switched on at prediction alone (MC dropout, Gal & Ghahramani 2016), and the
layers before the first dropout split off, so that a prediction runs them once per input rather
than once per draw."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from core.engine.models import MLP, Dropout, LeNet, LeNet5, ResNet, SoftmaxRegression


@contextlib.contextmanager
def dropout_generator(model: nn.Module, generator: torch.Generator | None) -> Iterator[nn.Module]:
    """Let the model's :class:`Dropout` layers draw their masks from ``generator`` in the block."""
    layers = [m for m in model.modules() if isinstance(m, Dropout)]
    before = [m.generator for m in layers]
    for m in layers:
        m.generator = generator
    try:
        yield model
    finally:
        for m, g in zip(layers, before, strict=True):
            m.generator = g


@contextlib.contextmanager
def mc_dropout(
    model: nn.Module, enabled: bool = True, generator: torch.Generator | None = None
) -> Iterator[nn.Module]:
    """Switch the dropout layers (only them) to sampling mode inside the block.

    Batch-norm or other mode-dependent layers keep their current mode, so this is the
    prediction-time dropout of MC dropout, not a switch to training mode. With a
    ``generator`` the masks come from it (see :class:`Dropout`).
    """
    layers = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    before = [m.training for m in layers]
    for m in layers:
        m.train(enabled)
    try:
        with dropout_generator(model, generator):
            yield model
    finally:
        for m, mode in zip(layers, before, strict=True):
            m.train(mode)


def split_before_dropout(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """``(shared, rest)`` with ``rest(shared(x)) == model(x)``; ``shared`` holds no dropout.

    Under MC dropout the layers before the first dropout give the same output for every
    draw, so a prediction runs them once per input instead of once per draw (LeNet's first
    convolution block is most of its memory traffic). Softmax regression drops its standardised,
    flattened input: ``rest`` is its dropout and its linear layer, so that the posterior keeps
    its fixed bank's masks as for the other models (drawing 100 × 784 of them on every stroke
    took 3.6 ms, twice the rest of the column's prediction). Other models (a features head,
    whose input becomes features first): ``shared`` is identity.
    """
    if type(model) is SoftmaxRegression:
        return nn.Sequential(model.standardise, nn.Flatten(1)), nn.Sequential(model.dropout, model.linear)
    layers = [*model.features, *model.classifier] if isinstance(model, (LeNet, LeNet5, ResNet)) else (
        list(model.net) if isinstance(model, MLP) else [])
    first = next((i for i, m in enumerate(layers) if isinstance(m, nn.Dropout)), 0)
    if first == 0:
        return nn.Identity(), model
    return nn.Sequential(model.standardise, *layers[:first]), nn.Sequential(*layers[first:])
