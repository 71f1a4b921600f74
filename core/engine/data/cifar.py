"""CIFAR-10/100 binary files as a person's data set, with the files' own training and test batches.

``data_batch_*.bin`` + ``test_batch.bin`` (one label byte, then 3072 bytes: 1024 red, 1024 green,
1024 blue, row by row) or ``train.bin`` + ``test.bin`` (CIFAR-100: a coarse and a fine label
byte, the fine label used), with the class names of ``batches.meta.txt`` /
``fine_label_names.txt`` when present. The memory a read takes is estimated from the files' sizes
and checked before a byte is read; records are converted a chunk at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.data.listing import IDENTITY_VERSION
from core.engine.data.split import FILES_RULE, SplitRule
from core.engine.inference.base import Dataset
from core.engine.memory import check_fits

#: CIFAR's image side and bytes per image.
CIFAR_SIDE = 32
CIFAR_PIXELS = 3 * CIFAR_SIDE * CIFAR_SIDE
CIFAR10_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _cifar_names(folder: Path, layout: str, count: int) -> tuple[str, ...]:
    """The class names of a CIFAR folder: its names file's (refused with a sentence when it names
    a class twice or fewer classes than the labels use), else CIFAR-10's own, else numbers."""
    file = folder / ("batches.meta.txt" if layout == "cifar-10" else "fine_label_names.txt")
    if file.is_file():
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        numbered = [(i, line.strip()) for i, line in enumerate(lines, start=1) if line.strip()]
        first: dict[str, int] = {}
        for line, name in numbered:
            if name in first:
                raise DatasetContentError(f"{file.name}, line {line} names the class {name} again (line "
                                          f"{first[name]} named it); each class has one name, one per line")
            first[name] = line
        if len(numbered) < count:
            raise DatasetContentError(f"{file.name} names {len(numbered)} classes, but the records' labels run to "
                                      f"{count - 1} ({count} classes); give one name per class, one per line")
        return tuple(name for _, name in numbered)
    if layout == "cifar-10" and count <= 10:
        return CIFAR10_NAMES
    return tuple(str(i) for i in range(count))


#: Labels a CIFAR record may carry: (coarse, fine) for CIFAR-100, one for CIFAR-10.
CIFAR_LABELS = {"cifar-10": (10,), "cifar-100": (20, 100)}
#: Records converted at a time: the float32 copies of one chunk are all that is held beside the
#: file's bytes and the images already converted.
CIFAR_CHUNK = 4096


def cifar_record_count(files: Sequence[Path], layout: str) -> int:
    """Records in ``files`` from their sizes alone; a size that is not whole records is refused."""
    record = len(CIFAR_LABELS[layout]) + CIFAR_PIXELS
    total = 0
    for file in files:
        size = file.stat().st_size
        if size == 0 or size % record:
            raise DatasetContentError(
                f"{file.name}: {size:,} bytes is not a whole number of {layout} records of {record} bytes "
                "(the file is truncated or not a CIFAR binary file)")
        total += size // record
    return total


def read_cifar_files(files: Sequence[Path], layout: str) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR binary records → uint8 images (N, 3, 32, 32) and labels (N,) (the fine label for 100).

    The images are read into one uint8 array (the files' size, no copy of them): a label out of
    its data set's range (a damaged file, or another CIFAR's records) is refused with the file
    and the record's number.
    """
    limits = CIFAR_LABELS[layout]
    head = len(limits)
    record = head + CIFAR_PIXELS
    n = cifar_record_count(files, layout)
    images = np.empty((n, 3, CIFAR_SIDE, CIFAR_SIDE), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    at = 0
    for file in files:
        with file.open("rb") as fh:
            start = 0
            while chunk := fh.read(CIFAR_CHUNK * record):
                rows = np.frombuffer(chunk, dtype=np.uint8).reshape(-1, record)
                for column, limit in enumerate(limits):
                    wrong = np.flatnonzero(rows[:, column] >= limit)
                    if len(wrong):
                        which = ("coarse " if column == 0 else "fine ") if head == 2 else ""
                        raise DatasetContentError(
                            f"{file.name}, record {start + int(wrong[0]) + 1:,}: {which}label {int(rows[wrong[0], column])} "
                            f"is not a {layout.upper()} class (0 to {limit - 1}); the file is damaged or holds "
                            "another data set's records (CIFAR-100's train.bin and test.bin carry two label bytes)")
                k = len(rows)
                labels[at:at + k] = rows[:, head - 1]
                images[at:at + k] = rows[:, head:].reshape(-1, 3, CIFAR_SIDE, CIFAR_SIDE)
                at, start = at + k, start + k
    if at != n:
        raise DatasetContentError(f"the CIFAR files changed while they were read ({at:,} records of {n:,}); read again")
    return images, labels


def cifar_bytes(counts: dict[str, int], channels: int, side: int) -> int:
    """Memory that reading CIFAR records takes at its peak: every record's bytes (uint8, kept until
    its split is converted), the float32 images at the model's channels and side, and one
    chunk's float32 copies on the way."""
    records = sum(counts.values())
    chunk = min(CIFAR_CHUNK, records) * 4 * (3 * CIFAR_SIDE * CIFAR_SIDE + 2 * channels * side * side)
    return records * CIFAR_PIXELS + records * 4 * channels * side * side + chunk


