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

Every image goes through the app's one image reader
(:func:`core.engine.data.preprocess.upright_image`: PNG, JPEG, BMP, WebP, TIFF, ... with
the EXIF orientation applied), is made grey or RGB (transparency composited onto white),
its **shorter side resized** to the model's side ``S`` (bilinear, antialiased when shrinking)
and **centre-cropped** to S×S. A folder is colour when any of up to :data:`COLOUR_PROBE`
images spread over it has colour; colour folders are read at ``COLOUR_IMAGE_SIZE`` (32)
unless a size is given, grey ones at 28 (the side of every grey input in the app).

Files that cannot be read are never dropped silently: each is listed, with its reason, in
``Dataset.source["unreadable"]`` (which training copies into the posterior's
``training_data`` record) and counted in ``source["files"]``. Files whose suffix is not an
image's are counted in ``source["ignored"]``.

Decoding runs through a ``torch.utils.data.DataLoader`` over the file paths (worker
processes from :data:`WORKERS_FROM` files on). A set whose decoded float32 images would exceed
:data:`STREAM_BYTES` is not held in memory: its ``Dataset.x`` is a :class:`StreamedImages`
that decodes the images a mini-batch asks for from disk, each time.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
from collections.abc import Callable, Collection, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from PIL import Image

from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.data.preprocess import ImageLoadError, reading_image, upright_image
from core.engine.data.split import (
    FILES_RULE,
    FOLDERS_RULE,
    HASH_RULE,
    SEEDED_RULE,
    WHOLE_RULE,
    SplitRule,
    bytes_fingerprint,
    content_fingerprints,
    copies_note,
    file_key,
    leave_out_copies,
    pack,
    pack_fingerprints,
)
from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.memory import check_fits
from core.engine.models import (
    COLOUR_ARCHITECTURE,
    COLOUR_IMAGE_SIZE,
    IMAGE_SIZE,
    MAX_CLASSES,
    ArchSpec,
)

#: Suffixes read as images (any case).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")
#: The share of the images that the split puts in the test split (each file by its own hash).
TEST_FRACTION = 0.2
#: The seed of that split: fixed (and recorded), so that training and evaluation split a folder alike.
SPLIT_SEED = 0
#: Images looked at to decide whether a folder is colour.
COLOUR_PROBE = 64
#: A pixel is coloured when two of its channels differ by more than this (of 255), and an
#: image is colour when more than 1 % of its pixels are (JPEG leaves a little chroma noise
#: in grey photos).
COLOUR_TOLERANCE = 12
#: Decoded sets larger than this many bytes (float32, at the model's size) stream from disk.
#: 1 GiB holds 87,000 colour images of 32×32 (CIFAR-10's 60,000 take 0.74 GB) or 340,000
#: grey 28×28 ones. Streaming decodes every image once per epoch (~1.3 ms per 128 px JPEG
#: on one core here), which is small next to a ResNet-8 step on a CPU, so the threshold is
#: set by memory alone (docs/data.md has the measurements).
STREAM_BYTES = 1 << 30
#: The largest side a person's images may be read at.
MAX_FOLDER_SIZE = 256
#: From this many files on, decoding uses worker processes. A spawned worker imports torch
#: before its first image (5-10 s measured here), while one thread decodes ~800 UTKFace
#: JPEGs (128 px → 32 px) a second, so workers pay off only for large folders.
WORKERS_FROM = 20_000
#: Unreadable files named on the terminal (all of them are recorded).
SHOWN_UNREADABLE = 5
#: CIFAR's image side and bytes per image.
CIFAR_SIDE = 32
CIFAR_PIXELS = 3 * CIFAR_SIDE * CIFAR_SIDE
CIFAR10_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


class NotAFolderError(DatasetNotFoundError):
    """The path given for a person's images is not a folder (or a manifest) that exists."""


class NoImagesError(DatasetNotFoundError):
    """A folder that holds no image files at all."""


class NoReadableImageError(DatasetContentError):
    """A folder whose image files all failed to decode."""


