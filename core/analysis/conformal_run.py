"""Calibrating a posterior's conformal sets on its held-out calibration images, and measuring
their coverage on evaluated images (the numbers of ``bayescope-cli calibrate`` and of
``evaluate``'s conformal table; :mod:`core.engine.calibration_file` keeps the record).

**Which images calibrate.** A calibration image must be neither a training image nor an image
the coverage is then measured on. For MNIST every official training image is training data
(the validation split that chose the hyperparameters is part of it), so the calibration images
are a fixed half of the official *test* set, chosen by a hash of each image's pixels
(:func:`core.analysis.conformal.calibration_mask`), and coverage is measured on the other half
only. The rule depends on each image alone, so a subset of the test set (``--limit``) splits as
the whole set does, and an image's identity is its pixels: the same check finds it wherever it
was read from. :func:`calibrate` leaves out any calibration image whose pixels are a training
image's; :func:`measured_coverage` leaves out every evaluated image whose pixels are a
calibration image's.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.analysis.conformal import (
    CALIBRATION_FRACTION,
    CALIBRATION_SEED,
    CONFORMAL_SCORES,
    DEFAULT_LEVEL,
    Calibration,
    CoverageRow,
    aps_draws,
    coverage_bounds,
    coverage_table,
    image_fingerprints,
)
from core.analysis.conformal import calibration_mask as pixel_hash_mask
from core.analysis.evaluation import FACE_TEST_SET, resolve_dataset
from core.analysis.evaluation_results import Evaluation
from core.analysis.streaming import predict_dataset
from core.engine.calibration_file import (
    AGAIN,
    how_to_calibrate,
    read_calibration,
    write_calibration,
)
from core.engine.data.split import pack_fingerprints, unpack
from core.engine.inference.base import Dataset, Posterior, ProgressRecord

#: The rule in words (recorded).
RULE_WORDS = (f"images of the posterior's test set whose pixel hash (SHA-256, seed {CALIBRATION_SEED}) falls "
              f"below {CALIBRATION_FRACTION:g}; the other images are evaluated")
#: Levels whose q̂ the record lists for a reader (any level follows from the scores).
LISTED_LEVELS = (0.8, 0.9, 0.95, 0.99)


def _files(source: dict[str, Any]) -> dict[str, Any]:
    """The data set's files by name with their records (size, checksum), where its source lists
    them so (IDX files); a folder's or a network's features source counts or packs its files
    instead, and its images are identified by their pixels alone."""
    files = source.get("files")
    return {name: dict(entry) for name, entry in files.items()} if isinstance(files, dict) else {}


def calibration_images(data: Dataset, train: Dataset | None = None) -> tuple[np.ndarray, list[bytes], int]:
    """Which of ``data``'s images (the posterior's test set) calibrate: a boolean mask, every
    image's fingerprint, and how many chosen images were left out as training images (``train``,
    checked by identity: a chosen image whose pixels are a training image's does not calibrate)."""
    prints = image_fingerprints(data.x)
    chosen = pixel_hash_mask(prints)
    overlap = 0
    if train is not None:
        seen = set(image_fingerprints(train.x))
        in_train = np.fromiter((fp in seen for fp in prints), dtype=bool, count=len(prints))
        overlap = int((chosen & in_train).sum())
        chosen &= ~in_train
    if not chosen.any():
        raise ValueError(f"{data.name} has no calibration images ({len(data)} images, half of them are chosen)")
    return chosen, prints, overlap


def calibration_record(
    posterior: Posterior, data: Dataset, train: Dataset | None, chosen: np.ndarray, prints: list[bytes],
    overlap: int, proba: Any, labels: Any, num_samples: int, seed: int,
) -> tuple[Calibration, dict[str, Any]]:
    """The :class:`Calibration` from p̄ and labels of the chosen images, and the sidecar's record."""
    identity = {
        "dataset": data.name, "dataset_files": _files(data.source), "rule": RULE_WORDS,
        "fraction": CALIBRATION_FRACTION, "hash_seed": CALIBRATION_SEED,
        "images": int(chosen.sum()), "of_images": len(data),
        "fingerprints": pack_fingerprints([prints[i] for i in np.flatnonzero(chosen)]),
        "training_files": _files(train.source) if train is not None else None,
        "training_images_checked": len(train) if train is not None else 0,
        "left_out_as_training_images": overlap,
        "num_samples": int(num_samples),
    }
    calibration = Calibration.of(proba, labels, identity, u=aps_draws(len(labels), seed))
    record = {
        "identity": identity,
        "predictive": {"num_samples": int(num_samples), "seed": int(seed), "method": posterior.method},
        "aps_seed": int(seed),
        "scores": {s: encode_scores(calibration.scores[s]) for s in CONFORMAL_SCORES},
        "quantiles": {f"{level:g}": {s: calibration.quantile(level, s) for s in CONFORMAL_SCORES}
                      for level in LISTED_LEVELS},
    }
    return calibration, record


