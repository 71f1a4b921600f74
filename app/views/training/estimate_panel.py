"""The estimate of a run's duration, measured here and now: a few steps of the chosen method and
model timed in a worker (:func:`core.engine.training_plan.estimate_duration`) whenever the settings
change (debounced), never while a run is going, and said in words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QLabel, QWidget

from app.workers import ComputationError, generator_worker
from core.engine.models import ArchSpec
from core.engine.training_plan import TrainingEstimate, duration_in_words, estimate_duration
from core.engine.training_words import error_in_words


@dataclass(frozen=True)
class EstimatePlan:
    """What to measure: the run as the dialog would start it, and what its images are in words."""

    method: str
    config: Any
    arch: ArchSpec
    num_train: int
    #: ``"your"`` for one's own images, ``"assumed"`` for MNIST not downloaded yet, ``""`` for MNIST found.
    images: str = ""


class EstimatePanel(QObject):
    """Binds the estimate label to the settings: :meth:`request` measures again shortly (the plan
    comes from ``plan()``: an :class:`EstimatePlan`, or a sentence saying why nothing is
    measured); :attr:`last_estimate` is the latest measurement, None while none is valid."""

    DELAY_MS = 600

    def __init__(self, dialog: QWidget, plan: Callable[[], EstimatePlan | str],
                 blocked: Callable[[], bool]) -> None:
        super().__init__(dialog)
        self._dialog, self._plan, self._blocked = dialog, plan, blocked
        self._worker = None
        self._pending = False
        self._images = ""
        self._method = ""
        self.last_estimate: TrainingEstimate | None = None
        self.estimate = QLabel()
        self.estimate.setWordWrap(True)
        self.estimate.setMinimumHeight(2 * self.estimate.fontMetrics().lineSpacing() + 4)
        self.estimate.setToolTip(
            "Measured here and now: a few training steps of the chosen method and model are "
            "timed, and the time of one step is multiplied by the steps the run will take. Other "
            "programs running at the same time make it slower."
        )
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(self.DELAY_MS)
        self._timer.timeout.connect(self._on_timer_timeout)

    @property
    def measuring(self) -> bool:
        return self._worker is not None

    def request(self, *_: object) -> None:
        """Measure again shortly (typing several digits triggers one measurement)."""
        if self._blocked():
            return
        self.last_estimate = None
        self.estimate.setText("Estimated time: measuring…")
        if self._dialog.isVisible():  # a hidden dialog measures when it is shown
            self._timer.start()

    def request_after_current(self) -> None:
        """Measure again once the measurement under way (stopped on hiding) has ended."""
        if self._worker is None:
            self.request()
        else:
            self._pending = True

    def stop(self) -> None:
        self._timer.stop()
        self._pending = False
        if self._worker is not None:
            self._worker.quit()

    def _on_timer_timeout(self) -> None:
        if self._blocked() or not self._dialog.isVisible():
            return
        if self._worker is not None:
            # Measure again once the stale measurement has stopped.
            self._pending = True
            self._worker.quit()
            return
        plan = self._plan()
        if isinstance(plan, str):
            self.estimate.setText(plan)
            return
        self._images, self._method = plan.images, plan.method
        worker = generator_worker(estimate_duration(plan.method, plan.config, plan.arch, plan.num_train))
        worker.returned.connect(self._on_worker_returned)
        worker.errored.connect(self._on_worker_errored)
        worker.finished.connect(self._on_worker_finished)
        self._worker = worker
        worker.start()

    def _on_worker_returned(self, estimate: TrainingEstimate) -> None:
        if self._pending:
            return  # the settings changed while measuring
        self.last_estimate = estimate
        images = f"{estimate.num_train:,} images"
        if self._images == "your":
            images = f"your {images}"
        elif self._images == "assumed":
            images = f"MNIST's {images}, once downloaded"
        per_step = estimate.seconds_per_step
        step_words = f"{per_step * 1000:.0f} ms" if per_step < 1 else f"{per_step:.1f} s"
        self.estimate.setText(
            f"<b>Estimated time: {duration_in_words(estimate.seconds)} on this computer</b><br>"
            f"{estimate.steps:,} {estimate.step_name} over {images}, {step_words} each, "
            "measured just now"
        )

    def _on_worker_errored(self, exc: Exception) -> None:
        if not self._pending:
            self.estimate.setText(
                f"Estimated time: could not be measured: {error_in_words(exc, self._method, (ComputationError,))}"
            )

    def _on_worker_finished(self) -> None:
        self._worker = None
        if self._pending:
            self._pending = False
            self.request()
