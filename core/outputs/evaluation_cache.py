"""The Dataset tab's evaluation: cancellable, and kept in the user cache.

The GUI's Dataset tab runs :func:`run_evaluation` in a worker. It evaluates each posterior
with :func:`core.analysis.evaluation.evaluate` (the CLI's own loop, batches and seeds, so the
numbers equal ``bayescope-cli evaluate``'s), yields progress in images, and keeps each
posterior's per-image results in the user cache under a key of everything that determines
them (:func:`cache_key`): the posterior file's SHA-256, the images and labels of both sets,
the number of samples, the seed, the batch rule and the code version. Entries are written
atomically, checked when read, and ignored (and removed) when damaged.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from core.analysis.conformal_run import attach_conformal
from core.analysis.dataset import (
    DatasetViews,
    EvaluationItem,
    _evaluation_shell,
    batch_size_for,
    build_views,
    dataset_sha256,
    open_sets,
    unique_names,
)
from core.analysis.evaluation import check_run_memory, evaluate, ood_list, set_names
from core.analysis.evaluation_results import PosteriorEvaluation
from core.analysis.metrics import ECE_BINS
from core.analysis.scoring import SCORES
from core.analysis.streaming import DatasetPredictions
from core.engine.files import (
    atomic_write,
    code_version,
    file_sha256,
    sweep_stale_temp_files,
)
from core.engine.inference.base import Dataset, ProgressRecord

#: Bumped whenever what a cache entry holds, or how it is computed, changes.
#: 2: every batch draws from its own generator (core.analysis.evaluation.batch_seed).
CACHE_FORMAT = 2


def cache_folder() -> Path:
    """Where evaluations are kept: ``<user cache>/bayescope/evaluations``."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "evaluations"


def cache_key(
    posterior_sha256: str,
    data_sha256: str,
    ood_sha256: str | None,
    num_samples: int | None,
    seed: int,
    batch_size: int,
    device_type: str = "cpu",
) -> str:
    """The cache key of one posterior's evaluation: a SHA-256 of everything that determines it.

    A GPU draws other random numbers from one seed than the CPU, so its evaluations are kept
    apart (``device_type``); the CPU's keys are those it always had."""
    record = {
        "format": CACHE_FORMAT, "code": code_version(), "posterior": posterior_sha256,
        "data": data_sha256, "ood": ood_sha256, "num_samples": num_samples, "seed": int(seed),
        "batch_size": int(batch_size), "ece_bins": ECE_BINS,
    }
    if device_type != "cpu":
        record["device"] = device_type
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _pack(prefix: str, preds: DatasetPredictions) -> dict[str, np.ndarray]:
    arrays = {
        f"{prefix}mean_proba": preds.mean_proba, f"{prefix}labels": preds.labels,
        f"{prefix}chain_predictions": preds.chain_predictions,
        f"{prefix}num_samples": np.asarray(preds.num_samples),
    }
    arrays.update({f"{prefix}score_{k}": v for k, v in preds.scores.items()})
    return arrays


def _unpack(prefix: str, arrays: Any, labels: np.ndarray) -> DatasetPredictions:
    mean = np.asarray(arrays[f"{prefix}mean_proba"], dtype=np.float64)
    stored = np.asarray(arrays[f"{prefix}labels"], dtype=np.int64)
    chains = np.asarray(arrays[f"{prefix}chain_predictions"], dtype=np.int64)
    n = len(labels)
    if mean.ndim != 2 or mean.shape[0] != n or not np.array_equal(stored, labels) or chains.shape[1:] != (n,):
        raise ValueError("the cached results do not match the data set")
    scores = {k: np.asarray(arrays[f"{prefix}score_{k}"], dtype=np.float64) for k in SCORES}
    if any(v.shape != (n,) for v in scores.values()) or not np.isfinite(mean).all():
        raise ValueError("the cached results are damaged")
    return DatasetPredictions(mean, stored, scores, chains, int(arrays[f"{prefix}num_samples"]))


