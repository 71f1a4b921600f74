"""Train a posterior in the background: settings, progress bar, live trace, cancel."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.settings import default_data_dir, user_models_dir
from app.workers import generator_worker
from core.data.datasets import load_split
from core.inference import METHODS, get_method
from core.inference.base import ProgressRecord
from core.io import save_posterior
from core.models import ARCHITECTURES, ArchSpec


def training_run(method_name: str, arch: ArchSpec, config: Any, data_dir: str, download: bool, seed: int, out: Path):
    """Generator run in the worker: load data, fit, save; yields ProgressRecords."""
    yield ProgressRecord(0, 0, {}, phase="loading data")
    train = load_split("mnist", "train", root=data_dir or None, download_if_missing=download)
    posterior = yield from get_method(method_name).fit(config, arch, train, seed)
    yield ProgressRecord(1, 1, {}, phase="saving")
    return save_posterior(posterior, out)


class TrainingDialog(QDialog):
    """Signals
    -------
    posterior_saved(Path)
        A run finished and its posterior file was written.
    """

    posterior_saved = Signal(object)
    TRACE_KEYS = ("elbo", "log_posterior", "loss", "acceptance", "step_size")  # first present is plotted

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a posterior")
        self.resize(1100, 640)
        self._worker = None
        self._trace_x: list[float] = []
        self._trace_y: list[float] = []
        self._last_draw = 0.0

        self.method = QComboBox()
        self.method.addItems(sorted(METHODS))
        self.method.setCurrentText("mc_dropout")
        self.method.currentTextChanged.connect(self._on_method_changed)
        self.model = QComboBox()
        self.model.addItems(ARCHITECTURES)
        self.model.setCurrentText("mlp")
        self.drop_rate = QDoubleSpinBox(decimals=2, minimum=0.0, maximum=0.95, singleStep=0.05, value=0.5)
        self.drop_rate.setToolTip("Drop rate of the model's dropout layers (MC dropout needs > 0)")
        self.settings_form = QFormLayout()
        self.setting_edits: dict[str, QLineEdit] = {}
        self.seed = QSpinBox(minimum=0, maximum=2**31 - 1, value=0)
        self.data_dir = QLineEdit(str(default_data_dir()))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse_clicked)
        data_row = QHBoxLayout()
        data_row.addWidget(self.data_dir, 1)
        data_row.addWidget(browse)
        self.download = QCheckBox("download MNIST into this folder if it is missing")
        self.download.setChecked(True)
        self.name = QLineEdit("my-posterior")

        form = QFormLayout()
        form.addRow("Method", self.method)
        form.addRow("Model", self.model)
        form.addRow("Dropout layers", self.drop_rate)
        form.addRow("Seed", self.seed)
        form.addRow("MNIST folder", data_row)
        form.addRow("", self.download)
        form.addRow("Save as", self.name)

        self.progress = QProgressBar()
        self.status = QLabel("Ready.")
        self.status.setWordWrap(True)
        self.trace = pg.PlotWidget(title="Training trace")
        self.trace.setLabel("bottom", "step")
        self.curve = self.trace.plot(pen=pg.mkPen((91, 133, 196), width=2))

        self.buttons = QDialogButtonBox()
        self.start_button = self.buttons.addButton("Start", QDialogButtonBox.ButtonRole.AcceptRole)
        self.cancel_button = self.buttons.addButton("Cancel run", QDialogButtonBox.ButtonRole.RejectRole)
        self.close_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.cancel_button.setEnabled(False)
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.close)

        settings_box = QGroupBox("Method settings")
        settings_box.setLayout(self.settings_form)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(settings_box)
        left = QVBoxLayout()
        left.addLayout(form)
        left.addWidget(scroll, 1)
        right = QVBoxLayout()
        right.addWidget(self.trace, 1)
        right.addWidget(self.progress)
        right.addWidget(self.status)
        columns = QHBoxLayout()
        columns.addLayout(left, 2)
        columns.addLayout(right, 3)
        layout = QVBoxLayout(self)
        layout.addLayout(columns, 1)
        layout.addWidget(self.buttons)

        self._on_method_changed(self.method.currentText())

    def _on_method_changed(self, name: str) -> None:
        """Rebuild the settings form from the method's config dataclass and its defaults."""
        while self.settings_form.rowCount():
            self.settings_form.removeRow(0)
        self.setting_edits.clear()
        for key, default in get_method(name).defaults().items():
            edit = QLineEdit(str(default))
            self.setting_edits[key] = edit
            self.settings_form.addRow(key.replace("_", " "), edit)

    def set_setting(self, name: str, value: object) -> None:
        self.setting_edits[name].setText(str(value))

    @property
    def running(self) -> bool:
        return self._worker is not None

    def _on_browse_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder with MNIST's IDX files", self.data_dir.text())
        if folder:
            self.data_dir.setText(folder)

    def start(self) -> None:
        if self.running:
            return
        name = self.method.currentText()
        try:
            arch = ArchSpec(self.model.currentText(), drop_rate=self.drop_rate.value())
            config = get_method(name).parse_settings({k: e.text() for k, e in self.setting_edits.items()})
        except ValueError as exc:
            QMessageBox.warning(self, "Invalid settings", str(exc))
            return
        stem = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in self.name.text()) or "posterior"
        out = user_models_dir() / f"{stem}.pt"
        gen = training_run(name, arch, config, self.data_dir.text().strip(), self.download.isChecked(), self.seed.value(), out)
        self._trace_x.clear()
        self._trace_y.clear()
        self.curve.setData([], [])
        worker = generator_worker(gen)
        worker.yielded.connect(self._on_worker_yielded)
        worker.returned.connect(self._on_worker_returned)
        worker.errored.connect(self._on_worker_errored)
        worker.aborted.connect(self._on_worker_aborted)
        worker.finished.connect(self._on_worker_finished)
        self._worker = worker
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.status.setText("Starting…")
        worker.start()

    def cancel(self) -> None:
        if self._worker is not None:
            self.status.setText("Cancelling…")
            self._worker.quit()

    def _on_worker_yielded(self, record: ProgressRecord) -> None:
        if record.total:
            self.progress.setRange(0, record.total)
            self.progress.setValue(record.step)
        else:
            self.progress.setRange(0, 0)  # busy indicator
        key = next((k for k in self.TRACE_KEYS if k in record.values), None)
        if key is not None:
            self._trace_x.append(record.step)
            self._trace_y.append(record.values[key])
            self.trace.setLabel("left", key)
        now = time.monotonic()
        if now - self._last_draw > 1 / 30:  # throttle redraws to ~30 Hz
            self._last_draw = now
            self.curve.setData(self._trace_x, self._trace_y)
        values = "  ".join(f"{k} {v:.4g}" for k, v in record.values.items())
        self.status.setText(f"{record.phase}: step {record.step}/{record.total}  {values}")

    def _on_worker_returned(self, path: Path) -> None:
        self.curve.setData(self._trace_x, self._trace_y)
        self.status.setText(f"Saved {path}")
        self.posterior_saved.emit(path)

    def _on_worker_errored(self, exc: Exception) -> None:
        self.status.setText("Failed.")
        QMessageBox.critical(self, "Training failed", f"{exc.__class__.__name__}: {exc}")

    def _on_worker_aborted(self) -> None:
        self.status.setText("Cancelled; nothing was saved.")

    def _on_worker_finished(self) -> None:
        self._worker = None
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.progress.setRange(0, 1)

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.running:
            answer = QMessageBox.question(self, "Training is running", "Cancel the run and close?")
            if answer != QMessageBox.StandardButton.Yes:
                event.ignore()
                return
            self.cancel()
        super().closeEvent(event)
