"""The D-SGHMC MNIST tuned protocol's step sizes, chosen on a validation split of the training file
(``reproduce dhmc-mnist --tune``): a short run of every grid value, scored by validation NLL; the
test file is never read."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.commands.reproduce.dhmc_chains import (
    PIXELS,
    TUNED,
    MnistArrays,
    evaluate,
    run_group,
    tuned_specs,
)
from core.engine.device import on_device, seeded_generator


def validation_ranges(num_images: int, num_train: int, num_validation: int) -> tuple[range, range]:
    """Rows of the training file to train on and to validate on: 0..N and N..N+V (fewer if
    the file ends first), disjoint by construction."""
    if num_train >= num_images:
        raise ValueError(f"--train-size {num_train} leaves none of the {num_images} training images "
                         "for validation; lower it to tune on a held-out tail of the training set")
    return range(num_train), range(num_train, min(num_train + num_validation, num_images))


def load_mnist_validation(root: str | None, num_train: int, num_validation: int) -> MnistArrays:
    """The first ``num_train`` training images and, in the slot of the test images, the next
    ``num_validation`` ones (:func:`validation_ranges`), both centred by the training mean.

    Reads only the training file: tuning on it never sees a test image.
    """
    from core.engine.data.datasets import load_split

    train = load_split("mnist", "train", root=root)
    fit, held_out = validation_ranges(len(train.y), num_train, num_validation)
    x = train.x.reshape(-1, PIXELS)
    mean = x[fit.start : fit.stop].mean(0)
    return MnistArrays(x[fit.start : fit.stop] - mean, train.y[fit.start : fit.stop],
                       x[held_out.start : held_out.stop] - mean, train.y[held_out.start : held_out.stop])

#: The grids of the tuned protocol's step sizes; SGHMC's choice is also D-SGHMC's.
TUNING_GRID = {"sgld_step": (1e-5, 4e-5, 1e-4, 2e-4), "sghmc_step": (1e-6, 4e-6, 1.6e-5, 4e-5)}


@dataclass
class TrialRow:
    key: str  # "sgld_step" | "sghmc_step"
    step_size: float
    nll: float  # mean over chains of the validation NLL of each chain's mean predictive
    accuracy: float  # % on the validation images, mean over chains
    seconds: float
    nll_sd: float = 0.0  # s.d. of the NLL over chains


class _Quiet:
    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, s: str, refresh: bool = False) -> None:
        pass


def tune_step_sizes(
    root: str | None,
    *,
    num_train: int = 55_000,
    num_validation: int = 5_000,
    epochs: int = 10,
    chains: int = 5,
    draws: int = 30,
    seed: int = 0,
    grid: dict[str, tuple[float, ...]] | None = None,
    device: torch.device | None = None,
    report: Any = None,
) -> tuple[dict[str, float], list[TrialRow]]:
    """Choose the tuned protocol's constant step sizes on a validation split of the training file.

    Every value of ``grid`` (default :data:`TUNING_GRID`) is run as the tuned protocol would
    run it (:func:`tuned_specs` with ``epochs``: random batch order, half the epochs burn-in,
    ``draws`` draws thinned from the rest, friction as in :data:`TUNED`) on the first
    ``num_train`` training images, all values from the same seed, and scored on the next
    ``num_validation`` training images (:func:`load_mnist_validation`; the test file is never
    read) by the NLL of each chain's mean predictive, averaged over ``chains`` chains. NLL
    rather than accuracy: it is the proper score of the whole predictive, and accuracy moves in
    steps of 1/V and ties between neighbouring step sizes. A run that diverges scores +∞.
    The smallest NLL wins per sampler; D-SGHMC shares SGHMC's step size. ``report`` (if given)
    is called with each :class:`TrialRow` as it is measured. Returns the chosen values (as in
    :data:`TUNED`) and the table of the trial.
    """
    grid = TUNING_GRID if grid is None else grid
    data = load_mnist_validation(root, num_train, num_validation)
    train_data = data if device is None else MnistArrays(
        data.x_train.to(device), data.y_train.to(device), data.x_test, data.y_test)
    labels = {"sgld_step": "SGLD", "sghmc_step": "SGHMC"}
    rows: list[TrialRow] = []
    chosen: dict[str, float] = {}
    for key, values in grid.items():
        for value in values:
            spec = next(s for s in tuned_specs(epochs, {key: value}) if s.label == labels[key])
            generator = seeded_generator(seed, device)
            t0 = time.perf_counter()
            try:
                with on_device(device):
                    samples = run_group([spec], train_data, protocol="tuned", chains=chains,
                                        epochs=epochs, draws=draws, generator=generator,
                                        progress=_Quiet())[0]
                scores = evaluate(spec, samples, data, mask_at_prediction=False,
                                  generator=torch.Generator().manual_seed(seed), device=device)
                nll, acc = float(np.mean(scores.nll)), float(scores.accuracy.mean())
                sd = float(np.std(scores.nll, ddof=1)) if chains > 1 else 0.0
            except FloatingPointError:
                nll, acc, sd = math.inf, math.nan, math.nan
            row = TrialRow(key, value, nll, acc, time.perf_counter() - t0, sd)
            rows.append(row)
            if report is not None:
                report(row)
        mine = [r for r in rows if r.key == key]
        chosen[key] = min(mine, key=lambda r: r.nll).step_size
    return {**chosen, "friction": TUNED["friction"]}, rows
