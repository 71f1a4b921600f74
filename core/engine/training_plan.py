"""How long a training run will take on this computer: one step measured, then multiplied.

:func:`planned_steps` counts the updates a run will make from its config and the number of
training images. :func:`estimate_duration` measures what one update costs by running the
method's own ``fit`` on a small probe data set shaped like the training images: once to warm
up, once with one step, then with more steps; the difference of two wall times divided by
the difference of their steps is the cost of a step, free of the start-up and wrap-up work
that both runs share. A step's cost does not depend on the pixel values, so random images do.
Mini-batch methods are probed with their real batch size; full-batch HMC on a few hundred
images, its cost scaled up in proportion to the training set.

A MAP (or an ensemble's members) found by Newton steps (``optimiser=newton``, or ``auto`` on a
model linear in its weights) has no epochs: its cost is a handful of full-batch Newton steps,
each of them a conjugate-gradient solve with the Hessian (K(D + 1) weights square). It is probed
as it runs, on up to :data:`NEWTON_PROBE_IMAGES` images for 1, 2, 4 … steps, and planned at
:data:`NEWTON_STEPS` steps.
"""

from __future__ import annotations

import gzip
import math
import time
from collections.abc import Collection, Generator
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
#: Images a Newton probe's steps see (a step's cost grows in proportion to the images beyond it).
NEWTON_PROBE_IMAGES = 4096
#: Newton steps planned for a MAP: the paper tier's MAP on MNIST took 15 to reach ‖∇‖ ≤ 10⁻³, the face
#: tier's 10 (``info["map"]["iterations"]`` of the bundled files); near the mode they converge quadratically.
NEWTON_STEPS = 15


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
        What a step is called: ``"steps"``, ``"iterations"`` for HMC, ``"Newton steps"`` for a MAP
        found by Newton's method.
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
    if newton_steps(config, arch):
        return NEWTON_STEPS
    per_epoch = math.ceil(num_train / config.batch_size)
    steps = config.epochs * per_epoch
    if isinstance(config, EnsembleConfig) and not _side_by_side(config, arch):
        steps *= config.num_members
    return steps


def newton_steps(config: Any, arch: ArchSpec | None) -> bool:
    """Whether a run of ``config`` on ``arch`` finds its mode by Newton steps (no epochs): a MAP or an
    ensemble with ``optimiser=newton``, or ``auto`` on a model linear in its weights."""
    from core.engine.inference.map import MapConfig, resolve_optimiser
    from core.engine.models import build_model

    if not isinstance(config, MapConfig | EnsembleConfig) or config.optimiser not in ("newton", "auto"):
        return False
    if config.optimiser == "newton":
        return True
    if arch is None:
        return False
    return resolve_optimiser("auto", build_model(arch)) == "newton"


def _side_by_side(config: EnsembleConfig, arch: ArchSpec | None) -> bool:
    return arch is None or side_by_side_fits(arch, config.num_members, config.batch_size)


def _probe_config(config: Any, steps: int, arch: ArchSpec | None = None) -> Any:
    """The same settings, shortened to ``steps`` updates on a one-batch data set (an
    ensemble keeps its members when they train side by side: a step is all of them)."""
    if isinstance(config, HmcConfig):
        return replace(config, num_warmup=0, num_samples=steps, thin=1, on_budget="thin")
    if newton_steps(config, arch):  # exactly ``steps`` Newton steps: a gradient norm never reached
        return replace(config, max_iter=steps, grad_tol=NEWTON_NEVER)
    if isinstance(config, ChainConfig):
        return replace(config, epochs=steps, burn_in_epochs=0, thin=1, on_budget="thin")
    if isinstance(config, EnsembleConfig):
        if _side_by_side(config, arch):
            return replace(config, epochs=steps)
        return replace(config, num_members=1, epochs=steps)
    return replace(config, epochs=steps)


#: A probe's gradient-norm goal, so small that Newton takes every step the probe allows.
NEWTON_NEVER = 1e-300


def _probe_data(arch: ArchSpec, size: int, generator: torch.Generator) -> Dataset:
    x = torch.rand((size, *arch.input_shape), generator=generator)
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
    newton = newton_steps(config, arch)
    full_batch = isinstance(config, HmcConfig) or newton
    if newton:
        size, max_probe_steps = min(num_train, NEWTON_PROBE_IMAGES), min(max_probe_steps, NEWTON_STEPS)
    else:
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
    setup = max(0.0, reference - per_step) if newton else 0.0  # the features' Gram matrix and its eigenbasis
    if full_batch:
        per_step *= num_train / size  # each gradient evaluates the whole training set
        setup *= num_train / size
    planned = planned_steps(method, config, num_train, arch)
    step_name = "Newton steps" if newton else "iterations" if full_batch else "steps"
    return TrainingEstimate(setup + per_step * planned, planned, per_step, num_train, step_name)


