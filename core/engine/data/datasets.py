"""MNIST-layout data sets: MNIST digits and notMNIST letters, and any folder in that layout.

A known data set is found, in order, in the folder the caller names (its sub-folder named
after the data set, or the folder itself), in the user's cache
(``platformdirs.user_cache_dir("bayescope")/data/<name>``), or, for MNIST and when allowed,
downloaded into that cache from the public mirrors. Any folder holding the standard IDX
files (``train-images-idx3-ubyte[.gz]`` ..., or just the two ``t10k-*`` files for a test
set) can be given as a data set of its own.

What is read is checked and recorded, never assumed:

- every split must hold 28×28 byte images, integer labels in the class range, as many
  labels as images, and at least one of each;
- the SHA-256 of the uncompressed files identifies the official MNIST files. Under the name
  ``mnist`` other files are not called MNIST: they are named after their folder with a
  short checksum (``mnist@1a2b3c4d-train``), and official files of one data set are never
  accepted under another's name (MNIST files in a ``notmnist`` folder are refused);
- notMNIST has no official files, so the name ``notmnist`` is only given to a folder of
  that name (its own sub-folder, or a folder named so);
- :attr:`~core.engine.inference.base.Dataset.source` records the name, split, folder and each
  file's checksums, for evaluation reports and the provenance of trained posteriors.

Downloads have a deadline for the whole transfer (not only per read), are verified before
they are moved into place, and leave no partial file behind, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import hashlib
import os
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs
import torch

from core.engine.data.idx import IdxFile, IdxFormatError, load_idx, same_content
from core.engine.inference.base import Dataset
from core.engine.models import IMAGE_SIZE, MAX_CLASSES
from core.engine.runner import signals_raise

SPLIT_PREFIX = {"train": "train", "test": "t10k"}
DIGITS = tuple(str(i) for i in range(10))
LETTERS = tuple("ABCDEFGHIJ")
#: Seconds a whole download may take (a server trickling bytes is cut off after this).
DOWNLOAD_DEADLINE_S = 600.0
#: Seconds a single read from the server may wait.
DOWNLOAD_READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DatasetInfo:
    """A known data set.

    ``official`` maps IDX file stems to the SHA-256 of their uncompressed bytes (the
    published MNIST files, as listed by many projects: e.g. ba891046… for
    ``train-images-idx3-ubyte``); a data set without official files has none.
    """

    name: str
    class_names: tuple[str, ...]
    splits: tuple[str, ...]
    mirrors: tuple[str, ...] = ()
    official: dict[str, str] = field(default_factory=dict)


KNOWN: dict[str, DatasetInfo] = {
    "mnist": DatasetInfo(
        "mnist",
        DIGITS,
        ("train", "test"),
        (
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ),
        {
            "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
            "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
            "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
            "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
        },
    ),
    "notmnist": DatasetInfo("notmnist", LETTERS, ("test",)),
}


class DatasetNotFoundError(FileNotFoundError):
    """The IDX files of a data set are in none of the places looked at."""


class DatasetDownloadError(DatasetNotFoundError):
    """A data set's files could not be fetched: no answer in time, or a damaged file."""


class DatasetContentError(ValueError):
    """The files found do not hold what the data set needs (size, labels, counts, identity)."""


#: The bundled sample sets (``resources/samples/<name>``, the first 1,000 test images each), by name:
#: what the Rotate and Dataset tabs and ``evaluate`` read until a data folder is chosen.
SAMPLE_SETS: dict[str, str] = {"mnist": "test", "notmnist": "test"}


def sample_folder(name: str) -> Path:
    """Where the bundled sample of data set ``name`` lives (``resources/samples/<name>``)."""
    from core.engine.resources import resources_dir

    return resources_dir() / "samples" / name


def is_sample_folder(folder: Path) -> bool:
    """Whether ``folder`` is one of the bundled sample sets' folders."""
    try:
        return any(folder.resolve() == sample_folder(name).resolve() for name in SAMPLE_SETS)
    except OSError:
        return False


