"""A person's own images: class-per-subfolder folders, CSV manifests and CIFAR binary files.

Three layouts are read (docs/data.md shows them):

- **class folders**: ``FOLDER/<class>/…/<image>``; the sub-folder names are the class names,
  in sorted order, and images may sit at any depth below their class folder. With
  ``FOLDER/train/<class>/…`` and ``FOLDER/test/<class>/…`` the two splits are given;
  otherwise each file's own hash (its class and path, :mod:`core.engine.data.split`) puts
  about :data:`TEST_FRACTION` of the images into the test split (:data:`SPLIT_SEED`), so one
  image more or less moves no other, and a posterior records the rule and its parameters
  (``source["identity"]``, compared again by :mod:`core.engine.data.identity`). A folder of images without class folders is
  one class: it can be an out-of-distribution set (read whole as its test split), never a
  training set;
- **a CSV manifest**: rows ``path,label`` (a ``path,label`` header is skipped), paths relative
  to the CSV file's folder, labels being class names; split as class folders are;
- **CIFAR-10/100 binary**: ``data_batch_*.bin`` + ``test_batch.bin`` (one label byte, then
  3072 bytes: 1024 red, 1024 green, 1024 blue, row by row) or ``train.bin`` + ``test.bin``
  (CIFAR-100: a coarse and a fine label byte, the fine label used), with the class names of
  ``batches.meta.txt`` / ``fine_label_names.txt`` when present.

Every image is read as the model sees it (:mod:`core.engine.data.images`: grey or RGB, its
shorter side resized to the model's side ``S``, centre-cropped to S×S). A folder is colour when
any of up to :data:`COLOUR_PROBE` images spread over it has colour; colour folders are read at
``COLOUR_IMAGE_SIZE`` (32) unless a size is given, grey ones at 28 (MNIST's side); a posterior of a
person's images, of any side, judges photos read as these were (:mod:`core.engine.model_inputs`).

Files that cannot be read are never dropped silently: each is listed, with its reason, in
``Dataset.source["unreadable"]`` (which training copies into the posterior's
``training_data`` record) and counted in ``source["files"]``. Files whose suffix is not an
image's are counted in ``source["ignored"]``.

Decoding runs through a ``torch.utils.data.DataLoader`` over the file paths
(:func:`core.engine.data.images.decode_stream`), which hashes each file's bytes as it reads them:
of the images the split draws to test, those whose bytes are a training image's or an earlier
test image's are left out (:func:`core.engine.data.split.leave_out_copies`, UTKFace's rule too).
A set whose decoded float32 images would exceed :data:`STREAM_BYTES` is not held in memory: its
``Dataset.x`` is a :class:`~core.engine.data.images.StreamedImages` that decodes the images a
mini-batch asks for from disk, each time.

This module reads a folder whole: listing (:mod:`core.engine.data.listing`), images
(:mod:`core.engine.data.images`) and CIFAR binaries (:mod:`core.engine.data.cifar`) are their
own modules.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.engine.data.cifar import read_cifar
from core.engine.data.datasets import DatasetContentError
from core.engine.data.images import StreamedImages, decode_stream, is_colour
from core.engine.data.listing import (
    IMAGE_SUFFIXES,
    EmptyClassError,
    ImageList,
    NoImagesError,
    NotAFolderError,
    find_cifar,
    image_keys,
    list_images,
    listing_identity,
    listing_sha256,
)
from core.engine.data.preprocess import ImageLoadError, upright_image
from core.engine.data.split import (
    FOLDERS_RULE,
    HASH_RULE,
    SEEDED_RULE,
    WHOLE_RULE,
    SplitRule,
    copies_note,
    leave_out_copies,
)
from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.models import (
    COLOUR_ARCHITECTURE,
    COLOUR_IMAGE_SIZE,
    IMAGE_SIZE,
    ArchSpec,
)

#: The share of the images that the split puts in the test split (each file by its own hash).
TEST_FRACTION = 0.2

#: The seed of that split: fixed (and recorded), so that training and evaluation split a folder alike.
SPLIT_SEED = 0

#: Images looked at to decide whether a folder is colour.
COLOUR_PROBE = 64

#: Decoded sets larger than this many bytes (float32, at the model's size) stream from disk.
#: 1 GiB holds 87,000 colour images of 32×32 (CIFAR-10's 60,000 take 0.74 GB) or 340,000
#: grey 28×28 ones. Streaming decodes every image once per epoch (~1.3 ms per 128 px JPEG
#: on one core here), which is small next to a ResNet-8 step on a CPU, so the threshold is
#: set by memory alone (docs/data.md has the measurements).
STREAM_BYTES = 1 << 30

#: The largest side a person's images may be read at.
MAX_FOLDER_SIZE = 256

#: Unreadable files named on the terminal (all of them are recorded).
SHOWN_UNREADABLE = 5


class NoReadableImageError(DatasetContentError):
    """A folder whose image files all failed to decode."""


class OneClassError(DatasetContentError):
    """Images of fewer than two classes: nothing for a classifier to tell apart."""


@dataclass
class FolderData:
    """Both splits of a person's images, at one size and channel count, with what was skipped."""

    train: Dataset
    test: Dataset
    channels: int
    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    unreadable: list[dict[str, str]]
    files: int
    #: What the split left out of the test images as copies, and photos in two classes (one line).
    copies: str | None = None

    def summary(self) -> str | None:
        """One line on the unreadable files (the first few named), or None when all were read."""
        return unreadable_summary(self.unreadable, self.files)

    def notes(self) -> list[str]:
        """The lines a reader says: the unreadable files, and the copies left out of the test images."""
        return [line for line in (self.summary(), self.copies) if line]


