"""The Face mode: open or drop a photo, find the faces, pick one, and judge its age group.

Finding and describing faces takes a second or so, so both run in workers; the panel shows
the photo with a box around every face found (the chosen one highlighted) and lets the person
draw a box by hand when no face is found. The aligned crop the posteriors see is not shown
here but by :meth:`FacePanel.preview`, in the window's one "what the model sees" place below
the tabs, as every mode's model input is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.plots.style import BAR_TOP
from app.views.modes import ModePanel
from app.workers import PythonThreadCall

#: Where the crop is: the window shows it below the tabs, as every mode's model input.
SEEN = " The columns judge the aligned crop shown below, described by 128 numbers."
#: Said beside the result when the box was drawn by hand: nothing checked that it holds a face.
HAND_BOX_NOTE = ("You drew this box: no face was found in it. The age groups assume the box holds a face; "
                 "the heads cannot tell a face from anything else, so they give an age group whatever it holds.")


def _find_faces(image: np.ndarray) -> list:
    from core.engine.faces import detect_faces

    return detect_faces(image)


def _describe(image: np.ndarray, box) -> tuple[np.ndarray, np.ndarray, object]:
    from core.engine.faces import align_and_describe, descriptor_info

    chip, descriptor = align_and_describe(image, box)
    return chip, descriptor, descriptor_info()


class FacePanel(ModePanel):
    """Signals
    -------
    open_requested
        The person asked to pick a photo.
    failed(str)
        A photo could not be read or described (a sentence).
    """

    mode_name = "Face"
    open_requested = Signal()
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._photo: np.ndarray | None = None
        self._name = ""
        self._boxes: list = []
        self._descriptor: np.ndarray | None = None
        self._chip: np.ndarray | None = None
        self._hand_drawn = False  # the judged box was drawn by hand, not found by the detector
        self.descriptor_info = None
        self._worker = None
        self.open = QPushButton("Open a photo…")
        self.open.setToolTip("A photo with a face: JPEG, PNG or WebP, any size (Ctrl+I in this tab). "
                             "You can also drop one on the window.")
        self.open.clicked.connect(self.open_requested)
        self.view = pg.GraphicsLayoutWidget()
        self.view.setToolTip("The photo, with a box around every face found. Click a box to judge that face.")
        self.box = self.view.addViewBox(lockAspect=True, invertY=True, enableMouse=False)
        self.box.setMenuEnabled(False)
        self.photo_item = pg.ImageItem()
        self.box.addItem(self.photo_item)
        self.rects: list[pg.QtWidgets.QGraphicsRectItem] = []
        self.hand_box: pg.RectROI | None = None
        self.faces = QComboBox()
        self.faces.setToolTip("Which face to judge when the photo has several (the largest first)")
        self.faces.currentIndexChanged.connect(self._on_faces_current_changed)
        self.draw_box = QPushButton("Draw a box by hand")
        self.draw_box.setToolTip("Place a box over the face yourself (when none was found, or the wrong one)")
        self.draw_box.clicked.connect(self._on_draw_box_clicked)
        self.use_box = QPushButton("Use this box")
        self.use_box.setVisible(False)
        self.use_box.clicked.connect(self._on_use_box_clicked)
        self.message = QLabel("No photo yet. Open one, or drop it on the window.")
        self.message.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.draw_box)
        buttons.addWidget(self.use_box)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.open)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.faces)  # a row of its own: the left column is narrow
        layout.addLayout(buttons)
        layout.addWidget(self.message)
        self.view.scene().sigMouseClicked.connect(self._on_scene_clicked)
        self._set_faces([])

    @property
    def busy(self) -> bool:
        return self._worker is not None

    # ------------------------------------------------------------------ photo
    def load(self, path: Path) -> None:
        """Read a photo (raises ``ImageLoadError`` with a sentence) and look for faces."""
        from core.engine.faces import load_photo

        self.set_photo(load_photo(path), Path(path).name)

    def set_photo(self, image: np.ndarray, name: str) -> None:
        self._photo, self._name = image, name
        self._descriptor = self._chip = None
        self._hand_drawn = False
        self.photo_item.setImage(np.ascontiguousarray(image.transpose(1, 0, 2)))
        self.box.setRange(QRectF(0, 0, image.shape[1], image.shape[0]), padding=0.02)
        self._set_faces([])
        self._remove_hand_box()
        self.message.setText("Looking for faces…")
        self.input_changed.emit()
        self._run(_find_faces, self._on_faces_found, image)

    def _run(self, func, on_done, *args) -> None:
        worker = PythonThreadCall(func, *args)
        worker.returned.connect(on_done)
        worker.errored.connect(lambda exc: self._on_worker_failed(exc))
        worker.finished.connect(self._on_worker_finished)
        self._worker = worker
        self.open.setEnabled(False)
        worker.start()

    def _on_worker_finished(self) -> None:
        self._worker = None
        self.open.setEnabled(True)

    def _on_worker_failed(self, exc: Exception) -> None:
        self.message.setText(str(exc))
        self.failed.emit(str(exc))

    def _on_faces_found(self, boxes: list) -> None:
        self._set_faces(boxes)
        if not boxes:
            self.message.setText("No face was found in this photo. Draw a box around the face by hand, "
                                 "or open a photo where the face is larger and seen from the front.")
            return
        n = len(boxes)
        self.message.setText("One face found." if n == 1 else f"{n} faces found; the largest is judged. "
                             "Click another box or pick it in the list.")
        self._describe(boxes[0])

    def _set_faces(self, boxes: list) -> None:
        self._boxes = list(boxes)
        for rect in self.rects:
            self.box.removeItem(rect)
        self.rects = []
        for box in self._boxes:
            rect = pg.QtWidgets.QGraphicsRectItem(box.left, box.top, box.width, box.height)
            rect.setPen(pg.mkPen((255, 255, 255), width=2, cosmetic=True))
            self.box.addItem(rect)
            self.rects.append(rect)
        self.faces.blockSignals(True)
        self.faces.clear()
        for i, box in enumerate(self._boxes):
            self.faces.addItem(f"Face {i + 1}" + (" (largest)" if i == 0 else "") + f", {box.size} px")
        self.faces.setEnabled(len(self._boxes) > 1)
        self.faces.blockSignals(False)
        self._highlight(0)

    def _highlight(self, index: int) -> None:
        for i, rect in enumerate(self.rects):
            colour = BAR_TOP if i == index else (255, 255, 255)
            rect.setPen(pg.mkPen(colour, width=3 if i == index else 2, cosmetic=True))

    def _describe(self, box) -> None:
        self.message.setText(self.message.text().split(" Describing")[0] + " Describing the face…")
        self._run(_describe, self._on_face_described, self._photo, box)

    def _on_face_described(self, result: tuple) -> None:
        self._chip, self._descriptor, self.descriptor_info = result
        text = self.message.text().replace(" Describing the face…", "")
        if SEEN not in text:
            text += SEEN
        self.message.setText(text)
        self.input_changed.emit()

    # ---------------------------------------------------------- choosing boxes
    def _on_faces_current_changed(self, index: int) -> None:
        if 0 <= index < len(self._boxes):
            self._hand_drawn = False
            self._highlight(index)
            self._describe(self._boxes[index])

    def _on_scene_clicked(self, event) -> None:
        if self._photo is None or self.busy:
            return
        point = self.box.mapSceneToView(event.scenePos())
        for i, box in enumerate(self._boxes):
            if box.left <= point.x() < box.right and box.top <= point.y() < box.bottom:
                self.faces.setCurrentIndex(i)
                return

    def _on_draw_box_clicked(self) -> None:
        if self._photo is None:
            return
        self._remove_hand_box()
        h, w = self._photo.shape[:2]
        side = max(40, min(h, w) // 2)
        self.hand_box = pg.RectROI([(w - side) / 2, (h - side) / 2], [side, side], pen=pg.mkPen(BAR_TOP, width=2))
        self.box.addItem(self.hand_box)
        self.use_box.setVisible(True)
        self.message.setText("Move and resize the box over the face (drag its corner), then press “Use this box”.")

    def _on_use_box_clicked(self) -> None:
        from core.engine.faces import FaceBox

        if self.hand_box is None or self._photo is None:
            return
        (x, y), (bw, bh) = self.hand_box.pos(), self.hand_box.size()
        h, w = self._photo.shape[:2]
        left, top = max(0, int(x)), max(0, int(y))
        right, bottom = min(w, int(x + bw)), min(h, int(y + bh))
        try:
            box = FaceBox(left, top, right, bottom)
        except ValueError:
            self.message.setText("The box lies outside the photo: move it over the face.")
            return
        self._remove_hand_box()
        self._set_faces([box])
        self.message.setText("Your box is used.")
        self._hand_drawn = True
        self._describe(box)

    def _remove_hand_box(self) -> None:
        if self.hand_box is not None:
            self.box.removeItem(self.hand_box)
            self.hand_box = None
        self.use_box.setVisible(False)

    # ------------------------------------------------------------------ input
    def current_input(self) -> tuple[np.ndarray | None, str]:
        if self._descriptor is None:
            return None, ""
        return self._descriptor, f"the face in {self._name}"

    def note(self) -> str:
        """Beside the result: a box drawn by hand may hold no face, and the heads cannot tell."""
        return HAND_BOX_NOTE if self._hand_drawn and self._descriptor is not None else ""

    def preview(self) -> np.ndarray | None:
        """The aligned face crop the descriptor was computed from (RGB uint8), or None.

        The window shows it as "what the model sees"; the panel itself does not, so the crop
        appears once.
        """
        return self._chip