class OneClassError(DatasetContentError):
    """Images of fewer than two classes: nothing for a classifier to tell apart."""


# ----------------------------------------------------------------------------- one image


def _has_alpha(img: Image.Image) -> bool:
    return img.mode in ("LA", "La", "PA", "RGBA", "RGBa") or "transparency" in img.info


def _on_white(img: Image.Image) -> Image.Image:
    """RGB with any transparency composited onto white (what a viewer shows)."""
    if not _has_alpha(img):
        return img.convert("RGB")
    rgba = img.convert("RGBA")
    ground = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(ground, rgba).convert("RGB")


def _grey(img: Image.Image) -> Image.Image:
    """8-bit grey, 16-bit and float images scaled by their range rather than clamped."""
    if img.mode.startswith("I;16") or img.mode in ("I", "F"):
        values = np.asarray(img, dtype=np.float64)
        if not np.isfinite(values).all():
            raise ValueError("the image holds values that are not numbers")
        top = float(values.max(initial=0.0))
        scale = next((r for r in (1.0, 255.0, 65535.0) if top <= r), top) if img.mode == "F" else (
            65535.0 if img.mode.startswith("I;16") or top > 255 else 255.0)
        return Image.fromarray(np.clip(values / max(scale, 1e-12) * 255.0 + 0.5, 0, 255).astype(np.uint8))
    return _on_white(img).convert("L")


def is_colour(img: Image.Image) -> bool:
    """Whether an image shows colour (not only the grey values an RGB file may hold)."""
    if img.mode in ("1", "L", "LA", "La", "I", "F") or img.mode.startswith("I;16"):
        return False
    small = _on_white(img)
    small.thumbnail((64, 64))
    rgb = np.asarray(small, dtype=np.int16)
    spread = np.abs(rgb[..., 0] - rgb[..., 1]).clip(min=np.abs(rgb[..., 1] - rgb[..., 2]))
    return bool((spread > COLOUR_TOLERANCE).mean() > 0.01)


def fit_square(img: Image.Image, side: int) -> Image.Image:
    """Resize so the shorter side is ``side`` (aspect kept), then cut the centre ``side``×``side``."""
    w, h = img.size
    scale = side / min(w, h)
    size = (max(side, round(w * scale)), max(side, round(h * scale)))
    if size != (w, h):
        img = img.resize(size, Image.Resampling.BILINEAR)
    left, top = (size[0] - side) // 2, (size[1] - side) // 2
    return img.crop((left, top, left + side, top + side))


def image_array(img: Image.Image, side: int, channels: int) -> np.ndarray:
    """An opened image as the model sees it: uint8 (channels, side, side), resized and cropped."""
    if img.width < 1 or img.height < 1:
        raise ValueError("the image has no pixels")
    img = _grey(img) if channels == 1 else (_grey(img).convert("RGB") if img.mode.startswith(("I", "F"))
                                             else _on_white(img))
    array = np.asarray(fit_square(img, side), dtype=np.uint8)
    return array[None] if channels == 1 else np.ascontiguousarray(array.transpose(2, 0, 1))


def read_image(path: str | os.PathLike | IO[bytes], side: int, channels: int, name: str | None = None) -> np.ndarray:
    """Decode one image file (or its bytes, named ``name``) as the model sees it, or raise
    :class:`ImageLoadError` (one sentence)."""
    name = name or Path(path).name
    with upright_image(path, name, ImageLoadError, draft_side=4 * side) as (img, _):
        try:
            return image_array(img, side, channels)
        except (ValueError, OSError) as exc:
            raise ImageLoadError(f"{name}: not a readable image ({exc})") from None


def reads_photos(arch: Any) -> bool:
    """Whether a posterior was trained on a person's images (colour, or standardised grey) and
    so reads an image file as training read it, rather than as a digit (MNIST's recipe)."""
    return not arch.input_dim and (arch.channels == 3 or bool(arch.mean))


