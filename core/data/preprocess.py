"""Turn a free drawing or a photo of a digit into what an MNIST model sees; rotate images.

MNIST's own recipe (LeCun et al.): the ink's bounding box is scaled, keeping its aspect
ratio, so its longer side is 20 pixels (anti-aliased), then placed in a 28×28 field so that
its centre of mass sits at the centre. Rotation uses bilinear resampling about the image
centre. All of it needs only NumPy, Pillow and torch.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

INK_THRESHOLD = 0.05


class EmptyDrawingError(ValueError):
    """There is no ink to classify."""


class ImageLoadError(ValueError):
    """An image file that cannot be read."""


def to_mnist(canvas: np.ndarray, box: int = 20, size: int = 28) -> np.ndarray:
    """Preprocess a drawing (H×W, ink in [0, 1] on 0 background) as MNIST was.

    Returns a ``size``×``size`` float32 array in [0, 1].

    Raises
    ------
    EmptyDrawingError
        If no pixel exceeds :data:`INK_THRESHOLD`.
    """
    canvas = np.asarray(canvas, dtype=np.float32)
    if canvas.ndim != 2:
        raise ValueError(f"expected a 2-d grey image, got shape {canvas.shape}")
    if not np.isfinite(canvas).all():
        raise ValueError("the drawing contains NaN or infinite values")
    ink = canvas > INK_THRESHOLD
    if not ink.any():
        raise EmptyDrawingError("the drawing is empty: draw something first")
    rows, cols = np.flatnonzero(ink.any(1)), np.flatnonzero(ink.any(0))
    crop = np.clip(canvas[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1], 0.0, 1.0)
    h, w = crop.shape
    scale = box / max(h, w)
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    img = Image.fromarray(crop, mode="F").resize((new_w, new_h), Image.Resampling.LANCZOS)
    small = np.clip(np.asarray(img, dtype=np.float32), 0.0, 1.0)
    total = small.sum()
    if total <= 0:
        raise EmptyDrawingError("the drawing is too faint to classify")
    ys, xs = np.indices(small.shape)
    cy, cx = (ys * small).sum() / total, (xs * small).sum() / total
    # Place the box so its centre of mass lands on the field's centre, (size - 1) / 2,
    # by integer placement followed by a sub-pixel bilinear shift.
    out = np.zeros((size, size), dtype=np.float32)
    top, left = (size - 1) / 2 - cy, (size - 1) / 2 - cx
    ti, li = math.floor(top), math.floor(left)
    ft, fl = top - ti, left - li
    padded = np.zeros((new_h + 1, new_w + 1), dtype=np.float32)
    padded[:new_h, :new_w] = small
    shifted = (
        (1 - ft) * (1 - fl) * padded
        + ft * (1 - fl) * np.roll(padded, 1, axis=0)
        + (1 - ft) * fl * np.roll(padded, 1, axis=1)
        + ft * fl * np.roll(np.roll(padded, 1, axis=0), 1, axis=1)
    )
    ph, pw = shifted.shape
    y0, x0 = max(ti, 0), max(li, 0)
    y1, x1 = min(ti + ph, size), min(li + pw, size)
    if y1 > y0 and x1 > x0:
        out[y0:y1, x0:x1] = shifted[y0 - ti : y1 - ti, x0 - li : x1 - li]
    return np.clip(out, 0.0, 1.0)


def centre_of_mass(image: np.ndarray) -> tuple[float, float]:
    """(row, column) of the intensity-weighted centre of an image."""
    image = np.asarray(image, dtype=np.float64)
    ys, xs = np.indices(image.shape)
    total = image.sum()
    return float((ys * image).sum() / total), float((xs * image).sum() / total)


def load_image(path: str | os.PathLike) -> np.ndarray:
    """Read an image file as a grey float array in [0, 1] with light ink on dark ground.

    Photos and scans of dark ink on paper are inverted (decided by the border's brightness).
    """
    path = Path(path)
    try:
        with Image.open(path) as img:
            img.load()
            grey = np.asarray(img.convert("L"), dtype=np.float32) / 255.0
    except FileNotFoundError:
        raise ImageLoadError(f"{path}: no such file") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageLoadError(f"{path}: not a readable image ({exc})") from exc
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    if border.mean() > 0.5:
        grey = 1.0 - grey
    return grey


def image_to_input(image: np.ndarray) -> torch.Tensor:
    """A 28×28 array → a (1, 1, 28, 28) float tensor; other sizes are preprocessed first."""
    image = np.asarray(image, dtype=np.float32)
    if image.shape != (28, 28):
        image = to_mnist(image)
    return torch.from_numpy(np.ascontiguousarray(image)).reshape(1, 1, 28, 28)


def rotate(images: torch.Tensor, degrees: float | torch.Tensor) -> torch.Tensor:
    """Rotate a batch (N, C, H, W) counter-clockwise by ``degrees`` (one or N angles).

    Bilinear resampling about the image centre; pixels from outside are zero (background).
    """
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