def cache_dir(name: str) -> Path:
    """Where downloaded copies of data set ``name`` live for this user."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "data" / name


def _file_names(split: str) -> tuple[str, str]:
    prefix = SPLIT_PREFIX[split]
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


def _find(folder: Path, stem: str) -> Path | None:
    """``stem.gz`` or ``stem`` in ``folder``; both only when they hold the same data."""
    compressed, plain = folder / f"{stem}.gz", folder / stem
    if compressed.is_file() and plain.is_file() and not same_content(compressed, plain):
        # reading either one silently could train or evaluate on the files not meant
        raise DatasetContentError(
            f"{folder} holds both {stem}.gz and {stem}, with different data; "
            "remove or move away the one that should not be read"
        )
    for candidate in (compressed, plain):
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


def _same_name(folder: Path, name: str) -> bool:
    """``notMNIST``, ``not-mnist`` and ``not_mnist`` are all the folder of ``notmnist``."""
    return folder.name.lower().replace("-", "").replace("_", "") == name


def _identify(stems: tuple[str, str], images: IdxFile, labels: IdxFile) -> str | None:
    """The known data set whose official files these are, if any."""
    for info in KNOWN.values():
        if (
            info.official.get(stems[0]) == images.content_sha256
            and info.official.get(stems[1]) == labels.content_sha256
        ):
            return info.name
    return None


def _file_record(f: IdxFile) -> dict[str, str]:
    return {"sha256": f.sha256, "content_sha256": f.content_sha256}


def _check_arrays(images: np.ndarray, labels: np.ndarray, files: tuple[Path, Path], num_classes: int | None) -> None:
    img_name, lab_name = files
    if images.ndim != 3:
        raise IdxFormatError(f"{img_name}: expected images of shape (N, H, W), got {images.shape}")
    if images.dtype != np.uint8:
        raise DatasetContentError(
            f"{img_name}: images are stored as {images.dtype}, but MNIST-layout images are bytes (0-255)"
        )
    if images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
        raise DatasetContentError(
            f"{img_name}: images are {images.shape[1]}×{images.shape[2]} pixels; "
            f"bayescope reads {IMAGE_SIZE}×{IMAGE_SIZE} images"
        )
    if labels.ndim != 1 or len(labels) != len(images):
        raise IdxFormatError(
            f"{lab_name}: {labels.shape} labels do not match {len(images)} images in {img_name}"
        )
    if len(images) == 0:
        raise DatasetContentError(f"{img_name}: the file holds no images")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DatasetContentError(f"{lab_name}: labels are stored as {labels.dtype}, not as whole numbers")
    low, high = int(labels.min()), int(labels.max())
    limit = num_classes if num_classes is not None else MAX_CLASSES
    if low < 0 or high >= limit:
        raise DatasetContentError(
            f"{lab_name}: labels range from {low} to {high}, outside 0..{limit - 1}"
            + ("" if num_classes is None else f" of its {num_classes} classes")
        )


def read_split_files(
    files: tuple[Path, Path], split: str, name: str | None = None
) -> Dataset:
    """Read, check and record one split from its (images, labels) files.

    ``name`` is the known data set asked for (None for a folder given as a data set). See
    the module docstring for what is checked and how the result is named.
    """
    stems = _file_names(split)
    images, labels = load_idx(files[0]), load_idx(files[1])
    info = KNOWN.get(name) if name else None
    _check_arrays(images.array, labels.array, files, len(info.class_names) if info else None)
    identity = _identify(stems, images, labels)
    folder = files[0].parent
    if info is not None and identity is not None and identity != info.name:
        raise DatasetContentError(
            f"{folder} holds the official {identity} {split} files, not {name}; "
            f"point to the folder that holds {name}"
        )
    sample = info is not None and is_sample_folder(folder)
    if sample:
        # a bundled sample says so in its name, so that no table or report passes it off as the full set
        label, class_names = f"{info.name}-sample", info.class_names
    elif info is not None and info.official and identity != info.name:
        digest = hashlib.sha256((images.content_sha256 + labels.content_sha256).encode()).hexdigest()
        label = f"{folder.name}@{digest[:8]}"  # not the official files: never called "mnist"
        class_names = info.class_names
    elif info is not None:
        label, class_names = info.name, info.class_names
    elif identity is not None:
        label, class_names = identity, KNOWN[identity].class_names
    else:
        label = folder.name
        class_names = tuple(str(i) for i in range(int(labels.array.max()) + 1))
    x = torch.from_numpy(images.array.astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(labels.array.astype(np.int64))
    source: dict[str, Any] = {
        "dataset": name if info is not None else None,
        "split": split,
        "folder": str(folder.resolve()),
        "official": identity is not None,
        "sample": sample,
        "files": {f.path.name: _file_record(f) for f in (images, labels)},
    }
    return Dataset(x, y, f"{label}-{split}", tuple(class_names), source)


def _part_name(target: Path) -> Path:
    return target.parent / f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.part"


def _fetch(url: str, out: Any, deadline: float) -> None:
    """Copy ``url`` into ``out``, refusing to run past ``deadline`` (time.monotonic)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the download deadline passed")
    with urllib.request.urlopen(url, timeout=min(DOWNLOAD_READ_TIMEOUT_S, remaining)) as response:
        read = getattr(response, "read1", response.read)  # returns what has arrived: no waiting for a full chunk
        while True:
            chunk = read(1 << 16)
            if not chunk:
                return
            out.write(chunk)
            if time.monotonic() > deadline:
                raise TimeoutError("the server is too slow: the download did not finish in time")


