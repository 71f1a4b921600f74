"""The fast painting paths paint what the plain ones would: lines and rectangles handed to Qt as
numpy rows, and the canvas repainting only around the newest stroke segment."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QLineF, QPointF, QRect, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPen

from app.plots.input_views import draw_lines, draw_rects
from app.views.canvas import DrawingCanvas


def _pixels(image: QImage) -> np.ndarray:
    return np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())[:, : 4 * image.width()].copy()


def _paint(draw) -> np.ndarray:
    image = QImage(160, 120, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setPen(QPen(QColor(20, 40, 200), 1))
    painter.setBrush(QColor(200, 30, 30))
    draw(painter)
    painter.end()
    return _pixels(image)


def test_lines_from_numpy_rows_paint_as_qlinef_objects():
    rows = np.random.default_rng(0).uniform(-10, 170, (200, 4))  # some reach outside the image
    expected = _paint(lambda p: p.drawLines([QLineF(*row) for row in rows.tolist()]))
    assert (expected != 255).any()
    assert np.array_equal(_paint(lambda p: draw_lines(p, rows)), expected)
    # a column of a wider array (not contiguous) and float32 rows are copied, not misread
    wide = np.concatenate([rows, rows], axis=1)[:, :4]
    assert np.array_equal(_paint(lambda p: draw_lines(p, wide)), expected)
    assert np.array_equal(_paint(lambda p: draw_lines(p, rows.astype(np.float32))),
                          _paint(lambda p: p.drawLines([QLineF(*row) for row in rows.astype(np.float32).tolist()])))
    assert np.array_equal(_paint(lambda p: draw_lines(p, np.empty((0, 4)))), _paint(lambda p: None))


def test_rects_from_numpy_rows_paint_as_filled_qrectf_objects():
    rng = np.random.default_rng(1)
    rows = np.concatenate([rng.uniform(-5, 150, (40, 2)), rng.uniform(0.3, 30, (40, 2))], axis=1)  # x, y, w, h

    def filled(painter: QPainter) -> None:
        for x, y, w, h in rows.tolist():
            painter.fillRect(QRectF(x, y, w, h), QColor(200, 30, 30))

    def batched(painter: QPainter) -> None:
        painter.setPen(Qt.PenStyle.NoPen)
        draw_rects(painter, rows)

    expected = _paint(filled)
    assert (expected != 255).any()
    assert np.array_equal(_paint(batched), expected)


@pytest.mark.parametrize("size", [280, 456, 333])
def test_canvas_repaints_every_pixel_a_segment_changed(qtbot, size):
    canvas = DrawingCanvas()
    qtbot.addWidget(canvas)
    canvas.resize(size, size)
    asked: list[QRect] = []
    canvas.update = lambda *rect: asked.append(rect[0] if rect else canvas.rect())  # what would be repainted

    def shown() -> np.ndarray:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(0)
        canvas.render(image)
        return _pixels(image).reshape(size, size, 4)

    rng = np.random.default_rng(size)
    before = shown()
    for stroke, brush in enumerate((22, 5, 40, 1)):
        canvas.brush_size = brush
        # a hand's moves: a few widget pixels to a few dozen apart, some leaving the canvas
        points = rng.uniform(0, size, 2) + np.cumsum(rng.uniform(-40, 40, (6, 2)), axis=0)
        for i, (x, y) in enumerate(points.tolist()):
            asked.clear()
            if i == 0:
                canvas._begin(QPointF(x, y), pressure=0.5 + 0.25 * stroke)
            else:
                canvas._draw_to(canvas._to_image(QPointF(x, y)))
            after = shown()
            changed = np.argwhere((after != before).any(axis=2))
            before = after
            assert len(asked) == 1
            assert all(asked[0].contains(int(c), int(r)) for r, c in changed), (stroke, i)
            assert asked[0].width() * asked[0].height() < size * size / 2  # a part, not the whole
        canvas._end()
