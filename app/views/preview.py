"""The image the model actually sees: the 28×28 digit, the aligned face crop, or a photo of
one's own as a posterior of one's own images reads it (in colour).

A plain widget that paints one image, scaled up with square pixels. It is redrawn on every
stroke while the worker predicts, and a pyqtgraph scene's Python paint held the interpreter
lock meanwhile: over a bench_gui run the 16-draw prediction in the worker took median 19.0 ms
beside the pyqtgraph scene, 17.8 ms beside this widget (15.7 ms with no preview at all).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QWidget

from app.plots.input_views import draw_image, to_image


class PreviewView(QWidget):
    MARGIN = 6  # pixels of the window's ground around the image

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setToolTip("What the model sees: the drawing cropped, scaled to 20×20 and centred by mass in 28×28")
        self.setFixedSize(140 + 2 * self.MARGIN, 140 + 2 * self.MARGIN)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        #: The array shown: rows × columns, grey in [0, 1] or rows × columns × 3 RGB uint8 (blank 28×28 at first).
        self.shown: np.ndarray | None = None
        self._image = QImage()
        self.show_image(None)

    def show_image(self, image: np.ndarray | None) -> None:
        """A grey image in [0, 1] (28×28 digits, a grey photo) or a uint8 RGB image (a face crop,
        a colour photo as a model reads it); None clears."""
        if image is None:
            image = np.zeros((28, 28), dtype=np.float32)
        image = np.asarray(image)
        if (self.shown is not None and image.shape == self.shown.shape and image.dtype == self.shown.dtype
                and np.array_equal(image, self.shown)):
            return  # a stroke's end shows the input its last move showed: nothing to make or repaint
        self.shown = image
        grey = image.ndim == 2
        self._image = to_image(np.clip(image * 255.0 + 0.5, 0, 255) if grey else image[..., :3])
        self.update()

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        painter = QPainter(self)
        try:
            painter.fillRect(self.rect(), QColor(self.palette().window().color()))
            w, h = self._image.width(), self._image.height()
            room = self.width() - 2 * self.MARGIN
            if w and h:
                scale = room / max(w, h)  # square pixels (5 screen pixels each for 28×28), centred
                target = QRectF((self.width() - w * scale) / 2, (self.height() - h * scale) / 2, w * scale, h * scale)
                draw_image(painter, target, self._image)
        finally:
            painter.end()
