"""Corruptions of one model input at a severity: Gaussian noise, blur, contrast, occlusion, shift.

Each is a pure function of ``(image, severity, seed)``: the image is a model input in [0, 1],
grey ``(H, W)`` or ``(C, H, W)`` (one channel or colour), float; the result has its shape and
dtype and stays in [0, 1]. Severity runs from 0 to 5, as in MNIST-C and CIFAR-C (Mu & Gilmer
2019; Hendrycks & Dietterich 2019), and may be fractional (the parameter is linear in it).
Severity 0 returns the clean image bit for bit; a higher severity never moves an image less
far from the clean one (at a fixed seed the random part is drawn once and only scaled).

=========  ==================================================  ======================  =========
name       what severity s sets                               at s = 5 on 28×28       random part
=========  ==================================================  ======================  =========
noise      pixel noise σ = 0.08·s (of the 0–1 range), clipped  σ = 0.40                the noise
blur       Gaussian blur σ = s·side/70 px (0.4·s px at 28)     σ = 2 px                none
contrast   pixel → m + (1 − 0.19·s)(pixel − m), m its mean     5 % of the contrast     none
occlusion  a mid-grey square of side round(s·side/10) px       14 px (half the side)   where it lies
shift      moved by s·side/14 px (2·s px at 28), edges black   10 px                   the direction
=========  ==================================================  ======================  =========

``side`` is the image's shorter side, so a colour image of another size is corrupted in the same
proportions. The occlusion patch's centre is ``position`` (fractions of the width and height)
when given, which is how a sweep moves it across the image; otherwise the seed draws it in the
middle half of each axis, where a centred digit's strokes are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: The highest severity (MNIST-C's and CIFAR-C's five levels).
MAX_SEVERITY = 5.0


@dataclass(frozen=True)
class Corruption:
    """One corruption's facts: its name on the command line, its words, its severity scale."""

    name: str
    label: str  #: in words, for a menu ("Gaussian noise")
    scale: str  #: what severity s sets, in words (shown beside the slider and in docs)
    apply: Callable[..., np.ndarray]
    words: str = ""  #: the label inside a sentence ("Gaussian noise", "blur"); the label when empty
    #: Whether the seed changes the image (the noise, the shift's direction); occlusion's patch
    #: only when no place is given, which the window and the sweeps always give.
    random: bool = False

    @property
    def in_sentence(self) -> str:
        return self.words or self.label


def _check(image: np.ndarray, severity: float) -> np.ndarray:
    image = np.asarray(image)
    if image.ndim not in (2, 3) or not np.issubdtype(image.dtype, np.floating):
        raise ValueError(f"a corruption takes a float image (H, W) or (C, H, W), got {image.dtype} {image.shape}")
    if not (math.isfinite(severity) and 0.0 <= severity <= MAX_SEVERITY):
        raise ValueError(f"the severity must lie between 0 and {MAX_SEVERITY:g}, got {severity}")
    return image


def _side(image: np.ndarray) -> int:
    return int(min(image.shape[-2:]))


def gaussian_noise(image: np.ndarray, severity: float, seed: int = 0) -> np.ndarray:
    """Add N(0, σ²) noise to every pixel, σ = 0.08·severity, and clip to [0, 1].

    The noise is drawn once per seed and scaled, so at one seed each pixel only moves further
    from its clean value as the severity rises (clipping stops it, never turns it back).
    """
    image = _check(image, severity)
    if severity == 0:
        return image.copy()
    noise = np.random.default_rng(seed).standard_normal(image.shape)
    return np.clip(image + 0.08 * severity * noise, 0.0, 1.0).astype(image.dtype)


def _gaussian_kernel(sigma: float) -> np.ndarray:
    radius = max(1, math.ceil(3.0 * sigma))
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (x / sigma) ** 2)
    return kernel / kernel.sum()


def blur(image: np.ndarray, severity: float, seed: int = 0) -> np.ndarray:
    """Gaussian blur with σ = severity·side/70 pixels (0.4·severity at 28 px), mirrored edges.

    Separable; the edges are mirrored (not padded black) so a colour photo's border does not
    darken. The seed is unused: blur has no random part.
    """
    del seed
    image = _check(image, severity)
    if severity == 0:
        return image.copy()
    kernel = _gaussian_kernel(severity * _side(image) / 70.0)
    r = len(kernel) // 2
    out = image.astype(np.float64)
    for axis in (-2, -1):
        pad = [(0, 0)] * out.ndim
        pad[axis] = (r, r)
        padded = np.pad(out, pad, mode="symmetric")
        n = out.shape[axis]
        out = sum(w * np.take(padded, np.arange(k, k + n), axis=axis) for k, w in enumerate(kernel))
    return np.clip(out, 0.0, 1.0).astype(image.dtype)


def contrast(image: np.ndarray, severity: float, seed: int = 0) -> np.ndarray:
    """Pull every pixel towards its channel's mean m: m + c·(pixel − m), c = 1 − 0.19·severity
    (5 % of the contrast left at severity 5). No random part."""
    del seed
    image = _check(image, severity)
    if severity == 0:
        return image.copy()
    factor = 1.0 - 0.19 * severity
    planes = image.astype(np.float64).reshape(-1, *image.shape[-2:])
    mean = planes.mean(axis=(-2, -1), keepdims=True)
    out = mean + factor * (planes - mean)
    return np.clip(out, 0.0, 1.0).reshape(image.shape).astype(image.dtype)


