"""Corruption sweeps of one input, and data-set evaluations at corruption severities.

The per-input sweep (:func:`corruption_sweep`) is the rotation sweep's twin: one image corrupted
at severities 0–5 (or, for occlusion, a patch moved across it) goes through a posterior as one
batch and gives a :class:`core.analysis.metrics.RotationSweep` whose ``axis`` says what was swept.
The data-set evaluation (:func:`corruption_evaluation`) corrupts every test image (and every OOD
image) at each severity, each image with a seed of its own, and runs
:func:`core.analysis.evaluation.evaluate` on them: accuracy, NLL, ECE and OOD AUROC against
severity for each posterior, an MNIST-C-like evaluation computed here rather than downloaded.
The corruptions themselves are :mod:`core.engine.data.corruptions`.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.analysis.dataset import open_sets, unique_names
from core.analysis.evaluation import ImageRate, evaluate
from core.analysis.metrics import (
    RotationSweep,
    batch_sweep,
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
    ood_detection,
)
from core.analysis.metrics import accuracy as accuracy_of
from core.engine.data.corruptions import MAX_SEVERITY, corrupt, corruption_named, image_seed
from core.engine.faces.testset import is_face_set
from core.engine.inference.base import Dataset, Posterior, ProgressRecord

#: The severities a per-input sweep visits: 0 to 5 in half levels.
SWEEP_SEVERITIES = np.arange(0.0, MAX_SEVERITY + 0.25, 0.5)

#: The data-set evaluation's default severities (MNIST-C's and CIFAR-C's levels, and the clean set).
DATASET_SEVERITIES = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)

#: The OOD scores whose AUROC the printed table, the figure, the report and the Dataset tab show
#: against severity (the CSV holds every score's), with their words.
SHOWN_SCORES = (("total", "total entropy"), ("epistemic", "epistemic (mutual information)"))


def severity_steps(severity: float, sweep: bool) -> tuple[float, ...]:
    """The severities of a data-set evaluation: ``severity`` alone, or with ``sweep`` every whole
    level from 0 (the clean images) up to it, ``severity`` last (``2.5`` → 0, 1, 2, 2.5)."""
    if not (0.0 <= severity <= MAX_SEVERITY):
        raise ValueError(f"a severity must lie between 0 and {MAX_SEVERITY:g}, got {severity:g}")
    if not sweep:
        return (float(severity),)
    steps = [float(s) for s in range(int(np.floor(severity)) + 1)]
    return tuple(steps if steps[-1] == severity else [*steps, float(severity)])


def _as_planes(image: torch.Tensor | np.ndarray) -> np.ndarray:
    """(C, H, W) float32 from an image (H, W), (C, H, W) or (1, C, H, W)."""
    array = np.asarray(image.detach().cpu() if isinstance(image, torch.Tensor) else image, dtype=np.float32)
    if array.ndim == 4:
        array = array[0]
    return array.reshape(-1, *array.shape[-2:])


def occlusion_positions(width: int) -> np.ndarray:
    """Where a sweep puts the occluding patch's centre, in pixels from the left: from the left
    edge to the right edge in steps of width/14 (2 px at 28, 15 positions)."""
    return np.linspace(0.0, float(width), 15)


def sweep_axis(name: str, side: int, severity: float | None = None) -> tuple[str, str, str]:
    """(what was swept, the horizontal axis with its unit, the same in fewer words) for an image
    of ``side`` px."""
    corruption = corruption_named(name)
    if name == "occlusion":
        size = int(round((severity or 0.0) * side / 10.0))
        return ("occlusion", f"centre of the {size}×{size} px patch (pixels from the left)",
                "patch centre (px from left)")
    units = {  # (in words, short)
        "noise": ("noise σ = 0.08 per level", "σ 0.08/level"),
        "blur": (f"blur σ = {side / 70.0:.2g} px per level", f"σ {side / 70.0:.2g} px/level"),
        "contrast": ("contrast −19 % per level", "−19 %/level"),
        "shift": (f"shift {side / 14.0:.2g} px per level", f"{side / 14.0:.2g} px/level"),
    }
    words, short = units[name]
    return corruption.in_sentence, f"severity ({words})", f"severity ({short})"


def corrupted_images(
    image: torch.Tensor | np.ndarray, name: str, severity: float | None = None, seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The swept values and the images a sweep judges, (A,) and (A, C, H, W).

    For occlusion the values are the patch centre's pixel columns (the patch of ``severity``
    moved across the middle row); for the others, the severities 0–5 in half levels.
    """
    planes = _as_planes(image)
    if name == "occlusion":
        if severity is None or severity <= 0:
            raise ValueError("an occlusion sweep moves a patch: give it a severity above 0 (the patch's size)")
        width = planes.shape[-1]
        values = occlusion_positions(width)
        images = [corrupt(planes, name, severity, seed, position=(v / width, 0.5)) for v in values]
    else:
        corruption_named(name)
        values = SWEEP_SEVERITIES
        images = [corrupt(planes, name, float(v), seed) for v in values]
    return values, np.stack(images)


