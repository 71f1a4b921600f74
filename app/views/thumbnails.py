"""The images behind a clicked confusion cell or histogram bar of the Dataset tab, as a grid of
thumbnails with a caption in words; a click sends one to the per-input workspace. Face photos
are read from UTKFace's archive in the background."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QImage, QPainter, QPixmap
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.views.dataset_sets import plain_sentence
from app.workers import function_worker
from core.engine.naming import dataset_words, plural

if TYPE_CHECKING:
    from core.analysis.dataset import DatasetViews, ImageSelection

#: At most this many thumbnails are shown for one selection (most telling first).
MAX_THUMBNAILS = 240
THUMBNAIL_SIDE = 56


class ThumbnailPanel(QFrame):
    """The test images behind a clicked cell or bar, as a grid; a click sends one to the workspace.

    Signals: image_chosen(np.ndarray 28×28, str label) for digit images, face_chosen(np.ndarray
    (H, W, 3) uint8, str name) for face photos, photo_chosen(np.ndarray (H, W, 3) uint8, str
    label) for a person's colour images.
    """

    image_chosen = Signal(object, str)
    face_chosen = Signal(object, str)
    photo_chosen = Signal(object, str)
    #: The face photos behind a selection are on screen (they are read in the background).
    thumbnails_shown = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        close = QToolButton(text="✕")
        close.setAutoRaise(True)
        close.setToolTip("Hide the images")
        close.clicked.connect(self.hide)
        self.grid = QListWidget()
        self.grid.setViewMode(QListView.ViewMode.IconMode)
        self.grid.setIconSize(QSize(THUMBNAIL_SIDE, THUMBNAIL_SIDE))
        self.grid.setGridSize(QSize(THUMBNAIL_SIDE + 12, THUMBNAIL_SIDE + 22))
        self.grid.setResizeMode(QListView.ResizeMode.Adjust)
        self.grid.setMovement(QListView.Movement.Static)
        self.grid.setUniformItemSizes(True)
        self.grid.setToolTip("Click an image to judge it in the “This input” tab, with every column.")
        self.grid.itemClicked.connect(self._on_grid_item_clicked)
        top = QHBoxLayout()
        top.addWidget(self.caption, 1)
        top.addWidget(close)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.grid, 1)
        self.images: list[np.ndarray] = []
        self.labels: list[str] = []
        self.faces = False
        self.photos = False
        self._photo_worker = None
        self._selection_run = 0

    def show_message(self, caption: str) -> None:
        """Only a caption (while photos are read, or when there are none)."""
        self.grid.clear()
        self.images, self.labels = [], []
        self.caption.setText(caption)
        self.show()

    def show_images(self, caption: str, images, labels: list[str], tips: list[str], photos: bool = False) -> None:
        """``images``: digits (N, 28, 28) in [0, 1], or face photos (or, with ``photos``, a person's
        colour images), each (H, W, 3) uint8; each with the label the workspace shows and a tooltip."""
        self.grid.clear()
        self.caption.setText(caption)
        self.photos = photos
        self.faces = len(images) > 0 and np.asarray(images[0]).ndim == 3
        self.images = [np.asarray(im) if self.faces else np.asarray(im, dtype=np.float32) for im in images]
        self.labels = list(labels)
        for i, (image, tip) in enumerate(zip(self.images, tips, strict=True)):
            if self.faces:
                pixels = np.ascontiguousarray(image, dtype=np.uint8)
                h, w, _ = pixels.shape
                qimage = QImage(pixels.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()
                smooth = Qt.TransformationMode.SmoothTransformation
            else:
                pixels = np.ascontiguousarray((np.clip(image, 0, 1) * 255).astype(np.uint8))
                h, w = pixels.shape
                qimage = QImage(pixels.data, w, h, w, QImage.Format.Format_Grayscale8).copy()
                smooth = Qt.TransformationMode.FastTransformation
            pixmap = QPixmap.fromImage(qimage).scaled(THUMBNAIL_SIDE, THUMBNAIL_SIDE,
                                                      Qt.AspectRatioMode.KeepAspectRatio, smooth)
            painter = QPainter(pixmap)  # a frame, so that a white image stays visible on white
            painter.setPen(QColor(150, 150, 150))
            painter.drawRect(0, 0, pixmap.width() - 1, pixmap.height() - 1)
            painter.end()
            item = QListWidgetItem(QIcon(pixmap), tip.split(":")[0])
            item.setToolTip(tip)
            item.setData(Qt.ItemDataRole.UserRole, i)
            self.grid.addItem(item)
        self.show()

    def choose(self, row: int) -> None:
        """Send the image in ``row`` to the workspace (what a click does): a face photo to the Face
        mode, a digit or one's own photo to the Image mode."""
        signal = self.photo_chosen if self.photos else self.face_chosen if self.faces else self.image_chosen
        signal.emit(self.images[row], self.labels[row])

    def _on_grid_item_clicked(self, item: QListWidgetItem) -> None:
        self.choose(int(item.data(Qt.ItemDataRole.UserRole)))

    def show_selection(self, views: DatasetViews, name: str, selection: ImageSelection, ood: bool,
                       photos: bool = False) -> None:
        """Show the images of ``selection`` (of column ``name`` of ``views``) with a caption in
        words; ``photos``: the columns judge a person's images (a click sends one as a photo)."""
        data = views.ood if ood else views.data
        preds = views.evaluation.results[name].ood if ood else views.evaluation.results[name].data
        shown = selection.indices[:MAX_THUMBNAILS]
        names = views.evaluation.class_names
        own = data.class_names or names
        words = dataset_words(selection.set_name)
        labels, tips = [], []
        for index in shown:
            truth = own[int(data.y[index])]
            guess = int(preds.predictions[index])
            labels.append(f"{words} #{index} (true class {truth})")
            tips.append(f"#{index}: true {truth}, read as {names[guess]} "
                        f"(mean probability {preds.mean_proba[index, guess]:.2f})")
        total = len(selection.indices)
        more = f", the first {len(shown)} shown" if total > len(shown) else ""
        faces = views.faces if not ood else None
        noun = "face" if faces is not None else "image"
        where = "the Face tab" if faces is not None else "“This input”"
        caption = (f"<b>{name}</b> · {plural(total, noun)} of the {words}: {selection.description}{more}. "
                   f"Click one to judge it in {where}.")
        if total == 0:
            caption = f"<b>{name}</b>: no {noun} of the {words} here ({selection.description})."
        self._selection_run += 1
        if faces is not None:
            rows = [int(i) for i in shown]
            labels = [faces.names[r].rsplit("/", 1)[-1] for r in rows]
            if not rows:
                self.show_message(caption)
                self.thumbnails_shown.emit()
                return
            self.show_message(f"Reading {plural(len(rows), 'photo')}…")
            self._read_photos(faces, rows, caption, labels, tips)
            return
        if data.x.ndim == 4 and data.x.shape[1] == 3:  # a person's colour images, as the models see them
            colour = np.rint(np.clip(data.x[shown].numpy().transpose(0, 2, 3, 1), 0, 1) * 255).astype(np.uint8)
            self.show_images(caption, list(colour), labels, tips, photos=True)
            return
        images = data.x[shown, 0].numpy() if len(shown) else np.zeros((0, 28, 28), np.float32)
        self.show_images(caption, images, labels, tips, photos=photos)

    def _read_photos(self, faces, rows: list[int], caption: str, labels: list[str], tips: list[str]) -> None:
        """Read the photos behind a selection from UTKFace's archive or folder (a second or two),
        then show them; a newer selection supersedes a pending one."""
        selection = self._selection_run
        worker = function_worker(faces.photos, rows)

        def show(photos) -> None:
            if selection == self._selection_run:
                self.show_images(caption, photos, labels, tips)
                self.thumbnails_shown.emit()

        def fail(exc) -> None:
            if selection == self._selection_run:
                self.show_message(f"The photos could not be read: {plain_sentence(exc)}")

        worker.returned.connect(show)
        worker.errored.connect(fail)
        worker.finished.connect(lambda: setattr(self, "_photo_worker", None))
        self._photo_worker = worker
        worker.start()
