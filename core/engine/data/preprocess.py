"""Turn a free drawing or a photo of a digit into what an MNIST model sees; rotate images.

MNIST's own recipe (LeCun et al.): the ink's bounding box is scaled, keeping its aspect
ratio, so its longer side is 20 pixels (anti-aliased), then placed in a 28×28 field so that
its centre of mass sits at the centre, the box kept a pixel inside the field's edge
(:data:`EDGE_MARGIN`). Measured on MNIST's 10,000 test digits: every box's longer side is
20 pixels and the centre of mass lies at (13.99, 14.00) ± 0.29 (row, column; this module
centres at 13.5, half a pixel up and left of that); the top-heavy 7s come within 1 pixel of
the bottom edge in over half of them and touch it in 5 %. Rotation uses bilinear resampling about the image
centre. All of it needs only NumPy, Pillow and torch.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
from PIL import Image, ImageOps

if TYPE_CHECKING:  # torch is imported where tensors are made: drawing needs only NumPy
    import torch

INK_THRESHOLD = 0.05


class EmptyDrawingError(ValueError):
    """There is no ink to classify."""


class ImageLoadError(ValueError):
    """An image file that cannot be read."""


#: Pixels of background the preprocessed box keeps from each edge of the 28×28 field (the ink
#: never lies on the outermost rows and columns; a 20-pixel box leaves room for 4).
EDGE_MARGIN = 1


def to_mnist(canvas: np.ndarray, box: int = 20, size: int = 28) -> np.ndarray:
    """Preprocess a drawing (H×W, ink in [0, 1] on 0 background) as MNIST was.

    Returns a ``size``×``size`` float32 array in [0, 1].

    Raises
    ------
    EmptyDrawingError
        If no pixel exceeds :data:`INK_THRESHOLD`.
    """
    canvas = check_drawing(canvas)
    ink = canvas > INK_THRESHOLD
    rows, cols = np.flatnonzero(ink.any(1)), np.flatnonzero(ink.any(0))
    crop = np.clip(canvas[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1], 0.0, 1.0)
    h, w = crop.shape
    scale = box / max(h, w)
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    img = Image.frombuffer("F", (w, h), np.ascontiguousarray(crop), "raw", "F", 0, 1)
    img = img.resize((new_w, new_h), Image.Resampling.LANCZOS)
    small = np.clip(np.frombuffer(img.tobytes(), np.float32).reshape(new_h, new_w), 0.0, 1.0)
    total = small.sum()
    if total <= 0:
        raise EmptyDrawingError("the drawing is too faint to classify")
    ys, xs = _index_grids(new_h, new_w)
    cy, cx = (ys * small).sum() / total, (xs * small).sum() / total
    # Place the box so its centre of mass lands on the field's centre, (size - 1) / 2,
    # by integer placement followed by a sub-pixel bilinear shift.
    top, left = (size - 1) / 2 - cy, (size - 1) / 2 - cx
    # A lopsided glyph (a 7's heavy bar, a T) would have its centre of mass pulled to the
    # middle at the cost of pushing the far end of its box into, or past, the field's edge:
    # ink cut off, or lying on the outermost row where a rotation cuts it. The box is kept
    # EDGE_MARGIN pixels inside (its sub-pixel shift spills into one more pixel), moving the
    # centre of mass only by what that needs (at most a pixel for a 7, within MNIST's own
    # spread of centres).
    top = min(max(top, EDGE_MARGIN), size - EDGE_MARGIN - new_h)
    left = min(max(left, EDGE_MARGIN), size - EDGE_MARGIN - new_w)
    ti, li = math.floor(top), math.floor(left)
    ft, fl = top - ti, left - li
    # The bilinear shift: the box weighted, then its copies a pixel down, right and both, each
    # weighted, added in that order, in one more row and column of zeros. A weight keeps the type
    # of the placement's fractions (NumPy doubles, or whole numbers where the edge held the box on
    # both axes), which sets the sums' precision: double, or float32.
    weights = ((1 - ft) * (1 - fl), ft * (1 - fl), (1 - ft) * fl, ft * fl)
    shifted = np.zeros((new_h + 1, new_w + 1), dtype=np.result_type(weights[0], small))
    np.multiply(small, weights[0], out=shifted[:new_h, :new_w])
    for weight, (dy, dx) in zip(weights[1:], ((1, 0), (0, 1), (1, 1)), strict=True):
        shifted[dy : dy + new_h, dx : dx + new_w] += weight * small
    out = np.zeros((size, size), dtype=np.float32)
    ph, pw = shifted.shape
    y0, x0 = max(ti, 0), max(li, 0)
    y1, x1 = min(ti + ph, size), min(li + pw, size)
    if y1 > y0 and x1 > x0:
        placed = out[y0:y1, x0:x1]
        placed[...] = shifted[y0 - ti : y1 - ti, x0 - li : x1 - li]
        np.minimum(placed, 1.0, out=placed)  # the rest of the field is 0, the box at least 0
    return out


@functools.lru_cache(maxsize=64)
def _index_grids(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Each pixel's row and column index, as doubles (the centre of mass's weights, read only)."""
    ys, xs = np.indices((h, w), dtype=np.float64)
    ys.flags.writeable = xs.flags.writeable = False
    return ys, xs


