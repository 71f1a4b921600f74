"""Read a photo for the face mode: any common format, EXIF rotation honoured, as RGB uint8.

Digit images go through :func:`core.engine.data.preprocess.load_image` (grey, ink on a dark
ground); faces need colour and orientation instead, so photos have their own reader:

- the EXIF orientation tag is applied, so a phone photo is upright as its owner sees it;
- grey (8- or 16-bit), palette, CMYK (including Adobe's inverted JPEGs), RGB and images
  with transparency (composited onto white) all become ``(H, W, 3)`` uint8 RGB;
- an image above Pillow's decompression-bomb limit is refused before decoding, and one
  whose longer side exceeds :data:`MAX_WORK_SIDE` is scaled down to it (JPEGs are decoded
  directly at a reduced size), which keeps every face far above the 150-pixel chip.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

# the digit reader's error and its Pillow translation, so callers catch one type
# (core.engine.data.preprocess imports no torch: the descriptor worker processes stay light)
from core.engine.data.preprocess import ImageLoadError, upright_image
from core.engine.faces.descriptor import (
    MIN_FACE_SIZE,
    FaceTooSmallError,
    NoFaceError,
    get_descriptor,
)

#: Longer side (pixels) a photo is scaled down to on loading.
MAX_WORK_SIDE = 4096


def _to_rgb(img: Image.Image) -> Image.Image:
    mode = img.mode
    if mode.startswith("I;16") or mode in ("I", "F"):
        values = np.asarray(img, dtype=np.float64)
        top = float(values.max()) if values.size else 0.0
        bits = 255.0 if top <= 255.0 else 65535.0
        grey = np.clip(values / bits * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return Image.fromarray(grey, mode="L").convert("RGB")
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        ground = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(ground, rgba).convert("RGB")
    return img.convert("RGB")


def _decode(source: str | os.PathLike | io.BytesIO, what: str) -> np.ndarray:
    with upright_image(source, what, ImageLoadError, draft_side=MAX_WORK_SIDE) as (img, _):
        img = _to_rgb(img)
        if max(img.size) > MAX_WORK_SIDE:
            scale = MAX_WORK_SIDE / max(img.size)
            size = (max(1, round(img.size[0] * scale)), max(1, round(img.size[1] * scale)))
            img = img.resize(size, Image.Resampling.LANCZOS)
        rgb = np.asarray(img, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.size == 0:
        raise ImageLoadError(f"{what}: not a readable image (it has no pixels)")
    return np.ascontiguousarray(rgb)


def load_photo(path: str | os.PathLike) -> np.ndarray:
    """Read a photo as an upright ``(H, W, 3)`` uint8 RGB array (longer side ≤ 4096).

    Raises
    ------
    ImageLoadError
        Missing file, a folder, an unreadable or damaged image, or one above Pillow's
        decompression-bomb limit.
    """
    path = Path(path)
    if not path.exists():
        raise ImageLoadError(f"{path}: no such file")
    if path.is_dir():
        raise ImageLoadError(f"{path} is a folder, not an image")
    return _decode(path, str(path))


def decode_photo(data: bytes, name: str = "the image") -> np.ndarray:
    """:func:`load_photo` for an image held in memory (e.g. read from an archive)."""
    return _decode(io.BytesIO(data), name)


def describe_photo(path: str | Path, face: int = 1, descriptor: str | None = None) -> dict[str, Any]:
    """Load a photo, detect its faces and describe face number ``face`` (1 = largest).

    Returns ``{"image", "size", "faces" (boxes), "face" (1-based), "chip", "descriptor",
    "info"}``. Raises :class:`NoFaceError` / :class:`FaceTooSmallError` with the reason.
    """
    backend = get_descriptor(descriptor) if descriptor else get_descriptor()
    image = load_photo(path)
    h, w = image.shape[:2]
    boxes = backend.detect(image)
    if not boxes:
        if min(h, w) < MIN_FACE_SIZE:
            raise FaceTooSmallError(
                f"{path}: the image is only {w}×{h} pixels; a face must be at least {MIN_FACE_SIZE} "
                "pixels across to be found"
            )
        raise NoFaceError(
            f"{path}: no face found in the {w}×{h} image (the detector finds upright, roughly "
            f"frontal faces of at least {MIN_FACE_SIZE} pixels)"
        )
    if not 1 <= face <= len(boxes):
        raise ValueError(f"--face {face}: the image has {len(boxes)} face(s); choose 1 to {len(boxes)}")
    box = boxes[face - 1]
    try:
        chip, vector = backend.align_and_describe(image, box)
    except FaceTooSmallError as exc:
        raise FaceTooSmallError(f"{path}: {exc}") from None
    return {"image": image, "size": (w, h), "faces": boxes, "face": face, "chip": chip,
            "descriptor": vector, "info": backend.info}