def _ood_prefix(j: int) -> str:
    """The arrays' prefix of OOD set ``j``: ``ood_`` for the first (as entries always had), then ``ood2_``, …"""
    return "ood_" if j == 0 else f"ood{j + 1}_"


def read_cache(path: Path, data: Dataset, ood: Dataset | Sequence[Dataset] | None,
               ) -> tuple[DatasetPredictions, list[DatasetPredictions]] | None:
    """A cache entry's predictions (the test set's, then each OOD set's), or None when it is
    missing or damaged (then it is removed)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as arrays:
            preds = _unpack("data_", arrays, data.y.numpy().astype(np.int64))
            others = [_unpack(_ood_prefix(j), arrays, other.y.numpy().astype(np.int64))
                      for j, other in enumerate(ood_list(ood))]
    except Exception:  # noqa: BLE001 — any unreadable entry is simply recomputed
        path.unlink(missing_ok=True)
        return None
    return preds, others


def write_cache(path: Path, result: PosteriorEvaluation) -> bool:
    """Store one posterior's predictions atomically; False when the cache cannot be written."""
    arrays = _pack("data_", result.data)
    others = list(result.ood_sets.values()) or ([result.ood] if result.ood is not None else [])
    for j, preds in enumerate(others):
        arrays.update(_pack(_ood_prefix(j), preds))
    try:
        atomic_write(path, lambda fh: np.savez(fh, **arrays), "a cached evaluation")
    except OSError:
        return False  # a full or read-only cache costs a recomputation, never the evaluation
    return True


def clear_cache(folder: str | os.PathLike | None = None) -> int:
    """Delete every cached evaluation (and stale temporary files); return how many entries went."""
    folder = Path(folder) if folder is not None else cache_folder()
    removed = 0
    if not folder.is_dir():
        return 0
    sweep_stale_temp_files(folder)
    for entry in folder.glob("*.npz"):
        try:
            entry.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def evaluate_dataset(
    items: Sequence[EvaluationItem],
    data: Dataset,
    ood: Dataset | Sequence[Dataset] | None = None,
    *,
    num_samples: int | None = None,
    seed: int = 0,
    use_cache: bool = True,
    cache_only: bool = False,
    folder: str | os.PathLike | None = None,
) -> Generator[ProgressRecord, None, DatasetViews | None]:
    """Evaluate every posterior on ``data`` (and ``ood``: one set or several), from the cache where possible.

    Yields a :class:`ProgressRecord` per batch whose ``step``/``total`` count images over all
    posteriors and sets; ``phase`` is the posterior's name and ``values`` hold ``index`` (its
    position), ``images_done`` and ``images_total`` (its own images, test and OOD set
    together), ``cached`` (1.0 when it came from the cache) and, once measured, ``images_per_s`` and
    ``seconds_left`` (:func:`core.analysis.evaluation.progress_in_words` says them). Stop iterating to cancel:
    nothing of an unfinished posterior is stored. Returns a :class:`DatasetViews`, or None
    when ``cache_only`` is set and some posterior is not in the cache (nothing is computed).
    """
    if not items:
        raise ValueError("no posterior to evaluate: add a column first")
    names = unique_names([item.name for item in items])
    folder = Path(folder) if folder is not None else cache_folder()
    oods = ood_list(ood)
    ood_names = set_names(oods)
    per_posterior = len(data) + sum(len(other) for other in oods)
    total = per_posterior * len(items)
    data_sha = dataset_sha256(data) if use_cache else ""
    # one set keeps the key it always had; several are keyed by all of them, in order
    ood_shas = [dataset_sha256(other) for other in oods] if use_cache else []
    ood_sha = None if not ood_shas else ood_shas[0] if len(ood_shas) == 1 else "+".join(ood_shas)
    # the whole run, every column, weighed once before its first image: each column's results
    # stay to the end, and reading the machine's memory once is enough
    check_run_memory([(name, item.posterior, batch_size_for(item.posterior, num_samples))
                      for name, item in zip(names, items, strict=True)], [data, *oods], num_samples)
    shell = _evaluation_shell(data, ood, num_samples, seed, items[0].posterior.num_classes)
    files: dict[str, dict[str, str]] = {}
    cached: dict[str, bool] = {}
    yield ProgressRecord(0, total, {"index": 0.0, "images_done": 0.0, "images_total": float(per_posterior),
                                    "cached": 0.0}, names[0])
    for index, (name, item) in enumerate(zip(names, items, strict=True)):
        b = batch_size_for(item.posterior, num_samples)
        path = None
        if item.source is not None:
            sha = file_sha256(item.source)
            files[name] = {"file": str(Path(item.source).absolute()), "file_sha256": sha}
            if use_cache:
                key = cache_key(sha, data_sha, ood_sha, num_samples, seed, b, item.posterior.device.type)
                path = folder / f"{key}.npz"
        hit = read_cache(path, data, ood) if path is not None else None
        base = index * per_posterior
        if hit is None and cache_only:
            return None
        if hit is not None:
            shell.results[name] = PosteriorEvaluation(item.posterior, hit[0], hit[1][0] if hit[1] else None,
                                                      ood_sets=dict(zip(ood_names, hit[1], strict=True)))
            cached[name] = True
            yield ProgressRecord(base + per_posterior, total, {
                "index": float(index), "images_done": float(per_posterior),
                "images_total": float(per_posterior), "cached": 1.0}, name)
            continue
        run = evaluate({name: item.posterior}, data, oods, num_samples=num_samples, seed=seed, batch_size=b,
                       weighed=True)
        try:
            while True:
                record = next(run)
                done = int(record.values.get("images", 0))  # test and OOD images together
                rate = {key: record.values[key] for key in ("images_per_s", "seconds_left") if key in record.values}
                yield ProgressRecord(base + done, total, {
                    "index": float(index), "images_done": float(done),
                    "images_total": float(per_posterior), "cached": 0.0, **rate}, name)
        except StopIteration as stop:
            result = stop.value.results[name]
        finally:
            run.close()
        shell.results[name] = result
        cached[name] = False
        if path is not None:
            write_cache(path, result)
    if files:
        shell.settings["posterior_files"] = files
    attach_conformal(shell, data, {name: item.source for name, item in zip(names, items, strict=True)},
                     sha256={name: entry["file_sha256"] for name, entry in files.items()})
    return build_views(shell, data, ood, cached)


