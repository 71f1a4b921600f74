"""Compute a set of images' face descriptors once: in parallel, resumable, cached.

:func:`extract_descriptors` is a generator (it yields
:class:`~core.engine.inference.base.ProgressRecord` and returns a :class:`DescriptorTable`) that:

- splits the images into chunks of consecutive indices and hands them to worker processes
  (one per core by default, at lowered priority, one thread each), each of which writes
  its chunk's descriptors to a shard file atomically (temporary file, then rename);
- on a later call finds the shards already written and computes only the missing chunks,
  so an interrupted extraction (Ctrl-C, a closed window, a killed process) resumes where it
  stopped and loses at most the chunks in flight;
- when every chunk is done, merges the shards into one ``descriptors.npz`` and removes
  them; later calls read that file;
- with ``count``, describes only the first ``count`` images (the last chunk they reach is
  written holding just its wanted images; a later, larger request computes that chunk again).

The cache folder is ``<user cache>/faces/<descriptor name>-<version>/<source key>/``: a
change of the descriptor's version (its model files or pipeline) or of the images (the
source's key is a checksum of the archive or of the folder's files) gives a new folder.
Cancelling (closing the generator) terminates the workers at once.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import platformdirs

from core.engine.faces import _worker
from core.engine.faces._worker import STATUS_NAMES, ChunkTask, shard_path, write_npz_atomically
from core.engine.faces.descriptor import DEFAULT_DESCRIPTOR, DescriptorInfo, get_descriptor
from core.engine.inference.base import ProgressRecord

CACHE_FORMAT = "bayescope-face-descriptors"
CACHE_VERSION = 1
MERGED = "descriptors.npz"
MANIFEST = "manifest.json"
#: Images per shard: about 5 s of work for one core, the most a cancel can lose.
CHUNK_SIZE = 32
#: Priority increment of the worker processes (POSIX ``nice``): the machine stays usable.
WORKER_NICE = 10
#: Seconds between progress records while chunks are running (a cancel waits at most this).
HEARTBEAT_S = 0.5
#: Faces one core describes per second (HOG detection, alignment, the ResNet): the estimate
#: given before a description starts (:func:`describe_seconds`).
FACES_PER_SECOND_PER_CORE = 4.0


def describe_seconds(faces: int, workers: int | None = None) -> float:
    """About how long describing ``faces`` images takes on ``workers`` processes (default: one per core)."""
    return faces / (FACES_PER_SECOND_PER_CORE * max(1, workers or os.cpu_count() or 1))


class ImageSource(Protocol):
    """A fixed, ordered set of encoded images with a key that changes when any image does."""

    key: str
    names: tuple[str, ...]

    def read(self, wanted: set[int]) -> Iterator[tuple[int, bytes]]:
        """The encoded bytes of the images with the ``wanted`` indices, in any order."""

    def describe(self) -> str:
        """Where the images come from, in words."""


class DescriptorCacheError(ValueError):
    """A cache file that cannot be used (damaged, of another version); it is recomputed."""


@dataclass
class DescriptorTable:
    """The descriptors of a source's images, in the source's order.

    Attributes
    ----------
    names
        Image names (N,).
    descriptors
        (N, D) float32; rows of images that could not be described are NaN.
    status
        (N,) int8, one of the ``STATUS_*`` codes of :mod:`core.engine.faces._worker`.
    boxes
        (N, 4) int32 face boxes (left, top, right, bottom) in the image's pixels.
    info
        The descriptor that computed them.
    source_key
        The key (checksum) of the images.
    folder
        The cache folder they were read from or written to.
    """

    names: tuple[str, ...]
    descriptors: np.ndarray
    status: np.ndarray
    boxes: np.ndarray
    info: DescriptorInfo
    source_key: str
    folder: Path | None = None
    seconds: float = 0.0
    computed: int = 0
    stats: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def status_counts(self) -> dict[str, int]:
        """How many images ended in each status, in words."""
        values, counts = np.unique(self.status, return_counts=True)
        return {STATUS_NAMES.get(int(v), f"status {int(v)}"): int(c) for v, c in zip(values, counts, strict=True)}

    def usable(self) -> np.ndarray:
        """Boolean mask of the images that have a descriptor."""
        return np.isfinite(self.descriptors).all(axis=1)


def cache_root() -> Path:
    """``<user cache>/faces``: where descriptors are cached for this user."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "faces"


