"""What one descriptor worker process runs: decode, detect, align, describe, write a shard.

Kept free of torch (and of anything that imports it) so that each of the worker processes
:func:`core.engine.faces.extract.extract_descriptors` starts loads only numpy, Pillow and dlib.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path
from typing import NamedTuple

import numpy as np

from core.engine.faces.descriptor import FaceBox, FaceDescriptor, get_descriptor
from core.engine.faces.photo import decode_photo

#: The face was found by the detector; its largest box was described.
STATUS_DETECTED = 0
#: No face was found and the source's assumed box (pre-aligned crops) was described.
STATUS_ASSUMED = 1
#: The image could not be read or described; its descriptor is NaN.
STATUS_FAILED = 2
#: No face was found and the source has no assumed box; its descriptor is NaN.
STATUS_NO_FACE = 3
STATUS_NAMES = {
    STATUS_DETECTED: "face detected",
    STATUS_ASSUMED: "no face detected, assumed box of the aligned crop used",
    STATUS_FAILED: "unreadable image",
    STATUS_NO_FACE: "no face detected",
}
SHARD_PREFIX = "shard-"


class ChunkTask(NamedTuple):
    """One chunk of consecutive images for a worker (plain data: it is pickled)."""

    chunk: int
    folder: str
    descriptor: str
    indices: list[int]
    names: list[str]
    blobs: list[bytes]
    assumed_box: tuple[float, float, float, float] | None


def initialise(descriptor: str, nice: int) -> None:
    """Pool initialiser: one thread per process, lower priority, Ctrl-C left to the parent."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    if nice > 0 and hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(nice)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent cancels by terminating us
    get_descriptor(descriptor)  # load the models once, before the first task


def assumed_face_box(image: np.ndarray, fractions: tuple[float, float, float, float]) -> FaceBox:
    """The box at ``fractions`` (left, top, right, bottom) of the image's width and height."""
    h, w = image.shape[:2]
    left, top, right, bottom = fractions
    return FaceBox(
        int(round(left * w)), int(round(top * h)),
        max(int(round(right * w)), int(round(left * w)) + 1),
        max(int(round(bottom * h)), int(round(top * h)) + 1),
    )


def describe_image(
    backend: FaceDescriptor,
    data: bytes,
    name: str,
    assumed_box: tuple[float, float, float, float] | None,
) -> tuple[np.ndarray, int, tuple[int, int, int, int]]:
    """(descriptor, status, box) of the largest face in an encoded image; never raises
    for a bad image (its status says what happened and its descriptor is NaN)."""
    dim = backend.info.dim
    failed = np.full(dim, np.nan, dtype=np.float32)
    try:
        image = decode_photo(data, name)
    except ValueError:
        return failed, STATUS_FAILED, (0, 0, 0, 0)
    boxes = backend.detect(image)
    if boxes:
        box, status = boxes[0], STATUS_DETECTED
    elif assumed_box is not None:
        box, status = assumed_face_box(image, assumed_box), STATUS_ASSUMED
    else:
        return failed, STATUS_NO_FACE, (0, 0, 0, 0)
    try:
        chip = backend.align(image, box)
        vector = backend.describe(chip)
    except (ValueError, RuntimeError):
        return failed, STATUS_FAILED, (box.left, box.top, box.right, box.bottom)
    return vector, status, (box.left, box.top, box.right, box.bottom)


def shard_path(folder: Path, chunk: int) -> Path:
    return folder / f"{SHARD_PREFIX}{chunk:06d}.npz"


def write_npz_atomically(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez`` into a temporary file beside ``path``, synced, then renamed over it.

    The temporary name follows :func:`core.engine.files.sweep_stale_temp_files`'s pattern, so one left
    by a killed process is swept later.
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def run_chunk(task: ChunkTask) -> tuple[int, int, dict[int, int]]:
    """Describe one chunk of images and write its shard; return (chunk, images, status counts)."""
    backend = get_descriptor(task.descriptor)
    vectors, statuses, boxes = [], [], []
    for name, data in zip(task.names, task.blobs, strict=True):
        vector, status, box = describe_image(backend, data, name, task.assumed_box)
        vectors.append(vector)
        statuses.append(status)
        boxes.append(box)
    write_npz_atomically(
        shard_path(Path(task.folder), task.chunk),
        indices=np.asarray(task.indices, dtype=np.int64),
        names=np.asarray(task.names, dtype=str),
        descriptors=np.stack(vectors).astype(np.float32),
        status=np.asarray(statuses, dtype=np.int8),
        boxes=np.asarray(boxes, dtype=np.int32).reshape(len(task.names), 4),
    )
    counts: dict[int, int] = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return task.chunk, len(task.names), counts
