"""The Dataset tab's exports: one view of every column (figure and numbers) or the whole
evaluation as one web page, written in the background by the writers the command line uses
(:mod:`core.outputs.report`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QLabel, QMessageBox, QWidget

from app import settings as app_settings
from app.views.dataset_sets import plain_sentence
from app.workers import function_worker, generator_worker
from core.analysis.dataset import DATASET_VIEWS, TABLE_VIEWS

if TYPE_CHECKING:
    from core.analysis.corruption import CorruptionEvaluation
    from core.analysis.dataset import DatasetViews


class DatasetExports(QObject):
    """Writes one export at a time (``worker``, None when idle); ``status`` says when it is done.

    Signals: report_running(bool), when the report (the long export: a figure per column and
    view) starts and ends, so that the tab offers its Cancel meanwhile.
    """

    report_running = Signal(bool)

    def __init__(self, parent: QWidget, results: Callable[[], DatasetViews | None], status: QLabel,
                 corruption: Callable[[], CorruptionEvaluation | None] = lambda: None) -> None:
        """``results()``: the evaluation shown now (None when none); ``corruption()``: the corrupted
        images' evaluation shown now, which the report includes (None when none)."""
        super().__init__(parent)
        self.parent_widget = parent
        self.results = results
        self.corruption = corruption
        self.status = status
        self.worker = None
        self._report: Path | None = None  # the report being written, until it ends
        self._cancelled = False

    def export_view_dialog(self, view: str) -> None:
        from core.outputs.export import PLOT_FILTERS, slug, with_suffix_from_filter

        if self.results() is None:
            return
        table = view in TABLE_VIEWS  # numbers only, no figure
        filters = PLOT_FILTERS if not table else {k: v for k, v in PLOT_FILTERS.items() if v in (".csv", ".json")}
        suggested = f"{slug(DATASET_VIEWS[view])}{'.csv' if table else '.png'}"
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
        """Write the HTML report of the results shown in the background: the status line counts its
        figures, and :meth:`cancel` stops it between two of them (nothing is written)."""
        from core.outputs.report import html_report_progress

        views = self.results()
        if views is None or self.worker is not None:
            return False
        worker = generator_worker(html_report_progress(views.evaluation, path, views.tables, self.corruption()))
        worker.yielded.connect(self._on_report_yielded)
        worker.returned.connect(lambda written: self.status.setText(f"Wrote the report “{Path(written).name}”."))
        worker.errored.connect(lambda exc: QMessageBox.warning(self.parent_widget, "Could not export", plain_sentence(exc)))
        worker.finished.connect(self._on_worker_finished)
        self.worker, self._report, self._cancelled = worker, Path(path), False
        self.status.setText("Writing the report…")
        self.report_running.emit(True)
        worker.start()
        return True

    def cancel(self) -> None:
        """Stop the report being written, between two figures; no page is left."""
        if self.worker is not None and self._report is not None:
            self._cancelled = True
            self.worker.quit()
            self.status.setText("Cancelling the report…")

    def _on_report_yielded(self, record) -> None:
        if not self._cancelled and record.total:
            self.status.setText(f"Writing the report: {record.step} of {record.total} figures drawn…")

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
        if self._report is not None:
            self._report = None
            self.report_running.emit(False)
            if self._cancelled:
                self.status.setText("Report cancelled: no page was written.")
