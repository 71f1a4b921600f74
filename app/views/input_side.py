"""The left of the window: the four ways to give the posteriors an input (Draw, Rotate, Image,
Face) as tabs, and below them the picture of what the posteriors see, a line in words about it
and any warning about the input."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PySide6.QtWidgets import QHBoxLayout, QLabel, QTabWidget, QVBoxLayout, QWidget

from app.plots import style
from app.views.face import FacePanel
from app.views.modes import DrawPanel, ImagePanel, RotatePanel
from app.views.preview import PreviewView

DIGIT_TIP = "What the model sees: the drawing cropped, scaled to 20×20 and centred by mass in 28×28"
FACE_TIP = "What the face heads judge: the face found in the photo, aligned and cropped"
PHOTO_TIP = ("What the model sees: the photo upright, its shorter side resized to the model's side and the "
             "centre cut square, as its training images were read")


def preview_note(face: bool, shown: bool, photo: str = "", sizes: int = 1, photos: bool = False) -> str:
    """The line beside the picture of what the posteriors see (a black square when empty);
    ``photo``: what the first column of one's own images reads ("colour 32×32 images"), if shown;
    ``sizes``: how many sizes or kinds the columns read; ``photos``: the columns judge photos."""
    if photos and not shown:
        return "The photo the posteriors judge will show here, as they see it."
    if photo:
        how = "shorter side resized, centre cut square"
        if sizes > 1:
            return (f"The first column sees this photo as it saw its training images ({photo}: {how}); "
                    "each of the others reads it at its own size.")
        return f"The posteriors see this photo as they saw their training images ({photo}: {how})."
    if face:
        return "The posteriors see this aligned face." if shown else "The aligned face the posteriors judge will show here."
    return "The model sees this 28×28 image." if shown else "The 28×28 image the model judges will show here."


class InputSide(QWidget):
    """The mode tabs (``modes``, one panel each) and what the posteriors see (``preview``)."""

    def __init__(self, load_dataset: Callable, parent: QWidget | None = None) -> None:
        """``load_dataset(name)``: the Rotate tab's test sets, read from the data folder."""
        super().__init__(parent)
        self.draw_panel = DrawPanel()
        self.canvas = self.draw_panel.canvas
        self.rotate_panel = RotatePanel(load_dataset)
        self.image_panel = ImagePanel()
        self.face_panel = FacePanel()
        self.modes = QTabWidget()
        self.modes.setToolTip("")
        for panel, tip in ((self.draw_panel, "Draw a digit with the mouse or a pen"),
                           (self.rotate_panel, "Rotate a digit, a letter or your drawing"),
                           (self.image_panel, "Open or drop a picture of a digit, or a photo for the posteriors of your own images"),
                           (self.face_panel, "Open or drop a photo with a face: the posteriors judge its age group")):
            index = self.modes.addTab(panel, panel.mode_name)
            self.modes.setTabToolTip(index, tip)
        self.preview = PreviewView()
        self.preview_note = QLabel(preview_note(face=False, shown=False))
        self.preview_note.setWordWrap(True)
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet(f"color: {style.WARNING};")
        notes = QVBoxLayout()
        notes.addWidget(self.preview_note)
        notes.addWidget(self.warning, 1)
        preview_row = QHBoxLayout()
        preview_row.addWidget(self.preview)
        preview_row.addLayout(notes, 1)
        left_layout = QVBoxLayout(self)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.modes, 1)
        left_layout.addLayout(preview_row)
        self.setMinimumWidth(260)

    def show_seen(self, preview: np.ndarray | None, warning: str, face: bool, shown: bool, photo: str = "",
                  sizes: int = 1, photos: bool = False) -> None:
        """Show what the posteriors see (None: a black square) and say it in words (see
        :func:`preview_note`); ``warning``: what is odd about the input, or ""."""
        self.warning.setText(warning)
        self.preview.show_image(preview)
        self.preview_note.setText(preview_note(face=face, shown=shown, photo=photo if preview is not None else "",
                                               sizes=sizes, photos=photos))
        self.preview.setToolTip(PHOTO_TIP if photo else FACE_TIP if face else DIGIT_TIP)
