"""The Dataset tab's exports: one view of every column (figure and numbers) or the whole
evaluation as one web page, written in the background by the writers the command line uses
(:mod:`core.outputs.report`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QLabel, QMessageBox, QWidget

from app import settings as app_settings
from app.views.dataset_sets import plain_sentence
from app.workers import function_worker
from core.analysis.dataset import DATASET_VIEWS

if TYPE_CHECKING:
    from core.analysis.dataset import DatasetViews


class DatasetExports(QObject):
    """Writes one export at a time (``worker``, None when idle); ``status`` says when it is done."""

    def __init__(self, parent: QWidget, results: Callable[[], DatasetViews | None], status: QLabel) -> None:
        """``results()``: the evaluation shown now (None when none)."""
        super().__init__(parent)
        self.parent_widget = parent
        self.results = results
        self.status = status
        self.worker = None

    def export_view_dialog(self, view: str) -> None:
        from core.outputs.export import PLOT_FILTERS, slug, with_suffix_from_filter

        if self.results() is None:
            return
        filters = PLOT_FILTERS if view != "summary" else {k: v for k, v in PLOT_FILTERS.items() if v in (".csv", ".json")}
        suggested = f"{slug(DATASET_VIEWS[view])}{'.csv' if view == 'summary' else '.png'}"
        path, chosen = QFileDialog.getSaveFileName(self.parent_widget, f"Export: {DATASET_VIEWS[view].lower()}",
                                                   str(Path(app_settings.last_folder("export")) / suggested),
                                                   ";;".join(filters))
        if not path:
            return
        app_settings.remember_folder("export", path)
        target = with_suffix_from_filter(path, chosen)
        self.export_view(view, target)

    def export_view(self, view: str, path: Path) -> bool:
        """Write one view of every column (figure + numbers) in the background."""
        from core.outputs.report import export_dataset_view

        return self._export(export_dataset_view, (self.results(), view, path),
                            f"Exporting {DATASET_VIEWS[view].lower()}…",
                            lambda written: f"Exported {DATASET_VIEWS[view].lower()} to "
                                            f"{', '.join(p.name for p in written)}.")

    def export_report_dialog(self) -> None:
        if self.results() is None:
            return
        path, _ = QFileDialog.getSaveFileName(self.parent_widget, "Export the evaluation report",
                                              str(Path(app_settings.last_folder("export")) / "bayescope-evaluation.html"),
                                              "Web page (*.html)")
        if not path:
            return
        app_settings.remember_folder("export", path)
        target = Path(path) if Path(path).suffix.lower() in (".html", ".htm") else Path(path + ".html")
        self.export_report(target)

    def export_report(self, path: Path) -> bool:
        """Write the HTML report of the results shown in the background."""
        from core.outputs.report import write_html_report

        return self._export(write_html_report, (self.results().evaluation, path, self.results().tables),
                            "Writing the report…", lambda written: f"Wrote the report “{Path(written).name}”.")

    def _export(self, func, args: tuple, busy: str, done) -> bool:
        if self.results() is None or self.worker is not None:
            return False
        worker = function_worker(func, *args)
        worker.returned.connect(lambda written: self.status.setText(done(written)))
        worker.errored.connect(lambda exc: QMessageBox.warning(self.parent_widget, "Could not export", plain_sentence(exc)))
        worker.finished.connect(self._on_worker_finished)
        self.worker = worker
        self.status.setText(busy)
        worker.start()
        return True

    def _on_worker_finished(self) -> None:
        self.worker = None
