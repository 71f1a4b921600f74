"""How long a training run will take on this computer: one step measured, then multiplied.

:func:`planned_steps` counts the updates a run will make from its config and the number of
training images. :func:`estimate_duration` measures what one update costs by running the
method's own ``fit`` on a small probe data set shaped like the training images: once to warm
up, once with one step, then with more steps; the difference of two wall times divided by
the difference of their steps is the cost of a step, free of the start-up and wrap-up work
that both runs share. A step's cost does not depend on the pixel values, so random images do.
Mini-batch methods are probed with their real batch size; full-batch HMC on a few hundred
images, its cost scaled up in proportion to the training set.
"""

from __future__ import annotations

import gzip
import math
import time
from collections.abc import Generator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from core.engine.data.datasets import find_split
from core.engine.inference import get_method
from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.inference.ensemble import EnsembleConfig, side_by_side_fits
from core.engine.inference.hmc import HmcConfig
from core.engine.inference.sampling import ChainConfig
from core.engine.models import ArchSpec

#: Images in MNIST's training split: what a download brings when no folder holds it yet.
MNIST_TRAIN_IMAGES = 60_000
#: Images the full-batch HMC probe evaluates per gradient.
HMC_PROBE_IMAGES = 256


@dataclass(frozen=True)
class TrainingEstimate:
    """A measured forecast of a training run's wall time.

    Attributes
    ----------
    seconds
        Predicted wall time of all updates.
    steps
        Updates planned (HMC: iterations, each of several leapfrog steps).
    seconds_per_step
        The measured cost of one update at the real batch (or data) size.
    num_train
        Training images the forecast assumes.
    step_name
        What a step is called: ``"steps"``, or ``"iterations"`` for HMC.
    """

    seconds: float
    steps: int
    seconds_per_step: float
    num_train: int
    step_name: str = "steps"


def count_training_images(folder: str | Path | None) -> int | None:
    """Images in the MNIST-layout training split in ``folder``, read from the IDX header."""
    if not folder:
        return None
    folder = Path(folder)
    # As load_split looks: a "mnist" sub-folder first, then the folder itself.
    files = find_split(folder / "mnist", "train") if (folder / "mnist").is_dir() else None
    files = files or find_split(folder, "train")
    if files is None:
        return None
    images = files[0]
    try:
        with open(images, "rb") as handle:
            compressed = handle.read(2) == b"\x1f\x8b"
        with (gzip.open if compressed else open)(images, "rb") as handle:
            header = handle.read(8)
    except (OSError, EOFError):
        return None
    if len(header) < 8 or header[:2] != b"\x00\x00":
        return None
    return int.from_bytes(header[4:8], "big")


def planned_steps(method: str, config: Any, num_train: int, arch: ArchSpec | None = None) -> int:
    """Updates a run of ``method`` with ``config`` on ``num_train`` images will make.

    An ensemble's members train side by side, one update for all of them, unless the
    stacked training of ``arch`` would not fit in memory (:func:`side_by_side_fits`); then
    one after another, M times as many updates (without ``arch``: side by side).
    """
    if isinstance(config, HmcConfig):
        return config.num_warmup + config.num_samples
    per_epoch = math.ceil(num_train / config.batch_size)
    steps = config.epochs * per_epoch
    if isinstance(config, EnsembleConfig) and not _side_by_side(config, arch):
        steps *= config.num_members
    return steps


def _side_by_side(config: EnsembleConfig, arch: ArchSpec | None) -> bool:
    return arch is None or side_by_side_fits(arch, config.num_members, config.batch_size)


def _probe_config(config: Any, steps: int, arch: ArchSpec | None = None) -> Any:
    """The same settings, shortened to ``steps`` updates on a one-batch data set (an
    ensemble keeps its members when they train side by side: a step is all of them)."""
    if isinstance(config, HmcConfig):
        return replace(config, num_warmup=0, num_samples=steps, thin=1, on_budget="thin")
    if isinstance(config, ChainConfig):
        return replace(config, epochs=steps, burn_in_epochs=0, thin=1, on_budget="thin")
    if isinstance(config, EnsembleConfig):
        if _side_by_side(config, arch):
            return replace(config, epochs=steps)
        return replace(config, num_members=1, epochs=steps)
    return replace(config, epochs=steps)


def _probe_data(arch: ArchSpec, size: int, generator: torch.Generator) -> Dataset:
    x = torch.rand((size, 1, arch.image_size, arch.image_size), generator=generator)
    y = torch.randint(0, arch.num_classes, (size,), generator=generator)
    return Dataset(x, y, "probe")


def _timed_fit(method: str, config: Any, arch: ArchSpec, data: Dataset, seed: int) -> float:
    start = time.perf_counter()
    for _ in get_method(method).fit(config, arch, data, seed):
        pass
    return time.perf_counter() - start


def estimate_duration(
    method: str,
    config: Any,
    arch: ArchSpec,
    num_train: int,
    *,
    min_difference: float = 0.3,
    max_probe_steps: int = 512,
    seed: int = 0,
) -> Generator[ProgressRecord, None, TrainingEstimate]:
    """Measure one update of ``method`` on ``arch`` and forecast the whole run.

    After a one-step warm-up (lazy imports, kernels, first allocations) and a one-step
    reference run, runs of 2, 4, 8 ... steps follow until one takes ``min_difference``
    seconds longer than the reference (so timer noise and other programs' bursts weigh
    little) or reaches ``max_probe_steps``. Yields a progress record after every probe run,
    so a consumer can cancel between them, and returns a :class:`TrainingEstimate`.
    """
    full_batch = isinstance(config, HmcConfig)
    size = min(num_train, HMC_PROBE_IMAGES) if full_batch else config.batch_size
    data = _probe_data(arch, size, torch.Generator().manual_seed(seed))
    probes = 0

    def run(steps: int) -> float:
        return _timed_fit(method, _probe_config(config, steps, arch), arch, data, seed)

    run(1)  # the first fit in a process pays seconds of one-off costs (lazy imports, kernels)
    reference = run(1)
    probes += 2
    yield ProgressRecord(probes, 0, {}, phase="measuring")
    steps = 2
    while True:
        elapsed = run(steps)
        probes += 1
        yield ProgressRecord(probes, 0, {}, phase="measuring")
        if elapsed - reference >= min_difference or steps >= max_probe_steps:
            break
        steps *= 2
    per_step = (elapsed - reference) / (steps - 1)
    if per_step <= 0:
        # Other programs' bursts swamped the difference: the long run alone bounds it.
        per_step = elapsed / steps
    if full_batch:
        per_step *= num_train / size  # each gradient evaluates the whole training set
    planned = planned_steps(method, config, num_train, arch)
    step_name = "iterations" if full_batch else "steps"
    return TrainingEstimate(per_step * planned, planned, per_step, num_train, step_name)


def duration_in_words(seconds: float) -> str:
    """``"about 20 seconds"``, ``"about 3 minutes"``, ``"about 5 hours"``, ``"about 2 days"``."""
    if seconds < 10:
        return "a few seconds"
    if seconds < 55:
        return f"about {int(round(seconds / 5) * 5)} seconds"
    minutes = seconds / 60
    if minutes < 1.5:
        return "about a minute"
    if minutes < 90:
        return f"about {round(minutes)} minutes"
    hours = minutes / 60
    if hours < 36:
        return f"about {round(hours)} hours" if hours >= 1.5 else "about an hour"
    return f"about {round(hours / 24)} days"
