"""Image files as a model sees them: one photo, a folder's files decoded in a stream, or images
left on disk and decoded as a mini-batch asks.

Every image goes through the app's one image reader
(:func:`core.engine.data.preprocess.upright_image`: PNG, JPEG, BMP, WebP, TIFF, ... with
the EXIF orientation applied), is made grey or RGB (transparency composited onto white),
its **shorter side resized** to the model's side ``S`` (bilinear, antialiased when shrinking)
and **centre-cropped** to S×S (:func:`read_image`). A person's photo is kept as its bytes
(:class:`Photo`), so that each posterior reads it at its own side and channels.

Decoding many files runs through a ``torch.utils.data.DataLoader`` over the file paths (worker
processes from :data:`WORKERS_FROM` files on, :func:`decode_stream`); each file is read once, its
bytes hashed for the split's copy check and the identity record, then decoded from memory. A set
too large to hold decoded is a :class:`StreamedImages`, which decodes the images a mini-batch asks
for from disk, each time. :mod:`core.engine.data.folder` reads a person's folders with these.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from PIL import Image

from core.engine.data.datasets import DatasetContentError
from core.engine.data.preprocess import ImageLoadError, reading_image, upright_image
from core.engine.data.split import bytes_fingerprint
from core.engine.model_inputs import reads_photos
from core.engine.models import COLOUR_IMAGE_SIZE

#: A pixel is coloured when two of its channels differ by more than this (of 255), and an
#: image is colour when more than 1 % of its pixels are (JPEG leaves a little chroma noise
#: in grey photos).
COLOUR_TOLERANCE = 12

#: From this many files on, decoding uses worker processes. A spawned worker imports torch
#: before its first image (5-10 s measured here), while one thread decodes ~800 UTKFace
#: JPEGs (128 px → 32 px) a second, so workers pay off only for large folders.
WORKERS_FROM = 20_000


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
