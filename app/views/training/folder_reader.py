"""A folder of one's own images read in the background, shortly after its path was last typed;
a newer reading drops an older one's reports."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from app.workers import generator_worker
from core.engine.data.folder import FolderData, read_image_folder
from core.engine.inference.base import ProgressRecord


class FolderReader(QObject):
    """Reads one folder at a time (:func:`core.engine.data.folder.read_image_folder`).

    Signals
    -------
    progressed(int, int)
        Images read so far and in all.
    read(str, FolderData)
        The folder at this path was read.
    failed(str, Exception)
        The folder at this path could not be read.
    """

    progressed = Signal(int, int)
    read = Signal(str, object)
    failed = Signal(str, object)
    DELAY_MS = 400  # typing a path reads the folder once, after the last key

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self._worker = None
        self._number = 0  # of the latest reading asked for
        self._path, self._size = "", None
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(self.DELAY_MS)
        self.timer.timeout.connect(self._on_timer_timeout)

    @property
    def reading(self) -> bool:
        """Whether a reading is under way (or about to start)."""
        return self._worker is not None or self.timer.isActive()

    def read_soon(self, path: str, size: int | None) -> None:
        """Read ``path`` at image side ``size`` shortly, dropping any reading under way."""
        self.stop()
        self._path, self._size = path, size
        self.timer.start()

    def stop(self) -> None:
        """Stop the reading under way (its reports are dropped) and any about to start."""
        self.timer.stop()
        if self._worker is not None:
            self._worker.quit()
            self._worker = None
        self._number += 1

    def _on_timer_timeout(self) -> None:
        self._number += 1
        worker = generator_worker(read_image_folder(self._path, self._size))
        reading = _Reading(self, self._number, self._path)
        worker.yielded.connect(reading.on_yielded)
        worker.returned.connect(reading.on_returned)
        worker.errored.connect(reading.on_errored)
        worker.finished.connect(reading.on_finished)
        self._worker = worker
        worker.start()

    def _report(self, number: int, signal: Signal, *args: object) -> None:
        if number == self._number:  # else a stale reading
            signal.emit(*args)

    def _finished(self, number: int) -> None:
        if number == self._number:
            self._worker = None


class _Reading(QObject):
    """One reading, told apart by its number. Its reports reach the reader through this object's
    own methods, whose connections end when the dialog (and so this child of it) is deleted
    during a reading: a ``functools.partial`` of the reader's did not, and reported to a panel
    whose labels were gone."""

    def __init__(self, reader: FolderReader, number: int, path: str) -> None:
        super().__init__(reader)
        self._reader, self._number, self._path = reader, number, path

    def on_yielded(self, record: ProgressRecord) -> None:
        if record.total:
            self._reader._report(self._number, self._reader.progressed, record.step, record.total)

    def on_returned(self, data: FolderData) -> None:
        self._reader._report(self._number, self._reader.read, self._path, data)

    def on_errored(self, exc: Exception) -> None:
        self._reader._report(self._number, self._reader.failed, self._path, exc)

    def on_finished(self) -> None:
        self._reader._finished(self._number)
        self.deleteLater()
