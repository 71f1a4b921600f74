"""A drawing canvas: white ink on black, like MNIST; mouse or pen; brush size, undo, clear."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QCoreApplication, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QMouseEvent, QPainter, QPaintEvent, QPen, QTabletEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.plots.drawing import draw_image


class DrawingCanvas(QWidget):
    """Signals
    -------
    drawing_changed
        The ink changed (emitted during a stroke and after undo/clear/load).
    stroke_finished
        A stroke ended.
    """

    drawing_changed = Signal()
    stroke_finished = Signal()

    SIDE = 280
    MAX_UNDO = 50

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._image = QImage(self.SIDE, self.SIDE, QImage.Format.Format_Grayscale8)
        self._image.fill(0)
        self._undo: list[QImage] = []
        self._last: QPointF | None = None
        self._revision = 0  # counts the changes of the ink (see revision)
        # the ink's largest grey level per row and per column, and the revision they were read at
        self._maxima: tuple[int, np.ndarray, np.ndarray] | None = None
        self.brush_size = 22
        self.setMinimumSize(QSize(self.SIDE, self.SIDE))
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setCursor(Qt.CursorShape.CrossCursor)
        self.setToolTip("Draw a digit. Ctrl+Z undoes a stroke, Delete clears.")
        # its image covers every pixel (paintEvent): the window, the splitter, the tab widget and
        # the containers behind it are not painted again under each stroke's segment (seven paints
        # of the parents on every move)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)

    # -------------------------------------------------------------- public API
    @property
    def revision(self) -> int:
        """A number that changes whenever the ink does (a stroke's segment, undo, clear, an image
        set): a reader that kept what it made of one revision keeps it while this stays."""
        return self._revision

    def to_array(self) -> np.ndarray:
        """The drawing as float32 (SIDE, SIDE) in [0, 1], ink = 1."""
        return self._grey().astype(np.float32) / 255.0

    def ink_array(self) -> np.ndarray:
        """The drawing cut to the box around every pixel with any ink, float32 in [0, 1] as in
        :meth:`to_array`. :func:`core.engine.data.preprocess.to_mnist` reads only the box of the
        ink above its threshold, which lies inside this one, so it makes the same model input from
        it, bit for bit, without the whole 280×280 float copy and its checks (≈ 1 ms of every
        stroke event). A blank canvas gives one blank pixel (an empty drawing all the same)."""
        row_max, col_max = self._ink_maxima()
        rows, cols = np.flatnonzero(row_max), np.flatnonzero(col_max)
        if not len(rows):
            return np.zeros((1, 1), dtype=np.float32)
        # the grey levels divided in float32 as they are read: no float copy made first
        return np.divide(self._grey()[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1], 255.0, dtype=np.float32)

    def _ink_maxima(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's and each column's largest grey level: two passes over the drawing (no
        boolean copy of it), made once per revision for the ink's box (:meth:`ink_array`) and its
        extent (:meth:`ink_extent`), which every stroke event asks for both."""
        if self._maxima is None or self._maxima[0] != self._revision:
            grey = self._grey()
            self._maxima = (self._revision, grey.max(1), grey.max(0))
        return self._maxima[1], self._maxima[2]

    def _grey(self) -> np.ndarray:
        """The drawing's grey levels, uint8 (SIDE, SIDE), a view of the image (no copy)."""
        img = self._image
        buf = np.frombuffer(img.constBits(), dtype=np.uint8, count=img.sizeInBytes())
        return buf.reshape(img.height(), img.bytesPerLine())[:, : img.width()]

    def is_empty(self) -> bool:
        return not self._grey().any()

    @property
    def stroking(self) -> bool:
        """A stroke is in progress (the button or pen is down)."""
        return self._last is not None

    def can_undo(self) -> bool:
        return bool(self._undo)

    def undo(self) -> None:
        if self._undo:
            self._image = self._undo.pop()
            self._revision += 1
            self.update()
            self.drawing_changed.emit()

    def clear(self) -> None:
        if self.is_empty():
            return
        self._push_undo()
        self._image.fill(0)
        self._revision += 1
        self.update()
        self.drawing_changed.emit()

    def set_array(self, array: np.ndarray) -> None:
        """Replace the drawing with a grey image in [0, 1] (any size; scaled to fit)."""
        array = np.clip(np.asarray(array, dtype=np.float32), 0, 1)
        data = np.ascontiguousarray((array * 255).astype(np.uint8))
        h, w = data.shape
        src = QImage(data.data, w, h, w, QImage.Format.Format_Grayscale8).copy()
        self._push_undo()
        self._image.fill(0)
        scaled = src.scaled(self.SIDE, self.SIDE, Qt.AspectRatioMode.KeepAspectRatio,
                            Qt.TransformationMode.SmoothTransformation)
        painter = QPainter(self._image)
        painter.drawImage((self.SIDE - scaled.width()) // 2, (self.SIDE - scaled.height()) // 2, scaled)
        painter.end()
        self._revision += 1
        self.update()
        self.drawing_changed.emit()

    # -------------------------------------------------------------- drawing
    def _push_undo(self) -> None:
        self._undo.append(self._image.copy())
        del self._undo[: -self.MAX_UNDO]

    def _to_image(self, pos: QPointF) -> QPointF:
        return QPointF(pos.x() * self.SIDE / max(self.width(), 1), pos.y() * self.SIDE / max(self.height(), 1))

    def _draw_to(self, pos: QPointF, pressure: float = 1.0) -> None:
        painter = QPainter(self._image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pen = QPen(QColor(255, 255, 255), max(1.0, self.brush_size * pressure))
        pen.setCapStyle(Qt.PenCapStyle.RoundCap)
        pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
        painter.setPen(pen)
        if self._last is None:
            painter.drawPoint(pos)
        else:
            painter.drawLine(self._last, pos)
        painter.end()
        self._revision += 1
        self._update_around(pos if self._last is None else self._last, pos, pen.widthF())
        self._last = pos
        self.drawing_changed.emit()

    def _update_around(self, a: QPointF, b: QPointF, width: float) -> None:
        """Repaint only the widget pixels the segment a–b (image coordinates) can have touched: a
        whole repaint scales all of the image, ≈ 0.75 ms a move, on the path to the prediction."""
        reach = width / 2 + 2
        sx, sy = self.width() / self.SIDE, self.height() / self.SIDE
        box = QRectF(QPointF((min(a.x(), b.x()) - reach) * sx, (min(a.y(), b.y()) - reach) * sy),
                     QPointF((max(a.x(), b.x()) + reach) * sx, (max(a.y(), b.y()) + reach) * sy))
        self.update(box.toAlignedRect().adjusted(-1, -1, 1, 1))

    def _begin(self, pos: QPointF, pressure: float = 1.0) -> None:
        self._push_undo()
        self._last = None
        _keep_every_move(True)
        self._draw_to(self._to_image(pos), pressure)

    def _end(self) -> None:
        _keep_every_move(False)
        if self._last is not None:
            self._last = None
            self.stroke_finished.emit()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt override)
        if event.button() == Qt.MouseButton.LeftButton:
            self._begin(event.position())

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.buttons() & Qt.MouseButton.LeftButton and self._last is not None:
            self._draw_to(self._to_image(event.position()))

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self._end()

    def tabletEvent(self, event: QTabletEvent) -> None:  # noqa: N802
        kind = event.type()
        pressure = 0.4 + 0.8 * event.pressure()
        if kind == QTabletEvent.Type.TabletPress:
            self._begin(event.position(), pressure)
        elif kind == QTabletEvent.Type.TabletMove and self._last is not None:
            self._draw_to(self._to_image(event.position()), pressure)
        elif kind == QTabletEvent.Type.TabletRelease:
            self._end()
        event.accept()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        # The canvas is kept square by its container (app/views/square.py): the whole widget
        # is drawing area, so no stroke falls outside the image.
        painter = QPainter(self)
        draw_image(painter, self.rect(), self._image)  # in bands: never waits for Qt's thread pool
        painter.end()

    def ink_extent(self) -> float:
        """The larger side of the ink's bounding box as a fraction of the canvas (0 if empty)."""
        # above 0.1 of full ink: grey level 26 and up (25/255 = 0.098), read from the grey levels’
        # maxima the ink's box was read from (the float copy cost as much again on every stroke event)
        row_max, col_max = self._ink_maxima()
        rows = np.flatnonzero(row_max >= 26)  # a row with a pixel of 26 or more
        if not len(rows):
            return 0.0
        cols = np.flatnonzero(col_max >= 26)
        return max(rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1) / self.SIDE


#: Whether Qt folded queued mouse moves into the last one before a stroke began (see _keep_every_move).
_folding_before: bool | None = None


def _keep_every_move(keep: bool) -> None:
    """While a stroke is drawn, every mouse move the window system reports reaches the canvas.

    By default Qt folds the moves that queue up while the window is busy into the newest one
    (``AA_CompressHighFrequencyEvents``, on X11): a stroke drawn faster than the window judges it
    then became straight lines between the moves that got through, so the digit judged was not
    the one drawn (seen on a real window: a 7 drawn in one burst of moves came out as one
    diagonal line). Each move only draws its segment (the input is read at most once per
    tick), so keeping them all costs little; the folding is restored when the stroke ends, for
    the window's resizes and moves, which it also folds."""
    global _folding_before
    flag = Qt.ApplicationAttribute.AA_CompressHighFrequencyEvents
    if keep:
        if _folding_before is None:
            _folding_before = QCoreApplication.testAttribute(flag)
        QCoreApplication.setAttribute(flag, False)
    elif _folding_before is not None:
        QCoreApplication.setAttribute(flag, _folding_before)
        _folding_before = None
