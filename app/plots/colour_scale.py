"""A heat map's colour scale as a thin strip under its matrix, for pyqtgraph plots in narrow columns.

A ``pg.ColorBarItem`` beside a matrix in a ~225-pixel column either clipped its labels or
squeezed the matrix. This strip takes the plot's full data width in a row of its own under the
bottom axis (the plot item's layout, column of the view box), so it lines up with the matrix
and costs height, of which the Dataset tab's scrolling columns have plenty, not width.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen

from app.plots.style import FOREGROUND

#: The strip's height and the room between its parts, in pixels.
STRIP = 6.0
GAP = 1.0
POINT_SIZE = 7.0


class ColourScaleItem(pg.GraphicsWidget):
    """The colour map from its left end (0) to its right end (1), labelled at ``ticks``
    (position 0–1 along the strip, text), with ``caption`` (what the colour means) under it."""

    def __init__(self, colour_map: pg.ColorMap, ticks: Sequence[tuple[float, str]], caption: str) -> None:
        super().__init__()
        self.ticks = tuple(ticks)
        self.caption = caption
        table = np.ascontiguousarray(colour_map.getLookupTable(0.0, 1.0, 256, alpha=False), dtype=np.uint8)
        self._image = QImage(table.data, 256, 1, 3 * 256, QImage.Format.Format_RGB888).copy()
        self._font = QFont()
        self._font.setPointSizeF(POINT_SIZE)
        metrics = QFontMetricsF(self._font)
        height = STRIP + GAP + 2 * metrics.height() + 2
        self.setMinimumHeight(height)
        self.setMaximumHeight(height)
        self.drawn: list[tuple[QRectF, str]] = []  # what the last paint wrote, for tests

    def colour_at(self, position: float) -> QColor:
        """The strip's colour at ``position`` (0–1): what the matrix shows for that value."""
        return self._image.pixelColor(min(255, max(0, round(position * 255))), 0)

    def strip_rect(self) -> QRectF:
        return QRectF(0.5, 0.5, max(1.0, self.size().width() - 1.0), STRIP)

    def paint(self, painter: QPainter, *args) -> None:
        strip = self.strip_rect()
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
        painter.drawImage(strip, self._image)
        painter.setPen(QPen(QColor(FOREGROUND), 1))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(strip)
        painter.setFont(self._font)
        metrics = QFontMetricsF(self._font)
        top = strip.bottom() + GAP
        self.drawn = []
        right_end = strip.right()
        for position, text in self.ticks:
            x = strip.left() + position * strip.width()
            painter.drawLine(QPointF(x, strip.bottom()), QPointF(x, strip.bottom() + 2))
            width = metrics.horizontalAdvance(text)
            # the end labels stay inside the strip's span: they never run past the plot's edge
            left = min(max(x - width / 2, strip.left()), right_end - width)
            box = QRectF(left, top, width, metrics.height())
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)
            self.drawn.append((box, text))
        caption = metrics.elidedText(self.caption, Qt.TextElideMode.ElideRight, strip.width())
        box = QRectF(strip.left(), top + metrics.height(), strip.width(), metrics.height())
        painter.drawText(box, Qt.AlignmentFlag.AlignCenter, caption)
        self.drawn.append((box, caption))


def sqrt_ticks(values: Sequence[float], percent: bool) -> list[tuple[float, str]]:
    """Ticks of a scale that colours by the square root of the value: each value at its root,
    written as a percentage or as a probability (".25")."""
    def words(v: float) -> str:
        if percent:
            return f"{v * 100:g}%" if v else "0"
        return "1" if v == 1 else "0" if v == 0 else f"{v:g}".lstrip("0")

    return [(float(np.sqrt(v)), words(v)) for v in values]