def corruption_sweep(
    posterior: Posterior,
    image: torch.Tensor | np.ndarray,
    name: str,
    severity: float | None = None,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
    level: float = 0.9,
    seed: int = 0,
) -> RotationSweep:
    """Sweep one image's corruption ``name`` (see :func:`corrupted_images`) and predict.

    All corrupted images go through the posterior as one batch, as the rotation sweep's do.
    """
    values, images = corrupted_images(image, name, severity, seed)
    swept, axis, short = sweep_axis(name, int(min(images.shape[-2:])), severity)
    batch = torch.from_numpy(images)
    parameter = "patch_centre_px" if name == "occlusion" else "severity"
    return batch_sweep(posterior, batch, values, num_samples, generator, level, swept=swept, axis=axis,
                       parameter=parameter, axis_short=short)


def corruption_sweeps(
    posteriors: Sequence[tuple[str, Posterior, int | None]],
    image: torch.Tensor | np.ndarray,
    name: str,
    severity: float | None = None,
    level: float = 0.9,
    seed: int | None = 0,
    corruption_seed: int | None = None,
) -> Generator[ProgressRecord, None, dict[str, RotationSweep]]:
    """:func:`corruption_sweep` for several posteriors ``(key, posterior, num_samples)``, as
    :func:`core.analysis.metrics.rotation_sweeps`: a progress record after each posterior (a
    worker stops between them), then the sweeps by key. ``corruption_seed`` draws the noise (or
    the shift's direction; ``seed`` when None), apart from ``seed``, which the posteriors' own
    draws follow: a new noise draw leaves the models' randomness as it was."""
    corrupted_images(image, name, severity)  # a bad name or a sizeless patch is refused first
    drawn = (seed or 0) if corruption_seed is None else corruption_seed
    sweeps: dict[str, RotationSweep] = {}
    total = len(posteriors)
    yield ProgressRecord(0, total, {}, phase="sweep")
    for i, (key, posterior, num_samples) in enumerate(posteriors):
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        sweeps[key] = corruption_sweep(posterior, image, name, severity, num_samples, generator, level,
                                       seed=drawn)
        yield ProgressRecord(i + 1, total, {"done": float(i)}, phase="sweep")
    return sweeps


# ----------------------------------------------------------------------------- data sets


def corrupt_dataset(data: Dataset, name: str, severity: float, seed: int = 0, set_index: int = 0) -> Dataset:
    """Every image of ``data`` corrupted at ``severity``, image i with seed
    :func:`core.engine.data.corruptions.image_seed` (seed, i, set_index); severity 0 gives the
    very same images. The corruption is recorded in ``source["corruption"]``."""
    corruption_named(name)
    if data.x.ndim != 4:
        raise ValueError("only images can be corrupted (these are feature vectors, e.g. face descriptors)")
    x = torch.as_tensor(data.x[:] if hasattr(data.x, "subset") else data.x)
    if severity == 0:
        corrupted = x.clone()
    else:
        array = x.detach().cpu().numpy()
        corrupted = torch.from_numpy(np.stack([
            corrupt(array[i], name, severity, image_seed(seed, i, set_index)) for i in range(len(array))
        ])) if len(array) else x.clone()
    source = {**data.source, "corruption": {"name": name, "severity": float(severity), "seed": int(seed)}}
    return Dataset(corrupted, data.y, data.name, data.class_names, source)


@dataclass
class CorruptionEvaluation:
    """Accuracy, NLL, Brier, ECE and OOD AUROC (per score) of each posterior at each severity."""

    corruption: str
    severities: tuple[float, ...]
    dataset: str
    ood_dataset: str | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    images: int = 0
    ood_images: int = 0


def summary_row(name: str, predictions: Any, ood: Any) -> dict[str, Any]:
    """One posterior's numbers at one severity (the formulas of the clean evaluation's summary
    and OOD tables, :func:`core.analysis.evaluation_results.evaluation_tables`)."""
    proba, labels = predictions.mean_proba, predictions.labels
    row: dict[str, Any] = {
        "posterior": name,
        "accuracy": accuracy_of(proba, labels),
        "nll": negative_log_likelihood(proba, labels),
        "brier": brier_score(proba, labels),
        "ece": expected_calibration_error(proba, labels),
    }
    if ood is not None:
        for result in ood_detection(predictions.scores, ood.scores):
            row[f"auroc_{result.score}"] = result.auroc
    return row