def cache_folder(root: Path, info: DescriptorInfo, source_key: str) -> Path:
    """``root/<name>-<version>/<key>``: the key's first 32 characters when it is a plain hex
    digest (an archive's SHA-256), else a digest of the whole key, so that two sources
    never share a folder (a subset's key extends its archive's)."""
    safe_version = "".join(c if c.isalnum() or c in "-_." else "_" for c in info.version)
    if len(source_key) >= 32 and all(c in "0123456789abcdef" for c in source_key):
        leaf = source_key[:32]
    else:
        leaf = "k" + hashlib.sha256(source_key.encode("utf-8", "surrogateescape")).hexdigest()[:31]
    return root / f"{info.name}-{safe_version}" / leaf


def _names_digest(names: Sequence[str]) -> str:
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


def _manifest(info: DescriptorInfo, source: ImageSource, chunk_size: int, assumed_box) -> dict[str, Any]:
    return {
        "format": CACHE_FORMAT,
        "version": CACHE_VERSION,
        "descriptor": {"name": info.name, "version": info.version, "dim": info.dim},
        "source_key": source.key,
        "images": len(source.names),
        "names_sha256": _names_digest(source.names),
        "chunk_size": chunk_size,
        "assumed_box": list(assumed_box) if assumed_box is not None else None,
    }


def _prepare_folder(folder: Path, manifest: dict[str, Any]) -> None:
    """Make ``folder`` hold the given manifest; files of any other manifest are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MANIFEST
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = None
    if current == manifest:
        return
    for entry in folder.iterdir():
        if entry.name.startswith(_worker.SHARD_PREFIX) or entry.name == MERGED:
            entry.unlink(missing_ok=True)
    tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, path)


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise
    except Exception as exc:  # numpy/zipfile raise many types for a damaged file
        raise DescriptorCacheError(f"{path} is damaged ({type(exc).__name__})") from None


def _check_part(
    arrays: dict[str, np.ndarray], indices: Sequence[int], names: Sequence[str], dim: int, what: Path
) -> None:
    need = {"indices", "names", "descriptors", "status", "boxes"}
    if not need <= set(arrays):
        raise DescriptorCacheError(f"{what} lacks {sorted(need - set(arrays))}")
    n = len(indices)
    if not np.array_equal(arrays["indices"], np.asarray(indices, dtype=np.int64)):
        raise DescriptorCacheError(f"{what} holds other images than expected")
    if list(arrays["names"]) != list(names):
        raise DescriptorCacheError(f"{what} holds other image names than expected")
    if arrays["descriptors"].shape != (n, dim) or arrays["descriptors"].dtype != np.float32:
        raise DescriptorCacheError(f"{what} holds descriptors of shape {arrays['descriptors'].shape}")
    if arrays["status"].shape != (n,) or arrays["boxes"].shape != (n, 4):
        raise DescriptorCacheError(f"{what} has inconsistent records")
    if not np.isin(arrays["status"], list(STATUS_NAMES)).all():
        raise DescriptorCacheError(f"{what} holds unknown status codes")


def _chunks(n: int, chunk_size: int) -> list[range]:
    return [range(start, min(start + chunk_size, n)) for start in range(0, n, chunk_size)]


def _held_chunks(folder: Path, source: ImageSource, chunks: list[range], dim: int) -> dict[int, int]:
    """How many images (from its first) each chunk's shard holds; a damaged shard is removed."""
    held = {}
    for c, span in enumerate(chunks):
        path = shard_path(folder, c)
        if not path.exists():
            continue
        try:
            arrays = _load_npz(path)
            count = len(arrays.get("indices", ()))
            if not 0 < count <= len(span):
                raise DescriptorCacheError(f"{path} holds {count} images")
            part = span[:count]
            _check_part(arrays, list(part), [source.names[i] for i in part], dim, path)
        except (DescriptorCacheError, FileNotFoundError):
            path.unlink(missing_ok=True)  # damaged (a disk error): compute it again
            continue
        held[c] = count
    return held


