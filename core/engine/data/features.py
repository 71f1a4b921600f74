"""A folder of a person's images as the features their own network hands its last linear layer:
computed once per image, kept on disk, read memory-mapped.

The features of a folder (class folders or a CSV manifest, :mod:`core.engine.data.folder`) through
a split network (:mod:`core.engine.networks`) are kept in the user cache under a key of everything
that determines them: the network's SHA-256, the layer it is split at, the side, channels, mean
and standard deviation it reads, and the folder's listing (every file's path below the folder,
class, size and modification time). A changed network or folder (an image added, removed,
edited, moved to another class) therefore has another key and its features are computed anew;
an unchanged one is read back without decoding or reading a single image. The cache also keeps
each file's content fingerprint (:func:`core.engine.data.split.bytes_fingerprint`, hashed as the
file is decoded), from which
the split's identity record is made as :func:`~core.engine.data.folder.read_image_folder` makes
it, so that the Dataset tab and ``evaluate`` tell training images from test images alike.

The split is the project's: each file by a hash of its class and path
(:mod:`core.engine.data.split`), or the folder's own ``train/`` and ``test/``, with every test
image that is a copy of a training image or of an earlier test image left out
(:func:`~core.engine.data.split.leave_out_copies`, from the cached fingerprints).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs
import torch

from core.engine.data.datasets import DatasetContentError
from core.engine.data.folder import (
    SPLIT_SEED,
    TEST_FRACTION,
    NoReadableImageError,
    unreadable_summary,
)
from core.engine.data.images import decode_stream
from core.engine.data.listing import (
    NoImagesError,
    NotAFolderError,
    find_cifar,
    image_keys,
    list_images,
    listing_identity,
)
from core.engine.data.split import (
    FINGERPRINT_BYTES,
    FOLDERS_RULE,
    HASH_RULE,
    SplitRule,
    copies_note,
    leave_out_copies,
)
from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.networks import SplitNetwork

#: The version of the cache's layout: a new one leaves older entries unread.
CACHE_VERSION = 1
#: Images decoded and passed through the network at once.
BATCH = 64


def features_folder() -> Path:
    """Where folders' features are kept (the user cache)."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "features"


@dataclass
class FeatureData:
    """Both splits of a folder as network features (N, D), with where they are kept."""

    train: Dataset
    test: Dataset
    class_names: tuple[str, ...]
    cache: Path
    computed: bool  # False when every feature was read back from the cache
    unreadable: list[dict[str, str]]
    files: int
    #: :func:`listing_stamp` of the folder as it was listed for these features (a tier's files
    #: record it; listing 10,000 images again for it took 3.6 s of CPU)
    stamp: str = ""
    #: What the split left out of the test images as copies, and photos in two classes (one line).
    copies: str | None = None

    def summary(self) -> str | None:
        return unreadable_summary(self.unreadable, self.files)

    def notes(self) -> list[str]:
        """The lines a reader says: the unreadable files, and the copies left out of the test images."""
        return [line for line in (self.summary(), self.copies) if line]


