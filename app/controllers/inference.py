"""Runs per-input prediction off the main thread; stale requests are dropped, not queued."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, QThreadPool, Signal

from app.workers import function_worker
from core.inference.base import Posterior
from core.predictive import Prediction, predict_image


class InferenceController(QObject):
    """At most one prediction runs at a time; while it runs only the newest request waits.

    Signals
    -------
    prediction_computed(Prediction)
    prediction_failed(str)
    """

    prediction_computed = Signal(object)
    prediction_failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.posterior: Posterior | None = None
        self.num_samples = 100
        self._pending: np.ndarray | None = None
        self._worker = None

    @property
    def busy(self) -> bool:
        return self._worker is not None

    def set_posterior(self, posterior: Posterior | None) -> None:
        self.posterior = posterior

    def request(self, image: np.ndarray) -> None:
        """Ask for a prediction of a 28×28 image; replaces any request still waiting."""
        if self.posterior is None:
            return
        if self._worker is not None:
            self._pending = image
            return
        worker = function_worker(predict_image, self.posterior, image, self.num_samples, seed=None)
        worker.returned.connect(self._on_worker_returned)
        worker.errored.connect(self._on_worker_errored)
        worker.finished.connect(self._on_worker_finished)
        self._worker = worker
        worker.start()

    def _on_worker_returned(self, prediction: Prediction) -> None:
        self.prediction_computed.emit(prediction)

    def _on_worker_errored(self, exc: Exception) -> None:
        self.prediction_failed.emit(f"{exc.__class__.__name__}: {exc}")

    def _on_worker_finished(self) -> None:
        self._worker = None
        if self._pending is not None:
            image, self._pending = self._pending, None
            self.request(image)

    def shutdown(self, timeout_ms: int = 10_000) -> None:
        """Drop waiting work and let a running prediction finish before this object goes."""
        self._pending = None
        self.posterior = None
        if self._worker is not None:
            QThreadPool.globalInstance().waitForDone(timeout_ms)
