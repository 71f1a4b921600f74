"""Classifier architectures: the D-SGHMC paper's softmax regression, an MLP and a LeNet.

Every model maps a batch ``(N, 1, 28, 28)`` of images in [0, 1] to ``(N, K)`` logits.
Dropout layers are ordinary ``torch.nn.Dropout`` modules; :func:`mc_dropout` switches them
on at prediction time without touching anything else (Gal & Ghahramani 2016).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn

ArchName = Literal["softmax", "mlp", "lenet"]
ARCHITECTURES: tuple[str, ...] = ("softmax", "mlp", "lenet")


@dataclass(frozen=True)
class ArchSpec:
    """Everything needed to rebuild a model; saved with every posterior.

    Attributes
    ----------
    name
        ``"softmax"`` (multinomial logistic regression, the D-SGHMC paper's model),
        ``"mlp"`` (784-H-H-K with ReLU) or ``"lenet"`` (LeNet-5-style CNN, 20-50-500).
    num_classes
        Number of output classes K.
    drop_rate
        Probability that a unit is *dropped* by each dropout layer (0 disables them).
    hidden
        Width of the MLP's hidden layers (ignored by the other architectures).
    image_size
        Side of the square grey-scale input.
    """

    name: ArchName = "lenet"
    num_classes: int = 10
    drop_rate: float = 0.0
    hidden: int = 100
    image_size: int = 28

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ArchSpec:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown architecture fields: {sorted(unknown)}")
        return cls(**data)

    def __post_init__(self) -> None:
        if self.name not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {self.name!r}; choose from {ARCHITECTURES}")
        if not 0.0 <= self.drop_rate < 1.0:
            raise ValueError(f"drop_rate must lie in [0, 1), got {self.drop_rate}")
        if self.num_classes < 2:
            raise ValueError("a classifier needs at least two classes")


class SoftmaxRegression(nn.Module):
    """p(y | x, W, b) = softmax(W x + b), the model of the D-SGHMC paper's MNIST experiment."""

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        self.dropout = nn.Dropout(spec.drop_rate)
        self.linear = nn.Linear(spec.image_size**2, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(x.flatten(1)))


class MLP(nn.Module):
    """784-H-H-K ReLU network with dropout before each hidden and the output layer."""

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        h = spec.hidden
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(spec.image_size**2, h),
            nn.ReLU(),
            nn.Dropout(spec.drop_rate),
            nn.Linear(h, h),
            nn.ReLU(),
            nn.Dropout(spec.drop_rate),
            nn.Linear(h, spec.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LeNet(nn.Module):
    """LeNet-5-style CNN (conv 20, conv 50, fc 500) with dropout after every hidden layer.

    This is the "LeNet-all" placement of Gal & Ghahramani's MNIST experiments: dropout after
    each convolution block and after the fully connected layer.
    """

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        side = ((spec.image_size - 4) // 2 - 4) // 2
        self.features = nn.Sequential(
            nn.Conv2d(1, 20, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(spec.drop_rate),
            nn.Conv2d(20, 50, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(spec.drop_rate),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(50 * side * side, 500),
            nn.ReLU(),
            nn.Dropout(spec.drop_rate),
            nn.Linear(500, spec.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


_CLASSES: dict[str, type[nn.Module]] = {"softmax": SoftmaxRegression, "mlp": MLP, "lenet": LeNet}


def build_model(spec: ArchSpec) -> nn.Module:
    """Build a freshly initialised model in eval mode (dropout off)."""
    return _CLASSES[spec.name](spec).eval()


@contextlib.contextmanager
def mc_dropout(model: nn.Module, enabled: bool = True) -> Iterator[nn.Module]:
    """Switch the dropout layers (only them) to sampling mode inside the block.

    Batch-norm or other mode-dependent layers keep their current mode, so this is the
    prediction-time dropout of MC dropout, not a switch to training mode.
    """
    layers = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    before = [m.training for m in layers]
    for m in layers:
        m.train(enabled)
    try:
        yield model
    finally:
        for m, mode in zip(layers, before, strict=True):
            m.train(mode)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
