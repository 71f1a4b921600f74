"""The main window: an input on the left (draw, rotate, image), one column per posterior on
the right, all judging the same input side by side."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import settings as app_settings
from app.controllers.inference import ColumnRequest, InferenceController
from app.help import ABOUT_TITLE, about_text
from app.plots import style
from app.views.column import VIEW_NAMES, ColumnView
from app.views.face import FacePanel
from app.views.modes import DrawPanel, ImagePanel, ModePanel, RotatePanel
from app.views.preview import PreviewView
from app.views.sweep import SweepView
from app.workers import function_worker, generator_worker
from app.workspace import Workspace, images_words, menu_group, task_of
from core.engine.naming import posterior_title, samples_used
from core.outputs.export import PLOT_FILTERS, slug, with_suffix_from_filter

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
#: Draws per column while a stroke or the angle slider is moving (see MainWindow._refine).
PREVIEW_SAMPLES = 16
#: torch's intra-op threads for those previews. At 16 draws a second thread gains little, and
#: after a pause its OpenMP team wakes late on this machine (bench_interactive.py --samples 16
#: --pause 0.2: p50 14.5–15.7 ms with 2 threads, 11.1–12.9 ms with 1). bench_gui with SGHMC
#: training beside it, hand's stroke → painted p95 56–64 ms with 2 against 48–51 ms with 1;
#: with nothing training the two are equal within noise. Full counts keep the default.
PREVIEW_THREADS = 1
#: Shortest time between two reads of a changing input. bench_gui, a move every 8 ms: each move
#: painted after p50 47–53 / p95 68–73 ms with a 16 ms tick, 38–40 / 52–54 ms with 4 ms.
INPUT_TICK_MS = 4
DATASET_TIP = ("Every posterior on a whole test set: accuracy, calibration, confusion, "
               "uncertainty in and out of distribution")
#: Where the columns of each task are remembered between launches.
SAVED_COLUMNS = {"digits": "workspace/columns", "faces": "workspace/face_columns", "images": "workspace/image_columns"}
#: How long “Removed X — Undo” stays in the status bar.
REMOVED_NOTE_MS = 20_000
#: How long the window's size and place must rest before they are saved.
GEOMETRY_SAVE_MS = 500
LOADING_NOTE = "Loading the posteriors… (you can draw meanwhile)"
EMPTY_NOTE = "No posterior yet: add one with “Add posterior”, open a file (Ctrl+O) or train one (Ctrl+T)."


DIGIT_TIP = "What the model sees: the drawing cropped, scaled to 20×20 and centred by mass in 28×28"
FACE_TIP = "What the face heads judge: the face found in the photo, aligned and cropped"
PHOTO_TIP = ("What the model sees: the photo upright, its shorter side resized to the model's side and the "
             "centre cut square, as its training images were read")


def preview_note(face: bool, shown: bool, photo: str = "", sizes: int = 1, photos: bool = False) -> str:
    """The line beside the picture of what the posteriors see (a black square when empty);
    ``photo``: what the first column of one's own images reads ("colour 32×32 images"), if shown;
    ``sizes``: how many sizes or kinds the columns read; ``photos``: the columns judge photos."""
    if photos and not shown:
        return "The photo the posteriors judge will show here, as they see it."
    if photo:
        how = "shorter side resized, centre cut square"
        if sizes > 1:
            return (f"The first column sees this photo as it saw its training images ({photo}: {how}); "
                    "each of the others reads it at its own size.")
        return f"The posteriors see this photo as they saw their training images ({photo}: {how})."
    if face:
        return "The posteriors see this aligned face." if shown else "The aligned face the posteriors judge will show here."
    return "The model sees this 28×28 image." if shown else "The 28×28 image the model judges will show here."


def missing_columns_note(gone: list[str], failed: list[str], defaults: bool, last_time: bool = True) -> str:
    """One sentence for the status bar: the posteriors of last time (or the default ones) that
    are not shown, and why."""
    def names(files: list[str]) -> str:
        quoted = [f"“{name}”" for name in files]
        return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]

    parts = []
    if gone:
        parts.append(f"{names(gone)} {'is' if len(gone) == 1 else 'are'} no longer there")
    if failed:
        parts.append(f"{names(failed)} could not be opened")
    after = "; the default posteriors are shown instead." if defaults else "; the rest are shown."
    return ("Of last time's posteriors, " if last_time else "Of the default posteriors, ") + " and ".join(parts) + after


def readable(exc: BaseException, path: Path) -> str:
    """An engine error as a dialog sentence: the file is named, its folder left out."""
    text = str(exc) or "it could not be read"
    for form in (str(path.expanduser().resolve()), str(path)):
        text = text.replace(form, f"“{path.name}”")
    return text


class MainWindow(QMainWindow):
    """Signals
    -------
    columns_shown
        The column widgets were rebuilt (added, removed or moved).
    """

    columns_shown = Signal()

    def __init__(self, posteriors: list[str] | None = None, image: str | None = None,
                 defer_columns: bool = False) -> None:
        """``defer_columns``: build and return the window without loading its posteriors;
        the caller shows it, then calls :meth:`load_columns` (the launcher does, so the window
        appears before the weights are read). Either way a task's columns are read only when
        its tab first opens: the face heads wait for the Face tab."""
        super().__init__()
        style.configure()
        self.setWindowTitle("bayescope")
        self.setAcceptDrops(True)
        self.workspace = Workspace(self)
        self.inference = InferenceController(self)
        self.training_dialog = None
        self.column_views: dict[str, ColumnView] = {}
        self._sweep_worker = None
        self._export_worker = None
        self._datasets: dict[str, object] = {}
        self.last_update_ms: float | None = None
        self._failures_told: set[str] = set()  # columns whose failure the status bar has told
        self._request_started = 0.0
        self._input_waiting = False  # an input change arrived while the frame's timer ran

        # ----------------------------------------------------------- left: input
        self.draw_panel = DrawPanel()
        self.canvas = self.draw_panel.canvas
        self.rotate_panel = RotatePanel(self._load_dataset)
        self.image_panel = ImagePanel()
        self.face_panel = FacePanel()
        self._rotate_source: ModePanel = self.draw_panel  # the last of Draw and Image to change
        self.modes = QTabWidget()
        self.modes.setToolTip("")
        for panel, tip in ((self.draw_panel, "Draw a digit with the mouse or a pen"),
                           (self.rotate_panel, "Rotate a digit, a letter or your drawing"),
                           (self.image_panel, "Open or drop a picture of a digit, or a photo for the posteriors of your own images"),
                           (self.face_panel, "Open or drop a photo with a face: the posteriors judge its age group")):
            index = self.modes.addTab(panel, panel.mode_name)
            self.modes.setTabToolTip(index, tip)
        self.preview = PreviewView()
        self.preview_note = QLabel(preview_note(face=False, shown=False))
        self.preview_note.setWordWrap(True)
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet(f"color: {style.WARNING};")
        notes = QVBoxLayout()
        notes.addWidget(self.preview_note)
        notes.addWidget(self.warning, 1)
        preview_row = QHBoxLayout()
        preview_row.addWidget(self.preview)
        preview_row.addLayout(notes, 1)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.modes, 1)
        left_layout.addLayout(preview_row)
        left.setMinimumWidth(260)

        # ---------------------------------------------------------- right: columns
        self.samples = QSpinBox(minimum=1, maximum=1000, value=100, singleStep=10)
        self.samples.setToolTip(
            "How many posterior draws (plausible models) judge the input. MC dropout and the "
            "variational posteriors draw as many as asked; sampled posteriors (SGHMC, HMC ...) "
            "hold a fixed set and use at most that many: their column header says how many."
        )
        self.level = QSpinBox(minimum=50, maximum=99, value=90, suffix=" %")
        self.level.setToolTip("Credible interval: the range that holds this share of the draws, per class")
        self.add_button = QToolButton(text="Add posterior")
        self.add_button.setToolTip("Add a column: a bundled posterior, one you trained, or a file (Ctrl+O)")
        self.add_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.add_menu = QMenu(self.add_button)
        self.add_menu.aboutToShow.connect(self._fill_add_menu)
        self.add_button.setMenu(self.add_menu)
        self.input_label = QLabel()
        self.input_label.setObjectName("inputLabel")
        top = QHBoxLayout()
        top.addWidget(self.add_button)
        top.addSpacing(12)
        top.addWidget(QLabel("Samples"))
        top.addWidget(self.samples)
        top.addWidget(QLabel("Interval"))
        top.addWidget(self.level)
        top.addSpacing(12)
        top.addWidget(self.input_label, 1)

        self.columns_row = QHBoxLayout()
        self.columns_row.setContentsMargins(0, 0, 0, 0)
        self.columns_row.setSpacing(4)
        self.empty_note = QLabel(EMPTY_NOTE)
        self.empty_note.setWordWrap(True)
        self.empty_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.columns_row.addWidget(self.empty_note)
        columns_widget = QWidget()
        columns_widget.setLayout(self.columns_row)
        self.columns_scroll = QScrollArea()
        self.columns_scroll.setWidgetResizable(True)
        self.columns_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.columns_scroll.setWidget(columns_widget)
        self.sweep_view = SweepView()
        self.views = QTabWidget()
        self.views.addTab(self.columns_scroll, "This input")
        self.views.setTabToolTip(0, "Every posterior's belief about the current input, side by side")
        self.views.addTab(self.sweep_view, "Rotation sweep")
        self.views.setTabToolTip(1, "How belief changes as the image is rotated (Rotate tab → Sweep)")
        # The Dataset tab is built when first opened: it needs the engine (torch), which the
        # launcher loads after the window is shown.
        self._dataset_view = None
        self._dataset_placeholder = QWidget()
        self.views.addTab(self._dataset_placeholder, "Dataset")
        self.views.setTabToolTip(2, DATASET_TIP)
        self.views.currentChanged.connect(self._on_views_current_changed)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addLayout(top)
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
        # While a stroke or the angle slider moves, columns are judged from PREVIEW_SAMPLES
        # draws (the first rows of a variational posterior's bank or of a sampler's draws; 16
        # dropout masks); the full count follows as soon as the motion pauses.
        self._refine = QTimer(self, singleShot=True, interval=40)
        self._refine.timeout.connect(self._on_refine_timeout)
        for panel in (self.draw_panel, self.rotate_panel, self.image_panel, self.face_panel):
            panel.input_changed.connect(self._on_panel_input_changed)
        self.face_panel.open_requested.connect(self.open_image_dialog)
        self.modes.currentChanged.connect(self._on_modes_current_changed)
        self.rotate_panel.sweep_requested.connect(self._on_rotate_sweep_requested)
        self.rotate_panel.sweep_cancelled.connect(self.cancel_sweep)
        self.rotate_panel.data_folder_requested.connect(self.choose_data_folder)
        self.rotate_panel.download_requested.connect(self._on_rotate_panel_download_requested)
        self.image_panel.open_requested.connect(self.open_image_dialog)
        self.samples.valueChanged.connect(self._on_sampling_changed)
        self.level.valueChanged.connect(self._on_sampling_changed)
        self.workspace.columns_changed.connect(self._on_workspace_columns_changed)
        self.workspace.prediction_changed.connect(self._on_workspace_prediction_changed)
        self.inference.predictions_computed.connect(self._on_inference_predictions_computed)
        self.inference.request_finished.connect(self._on_inference_request_finished)
        self.inference.prediction_failed.connect(self._on_inference_prediction_failed)
        self.inference.column_failed.connect(self._on_inference_column_failed)
        self.sweep_view.export_requested.connect(self._on_sweep_export_requested)
        for box in self.findChildren(QAbstractSpinBox):
            box.installEventFilter(self)

        self._build_menus()
        # “Removed X — Undo”: beside the status bar's messages (a message would hide a plain widget).
        self._undo_column_next = False  # Ctrl+Z brings back a removed column, not a stroke
        self.removed_note = QLabel()
        self.undo_remove_button = QToolButton(text="Undo")
        self.undo_remove_button.setToolTip("Bring the removed column back at its place (Ctrl+Z)")
        self.undo_remove_button.clicked.connect(self.undo_remove_column)
        self.removed_bar = QWidget()
        removed_row = QHBoxLayout(self.removed_bar)
        removed_row.setContentsMargins(0, 0, 0, 0)
        removed_row.addWidget(self.removed_note)
        removed_row.addWidget(self.undo_remove_button)
        self.removed_bar.hide()
        self.statusBar().addPermanentWidget(self.removed_bar)
        # Where the work runs, said once the engine is loaded (load_columns): View ▸ Compute on.
        self.device_label = QLabel()
        self.device_label.setToolTip("Where predictions, evaluations and training run; "
                                     "View ▸ Compute on chooses another place")
        self.statusBar().addPermanentWidget(self.device_label)
        self._removed_timer = QTimer(self, singleShot=True, interval=REMOVED_NOTE_MS)
        self._removed_timer.timeout.connect(self.removed_bar.hide)
        self.canvas.stroke_finished.connect(self._on_canvas_stroke_finished)
        # Posterior files per task, read when the task's tab first opens (after load_columns).
        self._unread_columns: dict[str, list[Path]] = {}
        self._columns_from_last_time: set[str] = set()
        self._columns_allowed = False
        self._state_ready = False  # nothing is saved before the settings were read back
        self._loading_columns = False
        self._geometry_timer = QTimer(self, singleShot=True, interval=GEOMETRY_SAVE_MS)
        self._geometry_timer.timeout.connect(self._save_state)
        self._restore_settings(posteriors)
        self._on_modes_current_changed(self.modes.currentIndex())
        self._state_ready = True
        self.workspace.columns_changed.connect(self._save_state)
        self.draw_panel.brush.valueChanged.connect(self._save_state)
        self.modes.currentChanged.connect(self._save_state)
        if image:
            self.load_image_file(Path(image))
        if not defer_columns:
            self.load_columns()
        elif self._unread_columns.get(self.workspace.task):
            self.empty_note.setText(LOADING_NOTE)

    # ------------------------------------------------------------------ menus
    def _action(self, menu: QMenu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if tip:
            action.setStatusTip(tip)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self._action(file_menu, "Open posterior…", self.open_posterior_dialog, QKeySequence.StandardKey.Open,
                     "Add a column from a posterior file")
        self._action(file_menu, "Open image…", self.open_image_dialog, "Ctrl+I", "Judge a picture of a digit")
        file_menu.addSeparator()
        self._action(file_menu, "Export comparison…", self.export_comparison_dialog, "Ctrl+E",
                     "Write every column's plots, the numbers behind them and where each posterior comes from into one folder")
        self._action(file_menu, "Save window picture…", self.save_screenshot_dialog, "Ctrl+Shift+E")
        file_menu.addSeparator()
        self._action(file_menu, "Choose data folder…", self.choose_data_folder,
                     tip="The one data folder, holding “mnist”, “notmnist” and “utkface”: read by the Rotate "
                         "and Dataset tabs and the training dialog")
        file_menu.addSeparator()
        self._action(file_menu, "Quit", self.close, QKeySequence.StandardKey.Quit)
        edit_menu = self.menuBar().addMenu("&Edit")
        self.undo_action = self._action(edit_menu, "Undo stroke", self.undo, QKeySequence.StandardKey.Undo,
                                        "Undo the last stroke, or bring back the column removed last")
        self.clear_action = self._action(edit_menu, "Clear drawing", self._clear_drawing, "Delete")
        brush = self.draw_panel.brush
        self._action(edit_menu, "Bigger brush", lambda: brush.setValue(brush.value() + 4), "]")
        self._action(edit_menu, "Smaller brush", lambda: brush.setValue(brush.value() - 4), "[")
        view_menu = self.menuBar().addMenu("&View")
        for i in range(self.modes.count()):
            self._action(view_menu, f"{self.modes.tabText(i)} mode", lambda _=False, i=i: self.modes.setCurrentIndex(i), f"Ctrl+{i + 1}")
        view_menu.addSeparator()
        self._action(view_menu, "This input", lambda: self.views.setCurrentIndex(0), "Alt+1")
        self._action(view_menu, "Rotation sweep", lambda: self.views.setCurrentIndex(1), "Alt+2")
        self._action(view_menu, "Dataset", lambda: self.views.setCurrentIndex(2), "Alt+3")
        self._action(view_menu, "Clear cached evaluations", lambda: self.dataset_view.clear_cache(),
                     tip="Forget the Dataset tab's stored results; the next evaluation recomputes them")
        view_menu.addSeparator()
        self.device_menu = view_menu.addMenu("Compute on")
        self.device_menu.setToolTipsVisible(True)
        self.device_menu.aboutToShow.connect(self._fill_device_menu)
        self._action(view_menu, "Run the rotation sweep", self.run_sweep, "Ctrl+R",
                     "Rotate the Rotate tab's image from 0° to 180° and plot every column against the angle")
        run_menu = self.menuBar().addMenu("&Posterior")
        run_menu.addMenu(self.add_menu).setText("Add posterior")
        self._action(run_menu, "Train a posterior…", self.show_training_dialog, "Ctrl+T")
        help_menu = self.menuBar().addMenu("&Help")
        self._action(help_menu, "How to read this window", self.show_help, QKeySequence.StandardKey.HelpContents)
        self._action(help_menu, "About bayescope", self.show_about)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        # Spin boxes claim Delete and Ctrl+Z for their text; here they act on the drawing
        # whatever has focus, so the shortcut must win over the box.
        if (event.type() == QEvent.Type.ShortcutOverride and isinstance(obj, QAbstractSpinBox)
                and (event.matches(QKeySequence.StandardKey.Undo) or event.key() == Qt.Key.Key_Delete)):
            event.ignore()
            return True
        return super().eventFilter(obj, event)

    # --------------------------------------------------------------- settings
    def _restore_settings(self, posteriors: list[str] | None) -> None:
        """Every value read back is checked (``app.settings.read_*``): a value that is not
        what this window would have written gives way to its default, never to an error."""
        geometry = app_settings.read_bytes("window/geometry")
        if geometry is None or not self.restoreGeometry(geometry):
            free = self.screen().availableGeometry()  # first launch: 1400×860, or the free area
            self.resize(min(1400, free.width()), min(860, free.height()))
        brush = self.draw_panel.brush
        brush.setValue(app_settings.read_int("draw/brush", self.canvas.brush_size, brush.minimum(), brush.maximum()))
        for box, key in ((self.samples, "sampling/samples"), (self.level, "sampling/level")):
            box.blockSignals(True)
            box.setValue(app_settings.read_int(key, box.value(), box.minimum(), box.maximum()))
            box.blockSignals(False)
        self.workspace.set_sampling(self.samples.value(), self.level.value() / 100)
        saved = {task: [app_settings.resolve_reference(r) for r in app_settings.read_list(key)]
                 for task, key in SAVED_COLUMNS.items()}
        self._unread_columns = {"digits": saved["digits"] or app_settings.default_columns(),
                                "faces": saved["faces"] or app_settings.default_face_columns(),
                                "images": saved["images"]}
        if posteriors:
            self._unread_columns["digits"] = [Path(p) for p in posteriors]
        # Tasks whose columns come from last time: a file gone since is said once, then forgotten.
        self._columns_from_last_time = {task for task in SAVED_COLUMNS if saved[task]} - ({"digits"} if posteriors else set())
        self.workspace.unread_tasks = {task for task, unread in self._unread_columns.items() if unread}
        self._columns_asked = bool(posteriors)  # asked for on the command line: failures get a dialog
        self.modes.setCurrentIndex(app_settings.read_int("workspace/mode", 0, 0, self.modes.count() - 1))

    def load_columns(self) -> None:
        """Read the current task's posteriors (the other task's wait for its tab)."""
        self._columns_allowed = True
        self.set_device(app_settings.read_device(), announce=False)
        self._read_columns(self.workspace.task)
        if self.current_panel() is self.image_panel:
            self._read_columns("images")
            self._show_task()

    # ----------------------------------------------------------------- device
    def _fill_device_menu(self) -> None:
        """Automatic, the CPU and each GPU found (only the first two with a CPU-only torch)."""
        from core.engine.device import device_choices

        self.device_menu.clear()
        current = app_settings.read_device()
        for value, words in device_choices():
            action = self.device_menu.addAction(words)
            action.setCheckable(True)
            action.setChecked(value == current)
            action.setData(value)
            if value == "auto":
                action.setToolTip("A GPU when there is one, else the CPU")
            action.triggered.connect(lambda _=False, value=value: self.set_device(value))

    def set_device(self, value: str, announce: bool = True) -> None:
        """Run predictions, evaluations and training on ``value`` (``auto``, ``cpu``, ``cuda:N``,
        ``mps``), remember it, and say where in the status bar."""
        from core.engine.device import describe_device, resolve_device

        try:
            device = resolve_device(value)
        except ValueError:  # gone since the menu was filled
            value, device = "auto", resolve_device("auto")
        if announce:
            app_settings.set_device(value)
        self.workspace.set_device(device)
        where = describe_device(device)
        self.device_label.setText(f"Computing on {where}")
        if announce:
            self.statusBar().showMessage(f"Predictions, evaluations and training now run on {where}.", 8000)
            self._request_predictions()

    def _read_columns(self, task: str) -> None:
        if not self._columns_allowed or task not in self._unread_columns:
            return
        paths = self._unread_columns.pop(task)
        from_last_time = task in self._columns_from_last_time
        if paths:
            self.empty_note.setText(LOADING_NOTE)
            self.empty_note.repaint()  # say so before the weights are read
        self._loading_columns = True
        try:
            gone = [path.name for path in paths if from_last_time and not path.exists()]
            failed = [path.name for path in paths if not (from_last_time and not path.exists())
                      and not self.add_posterior(path, quiet=not self._columns_asked)]
            defaults = from_last_time and (gone or failed) and not self.workspace.columns_of(task)
            if defaults:
                defaults_of = {"digits": app_settings.default_columns, "faces": app_settings.default_face_columns}
                for path in defaults_of[task]() if task in defaults_of else []:
                    self.add_posterior(path, quiet=True)
        finally:
            self._loading_columns = False
        self.empty_note.setText(EMPTY_NOTE)
        self.workspace.columns_read(task)
        if (gone or failed) and not self._columns_asked:
            self.statusBar().showMessage(missing_columns_note(gone, failed, bool(defaults), from_last_time), 20_000)
        self._save_state()  # what could not be opened is said once, not at every start

    def _save_state(self) -> None:
        """Save the window's state as it changes (columns, samples, interval, mode, brush):
        a crash or a killed process keeps what the person set up."""
        if self._state_ready and not self._loading_columns:
            self.save_settings()

    def save_settings(self) -> None:
        s = app_settings.settings()
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("draw/brush", self.draw_panel.brush.value())
        s.setValue("sampling/samples", self.samples.value())
        s.setValue("sampling/level", self.level.value())
        for task, key in SAVED_COLUMNS.items():
            unread = self._unread_columns.get(task)  # a tab never opened keeps last time's columns
            # A column whose posterior failed on its input is not reopened at the next start.
            paths = unread if unread is not None else [c.key for c in self.workspace.columns_of(task) if c.failure is None]
            s.setValue(key, [app_settings.column_reference(p) for p in paths])
        s.setValue("workspace/mode", self.modes.currentIndex())
        s.sync()

    # ---------------------------------------------------------------- columns
    def add_posterior(self, path: Path, quiet: bool = False) -> bool:
        """Add a column for a posterior file; say why not in a dialog (or stay quiet at start-up)."""
        try:
            column = self.workspace.add_posterior(path)
        except Exception as exc:  # noqa: BLE001 — every failure becomes a sentence, never a crash
            log.warning("could not add %s: %s", path, exc)
            if not quiet:
                QMessageBox.warning(self, "Cannot use this posterior", readable(exc, Path(path)))
            return False
        if task_of(column.posterior) == "images" and not self._loading_columns:
            if self.current_panel() is not self.image_panel and not quiet:
                self.modes.setCurrentWidget(self.image_panel)  # the one tab that judges it
                self.statusBar().showMessage(
                    f"“{column.title(self.workspace.num_samples)}” reads your own "
                    f"{images_words(column.posterior)}: open a photo here to see its belief.", 15_000)
            self._show_task()
        return True

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

    def _fill_add_menu(self) -> None:
        self.add_menu.clear()
        shown = set(self.workspace.column_keys())
        bundled = set(app_settings.bundled_models()) | set(app_settings.default_face_columns())
        groups: dict[str, list[tuple[str, Path]]] = {}
        # only what this tab can judge: the Image tab offers one's own images beside its digits
        tasks = {self.workspace.task} | ({"images"} if self.current_panel() is self.image_panel else set())
        for path in app_settings.available_models():
            entry = self._menu_entry(path)
            if entry is None or entry[1] not in tasks:
                continue
            title, _, group = entry
            origin = "bundled" if path in bundled else "yours"
            groups.setdefault(group, []).append((f"{title} ({origin})", path))
        # one section per model: a comparison within a section differs in method only
        for group in sorted(groups, key=lambda g: (not g.startswith("Same model"), g)):
            self.add_menu.addSection(group)
            for text, path in groups[group]:
                key = str(path.resolve())
                action = self.add_menu.addAction(text)
                action.setCheckable(True)
                action.setChecked(key in shown)
                action.setEnabled(key not in shown)
                action.triggered.connect(lambda _=False, p=path: self.add_posterior(p))
        self.add_menu.addSeparator()
        self.add_menu.addAction("Open a posterior file…", self.open_posterior_dialog)
        self.add_menu.addAction("Train a new posterior…", self.show_training_dialog)

    _titles: dict[tuple[str, float], tuple[str, str, str] | None] = {}

    def _menu_entry(self, path: Path) -> tuple[str, str, str] | None:
        """The posterior's title in words, its task and its group in the menu (its tier, else its
        model), loaded once per file version; None if unusable."""
        key = (str(path), path.stat().st_mtime)
        if key not in self._titles:
            from core.engine.store import load_posterior

            try:
                posterior = load_posterior(path)
                title = posterior_title(posterior, samples_used(posterior, posterior.default_num_samples))
                self._titles[key] = (title, task_of(posterior), menu_group(posterior))
            except Exception:  # noqa: BLE001 — an unusable file is simply not offered
                self._titles[key] = None
        return self._titles[key]

    def _on_workspace_columns_changed(self) -> None:
        keys = self.workspace.column_keys()
        for key in list(self.column_views):
            if key not in keys:
                view = self.column_views.pop(key)
                self.columns_row.removeWidget(view)
                view.hide()  # at once: deleteLater waits for the event loop
                view.deleteLater()
        for i, column in enumerate(self.workspace.columns):
            view = self.column_views.get(column.key)
            if view is None:
                view = ColumnView(column.key, self.workspace.class_names)
                view.remove_requested.connect(self.remove_column)
                view.move_requested.connect(self.workspace.move)
                view.export_requested.connect(self._on_column_export_requested)
                view.diagnostics_requested.connect(self._on_column_diagnostics_requested)
                view.title_resized.connect(self._align_titles)
                self.column_views[column.key] = view
            self.columns_row.removeWidget(view)
            self.columns_row.insertWidget(i, view, 1)
            view.set_header(column, self.workspace.num_samples)
        # while any column says its chains disagree, all keep that room: plots stay aligned
        reserve = any(view.has_warning for view in self.column_views.values())
        marked = any(self.workspace.reference_for(c) is not None for c in self.workspace.columns)
        for view in self.column_views.values():
            view.reserve_warning_room(reserve)
            view.reserve_reference_room(marked)
        self._align_titles()
        self.empty_note.setVisible(not keys)
        self.columns_shown.emit()
        self._request_predictions()

    def _align_titles(self) -> None:
        """Every column's title gets the room of the tallest: a title that wraps to three lines
        in a narrow column would otherwise start its plots below its neighbours'."""
        views = list(self.column_views.values())
        height = max((view.title_height() for view in views), default=0)
        for view in views:
            view.set_title_room(height)

    def _on_workspace_prediction_changed(self, key: str) -> None:
        column = self.workspace.column(key)
        view = self.column_views.get(key)
        if column is not None and view is not None:
            view.set_header(column, self.workspace.num_samples)
            reference = self.workspace.reference_for(column)
            view.show_column(column, self.workspace.class_names, self.workspace.level,
                             full=column.samples(self.workspace.num_samples),
                             reference=None if reference is None else reference.prediction,
                             reference_info=None if reference is None else reference.posterior.info)

    def remove_column(self, key: str) -> None:
        """Remove a column; the status bar offers to bring it back (Undo, or Ctrl+Z)."""
        column = self.workspace.remove(key)
        if column is None:
            return
        self._show_task()  # the last column of one's own images gone: the Image tab judges digits
        self.removed_note.setText(f"Removed “{column.title(self.workspace.num_samples)}”")
        self.removed_bar.show()
        self._removed_timer.start()
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

    def _clear_drawing(self) -> None:
        self.canvas.clear()
        self._on_canvas_stroke_finished()

    def open_posterior_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open posterior", app_settings.last_folder("posterior"),
                                              "bayescope posterior (*.pt)")
        if path:
            app_settings.remember_folder("posterior", path)
            self.add_posterior(Path(path))

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
        "Rotate": "Pick an image and turn it with the slider; Ctrl+R sweeps 0–180°.",
        "Image": "Open a picture of a digit, or a photo for the posteriors of your own images (Ctrl+I), or drop one on the window.",
        "Face": "Open a photo with a face (Ctrl+I) or drop one on the window; the columns judge its age group.",
    }

    def _on_modes_current_changed(self, index: int) -> None:
        self.statusBar().showMessage(self.MODE_HINTS.get(self.modes.tabText(index), ""))
        panel = self.modes.widget(index)
        if panel is self.image_panel:
            self._read_columns("images")  # whether there are any decides which columns judge
        task = self._task_of_panel(panel)
        self._read_columns(task)
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
            self._request_predictions(preview=self._in_motion())
        self.warning.setText(panel.note())
        self.preview.show_image(preview)
        self.preview_note.setText(preview_note(face=panel is self.face_panel, shown=image is not None,
                                               photo=photo if preview is not None else "", sizes=sizes,
                                               photos=panel is self.image_panel and self.image_panel.photos))
        self.preview.setToolTip(PHOTO_TIP if photo else FACE_TIP if panel is self.face_panel else DIGIT_TIP)
        self.input_label.setText(f"Judging {label}" if image is not None else "")
        if image is None:
            for column in self.workspace.columns:
                view = self.column_views.get(column.key)
                if view is not None:
                    view.clear_column(self._empty_message())

    def _in_motion(self) -> bool:
        """A stroke is being drawn or the angle slider dragged: more input follows at once."""
        panel = self.current_panel()
        if panel is self.draw_panel:
            return self.canvas.stroking
        return panel is self.rotate_panel and self.rotate_panel.angle.isSliderDown()

    def _on_refine_timeout(self) -> None:
        if self._in_motion():
            self._refine.start()
        elif self.workspace.image is not None:
            self._request_predictions()

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

    def _request_predictions(self, preview: bool = False) -> None:
        if self.workspace.image is None:
            for view in self.column_views.values():
                view.clear_column(self._empty_message())
            return
        full = self.workspace.num_samples
        judged = list(self.workspace.columns)
        reference = self.workspace.reference
        if reference is not None and reference.key not in self.workspace.column_keys():
            judged.append(reference)  # judged beside the tier's columns, drawn as marks on theirs
        requests = [ColumnRequest(c.key, c.posterior, min(c.samples(full), PREVIEW_SAMPLES) if preview else c.samples(full))
                    for c in judged]
        if preview:
            self._refine.start()
        else:
            self._refine.stop()
        self._request_started = time.perf_counter()
        self.inference.request(self.workspace.image, requests, self.workspace.level,
                               threads=PREVIEW_THREADS if preview else None)

    def _on_inference_predictions_computed(self, request: int, predictions: list) -> None:
        if self.workspace.image is None:  # the input was cleared meanwhile
            return
        recovered = any(c is not None and c.failure is not None for c in map(self.workspace.column, dict(predictions)))
        self.workspace.set_predictions(predictions)
        if recovered:  # it judges again: it is reopened at the next start
            self._save_state()

    def _on_inference_column_failed(self, request: int, key: str, message: str) -> None:
        """One column's posterior could not judge the input: that column says why, the others
        keep their predictions, and it is left out of the columns reopened at the next start."""
        column = self.workspace.column(key)
        if self.workspace.image is None or column is None:
            return
        first = column.failure is None
        self.workspace.set_failure(key, message)
        if first:
            self._save_state()
        if key not in self._failures_told:  # once per column and session
            self._failures_told.add(key)
            self.statusBar().showMessage(
                f"“{Path(key).name}” could not judge the input (its column says why); "
                "it will not be reopened at the next start.", 20_000)

    def _on_inference_request_finished(self, request: int) -> None:
        self.last_update_ms = (time.perf_counter() - self._request_started) * 1000

    def _on_inference_prediction_failed(self, message: str) -> None:
        QMessageBox.critical(self, "Prediction failed", message)

    def _on_sampling_changed(self) -> None:
        try:  # a count whose draws cannot fit in memory is refused, with the estimate
            for column in self.workspace.columns:
                column.posterior.check_prediction(column.samples(self.samples.value()))
        except Exception as exc:  # noqa: BLE001
            QMessageBox.warning(self, "Too many samples", str(exc))
            self.samples.blockSignals(True)
            self.samples.setValue(self.workspace.num_samples)
            self.samples.blockSignals(False)
            return
        self.workspace.set_sampling(self.samples.value(), self.level.value() / 100)
        for column in self.workspace.columns:
            view = self.column_views.get(column.key)
            if view is not None:
                view.set_header(column, self.workspace.num_samples)
        self._align_titles()  # a title's draw count may wrap it to another number of lines
        self._save_state()
        self._request_predictions()

    def open_image_dialog(self) -> None:
        """A photo with a face in the Face tab, else an image of a digit."""
        if self.current_panel() is self.face_panel:
            title, formats = "Open a photo with a face", "Photos (*.jpg *.jpeg *.png *.webp *.bmp *.tif *.tiff)"
        else:
            what = "a photo" if self._task_of_panel(self.image_panel) == "images" else "an image of a digit"
            title, formats = f"Open {what}", "Images (*.png *.jpg *.jpeg *.bmp *.gif *.tif *.tiff *.webp)"
        path, _ = QFileDialog.getOpenFileName(self, title, app_settings.last_folder("image"), formats)
        if path:
            app_settings.remember_folder("image", path)
            self.load_image_file(Path(path))

    def load_image_file(self, path: Path) -> bool:
        """Open an image: a photo in the Face tab, else one in the Image tab (a photo for the
        posteriors of one's own images when there are any, else a digit)."""
        panel = self.face_panel if self.current_panel() is self.face_panel else self.image_panel
        if panel is self.image_panel:  # a photo for one's own images, or a digit: which columns judge it
            self._read_columns("images")
            self.image_panel.set_judges_photos(self._task_of_panel(self.image_panel) == "images")
        try:
            panel.load(path)
        except Exception as exc:  # noqa: BLE001 — bad files get a sentence, never a crash
            log.warning("could not load image %s: %s", path, exc)
            QMessageBox.warning(self, "Cannot use this image", readable(exc, Path(path)))
            return False
        self.modes.setCurrentWidget(panel)
        return True

    def show_image_array(self, image: np.ndarray, label: str) -> None:
        """Judge a ready 28×28 image in every column (shown in the Image tab)."""
        self.image_panel.set_array(image, label)
        self.modes.setCurrentWidget(self.image_panel)
        self.views.setCurrentIndex(0)

    def show_photo_array(self, image: np.ndarray, label: str) -> None:
        """Judge one of a person's images (a thumbnail of the Dataset tab, as the models read it)
        in the Image tab, with the columns of their images."""
        from core.engine.data.folder import photo_from_array

        self._read_columns("images")
        self.image_panel.set_judges_photos(True)
        self.image_panel.set_photo(photo_from_array(image, label), label)
        self.modes.setCurrentWidget(self.image_panel)
        self.views.setCurrentIndex(0)

    def show_face_photo(self, image: np.ndarray, name: str) -> None:
        """Judge a face photo (a thumbnail of the Dataset tab) in the Face tab."""
        self.modes.setCurrentWidget(self.face_panel)
        self.face_panel.set_photo(image, name)
        self.views.setCurrentIndex(0)

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt override)
        for url in event.mimeData().urls():
            path = Path(url.toLocalFile())
            if path.suffix.lower() == ".pt":
                self.add_posterior(path)
            elif path.suffix.lower() in IMAGE_SUFFIXES:
                self.load_image_file(path)
            else:
                QMessageBox.warning(self, "Cannot open this file",
                                    f"“{path.name}” is neither a posterior (.pt) nor an image (PNG, JPEG, …).")
        event.acceptProposedAction()

    # ------------------------------------------------------------------- data
    def _load_dataset(self, name: str):
        """MNIST test or notMNIST from the data folder (cached); raises with a sentence."""
        if name not in self._datasets:
            from core.analysis.evaluation import resolve_dataset
            from core.engine.data.locate import DatasetMissingError

            folder = app_settings.data_folder()
            try:
                self._datasets[name] = resolve_dataset(name, folder)
            except DatasetMissingError:
                raise  # names the set, every place looked in, and what to do
            except Exception as exc:  # noqa: BLE001
                what = "MNIST test digits" if name.startswith("mnist") else "notMNIST letters"
                raise ValueError(f"The {what} in the data folder could not be read: {exc}") from exc
        return self._datasets[name]

    def _on_rotate_panel_download_requested(self, name: str) -> None:
        """Download MNIST's test digits into the user cache in the background, then show one."""
        from app.workers import function_worker
        from core.engine.data.locate import download_dataset

        worker = function_worker(download_dataset, name, "test")
        worker.returned.connect(lambda _folder: self._on_data_folder_changed())
        worker.errored.connect(lambda exc: self.rotate_panel.set_download_failed(str(exc)))
        worker.finished.connect(self._on_download_worker_finished)
        self._download_worker = worker  # kept until it has finished
        self.rotate_panel.set_downloading(True)
        worker.start()

    def _on_download_worker_finished(self) -> None:
        self._download_worker = None
        self.rotate_panel.set_downloading(False)

    def _on_data_folder_changed(self) -> None:
        self._datasets.clear()
        self.rotate_panel._on_changed()

    def choose_data_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose the data folder (it holds “mnist”, “notmnist”, “utkface”)",
                                                app_settings.last_folder("data"))
        if path:
            app_settings.set_data_folder(Path(path))
            app_settings.remember_folder("data", path)
            self._on_data_folder_changed()

    # ------------------------------------------------------------------ sweep
    def _on_rotate_sweep_requested(self, image: np.ndarray, label: str) -> None:
        from core.analysis.metrics import rotation_sweeps

        if self._sweep_worker is not None or not self.workspace.columns:
            return
        items = [(c.key, c.posterior, c.samples(self.workspace.num_samples)) for c in self.workspace.columns]
        worker = generator_worker(rotation_sweeps(items, image, level=self.workspace.level))
        worker.yielded.connect(self._on_sweep_worker_yielded)
        worker.returned.connect(lambda sweeps, label=label: self._on_sweep_worker_returned(sweeps, label))
        worker.errored.connect(self._on_sweep_worker_errored)
        worker.finished.connect(self._on_sweep_worker_finished)
        self._sweep_worker = worker
        self.rotate_panel.set_sweep_running(True)
        self.statusBar().showMessage(f"Sweeping {label} from 0° to 180°…")
        worker.start()

    def run_sweep(self) -> None:
        """Show the Rotate tab and sweep its image (as its button does)."""
        self.modes.setCurrentWidget(self.rotate_panel)
        self.rotate_panel.sweep.click()

    def _on_sweep_worker_yielded(self, record) -> None:
        self.rotate_panel.progress.setMaximum(record.total)
        self.rotate_panel.progress.setValue(record.step)

    def _on_sweep_worker_returned(self, sweeps: dict, label: str) -> None:
        items = []
        for column in self.workspace.columns:
            if column.key in sweeps:
                column.sweep = sweeps[column.key]
                items.append((column.key, column.title(self.workspace.num_samples), column.sweep))
        self.sweep_view.show_sweeps(label, items, self.workspace.class_names)
        self.views.setCurrentWidget(self.sweep_view)
        self.statusBar().showMessage("Sweep done.", 5000)

    def _on_sweep_worker_errored(self, exc: Exception) -> None:
        QMessageBox.critical(self, "The sweep failed", str(exc))

    def _on_sweep_worker_finished(self) -> None:
        self._sweep_worker = None
        self.rotate_panel.set_sweep_running(False)
        self.rotate_panel._on_changed()

    def cancel_sweep(self) -> None:
        if self._sweep_worker is not None:
            self._sweep_worker.quit()
            self.statusBar().showMessage("Sweep cancelled.", 5000)

    # ----------------------------------------------------------------- export
    def _ask_plot_path(self, suggested: str) -> Path | None:
        path, chosen = QFileDialog.getSaveFileName(
            self, "Export plot", str(Path(app_settings.last_folder("export")) / suggested), ";;".join(PLOT_FILTERS))
        if not path:
            return None
        app_settings.remember_folder("export", path)
        return with_suffix_from_filter(path, chosen)

    def _on_column_export_requested(self, key: str, view: str) -> None:
        column = self.workspace.column(key)
        if column is None or column.prediction is None:
            QMessageBox.information(self, "Nothing to export yet", "Give the columns an input first: draw, rotate or open an image.")
            return
        title = column.title(self.workspace.num_samples)
        path = self._ask_plot_path(f"{slug(title)}-{view}.png")
        if path is not None:
            self.export_plot(key, view, path)

    def _on_column_diagnostics_requested(self, key: str) -> None:
        """Open the column's Diagnostics window (what its file records about convergence)."""
        from app.views.diagnostics import DiagnosticsWindow

        column = self.workspace.column(key)
        if column is None:
            return
        window = DiagnosticsWindow(column.posterior, column.title(self.workspace.num_samples),
                                   self.workspace.class_names, self)
        window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.diagnostics_window = window  # the latest, for tests and screenshots
        window.show()

    def export_plot(self, key: str, view: str, path: Path) -> list[Path]:
        """Write one plot of one column (format from the suffix) with its numbers beside it."""
        from core.outputs.input_figures import export_input_view

        column = self.workspace.column(key)
        title = column.title(self.workspace.num_samples)
        try:
            written = export_input_view(view, title, column.prediction.summary, self.workspace.class_names, path,
                                        samples=column.prediction.samples, level=self.workspace.level)
        except Exception as exc:  # noqa: BLE001 — a failed write gets a sentence
            QMessageBox.warning(self, "Could not export the plot", str(exc))
            return []
        self.statusBar().showMessage(f"Exported {VIEW_NAMES.get(view, view).lower()} to {', '.join(p.name for p in written)}", 8000)
        return written

    def _on_sweep_export_requested(self, key: str) -> None:
        from core.outputs.input_figures import export_sweep

        column = self.workspace.column(key)
        if column is None or column.sweep is None:
            return
        title = column.title(self.workspace.num_samples)
        path = self._ask_plot_path(f"{slug(title)}-rotation-sweep.png")
        if path is None:
            return
        try:
            written = export_sweep(title, column.sweep, self.workspace.class_names, path)
        except Exception as exc:  # noqa: BLE001
            QMessageBox.warning(self, "Could not export the sweep", str(exc))
            return
        self.statusBar().showMessage(f"Exported the sweep to {', '.join(p.name for p in written)}", 8000)

    def comparison(self):
        """The comparison shown now, as :class:`core.analysis.comparison.Comparison` (None if nothing shown)."""
        from core.analysis.comparison import Comparison, ComparisonColumn

        columns = tuple(
            ComparisonColumn(c.title(self.workspace.num_samples), c.posterior, c.prediction, source=c.key)
            for c in self.workspace.columns if c.prediction is not None
        )
        if self.workspace.image is None or not columns:
            return None
        return Comparison(self.workspace.preview, columns, self.workspace.level, self.workspace.class_names)

    def export_comparison_dialog(self) -> None:
        comparison = self.comparison()
        if comparison is None:
            QMessageBox.information(self, "Nothing to export yet", "Add a posterior and give it an input first.")
            return
        path, _ = QFileDialog.getSaveFileName(
            self, "Export comparison into a new folder", str(Path(app_settings.last_folder("export")) / "bayescope-comparison"), "Folder (*)")
        if path:
            app_settings.remember_folder("export", Path(path).parent)
            self.export_comparison(Path(path), comparison)

    def export_comparison(self, folder: Path, comparison=None) -> None:
        """Write the comparison folder in a worker; the status bar says when it is done."""
        from core.outputs.comparison import write_comparison

        comparison = comparison or self.comparison()
        if comparison is None:
            return
        if self._export_worker is not None:
            self.statusBar().showMessage("An export is still being written: export the comparison when it is done.")
            return
        worker = function_worker(write_comparison, comparison, folder)
        # stays until the next message: the folder is where a person looks next
        worker.returned.connect(lambda paths: self.statusBar().showMessage(
            f"Saved the comparison ({len(paths)} files) to {folder}"))
        worker.errored.connect(lambda exc: QMessageBox.warning(self, "Could not export the comparison", str(exc)))
        worker.finished.connect(self._on_export_worker_finished)
        self._export_worker = worker
        self.statusBar().showMessage("Exporting the comparison…")
        worker.start()

    def _on_export_worker_finished(self) -> None:
        self._export_worker = None

    def save_screenshot_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save a picture of the window",
                                              str(Path(app_settings.last_folder("export")) / "bayescope.png"), "PNG image (*.png)")
        if path:
            path = with_suffix_from_filter(path, "PNG image (*.png)")
            if not self.grab().save(str(path)):
                QMessageBox.warning(self, "Could not save the picture", f"The folder {path.parent} cannot be written to.")

    # ------------------------------------------------------------------- help
    def show_help(self) -> None:
        """The help page; on the Dataset tab, opened at the Dataset tab's measures."""
        from app.views.help_dialog import HelpDialog

        if getattr(self, "help_dialog", None) is None:
            self.help_dialog = HelpDialog(self)
        self.help_dialog.show()
        self.help_dialog.raise_()
        self.help_dialog.show_section("dataset" if self.views.currentWidget() is self.dataset_view else None)

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
        if getattr(self, "_state_ready", False):
            self._geometry_timer.start()  # saved once the size and place rest

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.training_dialog is not None and not self.training_dialog.stop_to_quit():
            event.ignore()
            return
        self.save_settings()
        self._geometry_timer.stop()
        self._state_ready = False  # a closed window saves nothing more (a new one may be reading)
        self.cancel_sweep()
        self.inference.shutdown()
        from PySide6.QtCore import QThreadPool

        QThreadPool.globalInstance().waitForDone(10_000)
        super().closeEvent(event)

