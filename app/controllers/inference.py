"""Per-input prediction for every column, off the main thread; stale requests are dropped.

One request judges one input with every column's posterior and reports the columns together
when all are done. Reporting each column as soon as it was ready looked faster but was
slower: the main thread drawing column 1 while the worker computed column 2 fought over the
interpreter lock and both cores, and 4 columns took 3× their compute time (60 ms against
20 ms, measured with benchmarks/bench_gui.py). While a request runs, only the newest further
request waits; older ones are dropped, never queued.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject, QThreadPool, Signal

from app.workers import function_worker, torch_threads
from core.engine.model_inputs import reads_photos, why_not_a_digit

if TYPE_CHECKING:  # the window is built before the engine (torch) loads: see app.__main__
    from core.analysis.predictive import Prediction
    from core.engine.inference.base import Posterior

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ColumnRequest:
    key: str
    posterior: Posterior
    num_samples: int


@dataclass(frozen=True)
class ColumnFailure:
    """A column whose posterior could not judge the input; ``message`` is for a person."""

    message: str


def failure_in_words(exc: BaseException) -> str:
    """Why a column could not judge the input, as a sentence a person can act on.

    The engine's refusals (a descriptor of another kind, too many draws for the memory) are
    ``ValueError`` with a sentence; anything else is a fault of the posterior file or of
    bayescope, said as such, with the details in the log.
    """
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, ValueError) and text:
        return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")
    return ("Its file loads but its model fails when it computes (the log file has the details): "
            "remove this column with ✕ and train or open the posterior again.")


def predict_columns(
    image, columns: Sequence[ColumnRequest], level: float, threads: int | None = None
) -> list[tuple[str, Prediction | ColumnFailure]]:
    """``image``: a 28×28 array, a face descriptor (D,) or a photo of one's own
    (:class:`core.engine.data.images.Photo`, read by each column at its own size).

    ``(key, prediction)`` per column, or ``(key, ColumnFailure)`` for a column whose
    posterior raised: one broken posterior never keeps the others from judging. ``seed=None``
    lets each posterior use its own randomness (a variational posterior's fixed bank of draws,
    dropout's masks). ``threads``: torch's intra-op threads for these predictions (``None``:
    its default)."""
    from core.analysis.predictive import predict_inputs

    with torch_threads(threads):
        digit = _digit_input(image)
        inputs = [_column_input(image, column, digit) for column in columns]
        # every column that has its input judges it, the summaries in one pass over the columns
        judged = iter(predict_inputs([(c.posterior, x, c.num_samples) for c, x in zip(columns, inputs, strict=True)
                                      if not isinstance(x, ColumnFailure)], seed=None, level=level))
        outcomes: list[tuple[str, Prediction | ColumnFailure]] = []
        for column, x in zip(columns, inputs, strict=True):
            outcome = x if isinstance(x, ColumnFailure) else next(judged)
            if isinstance(outcome, Exception):
                log.warning("column %s could not judge the input", column.key, exc_info=outcome)
                outcome = ColumnFailure(failure_in_words(outcome))
            outcomes.append((column.key, outcome))
        return outcomes


def timed_predict_columns(
    image, columns: Sequence[ColumnRequest], level: float, threads: int | None = None
) -> tuple[float, list[tuple[str, Prediction | ColumnFailure]]]:
    """:func:`predict_columns` and the processor time it took in milliseconds (the thread's own:
    waiting for a core or for the interpreter lock is not counted)."""
    start = time.thread_time()
    predictions = predict_columns(image, columns, level, threads)
    return (time.thread_time() - start) * 1e3, predictions


def _digit_input(image):
    """A drawn or picked digit (a 2-d array) as the model input every digit column reads, made
    once per request rather than once per column (the same tensor each column made for itself);
    None for any other input, or one a column must refuse in its own words (an empty drawing)."""
    if not isinstance(image, np.ndarray) or image.ndim != 2:
        return None
    from core.engine.data.preprocess import image_to_input

    try:
        return image_to_input(image)
    except Exception:  # noqa: BLE001 — each column says why, as it would have alone
        return None


def _column_input(image, column: ColumnRequest, digit=None):
    """The input as ``column``'s posterior reads it, a batch of one (``digit``: the drawn or
    picked digit's model input, made once per request); or a :class:`ColumnFailure` saying why
    this posterior cannot judge it."""
    try:
        if hasattr(image, "model_input"):  # a photo (core.engine.data.images.Photo), read at the column's size
            return image.model_input(column.posterior.arch)
        if reads_photos(column.posterior.arch):
            raise ValueError(why_not_a_digit(column.posterior.arch))
        if image.ndim == 1:  # a face descriptor: the posterior must read this descriptor
            from core.analysis.predictive import features_batch
            from core.engine.faces import descriptor_info
            from core.engine.faces.heads import check_descriptor

            check_descriptor(column.posterior, descriptor_info())
            return features_batch(image)
        if digit is not None:  # image_to_input's float32 (1, 1, 28, 28): the batch image_batch makes of it
            return digit
        from core.analysis.predictive import image_batch

        return image_batch(image)  # no model input was made: each column says why
    except Exception as exc:  # noqa: BLE001 — each column's failure is its own, in words
        log.warning("column %s could not judge the input", column.key, exc_info=True)
        return ColumnFailure(failure_in_words(exc))


def request_signature(columns: Sequence[ColumnRequest]) -> tuple:
    """What decides how long a request takes: each column's posterior and its draw count."""
    return tuple((column.key, id(column.posterior), column.num_samples) for column in columns)


class InferenceController(QObject):
    """A request runs in a worker thread, or at once on the calling thread when it is quick
    (``inline_ms``: a preview's few draws of small models, whose hand-over to a worker and back
    took longer than the computation, and whose worker waited for the interpreter lock while the
    window drew the stroke).

    Signals
    -------
    predictions_computed(int, list)
        Request number and its columns' (key, Prediction) pairs, all at once.
    column_failed(int, str, str)
        Request number, column key and why that column's posterior could not judge the input
        (a sentence for a person); the other columns' predictions arrive as usual.
    request_finished(int)
        Every column of that request is done.
    prediction_failed(str)
        The request as a whole raised; the message is for a person.
    """

    predictions_computed = Signal(int, list)
    column_failed = Signal(int, str, str)
    request_finished = Signal(int)
    prediction_failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pending: tuple[np.ndarray, list[ColumnRequest], float, int | None] | None = None
        self._worker = None
        self._running_id = 0
        self._running_signature: tuple = ()
        #: processor milliseconds the last request of each signature took (a few kept)
        self.took_ms: dict[tuple, float] = {}
        self.last_request = 0

    @property
    def busy(self) -> bool:
        return self._worker is not None or self._pending is not None

    def request(self, image: np.ndarray, columns: list[ColumnRequest], level: float, threads: int | None = None,
                inline_ms: float = 0.0) -> int:
        """Ask for predictions of a 28×28 image (or a face descriptor) on ``threads`` intra-op
        threads (``None``: torch's default); replaces any request still waiting. Returns its number.

        ``inline_ms``: when no worker is running and the last request of the same columns at the
        same draw counts took at most this many milliseconds, it is computed here and now, its
        signals emitted before this returns (the first such request always goes to a worker,
        which measures it)."""
        self.last_request += 1
        if not columns:
            return self.last_request
        if self._worker is not None:
            self._pending = (image, columns, level, threads)
            return self.last_request
        took = self.took_ms.get(request_signature(columns))
        if took is not None and took <= inline_ms:
            self._compute_here(image, columns, level, threads)
        else:
            self._start(image, columns, level, threads)
        return self.last_request

    def _remember(self, signature: tuple, took: float) -> None:
        kept = {k: v for k, v in self.took_ms.items() if k != signature}
        self.took_ms = {**dict(list(kept.items())[-7:]), signature: took}

    def _compute_here(self, image: np.ndarray, columns: list[ColumnRequest], level: float, threads: int | None) -> None:
        self._running_id, self._running_signature = self.last_request, request_signature(columns)
        try:
            took, predictions = timed_predict_columns(image, columns, level, threads)
        except Exception as exc:  # noqa: BLE001 — as a worker's error: a dialog, never a crash
            log.warning("the prediction failed", exc_info=True)
            self._on_worker_errored(exc)
        else:
            self._on_worker_returned((took, predictions))
        self.request_finished.emit(self._running_id)

    def _start(self, image: np.ndarray, columns: list[ColumnRequest], level: float, threads: int | None) -> None:
        self._running_id, self._running_signature = self.last_request, request_signature(columns)
        worker = function_worker(timed_predict_columns, image, columns, level, threads)
        worker.returned.connect(self._on_worker_returned)
        worker.errored.connect(self._on_worker_errored)
        worker.finished.connect(self._on_worker_finished)
        self._worker = worker
        worker.start()

    def _on_worker_returned(self, result: tuple[float, list[tuple[str, Prediction | ColumnFailure]]]) -> None:
        took, predictions = result
        self._remember(self._running_signature, took)
        computed = [(key, outcome) for key, outcome in predictions if not isinstance(outcome, ColumnFailure)]
        if computed:
            self.predictions_computed.emit(self._running_id, computed)
        for key, outcome in predictions:
            if isinstance(outcome, ColumnFailure):
                self.column_failed.emit(self._running_id, key, outcome.message)

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