def unreadable_summary(unreadable: list[dict[str, str]], files: int) -> str | None:
    if not unreadable:
        return None
    shown = "; ".join(f"{u['file']}: {u['reason']}" for u in unreadable[:SHOWN_UNREADABLE])
    more = f"; and {len(unreadable) - SHOWN_UNREADABLE} more" if len(unreadable) > SHOWN_UNREADABLE else ""
    return (f"{len(unreadable)} of {files} image files could not be read and were left out: {shown}{more} "
            "(all are listed in the training_data record of the posterior)")


def _probe_channels(paths: Sequence[Path]) -> int:
    step = max(1, len(paths) // COLOUR_PROBE)
    for path in list(paths)[::step][:COLOUR_PROBE]:
        try:
            with upright_image(path, path.name, ImageLoadError, draft_side=256) as (img, _):
                if is_colour(img):
                    return 3
        except ImageLoadError:
            continue
    return 1


def _statistics(total: np.ndarray, squares: np.ndarray, count: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    mean = total / max(count, 1)
    std = np.sqrt(np.maximum(squares / max(count, 1) - mean**2, 0.0))
    return tuple(float(m) for m in mean), tuple(float(max(s, 1e-3)) for s in std)


def load_image_folder(
    path: str | os.PathLike,
    image_size: int | None = None,
    channels: int | None = None,
    *,
    on_image: Callable[[int, int], None] | None = None,
    **kwargs: Any,
) -> FolderData:
    """:func:`read_image_folder` run to its end; ``on_image(done, total)`` is called as images
    are decoded."""
    reading = read_image_folder(path, image_size, channels, report_every=1, **kwargs)
    while True:
        try:
            record = next(reading)
        except StopIteration as stop:
            return stop.value
        if on_image is not None and record.total:
            on_image(record.step, record.total)


def read_image_folder(
    path: str | os.PathLike,
    image_size: int | None = None,
    channels: int | None = None,
    *,
    test_fraction: float = TEST_FRACTION,
    seed: int = SPLIT_SEED,
    stream_bytes: int = STREAM_BYTES,
    workers: int | None = None,
    report_every: int = 64,
    split_rule: SplitRule | None = None,
    leave_out: Collection[str] = (),
    need_train: bool = True,
) -> Generator[ProgressRecord, None, FolderData]:
    """Read a person's images (class folders, a CSV manifest or CIFAR binaries) as two splits.

    ``image_size``/``channels`` default to what the folder holds (see the module docstring);
    the per-channel mean and standard deviation are measured on the training split. Yields a
    ``ProgressRecord(done, total, phase="reading images")`` every ``report_every`` decoded
    images (and after the last), so a caller can show progress and cancel between them.

    A folder without ``train/`` and ``test/`` folders is split by ``split_rule`` (default: each file
    by its own hash, ``test_fraction`` of them to test, :mod:`core.engine.data.split`); the keys
    in ``leave_out`` (images a posterior trained on, :mod:`core.engine.data.identity`) are in
    neither split. ``source["identity"]`` records what identifies the images and their split.
    ``need_train=False`` reads CIFAR files that hold a test batch only (evaluation).

    Raises
    ------
    DatasetNotFoundError
        The path is neither a folder nor a CSV file, or it holds no images.
    DatasetContentError
        A damaged manifest or CIFAR file, or no image could be read at all.
    """
    path = Path(path)
    if not path.exists():
        raise NotAFolderError(f"{path}: no such folder or file")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"the test fraction must lie strictly between 0 and 1, got {test_fraction}")
    yield ProgressRecord(0, 0, {}, phase="reading images")
    cifar = find_cifar(path) if path.is_dir() else None
    if cifar is not None:
        return _load_cifar(path, *cifar, image_size, channels, need_train=need_train)
    rule = split_rule or SplitRule(HASH_RULE, test_fraction, seed)
    listing = list_images(path)
    if not listing.paths:
        raise NoImagesError(
            f"{path} holds no images ({', '.join(s.lstrip('.') for s in IMAGE_SUFFIXES)}) at any depth: "
            "put each class's images in a sub-folder named after the class")
    channels = channels or _probe_channels(listing.paths)
    side = image_size or (IMAGE_SIZE if channels == 1 else COLOUR_IMAGE_SIZE)
    n = len(listing.paths)
    labels = np.asarray(listing.labels, dtype=np.int64)
    per_image = 4 * channels * side * side
    stream = n * per_image > stream_bytes
    kept = None if stream else np.zeros((n, channels, side, side), dtype=np.uint8)
    ok = np.zeros(n, dtype=bool)
    reasons: dict[int, str] = {}
    sums = np.zeros((n, 2, channels))  # per image: the sum and the sum of squares of each channel
    prints: list[bytes | None] = [None] * n
    for done, (i, array, reason, digest) in enumerate(decode_stream(listing.paths, side, channels, workers), start=1):
        prints[i] = digest
        if array is None:
            reasons[i] = reason
        else:
            ok[i] = True
            if kept is not None:
                kept[i] = array
            values = array.reshape(channels, -1).astype(np.float64) / 255.0
            sums[i] = values.sum(1), (values**2).sum(1)
        if done % max(report_every, 1) == 0 or done == n:
            yield ProgressRecord(done, n, {}, phase="reading images")
    unreadable = [{"file": listing.relative(listing.paths[i]), "reason": reasons[i]} for i in sorted(reasons)]
    if not ok.any():
        raise NoReadableImageError(
            f"none of the {n} image files in {path} could be read (the first: "
            f"{unreadable[0]['file']}: {unreadable[0]['reason']})")
    keys = image_keys(listing)
    if listing.splits is not None:
        is_test, rule = np.asarray([s == "test" for s in listing.splits]), SplitRule(FOLDERS_RULE)
    elif len(listing.class_names) < 2:
        is_test, rule = np.ones(n, dtype=bool), SplitRule(WHOLE_RULE)  # an out-of-distribution set, read whole
    elif rule.rule == HASH_RULE:  # each file by its own hash: one file more or less moves no other
        is_test = rule.test_mask(keys, labels)
    else:  # an older file's draw, over the readable images as it was drawn then
        if rule.rule != SEEDED_RULE:
            rule = SplitRule(HASH_RULE, test_fraction, seed)
        is_test = np.zeros(n, dtype=bool)
        readable = np.flatnonzero(ok)
        is_test[readable] = rule.test_mask([keys[i] for i in readable], labels[readable])
    left = np.asarray([k in leave_out for k in keys], dtype=bool) if leave_out else np.zeros(n, dtype=bool)
    left &= is_test
    ok &= ~left
    if need_train:  # an evaluation reads test images only: a class held all in test is no gap there
        _check_every_class_read(listing, ok, is_test, unreadable)
    # no photo on both sides, none twice among the test images: the training side stays the rule's
    copies = leave_out_copies(is_test, ok, labels, prints)
    ok &= ~copies.left_out
    train = ok & ~is_test
    pixels = side * side * int(train.sum())
    mean, std = _statistics(sums[train, 0].sum(0), sums[train, 1].sum(0), pixels)
    source: dict[str, Any] = {
        "dataset": None, "folder": str(path.resolve()), "layout": listing.layout,
        "class_names": list(listing.class_names), "files": n, "ignored": listing.ignored,
        "unreadable": unreadable, "image_size": side, "channels": channels,
        "resize": f"shorter side to {side} px (bilinear), centre crop {side}×{side}",
        "normalisation": {"mean": list(mean), "std": list(std), "measured_on": "train"},
        "split_rule": rule.words(),
        "listing_sha256": listing_sha256(listing), "streamed": stream,
        "identity": listing_identity(listing, keys, rule, train, ok & is_test, left, known_prints=prints),
        "copies": copies.record(lambda i: listing.relative(listing.paths[i])),
        "copies_note": copies_note(copies, lambda i: listing.relative(listing.paths[i])),
    }

    def part(split: str, mask: np.ndarray) -> Dataset:
        index = np.flatnonzero(mask & ok)
        # a seeded order mixes the classes, so that the first N images (--limit) hold them all
        index = index[torch.randperm(len(index), generator=torch.Generator().manual_seed(seed)).numpy()]
        x: Any = (StreamedImages([listing.paths[i] for i in index], side, channels) if kept is None
                  else torch.from_numpy(kept[index].astype(np.float32) / 255.0))
        y = torch.from_numpy(labels[index])
        return Dataset(x, y, f"{path.stem or path.name}-{split}", listing.class_names,
                       {**source, "split": split, "images": len(index)})

    return FolderData(part("train", ~is_test), part("test", is_test), channels, side, mean, std, unreadable, n,
                      source["copies_note"])


def _check_every_class_read(listing: ImageList, ok: np.ndarray, is_test: np.ndarray,
                            unreadable: list[dict[str, str]]) -> None:
    """Refuse a set in which a class has no readable training image (its files all damaged,
    missing or gone while being read): the network would have an output it never saw."""
    if len(listing.class_names) < 2:
        return  # one class: an out-of-distribution set, read whole as test images
    labels = np.asarray(listing.labels, dtype=np.int64)
    seen = np.bincount(labels[ok & ~is_test], minlength=len(listing.class_names))
    missing = np.flatnonzero(seen == 0)
    if not len(missing):
        return
    files_of = {int(c): [listing.relative(p) for p, y in zip(listing.paths, listing.labels, strict=True) if y == c]
                for c in missing}
    reasons = {u["file"]: f"{u['file']}: {u['reason']}" for u in unreadable}
    # "could not be read" only of a class none of whose files could be read; else its images fell in test
    why_of = {c: next((reasons[f] for f in files if f in reasons), None) if not ok[labels == c].any() else None
              for c, files in files_of.items()}
    # a class whose files could not be read is named first: its cause is the one a person can mend
    label = next((c for c, why in why_of.items() if why), int(missing[0]))
    name, files, why = listing.class_names[label], files_of[label], why_of[label]
    if why:
        held, fix = (f"none of its {len(files)} image file(s) could be read (the first: {why})",
                     "add readable images of it or remove the class")
    else:
        held, fix = (f"each of its {len(files)} image(s) fell in the test split (a file's split is drawn from "
                     "its own name)", "add images of it or give a smaller test fraction")
    more = f" (nor have {len(missing) - 1} more classes)" if len(missing) > 1 else ""
    raise EmptyClassError(
        f"the class {name} has no training image{more}: {held}, so the network would have an output it never saw; "
        f"{fix}")


def _load_cifar(path: Path, layout: str, files: dict[str, list[Path]], image_size: int | None,
                channels: int | None, need_train: bool = True) -> FolderData:
    train, test, mean, std = read_cifar(path, layout, files, image_size, channels, need_train)
    return FolderData(train, test, train.source["channels"], train.source["image_size"], mean, std, [],
                      len(train) + len(test))


def load_image_split(path: str | os.PathLike, split: str = "test", image_size: int | None = None,
                     channels: int | None = None, **kwargs: Any) -> Dataset:
    """One split of :func:`load_image_folder`, for evaluation (``image_size``/``channels``: the model's)."""
    kwargs.setdefault("need_train", split == "train")
    data = load_image_folder(path, image_size, channels, **kwargs)
    return data.train if split == "train" else data.test


def check_training_classes(data: FolderData, where: str) -> None:
    """Refuse, with a sentence, a set that cannot train a classifier."""
    names = data.train.class_names
    if len(names) < 2:
        raise OneClassError(
            f"{where} holds one class ({names[0] if names else 'none'}); a classifier needs at least two: "
            "put each class's images in a sub-folder named after the class")
    if len(data.train) == 0:
        raise DatasetContentError(f"{where}: no image of the training split could be read")
    present = len(torch.unique(data.train.y))
    if present < 2:
        raise OneClassError(f"{where}: the readable training images are all of one class")



def default_folder_model(channels: int) -> str:
    """The network a person's images train when none is chosen: ResNet-8 for colour, LeNet for grey
    (``bayescope-cli train --dataset FOLDER`` without ``--model``, and the training dialog)."""
    return COLOUR_ARCHITECTURE if channels == 3 else "lenet"


def folder_architecture(data: FolderData, name: str | None = None, drop_rate: float = 0.0,
                        hidden: int = 100) -> ArchSpec:
    """The network that reads ``data``: its classes, channels, side and input standardisation
    (measured on the training images) taken from them; ``ValueError`` when ``name`` cannot."""
    return ArchSpec(name or default_folder_model(data.channels), num_classes=len(data.train.class_names),
                    drop_rate=drop_rate, hidden=hidden, image_size=data.image_size, channels=data.channels,
                    mean=data.mean, std=data.std)


def streamed_refusal(data: FolderData, method: str, device: Any = None) -> str | None:
    """Why images streamed from disk cannot train ``method`` on ``device``, or None when they can."""
    if not data.train.source.get("streamed"):
        return None
    if method == "hmc":
        return "too large to hold in memory, and HMC uses every training image at every step"
    if device is not None and getattr(device, "type", str(device)) != "cpu":
        return "too large to hold in memory, and images streamed from disk train on the CPU only, so far"
    return None
