"""Several posteriors judged on one input, side by side: the numbers of ``bayescope-cli compare``.

:func:`compare` predicts the input once per posterior exactly as ``bayescope-cli predict``
does (same preprocessing, a generator seeded with ``seed`` per posterior), so each column's
numbers equal ``predict --json`` run with the same ``--samples``, ``--seed`` and ``--level``.
:func:`comparison_table` is every number shown (one row per posterior and class);
:func:`provenance` is what a posterior file records about itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from core.analysis.predictive import Prediction, predict_image, predict_input
from core.engine.data.preprocess import image_to_input
from core.engine.inference.base import Posterior
from core.engine.naming import (
    METHOD_DESCRIPTIONS,
    method_label,
    posterior_title,
    samples_used,
)

if TYPE_CHECKING:
    from core.engine.data.images import Photo

#: In provenance, lists of more values than this (per-step training traces) are left out.
MAX_LIST = 32


@dataclass(frozen=True)
class ComparisonColumn:
    """One posterior's judgement of the input.

    ``title`` is the header a person reads ("SGHMC, LeNet, 8 draws"); ``source`` is the
    posterior file's path as text, for provenance only.
    """

    title: str
    posterior: Posterior
    prediction: Prediction
    source: str | None = None


@dataclass(frozen=True)
class Comparison:
    """Every column's prediction for one input. ``image`` is the input as the models see it: a
    digit's 28×28 model input in [0, 1], a face's crop, or a photo of one's own images as the first
    column reads it (RGB, or grey, uint8; each such column reads the photo at its own size).

    ``num_samples`` and ``seed`` record what was asked for (a sampled posterior may hold
    fewer draws than asked; each column's summary says how many it used).
    """

    image: np.ndarray
    columns: tuple[ComparisonColumn, ...]
    level: float
    class_names: tuple[str, ...]
    num_samples: int | None = None
    seed: int | None = None
    #: What the input is, in words: the file it was read from ("digit-7.png", "mnist-test:3"),
    #: or "your drawing"; named on the exported page and in provenance.json.
    input_label: str | None = None


def _model_input(image: np.ndarray | torch.Tensor) -> np.ndarray:
    """A 28×28 float32 model input from a 28×28 input, a (1, 1, 28, 28) tensor or a raw drawing."""
    array = np.asarray(image.detach().cpu() if isinstance(image, torch.Tensor) else image, np.float32)
    if array.ndim > 2:
        if any(d != 1 for d in array.shape[:-2]):
            raise ValueError(f"expected one grey image, got an array of shape {array.shape}")
        array = array.reshape(array.shape[-2:])
    return image_to_input(array)[0, 0].numpy()


def refuse_own_images(posteriors: Sequence[Posterior], what: str) -> None:
    """Refuse, in a sentence, posteriors of a person's own images where a digit is judged: the
    digit would reach them as MNIST's preprocessing makes it, not as their training images were read."""
    from core.engine.data.images import reads_photos

    if any(reads_photos(p.arch) for p in posteriors):
        raise ValueError(f"{what}, but a posterior here was trained on your own images; judge an image "
                         "with it by: bayescope-cli predict IMAGE --posterior FILE")


def _check_one_kind(posteriors: Sequence[Posterior], photo: bool, num_samples: int) -> None:
    """Refuse, in a sentence, posteriors that judge different kinds of input (one's own photos
    and digits), or a kind other than the input's."""
    from core.engine.data.images import reads_photos

    own = [p for p in posteriors if reads_photos(p.arch)]
    digits = [p for p in posteriors if not reads_photos(p.arch)]
    if own and digits:
        raise ValueError(
            f"these posteriors judge different inputs: {posterior_title(own[0], samples_used(own[0], num_samples))} "
            f"was trained on your own images and judges a photo, "
            f"{posterior_title(digits[0], samples_used(digits[0], num_samples))} judges digits; compare each kind "
            "on its own")
    if photo and digits:
        raise ValueError("a photo is judged by posteriors trained on your own images, and these judge digits: "
                         "compare them on a digit (a PNG of a digit, or mnist-test:INDEX)")
    if not photo:
        refuse_own_images(own, "a comparison judges a digit (28×28, grey)")


def _photo_shown(photo: Photo, arch: Any) -> np.ndarray:
    """What a posterior of ``arch`` sees of a photo: uint8 (S, S, 3) in colour, (S, S) grey."""
    pixels = photo.array(arch.image_size, arch.channels)  # (C, S, S)
    return pixels[0] if pixels.shape[0] == 1 else np.ascontiguousarray(pixels.transpose(1, 2, 0))


def default_class_names(posterior: Posterior) -> tuple[str, ...]:
    """The class names of the data set the posterior was trained on, else "0", "1", ..."""
    from core.engine.data.datasets import KNOWN

    own = posterior.info.get("class_names")  # a person's images: their class folders' names
    if isinstance(own, (list, tuple)) and len(own) == posterior.num_classes and all(isinstance(n, str) for n in own):
        return tuple(own)
    info = KNOWN.get(posterior.dataset.split("-")[0])
    if info is not None and len(info.class_names) == posterior.num_classes:
        return info.class_names
    return tuple(str(k) for k in range(posterior.num_classes))


def _identity(posterior: Posterior, source: str | None) -> tuple[str, Any]:
    if source:
        return ("file", Path(source).expanduser().resolve())
    return ("object", id(posterior))


def compare(
    posteriors: Sequence[tuple[Posterior, str | None]],
    image: np.ndarray | Photo,
    num_samples: int = 100,
    level: float = 0.9,
    seed: int | None = 0,
    class_names: Sequence[str] | None = None,
) -> Comparison:
    """Predict ``image`` with every posterior; one column each, in the order given.

    Parameters
    ----------
    posteriors
        ``(posterior, source)`` pairs; ``source`` is its file path (or None). A file given
        twice, or the same object twice, gives one column.
    image
        A 28×28 model input in [0, 1], or a raw drawing (light ink on dark) that is
        preprocessed as MNIST was; or a photo (:class:`core.engine.data.images.Photo`) for
        posteriors of one's own images, each reading it at its own size and channels.
    num_samples, level, seed
        As ``bayescope-cli predict --samples --level --seed``. ``seed=None`` lets each
        posterior use its own randomness (the GUI's stroke-by-stroke mode).

    Raises
    ------
    ValueError
        With no posterior, posteriors that disagree on the classes or the image size, class
        names that do not fit, or settings out of range.
    """
    if num_samples < 1:
        raise ValueError("the number of samples must be at least 1")
    if not 0 < level < 1:
        raise ValueError("the credible level must lie strictly between 0 and 1 (e.g. 0.9)")
    unique: dict[tuple[str, Any], tuple[Posterior, str | None]] = {}
    for posterior, source in posteriors:
        unique.setdefault(_identity(posterior, source), (posterior, None if source is None else str(source)))
    if not unique:
        raise ValueError("no posterior to compare: give at least one")
    chosen = list(unique.values())
    photo = hasattr(image, "model_input")  # a photo of one's own images, read by each at its own size
    _check_one_kind([p for p, _ in chosen], photo, num_samples)
    # a photo is read at each column's own size; a digit is one 28×28 input for all
    shapes = {(p.num_classes, default_class_names(p)) if photo else (p.num_classes, p.arch.image_size)
              for p, _ in chosen}
    if len(shapes) > 1:
        listing = "; ".join(
            f"{posterior_title(p, samples_used(p, num_samples))}: "
            + (f"classes {', '.join(default_class_names(p))}" if photo else
               f"{p.num_classes} classes, {p.arch.image_size}×{p.arch.image_size} images")
            for p, _ in chosen
        )
        raise ValueError(f"these posteriors cannot judge the same input: {listing}")
    names = tuple(str(c) for c in class_names) if class_names is not None else default_class_names(chosen[0][0])
    if len(names) != chosen[0][0].num_classes:
        raise ValueError(f"{len(names)} class names given for {chosen[0][0].num_classes} classes")
    x = _photo_shown(image, chosen[0][0].arch) if photo else _model_input(image)
    columns: list[ComparisonColumn] = []
    seen: dict[str, int] = {}
    for posterior, source in chosen:
        if photo:
            prediction = predict_input(posterior, image.model_input(posterior.arch), num_samples, seed=seed,
                                       level=level)
        else:
            prediction = predict_image(posterior, x, num_samples, seed=seed, level=level)
        title = posterior_title(posterior, samples_used(posterior, num_samples))
        # Two different files of the same method and model would share a header.
        seen[title] = seen.get(title, 0) + 1
        if seen[title] > 1:
            title = f"{title} ({seen[title]})"
        columns.append(ComparisonColumn(title, posterior, prediction, source))
    return Comparison(x, tuple(columns), level, names, num_samples, seed)


def comparison_table(comparison: Comparison) -> list[dict[str, Any]]:
    """Every number shown: one row per posterior and class.

    Per class: mean, credible ``lower``/``upper``, and the variance split (total =
    aleatoric + epistemic); per posterior, repeated on its rows: the entropy split in nats
    (the epistemic parts None, n/a, for a one-draw posterior),
    the top-two overlap (Bhattacharyya coefficient), the "uncertain" flag, the number of
    draws, the credible level asked and the share of the posterior the interval holds on
    average at that number of draws (``expected_coverage``, below the level with few draws).
    """
    rows = []
    for column in comparison.columns:
        s = column.prediction.summary
        epistemic = s.uncertainty_record()["epistemic"]  # None (n/a) for one draw
        for k, name in enumerate(comparison.class_names):
            rows.append({
                "posterior": column.title,
                "method": method_label(column.posterior.method),
                "source": column.source,
                "class": name,
                "predicted": k == s.predicted_class,
                "mean": float(s.mean[k]),
                "lower": float(s.lower[k]),
                "upper": float(s.upper[k]),
                "total_variance": float(s.total_variance[k]),
                "aleatoric_variance": float(s.aleatoric_variance[k]),
                "epistemic_variance": float(s.epistemic_variance[k]) if s.epistemic_defined else None,
                "total_entropy": float(s.total),
                "aleatoric_entropy": float(s.aleatoric),
                "epistemic_entropy": epistemic,
                # D-SGHMC with its input masks at prediction: the epistemic part in two
                "epistemic_weights_entropy": None if s.masks is None else s.masks.weights,
                "input_masks_entropy": None if s.masks is None else s.masks.input_masks,
                "overlap": float(s.overlap),
                "uncertain": bool(s.uncertain),
                "num_samples": int(s.num_samples),
                "level": float(comparison.level),
                "expected_coverage": float(s.expected_coverage),
            })
    return rows


def _count(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_count(v) for v in value)
    return 1


def _compact(value: Any) -> Any:
    """JSON-friendly copy with long (nested) lists, such as training traces, replaced by a note."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): _compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        n = _count(value)
        return f"{n} values (left out)" if n > MAX_LIST else [_compact(v) for v in value]
    if isinstance(value, (np.generic,)):
        return value.item()
    return value


def provenance(posterior: Posterior, source: str | None) -> dict[str, Any]:
    """Where a posterior comes from: method (name and in words), settings, architecture,
    training data set, seed, training info (long traces left out) and its file."""
    return {
        "method": posterior.method,
        "method_label": method_label(posterior.method),
        "method_in_words": METHOD_DESCRIPTIONS.get(posterior.method, posterior.method),
        "config": _compact(posterior.config),
        "arch": posterior.arch.to_dict(),
        "dataset": posterior.dataset,
        "seed": posterior.seed,
        "info": _compact(posterior.info),
        "source": source,
    }


def provenance_record(comparison: Comparison) -> dict[str, Any]:
    """``provenance.json``: the settings of the comparison and every column's provenance."""
    return {
        "input": comparison.input_label,
        "settings": {"num_samples": comparison.num_samples, "seed": comparison.seed,
                     "level": comparison.level, "class_names": list(comparison.class_names)},
        "columns": [
            {"title": c.title, "num_samples_used": c.prediction.summary.num_samples,
             **provenance(c.posterior, c.source)}
            for c in comparison.columns
        ],
    }
