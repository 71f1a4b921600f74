"""What a person's folder (or CSV manifest) lists, before any image is decoded, and what identifies it.

Class folders (``FOLDER/<class>/…/<image>``, images at any depth, sorted class names), the same
under ``train/`` and ``test/``, or a CSV manifest of ``path,label`` rows are listed into an
:class:`ImageList` (:func:`list_images`); links that lead back into the folder, one file reached
twice, empty class folders and damaged manifests are refused in a sentence naming the place.
Each listed image has a key (its class and path, :func:`image_keys`) and the listing a cheap
digest of names, labels and sizes (:func:`listing_digest`); :func:`listing_identity` is what a
posterior records of the read folder and its split. :func:`find_cifar` tells a folder of CIFAR
binaries (:mod:`core.engine.data.cifar`) from one of images.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.data.split import (
    SplitRule,
    content_fingerprints,
    file_key,
    pack,
    pack_fingerprints,
)
from core.engine.models import MAX_CLASSES

#: Suffixes read as images (any case).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")


class NotAFolderError(DatasetNotFoundError):
    """The path given for a person's images is not a folder (or a manifest) that exists."""


class NoImagesError(DatasetNotFoundError):
    """A folder that holds no image files at all."""


@dataclass
class ImageList:
    """What a folder or manifest lists, before any image is decoded."""

    root: Path
    layout: str
    class_names: tuple[str, ...]
    paths: list[Path] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    ignored: int = 0
    #: Per file: set by a layout that fixes the split ("train"/"test"), else None.
    splits: list[str] | None = None

    def relative(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


class LinkLoopError(DatasetContentError):
    """A symbolic link in a folder of images that leads back into the folder or above it."""


class RepeatedImageError(DatasetContentError):
    """One image file reached twice: two manifest rows, or two paths through symbolic links."""


class EmptyClassError(DatasetContentError):
    """A class with no image the network could learn it from."""


def _within(inner: str, outer: str) -> bool:
    """Whether the real path ``inner`` is ``outer`` or lies below it."""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def _files_below(folder: Path, top: Path | None = None) -> tuple[list[Path], int]:
    """Image files at any depth below ``folder`` (sorted), and how many other files there are.

    Linked folders are followed (a person may link a class's images in from elsewhere), but a
    link back to a folder being read or above ``top`` (the folder of images) would read the
    same images again, endlessly or as more of a class: it is refused with the link's name, as
    is a folder reached twice through links (its images would count twice).
    """
    top = top or folder
    top_real = os.path.realpath(top)
    start = os.path.realpath(folder)
    if folder != top and _within(top_real, start):
        raise LinkLoopError(
            f"{_shown(folder, top)} is a link back to {'the folder itself' if start == top_real else 'a folder above it'}"
            ", so its images would be read again as one more class; remove the link")
    seen: dict[str, Path] = {start: folder}
    images, other = [], 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        kept = []
        for d in sorted(d for d in dirnames if not d.startswith(".")):
            path = Path(dirpath) / d
            real = os.path.realpath(path)
            if _within(top_real, real) or _within(os.path.realpath(dirpath), real):
                raise LinkLoopError(
                    f"{_shown(path, top)} is a link back to {'the folder itself' if real == top_real else 'a folder above it'}"
                    ", so its images would be read again as if they were others; remove the link")
            if real in seen:
                raise RepeatedImageError(
                    f"{_shown(path, top)} and {_shown(seen[real], top)} are the same folder (one links to the other), so "
                    "its images would be read twice; keep one of them")
            seen[real] = path
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if _is_image(path):
                images.append(path)
            elif not name.startswith("."):
                other += 1
    return images, other


def _shown(path: Path, top: Path) -> str:
    """``path`` as a person sees it: relative to the folder they gave, with ``/``."""
    try:
        return path.relative_to(top.parent if top.parent != top else top).as_posix()
    except ValueError:
        return str(path)


def _check_distinct(paths: Sequence[Path], top: Path) -> None:
    """Refuse two listed paths that are one file (through symbolic links)."""
    first: dict[str, Path] = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in first:
            raise RepeatedImageError(
                f"{_shown(path, top)} is the same image file as {_shown(first[real], top)}, so it would be read twice "
                "(and could be both a training and a test image); list each image once")
        first[real] = path


def _class_dirs(folder: Path) -> list[Path]:
    return sorted((d for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")), key=lambda d: d.name)


def scan_class_folders(folder: str | os.PathLike, split: str | None = None, *, allow_empty: bool = False) -> ImageList:
    """List a class-per-subfolder folder (or a flat folder of images: one class).

    Refused with a sentence (:class:`DatasetContentError`): a link that leads back into the
    folder, one image reached twice, and (unless ``allow_empty``: a test/ folder may lack a
    class) a class folder that holds no image file, which would be an output the network
    never saw.
    """
    root = Path(folder)
    if not root.is_dir():
        raise NotAFolderError(f"{root} is not a folder")
    out = ImageList(root, "class folders", ())
    classes = _class_dirs(root)
    loose = [p for p in sorted(root.iterdir()) if p.is_file() and _is_image(p)]
    listed = {d: _files_below(d, root) for d in classes}
    if not classes or (loose and not any(found for found, _ in listed.values())):
        paths, other = _files_below(root)
        _check_distinct(paths, root)
        out.class_names, out.paths, out.labels, out.ignored = (root.name or "images",), paths, [0] * len(paths), other
        out.layout = "a folder of images (one class)"
        return out
    if len(classes) > MAX_CLASSES:
        raise DatasetContentError(f"{root} has {len(classes):,} class folders; bayescope reads at most {MAX_CLASSES:,}")
    empty = [d for d in classes if not listed[d][0]]
    if empty and not allow_empty and len(empty) < len(classes):  # none at all: "holds no images" says it
        d = empty[0]
        held = f"only {listed[d][1]} file(s) that are not images" if listed[d][1] else "nothing"
        more = f" (and {len(empty) - 1} more class folder(s) hold none)" if len(empty) > 1 else ""
        raise EmptyClassError(
            f"the class folder {_shown(d, root)} holds {held}{more}, so the network would have an output it never "
            f"saw an image of; put its images in it ({', '.join(s.lstrip('.') for s in IMAGE_SUFFIXES)}) or remove it")
    out.class_names = tuple(d.name for d in classes)
    for label, d in enumerate(classes):
        paths, other = listed[d]
        out.paths += paths
        out.labels += [label] * len(paths)
        out.ignored += other
    _check_distinct(out.paths, root)
    out.ignored += sum(1 for p in root.iterdir() if p.is_file() and not p.name.startswith("."))
    return out


#: The one header a manifest may open with (any case).
MANIFEST_HEADER = ("path", "label")
_WINDOWS_DRIVE = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def _manifest_path(folder: Path, cell: str) -> Path:
    """A manifest's path cell as a file: relative to the manifest's folder; ``\\`` (a manifest
    written on Windows) read as ``/`` unless a file of that very name exists."""
    given = folder / cell if not Path(cell).is_absolute() else Path(cell)
    if "\\" in cell and not given.exists():
        as_posix = cell.replace("\\", "/")
        return folder / as_posix if not Path(as_posix).is_absolute() else Path(as_posix)
    return given


def read_manifest(path: str | os.PathLike) -> ImageList:
    """List the images of a CSV manifest of ``path,label`` rows (paths relative to its folder).

    One optional header, ``path,label``, opens it. Refused with a sentence naming the line: a
    row that is not ``path,label``, another header, a cell holding a NUL character, a Windows
    drive path, and a file listed twice (with the same label or another one). A manifest of no
    rows is refused too. Paths written with ``\\`` (on Windows) are read with ``/``.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetNotFoundError(f"{path}: no such manifest file")
    rows: list[tuple[int, str, str]] = []
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            for number, row in enumerate(csv.reader(fh), start=1):
                if not row or all(not cell.strip() for cell in row):
                    continue
                where = f"{path.name}, line {number}"
                if any("\0" in cell for cell in row):
                    raise DatasetContentError(
                        f"{where} holds a NUL character, so it is not a text CSV file (saved as UTF-16?); save the "
                        "manifest as UTF-8 CSV")
                cells = [cell.strip() for cell in row]
                while len(cells) > 2 and not cells[-1]:  # a spreadsheet's empty trailing columns
                    cells.pop()
                shown = ",".join(row)
                if len(cells) != 2 or not cells[0] or not cells[1]:
                    raise DatasetContentError(
                        f"{where}: expected 'path,label' (an image path and its class), got {shown!r}")
                if tuple(c.lower() for c in cells) == MANIFEST_HEADER:
                    if rows:
                        raise DatasetContentError(f"{where} repeats the header 'path,label'; a manifest has one "
                                                  "header, on its first line, or none")
                    continue
                if not rows and not _is_image(Path(cells[0])) and not _manifest_path(path.parent, cells[0]).exists():
                    raise DatasetContentError(
                        f"{where} reads as a header ({shown!r}), but the only header a manifest may have is "
                        "'path,label': rename its columns so, or remove the line")
                if _WINDOWS_DRIVE.match(cells[0]):
                    raise DatasetContentError(
                        f"{where}: {cells[0]} is a Windows drive path; give paths relative to the manifest's folder")
                rows.append((number, cells[0], cells[1]))
    except UnicodeDecodeError:
        raise DatasetContentError(f"{path.name}: not a text file in UTF-8; save the manifest as UTF-8 CSV") from None
    except csv.Error as exc:
        raise DatasetContentError(f"{path.name}: not a readable CSV file ({exc})") from None
    if not rows:
        raise NoImagesError(f"{path.name} lists no images: give one 'path,label' row per image (the path "
                            "relative to the manifest's folder, the label its class)")
    names = tuple(sorted({label for _, _, label in rows}))
    if len(names) > MAX_CLASSES:
        raise DatasetContentError(f"{path.name} names {len(names):,} classes; bayescope reads at most {MAX_CLASSES:,}")
    index = {name: i for i, name in enumerate(names)}
    out = ImageList(path.parent, "CSV manifest", names)
    first: dict[str, tuple[int, str]] = {}
    for number, file, label in rows:
        image = _manifest_path(path.parent, file)
        key = os.path.normcase(os.path.realpath(image))
        if key in first:
            line, was = first[key]
            raise RepeatedImageError(
                f"{path.name}, line {number} lists {file} again (line {line} listed it"
                + ("); each image is listed once, or it could be both a training and a test image"
                   if was == label else f" as {was}, this line as {label}); an image has one class: keep one of the rows"))
        first[key] = (number, label)
        out.paths.append(image)
        out.labels.append(index[label])
    return out


def find_cifar(folder: Path) -> tuple[str, dict[str, list[Path]]] | None:
    """``("cifar-10"|"cifar-100", {"train": files, "test": files})`` for a folder of CIFAR binaries."""
    for place in (folder, *(d for d in sorted(folder.glob("cifar-*-bin")) if d.is_dir())):
        train10 = sorted(place.glob("data_batch_*.bin"))
        if train10 or (place / "test_batch.bin").is_file():
            test = [place / "test_batch.bin"] if (place / "test_batch.bin").is_file() else []
            return "cifar-10", {"train": train10, "test": test}
        if (place / "train.bin").is_file() or (place / "test.bin").is_file():
            return "cifar-100", {s: [place / f"{s}.bin"] for s in ("train", "test") if (place / f"{s}.bin").is_file()}
    return None


def image_folder(spec: str | os.PathLike) -> bool:
    """Whether a ``--dataset`` names a person's images: a CSV manifest, or a folder that holds
    images or CIFAR files and not MNIST-layout IDX files (which :mod:`.datasets` reads)."""
    from core.engine.data.datasets import KNOWN, find_split

    if str(spec) in KNOWN:
        return False
    path = Path(spec)
    if path.is_file():
        return path.suffix.lower() == ".csv"
    if not path.is_dir() or find_split(path, "train") or find_split(path, "test"):
        return False
    return find_cifar(path) is not None or _any_image(path)


def _any_image(folder: Path) -> bool:
    for _dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if any(_is_image(Path(name)) for name in filenames):
            return True
    return False


def _listing(path: Path) -> ImageList:
    if path.is_file():
        return read_manifest(path)
    splits = {s: path / s for s in ("train", "test")}
    if all(d.is_dir() for d in splits.values()) and _class_dirs(splits["train"]):
        train, test = scan_class_folders(splits["train"]), scan_class_folders(splits["test"], allow_empty=True)
        unknown = sorted(set(test.class_names) - set(train.class_names))
        if unknown:
            raise DatasetContentError(
                f"{path}: test/ has class folders that train/ lacks ({', '.join(unknown[:5])}); "
                "give both the same class folders")
        index = {name: i for i, name in enumerate(train.class_names)}
        out = ImageList(path, "train/ and test/ class folders", train.class_names,
                        train.paths + test.paths,
                        train.labels + [index[test.class_names[i]] for i in test.labels],
                        train.ignored + test.ignored, ["train"] * len(train.paths) + ["test"] * len(test.paths))
        return out
    _check_one_split_folder(path, splits)
    return scan_class_folders(path)


def _check_one_split_folder(path: Path, splits: dict[str, Path]) -> None:
    """Refuse a folder whose only sub-folder is train/ or test/ holding class folders: read as
    class folders it would be one class named "train" (or "test")."""
    there = [s for s, d in splits.items() if d.is_dir()]
    others = [d for d in _class_dirs(path) if d.name not in splits]
    if len(there) == 1 and not others and _class_dirs(splits[there[0]]):
        given, lacking = there[0], "test" if there[0] == "train" else "train"
        raise DatasetContentError(
            f"{path} holds a {given}/ folder of classes but no {lacking}/ folder beside it: add {lacking}/ with the "
            f"same class folders, or give {path / given} itself (its images are then split by a seeded draw)")


def image_keys(listing: ImageList) -> list[str]:
    """Every listed image's key (its class name and path, :func:`core.engine.data.split.file_key`)."""
    split_folders = listing.splits is not None
    return [file_key(listing.class_names[label], listing.relative(p), split_folders)
            for p, label in zip(listing.paths, listing.labels, strict=True)]


#: The version of the ``identity`` record (:func:`listing_identity`).
IDENTITY_VERSION = 1


def listing_identity(listing: ImageList, keys: Sequence[str], rule: SplitRule, train: np.ndarray,
                     test: np.ndarray, left: np.ndarray | None = None,
                     known_prints: Sequence[bytes | None] | None = None) -> dict[str, Any]:
    """What identifies a read folder and its split, as a posterior records it: the rule and its
    parameters, the class names in label order, every listed file's key (packed), the contents of
    the training and of the test images (packed SHA-256 prefixes, so that the same image under
    another name or class is recognised) and the test images left out as seen in training.
    ``known_prints`` (one per listed file) are those contents already measured (a cache), so that
    no file is read again."""
    chosen = np.flatnonzero(train | test)
    prints = (dict(zip(chosen.tolist(), [known_prints[i] for i in chosen], strict=True)) if known_prints is not None
              else dict(zip(chosen.tolist(), content_fingerprints([listing.paths[i] for i in chosen]), strict=True)))
    return {
        "version": IDENTITY_VERSION,
        "split": rule.to_dict(),
        "class_names": list(listing.class_names),
        "file_count": len(keys),
        "files": pack(keys),
        "train_images": pack_fingerprints(prints[i] for i in np.flatnonzero(train)),
        "test_images": pack_fingerprints(prints[i] for i in np.flatnonzero(test)),
        "left_out": sorted(listing.relative(listing.paths[i]) for i in np.flatnonzero(left))
        if left is not None else [],
    }


def list_images(path: str | os.PathLike) -> ImageList:
    """What a folder or manifest lists now, no image decoded (None of CIFAR's binaries)."""
    return _listing(Path(path))


def listing_sha256(listing: ImageList) -> str:
    """SHA-256 of every listed file's relative path, label and size: what was read, cheaply."""
    h = hashlib.sha256()
    for p, label in zip(listing.paths, listing.labels, strict=True):
        try:
            size = p.stat().st_size
        except OSError:
            size = -1
        h.update(f"{listing.relative(p)}\0{label}\0{size}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def listing_digest(path: str | os.PathLike) -> str | None:
    """The ``listing_sha256`` that reading ``path`` now would record (its files' paths, labels and
    sizes), found without decoding an image: a reader can tell whether a folder changed since it
    was read. None for CIFAR binaries and for a path that cannot be listed."""
    path = Path(path)
    try:
        if path.is_dir() and find_cifar(path) is not None:
            return None
        return listing_sha256(_listing(path))
    except (OSError, ValueError):
        return None
