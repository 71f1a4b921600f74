"""The one data folder: where MNIST, notMNIST and UTKFace are looked for, and what to say when one is missing.

A person keeps the data sets in one **data folder**, one sub-folder each, as the project's
development copies are kept::

    data/
      mnist/      the four IDX files (train-images-idx3-ubyte.gz, …, t10k-labels-idx1-ubyte.gz)
      notmnist/   t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (letters A–J)
      utkface/    UTKFace.tar.gz (or UTKFace-128.tar.gz, or the folder of photos)

:func:`find_dataset` is the one resolver that the window (Rotate, Dataset, training) and the
command line use. For data set ``name`` it looks, in order, in

1. ``<data folder>/<name>`` (the sub-folder may be spelt ``notMNIST``, ``not-mnist``, …);
2. the data folder itself, when it is named after the data set (``…/mnist`` given directly),
   or holds the files of a set that identifies itself: MNIST (checked against the official
   checksums when read; other files are never called "mnist") and UTKFace (its archive or
   photos). notMNIST has no official files, so only a folder named so is read as notMNIST;
3. the user cache, ``<user cache>/data/<name>``, where downloads land.

When no data folder is chosen, it then looks, by itself, in the data folders near the program
(:func:`nearby_data_folders`: a ``data`` folder beside the app, or a checkout's ``../shared/data``),
and last, for MNIST's and notMNIST's test images, in the **bundled samples**
(``resources/samples``, 1,000 images each; :func:`sample_notice` is the one line that says so).
A chosen folder that lacks a set is an error, never silently replaced by a sample.

When none holds the files it raises :class:`DatasetMissingError`, whose message names the
data set, every place looked in, and what to do: MNIST can be downloaded (about 11 MB);
notMNIST and UTKFace cannot, so the message says where to fetch them by hand and which
folder to put them in.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from core.engine.data.datasets import (
    KNOWN,
    SAMPLE_SETS,
    DatasetNotFoundError,
    cache_dir,
    download,
    find_split,
    sample_folder,
)
from core.engine.data.utkface import ARCHIVE_NAMES, IMAGE_SUFFIXES


@dataclass(frozen=True)
class DataSetWords:
    """How a data set is named to a person, what its folder must hold and where it comes from.

    ``title`` may hold ``{split}`` ("test" or "training"), filled in per message.
    """

    title: str
    holds: str
    fetch: str
    downloadable: bool = False


#: The data sets the data folder holds, in words.
DATA_SETS: dict[str, DataSetWords] = {
    "mnist": DataSetWords(
        "The MNIST {split} digits",
        "MNIST's IDX files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
        "t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz)",
        "bayescope can download them",
        downloadable=True,
    ),
    "notmnist": DataSetWords(
        "The notMNIST letters (A–J)",
        "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (the letters in MNIST's IDX layout)",
        "notMNIST cannot be downloaded by bayescope: fetch notMNIST_small by hand from "
        "http://yaroslavvb.blogspot.com/2011/09/notmnist-dataset.html, converted to MNIST's IDX layout",
    ),
    "utkface": DataSetWords(
        "The UTKFace face photos",
        "UTKFace's archive (UTKFace.tar.gz) or its folder of photos",
        "UTKFace cannot be downloaded by bayescope: fetch the aligned and cropped faces "
        "(UTKFace.tar.gz) by hand from https://susanqq.github.io/UTKFace/",
    ),
}
#: Rough download sizes of MNIST's splits, in words.
DOWNLOAD_SIZE = {"train": "about 10 MB", "test": "about 2 MB"}

#: What to do for a missing MNIST, by where the person is (``download_hint``).
DOWNLOAD_IN_WINDOW = "press “Download MNIST”"
DOWNLOAD_ON_COMMAND_LINE = "run the command again with --download"


class DatasetMissingError(DatasetNotFoundError):
    """A data set is in none of the places looked in.

    Attributes
    ----------
    name
        The data set (``"mnist"``, ``"notmnist"``, ``"utkface"``).
    searched
        Every place looked in, in order.
    target
        Where a person should put the files (``<data folder>/<name>``, or the user cache).
    downloadable
        Whether bayescope can fetch it (MNIST).
    """

    def __init__(self, name: str, searched: list[Path], target: Path, split: str = "test",
                 download_hint: str | None = None) -> None:
        self.name = name
        self.searched = list(searched)
        self.target = target
        self.split = split
        self.downloadable = DATA_SETS[name].downloadable
        super().__init__(missing_message(name, self.searched, target, split, download_hint))

    def with_hint(self, download_hint: str | None) -> str:
        """The message again, ending with ``download_hint`` (what to press or type to download)."""
        return missing_message(self.name, self.searched, self.target, self.split, download_hint)


def missing_message(name: str, searched: list[Path], target: Path, split: str = "test",
                    download_hint: str | None = None) -> str:
    """The sentences for a missing data set: what, where looked, what to do."""
    words = DATA_SETS[name]
    title = words.title.format(split="training" if split == "train" else split)
    looked = "; ".join(str(p) for p in searched)
    text = f"{title} were not found. Looked in: {looked}. "
    if words.downloadable:
        how = f": {download_hint}" if download_hint else ""
        size = DOWNLOAD_SIZE.get(split, "")
        text += f"{words.fetch} ({size}) into {cache_dir(name)}{how}; or put {words.holds} in {target}."
    else:
        text += f"{words.fetch}, and put {words.holds} in {target}."
    return text


def _same_name(folder: Path, name: str) -> bool:
    """``notMNIST``, ``not-mnist`` and ``not_mnist`` all name the folder of ``notmnist``."""
    return folder.name.lower().replace("-", "").replace("_", "") == name


def _sub_folder(base: Path, name: str) -> Path:
    """``base/<name>``, or the sub-folder spelt differently (``notMNIST``) when that exists."""
    exact = base / name
    if exact.is_dir() or not base.is_dir():
        return exact
    try:
        return next((p for p in sorted(base.iterdir()) if p.is_dir() and _same_name(p, name)), exact)
    except OSError:
        return exact


def _holds(place: Path, name: str, split: str) -> bool:
    """Whether ``place`` holds data set ``name`` (its ``split``, for the IDX sets)."""
    if name == "utkface":
        if place.is_file():
            return place.name.lower().endswith((".tar.gz", ".tgz", ".tar"))
        if not place.is_dir():
            return False
        if any((place / n).is_file() for n in ARCHIVE_NAMES) or (place / "UTKFace").is_dir():
            return True
        try:
            return any(p.name.lower().endswith(IMAGE_SUFFIXES) for p in place.iterdir())
        except OSError:
            return False
    return place.is_dir() and find_split(place, split) is not None


def program_folder() -> Path:
    """The folder the program lives in: the installed app's folder, or the checkout's root."""
    if getattr(sys, "frozen", False):
        return Path(sys.executable).resolve().parent
    from core.engine.resources import resources_dir

    return resources_dir().resolve().parent


def nearby_data_folders() -> list[Path]:
    """Data folders found by themselves when none is chosen: ``data`` beside the program, then
    ``../shared/data`` beside it (where a checkout's development copies live); only those that exist."""
    home = program_folder()
    return [p for p in (home / "data", home.parent / "shared" / "data") if p.is_dir()]


def search_places(name: str, data_folder: str | os.PathLike | None) -> list[Path]:
    """The places :func:`find_dataset` looks in for ``name``, in order (no duplicates).

    With no ``data_folder`` the user cache is followed by the :func:`nearby_data_folders`.
    """
    places: list[Path] = []
    chosen = data_folder is not None and bool(str(data_folder))
    if chosen:
        base = Path(data_folder).expanduser()
        places.append(_sub_folder(base, name))
        # MNIST's files identify themselves by checksum (others are never called "mnist"), and
        # UTKFace's archive and photos by their names; notMNIST's only by its folder's name
        if _same_name(base, name) or name == "utkface" or (name in KNOWN and bool(KNOWN[name].official)):
            places.append(base)
    places.append(cache_dir(name))
    if not chosen:
        places.extend(_sub_folder(base, name) for base in nearby_data_folders())
    unique: list[Path] = []
    for place in places:
        if place not in unique:
            unique.append(place)
    return unique


def find_dataset(name: str, data_folder: str | os.PathLike | None = None, split: str = "test",
                 download_hint: str | None = None) -> Path:
    """The folder (or, for UTKFace, the archive) holding data set ``name``.

    ``data_folder`` is the one data folder (sub-folders ``mnist/``, ``notmnist/``,
    ``utkface/``), or a data set's own folder named after it; None looks only in the user
    cache. ``split`` is the MNIST-layout split that must be there (``"train"``/``"test"``).
    ``download_hint`` ends the message for a missing MNIST (e.g. :data:`DOWNLOAD_ON_COMMAND_LINE`).
    With no ``data_folder`` and the set nowhere, MNIST's and notMNIST's test split come from the
    bundled samples (see the module docstring).

    Raises
    ------
    DatasetMissingError
        None of :func:`search_places` holds it; the message says what, where and what to do.
    ValueError
        ``name`` is not one of :data:`DATA_SETS`.
    """
    if name not in DATA_SETS:
        raise ValueError(f"unknown data set {name!r}; the data folder holds {', '.join(DATA_SETS)}")
    if name in KNOWN and split not in KNOWN[name].splits:
        raise DatasetNotFoundError(f"{name} has no {split} split; it has {', '.join(KNOWN[name].splits)}")
    places = search_places(name, data_folder)
    for place in places:
        if _holds(place, name, split):
            return place
    sample = sample_folder(name)
    if not (data_folder is not None and str(data_folder)) and SAMPLE_SETS.get(name) == split and _holds(sample, name, split):
        return sample  # nothing chosen, nothing found: the bundled sample keeps the tab working offline
    raise DatasetMissingError(name, places, places[0], split, download_hint)


def sample_notice(*sources: dict | None, where: str = "window") -> str | None:
    """The one line that says which of the data sets read are the bundled samples (None: none is).

    ``sources`` are loaded :class:`~core.engine.inference.base.Dataset` ``source`` records; ``where``
    is ``"window"`` or ``"command line"``, which decides how to choose a data folder.
    """
    words = {"mnist": "MNIST test digits", "notmnist": "notMNIST letters"}
    names = [s.get("dataset") for s in sources if s and s.get("sample")]
    if not names:
        return None
    what = " and ".join(f"1,000 {words.get(n or '', 'images')}" for n in dict.fromkeys(names))
    how = ("choose a data folder (File → Choose data folder…) for the full sets" if where == "window"
           else "give --data-dir for the full sets")
    return f"No data folder found: using the bundled samples of {what}; {how}."


def download_dataset(name: str, split: str = "test") -> Path:
    """Download ``split`` of ``name`` into the user cache (MNIST only); returns the folder."""
    if not DATA_SETS.get(name, DataSetWords("", "", "")).downloadable:
        raise DatasetNotFoundError(f"{DATA_SETS[name].fetch}." if name in DATA_SETS else f"unknown data set {name!r}")
    return download(name, split, cache_dir(name))


__all__ = [
    "DATA_SETS",
    "DOWNLOAD_IN_WINDOW",
    "DOWNLOAD_ON_COMMAND_LINE",
    "DataSetWords",
    "DatasetMissingError",
    "download_dataset",
    "find_dataset",
    "missing_message",
    "nearby_data_folders",
    "program_folder",
    "sample_notice",
    "search_places",
]