def _cifar_float(images: np.ndarray, channels: int, side: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """uint8 (N, 3, 32, 32) → float32 (N, C, S, S) in [0, 1], a chunk at a time, with the float64
    per-channel sums of the values and of their squares."""
    out = torch.empty((len(images), channels, side, side), dtype=torch.float32)
    sums, squares = np.zeros(channels), np.zeros(channels)
    for i in range(0, len(images), CIFAR_CHUNK):
        x = torch.from_numpy(images[i:i + CIFAR_CHUNK]).float().div_(255.0)
        if channels == 1:  # ITU-R 601 luminance, as Pillow's "L"
            x = 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]
        if side != CIFAR_SIDE:
            x = torch.nn.functional.interpolate(x, size=(side, side), mode="bilinear", antialias=True,
                                                align_corners=False).clamp_(0.0, 1.0)
        out[i:i + len(x)] = x
        sums += x.sum((0, 2, 3), dtype=torch.float64).numpy()
        squares += x.double().square_().sum((0, 2, 3)).numpy()
    return out, sums, squares


def read_cifar(path: Path, layout: str, files: dict[str, list[Path]], image_size: int | None,
                channels: int | None, need_train: bool = True,
               ) -> tuple[Dataset, Dataset, tuple[float, ...], tuple[float, ...]]:
    """CIFAR binaries as two splits at the model's ``image_size`` and ``channels`` (32 px colour by
    default), and the per-channel mean and standard deviation measured on the training batches (on
    the test batch when ``need_train`` is False and it is read alone); refused in a sentence when
    a batch is missing or the read would not fit in memory."""
    if not files.get("train") and files.get("test") and not need_train:
        files = {**files, "train": []}  # evaluation reads a test batch alone: the model brings its own standardisation
    elif not files.get("train") or not files.get("test"):
        missing = ("training batches (data_batch_*.bin / train.bin)" if not files.get("train")
                   else "test_batch.bin / test.bin")
        raise DatasetNotFoundError(f"{path} holds {layout} files but no {missing}")
    channels = channels or 3
    side = image_size or CIFAR_SIDE
    counts = {split: cifar_record_count(files[split], layout) for split in ("train", "test")}
    # estimated from the files' sizes before a byte is read
    check_fits(cifar_bytes(counts, channels, side), f"reading the {sum(counts.values()):,} CIFAR images of {path.name}",
               "read fewer batch files (move some data_batch_*.bin out of the folder) or a smaller image size")
    parts = {split: read_cifar_files(files[split], layout) for split in ("train", "test")}
    count = int(max(parts["train"][1].max(initial=0), parts["test"][1].max(initial=0))) + 1
    names = _cifar_names((files["train"] or files["test"])[0].parent, layout, count)
    converted = {}
    for split in ("train", "test"):
        images, labels = parts.pop(split)
        converted[split] = (*_cifar_float(images, channels, side), labels)
        del images  # its uint8 bytes go before the next split is converted
    measured = "train" if counts["train"] else "test"  # a test batch alone: never used to train
    _, sums, squares, _ = converted[measured]
    values = counts[measured] * side * side
    mean = sums / values
    mean_t = tuple(float(v) for v in mean)
    std = tuple(float(max(v, 1e-3)) for v in np.sqrt(np.maximum(squares / values - mean**2, 0.0)))
    files_all = [f for s in ("train", "test") for f in files[s]]
    source = {
        "dataset": None, "folder": str(path.resolve()), "layout": f"{layout} binary",
        "class_names": list(names), "files": {f.name: {"bytes": f.stat().st_size} for f in files_all},
        "unreadable": [], "image_size": side, "channels": channels,
        "resize": "none (32×32)" if side == CIFAR_SIDE else f"32 px to {side} px (bilinear)",
        "normalisation": {"mean": list(mean_t), "std": list(std), "measured_on": measured},
        "split_rule": FILES_RULE, "streamed": False,
        "identity": {"version": IDENTITY_VERSION, "split": SplitRule(FILES_RULE).to_dict(),
                     "class_names": list(names)},
    }
    data = {}
    for split, (x, _, _, labels) in converted.items():
        y = torch.from_numpy(labels)
        data[split] = Dataset(x, y, f"{path.name}-{split}", names, {**source, "split": split, "images": len(y)})
    return data["train"], data["test"], mean_t, std