def photo_input(path: str | os.PathLike, arch: Any) -> torch.Tensor:
    """An image file as ``arch`` reads it: (1, C, S, S) float32 in [0, 1], resized and cropped
    as the training images were (:func:`fit_square`)."""
    path = Path(path)
    if path.is_dir():
        raise ImageLoadError(f"{path} is a folder, not an image")
    array = read_image(path, arch.image_size, arch.channels)
    return torch.from_numpy(array.astype(np.float32) / 255.0).unsqueeze(0)


@dataclass(frozen=True, eq=False)
class Photo:
    """An opened image file, kept as its bytes: each posterior of a person's images reads it at
    its own side and channels exactly as :func:`photo_input` reads the file (the command line's
    ``predict``), so columns of different sizes judge one photo alike."""

    name: str
    data: bytes
    _arrays: dict = field(default_factory=dict, repr=False)

    def array(self, side: int, channels: int) -> np.ndarray:
        """uint8 (channels, side, side): what a model of that side and channels sees."""
        key = (side, channels)
        if key not in self._arrays:
            self._arrays[key] = read_image(io.BytesIO(self.data), side, channels, name=self.name)
        return self._arrays[key]

    def picture(self, side: int = 240) -> np.ndarray:
        """The whole photo upright, RGB uint8 (H, W, 3), its longer side at most ``side``."""
        with upright_image(io.BytesIO(self.data), self.name, ImageLoadError, draft_side=side) as (img, _):
            rgb = _grey(img).convert("RGB") if img.mode.startswith(("I", "F")) else _on_white(img)
            rgb.thumbnail((side, side), Image.Resampling.LANCZOS)
            return np.asarray(rgb, dtype=np.uint8).copy()

    def model_input(self, arch: Any) -> torch.Tensor:
        """(1, C, S, S) float32 in [0, 1] for a posterior of a person's images; a model that reads
        digits or face descriptors is refused in a sentence."""
        if not reads_photos(arch):
            raise ValueError("This posterior judges digits as MNIST's were prepared, not photos: it judges the "
                             "Draw and Rotate tabs, and the Image tab when no posterior of your own images is shown")
        return torch.from_numpy(self.array(arch.image_size, arch.channels).astype(np.float32) / 255.0).unsqueeze(0)


def photo_from_array(image: np.ndarray, name: str) -> Photo:
    """A :class:`Photo` of an image already read (grey (H, W) in [0, 1] or uint8, or RGB (H, W, 3)
    uint8), kept as PNG bytes: read back at its own side it is the same pixels."""
    pixels = np.asarray(image)
    if pixels.dtype != np.uint8:
        pixels = np.rint(np.clip(pixels, 0, 1) * 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, "PNG")
    return Photo(name, buffer.getvalue())


def open_photo(path: str | os.PathLike) -> Photo:
    """Read an image file into a :class:`Photo`, checking that it decodes; raises
    :class:`ImageLoadError` with one sentence."""
    path = Path(path)
    if path.is_dir():
        raise ImageLoadError(f"{path.name} is a folder, not an image")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImageLoadError(f"{path.name}: no such file") from None
    except OSError as exc:
        raise ImageLoadError(f"{path.name}: the file cannot be read ({exc.strerror or exc})") from None
    photo = Photo(path.name, data)
    photo.array(COLOUR_IMAGE_SIZE, 3)  # decodes it once: a file that is no image is refused here
    return photo


def _reason(exc: Exception, name: str) -> str:
    text = str(exc)
    return text[len(name) + 2:] if text.startswith(f"{name}: ") else text


class ImageFiles(torch.utils.data.Dataset):
    """File paths → ``(index, uint8 (C, S, S) array or None, reason, content fingerprint or
    None)``; never raises for a file.

    Each file is read once: its bytes are hashed (:func:`core.engine.data.split.bytes_fingerprint`,
    what the split's copy check and the identity record use) and decoded from memory, so that
    knowing the contents costs no second read of the folder.
    """

    def __init__(self, paths: Sequence[Path], side: int, channels: int) -> None:
        self.paths, self.side, self.channels = list(paths), side, channels

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[int, np.ndarray | None, str, bytes | None]:
        path = self.paths[i]
        try:
            with reading_image(path.name, ImageLoadError):
                data = path.read_bytes()
        except ImageLoadError as exc:
            return i, None, _reason(exc, path.name), None
        try:
            return i, read_image(io.BytesIO(data), self.side, self.channels, name=path.name), "", bytes_fingerprint(data)
        except ImageLoadError as exc:
            return i, None, _reason(exc, path.name), bytes_fingerprint(data)


