"""MNIST-layout data sets: MNIST digits and notMNIST letters.

A data set is found, in order, in the folder the caller names, in the user's cache
(``platformdirs.user_cache_dir("bayescope")/<name>``), or, for MNIST and when allowed,
downloaded into that cache from the public mirrors. Any folder holding the standard IDX
files (``train-images-idx3-ubyte[.gz]`` ..., or just the two ``t10k-*`` files for a test
set) works.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import platformdirs
import torch

from core.data.idx import IdxFormatError, read_idx
from core.inference.base import Dataset

SPLIT_PREFIX = {"train": "train", "test": "t10k"}
DIGITS = tuple(str(i) for i in range(10))
LETTERS = tuple("ABCDEFGHIJ")


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    class_names: tuple[str, ...]
    splits: tuple[str, ...]
    mirrors: tuple[str, ...] = ()


KNOWN: dict[str, DatasetInfo] = {
    "mnist": DatasetInfo(
        "mnist",
        DIGITS,
        ("train", "test"),
        (
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ),
    ),
    "notmnist": DatasetInfo("notmnist", LETTERS, ("test",)),
}


class DatasetNotFoundError(FileNotFoundError):
    """The IDX files of a data set are in none of the places looked at."""


def cache_dir(name: str) -> Path:
    """Where downloaded copies of data set ``name`` live for this user."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "data" / name


def _file_names(split: str) -> tuple[str, str]:
    prefix = SPLIT_PREFIX[split]
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


def _find(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / f"{stem}.gz", folder / stem):
        if candidate.is_file():
            return candidate
    return None


def find_split(folder: str | os.PathLike, split: str) -> tuple[Path, Path] | None:
    """The (images, labels) files of ``split`` in ``folder``, or None if either is missing."""
    folder = Path(folder)
    found = [_find(folder, stem) for stem in _file_names(split)]
    if None in found:
        return None
    return found[0], found[1]  # type: ignore[return-value]


def download(name: str, split: str, dest: str | os.PathLike, mirrors: tuple[str, ...] | None = None) -> Path:
    """Download the two IDX files of ``split`` into ``dest``; validate before keeping them.

    Each file is tried on every mirror in turn; a file is only moved into place once it has
    been fully received and parsed as IDX, so an interrupted download leaves nothing behind.
    ``mirrors`` may be ``file://`` URLs (used by the tests).
    """
    info = KNOWN.get(name)
    mirrors = mirrors if mirrors is not None else (info.mirrors if info else ())
    if not mirrors:
        raise DatasetNotFoundError(f"data set {name!r} cannot be downloaded; choose a folder with its IDX files")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    errors = []
    for stem in _file_names(split):
        target = dest / f"{stem}.gz"
        if target.is_file():
            continue
        for mirror in mirrors:
            url = mirror.rstrip("/") + f"/{stem}.gz"
            fd, tmp = tempfile.mkstemp(dir=dest, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=30) as response:
                    shutil.copyfileobj(response, out)
                read_idx(tmp)  # refuse truncated or corrupt downloads
                os.replace(tmp, target)
                break
            except (OSError, IdxFormatError) as exc:
                errors.append(f"{url}: {exc}")
                Path(tmp).unlink(missing_ok=True)
        else:
            raise DatasetNotFoundError(
                f"could not download {stem}.gz for {name!r}:\n  " + "\n  ".join(errors)
            )
    return dest


def load_split(
    name: str = "mnist",
    split: str = "train",
    root: str | os.PathLike | None = None,
    download_if_missing: bool = False,
    mirrors: tuple[str, ...] | None = None,
) -> Dataset:
    """Load one split of a known data set, or of any MNIST-layout folder given as ``name``.

    ``name`` is a known name (``"mnist"``, ``"notmnist"``) or the path of a folder with the
    IDX files. Images come back as float32 in [0, 1], shape (N, 1, H, W).
    """
    if split not in SPLIT_PREFIX:
        raise ValueError(f"unknown split {split!r}; choose 'train' or 'test'")
    info = KNOWN.get(name)
    places: list[Path] = []
    if root is not None:
        places.append(Path(root))
    if info is None:
        places.append(Path(name))
    else:
        places.append(cache_dir(name))
    for place in places:
        files = find_split(place, split)
        if files is not None:
            break
    else:
        if download_if_missing and ((info is not None and info.mirrors) or mirrors):
            files = find_split(download(name, split, cache_dir(name), mirrors), split)
        if files is None:
            looked = ", ".join(str(p) for p in places)
            stems = " and ".join(f"{s}[.gz]" for s in _file_names(split))
            raise DatasetNotFoundError(f"{name} {split} split not found: looked for {stems} in {looked}")
    images, labels = (read_idx(f) for f in files)
    if images.ndim != 3:
        raise IdxFormatError(f"{files[0]}: expected images of shape (N, H, W), got {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise IdxFormatError(
            f"{files[1]}: {labels.shape} labels do not match {len(images)} images in {files[0]}"
        )
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(labels.astype(np.int64))
    class_names = info.class_names if info else tuple(str(i) for i in range(int(y.max()) + 1))
    label = name if info else Path(name).name
    return Dataset(x, y, f"{label}-{split}", class_names)
