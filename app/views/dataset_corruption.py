"""The Dataset tab's corruption part: the chosen images corrupted (noise, blur, contrast, a
patch, a shift) at one severity or at every level up to it, every column judged at each, and
accuracy and OOD AUROC drawn against severity, one line per column.

The numbers are :func:`core.analysis.corruption.run_corruption_evaluation`'s, the very loop the
command line's ``evaluate --corruption`` runs; the view only starts it in a worker (progress in
images with their rate and the time left, cancel between batches) and draws what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.plots.corruption_plot import SeverityPlot, legend_html
from app.views.dataset_sets import plain_sentence
from app.workers import generator_worker
from core.engine.data.corruptions import CORRUPTIONS, MAX_SEVERITY

if TYPE_CHECKING:
    from core.analysis.corruption import CorruptionEvaluation

IDLE_WORDS = ("How does each column cope when the images get worse? Choose a corruption and how strong it is, "
              "then press “Evaluate corrupted”: the images chosen above are corrupted, each column judges them, "
              "and the plots show how often it is still right, and how well it still tells the unfamiliar "
              "images apart, as the corruption grows.")

ACCURACY_TIP = ("How often each column's most probable class is the true one, on the corrupted test images. "
                "Severity 0 is the clean images. A line that falls slowly belongs to a model that copes "
                "with the corruption; hover over a point for its number.")
AUROC_TIP = ("How well each column still tells the unfamiliar images (corrupted the same way) from the test "
             "images by its uncertainty: 1 always, 0.5 (dotted) no better than a coin toss. "
             "The score is the one chosen beside “Histograms of” above; hover over a point for its number.")


class CorruptionPanel(QWidget):
    """Controls, progress and the two plots of the Dataset tab's corruption evaluation.

    ``start`` is given a function that makes the evaluation's generator from the corruption's
    name and the severities (the tab knows the columns and the sets); ``result`` is the latest
    :class:`core.analysis.corruption.CorruptionEvaluation` shown (None before one).

    Signals
    -------
    run_ended
        An evaluation ended (finished, cancelled or failed).
    results_shown
        A new result was drawn.
    """

    run_ended = Signal()
    results_shown = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: CorruptionEvaluation | None = None
        self.score = "total"
        self._worker = None
        self._run = 0
        self.corruption = QComboBox()
        for name, corruption in CORRUPTIONS.items():
            self.corruption.addItem(corruption.label, name)
            self.corruption.setItemData(self.corruption.count() - 1, f"Severity: {corruption.scale}.",
                                        Qt.ItemDataRole.ToolTipRole)
        self.corruption.setToolTip("What is done to every image, the test images and the unfamiliar ones alike")
        self.corruption.currentIndexChanged.connect(self._on_corruption_current_index_changed)
        self.severity = QDoubleSpinBox()
        self.severity.setRange(0.0, MAX_SEVERITY)
        self.severity.setSingleStep(0.5)
        self.severity.setDecimals(1)
        self.severity.setValue(3.0)
        self.sweep = QCheckBox("every level from clean up to it")
        self.sweep.setChecked(True)
        self.sweep.setToolTip("Evaluate at severity 0 (the clean images), 1, 2, … up to the severity chosen, one "
                              "point each; unticked, only at the severity chosen")
        self.evaluate_button = QPushButton("Evaluate corrupted")
        self.evaluate_button.setToolTip("Judge the corrupted images with every column (in the background); "
                                        "each severity takes as long as one evaluation of the clean images")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the corrupted evaluation (nothing half-done is kept)")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m images")
        self.progress.setToolTip("Images judged so far, over every column and severity")
        self.progress.setVisible(False)
        self.status = QLabel(IDLE_WORDS)
        self.status.setWordWrap(True)
        self.legend = QLabel()  # the two plots' lines, named once
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.hide()
        self.accuracy_plot = SeverityPlot("Accuracy against severity", ACCURACY_TIP, percent=True)
        self.auroc_plot = SeverityPlot("Telling unfamiliar images apart (AUROC)", AUROC_TIP, percent=False,
                                       chance=0.5)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Corrupt with"))
        controls.addWidget(self.corruption)
        label = QLabel("severity")
        controls.addWidget(label)
        controls.addWidget(self.severity)
        controls.addWidget(self.sweep)
        controls.addWidget(self.evaluate_button)
        controls.addWidget(self.cancel_button)
        controls.addWidget(self.progress, 1)
        controls.addStretch(0)
        plots = QHBoxLayout()
        plots.addWidget(self.accuracy_plot, 1)
        plots.addWidget(self.auroc_plot, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.addLayout(controls)
        layout.addWidget(self.status)
        layout.addWidget(self.legend)
        layout.addLayout(plots, 1)
        self._on_corruption_current_index_changed(0)

    # ----------------------------------------------------------------- choices
    def set_choice(self, name: str, severity: float, sweep: bool = True) -> None:
        """Choose the corruption (its command-line name), the severity and whether to sweep up to it."""
        index = self.corruption.findData(name)
        if index < 0:
            raise ValueError(f"no corruption called {name!r}")
        self.corruption.setCurrentIndex(index)
        self.severity.setValue(severity)
        self.sweep.setChecked(sweep)

    def severities(self) -> tuple[float, ...]:
        """The severities chosen now (:func:`core.analysis.corruption.severity_steps`)."""
        from core.analysis.corruption import severity_steps

        return severity_steps(self.severity.value(), self.sweep.isChecked())

    def _on_corruption_current_index_changed(self, _index: int) -> None:
        corruption = CORRUPTIONS[self.corruption.currentData()]
        self.severity.setToolTip(f"How strong the corruption is, 0 (none) to {MAX_SEVERITY:g}: {corruption.scale}.")

    # --------------------------------------------------------------- running
    @property
    def running(self) -> bool:
        return self._worker is not None

    def start(self, make: Callable[[str, tuple[float, ...]], Generator[Any, None, Any]]) -> bool:
        """Run ``make(corruption, severities)`` in a worker (False when one runs already)."""
        if self.running:
            return False
        name, severities = self.corruption.currentData(), self.severities()
        try:
            gen = make(name, severities)
        except ValueError as exc:  # no column, no test set: one sentence, nothing started
            self.status.setText(plain_sentence(exc))
            return False
        self._run += 1
        run = self._run
        worker = generator_worker(gen)
        worker.yielded.connect(lambda record: self._on_worker_yielded(run, record))
        worker.returned.connect(lambda result: self._on_worker_returned(run, result))
        worker.errored.connect(lambda exc: self._on_worker_errored(run, exc))
        worker.finished.connect(lambda: self._on_worker_finished(run))
        self._worker = worker
        self._set_running(True)
        corruption = CORRUPTIONS[name]
        self.status.setText(f"Reading the images to corrupt them with {corruption.in_sentence.lower()} at "
                            f"{'severity' if len(severities) == 1 else 'severities'} "
                            f"({', '.join(f'{s:g}' for s in severities)})…")
        worker.start()
        return True

    def cancel(self) -> None:
        """Stop the evaluation: free at once; the worker ends after its current batch."""
        if self._worker is None:
            return
        self._worker.quit()
        self._worker = None
        self._run += 1  # late signals of the stopped run are ignored
        self._set_running(False)
        self.status.setText("Corrupted evaluation cancelled; nothing of it was kept.")
        self.run_ended.emit()

    def _set_running(self, running: bool) -> None:
        for widget in (self.evaluate_button, self.corruption, self.severity, self.sweep):
            widget.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.progress.setVisible(running)
        if running:
            self.progress.setRange(0, 0)

    def _on_worker_yielded(self, run: int, record) -> None:
        from core.analysis.evaluation import progress_in_words

        if run != self._run or record.phase == "loading" or not record.total:
            return
        self.progress.setRange(0, max(record.total, 1))
        self.progress.setValue(record.step)
        severity = record.values.get("severity", 0.0)
        column = record.phase.split(" · ")[1] if " · " in record.phase else record.phase
        rate = progress_in_words(record.step, record.total, record.values)
        self.status.setText(f"Severity {severity:g}, {column}: {rate}…")

    def _on_worker_returned(self, run: int, result: CorruptionEvaluation) -> None:
        if run != self._run:
            return
        self.show_result(result)

    def _on_worker_errored(self, run: int, exc: BaseException) -> None:
        if run != self._run:
            return
        self.status.setText(f"The corrupted evaluation stopped: {plain_sentence(exc)}")

    def _on_worker_finished(self, run: int) -> None:
        if run != self._run:
            return
        self._worker = None
        self._set_running(False)
        self.run_ended.emit()

    # --------------------------------------------------------------- results
    def show_result(self, result: CorruptionEvaluation) -> None:
        """Draw accuracy and AUROC against severity, one line per column, and say what was done."""
        from core.analysis.corruption import severity_lines
        from core.engine.naming import dataset_words

        self.result = result
        corruption = CORRUPTIONS[result.corruption]
        accuracy = severity_lines(result, "accuracy")
        self.accuracy_plot.show_lines(result.severities, accuracy, "accuracy", corruption.scale)
        self.legend.setText(legend_html(list(accuracy)))
        self.legend.show()
        self._draw_auroc()
        words = (f"{corruption.label} ({corruption.scale}) on {result.images:,} "
                 f"{dataset_words(result.dataset)}")
        if result.ood_dataset:
            words += f" and {result.ood_images:,} {dataset_words(result.ood_dataset)}, corrupted alike"
        else:
            words += "; choose an unfamiliar set above to see the AUROC too"
        if len(result.severities) > 1 and accuracy:
            first, last = result.severities[0], result.severities[-1]
            drops = {name: values[0] - values[-1] for name, values in accuracy.items()
                     if values[0] is not None and values[-1] is not None}
            if drops:
                best = min(drops, key=drops.get)
                words += (f". From severity {first:g} to {last:g} the accuracy of {best} falls least "
                          f"({100 * drops[best]:.1f} points)")
        self.status.setText(words + ". Hover over a point for its number.")
        self.results_shown.emit()

    def set_score(self, score: str) -> None:
        """The uncertainty whose AUROC is drawn (a key of :data:`core.analysis.dataset.SCORE_WORDS`)."""
        self.score = score
        if self.result is not None:
            self._draw_auroc()

    def _draw_auroc(self) -> None:
        from core.analysis.corruption import severity_lines
        from core.analysis.dataset import SCORE_WORDS

        result = self.result
        lines = severity_lines(result, f"auroc_{self.score}") if result is not None and result.ood_dataset else {}
        self.auroc_plot.show_lines(result.severities if result is not None else (), lines,
                                   f"AUROC by {SCORE_WORDS.get(self.score, self.score)}",
                                   CORRUPTIONS[result.corruption].scale if result is not None else "")
        self.auroc_plot.setEnabled(bool(lines))
