"""The data folder behind the Rotate tab: its test sets read once and kept, another folder
chosen, MNIST's test digits downloaded into the user cache in the background."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QMainWindow

from app import settings as app_settings
from app.workers import function_worker

if TYPE_CHECKING:
    from app.views.modes import RotatePanel


class DataController(QObject):
    """``datasets``: the sets read so far, by name; ``download_worker``: a download under way."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.rotate_panel: RotatePanel | None = None
        self.datasets: dict[str, object] = {}
        self.download_worker = None

    def attach(self, rotate_panel: RotatePanel) -> None:
        """The Rotate tab this folder serves (it is built with :meth:`load_dataset`, hence after)."""
        self.rotate_panel = rotate_panel
        rotate_panel.data_folder_requested.connect(self.choose_folder)
        rotate_panel.download_requested.connect(self.download)

    def load_dataset(self, name: str):
        """MNIST test or notMNIST from the data folder (cached); raises with a sentence."""
        if name not in self.datasets:
            from core.analysis.evaluation import resolve_dataset
            from core.engine.data.locate import DatasetMissingError

            folder = app_settings.data_folder()
            try:
                self.datasets[name] = resolve_dataset(name, folder)
            except DatasetMissingError:
                raise  # names the set, every place looked in, and what to do
            except Exception as exc:  # noqa: BLE001
                what = "MNIST test digits" if name.startswith("mnist") else "notMNIST letters"
                raise ValueError(f"The {what} in the data folder could not be read: {exc}") from exc
        return self.datasets[name]

    def download(self, name: str) -> None:
        """Download MNIST's test digits into the user cache in the background, then show one."""
        from core.engine.data.locate import download_dataset

        worker = function_worker(download_dataset, name, "test")
        worker.returned.connect(lambda _folder: self.folder_changed())
        worker.errored.connect(lambda exc: self.rotate_panel.set_download_failed(str(exc)))
        worker.finished.connect(self._on_download_worker_finished)
        self.download_worker = worker  # kept until it has finished
        self.rotate_panel.set_downloading(True)
        worker.start()

    def _on_download_worker_finished(self) -> None:
        self.download_worker = None
        self.rotate_panel.set_downloading(False)

    def folder_changed(self) -> None:
        """Forget the sets read from the old folder; the Rotate tab reads its image again."""
        self.datasets.clear()
        self.rotate_panel._on_changed()

    def choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self.window, "Choose the data folder (it holds “mnist”, “notmnist”, “utkface”)",
                                                app_settings.last_folder("data"))
        if path:
            app_settings.set_data_folder(Path(path))
            app_settings.remember_folder("data", path)
            self.folder_changed()