def _first_rows(folder: Path, chunks: list[range], wanted: int, dim: int) -> dict[str, np.ndarray]:
    """The shards' rows of the first ``wanted`` images, without merging or removing the shards."""
    parts = [_load_npz(shard_path(folder, c)) for c, span in enumerate(chunks) if span.start < wanted]
    keys = ("descriptors", "status", "boxes")
    if not parts:
        return {"descriptors": np.zeros((0, dim), np.float32), "status": np.zeros(0, np.int8),
                "boxes": np.zeros((0, 4), np.int32)}
    return {k: np.concatenate([p[k] for p in parts])[:wanted] for k in keys}


def _merge(folder: Path, source: ImageSource, chunks: list[range], info: DescriptorInfo) -> dict[str, np.ndarray]:
    parts = [_load_npz(shard_path(folder, c)) for c in range(len(chunks))]
    merged = {
        "indices": np.arange(len(source.names), dtype=np.int64),
        "names": np.asarray(source.names, dtype=str),
        "descriptors": np.concatenate([p["descriptors"] for p in parts]) if parts else np.zeros((0, info.dim), np.float32),
        "status": np.concatenate([p["status"] for p in parts]) if parts else np.zeros(0, np.int8),
        "boxes": np.concatenate([p["boxes"] for p in parts]) if parts else np.zeros((0, 4), np.int32),
    }
    write_npz_atomically(folder / MERGED, **merged)
    for c in range(len(chunks)):
        shard_path(folder, c).unlink(missing_ok=True)
    return merged


def _table(arrays: dict[str, np.ndarray], source: ImageSource, info: DescriptorInfo, folder: Path,
           count: int | None = None) -> DescriptorTable:
    n = len(source.names) if count is None else count
    return DescriptorTable(
        names=tuple(source.names[:n]),
        descriptors=arrays["descriptors"][:n],
        status=arrays["status"][:n],
        boxes=arrays["boxes"][:n],
        info=info,
        source_key=source.key,
        folder=folder,
    )