def run_evaluation(
    items: Sequence[EvaluationItem],
    dataset: str,
    ood: str | Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    *,
    num_samples: int | None = None,
    seed: int = 0,
    use_cache: bool = True,
    cache_only: bool = False,
    folder: str | os.PathLike | None = None,
    image_size: int | None = None,
    channels: int | None = None,
) -> Generator[ProgressRecord, None, DatasetViews | None]:
    """Load the sets (:func:`open_sets`; folders of a person's images at ``image_size`` and
    ``channels``), then :func:`evaluate_dataset`; the GUI's worker runs this.

    The first record (``phase`` "loading", total 0) comes before the files are read. For the
    faces test split, the descriptor extraction's records follow (``phase`` "descriptors",
    ``step``/``total`` in faces) when they are not cached yet; the views then carry the
    photos (:attr:`DatasetViews.faces`). The descriptor extraction runs dlib: iterate this in a
    plain thread, not a Qt pool thread (see :class:`app.workers.PythonThreadCall`).
    """
    yield ProgressRecord(0, 0, {}, "loading")
    # a folder of a person's images is split as each posterior's training split it (one record each)
    trained_on = {item.name: item.posterior.info.get("training_data") for item in items}
    sets = yield from open_sets(dataset, ood, data_dir, limit, cache_only=cache_only, image_size=image_size,
                                channels=channels, trained_on=trained_on)
    if sets is None:
        return None
    data, other, faces = sets
    views = yield from evaluate_dataset(items, data, other, num_samples=num_samples, seed=seed,
                                        use_cache=use_cache, cache_only=cache_only, folder=folder)
    if views is not None:
        views.faces = faces
    return views
