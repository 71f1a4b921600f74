"""Per-input prediction for every column, off the main thread; stale requests are dropped.

One request judges one input with every column's posterior and reports the columns together
when all are done. Reporting each column as soon as it was ready looked faster but was
slower: the main thread drawing column 1 while the worker computed column 2 fought over the
interpreter lock and both cores, and 4 columns took 3× their compute time (60 ms against
20 ms, measured with benchmarks/bench_gui.py). While a request runs, only the newest further
request waits; older ones are dropped, never queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject, QThreadPool, Signal

from app.workers import function_worker, torch_threads

if TYPE_CHECKING:  # the window is built before the engine (torch) loads: see app.__main__
    from core.analysis.predictive import Prediction
    from core.engine.inference.base import Posterior


@dataclass(frozen=True)
class ColumnRequest:
    key: str
    posterior: Posterior
    num_samples: int


def predict_columns(
    image: np.ndarray, columns: Sequence[ColumnRequest], level: float, threads: int | None = None
) -> list[tuple[str, Prediction]]:
    """``(key, prediction)`` per column; ``seed=None`` lets each posterior use its own
    randomness (a variational posterior's fixed bank of draws, dropout's masks). ``threads``:
    torch's intra-op threads for these predictions (``None``: its default)."""
    with torch_threads(threads):
        return _predict_columns(image, columns, level)


def _predict_columns(image: np.ndarray, columns: Sequence[ColumnRequest], level: float) -> list[tuple[str, Prediction]]:
    from core.analysis.predictive import predict_features, predict_image

    if image.ndim == 1:  # a face descriptor: each posterior must read this descriptor
        from core.engine.faces import descriptor_info
        from core.engine.faces.heads import check_descriptor

        info = descriptor_info()
        for column in columns:
            check_descriptor(column.posterior, info)
        return [(column.key, predict_features(column.posterior, image, column.num_samples, seed=None, level=level))
                for column in columns]
    return [(column.key, predict_image(column.posterior, image, column.num_samples, seed=None, level=level))
            for column in columns]


class InferenceController(QObject):
    """Signals
    -------
    prediction_computed(int, str, Prediction)
        Request number, column key and its prediction.
    request_finished(int)
        Every column of that request is done.
    prediction_failed(str)
        A prediction raised; the message is for a person.
    """

    prediction_computed = Signal(int, str, object)
    request_finished = Signal(int)
    prediction_failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pending: tuple[np.ndarray, list[ColumnRequest], float, int | None] | None = None
        self._worker = None
        self._running_id = 0
        self.last_request = 0

    @property
    def busy(self) -> bool:
        return self._worker is not None or self._pending is not None

    def request(self, image: np.ndarray, columns: list[ColumnRequest], level: float, threads: int | None = None) -> int:
        """Ask for predictions of a 28×28 image (or a face descriptor) on ``threads`` intra-op
        threads (``None``: torch's default); replaces any request still waiting. Returns its number."""
        self.last_request += 1
        if not columns:
            return self.last_request
        if self._worker is not None:
            self._pending = (image, columns, level, threads)
            return self.last_request
        self._start(image, columns, level, threads)
        return self.last_request

    def _start(self, image: np.ndarray, columns: list[ColumnRequest], level: float, threads: int | None) -> None:
        self._running_id = self.last_request
        worker = function_worker(predict_columns, image, columns, level, threads)
        worker.returned.connect(self._on_worker_returned)
        worker.errored.connect(self._on_worker_errored)
        worker.finished.connect(self._on_worker_finished)
        self._worker = worker
        worker.start()

    def _on_worker_returned(self, predictions: list[tuple[str, Prediction]]) -> None:
        for key, prediction in predictions:
            self.prediction_computed.emit(self._running_id, key, prediction)

    def _on_worker_errored(self, exc: Exception) -> None:
        self.prediction_failed.emit(str(exc) or "the prediction could not be computed")

    def _on_worker_finished(self) -> None:
        self._worker = None
        self.request_finished.emit(self._running_id)
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._start(*pending)

    def shutdown(self, timeout_ms: int = 10_000) -> None:
        """Drop waiting work and let a running prediction finish before this object goes."""
        self._pending = None
        if self._worker is not None:
            self._worker.quit()
            QThreadPool.globalInstance().waitForDone(timeout_ms)