def extract_descriptors(
    source: ImageSource,
    descriptor: str = DEFAULT_DESCRIPTOR,
    *,
    root: Path | None = None,
    workers: int | None = None,
    chunk_size: int = CHUNK_SIZE,
    assumed_box: tuple[float, float, float, float] | None = None,
    nice: int = WORKER_NICE,
    count: int | None = None,
    cache_only: bool = False,
) -> Generator[ProgressRecord, None, DescriptorTable | None]:
    """Descriptors of every image of ``source`` (or of its first ``count``), from the cache or
    computed, with progress.

    Parameters
    ----------
    source
        The images (see :class:`ImageSource`).
    descriptor
        Name of the descriptor backend (:func:`core.engine.faces.descriptor.get_descriptor`).
    root
        Cache root (default :func:`cache_root`).
    workers
        Worker processes (default: one per core); 1 computes in this process.
    chunk_size
        Images per shard file.
    assumed_box
        For sources of pre-aligned face crops: the box, as fractions (left, top, right,
        bottom) of the image, described when the detector finds no face.
    nice
        Priority increment of the worker processes.
    count
        Describe only the first ``count`` images (all when None); the table then holds those.
    cache_only
        Return None instead of computing anything when they are not all in the cache.

    Yields ``ProgressRecord(step=images done, total=images wanted, phase="descriptors")``: the
    first (before any work) with ``to_describe`` (images left to compute), ``workers`` and
    ``estimated_seconds`` (:func:`describe_seconds`), later ones with ``faces_per_second``.
    """
    if chunk_size < 1:
        raise ValueError(f"a chunk must hold at least one image, got {chunk_size}")
    backend = get_descriptor(descriptor)
    info = backend.info
    folder = cache_folder(root or cache_root(), info, source.key)
    manifest = _manifest(info, source, chunk_size, assumed_box)
    n = len(source.names)
    wanted = n if count is None else max(0, min(int(count), n))
    start = time.perf_counter()
    try:
        _prepare_folder(folder, manifest)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot use the descriptor cache {folder}: {exc.strerror or exc}") from None
    merged_path = folder / MERGED
    if merged_path.exists():
        try:
            arrays = _load_npz(merged_path)
            _check_part(arrays, range(n), source.names, info.dim, merged_path)
        except (DescriptorCacheError, FileNotFoundError):
            merged_path.unlink(missing_ok=True)
        else:
            yield ProgressRecord(wanted, wanted, {"cached": 1.0}, "descriptors")
            table = _table(arrays, source, info, folder, wanted)
            table.seconds = time.perf_counter() - start
            return table
    from core.engine.files import sweep_stale_temp_files

    sweep_stale_temp_files(folder)
    chunks = _chunks(n, chunk_size)
    held = _held_chunks(folder, source, chunks, info.dim)
    # each chunk's wanted images: all of it, or the first ones of the last chunk a count reaches
    need = {c: span[:max(0, wanted - span.start)] for c, span in enumerate(chunks) if span.start < wanted}
    todo = [c for c, part in need.items() if held.get(c, 0) < len(part)]
    resumed = sum(len(part) for c, part in need.items() if c not in todo)
    images_done = resumed
    if todo and cache_only:
        return None
    to_describe = wanted - resumed
    workers = max(1, min(workers or (os.cpu_count() or 1), len(todo) or 1))
    yield ProgressRecord(images_done, wanted, {
        "resumed_images": float(resumed), "to_describe": float(to_describe), "workers": float(workers),
        "estimated_seconds": describe_seconds(to_describe, workers)}, "descriptors")
    if todo:
        indices = {i for c in todo for i in need[c]}
        blobs = dict(source.read(indices))
        missing = indices - set(blobs)
        if missing:
            raise ValueError(f"{source.describe()}: {len(missing)} image(s) could not be read from the source")
        tasks = [
            ChunkTask(c, str(folder), descriptor, list(need[c]), [source.names[i] for i in need[c]],
                      [blobs[i] for i in need[c]], assumed_box)
            for c in todo
        ]
        del blobs
        computing = time.perf_counter()
        results = _run_inline(tasks) if workers == 1 else _run_pool(tasks, workers, descriptor, nice)
        for finished in results:
            images_done += finished
            rate = (images_done - resumed) / max(time.perf_counter() - computing, 1e-9)
            yield ProgressRecord(images_done, wanted, {"faces_per_second": rate}, "descriptors")
    if wanted == n:
        arrays = _merge(folder, source, chunks, info)
    else:  # a part: the shards stay (a later, larger request goes on from them)
        arrays = _first_rows(folder, chunks, wanted, info.dim)
    table = _table(arrays, source, info, folder, wanted)
    table.seconds = time.perf_counter() - start
    table.computed = to_describe
    return table


def _run_inline(tasks: list[ChunkTask]) -> Iterator[int]:
    for task in tasks:
        _, count, _ = _worker.run_chunk(task)
        yield count


def _run_pool(tasks: list[ChunkTask], workers: int, descriptor: str, nice: int) -> Iterator[int]:
    """Images finished since the last report, every chunk or every :data:`HEARTBEAT_S` (0).

    The workers are terminated when the consumer stops early (cancel) or anything fails; a
    worker that dies (killed, out of memory, its initialiser failed) ends the run with a
    ``RuntimeError`` instead of leaving it waiting.
    """
    context = multiprocessing.get_context("spawn")  # safe beside threads (GUI) and on every OS
    executor = ProcessPoolExecutor(
        workers, mp_context=context, initializer=_worker.initialise, initargs=(descriptor, nice)
    )
    finished_cleanly = False
    try:
        pending = {executor.submit(_worker.run_chunk, task) for task in tasks}
        while pending:
            done, pending = wait(pending, timeout=HEARTBEAT_S, return_when=FIRST_COMPLETED)
            if not done:
                yield 0
            for future in done:
                try:
                    _, count, _ = future.result()
                except BrokenProcessPool:
                    raise RuntimeError(
                        "a descriptor worker process stopped unexpectedly (killed, or out of memory); "
                        "run again to resume from the finished chunks"
                    ) from None
                yield count
        finished_cleanly = True
    finally:
        if not finished_cleanly:
            # ProcessPoolExecutor has no public way to stop running tasks before Python 3.14
            for process in list(getattr(executor, "_processes", {}).values()):
                process.terminate()
        executor.shutdown(wait=True, cancel_futures=True)
