"""A run: its seed and name, then in the background its progress bar, live trace (throttled to
about 30 Hz), status line with the time left from its own pace, Cancel, and the result in words."""

from __future__ import annotations

import html
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QSpinBox,
    QWidget,
)

from app.plots import style
from app.settings import user_models_dir
from app.views.training.fields import form_label
from app.workers import ComputationError, generator_worker
from core.engine.inference.base import ProgressRecord
from core.engine.training_plan import TrainingEstimate, duration_in_words, seconds_left
from core.engine.training_words import (
    PHASE_WORDS,
    VALUE_WORDS,
    chance_words,
    error_in_words,
    run_words,
    trace_label,
)

CLOSE_TIP = "Close this window."
BACKGROUND_TEXT = "Run in background"
BACKGROUND_TIP = ("Hide this window and go on using bayescope: the run goes on, the status bar shows "
                  "its progress (click it to come back here), and the posterior is added as a column "
                  "when it is done. “Cancel run” stops it.")


def file_stem(name: str) -> str:
    """The file name a posterior's name is saved under (letters, digits, ``-`` and ``_``)."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name.strip()) or "posterior"


class RunPanel(QObject):
    """Binds one run: its seed and name in, its progress, trace and outcome out.

    Signals
    -------
    posterior_saved(Path)
        The run finished and its posterior file was written.
    progress_reported(str, int, int)
        The run reported progress: a short line in words, the step and the steps planned (0: unknown).
    run_finished
        The run ended: saved, failed or cancelled.
    """

    posterior_saved = Signal(object)
    progress_reported = Signal(str, int, int)
    run_finished = Signal()
    TRACE_KEYS = ("elbo", "log_posterior", "loss", "acceptance", "step_size")  # first present is plotted

    def __init__(self, dialog: QWidget) -> None:
        super().__init__(dialog)
        self._dialog = dialog
        self.worker = None
        self.method = ""
        self.trace_x: list[float] = []
        self.trace_y: list[float] = []
        self._last_draw = 0.0
        self._started = 0.0
        self._first_step: tuple[float, int] | None = None
        self._accuracy: tuple[float, int] | None = None  # share right, images kept aside
        self._test_images = 0
        self._num_classes = 0
        self._estimate: TrainingEstimate | None = None
        self.seed = QSpinBox(minimum=0, maximum=2**31 - 1, value=0)
        self.seed.setToolTip("The starting number of the random generator: the same seed and settings give the "
                             "same posterior again.")
        self.name = QLineEdit("my-posterior")
        self.name.setToolTip(
            "The name of the new posterior. It heads its column and its entry in the “Add "
            "posterior” menu, so that two runs of one method can be told apart. It is saved in "
            "bayescope's own posteriors folder; you are asked before an existing one is replaced."
        )
        self.progress = QProgressBar()
        self.status = QLabel("Ready.")
        self.status.setWordWrap(True)
        self.trace = pg.PlotWidget(title="Training trace")
        self.trace.setLabel("bottom", "step")
        # no "(x0.001)" beside the value's name: the axis shows the values as they are
        self.trace.getAxis("left").enableAutoSIPrefix(False)
        self.trace.setToolTip(
            "How training is going: the ELBO for variational methods (higher is better), the log "
            "posterior for samplers (it rises, then levels off when the chains reach the posterior), "
            "the training loss otherwise (lower is better). A loss or ELBO point is the mean of the "
            "steps since the previous point."
        )
        self.curve = self.trace.plot(pen=pg.mkPen(style.BAR, width=2))
        #: Where the last run's file was written, with a link that opens its folder.
        self.saved_where = QLabel()
        self.saved_where.setWordWrap(True)
        self.saved_where.setTextFormat(Qt.TextFormat.RichText)
        self.saved_where.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.saved_where.linkActivated.connect(self._on_saved_where_link_activated)
        self.saved_where.hide()
        self.trace_about = QLabel()
        self.trace_about.setWordWrap(True)
        self.trace_about.setStyleSheet("color: #555555;")
        self.buttons = QDialogButtonBox()
        self.start_button = self.buttons.addButton("Start", QDialogButtonBox.ButtonRole.AcceptRole)
        self.cancel_button = self.buttons.addButton("Cancel run", QDialogButtonBox.ButtonRole.RejectRole)
        self.close_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.close_button.setToolTip(CLOSE_TIP)
        for button in (self.start_button, self.cancel_button, self.close_button):
            button.setAutoDefault(False)  # Enter in a field must not start an hour-long run
        self.start_button.setToolTip("Train with these settings in the background.")
        self.cancel_button.setToolTip("Stop the run; nothing is saved.")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        # The close button reads "Run in background" during a run; it keeps the width of its longer
        # text throughout, so that Cancel run does not slide under a click meant for it.
        self.close_button.setText(BACKGROUND_TEXT)
        self.close_button.setMinimumWidth(self.close_button.sizeHint().width())
        self.close_button.setText("Close")

    def add_rows(self, form: QFormLayout) -> None:
        form.addRow(form_label("Seed", self.seed.toolTip()), self.seed)
        form.addRow(form_label("Save as", self.name.toolTip()), self.name)

    @property
    def running(self) -> bool:
        return self.worker is not None

    def output_path(self) -> Path:
        return user_models_dir() / f"{file_stem(self.name.text())}.pt"

    def confirm_output(self) -> Path | None:
        """The file the run will write, once the person agreed to replace one of that name (None:
        not agreed, and the status says so)."""
        out = self.output_path()
        if out.exists() and QMessageBox.question(
                self._dialog, "Replace the posterior?",
                f"A posterior named “{out.stem}” already exists. Replace it with the one this run "
                "trains? (It is replaced only when the run finishes.)",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No) != QMessageBox.StandardButton.Yes:
            self.status.setText("Not started: choose another name under “Save as”.")
            return None
        return out

    def begin(self, gen: Generator[ProgressRecord, None, Any], method: str, test_images: int,
              num_classes: int = 0, estimate: TrainingEstimate | None = None) -> None:
        """Run ``gen`` (a training run of ``method`` telling ``num_classes`` classes apart;
        ``test_images`` kept aside; ``estimate`` the dialog's measured forecast) in the background."""
        self.clear_trace()
        self._started = time.monotonic()
        self.saved_where.hide()
        self._first_step = None
        self._accuracy = None
        self._test_images = test_images
        self._num_classes = num_classes
        self._estimate = estimate
        worker = generator_worker(gen)
        worker.yielded.connect(self._on_worker_yielded)
        worker.returned.connect(self._on_worker_returned)
        worker.errored.connect(self._on_worker_errored)
        worker.aborted.connect(self._on_worker_aborted)
        worker.finished.connect(self._on_worker_finished)
        self.worker, self.method = worker, method
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.close_button.setText(BACKGROUND_TEXT)
        self.close_button.setToolTip(BACKGROUND_TIP)
        self.status.setText("Starting…")
        worker.start()
        self.progress_reported.emit(self.run_words(0, 0), 0, 0)

    def clear_trace(self) -> None:
        """Forget the last run's trace: its points, its value's name and its axes' ranges (a view
        zoomed by hand follows the new run again)."""
        self.trace_x.clear()
        self.trace_y.clear()
        self.curve.setData([], [])
        self.trace.setLabel("left", "")
        item = self.trace.getPlotItem()
        item.setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
        item.enableAutoRange()

    def run_words(self, step: int, total: int) -> str:
        """The running run in a few words, for the status bar: ``"Training SGLD… 40 %"``."""
        return run_words(self.method, step, total)

    def cancel(self) -> None:
        if self.worker is not None:
            self.status.setText("Cancelling…")
            self.worker.quit()

    def stop_to_quit(self) -> bool:
        """Asked when the app quits during a run: True, and the run is cancelled, when the
        person agrees to lose it."""
        if not self.running:
            return True
        answer = QMessageBox.question(
            self._dialog.parentWidget() or self._dialog, "Training is running",
            f"{self.run_words(self.progress.value(), self.progress.maximum())}: quitting stops the "
            "run and nothing of it is saved. Quit anyway?")
        if answer != QMessageBox.StandardButton.Yes:
            return False
        self.cancel()
        return True

    def _time_left(self, record: ProgressRecord) -> str:
        """Remaining time: the dialog's estimate at first, blended with this run's own pace as it
        is measured (:func:`~core.engine.training_plan.seconds_left`), so that the two agree."""
        if not record.total or record.phase in ("loading data", "saving"):
            return ""
        estimate = self._estimate
        # the estimate measured these steps only when it planned as many as the run reports
        per_step = estimate.seconds_per_step if estimate is not None and estimate.steps == record.total else None
        now = time.monotonic()
        if self._first_step is None or record.step < self._first_step[1]:
            self._first_step = (now, record.step)  # a new phase counts its steps afresh
        t0, s0 = self._first_step
        measured = now - t0 if now - t0 >= 1.0 else 0.0  # a first second's pace is mostly start-up
        left = seconds_left(record.total - record.step, per_step, measured, record.step - s0)
        return "" if left is None else f" · {duration_in_words(left)} left"

    def _on_worker_yielded(self, record: ProgressRecord) -> None:
        if record.total:
            self.progress.setRange(0, record.total)
            self.progress.setValue(record.step)
        else:
            self.progress.setRange(0, 0)  # busy indicator
        key = next((k for k in self.TRACE_KEYS if k in record.values), None)
        if key is not None:
            self.trace_x.append(record.step)
            self.trace_y.append(record.values[key])
            self.trace.setLabel("left", trace_label(key))
        now = time.monotonic()
        if now - self._last_draw > 1 / 30:  # throttle redraws to ~30 Hz
            self._last_draw = now
            self.curve.setData(self.trace_x, self.trace_y)
        if record.phase == "eval" and record.step == record.total and "accuracy" in record.values:
            self._accuracy = (record.values["accuracy"], self._test_images)
        phase = PHASE_WORDS.get(record.phase, record.phase[:1].upper() + record.phase[1:])
        head = f"{phase}…" if not record.total else f"{phase}: step {record.step:,} of {record.total:,}"
        values = "  ".join(f"{VALUE_WORDS.get(k, k.replace('_', ' '))} {v:.4g}" for k, v in record.values.items())
        self.status.setText(head + self._time_left(record) + (f"\n{values}" if values else ""))
        self.progress_reported.emit(self.run_words(record.step, record.total), record.step, record.total)

    def _on_worker_returned(self, path: Path) -> None:
        self.curve.setData(self.trace_x, self.trace_y)
        took = duration_in_words(time.monotonic() - self._started).removeprefix("about ")
        checked = ""
        if self._accuracy is not None:
            share, images = self._accuracy
            checked = f" It names the right class of {round(share * images):,} of the {images:,} images kept aside."
            hint = chance_words(share, self._num_classes, images)
            checked += f" {hint}" if hint else ""
        self.status.setText(f"Saved as “{Path(path).stem}” after {took}; it is now a column and in the “Add "
                            f"posterior” menu.{checked}")
        path = Path(path)
        self.saved_where.setText(
            f"The file is <b>{html.escape(path.name)}</b> in {html.escape(str(path.parent))} · "
            f'<a href="{QUrl.fromLocalFile(str(path.parent)).toString()}">Open the folder</a>')
        self.saved_where.setToolTip(str(path))
        self.saved_where.show()
        self.posterior_saved.emit(path)

    def _on_saved_where_link_activated(self, link: str) -> None:
        QDesktopServices.openUrl(QUrl(link))

    def _on_worker_errored(self, exc: Exception) -> None:
        self.status.setText("Training failed; nothing was saved.")
        QMessageBox.critical(self._dialog, "Training failed", error_in_words(exc, self.method, (ComputationError,)))

    def _on_worker_aborted(self) -> None:
        self.status.setText("Cancelled; nothing was saved.")

    def _on_worker_finished(self) -> None:
        self.worker = None
        self.cancel_button.setEnabled(False)
        self.close_button.setText("Close")
        self.close_button.setToolTip(CLOSE_TIP)
        self.progress.setRange(0, 1)
        self.run_finished.emit()
