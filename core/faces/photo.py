"""Read a photo for the face mode: any common format, EXIF rotation honoured, as RGB uint8.

Digit images go through :func:`core.data.preprocess.load_image` (grey, ink on a dark
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
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

#: Longer side (pixels) a photo is scaled down to on loading.
MAX_WORK_SIDE = 4096


def _error(message: str) -> ValueError:
    """:class:`core.data.preprocess.ImageLoadError`, the digit reader's error, so callers
    catch one type; imported here only when needed because that module loads torch, which
    the descriptor worker processes never need."""
    from core.data.preprocess import ImageLoadError

    return ImageLoadError(message)


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
    limit = Image.MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source) as img:
                if max(img.size) > MAX_WORK_SIDE and img.format == "JPEG":
                    scale = MAX_WORK_SIDE / max(img.size)
                    img.draft(img.mode, (int(img.size[0] * scale) + 1, int(img.size[1] * scale) + 1))
                img.load()
                img = ImageOps.exif_transpose(img)
                img = _to_rgb(img)
                if max(img.size) > MAX_WORK_SIDE:
                    scale = MAX_WORK_SIDE / max(img.size)
                    size = (max(1, round(img.size[0] * scale)), max(1, round(img.size[1] * scale)))
                    img = img.resize(size, Image.Resampling.LANCZOS)
                rgb = np.asarray(img, dtype=np.uint8)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _error(
            f"{what}: the image is too large (more than {limit or 0:,} pixels); scale it down first"
        ) from None
    except FileNotFoundError:
        raise _error(f"{what}: no such file") from None
    except PermissionError:
        raise _error(f"{what}: permission denied; check the file's access rights") from None
    except MemoryError:
        raise _error(f"{what}: not enough memory to decode this image; scale it down first") from None
    except Exception:  # Pillow raises many types for damaged files: all mean the same here
        raise _error(
            f"{what}: not a readable image (the file is damaged or not in a format Pillow reads)"
        ) from None
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.size == 0:
        raise _error(f"{what}: not a readable image (it has no pixels)")
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
        raise _error(f"{path}: no such file")
    if path.is_dir():
        raise _error(f"{path} is a folder, not an image")
    return _decode(path, str(path))


def decode_photo(data: bytes, name: str = "the image") -> np.ndarray:
    """:func:`load_photo` for an image held in memory (e.g. read from an archive)."""
    return _decode(io.BytesIO(data), name)
