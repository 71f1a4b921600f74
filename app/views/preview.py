"""The 28×28 image the model actually sees."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QWidget


class PreviewView(pg.GraphicsLayoutWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setToolTip("What the model sees: the drawing cropped, scaled to 20×20 and centred by mass in 28×28")
        self.view = self.addViewBox(lockAspect=True, invertY=True, enableMouse=False)
        self.image = pg.ImageItem(np.zeros((28, 28)), levels=(0, 1))
        self.view.addItem(self.image)
        self.view.setRange(xRange=(0, 28), yRange=(0, 28), padding=0)
        self.setFixedSize(140, 140)

    def show_image(self, image: np.ndarray | None) -> None:
        """A grey image in [0, 1] (28×28 digits) or a uint8 RGB face crop; None clears."""
        # ImageItem's first axis is x: swap rows and columns.
        if image is None:
            self.image.setImage(np.zeros((28, 28)), levels=(0, 1))
            side = (28, 28)
        elif image.ndim == 3:
            self.image.setImage(np.ascontiguousarray(np.asarray(image).transpose(1, 0, 2)), levels=(0, 255))
            side = image.shape[:2]
        else:
            self.image.setImage(np.asarray(image).T, levels=(0, 1))
            side = image.shape
        self.view.setRange(xRange=(0, side[1]), yRange=(0, side[0]), padding=0)
