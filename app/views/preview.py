"""The 28×28 image the model actually sees."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QWidget


class PreviewView(pg.GraphicsLayoutWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setToolTip("What the model sees: the drawing cropped, scaled to 20×20 and centred by mass in 28×28")
        view = self.addViewBox(lockAspect=True, invertY=True, enableMouse=False)
        self.image = pg.ImageItem(np.zeros((28, 28)), levels=(0, 1))
        view.addItem(self.image)
        view.setRange(xRange=(0, 28), yRange=(0, 28), padding=0)
        self.setFixedSize(140, 140)

    def show_image(self, image: np.ndarray | None) -> None:
        # ImageItem's first axis is x: transpose the rows-first array.
        self.image.setImage(np.zeros((28, 28)) if image is None else np.asarray(image).T, levels=(0, 1))
