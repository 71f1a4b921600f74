"""How the plots and the drawing hand Qt their numbers: a colour map's lookup table, an array's
colours as an image, an image drawn on the window's thread alone (:func:`draw_image`), and whole
numpy arrays of lines and rectangles drawn in one call (:class:`Rows`, kept for as long as a plot's
layout): no Python object per drawn item.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import shiboken6
from PySide6.QtCore import QLineF, QRect, QRectF, Qt
from PySide6.QtGui import QImage, QPainter


def lookup_table(colour_map) -> np.ndarray:
    """256 RGB rows of a pyqtgraph colour map, for painting an array as an image."""
    return np.ascontiguousarray(colour_map.getLookupTable(0.0, 1.0, 256, alpha=False), dtype=np.uint8)


def colours(values: np.ndarray, table: np.ndarray, low: float, high: float) -> np.ndarray:
    """RGB (rows, columns, 3) of an array through ``table``: ``low``..``high`` → first..last row
    (:func:`colour_index`'s rows, found by :func:`reversed_index` in the table read from its end)."""
    return table[::-1].take(reversed_index(values, low, high), axis=0)


def colour_index(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """The row of a 256-row table for each value: ``low``..``high`` → 0..255, NaN → 0, beyond
    the range its end. (Without ``np.nan_to_num`` and ``np.clip``, whose Python wrappers cost
    more than the arithmetic on a stroke's 10×10 arrays: ``np.fmax`` takes ``low`` for a NaN and
    a value below it, ``np.fmin`` ``high`` for one above, both before the scaling, so each end's
    row comes from the same arithmetic as a value at it; infinities end at 0 or 255 either way.)"""
    values = np.fmin(np.fmax(values, low), high)
    return ((values - low) / (high - low) * 255.0 + 0.5).astype(np.uint8)


def reversed_index(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """``255 − colour_index(values, low, high)``, bit for bit, in two numpy calls instead of
    seven: the rows of a table read from its end (``table[::-1]``), found by one binary search
    among the 255 values at which :func:`colour_index`'s row steps up (:func:`_steps`). NaN
    takes row 255 of the reversed table as it takes row 0 of the table: negated, it sorts after
    every step."""
    return np.searchsorted(_steps(values.dtype, low, high), np.negative(values), side="left")


@functools.cache
def _steps(dtype: np.dtype, low: float, high: float) -> np.ndarray:
    """The least value of ``dtype`` at which :func:`colour_index` gives each row 1..255, negated
    (so ascending from row 255's to row 1's). Every operation of ``colour_index`` is monotonic, so
    its row is a step function of the value; each step is found by bisecting the value's bits in
    their order as numbers, on ``colour_index`` itself, so that the steps are its own to the last
    bit."""
    dtype = np.dtype(dtype)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    top = unsigned.type(1 << (8 * dtype.itemsize - 1))

    def order(x: np.ndarray) -> np.ndarray:  # a float's bits as an unsigned number in the floats' order
        bits = x.view(unsigned)
        return np.where(bits & top, ~bits, bits | top)

    def value(key: np.ndarray) -> np.ndarray:
        return np.where(key & top, key & ~top, ~key).astype(unsigned).view(dtype)

    rows = np.arange(1, 256)
    lo = np.full(rows.shape, order(np.array([low], dtype))[0])
    hi = np.full(rows.shape, order(np.array([high], dtype))[0])  # row 255 there; row 0 at ``low``
    while (lo < hi).any():
        mid = lo + (hi - lo) // 2
        reached = colour_index(value(mid), low, high) >= rows
        hi, lo = np.where(reached, mid, hi), np.where(reached, lo, mid + 1)
    return np.negative(value(lo))[::-1].copy()


def to_image(pixels: np.ndarray) -> QImage:
    """A uint8 grey (rows, columns) or RGB (rows, columns, 3) array as an image that owns its
    pixels."""
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    fmt = QImage.Format.Format_RGB888 if pixels.ndim == 3 else QImage.Format.Format_Grayscale8
    return QImage(pixels.data, pixels.shape[1], pixels.shape[0], pixels.strides[0], fmt).copy()


#: Rows of the window an image is drawn in at a time by :func:`draw_image`: the most that Qt
#: 6's raster engine draws on the calling thread (a scaled image clipped to 95 rows never started
#: its pool, to 96 it did, whatever the fraction of a pixel the image starts at).
IMAGE_BAND_ROWS = 95


def draw_image(painter: QPainter, target: QRectF | QRect, image: QImage) -> None:
    """``painter.drawImage(target, image)``, the same pixels, all drawn on this thread.

    Scaled over more than 95 rows, Qt's raster engine splits an image's rows across its thread
    pool and sleeps until the pool is done: 0.03 ms of this thread's time and 0.1 ms of wall clock
    on an idle machine, but a median 3.4 ms for "what the model sees" on a busy one, where each
    pool thread waits for a core and this thread for them. Drawn in bands of
    :data:`IMAGE_BAND_ROWS` rows, each clipped from the one transform (so every pixel samples the
    image exactly as before), no band reaches the pool; an image over no more rows than a band
    (a column's correlation, 69 rows in a 1400×860 window) is drawn at once, unclipped."""
    target = QRectF(target)
    top, bottom = math.floor(target.top()), math.ceil(target.bottom())
    if bottom - top <= IMAGE_BAND_ROWS:
        painter.drawImage(target, image)
        return
    left, width = math.floor(target.left()) - 1, math.ceil(target.width()) + 3
    for y in range(top, bottom, IMAGE_BAND_ROWS):
        painter.save()
        painter.setClipRect(QRect(left, y, width, min(IMAGE_BAND_ROWS, bottom - y)), Qt.ClipOperation.IntersectClip)
        painter.drawImage(target, image)
        painter.restore()


class Rows:
    """A float64 array of rows, lines (x0, y0, x1, y1) or rectangles (x, y, width, height) of
    pixel coordinates, kept for as long as a plot's layout: a paint fills its numbers in place
    (:attr:`array`) and draws it through Qt views of it made once (:meth:`draw`).

    A ``QLineF`` is four doubles and a ``QRectF`` (x, y, width, height) too, so Qt reads the rows
    in place (a list of ``QLineF`` cost more than Qt's drawing). Wrapping an array's address anew
    on every call cost 4–5 µs (the array interface's dict alone 2.7 µs), about 50 calls an update
    of four columns; a plot's rows kept here pay that once per layout."""

    def __init__(self, rows: np.ndarray, kind: type) -> None:
        self.array = np.array(rows, dtype=np.float64, order="C", copy=True).reshape(-1, 4)
        self._kind = kind
        self._address = self.array.__array_interface__["data"][0]
        self._views: dict[int, object] = {}  # by first row; each lives as long as the array, held here

    def draw(self, painter: QPainter, start: int = 0, stop: int | None = None) -> None:
        """Rows ``start`` to ``stop`` (all by default) in the painter's pen (lines) or pen and
        brush (rectangles), as the same ``QLineF`` or ``QRectF`` objects paint."""
        count = (len(self.array) if stop is None else stop) - start
        if count <= 0:
            return
        view = self._views.get(start)
        if view is None:
            view = self._views[start] = shiboken6.wrapInstance(self._address + 32 * start, self._kind)
        if self._kind is QLineF:
            painter.drawLines(view, count)
        else:
            painter.drawRects(view, count)
