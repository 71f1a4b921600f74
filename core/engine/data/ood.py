"""Built-in out-of-distribution sets made from data the project already has.

bayescope ships no second unseen set (no Fashion-MNIST offline), so it derives one, and says
how: ``mnist-inverted`` is MNIST's test digits with every pixel p replaced by 1 − p (dark
strokes on a white background). A digit model never saw a lit background, so this tests a
different failure than notMNIST's letters, which keep MNIST's dark background. It works
wherever MNIST's test split is found, the bundled samples of a first launch included.

Every built-in set goes through :func:`ood_set`, the one entry point: a corruption of another
kind (noise, blur, …) joins :data:`OOD_SETS` with its transform here, and nothing else changes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.engine.data.datasets import load_split
from core.engine.data.locate import (
    DOWNLOAD_ON_COMMAND_LINE,
    DatasetMissingError,
    download_dataset,
    find_dataset,
)
from core.engine.inference.base import Dataset


def invert(x: torch.Tensor) -> torch.Tensor:
    """Images in [0, 1] → 1 − x: dark strokes on white."""
    return 1.0 - x


@dataclass(frozen=True)
class BuiltInOodSet:
    """A set derived from a known data set's split by a fixed, seedless transform."""

    words: str  # what a person reads: what the images are
    base: str  # the known data set it is made from (core.engine.data.locate.DATA_SETS)
    split: str
    transform: Callable[[torch.Tensor], torch.Tensor]
    how: str  # the transform in words, recorded in the set's source


#: The built-in OOD sets by name.
OOD_SETS: dict[str, BuiltInOodSet] = {
    "mnist-inverted": BuiltInOodSet(
        words="MNIST test digits, inverted (dark on white)", base="mnist", split="test", transform=invert,
        how="every pixel p of MNIST's test digits replaced by 1 − p (dark strokes on a white background)"),
}


def ood_set(name: str, data_dir: str | os.PathLike | None = None, download: bool = False) -> Dataset:
    """The built-in OOD set ``name`` (:data:`OOD_SETS`), made from its base set as found in ``data_dir``
    (or the user cache, or the bundled samples when no folder is given; ``download`` fetches MNIST).

    Raises
    ------
    KeyError
        ``name`` is not a built-in set.
    DatasetMissingError
        Its base set is nowhere to be found (the message says where it looked).
    """
    spec = OOD_SETS[name]
    try:
        folder = find_dataset(spec.base, data_dir, spec.split, download_hint=None if download else
                              DOWNLOAD_ON_COMMAND_LINE)
    except DatasetMissingError as exc:
        if not (download and exc.downloadable):
            raise
        folder = download_dataset(spec.base, spec.split)
    base = load_split(spec.base, spec.split, root=folder)
    x = spec.transform(base.x).clamp_(0.0, 1.0).contiguous()
    source = {**base.source, "derived": {"name": name, "from": f"{spec.base} {spec.split}", "transform": spec.how}}
    return Dataset(x, base.y.clone(), name, base.class_names, source)


__all__ = ["OOD_SETS", "BuiltInOodSet", "invert", "ood_set"]
