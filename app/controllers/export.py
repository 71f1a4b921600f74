"""What the window writes: one plot of one column, a column's rotation sweep, the whole
comparison as a folder (in a worker), a picture of the window. The files come from the same
writers the command line uses (:mod:`core.outputs`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox, QPushButton

from app import settings as app_settings
from app.views.column import VIEW_NAMES
from app.workers import generator_worker
from core.outputs.export import PLOT_FILTERS, slug, with_suffix_from_filter

if TYPE_CHECKING:
    from app.workspace import Workspace


class ExportController(QObject):
    """``worker``: the comparison being written (one at a time), None when idle."""

    def __init__(self, window: QMainWindow, workspace: Workspace) -> None:
        super().__init__(window)
        self.window = window
        self.workspace = workspace
        self.worker = None
        self._cancel: QPushButton | None = None
        self._cancelled = False

    def _status(self, text: str, ms: int = 0) -> None:
        self.window.statusBar().showMessage(text, ms)

    def ask_plot_path(self, suggested: str) -> Path | None:
        path, chosen = QFileDialog.getSaveFileName(
            self.window, "Export plot", str(Path(app_settings.last_folder("export")) / suggested), ";;".join(PLOT_FILTERS))
        if not path:
            return None
        app_settings.remember_folder("export", path)
        return with_suffix_from_filter(path, chosen)

    def column_plot_dialog(self, key: str, view: str) -> None:
        """A column's ⋯ menu asked to export one of its plots: ask where, then write it."""
        column = self.workspace.column(key)
        if column is not None and not column.ready:
            QMessageBox.information(self.window, "Nothing to export yet",
                                    "This posterior's weights are still being read: its plots can be "
                                    "exported once its numbers are shown.")
            return
        if column is None or column.prediction is None:
            QMessageBox.information(self.window, "Nothing to export yet",
                                    "Give the columns an input first: draw, rotate or open an image.")
            return
        title = column.title(self.workspace.num_samples)
        path = self.ask_plot_path(f"{slug(title)}-{view}.png")
        if path is not None:
            self.export_plot(key, view, path)

    def export_plot(self, key: str, view: str, path: Path) -> list[Path]:
        """Write one plot of one column (format from the suffix) with its numbers beside it."""
        from core.outputs.input_figures import export_input_view

        column = self.workspace.column(key)
        title = column.title(self.workspace.num_samples)
        try:
            written = export_input_view(view, title, column.prediction.summary, self.workspace.class_names, path,
                                        samples=column.prediction.samples, level=self.workspace.level)
        except Exception as exc:  # noqa: BLE001 — a failed write gets a sentence
            QMessageBox.warning(self.window, "Could not export the plot", str(exc))
            return []
        self._status(f"Exported {VIEW_NAMES.get(view, view).lower()} to {', '.join(p.name for p in written)}", 8000)
        return written

    def sweep_dialog(self, key: str) -> None:
        """Ask where, then write one column's rotation or corruption sweep (figure and numbers)."""
        from core.outputs.input_figures import export_sweep

        column = self.workspace.column(key)
        if column is None or column.sweep is None:
            return
        title = column.title(self.workspace.num_samples)
        path = self.ask_plot_path(f"{slug(title)}-{slug(column.sweep.swept)}-sweep.png")
        if path is None:
            return
        try:
            written = export_sweep(title, column.sweep, self.workspace.class_names, path)
        except Exception as exc:  # noqa: BLE001
            QMessageBox.warning(self.window, "Could not export the sweep", str(exc))
            return
        self._status(f"Exported the sweep to {', '.join(p.name for p in written)}", 8000)

    def comparison(self):
        """The comparison shown now, as :class:`core.analysis.comparison.Comparison` (None if nothing shown)."""
        from core.analysis.comparison import Comparison, ComparisonColumn

        columns = tuple(
            ComparisonColumn(c.title(self.workspace.num_samples), c.posterior, c.prediction, source=c.key)
            for c in self.workspace.columns if c.prediction is not None
        )
        if self.workspace.image is None or not columns:
            return None
        return Comparison(self.workspace.preview, columns, self.workspace.level, self.workspace.class_names,
                          input_label=self.workspace.input_label or None)

    def comparison_dialog(self) -> None:
        comparison = self.comparison()
        if comparison is None:
            QMessageBox.information(self.window, "Nothing to export yet", "Add a posterior and give it an input first.")
            return
        path, _ = QFileDialog.getSaveFileName(
            self.window, "Export comparison into a new folder",
            str(Path(app_settings.last_folder("export")) / "bayescope-comparison"), "Folder (*)")
        if path:
            app_settings.remember_folder("export", Path(path).parent)
            self.export_comparison(Path(path), comparison)

    def export_comparison(self, folder: Path, comparison=None) -> None:
        """Write the comparison folder in a worker: the status bar counts its figures and offers
        Cancel (nothing is left behind), then says where the folder is."""
        from core.outputs.comparison import comparison_progress

        comparison = comparison or self.comparison()
        if comparison is None:
            return
        if self.worker is not None:
            self._status("An export is still being written: export the comparison when it is done.")
            return
        worker = generator_worker(comparison_progress(comparison, folder))
        worker.yielded.connect(self._on_worker_yielded)
        # stays until the next message: the folder is where a person looks next
        worker.returned.connect(lambda paths: self._status(f"Saved the comparison ({len(paths)} files) to {folder}"))
        worker.errored.connect(lambda exc: QMessageBox.warning(self.window, "Could not export the comparison", str(exc)))
        worker.finished.connect(self._on_worker_finished)
        self.worker = worker
        self._cancelled = False
        self._cancel_button().setVisible(True)
        self._status("Exporting the comparison…")
        worker.start()

    def cancel(self) -> None:
        """Stop the comparison being written, between two figures; no folder is left."""
        if self.worker is not None:
            self._cancelled = True
            self.worker.quit()
            self._status("Cancelling the export…")

    def _cancel_button(self) -> QPushButton:
        if self._cancel is None:
            self._cancel = QPushButton("Cancel export")
            self._cancel.setToolTip("Stop writing the comparison folder; nothing of it is kept")
            self._cancel.clicked.connect(self.cancel)
            self._cancel.setVisible(False)
            self.window.statusBar().addPermanentWidget(self._cancel)
        return self._cancel

    def _on_worker_yielded(self, record) -> None:
        if self._cancelled:
            return
        if record.phase == "page":
            self._status(f"Exporting the comparison: all {record.total} figures written, now its page…")
        else:
            self._status(f"Exporting the comparison: {record.step} of {record.total} figures written…")

    def _on_worker_finished(self) -> None:
        self.worker = None
        self._cancel_button().setVisible(False)
        if self._cancelled:
            self._status("Export cancelled: no folder was written.", 8000)

    def screenshot_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Save a picture of the window",
                                              str(Path(app_settings.last_folder("export")) / "bayescope.png"),
                                              "PNG image (*.png)")
        if path:
            path = with_suffix_from_filter(path, "PNG image (*.png)")
            if not self.window.grab().save(str(path)):
                QMessageBox.warning(self.window, "Could not save the picture", f"The folder {path.parent} cannot be written to.")