def listing_stamp(listing: Any) -> str:
    """SHA-256 of the folder's listing: the layout, the class names, and every file's path below
    the folder, class, size and modification time (no image read)."""
    h = hashlib.sha256(f"{listing.layout}\0{json.dumps(list(listing.class_names))}\n".encode())
    for i, (path, label) in enumerate(zip(listing.paths, listing.labels, strict=True)):
        try:
            stat = path.stat()
            size, mtime = stat.st_size, stat.st_mtime_ns
        except OSError:
            size, mtime = -1, -1
        split = listing.splits[i] if listing.splits is not None else ""
        h.update(f"{listing.relative(path)}\0{label}\0{split}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def cache_key(network: SplitNetwork, stamp: str) -> str:
    """The key of a folder's features through ``network``: everything that determines them."""
    wanted = network.input
    record = {"version": CACHE_VERSION, "network": network.sha256, "head": network.head,
              "image_size": wanted.image_size, "channels": wanted.channels, "mean": list(wanted.mean),
              "std": list(wanted.std), "listing": stamp}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _complete(entry: Path) -> bool:
    return (entry / "meta.json").is_file()


def _compute(network: SplitNetwork, listing: Any, entry: Path) -> Generator[ProgressRecord, None, None]:
    """Decode every listed image once, pass it through the network, and write the features, the
    readable mask and the content fingerprints into ``entry`` (written beside it, then renamed,
    so that a cancelled run leaves no half entry)."""
    n, side, channels = len(listing.paths), network.input.image_size, network.input.channels
    partial = entry.with_name(f"{entry.name}.part-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        features = np.lib.format.open_memmap(partial / "features.npy", mode="w+", dtype=np.float32,
                                             shape=(n, network.feature_dim))
        readable = np.zeros(n, dtype=bool)
        reasons: dict[int, str] = {}
        batch: list[tuple[int, np.ndarray]] = []

        def flush(target: np.ndarray) -> None:
            if batch:
                index = [i for i, _ in batch]
                x = torch.from_numpy(np.stack([a for _, a in batch]).astype(np.float32) / 255.0)
                target[index] = network.features(x).numpy()
                batch.clear()

        yield ProgressRecord(0, n, {}, phase="network features")
        prints: list[bytes | None] = [None] * n
        for done, (i, array, reason, digest) in enumerate(decode_stream(listing.paths, side, channels), start=1):
            prints[i] = digest
            if array is None:
                reasons[i] = reason
            else:
                readable[i] = True
                batch.append((i, array))
                if len(batch) == BATCH:
                    flush(features)
            if done % BATCH == 0 or done == n:
                flush(features)
                yield ProgressRecord(done, n, {}, phase="network features")
        flush(features)
        features.flush()
        del features  # unmapped before the folder is renamed (Windows keeps mapped files locked)
        packed = np.zeros((n, FINGERPRINT_BYTES + 1), dtype=np.uint8)  # the last byte: 1 when known
        for i, p in enumerate(prints):
            if p is not None:
                packed[i, :FINGERPRINT_BYTES] = np.frombuffer(p, dtype=np.uint8)
                packed[i, -1] = 1
        np.save(partial / "readable.npy", readable)
        np.save(partial / "prints.npy", packed)
        meta = {"version": CACHE_VERSION, "network": network.sha256, "head": network.head, "files": n,
                "dimension": network.feature_dim, "class_names": list(listing.class_names),
                "unreadable": [{"file": listing.relative(listing.paths[i]), "reason": reasons[i]}
                               for i in sorted(reasons)]}
        (partial / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        if entry.exists():  # another process finished it meanwhile: theirs is the same
            shutil.rmtree(partial, ignore_errors=True)
        else:
            os.replace(partial, entry)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def folder_listing(folder: str | os.PathLike) -> Any:
    """The images ``folder`` lists (class folders or a CSV manifest), none decoded, checked to be
    something a network's head can learn.

    Raises
    ------
    DatasetNotFoundError, DatasetContentError
        Not a folder of class folders or a manifest, no images, one class.
    """
    path = Path(folder)
    if not path.exists():
        raise NotAFolderError(f"{path}: no such folder or file")
    if path.is_dir() and find_cifar(path) is not None:
        raise DatasetContentError(f"{path} holds CIFAR binaries; a network of your own reads a folder of class "
                                  "folders of images or a CSV manifest")
    listing = list_images(path)
    if not listing.paths:
        raise NoImagesError(f"{path} holds no images: put each class's images in a sub-folder named after the class")
    if len(listing.class_names) < 2:
        raise DatasetContentError(f"{path} holds one class ({listing.class_names[0]}); a classifier's head needs "
                                  "images of at least two classes, one sub-folder each")
    return listing


def features_cached(network: SplitNetwork, listing: Any) -> bool:
    """Whether the features of ``listing`` (:func:`folder_listing`) through ``network`` are in the
    cache already (a build then reads no image)."""
    return _complete(features_folder() / cache_key(network, listing_stamp(listing)))


def training_images(listing: Any, test_fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED) -> int:
    """How many of ``listing``'s images the split puts in training (every listed file taken readable)."""
    if listing.splits is not None:
        return sum(s != "test" for s in listing.splits)
    labels = np.asarray(listing.labels, dtype=np.int64)
    return int((~SplitRule(HASH_RULE, test_fraction, seed).test_mask(image_keys(listing), labels)).sum())


def folder_features(network: SplitNetwork, folder: str | os.PathLike, *, test_fraction: float = TEST_FRACTION,
                    seed: int = SPLIT_SEED) -> Generator[ProgressRecord, None, FeatureData]:
    """The features of every image of ``folder`` through ``network``, computed once (yielding
    progress) and then read back memory-mapped, as a training and a test split.

    Raises
    ------
    DatasetNotFoundError, DatasetContentError
        Not a folder of class folders or a manifest, no images, one class, no readable image.
    """
    path = Path(folder)
    listing = folder_listing(path)
    stamp = listing_stamp(listing)
    entry = features_folder() / cache_key(network, stamp)
    computed = not _complete(entry)
    if computed:
        yield from _compute(network, listing, entry)
    meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
    features = np.load(entry / "features.npy", mmap_mode="r")  # read as needed, never whole
    readable = np.load(entry / "readable.npy")
    packed = np.load(entry / "prints.npy")
    prints = [bytes(row[:FINGERPRINT_BYTES]) if row[-1] else None for row in packed]
    if not readable.any():
        first = meta["unreadable"][0]
        raise NoReadableImageError(f"none of the {len(readable)} image files in {path} could be read (the first: "
                                   f"{first['file']}: {first['reason']})")
    keys = image_keys(listing)
    labels = np.asarray(listing.labels, dtype=np.int64)
    if listing.splits is not None:
        rule, is_test = SplitRule(FOLDERS_RULE), np.asarray([s == "test" for s in listing.splits])
    else:
        rule = SplitRule(HASH_RULE, test_fraction, seed)
        is_test = rule.test_mask(keys, labels)
    # no photo on both sides, none twice among the test images (the rule every reader takes)
    copies = leave_out_copies(is_test, readable, labels, prints)
    train, test = readable & ~is_test, readable & is_test & ~copies.left_out
    name_of = lambda i: listing.relative(listing.paths[i])  # noqa: E731
    source: dict[str, Any] = {
        "dataset": None, "folder": str(path.resolve()), "layout": listing.layout,
        "class_names": list(listing.class_names), "files": len(keys), "ignored": listing.ignored,
        "unreadable": meta["unreadable"], "image_size": network.input.image_size, "channels": network.input.channels,
        "split_rule": rule.words(), "streamed": False,
        "features": {"network_sha256": network.sha256, "head": network.head, "dimension": network.feature_dim,
                     "cache": str(entry)},
        "identity": listing_identity(listing, keys, rule, train, test, known_prints=prints),
        "copies": copies.record(name_of), "copies_note": copies_note(copies, name_of),
    }

    def part(split: str, mask: np.ndarray) -> Dataset:
        index = np.flatnonzero(mask)
        # a seeded order mixes the classes, so that the first N images (--limit) hold them all
        index = index[torch.randperm(len(index), generator=torch.Generator().manual_seed(seed)).numpy()]
        x = torch.from_numpy(np.ascontiguousarray(features[np.sort(index)][np.argsort(np.argsort(index))]))
        return Dataset(x, torch.from_numpy(labels[index]), f"{path.stem or path.name}-{split}", listing.class_names,
                       {**source, "split": split, "images": len(index)})

    return FeatureData(part("train", train), part("test", test), tuple(listing.class_names), entry, computed,
                       meta["unreadable"], len(keys), stamp, source["copies_note"])
