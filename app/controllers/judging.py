"""Every column judges the current input: a request per input to the
:class:`~app.controllers.inference.InferenceController`, from a few draws while a stroke or the
angle slider moves and from the full count once it pauses; the results reach the workspace, a
column whose posterior fails says why (once per session in the status bar), and the time from
request to results is kept (``last_update_ms``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QMainWindow, QMessageBox

from app.controllers.inference import ColumnRequest, InferenceController

if TYPE_CHECKING:
    from app.controllers.session import WindowSession
    from app.views.columns import ColumnsPanel
    from app.workspace import Workspace

#: Draws per column while a stroke or the angle slider is moving (see JudgingController.refine).
PREVIEW_SAMPLES = 16
#: torch's intra-op threads for those previews. At 16 draws a second thread gains little, and
#: after a pause its OpenMP team wakes late on this machine (bench_interactive.py --samples 16
#: --pause 0.2: p50 14.5–15.7 ms with 2 threads, 11.1–12.9 ms with 1). bench_gui with SGHMC
#: training beside it, hand's stroke → painted p95 56–64 ms with 2 against 48–51 ms with 1;
#: with nothing training the two are equal within noise. Full counts keep the default.
PREVIEW_THREADS = 1
#: A request whose columns last took at most this many milliseconds of processor time is computed
#: at once on the window's thread (InferenceController.request's ``inline_ms``), a preview or a full
#: count alike: handing it to a worker thread and back cost more than the paper tier's four columns
#: take (3.4–4.9 ms at 16 draws, 5.6–7.7 ms at 100, load 3), and a worker started up to 8 ms late
#: on a busy machine, then waited for the interpreter lock while the window drew the stroke. (At
#: 4 ms the preview flipped between the two from one stroke to the next.) Slower columns (a LeNet
#: ensemble, a GPU, many draws) keep their worker, so the window never waits long for them.
INLINE_MS = 8.0


class JudgingController(QObject):
    """``in_motion()``: more input follows at once (a stroke, a dragged slider);
    ``empty_message()``: what the columns say while there is no input."""

    def __init__(self, window: QMainWindow, workspace: Workspace, inference: InferenceController,
                 columns: ColumnsPanel, session: WindowSession, in_motion: Callable[[], bool],
                 empty_message: Callable[[], str]) -> None:
        super().__init__(window)
        self.window = window
        self.workspace = workspace
        self.inference = inference
        self.columns = columns
        self.session = session
        self.in_motion = in_motion
        self.empty_message = empty_message
        self.last_update_ms: float | None = None
        self._failures_told: set[str] = set()  # columns whose failure the status bar has told
        self._request_started = 0.0
        # While a stroke or the angle slider moves, columns are judged from PREVIEW_SAMPLES
        # draws (the first rows of a variational posterior's bank or of a sampler's draws; 16
        # dropout masks); the full count follows as soon as the motion pauses.
        self.refine = QTimer(self, singleShot=True, interval=40)
        self.refine.timeout.connect(self._on_refine_timeout)
        inference.predictions_computed.connect(self._on_inference_predictions_computed)
        inference.request_finished.connect(self._on_inference_request_finished)
        inference.prediction_failed.connect(self._on_inference_prediction_failed)
        inference.column_failed.connect(self._on_inference_column_failed)

    def request_predictions(self, preview: bool = False) -> None:
        """Judge the workspace's input with every column (and its tier's reference);
        ``preview``: from :data:`PREVIEW_SAMPLES` draws, the full count following."""
        if self.workspace.image is None:
            self.columns.clear_columns(self.empty_message())
            return
        full = self.workspace.num_samples
        judged = self.workspace.ready_columns()  # the others' weights are still being read
        reference = self.workspace.reference
        if reference is not None and reference.key not in self.workspace.column_keys():
            judged.append(reference)  # judged beside the tier's columns, drawn as marks on theirs
        requests = [ColumnRequest(c.key, c.posterior, min(c.samples(full), PREVIEW_SAMPLES) if preview else c.samples(full))
                    for c in judged]
        if preview:
            self.refine.start()
        else:
            self.refine.stop()
        self._request_started = time.perf_counter()
        self.inference.request(self.workspace.image, requests, self.workspace.level,
                               threads=PREVIEW_THREADS if preview else None,
                               inline_ms=INLINE_MS)

    def _on_refine_timeout(self) -> None:
        if self.in_motion():
            self.refine.start()
        elif self.workspace.image is not None:
            self.request_predictions()

    def _on_inference_predictions_computed(self, request: int, predictions: list) -> None:
        if self.workspace.image is None:  # the input was cleared meanwhile
            return
        recovered = any(c is not None and c.failure is not None for c in map(self.workspace.column, dict(predictions)))
        with self.columns.fed_together():
            self.workspace.set_predictions(predictions)
        if recovered:  # it judges again: it is reopened at the next start
            self.session.save_state()

    def _on_inference_column_failed(self, request: int, key: str, message: str) -> None:
        """One column's posterior could not judge the input: that column says why, the others
        keep their predictions, and it is left out of the columns reopened at the next start."""
        column = self.workspace.column(key)
        if self.workspace.image is None or column is None:
            return
        first = column.failure is None
        self.workspace.set_failure(key, message)
        if first:
            self.session.save_state()
        if key not in self._failures_told:  # once per column and session
            self._failures_told.add(key)
            self.window.statusBar().showMessage(
                f"“{Path(key).name}” could not judge the input (its column says why); "
                "it will not be reopened at the next start.", 20_000)

    def _on_inference_request_finished(self, request: int) -> None:
        self.last_update_ms = (time.perf_counter() - self._request_started) * 1000

    def _on_inference_prediction_failed(self, message: str) -> None:
        QMessageBox.critical(self.window, "Prediction failed", message)
