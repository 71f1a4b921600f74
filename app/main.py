"""The main window: an input on the left (draw, rotate, image), one column per posterior on
the right, all judging the same input side by side."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import settings as app_settings
from app.controllers import drop
from app.controllers.calibrating import CalibrationController
from app.controllers.data import DataController
from app.controllers.devices import DeviceController
from app.controllers.export import ExportController
from app.controllers.inference import InferenceController
from app.controllers.judging import PREVIEW_SAMPLES, PREVIEW_THREADS, JudgingController  # noqa: F401 (named here by benchmarks)
from app.controllers.menus import build_menus
from app.controllers.opening import FileOpening
from app.controllers.session import LOADING_NOTE, WindowSession
from app.controllers.sweep import SweepController
from app.help import ABOUT_TITLE, about_text
from app.plots import style
from app.views.add_menu import AddPosteriorMenu
from app.views.columns import ColumnsBar, ColumnsPanel, RemovedNote
from app.views.input_side import InputSide
from app.views.modes import ModePanel
from app.views.sweep import SweepView
from app.workers import freeze_long_lived
from app.workspace import Workspace, images_words

log = logging.getLogger(__name__)

#: Shortest time between two reads of a changing input. bench_gui, a move every 8 ms: each move
#: painted after p50 47–53 / p95 68–73 ms with a 16 ms tick, 38–40 / 52–54 ms with 4 ms.
INPUT_TICK_MS = 4
DATASET_TIP = ("Every posterior on a whole test set: accuracy, calibration, confusion, "
               "uncertainty in and out of distribution")


class MainWindow(FileOpening, QMainWindow):
    """Signals
    -------
    columns_shown
        The column widgets were rebuilt (added, removed or moved).
    """

    columns_shown = Signal()

    def __init__(self, posteriors: list[str] | None = None, files: list[str | Path] | None = None,
                 defer_columns: bool = False) -> None:
        """``posteriors``: the digit columns instead of last time's; ``files``: images and posterior
        files opened as a drop of them is (:meth:`open_files`), once the columns are read.
        ``defer_columns``: build and return the window without loading its posteriors;
        the caller shows it, then calls :meth:`load_columns` (the launcher does, so the window
        appears before the weights are read). Either way a task's columns are read only when
        its tab first opens: the face heads wait for the Face tab."""
        super().__init__()
        style.configure()
        self.setWindowTitle("bayescope")
        self.setAcceptDrops(True)
        self.workspace = Workspace(self)
        self.inference = InferenceController(self)
        self.files_waiting: list[tuple[list[Path], str]] = []  # given before the engine loaded (open_files)
        self.training_dialog = None
        self.data = DataController(self)  # the data folder's test sets, another folder, downloads
        self.exports = ExportController(self, self.workspace)
        self.devices = DeviceController(self, self.workspace)
        self.device_menu, self.device_label = self.devices.menu, self.devices.label
        self.devices.device_changed.connect(lambda: self.judging.request_predictions())
        self._input_waiting = False  # an input change arrived while the frame's timer ran

        # ----------------------------------------------------------- left: input
        left = InputSide(self.data.load_dataset)
        self.data.attach(left.rotate_panel)
        self.draw_panel, self.rotate_panel, self.image_panel, self.face_panel = (
            left.draw_panel, left.rotate_panel, left.image_panel, left.face_panel)
        self.canvas, self.modes = left.canvas, left.modes
        self.preview, self.preview_note, self.warning = left.preview, left.preview_note, left.warning
        self.input_side = left
        self._rotate_source: ModePanel = self.draw_panel  # the last of Draw and Image to change

        # ---------------------------------------------------------- right: columns
        self.add_menu = AddPosteriorMenu(self.workspace, self._tasks_offered)
        self.add_menu.posterior_chosen.connect(self.add_posterior)
        self.add_menu.open_requested.connect(self.open_posterior_dialog)
        self.add_menu.train_requested.connect(self.show_training_dialog)
        top = ColumnsBar(self.add_menu)
        self.samples, self.level, self.input_label = top.samples, top.level, top.input_label
        self.columns_scroll = ColumnsPanel()
        self.column_views = self.columns_scroll.views  # the same dict: the column widgets by key
        self.columns_row = self.columns_scroll.row
        self.empty_note = self.columns_scroll.empty_note
        self.columns_scroll.remove_requested.connect(self.remove_column)
        self.columns_scroll.move_requested.connect(self.workspace.move)
        self.columns_scroll.export_requested.connect(self.exports.column_plot_dialog)
        self.columns_scroll.diagnostics_requested.connect(self._on_column_diagnostics_requested)
        self.columns_scroll.help_requested.connect(self.show_help)
        self.sweep_view = SweepView()
        self.sweep_view.export_requested.connect(self.exports.sweep_dialog)
        self.views = QTabWidget()
        self.views.addTab(self.columns_scroll, "This input")
        self.views.setTabToolTip(0, "Every posterior's belief about the current input, side by side")
        self.views.addTab(self.sweep_view, "Sweep")
        self.views.setTabToolTip(1, "How belief changes as the image is rotated or corrupted (Rotate tab → Sweep)")
        # The Dataset tab is built when first opened: it needs the engine (torch), which the
        # launcher loads after the window is shown.
        self._dataset_view = None
        self._dataset_placeholder = QWidget()
        self.views.addTab(self._dataset_placeholder, "Dataset")
        self.views.setTabToolTip(2, DATASET_TIP)
        self.views.currentChanged.connect(self._on_views_current_changed)
        self.sweeps = SweepController(self, self.workspace, self.rotate_panel, self.sweep_view, self.views)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(top)
        right_layout.addWidget(self.views, 1)

        self.splitter = QSplitter()
        self.splitter.addWidget(left)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 7)
        self.setCentralWidget(self.splitter)

        # ----------------------------------------------------------------- wiring
        # The input is read at most once per INPUT_TICK_MS (see _on_panel_input_changed).
        self._throttle = QTimer(self, singleShot=True, interval=INPUT_TICK_MS)
        self._throttle.timeout.connect(self._on_throttle_timeout)
        for panel in (self.draw_panel, self.rotate_panel, self.image_panel, self.face_panel):
            panel.input_changed.connect(self._on_panel_input_changed)
        self.face_panel.open_requested.connect(self.open_image_dialog)
        self.modes.currentChanged.connect(self._on_modes_current_changed)
        self.image_panel.open_requested.connect(self.open_image_dialog)
        self.samples.valueChanged.connect(self._on_sampling_changed)
        self.level.valueChanged.connect(self._on_sampling_changed)
        self.workspace.columns_changed.connect(self._on_workspace_columns_changed)
        self.workspace.prediction_changed.connect(self._on_workspace_prediction_changed)
        for box in self.findChildren(QAbstractSpinBox):
            box.installEventFilter(self)

        self._build_menus()
        # “Removed X — Undo”: beside the status bar's messages (a message would hide a plain widget).
        self._undo_column_next = False  # Ctrl+Z brings back a removed column, not a stroke
        self.removed_bar = RemovedNote()
        self.removed_note, self.undo_remove_button = self.removed_bar.note, self.removed_bar.undo_button
        self.removed_bar.undo_requested.connect(self.undo_remove_column)
        self.statusBar().addPermanentWidget(self.removed_bar)
        # Where the work runs, said once the engine is loaded (load_columns): View ▸ Compute on.
        self.statusBar().addPermanentWidget(self.device_label)
        self.canvas.stroke_finished.connect(self._on_canvas_stroke_finished)
        # Posterior files per task, read when the task's tab first opens (after load_columns).
        self.session = WindowSession(self)
        self.judging = JudgingController(self, self.workspace, self.inference, self.columns_scroll, self.session,
                                         self._in_motion, self._empty_message)
        self._refine = self.judging.refine  # the benchmarks and tests watch it
        self.calibrating = CalibrationController(self, self.workspace, self.columns_scroll, self.judging)
        self.session.restore(posteriors)
        self._on_modes_current_changed(self.modes.currentIndex())
        self.session.ready = True
        self.workspace.columns_changed.connect(self.session.save_state)
        self.draw_panel.brush.valueChanged.connect(self.session.save_state)
        self.modes.currentChanged.connect(self.session.save_state)
        if files:
            self.open_files(files, drop.COMMAND_LINE)
        if not defer_columns:
            self.load_columns()
        elif self.session.unread.get(self.workspace.task):
            self.empty_note.setText(LOADING_NOTE)
            self.session.show_records()  # the digit columns' titles and words, their weights to come

    # ------------------------------------------------------------------ menus
    def _build_menus(self) -> None:
        """The menu bar, from the table in :mod:`app.controllers.menus`."""
        self.menu_actions = build_menus(self)
        self.undo_action = self.menu_actions["edit.undo"]
        self.clear_action = self.menu_actions["edit.clear"]

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        # Spin boxes claim Delete and Ctrl+Z for their text; here they act on the drawing
        # whatever has focus, so the shortcut must win over the box.
        if (event.type() == QEvent.Type.ShortcutOverride and isinstance(obj, QAbstractSpinBox)
                and (event.matches(QKeySequence.StandardKey.Undo) or event.key() == Qt.Key.Key_Delete)):
            event.ignore()
            return True
        return super().eventFilter(obj, event)

    # --------------------------------------------------------------- settings
    def load_columns(self) -> None:
        """Read the current task's posteriors (the other task's wait for its tab)."""
        self.session.allowed = True
        self.workspace.engine_loaded = True
        self.devices.set_device(app_settings.read_device(), announce=False)
        self.session.read_columns(self.workspace.task)
        if self.current_panel() is self.image_panel:
            self.session.read_columns("images")
            self._show_task()
        self.open_waiting_files()
        # the window, torch and the first posteriors stay until the window closes: a full
        # collection walking them all took 305 ms of a stroke's update (see freeze_long_lived)
        freeze_long_lived()

    def save_settings(self) -> None:
        """Save what the window keeps between launches now."""
        self.session.save()

    # ---------------------------------------------------------------- columns
    def _task_of_panel(self, panel: ModePanel) -> str:
        """The columns a tab shows: face heads on Face; on Image, the posteriors of one's own
        images whenever there are any, else the digit posteriors (as on Draw and Rotate)."""
        if panel is self.face_panel:
            return "faces"
        if panel is self.image_panel and self.workspace.columns_of("images"):
            return "images"
        return "digits"

    def _show_task(self) -> None:
        """After columns of one's own images came or went: the Image tab shows the right columns."""
        task = self._task_of_panel(self.current_panel())
        self.image_panel.set_judges_photos(self._task_of_panel(self.image_panel) == "images")
        if task != self.workspace.task:
            self.workspace.set_task(task)
            self._apply_input()

    def _tasks_offered(self) -> set[str]:
        """The posteriors “Add posterior” offers: only what this tab can judge (the Image tab
        offers one's own images beside its digits)."""
        return {self.workspace.task} | ({"images"} if self.current_panel() is self.image_panel else set())

    def _on_workspace_columns_changed(self) -> None:
        self.columns_scroll.show_columns(self.workspace)
        self.columns_shown.emit()
        self.judging.request_predictions()

    def _on_workspace_prediction_changed(self, key: str) -> None:
        self.columns_scroll.show_prediction(self.workspace, key)

    def remove_column(self, key: str) -> None:
        """Remove a column; the status bar offers to bring it back (Undo, or Ctrl+Z)."""
        column = self.workspace.remove(key)
        if column is None:
            return
        self._show_task()  # the last column of one's own images gone: the Image tab judges digits
        self.removed_bar.show_removed(column.title(self.workspace.num_samples))
        self._undo_column_next = True
        self._update_undo_action()

    def undo_remove_column(self) -> None:
        """Bring back the column removed last, at its place."""
        self._undo_column_next = False
        self.removed_bar.hide()
        column = self.workspace.restore_removed()
        self._show_task()
        if column is not None:
            self.statusBar().showMessage(f"“{column.title(self.workspace.num_samples)}” is back.", 5000)
        self._update_undo_action()

    def undo(self) -> None:
        """Ctrl+Z: bring back a column removed since the last stroke, else undo a stroke."""
        if self._undo_column_next and self.workspace.last_removed is not None:
            self.undo_remove_column()
        elif self.current_panel() is self.draw_panel:
            self.canvas.undo()

    def _update_undo_action(self) -> None:
        column_next = self._undo_column_next and self.workspace.last_removed is not None
        self.undo_action.setText("Undo remove column" if column_next else "Undo stroke")
        self.undo_action.setEnabled(column_next or self.current_panel() is self.draw_panel)

    def _on_canvas_stroke_finished(self) -> None:
        self._undo_column_next = False
        self._update_undo_action()

    def clear_drawing(self) -> None:
        self.canvas.clear()
        self._on_canvas_stroke_finished()

    def show_training_dialog(self) -> None:
        from app.views.training import RunIndicator, TrainingDialog

        if self.training_dialog is None:
            self.training_dialog = TrainingDialog(self)
            self.training_dialog.posterior_saved.connect(self._on_training_posterior_saved)
            # A run goes on when its dialog is closed: the status bar shows it, a click brings the dialog back.
            self.training_indicator = RunIndicator()
            self.training_indicator.hide()
            self.statusBar().addPermanentWidget(self.training_indicator)
            self.training_indicator.clicked.connect(self.show_training_dialog)
            self.training_dialog.progress_reported.connect(self._on_training_dialog_progress_reported)
            self.training_dialog.run_finished.connect(self.training_indicator.hide)
        self.training_dialog.show()
        self.training_dialog.raise_()
        self.training_dialog.activateWindow()

    def _on_training_dialog_progress_reported(self, text: str, step: int, total: int) -> None:
        self.training_indicator.show_progress(text, step, total)
        self.training_indicator.show()

    def _on_training_posterior_saved(self, path: Path) -> None:
        if self.add_posterior(Path(path)) and self.training_dialog.isHidden():
            self.statusBar().showMessage(f"“{Path(path).stem}” is trained: it is added as a column.", 15_000)

    # ------------------------------------------------------------------ input
    MODE_HINTS = {
        "Draw": "Draw a digit with the mouse or a pen. Ctrl+Z undoes a stroke, Delete clears.",
        "Rotate": "Pick an image and turn it with the slider, or corrupt it (Sweep: noise, blur, …); Ctrl+R sweeps.",
        "Image": "Open a picture of a digit, or a photo for the posteriors of your own images (Ctrl+I), or drop one on the window.",
        "Face": "Open a photo with a face (Ctrl+I) or drop one on the window; the columns judge its age group.",
    }

    def _on_modes_current_changed(self, index: int) -> None:
        self.statusBar().showMessage(self.MODE_HINTS.get(self.modes.tabText(index), ""))
        panel = self.modes.widget(index)
        if panel is self.image_panel:
            self.session.read_columns("images")  # whether there are any decides which columns judge
        task = self._task_of_panel(panel)
        self.session.read_columns(task)
        self.image_panel.set_judges_photos(self._task_of_panel(self.image_panel) == "images")
        self.workspace.set_task(task)
        if panel is self.rotate_panel:
            self.rotate_panel.set_drawing(*self._rotate_input())
        self.clear_action.setEnabled(self.modes.widget(index) is self.draw_panel)
        self._update_undo_action()
        self._on_panel_input_changed()

    def _rotate_input(self) -> tuple[np.ndarray | None, str]:
        """The Rotate tab's own image: the drawing, or the Image tab's file read as a digit."""
        source = self._rotate_source
        return source.digit_input() if source is self.image_panel else source.current_input()

    def current_panel(self) -> ModePanel:
        return self.modes.currentWidget()

    @property
    def dataset_view(self):
        """The Dataset tab's view, built on first use."""
        if self._dataset_view is None:
            from app.views.dataset import DatasetView

            view = DatasetView(self.workspace)
            view.image_chosen.connect(self.show_image_array)
            view.face_chosen.connect(self.show_face_photo)
            view.photo_chosen.connect(self.show_photo_array)
            index = self.views.indexOf(self._dataset_placeholder)
            current = self.views.currentIndex()
            self.views.blockSignals(True)
            self.views.removeTab(index)
            self.views.insertTab(index, view, "Dataset")
            self.views.setTabToolTip(index, DATASET_TIP)
            self.views.setCurrentIndex(current)
            self.views.blockSignals(False)
            self._dataset_placeholder.deleteLater()
            self._dataset_view = view
        return self._dataset_view

    def _on_views_current_changed(self, index: int) -> None:
        if self._dataset_view is None and self.views.widget(index) is self._dataset_placeholder:
            self.dataset_view  # noqa: B018 — builds the tab

    def _on_panel_input_changed(self) -> None:
        if self.sender() in (self.draw_panel, self.image_panel):
            # Only remember where the Rotate tab's own image comes from: preprocessing and
            # rotating it on every stroke event would be work nobody sees until that tab opens.
            self._rotate_source = self.sender()
        if self.sender() in (self.draw_panel, self.rotate_panel, self.image_panel, self.face_panel) and self.sender() is not self.current_panel():
            return
        # The first change is judged at once; changes within the next INPUT_TICK_MS are folded
        # into one read of the input when the tick ends. The worker takes only the newest
        # input when it is free, so the tick bounds the preprocessing work (≈ 1.3 ms a read),
        # not the updates; a 16 ms tick left what a hand's stroke showed up to 16 ms older.
        if self._throttle.isActive():
            self._input_waiting = True
            return
        self._throttle.start()
        self._apply_input()

    def _on_throttle_timeout(self) -> None:
        if self._input_waiting:
            self._input_waiting = False
            self._throttle.start()
            self._apply_input()

    def _apply_input(self) -> None:
        panel = self.current_panel()
        image, label = panel.current_input()
        preview, photo, sizes = panel.preview() if panel is self.face_panel else image, "", 1
        if image is not None and hasattr(image, "model_input"):  # a photo: what the first column sees
            first = next(iter(self.workspace.columns), None)
            arch = first.posterior.arch if first is not None else None
            try:
                seen = image.array(arch.image_size, arch.channels) if arch is not None else image.array(32, 3)
            except Exception as exc:  # noqa: BLE001 — the columns each say why in words
                log.warning("could not read the photo at the first column's size: %s", exc)
                seen = None
            preview = None if seen is None else (seen.transpose(1, 2, 0) if seen.shape[0] == 3 else seen[0] / 255.0)
            photo = images_words(first.posterior) if first is not None else "colour 32×32 images"
            sizes = len({images_words(c.posterior) for c in self.workspace.columns})
        self.workspace.set_input(image, label, preview)
        if image is not None:  # first, so the worker computes while the rest is drawn
            self.judging.request_predictions(preview=self._in_motion())
        self.input_side.show_seen(preview, panel.note(), face=panel is self.face_panel, shown=image is not None,
                                  photo=photo, sizes=sizes, photos=panel is self.image_panel and self.image_panel.photos)
        self.input_label.setText(f"The columns judge {label}" if image is not None else "")
        if image is None:
            self.columns_scroll.clear_columns(self._empty_message())

    def _in_motion(self) -> bool:
        """A stroke is being drawn or the angle slider dragged: more input follows at once."""
        panel = self.current_panel()
        if panel is self.draw_panel:
            return self.canvas.stroking
        return panel is self.rotate_panel and self.rotate_panel.angle.isSliderDown()

    def _empty_message(self) -> str:
        panel = self.current_panel()
        if panel is self.draw_panel:
            return "Draw a digit to see this posterior's belief."
        if panel is self.image_panel:
            what = "a photo" if self.workspace.task == "images" else "an image"
            return f"Open {what} to see this posterior's belief."
        if panel is self.face_panel:
            return "Open a photo with a face to see this posterior's belief about its age."
        return "Pick an image to rotate."

    def _on_sampling_changed(self) -> None:
        try:  # a count whose draws cannot fit in memory is refused, with the estimate
            for column in self.workspace.ready_columns():
                column.posterior.check_prediction(column.samples(self.samples.value()))
        except Exception as exc:  # noqa: BLE001
            QMessageBox.warning(self, "Too many samples", str(exc))
            self.samples.blockSignals(True)
            self.samples.setValue(self.workspace.num_samples)
            self.samples.blockSignals(False)
            return
        self.workspace.set_sampling(self.samples.value(), self.level.value() / 100)
        self.columns_scroll.show_headers(self.workspace)
        self.session.save_state()
        self.judging.request_predictions()

    def run_sweep(self) -> None:
        """Show the Rotate tab and sweep its image (as its button does)."""
        self.modes.setCurrentWidget(self.rotate_panel)
        self.rotate_panel.sweep.click()

    def _on_column_diagnostics_requested(self, key: str) -> None:
        """Open the column's Diagnostics window (what its file records about convergence)."""
        from app.views.diagnostics import DiagnosticsWindow

        column = self.workspace.column(key)
        if column is None:
            return
        window = DiagnosticsWindow(column.posterior, column.title(self.workspace.num_samples),
                                   self.workspace.class_names, self)
        window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        window.help_requested.connect(self.show_help)
        self.diagnostics_window = window  # the latest, for tests and screenshots
        window.show()

    # ------------------------------------------------------------------- help
    def show_help(self, section: str | None = None) -> None:
        """The help page, at ``section`` (an anchor of the page: a clicked term's paragraph);
        without one, on the Dataset tab, at the Dataset tab's measures."""
        from app.views.help_dialog import HelpDialog

        if getattr(self, "help_dialog", None) is None:
            self.help_dialog = HelpDialog(self)
        self.help_dialog.show()
        self.help_dialog.raise_()
        if not section and self.views.currentWidget() is self.dataset_view:
            section = "dataset"
        self.help_dialog.show_section(section or None)

    def show_about(self) -> None:
        QMessageBox.about(self, ABOUT_TITLE, about_text())

    # ------------------------------------------------------------------ close
    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._geometry_changed()

    def moveEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().moveEvent(event)
        self._geometry_changed()

    def _geometry_changed(self) -> None:
        if getattr(self, "session", None) is not None:  # Qt resizes the window while it is built
            self.session.geometry_changed()

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.training_dialog is not None and not self.training_dialog.stop_to_quit():
            event.ignore()
            return
        self.session.close()
        self.sweeps.cancel()
        self.calibrating.cancel()
        self.inference.shutdown()
        from PySide6.QtCore import QThreadPool

        QThreadPool.globalInstance().waitForDone(10_000)
        super().closeEvent(event)