def calibrate(
    posterior: Posterior, data: Dataset, train: Dataset | None = None, *,
    num_samples: int | None = None, seed: int = 0,
) -> Generator[ProgressRecord, None, tuple[Calibration, dict[str, Any]]]:
    """Predict the calibration half of ``data`` (the posterior's test set) and return its
    :class:`Calibration` and the record the sidecar keeps (:func:`calibration_images`)."""
    chosen, prints, overlap = calibration_images(data, train)
    held = data.subset(torch.as_tensor(np.flatnonzero(chosen)))
    generator = torch.Generator().manual_seed(int(seed))
    predictions = yield from predict_dataset(posterior, held, num_samples, generator=generator)
    return calibration_record(posterior, data, train, chosen, prints, overlap, predictions.mean_proba,
                              predictions.labels, predictions.num_samples, seed)


def training_images(posterior: Posterior, data_dir: str | os.PathLike | None, shape: dict) -> Dataset | None:
    """The posterior's training images when they are a known data set (MNIST's training file),
    to check the calibration images against by identity; None otherwise (a person's folder is
    split by the rule the posterior records, which already leaves its training images out)."""
    trained = posterior.info.get("training_data") or {}
    if trained.get("dataset") == "mnist" and trained.get("split") == "train":
        return resolve_dataset("mnist-train", data_dir, **shape)
    return None


def calibrate_file(
    path: str | os.PathLike, posterior: Posterior, data: Dataset, data_dir: str | os.PathLike | None = None, *,
    num_samples: int | None = None, seed: int = 0,
) -> Generator[ProgressRecord, None, tuple[Calibration, dict[str, Any], Path]]:
    """:func:`calibrate` the posterior read from ``path`` on its test set ``data`` (its training
    images, when a known set, read from ``data_dir`` and left out) and write the calibration
    (:func:`~core.engine.calibration_file.write_calibration`: beside the file, or in the user's data
    folder when that folder cannot be written). Returns the calibration, its record and the file
    written. What ``bayescope-cli calibrate`` and the window's column menu both run."""
    shape = {"image_size": posterior.arch.image_size, "channels": posterior.arch.channels}
    train = training_images(posterior, data_dir, shape)
    calibration, record = yield from calibrate(posterior, data, train, num_samples=num_samples, seed=seed)
    return calibration, record, write_calibration(path, record)


def calibrate_from_evaluation(
    posterior: Posterior, data: Dataset, predictions: Any, train: Dataset | None = None, seed: int = 0,
) -> tuple[Calibration, dict[str, Any]]:
    """:func:`calibrate` from an evaluation's predictions on the whole test set ``data`` (one
    pass for both halves: ``evaluate --calibrate``)."""
    chosen, prints, overlap = calibration_images(data, train)
    return calibration_record(posterior, data, train, chosen, prints, overlap,
                              np.asarray(predictions.mean_proba)[chosen], np.asarray(predictions.labels)[chosen],
                              predictions.num_samples, seed)


def calibrate_evaluation(
    ev: Evaluation, data: Dataset, paths: Mapping[str, str | os.PathLike],
    train: Mapping[str, Dataset | None] | None = None, seed: int = 0,
) -> dict[str, tuple[Calibration, Path]]:
    """Each posterior's calibration from the evaluation ``ev`` of ``data`` (its test set; one
    pass for both halves, :func:`calibrate_from_evaluation`), written beside its file.

    Parameters
    ----------
    ev, data
        The evaluation and the data set it predicted.
    paths
        Each result's posterior file, by the name ``ev.results`` gives it.
    train
        The training images to leave out, by result name (none where absent or None: a
        folder's split already leaves them out).
    seed
        The seed recorded for the APS randomisation.

    Returns
    -------
    dict
        By result name: the calibration and the sidecar file written.
    """
    written = {}
    for name, result in ev.results.items():
        calibration, record = calibrate_from_evaluation(result.posterior, data, result.data,
                                                        (train or {}).get(name), seed=seed)
        written[name] = calibration, write_calibration(paths[name], record)
    return written


def encode_scores(scores: Any) -> dict[str, str]:
    """Sorted scores as little-endian float64 in base64 (exact, a third of JSON's decimal size)."""
    raw = np.ascontiguousarray(np.sort(np.asarray(scores, dtype="<f8")))
    return {"float64_base64": base64.b64encode(raw.tobytes()).decode("ascii")}


def decode_scores(entry: Any) -> np.ndarray:
    """The scores :func:`encode_scores` wrote (or a plain list)."""
    if isinstance(entry, dict):
        return np.frombuffer(base64.b64decode(entry["float64_base64"]), dtype="<f8").astype(np.float64)
    return np.asarray(entry, dtype=np.float64)


def calibration_of_record(record: dict[str, Any]) -> Calibration:
    """The :class:`Calibration` a sidecar record holds."""
    if not isinstance(record.get("aps_seed"), int):
        raise ValueError(f"the conformal calibration was made with another APS form; {AGAIN}")
    try:
        scores = {s: np.sort(decode_scores(record["scores"][s])) for s in CONFORMAL_SCORES}
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the conformal calibration's scores cannot be read ({exc})") from None
    n = {len(v) for v in scores.values()}
    if len(n) != 1:
        raise ValueError("the calibration's scores disagree on the number of images")
    return Calibration(scores, n.pop(), dict(record.get("identity") or {}))