def network_seconds(network: Any, images: int, *, seed: int = 0) -> float:
    """Seconds to pass ``images`` images once through ``network`` (a
    :class:`~core.engine.networks.SplitNetwork`) to their features: one batch timed after a warm-up,
    scaled to the images (decoding them is not counted)."""
    from core.engine.networks import FEATURE_BATCH

    wanted = network.input
    size = max(1, min(images, FEATURE_BATCH))
    batch = torch.rand((size, wanted.channels, wanted.image_size, wanted.image_size),
                       generator=torch.Generator().manual_seed(seed))
    network.features(batch)  # the first pass pays one-off costs (a TorchScript program's optimisation)
    start = time.perf_counter()
    network.features(batch)
    return (time.perf_counter() - start) * images / size


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


#: A pass over a small folder has at least this many steps: the batch is at most this fraction
#: of its training images (96 images at MNIST's 128 per step made one step a pass).
MIN_STEPS_PER_PASS = 8
#: A run on a small folder makes at least this many updates (more passes, not larger steps).
MIN_TRAINING_STEPS = 400
#: A sampler whose run a small folder shortens keeps at least this many draws per chain.
MIN_DRAWS_PER_CHAIN = 10


def small_folder_settings(config: Any, num_train: int, chosen: Collection[str] = ()) -> dict[str, int]:
    """The settings that give a mini-batch run on ``num_train`` images enough steps.

    A batch that makes a pass of fewer than :data:`MIN_STEPS_PER_PASS` steps is cut to that
    fraction of the images, the passes raised to
    make :data:`MIN_TRAINING_STEPS` updates (a sampler's burn-in passes in proportion), and a
    sampler's thinning lowered so that it keeps :data:`MIN_DRAWS_PER_CHAIN` draws per chain.
    Settings named in ``chosen`` (the person set them) are kept. On a large data set the defaults
    already do this, and nothing is returned.

    Returns
    -------
    dict
        Setting name → new value, only those that change.
    """
    if not hasattr(config, "batch_size") or not hasattr(config, "epochs") or num_train < 1:
        return {}  # full-batch HMC: every step sees every image
    changes: dict[str, int] = {}
    batch = config.batch_size
    if "batch_size" not in chosen and math.ceil(num_train / batch) < MIN_STEPS_PER_PASS:
        batch = max(1, num_train // MIN_STEPS_PER_PASS)
        if batch != config.batch_size:
            changes["batch_size"] = batch
    per_pass = math.ceil(num_train / batch)
    epochs = config.epochs
    burn = getattr(config, "burn_in_epochs", None)
    if "epochs" not in chosen:
        epochs = max(epochs, math.ceil(MIN_TRAINING_STEPS / per_pass))
        if epochs != config.epochs:
            changes["epochs"] = epochs
            if burn is not None and "burn_in_epochs" not in chosen:  # the same share of the run
                burn = min(epochs - 1, round(burn * epochs / config.epochs))
                changes["burn_in_epochs"] = burn
    thin = getattr(config, "thin", None)
    if burn is not None and thin is not None and "thin" not in chosen and epochs > burn:
        kept = (epochs - burn) * per_pass
        if kept // thin < MIN_DRAWS_PER_CHAIN:
            new_thin = max(1, kept // MIN_DRAWS_PER_CHAIN)
            if new_thin != thin:
                changes["thin"] = new_thin
    return changes


#: Seconds of a run's own measured pace that weigh as much as the estimate's measured step: at
#: first the time left follows the estimate the dialog showed, then more and more the run's pace.
ESTIMATE_WEIGHT_SECONDS = 5.0


def seconds_left(steps_left: int, estimated_per_step: float | None, measured_seconds: float,
                 measured_steps: int) -> float | None:
    """The time a run has left, from its estimate's pace blended with its own.

    Parameters
    ----------
    steps_left
        Steps still to run.
    estimated_per_step
        The estimate's seconds per step (None: no estimate of these steps).
    measured_seconds, measured_steps
        The run's own wall time over its steps so far (since its first reported step).

    Returns
    -------
    float or None
        Seconds left; None when neither pace is known. The run's pace gets the weight
        ``t / (t + ESTIMATE_WEIGHT_SECONDS)`` after ``t`` measured seconds, so that the line does
        not start far from the estimate on a slow first step, and ends on the run's own pace.
    """
    measured = measured_seconds / measured_steps if measured_steps > 0 and measured_seconds > 0 else None
    if estimated_per_step is None:
        return None if measured is None else steps_left * measured
    if measured is None:
        return steps_left * estimated_per_step
    weight = measured_seconds / (measured_seconds + ESTIMATE_WEIGHT_SECONDS)
    return steps_left * (weight * measured + (1.0 - weight) * estimated_per_step)
