"""The main window: draw on the left, see the posterior's belief on the right."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSlider,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.controllers.inference import InferenceController
from app.plots import style
from app.settings import available_models
from app.views.canvas import DrawingCanvas
from app.views.predictive import PredictiveView
from app.views.preview import PreviewView
from app.views.training import TrainingDialog
from core.data.preprocess import EmptyDrawingError, ImageLoadError, load_image, to_mnist
from core.inference.base import Posterior
from core.io import PosteriorFileError, load_posterior
from core.predictive import Prediction


class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        style.configure()
        self.setWindowTitle("bayescope")
        self.resize(1400, 860)
        self.posterior: Posterior | None = None
        self.model_input: np.ndarray | None = None

        self.canvas = DrawingCanvas()
        self.preview = PreviewView()
        self.predictive = PredictiveView()
        self.inference = InferenceController(self)
        self.training_dialog: TrainingDialog | None = None

        self.brush = QSlider(Qt.Orientation.Horizontal, minimum=4, maximum=60, value=self.canvas.brush_size)
        self.brush.setToolTip("Brush size")
        self.brush.valueChanged.connect(self._on_brush_changed)
        undo_button = QToolButton(text="Undo")
        clear_button = QToolButton(text="Clear")
        tools = QHBoxLayout()
        tools.addWidget(QLabel("Brush"))
        tools.addWidget(self.brush, 1)
        tools.addWidget(undo_button)
        tools.addWidget(clear_button)
        preview_row = QHBoxLayout()
        preview_row.addWidget(self.preview)
        self.preview_note = QLabel("The model sees this 28×28 image.")
        self.preview_note.setWordWrap(True)
        preview_row.addWidget(self.preview_note, 1)
        left = QVBoxLayout()
        left.addLayout(tools)
        left.addWidget(self.canvas, 1)
        left.addLayout(preview_row)

        self.model_box = QComboBox()
        self.model_box.setMinimumWidth(360)
        self.model_box.activated.connect(self._on_model_box_activated)
        self.samples = QSpinBox(minimum=1, maximum=2000, value=100, singleStep=10)
        self.samples.setToolTip("Number of posterior samples S per prediction")
        self.samples.valueChanged.connect(self._on_samples_changed)
        top = QHBoxLayout()
        top.addWidget(QLabel("Posterior"))
        top.addWidget(self.model_box, 1)
        top.addWidget(QLabel("Samples"))
        top.addWidget(self.samples)
        right = QVBoxLayout()
        right.addLayout(top)
        right.addWidget(self.predictive, 1)

        central = QWidget()
        row = QHBoxLayout(central)
        row.addLayout(left, 2)
        row.addLayout(right, 5)
        self.setCentralWidget(central)

        # Stroke → prediction at most every 33 ms (about 30 Hz); the controller drops stale work.
        self._throttle = QTimer(self, singleShot=True, interval=33)
        self._throttle.timeout.connect(self._on_throttle_timeout)
        self.canvas.drawing_changed.connect(self._on_canvas_drawing_changed)
        self.canvas.stroke_finished.connect(self._on_canvas_drawing_changed)
        undo_button.clicked.connect(self.canvas.undo)
        clear_button.clicked.connect(self.canvas.clear)
        self.inference.prediction_computed.connect(self._on_inference_prediction_computed)
        self.inference.prediction_failed.connect(self._on_inference_prediction_failed)

        self._build_menus()
        self.statusBar().showMessage("Draw a digit with the mouse or a pen.")
        self.refresh_models()

    # ------------------------------------------------------------------ menus
    def _action(self, menu, text: str, slot, shortcut=None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "Open posterior…", self.open_posterior_dialog, QKeySequence.StandardKey.Open)
        self._action(file_menu, "Load image…", self.open_image_dialog, "Ctrl+I")
        self._action(file_menu, "Export view as PNG…", self.export_dialog, "Ctrl+E")
        file_menu.addSeparator()
        self._action(file_menu, "Quit", self.close, QKeySequence.StandardKey.Quit)
        edit_menu = self.menuBar().addMenu("&Edit")
        self._action(edit_menu, "Undo stroke", self.canvas.undo, QKeySequence.StandardKey.Undo)
        self._action(edit_menu, "Clear drawing", self.canvas.clear, "Delete")
        self._action(edit_menu, "Bigger brush", lambda: self.brush.setValue(self.brush.value() + 4), "]")
        self._action(edit_menu, "Smaller brush", lambda: self.brush.setValue(self.brush.value() - 4), "[")
        run_menu = self.menuBar().addMenu("&Posterior")
        self._action(run_menu, "Train a posterior…", self.show_training_dialog, "Ctrl+T")

    # ----------------------------------------------------------------- models
    def refresh_models(self, select: Path | None = None) -> None:
        current = select or (Path(self.model_box.currentData()) if self.model_box.currentData() else None)
        self.model_box.clear()
        for path in available_models():
            self.model_box.addItem(path.stem.replace("_", " "), str(path))
        if self.model_box.count() == 0:
            self.predictive.clear("No posterior yet: train one (Ctrl+T) or open a file (Ctrl+O).")
            return
        index = self.model_box.findData(str(current)) if current else -1
        if index < 0 and current is not None and current.is_file():
            self.model_box.addItem(current.stem, str(current))
            index = self.model_box.count() - 1
        self.model_box.setCurrentIndex(max(index, 0))
        self.load_posterior(Path(self.model_box.currentData()))

    def load_posterior(self, path: Path) -> bool:
        try:
            posterior = load_posterior(path)
        except PosteriorFileError as exc:
            QMessageBox.warning(self, "Cannot use this posterior", str(exc))
            return False
        self.posterior = posterior
        self.inference.set_posterior(posterior)
        # Each posterior comes with its own natural S (all stored draws, or T dropout passes).
        self.samples.blockSignals(True)
        self.samples.setValue(min(posterior.default_num_samples, self.samples.maximum()))
        self.samples.blockSignals(False)
        self.inference.num_samples = self.samples.value()
        self.statusBar().showMessage(f"Posterior: {posterior.describe()} ({path})")
        self._predict_now()
        return True

    def _on_model_box_activated(self, index: int) -> None:
        self.load_posterior(Path(self.model_box.itemData(index)))

    def _on_samples_changed(self, value: int) -> None:
        self.inference.num_samples = value
        self._predict_now()

    def open_posterior_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open posterior", "", "bayescope posterior (*.pt)")
        if path and self.load_posterior(Path(path)):
            self.refresh_models(select=Path(path))

    def show_training_dialog(self) -> None:
        if self.training_dialog is None:
            self.training_dialog = TrainingDialog(self)
            self.training_dialog.posterior_saved.connect(self._on_training_posterior_saved)
        self.training_dialog.show()
        self.training_dialog.raise_()

    def _on_training_posterior_saved(self, path: Path) -> None:
        self.refresh_models(select=Path(path))

    # ------------------------------------------------------------- drawing
    def _on_brush_changed(self, value: int) -> None:
        self.canvas.brush_size = value

    def _on_canvas_drawing_changed(self) -> None:
        if not self._throttle.isActive():
            self._throttle.start()

    def _on_throttle_timeout(self) -> None:
        self._predict_now()

    def _predict_now(self) -> None:
        try:
            self.model_input = to_mnist(self.canvas.to_array())
        except EmptyDrawingError:
            self.model_input = None
            self.preview.show_image(None)
            self.predictive.clear()
            return
        self.preview.show_image(self.model_input)
        self.inference.request(self.model_input)

    def _on_inference_prediction_computed(self, prediction: Prediction) -> None:
        if self.model_input is None:  # the drawing was cleared meanwhile
            return
        self.predictive.show_prediction(prediction)

    def _on_inference_prediction_failed(self, message: str) -> None:
        QMessageBox.critical(self, "Prediction failed", message)

    def open_image_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load an image of a digit", "", "Images (*.png *.jpg *.jpeg *.bmp *.gif *.tif *.tiff)")
        if path:
            self.load_image_file(Path(path))

    def load_image_file(self, path: Path) -> None:
        try:
            self.canvas.set_array(load_image(path))
        except ImageLoadError as exc:
            QMessageBox.warning(self, "Cannot load image", str(exc))

    def export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export view", "bayescope.png", "PNG image (*.png)")
        if path and not self.grab().save(path):
            QMessageBox.warning(self, "Export failed", f"Could not write {path}")

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.training_dialog is not None and self.training_dialog.running:
            self.training_dialog.close()
            if self.training_dialog.running and not self.training_dialog.isHidden():
                event.ignore()
                return
        self.inference.shutdown()
        super().closeEvent(event)