def centre_of_mass(image: np.ndarray) -> tuple[float, float]:
    """(row, column) of the intensity-weighted centre of an image."""
    image = np.asarray(image, dtype=np.float64)
    ys, xs = np.indices(image.shape)
    total = image.sum()
    return float((ys * image).sum() / total), float((xs * image).sum() / total)


def _grey_and_alpha(img: Image.Image) -> tuple[np.ndarray, np.ndarray | None]:
    """Luminance in [0, 1] scaled by the image's bit depth, and alpha in [0, 1] if any.

    ``Image.convert("L")`` clamps 16-bit values at 255 (a 16-bit scan would turn white)
    and drops alpha (a black digit on a transparent ground would turn black on black), so
    high-bit-depth modes are scaled by their range and alpha is returned separately.
    """
    mode = img.mode
    if mode.startswith("I;16"):
        return np.asarray(img, dtype=np.float32) / 65535.0, None
    if mode in ("I", "F"):
        values = np.asarray(img, dtype=np.float64)
        if not np.isfinite(values).all():
            raise ValueError("the image holds values that are not numbers")
        top = float(values.max(initial=0.0))
        # The range is not in the mode: take the smallest usual one that holds the data.
        ranges = (1.0, 255.0, 65535.0) if mode == "F" else (255.0, 65535.0)
        scale = next((r for r in ranges if top <= r), top)
        return np.clip(values / max(scale, 1e-12), 0.0, 1.0).astype(np.float32), None
    has_alpha = mode in ("LA", "La", "PA", "RGBA", "RGBa") or "transparency" in img.info
    if not has_alpha:
        return np.asarray(img.convert("L"), dtype=np.float32) / 255.0, None
    rgba = img.convert("RGBA")
    alpha = np.asarray(rgba.getchannel("A"), dtype=np.float32) / 255.0
    grey = np.asarray(rgba.convert("RGB").convert("L"), dtype=np.float32) / 255.0
    return grey, alpha


def _composite(grey: np.ndarray, alpha: np.ndarray | None) -> np.ndarray:
    """Put the visible content on the background that contrasts with it.

    The colour of transparent pixels means nothing; what is drawn is the opaque part. Its
    alpha-weighted mean luminance says whether it is dark ink (composite onto white) or
    light ink (onto black), so the digit survives whatever the transparent pixels hold.
    """
    if alpha is None or alpha.min() >= 1.0:
        return grey
    weight = float(alpha.sum())
    if weight <= 0.0:
        return np.zeros_like(grey)  # fully transparent: nothing is drawn
    ink = float((alpha * grey).sum()) / weight
    background = 1.0 if ink < 0.5 else 0.0
    return alpha * grey + (1.0 - alpha) * background


@contextlib.contextmanager
def reading_image(what: str, error: Callable[[str], Exception]) -> Iterator[None]:
    """Inside the block, Pillow's many failures become one sentence each about ``what``,
    raised as ``error(sentence)``: the one place that says why an image could not be read
    (digits and face photos alike). Pillow only warns between 1× and 2× its
    decompression-bomb limit ``Image.MAX_IMAGE_PIXELS``; the whole range is refused."""
    limit = Image.MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise error(f"{what}: the image is too large (more than {limit or 0:,} pixels); scale it down first") from None
    except FileNotFoundError:
        raise error(f"{what}: no such file") from None
    except PermissionError:
        raise error(f"{what}: permission denied; check the file's access rights") from None
    except MemoryError:
        raise error(f"{what}: not enough memory to decode this image; scale it down first") from None
    except Exception:  # Pillow raises many types for damaged files: all mean the same here
        raise error(f"{what}: not a readable image (the file is damaged, or not in an image format bayescope can open)") from None


@contextlib.contextmanager
def upright_image(
    source: str | os.PathLike | IO[bytes],
    what: str,
    error: Callable[[str], Exception],
    draft_side: int | None = None,
) -> Iterator[tuple[Image.Image, int]]:
    """Open, decode and turn upright an image file; yield ``(image, number of frames)``.

    The one reader of image files (digits and face photos alike): Pillow's failures become
    one sentence (:func:`reading_image`), and the EXIF orientation tag is applied, so a phone
    photo stored sideways is judged as every viewer shows it. Only the first frame of a GIF
    or TIFF is decoded; the number of frames is yielded so a caller can say which was read.
    ``draft_side`` lets a JPEG larger than it decode directly at a reduced size.
    """
    with reading_image(what, error), Image.open(source) as img:
        if draft_side and max(img.size) > draft_side and img.format == "JPEG":
            scale = draft_side / max(img.size)
            img.draft(img.mode, (int(img.size[0] * scale) + 1, int(img.size[1] * scale) + 1))
        frames = int(getattr(img, "n_frames", 1) or 1)
        img.load()
        yield ImageOps.exif_transpose(img), frames