def _as_list(batch: list) -> list:
    return batch


def decode_stream(paths: Sequence[Path], side: int, channels: int, workers: int | None = None):
    """Yield ``(index, array or None, reason, fingerprint or None)`` for every path, decoded by a
    DataLoader (:class:`ImageFiles`)."""
    if workers is None:
        workers = min(4, (os.cpu_count() or 1) - 1) if len(paths) >= WORKERS_FROM else 0
    loader = torch.utils.data.DataLoader(
        ImageFiles(paths, side, channels), batch_size=64, num_workers=workers, collate_fn=_as_list,
        # forking a threaded process (the window) can hang; spawned workers need a script's
        # work to sit under ``if __name__ == "__main__":``, as bayescope's entry points do
        multiprocessing_context="spawn" if workers else None,
    )
    for batch in loader:
        yield from batch


# ----------------------------------------------------------------------------- layouts


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


# ----------------------------------------------------------------------------- streaming


class StreamedImages:
    """Images that stay on disk: indexing decodes the files asked for (float32 in [0, 1]).

    It answers what the fitting loops and the evaluation ask of ``Dataset.x``: ``len``,
    ``shape``, ``ndim``, ``dtype`` and indexing by an int, a slice or a tensor of indices,
    which decodes those images into a tensor; :meth:`subset` (what ``Dataset.subset`` and
    ``Dataset.first`` use) keeps a part on disk. Files are decoded by a pool of threads
    (Pillow releases the GIL while decoding and resizing).
    """

    def __init__(self, paths: Sequence[Path], side: int, channels: int) -> None:
        self.paths, self.side, self.channels = list(paths), side, channels

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self.paths), self.channels, self.side, self.side))

    ndim = 4
    dtype = torch.float32

    def _read(self, path: Path) -> np.ndarray:
        try:
            return read_image(path, self.side, self.channels)
        except ImageLoadError as exc:  # it was readable when the folder was scanned
            raise DatasetContentError(f"{exc}; it changed since the folder was read") from None

    def subset(self, index: Any) -> StreamedImages:
        """The images at ``index`` (a slice or indices), still on disk."""
        if isinstance(index, slice):
            return StreamedImages(self.paths[index], self.side, self.channels)
        return StreamedImages([self.paths[int(i)] for i in torch.as_tensor(index).reshape(-1)], self.side,
                              self.channels)

    def __getitem__(self, index: Any) -> torch.Tensor:
        if isinstance(index, (int, np.integer)):
            return torch.from_numpy(self._read(self.paths[int(index)]).astype(np.float32) / 255.0)
        if isinstance(index, slice):
            return self[torch.arange(len(self.paths))[index]]
        chosen = [self.paths[int(i)] for i in torch.as_tensor(index).reshape(-1)]
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
            arrays = list(pool.map(self._read, chosen))
        if not arrays:
            return torch.empty((0, self.channels, self.side, self.side))
        return torch.from_numpy(np.stack(arrays).astype(np.float32) / 255.0)


# ----------------------------------------------------------------------------- the data set


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


def _manifest_digest(listing: ImageList) -> str:
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
        return _manifest_digest(_listing(path))
    except (OSError, ValueError):
        return None


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
    listing = _listing(path)
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
        "listing_sha256": _manifest_digest(listing), "streamed": stream,
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


def _load_cifar(path: Path, layout: str, files: dict[str, list[Path]], image_size: int | None,
                channels: int | None, need_train: bool = True) -> FolderData:
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
    total = len(data["train"]) + len(data["test"])
    return FolderData(data["train"], data["test"], channels, side, mean_t, std, [], total)


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