def corruption_evaluation(
    posteriors: dict[str, Posterior],
    data: Dataset,
    ood: Dataset | None,
    name: str,
    severities: Sequence[float] = DATASET_SEVERITIES,
    *,
    num_samples: int | None = None,
    seed: int = 0,
    batch_size: int | None = None,
) -> Generator[ProgressRecord, None, CorruptionEvaluation]:
    """Evaluate every posterior on ``data`` (and ``ood``) corrupted by ``name`` at each severity.

    Both sets are corrupted (the same degradation reaches every input the model is given): the
    OOD AUROC says whether the posterior still tells the OOD images from the test images at that
    severity. Each severity's evaluation is :func:`core.analysis.evaluation.evaluate` with the
    same ``seed``, so severity 0 gives exactly the clean evaluation's numbers.
    """
    corruption_named(name)
    severities = tuple(float(s) for s in severities)
    if not severities:
        raise ValueError("give at least one severity")
    for s in severities:
        if not (0.0 <= s <= MAX_SEVERITY):
            raise ValueError(f"a severity must lie between 0 and {MAX_SEVERITY:g}, got {s:g}")
    out = CorruptionEvaluation(name, severities, data.name, ood.name if ood is not None else None,
                               images=len(data), ood_images=len(ood) if ood is not None else 0)
    per_severity = (len(data) + (len(ood) if ood is not None else 0)) * len(posteriors)
    total = per_severity * len(severities)
    # one rate over the whole run (each severity's evaluate measures only its own part): the
    # images a second and the time left that the Dataset tab and the command line show
    rate = ImageRate(total)
    for i, severity in enumerate(severities):
        sets = corrupt_dataset(data, name, severity, seed, 0)
        bad = corrupt_dataset(ood, name, severity, seed, 1) if ood is not None else None
        run = evaluate(posteriors, sets, bad, num_samples=num_samples, seed=seed, batch_size=batch_size)
        try:
            while True:
                record = next(run)
                done = i * per_severity + int(record.values.get("images", 0))
                values = {**record.values, "images_done": float(done), "images_total": float(total),
                          "severity": severity, "severity_index": float(i), **rate.update(done)}
                yield ProgressRecord(done, total, values, f"{name} {severity:g} · {record.phase}")
        except StopIteration as stop:
            ev = stop.value
        finally:
            run.close()
        for key, result in ev.results.items():
            out.rows.append({"corruption": name, "severity": severity,
                             **summary_row(key, result.data, result.ood)})
    return out


def severity_lines(result: CorruptionEvaluation, key: str) -> dict[str, list[float | None]]:
    """One number (``"accuracy"``, ``"auroc_total"``, ...) against severity per posterior, in the
    order evaluated, one value per :attr:`CorruptionEvaluation.severities` (None where missing or
    undefined): what the figure, the printed table, the report and the Dataset tab's plot draw."""
    import math

    by = {(row["posterior"], row["severity"]): row for row in result.rows}
    names = list(dict.fromkeys(row["posterior"] for row in result.rows))
    lines: dict[str, list[float | None]] = {}
    for name in names:
        values = [by.get((name, s), {}).get(key) for s in result.severities]
        lines[name] = [float(v) if v is not None and math.isfinite(float(v)) else None for v in values]
    return lines


def run_corruption_evaluation(
    items: Sequence[Any],
    dataset: str,
    ood: str | None,
    data_dir: Any,
    limit: int | None,
    name: str,
    severities: Sequence[float],
    *,
    num_samples: int | None = None,
    seed: int = 0,
    image_size: int | None = None,
    channels: int | None = None,
) -> Generator[ProgressRecord, None, CorruptionEvaluation]:
    """Load the sets as the Dataset tab's clean evaluation does
    (:func:`core.analysis.dataset.open_sets`), then :func:`corruption_evaluation` of the items
    (:class:`core.analysis.dataset.EvaluationItem`, named as that tab names its columns); the
    Dataset tab's worker runs this. The first record (``phase`` "loading", total 0) comes before
    the files are read. With the same sets, draws and ``seed``, severity 0 gives the clean
    evaluation's numbers."""
    corruption_named(name)
    if is_face_set(dataset):
        raise ValueError("face heads read descriptors of the faces, not their pixels: a corruption of the "
                         "images cannot reach them")
    yield ProgressRecord(0, 0, {}, "loading")
    trained_on = {item.name: item.posterior.info.get("training_data") for item in items}
    sets = yield from open_sets(dataset, ood, data_dir, limit, image_size=image_size, channels=channels,
                                trained_on=trained_on)
    data, other, _ = sets
    names = unique_names([item.name for item in items])
    posteriors = {n: item.posterior for n, item in zip(names, items, strict=True)}
    return (yield from corruption_evaluation(posteriors, data, other, name, severities,
                                             num_samples=num_samples, seed=seed))


def corruption_table(result: CorruptionEvaluation) -> list[dict[str, Any]]:
    """The rows in long format, numbers as plain floats (None for NaN), ready for a CSV/JSON."""
    import math

    def plain(v: Any) -> Any:
        if isinstance(v, (np.floating, float)):
            return float(v) if math.isfinite(float(v)) else None
        return v

    return [{k: plain(v) for k, v in row.items()} for row in result.rows]