#: The occluding patch's value: mid-grey, seen against both a black background and white ink.
OCCLUDER = 0.5


def occlusion_box(shape: tuple[int, ...], severity: float, seed: int = 0,
                  position: tuple[float, float] | None = None) -> tuple[int, int, int, int]:
    """The occluding square's rows and columns ``(top, bottom, left, right)`` (half-open, clipped
    to the image) for an image of ``shape``.

    Its side is round(severity·side/10) px; its centre is ``position`` = (x, y) as fractions of the
    width and height, or drawn by the seed uniformly in the middle half of each axis. Squares of
    rising severity at one centre are nested.
    """
    height, width = int(shape[-2]), int(shape[-1])
    size = int(round(severity * min(height, width) / 10.0))
    if position is None:
        position = tuple(np.random.default_rng(seed).uniform(0.25, 0.75, size=2))
    cx, cy = float(position[0]) * width, float(position[1]) * height
    top, left = math.floor(cy - size / 2), math.floor(cx - size / 2)
    return max(top, 0), min(top + size, height), max(left, 0), min(left + size, width)


def occlusion(image: np.ndarray, severity: float, seed: int = 0,
              position: tuple[float, float] | None = None) -> np.ndarray:
    """Cover a square of side round(severity·side/10) px with mid-grey (:data:`OCCLUDER`).

    ``position`` (x, y), fractions of the width and height, puts the square's centre (a sweep
    moves it); without it the seed draws the centre in the middle half of each axis.
    """
    image = _check(image, severity)
    out = image.copy()
    if severity == 0:
        return out
    top, bottom, left, right = occlusion_box(image.shape, severity, seed, position)
    out[..., top:bottom, left:right] = OCCLUDER
    return out


def shift_offset(shape: tuple[int, ...], severity: float, seed: int = 0) -> tuple[int, int]:
    """The whole-pixel move ``(down, right)`` of :func:`shift`: severity·side/14 px in a direction
    the seed draws (uniform over the circle), rounded to pixels."""
    distance = severity * min(int(shape[-2]), int(shape[-1])) / 14.0
    angle = np.random.default_rng(seed).uniform(0.0, 2.0 * math.pi)
    return int(round(distance * math.sin(angle))), int(round(distance * math.cos(angle)))


def shift(image: np.ndarray, severity: float, seed: int = 0) -> np.ndarray:
    """Move the image by severity·side/14 px (2·severity px at 28) in the seed's direction; the
    pixels uncovered are black (0, MNIST's background), those moved out are lost."""
    image = _check(image, severity)
    out = np.zeros_like(image)
    if severity == 0:
        return image.copy()
    down, right = shift_offset(image.shape, severity, seed)
    height, width = image.shape[-2:]
    if abs(down) >= height or abs(right) >= width:
        return out
    src_rows = slice(max(-down, 0), height - max(down, 0))
    dst_rows = slice(max(down, 0), height - max(-down, 0))
    src_cols = slice(max(-right, 0), width - max(right, 0))
    dst_cols = slice(max(right, 0), width - max(-right, 0))
    out[..., dst_rows, dst_cols] = image[..., src_rows, src_cols]
    return out


#: Every corruption by its name (the command line's and the window's choices, in this order).
CORRUPTIONS: dict[str, Corruption] = {c.name: c for c in (
    Corruption("noise", "Gaussian noise", "noise σ = 0.08 × severity", gaussian_noise, random=True),
    Corruption("blur", "Blur", "blur σ = 0.4 px × severity (at 28 px)", blur, "blur"),
    Corruption("contrast", "Contrast", "contrast × (1 − 0.19 × severity)", contrast, "lowered contrast"),
    Corruption("occlusion", "Occlusion", "a grey square of side severity/10 of the image", occlusion, "occlusion"),
    Corruption("shift", "Shift", "moved by severity/14 of the image (2 px per level at 28 px)", shift, "shift",
               random=True),
)}


def corruption_named(name: str) -> Corruption:
    """The corruption called ``name``; a ``ValueError`` sentence naming the choices otherwise."""
    try:
        return CORRUPTIONS[name]
    except KeyError:
        raise ValueError(f"unknown corruption {name!r}: choose one of {', '.join(CORRUPTIONS)}") from None


def corrupt(image: np.ndarray, name: str, severity: float, seed: int = 0, **options) -> np.ndarray:
    """Apply the corruption called ``name`` (``options``: occlusion's ``position``)."""
    return corruption_named(name).apply(image, float(severity), seed, **options)


def image_seed(seed: int, index: int, set_index: int = 0) -> int:
    """The seed of image ``index`` of a set (0: the data set, 1: the OOD set) in a data-set
    corruption: every image draws its own noise, patch or direction, independent of batching."""
    state = np.random.SeedSequence([int(seed), int(set_index), int(index)]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])