def download(
    name: str,
    split: str,
    dest: str | os.PathLike,
    mirrors: tuple[str, ...] | None = None,
    deadline_s: float = DOWNLOAD_DEADLINE_S,
) -> Path:
    """Download the two IDX files of ``split`` into ``dest``; verify before keeping them.

    Each file is tried on every mirror in turn, within ``deadline_s`` seconds for the whole
    download. A file is moved into place only once it has been fully received, parsed as
    IDX and (for a data set with official files) matched to its official checksum, so an
    interrupted, slow or wrong download leaves nothing behind; partial files of killed
    downloads are swept on the next one. ``mirrors`` may be ``file://`` URLs (tests).
    """
    from core.engine.files import sweep_stale_temp_files

    info = KNOWN.get(name)
    mirrors = mirrors if mirrors is not None else (info.mirrors if info else ())
    if not mirrors:
        raise DatasetNotFoundError(f"data set {name!r} cannot be downloaded; choose a folder with its IDX files")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    sweep_stale_temp_files(dest, suffix=".part")
    deadline = time.monotonic() + deadline_s
    errors = []
    for stem in _file_names(split):
        target = dest / f"{stem}.gz"
        if target.is_file():
            continue
        for mirror in mirrors:
            url = mirror.rstrip("/") + f"/{stem}.gz"
            part = _part_name(target)
            try:
                with signals_raise():
                    try:
                        with part.open("xb") as out:
                            _fetch(url, out, deadline)
                        parsed = load_idx(part)  # refuse truncated or corrupt downloads
                        expected = info.official.get(stem) if info else None
                        if expected and parsed.content_sha256 != expected:
                            raise IdxFormatError(f"{stem}.gz does not match the official {name} file")
                        os.replace(part, target)
                    finally:
                        part.unlink(missing_ok=True)
                break
            except (OSError, IdxFormatError, ValueError) as exc:
                errors.append(f"{url}: {exc}")
            if time.monotonic() > deadline:
                break
        else:
            raise DatasetDownloadError(f"could not download {stem}.gz for {name!r}: " + "; ".join(errors))
        if not target.is_file():
            raise DatasetDownloadError(
                f"could not download {stem}.gz for {name!r} within {deadline_s:.0f} s: " + "; ".join(errors)
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
    IDX files. ``root`` is where a known data set lives: its sub-folder ``root/<name>``, or
    ``root`` itself (for ``notmnist`` only when the folder is named so). Images come back as
    float32 in [0, 1], shape (N, 1, 28, 28), with ``source`` recording what was read.

    Raises
    ------
    DatasetNotFoundError
        No folder holds the files (the message says where it looked).
    DatasetContentError, IdxFormatError
        The files are damaged or hold something else than the data set needs.
    """
    if split not in SPLIT_PREFIX:
        raise ValueError(f"unknown split {split!r}; choose 'train' or 'test'")
    info = KNOWN.get(name)
    if info is None:
        folder = Path(name)
        if not folder.is_dir():
            known = ", ".join(KNOWN)
            raise DatasetNotFoundError(f"data set {name!r} is neither a known name ({known}) nor a folder")
        files = find_split(folder, split)
        if files is None and not any(p.name.endswith(("ubyte", "ubyte.gz")) for p in folder.iterdir()):
            # nothing of MNIST's layout: a person gave a folder of their own, which holds no image
            raise DatasetNotFoundError(
                f"{folder} holds no images (png, jpg, jpeg, bmp, webp, tif, tiff), CSV manifest or CIFAR files, "
                "nor MNIST's IDX files")
        if files is None:
            stems = " and ".join(f"{s}[.gz]" for s in _file_names(split))
            raise DatasetNotFoundError(f"{name} {split} split not found: looked for {stems} in {folder}")
        return read_split_files(files, split)
    if split not in info.splits:
        raise DatasetNotFoundError(f"{name} has no {split} split; it has {', '.join(info.splits)}")
    places: list[Path] = []
    if root is not None:
        root = Path(root)
        if (root / name).is_dir():
            places.append(root / name)
        elif info.official or _same_name(root, name):
            places.append(root)  # the files identify themselves (or the folder is named so)
        else:
            places.append(root / name)
    places.append(cache_dir(name))
    files = None
    for place in places:
        files = find_split(place, split)
        if files is not None:
            break
    if files is None:
        if download_if_missing and (info.mirrors or mirrors):
            files = find_split(download(name, split, cache_dir(name), mirrors), split)
        if files is None:
            looked = ", ".join(str(p) for p in places)
            stems = " and ".join(f"{s}[.gz]" for s in _file_names(split))
            raise DatasetNotFoundError(f"{name} {split} split not found: looked for {stems} in {looked}")
    return read_split_files(files, split, name)


__all__ = [
    "KNOWN",
    "DatasetContentError",
    "DatasetInfo",
    "DatasetNotFoundError",
    "cache_dir",
    "download",
    "find_split",
    "load_split",
    "read_split_files",
    "sample_folder",
    "is_sample_folder",
    "SAMPLE_SETS",
]