def load_image(path: str | os.PathLike) -> np.ndarray:
    """Read an image file as a grey float array in [0, 1] with light ink on a 0 ground.

    8- and 16-bit greys, palettes, RGB(A) and CMYK are read; values are scaled by the bit
    depth; transparency is composited onto the background that contrasts with the visible
    content. Photos and scans of dark ink on paper are inverted (decided by the border's
    brightness), and the ground's level (the border's median) is subtracted so that paper
    tone or a uniform image does not count as ink.

    Raises
    ------
    ImageLoadError
        Missing file, a folder, an unreadable or damaged image, or one above Pillow's
        decompression-bomb limit ``Image.MAX_IMAGE_PIXELS`` (checked from the header,
        before decoding; Pillow only warns between 1× and 2× the limit, we refuse).
    EmptyDrawingError
        A GIF or TIFF of several frames whose first frame (the one read) is blank.
    """
    path = Path(path)
    if not path.exists():
        raise ImageLoadError(f"{path}: no such file")
    if path.is_dir():
        raise ImageLoadError(f"{path} is a folder, not an image")
    # Image.open checks the size in the header, before anything is decoded
    with upright_image(path, str(path), ImageLoadError) as (img, frames):
        grey, alpha = _grey_and_alpha(img)
    if grey.ndim != 2 or grey.size == 0:
        raise ImageLoadError(f"{path}: not a readable image (it has no pixels)")
    grey = _composite(grey, alpha)
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    if border.mean() > 0.5:
        grey = 1.0 - grey
        border = 1.0 - border
    ground = float(np.median(border))
    if ground > 0.0:
        grey = np.clip((grey - ground) / (1.0 - ground), 0.0, 1.0) if ground < 1.0 else np.zeros_like(grey)
    if frames > 1 and not (grey > INK_THRESHOLD).any():
        # "empty" would be wrong: the digit may be on a later frame, which is never read
        raise EmptyDrawingError(
            f"{path}: the first of its {frames} frames is blank, and only the first frame is read; "
            "save the frame with the digit as an image of its own"
        )
    return grey.astype(np.float32, copy=False)


def check_drawing(image: np.ndarray) -> np.ndarray:
    """A 2-d finite float32 array with some ink, or the error that says what is wrong.

    Raises ``ValueError`` for a wrong shape or NaN/Inf and :class:`EmptyDrawingError` when
    no pixel exceeds :data:`INK_THRESHOLD`, whatever the size.
    """
    image = np.asarray(image, dtype=np.float32)
    if image.ndim != 2 or image.size == 0:
        raise ValueError(f"expected a 2-d grey image, got shape {image.shape}")
    if not np.isfinite(image).all():
        raise ValueError("the drawing contains NaN or infinite values")
    if not (image > INK_THRESHOLD).any():
        raise EmptyDrawingError("the drawing is empty: draw something first")
    return image


def image_to_input(image: np.ndarray) -> torch.Tensor:
    """A 28×28 array → a (1, 1, 28, 28) float tensor; other sizes are preprocessed first.

    Emptiness is checked for every size: a blank 28×28 image is an empty drawing too.
    """
    import torch

    image = check_drawing(image)
    if image.shape != (28, 28):
        image = to_mnist(image)
    # clipped by the two ufuncs (np.clip's Python wrapper costs as much as the clip here)
    return torch.from_numpy(np.ascontiguousarray(np.minimum(np.maximum(image, 0.0), 1.0))).reshape(1, 1, 28, 28)


def rotate_image(image: np.ndarray, degrees: float) -> np.ndarray:
    """One 2-D image rotated as :func:`rotate` turns a batch; an array in, an array out."""
    import torch

    batch = torch.from_numpy(np.ascontiguousarray(image)).reshape(1, 1, *image.shape)
    return rotate(batch, float(degrees))[0, 0].numpy()


def rotate(images: torch.Tensor, degrees: float | torch.Tensor) -> torch.Tensor:
    """Rotate a batch (N, C, H, W) counter-clockwise by ``degrees`` (one or N angles).

    Bilinear resampling about the image centre; pixels from outside are zero (background).
    """
    import torch

    if images.ndim != 4:
        raise ValueError(f"expected (N, C, H, W), got {tuple(images.shape)}")
    n = images.shape[0]
    theta = torch.as_tensor(degrees, dtype=images.dtype).reshape(-1).expand(n) * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    zeros = torch.zeros_like(cos)
    # The grid maps output coordinates to input ones: the inverse (clockwise) rotation
    # in image coordinates, whose y axis points down.
    affine = torch.stack(
        [torch.stack([cos, -sin, zeros], -1), torch.stack([sin, cos, zeros], -1)], -2
    )
    grid = torch.nn.functional.affine_grid(affine, list(images.shape), align_corners=False)
    return torch.nn.functional.grid_sample(
        images, grid, mode="bilinear", padding_mode="zeros", align_corners=False
    )