def measured_coverage(
    calibration: Calibration, images: Any, proba: Any, labels: Any, level: float, seed: int = 1,
) -> tuple[list[CoverageRow], int]:
    """Coverage and set size on evaluated images (``images`` (N, ...), their p̄ and labels),
    leaving out every image that calibrated (by pixel identity). Returns the rows and how many
    images were left out."""
    calibrated = unpack(calibration.identity.get("fingerprints")) or set()
    prints = image_fingerprints(images)
    keep = np.fromiter((fp not in calibrated for fp in prints), dtype=bool, count=len(prints))
    p, y = np.asarray(proba)[keep], np.asarray(labels)[keep]
    return coverage_table(calibration, p, y, level, u=aps_draws(len(y), seed)), int((~keep).sum())


def same_files(calibration: Calibration, source: dict[str, Any]) -> bool:
    """Whether evaluated images come from the files the calibration images came from (the
    coverage guarantee needs exchangeable images; another data set has none)."""
    mine = {e.get("content_sha256") or e.get("sha256") for e in (calibration.identity.get("dataset_files") or {}).values()}
    theirs = {e.get("content_sha256") or e.get("sha256") for e in _files(source).values()}
    return bool(mine) and mine == theirs



def attach_conformal(ev: Evaluation, data: Dataset, sources: Mapping[str, str | os.PathLike | None],
                     level: float = DEFAULT_LEVEL, sha256: Mapping[str, str] | None = None) -> None:
    """Fill ``ev.conformal``: for each posterior whose file (``sources``) has a calibration
    beside it, the coverage and set size of each score on ``data``'s images (the evaluated
    ones, in ``ev``'s order) that did not calibrate; for the others, one sentence saying why
    there is none and how to get it."""
    for name, result in ev.results.items():
        source = sources.get(name)
        if source is None:
            ev.conformal[name] = {"missing": "this posterior has no file beside which a calibration could lie"}
            continue
        try:
            record = read_calibration(source, (sha256 or {}).get(name))
            calibration = calibration_of_record(record) if record is not None else None
        except ValueError as exc:  # CalibrationFileError is one
            ev.conformal[name] = {"missing": str(exc)}
            continue
        if calibration is None:
            ev.conformal[name] = {"missing": how_to_calibrate(source, test_set_words(result.posterior))}
            continue
        rows, left_out = measured_coverage(calibration, data.x, result.data.mean_proba, result.data.labels, level,
                                           seed=int(record.get("aps_seed", 0)) + 1)
        exchangeable = same_files(calibration, data.source)
        ev.conformal[name] = {
            "rows": [{"score": r.score, "level": r.level, "qhat": r.qhat,
                      "calibration_images": r.calibration_images, "evaluated_images": r.evaluated_images,
                      "left_out_calibration_images": left_out, "coverage": r.coverage,
                      "mean_set_size": r.mean_set_size, "guaranteed_lower": r.lower_bound,
                      "guaranteed_upper": r.upper_bound, "sampling_error": r.sampling_error,
                      "exchangeable": exchangeable,
                      "within_guarantee": r.within if exchangeable else None} for r in rows],
            "calibration": {k: v for k, v in calibration.identity.items() if k != "fingerprints"},
        }


def guarantee_words(level: float, n: int) -> str:
    """The guarantee in one sentence (CLI, report, Dataset tab)."""
    low, high = coverage_bounds(level, n)
    return (f"split conformal guarantees coverage ≥ {low:.1%} on images exchangeable with the {n:,} calibration "
            f"images, and ≤ 1 − α + 1/(n + 1) = {high:.2%} (expected over calibration and test draws)")


def test_set_words(posterior: Posterior | None) -> str | None:
    """The ``--dataset`` of ``calibrate`` for a posterior not trained on MNIST (None for MNIST)."""
    if posterior is None:
        return None
    trained = posterior.info.get("training_data") or {}
    if trained.get("dataset") == "mnist":
        return None
    if posterior.arch.input_dim:  # a head over face descriptors
        return FACE_TEST_SET
    return "FOLDER (its images)"


def column_calibration(posterior_path: str | os.PathLike) -> tuple[Calibration | None, str]:
    """A column's calibration, read once (:func:`~core.engine.calibration_file.read_calibration`):
    ``(calibration, "")``; ``(None, "")`` when it has none yet; or ``(None, one line saying why the
    one found cannot be used)``."""
    try:
        record = read_calibration(posterior_path)
        return (None, "") if record is None else (calibration_of_record(record), "")
    except (OSError, ValueError) as exc:  # CalibrationFileError is a ValueError
        return None, f"No conformal set: {exc}"


__all__ = ["LISTED_LEVELS", "RULE_WORDS", "attach_conformal", "calibrate", "calibrate_evaluation",
           "calibrate_file", "calibrate_from_evaluation", "training_images",
           "calibration_images", "calibration_of_record", "calibration_record",
           "column_calibration", "decode_scores", "encode_scores", "guarantee_words", "measured_coverage",
           "same_files"]
