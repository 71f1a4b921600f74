"""A column's conformal sets calibrated from the window (its ⋯ menu, “Calibrate conformal
sets…”): :func:`core.analysis.conformal_run.calibrate_file`, the same run as ``bayescope-cli
calibrate``, in a worker, its progress in the status bar; the calibration is written beside the
posterior file, or in the user's data folder where that folder cannot be written (an installed
app's bundled posteriors), and the column shows its conformal sets at once."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox

from app import settings as app_settings
from app.workers import generator_worker

if TYPE_CHECKING:
    from app.controllers.judging import JudgingController
    from app.views.columns import ColumnsPanel
    from app.workspace import Column, Workspace


def calibration_set_of(posterior: Any) -> tuple[str | None, str]:
    """The data set a posterior is calibrated on (its test set: a known name or the folder it was
    trained on; None when that folder is not there any more) and its name in words."""
    from core.analysis.evaluation import FACE_TEST_SET

    trained = posterior.info.get("training_data") or {}
    if trained.get("dataset") == "mnist":
        return "mnist-test", "MNIST's test digits"
    if posterior.arch.input_dim and not trained.get("folder"):
        return FACE_TEST_SET, "UTKFace's test faces"
    folder = trained.get("folder")
    return (folder if folder and Path(folder).is_dir() else None), "the images it was trained on"


def calibration_run(path: str, posterior: Any, spec: str, data_dir: Path | None,
                    ) -> Generator[Any, None, tuple[Any, dict, Path]]:
    """Read the test set ``spec`` (a first record says so), then calibrate and write
    (:func:`~core.analysis.conformal_run.calibrate_file`), each step's images a second and time left
    in the records' values."""
    from core.analysis.conformal_run import calibrate_file
    from core.analysis.evaluation import ImageRate, resolve_dataset
    from core.engine.inference.base import ProgressRecord

    yield ProgressRecord(0, 0, {}, "loading")
    shape = {"image_size": posterior.arch.image_size, "channels": posterior.arch.channels}
    trained_on = {path: posterior.info.get("training_data")}
    data = resolve_dataset(spec, data_dir, trained_on=trained_on, **shape)
    run = calibrate_file(path, posterior, data, data_dir)
    rate = ImageRate(len(data))
    try:
        while True:
            record = next(run)
            images = record.values.get("examples", 0.0)
            # the images that calibrate (about half the set, by their pixels' hash) come in equal steps
            rate.total = images * record.total / max(record.step, 1)
            yield ProgressRecord(record.step, record.total,
                                 {"images_done": images, "images_total": rate.total, **rate.update(images)},
                                 "calibrating")
    except StopIteration as done:
        return done.value


class CalibrationController(QObject):
    """One calibration at a time; ``worker`` is the running one (None when idle), ``key`` its column's."""

    def __init__(self, window: QMainWindow, workspace: Workspace, columns: ColumnsPanel,
                 judging: JudgingController) -> None:
        super().__init__(window)
        self.window = window
        self.workspace = workspace
        self.columns = columns
        self.judging = judging
        self.worker = None
        self.key: str | None = None
        self.title = ""
        columns.calibrate_requested.connect(self.start)

    def start(self, key: str) -> bool:
        """Calibrate the column ``key`` (False when another calibration runs, the column's weights
        are still being read, it has no posterior file or no folder is chosen for its images);
        asked again of the running column, stop it."""
        if self.worker is not None:
            if key == self.key:
                self.cancel()
            else:
                self.window.statusBar().showMessage(
                    f"{self.title} is being calibrated; one calibration runs at a time.", 5000)
            return False
        column = self.workspace.column(key)
        if column is None or not column.ready or not Path(key).is_file():  # its weights still being read
            return False
        spec, words = calibration_set_of(column.posterior)
        if spec is None:
            spec = QFileDialog.getExistingDirectory(
                self.window, f"Where are the images {column.title(self.workspace.num_samples)} was trained on?")
            if not spec:
                return False
        self.key, self.title = key, column.title(self.workspace.num_samples)
        worker = generator_worker(calibration_run(key, column.posterior, spec, app_settings.data_folder()))
        worker.yielded.connect(lambda record, words=words: self._on_worker_yielded(record, words))
        worker.returned.connect(lambda result, column=column, words=words:
                                self._on_worker_returned(result, column, words))
        worker.errored.connect(self._on_worker_errored)
        worker.finished.connect(self._on_worker_finished)
        self.worker = worker
        self.columns.set_calibrating(key)
        worker.start()
        return True

    def cancel(self) -> None:
        if self.worker is not None:
            self.worker.quit()
            self.window.statusBar().showMessage(f"Calibration of {self.title} stopped.", 8000)

    def _on_worker_yielded(self, record, words: str) -> None:
        from core.analysis.evaluation import progress_in_words

        if record.phase == "loading":
            text = f"Calibrating {self.title}: reading {words}…"
        else:
            done, total = record.values["images_done"], record.values["images_total"]
            text = f"Calibrating {self.title} on half of {words}: {progress_in_words(done, total, record.values)}"
        self.window.statusBar().showMessage(text)

    def _on_worker_returned(self, result: tuple[Any, dict, Path], column: Column, words: str) -> None:
        from core.analysis.conformal import DEFAULT_LEVEL, coverage_bounds

        calibration, _record, _written = result
        column.extra.pop("conformal", None)  # read again: the column shows its sets from now on
        low, high = coverage_bounds(DEFAULT_LEVEL, calibration.n)
        self.window.statusBar().showMessage(
            f"Calibrated {self.title} on {calibration.n:,} of {words}: its 90 % conformal sets hold the true "
            f"class {100 * low:.1f}–{100 * high:.2f} % of the time, on average over images like these.", 15000)
        if self.workspace.image is not None:
            self.judging.request_predictions()

    def _on_worker_errored(self, exc: Exception) -> None:
        QMessageBox.warning(self.window, "The calibration did not finish",
                            f"{self.title} could not be calibrated: {exc}")

    def _on_worker_finished(self) -> None:
        self.worker, self.key = None, None
        self.columns.set_calibrating(None)
