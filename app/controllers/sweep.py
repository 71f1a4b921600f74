"""The sweeps: every column judges the Rotate tab's image turned from 0° to 180°
(:func:`core.analysis.metrics.rotation_sweeps`), or corrupted at severities 0–5 or with a patch
moved across it (:func:`core.analysis.corruption.corruption_sweeps`), in a worker; the Rotate tab
shows its progress and the Sweep tab its plots."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMainWindow, QMessageBox, QTabWidget

from app.workers import generator_worker

if TYPE_CHECKING:
    from app.views.modes import RotatePanel
    from app.views.sweep import SweepView
    from app.workspace import Workspace


class SweepController(QObject):
    """Runs one sweep at a time; ``worker`` is the running one (None when idle)."""

    def __init__(self, window: QMainWindow, workspace: Workspace, rotate_panel: RotatePanel,
                 sweep_view: SweepView, views: QTabWidget) -> None:
        super().__init__(window)
        self.window = window
        self.workspace = workspace
        self.rotate_panel = rotate_panel
        self.sweep_view = sweep_view
        self.views = views
        self.worker = None
        self.swept: np.ndarray | None = None  # the image the sweep shown started from (Rotate tab's sweep_base)
        self.swept_seed: int | None = None  # its noise draw (None: a sweep with no random part)
        rotate_panel.sweep_requested.connect(self.start)
        workspace.input_changed.connect(self._on_workspace_input_changed)
        rotate_panel.sweep_cancelled.connect(self.cancel)

    def start(self, image: np.ndarray, label: str) -> bool:
        """Sweep ``image`` with every column, as the Rotate tab's sweep choice says (False when one
        runs already or there is no column)."""
        from core.analysis.corruption import corruption_sweeps
        from core.analysis.metrics import rotation_sweeps
        from core.engine.data.corruptions import CORRUPTIONS

        if self.worker is not None or not self.workspace.ready_columns():
            return False
        items = [(c.key, c.posterior, c.samples(self.workspace.num_samples)) for c in self.workspace.ready_columns()]
        kind = self.rotate_panel.sweep_kind()
        seed = None
        if kind == "rotation":
            run, words = rotation_sweeps(items, image, level=self.workspace.level), "from 0° to 180°"
        else:
            severity = self.rotate_panel.sweep_severity()
            seed = self.rotate_panel.noise_seed if CORRUPTIONS[kind].random else None
            run = corruption_sweeps(items, image, kind, severity, level=self.workspace.level, corruption_seed=seed)
            words = ("moving the patch across" if kind == "occlusion" else
                     f"with {CORRUPTIONS[kind].in_sentence} at severities 0–5")
            if seed is not None:
                label = f"{label} (draw {seed})"
        worker = generator_worker(run)
        worker.yielded.connect(self._on_worker_yielded)
        swept = np.array(image, dtype=np.float32)  # a copy: the panel's image may change meanwhile
        worker.returned.connect(lambda sweeps, label=label, swept=swept, kind=kind, seed=seed:
                                self._on_worker_returned(sweeps, label, swept, kind, seed))
        worker.errored.connect(self._on_worker_errored)
        worker.finished.connect(self._on_worker_finished)
        self.worker = worker
        self.rotate_panel.set_sweep_running(True)
        self.window.statusBar().showMessage(f"Sweeping {label} {words}…")
        worker.start()
        return True

    def cancel(self) -> None:
        if self.worker is not None:
            self.worker.quit()
            self.window.statusBar().showMessage("Sweep cancelled.", 5000)

    def _on_worker_yielded(self, record) -> None:
        self.rotate_panel.progress.setMaximum(record.total)
        self.rotate_panel.progress.setValue(record.step)

    def _on_worker_returned(self, sweeps: dict, label: str, image: np.ndarray, kind: str = "rotation",
                            seed: int | None = None) -> None:
        items = []
        for column in self.workspace.columns:
            if column.key in sweeps:
                column.sweep = sweeps[column.key]
                items.append((column.key, column.title(self.workspace.num_samples), column.sweep))
        self.sweep_view.show_sweeps(label, items, self.workspace.class_names, kind=kind)
        self.swept, self.swept_seed = image, seed
        self.views.setCurrentWidget(self.sweep_view)
        self.window.statusBar().showMessage("Sweep done.", 5000)

    def _on_workspace_input_changed(self) -> None:
        """Mark the sweep shown stale when the image now judged is not the one swept (a new
        drawing, an opened file, another test image); a person would read it as this one's."""
        if self.swept is None:
            return
        redrawn = False
        if self.rotate_panel.isVisible():  # the Rotate tab is the one shown
            # turning the image (rotation sweep) or corrupting it (corruption sweep) keeps its sweep;
            # a new noise draw does not: the sweep shown is of the earlier noise
            current = self.rotate_panel.sweep_base()[0]
            redrawn = self.swept_seed is not None and self.swept_seed != self.rotate_panel.noise_seed
        else:
            current = self.workspace.image
        same = (isinstance(current, np.ndarray) and current.shape == self.swept.shape
                and np.array_equal(current, self.swept) and not redrawn)
        self.sweep_view.set_stale(not same)

    def _on_worker_errored(self, exc: Exception) -> None:
        QMessageBox.critical(self.window, "The sweep failed", str(exc))

    def _on_worker_finished(self) -> None:
        self.worker = None
        self.rotate_panel.set_sweep_running(False)
        self.rotate_panel._on_changed()
