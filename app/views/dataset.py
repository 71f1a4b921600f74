"""The Dataset tab: every column's posterior judged on a whole test set, one column each.

The person picks a test set, an optional out-of-distribution set, how many images and how
many draws, and presses Evaluate. :func:`core.outputs.evaluation_cache.run_evaluation` runs in a worker
(progress per posterior in images, cancel between batches, results cached by core); the
columns then draw the :class:`core.analysis.dataset.ColumnViews` core computed: metrics,
reliability, soft and hard confusion, per-class error over chains, accuracy against
rejection, and test vs out-of-distribution histograms. Clicking a confusion cell or a
histogram bar lists the images behind it; clicking one of those sends it to the per-input
workspace (``image_chosen``).

The columns evaluated are the workspace's current ones: digit posteriors in the digit modes,
face heads in the Face mode. Only the sets those columns can read are offered (the faces test
split for face heads, digit sets for digit posteriors), with the reason in words. For the
faces test split the descriptors are computed first when they are not cached (same worker,
progress "describing faces: n / total", cancel), in a plain thread since dlib hangs in Qt's
pool threads; a confusion cell then shows the face photos behind it, and clicking one sends
the photo to the Face mode (``face_chosen``).

The run itself (start, progress, outcome, cancel, the offer to download a missing MNIST) is
:class:`app.views.dataset_run.DatasetRun`, a part of the view in its own module.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app import settings as app_settings
from app.views.dataset_column import DatasetColumn, reference_notes
from app.views.dataset_corruption import CorruptionPanel
from app.views.dataset_export import DatasetExports
from app.views.dataset_run import DatasetRun
from app.views.dataset_sets import (
    CHOOSE_IMAGES,
    IDLE_TEXT,
    IMAGES_FOLDER,
    TASK_WORDS,
    SetChooser,
    set_words,
)
from app.views.thumbnails import ThumbnailPanel
from app.workspace import Workspace
from core.analysis.dataset import (
    SCORE_WORDS,
    DatasetViews,
    EvaluationItem,
    ImageSelection,
    confusion_cell_images,
    histogram_bin_images,
)
from core.analysis.ood_sets import best_among
from core.engine.naming import plural


class DatasetView(DatasetRun, QWidget):
    """The Dataset tab.

    Signals
    -------
    image_chosen(np.ndarray, str)
        A test image (28×28 in [0, 1]) and its label, to judge in the per-input workspace.
    face_chosen(np.ndarray, str)
        A face photo of the faces test split ((H, W, 3) uint8) and its file name, for the Face mode.
    photo_chosen(np.ndarray, str)
        One of a person's colour images ((S, S, 3) uint8, as the models read it) and its label.
    progress_reported(int, int, str)
        Images done and total of the posterior being evaluated, and its name.
    results_shown
        New results were drawn.
    run_ended
        An evaluation ended (finished, cancelled or failed).
    """

    image_chosen = Signal(object, str)
    face_chosen = Signal(object, str)
    photo_chosen = Signal(object, str)
    progress_reported = Signal(int, int, str)
    results_shown = Signal()
    run_ended = Signal()
    #: Emitted when the face photos behind a selection are on screen (they are read in the background).
    thumbnails_shown = Signal()

    def __init__(self, workspace: Workspace, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workspace = workspace
        self.results: DatasetViews | None = None
        self.result_keys: list[str] = []
        self.column_widgets: dict[str, DatasetColumn] = {}
        self._worker = None
        self._run = 0
        self._started = 0.0
        self._restored = False
        self._watching_window = False
        self._current_request: tuple | None = None
        self.result_keys_pending: list[str] = []
        self._item_count = 0  # posteriors of the run under way, a tier's hidden reference included
        #: Each task's latest results and the column keys they are of: a mode change shows its own.
        self._kept: dict[str, tuple[DatasetViews, list[str]]] = {}
        self._shown_task = workspace.task
        self._run_task = workspace.task
        #: An Evaluate waiting for the columns read at start-up (True: only the silent cache look).
        self._waiting_for_columns: bool | None = None

        self.sets = SetChooser(self)
        self.sets.refused.connect(lambda text: self.status.setText(text))
        self.test_set, self.ood_set, self.images, self.samples = (self.sets.test_set, self.sets.ood_set,
                                                                  self.sets.images, self.sets.samples)
        self.sets_note = self.sets.note
        self.evaluate_button = QPushButton("Evaluate")
        self.evaluate_button.setToolTip("Judge the chosen images with every column's posterior (in the background; "
                                        "results computed before come back from the cache at once)")
        self.evaluate_button.clicked.connect(lambda: self.evaluate())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the evaluation (nothing half-done is kept)")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.score = QComboBox()
        for key, words in SCORE_WORDS.items():
            self.score.addItem(words, key)
        self.score.setToolTip(
            "Which uncertainty the histograms show and AUROC measures. Total: how spread the average "
            "prediction is. Aleatoric: how ambiguous each draw finds the image. Epistemic: how much the "
            "draws disagree, the sign of an unfamiliar image.")
        self.score.currentIndexChanged.connect(self._on_score_current_index_changed)
        self.report_button = QPushButton("Export report…")
        self.report_button.setToolTip("Write one web page with every figure, the tables and where each posterior "
                                      "and data set comes from; it opens in any browser, offline.")
        self.report_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m images")
        self.progress.setToolTip("Images judged by the posterior being evaluated now, out of its total "
                                 "(test and out-of-distribution sets together)")
        self.progress.setVisible(False)
        # wide enough for its words at the largest count: they never run under the bar's fill, cut
        self.progress.setMinimumWidth(self.progress.fontMetrics().horizontalAdvance("100,000 / 100,000 images") + 24)
        self.status = QLabel(IDLE_TEXT)
        self.status.setWordWrap(True)
        self.corruption = CorruptionPanel()
        self.corruption.hide()
        self.corruption.evaluate_button.clicked.connect(lambda: self.evaluate_corrupted())
        self.corruption_button = QPushButton("Corrupted images…")
        self.corruption_button.setCheckable(True)
        self.corruption_button.setToolTip("Show or hide the evaluation on corrupted images: accuracy and "
                                          "telling unfamiliar images apart as noise, blur, low contrast, a "
                                          "covering patch or a shift grows")
        self.corruption_button.toggled.connect(self.show_corruption)
        self.exports = DatasetExports(self, lambda: self.results, self.status, lambda: self.corruption.result)
        self.report_button.clicked.connect(self.exports.export_report_dialog)
        self.exports.report_running.connect(self._on_exports_report_running)

        # Two rows that fit a 1024-pixel-wide window: what to evaluate, then running it and the results.
        # long names are cut, not the window widened
        self.score.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.score.setMinimumContentsLength(10)
        second = QHBoxLayout()
        second.addWidget(self.evaluate_button)
        second.addWidget(self.cancel_button)
        second.addStretch(1)
        histogram_label = QLabel("Histograms of")
        histogram_label.setToolTip(self.score.toolTip())
        second.addWidget(histogram_label)
        second.addWidget(self.score, 1)
        second.addWidget(self.corruption_button)
        second.addWidget(self.report_button)

        self.columns_row = QHBoxLayout()
        self.columns_row.setContentsMargins(0, 0, 0, 0)
        self.columns_row.setSpacing(4)
        inner = QWidget()
        inner.setLayout(self.columns_row)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.scroll.setWidget(inner)
        self.thumbnails = ThumbnailPanel()
        self.thumbnails.hide()
        self.thumbnails.image_chosen.connect(self.image_chosen)
        self.thumbnails.face_chosen.connect(self.face_chosen)
        self.thumbnails.photo_chosen.connect(self.photo_chosen)
        self.thumbnails.thumbnails_shown.connect(self.thumbnails_shown)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.scroll)
        self.splitter.addWidget(self.corruption)
        self.splitter.addWidget(self.thumbnails)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setStretchFactor(2, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addLayout(self.sets.row)
        layout.addLayout(second)
        # the bar, shown during a run, starts the status's line, whose words wrap beside it: in the
        # row of buttons its width would widen a 1024-pixel window for as long as a run lasts
        status_row = QHBoxLayout()
        status_row.addWidget(self.progress)
        status_row.addWidget(self.status, 1)
        layout.addLayout(status_row)
        layout.addWidget(self.sets_note)
        layout.addWidget(self.splitter, 1)
        workspace.columns_changed.connect(self._on_workspace_columns_changed)
        self._restore_settings()
        self.offer_sets()

    # --------------------------------------------------------------- choices
    @property
    def task(self) -> str:
        """What the columns judge: "digits" or "faces" (the workspace's current mode)."""
        return self.workspace.task

    def offer_sets(self) -> None:
        """Enable only the sets the current columns can read (see :meth:`SetChooser.offer`)."""
        self.sets.offer(self.task)

    def set_choice(self, dataset: str, ood: str | None, images: int = 0, samples: int = 30) -> None:
        """Choose the sets (known names or folders), the number of images (0 = all) and draws."""
        self.sets.set_choice(dataset, ood, images, samples)

    def request(self) -> tuple[str, str | None, int | None, int]:
        """(test set, OOD set or None, image limit or None, draws) as chosen now."""
        return self.sets.request()

    def columns(self) -> list:
        """The workspace's current columns whose weights are in: digit posteriors, or face heads
        in the Face mode (columns shown from their files' records wait for the engine)."""
        return self.workspace.ready_columns(self.task)

    def items(self) -> list[EvaluationItem]:
        """Every column's posterior, in the workspace's order, titled as in its header; then the
        reference of their tier (exact inference, HMC) when it is not a column itself: it is
        evaluated too, to say how far each of the tier's columns is from it, but not shown."""
        samples = self.samples.value()
        items = [EvaluationItem(c.title(samples), c.posterior, c.key) for c in self.columns()]
        ref = self.workspace.reference if self.task == "digits" else None
        if ref is not None and ref.key not in [c.key for c in self.columns()]:
            items.append(EvaluationItem(ref.title(samples), ref.posterior, ref.key))
        return items

    def _restore_settings(self) -> None:
        read_int, read_str = app_settings.read_int, app_settings.read_str  # a bad value gives way to its default
        self.set_choice(read_str("dataset/test", "mnist-test"), read_str("dataset/ood", "notmnist"),
                        read_int("dataset/images", 0, self.images.minimum(), self.images.maximum()),
                        read_int("dataset/samples", 30, self.samples.minimum(), self.samples.maximum()))
        self.sets.set_more([spec for spec in read_str("dataset/ood_more", "").split("\n") if spec])
        index = self.score.findData(read_str("dataset/score", "total"))
        self.score.setCurrentIndex(max(index, 0))

    def save_settings(self, evaluated: bool | None = None) -> None:
        dataset, ood, limit, samples = self.request()
        s = app_settings.settings()
        s.setValue("dataset/test", dataset)
        s.setValue("dataset/ood", ood or "")
        s.setValue("dataset/ood_more", "\n".join(self.sets.more))
        s.setValue("dataset/images", limit or 0)
        s.setValue("dataset/samples", samples)
        s.setValue("dataset/score", self.score.currentData())
        if evaluated is not None:
            s.setValue("dataset/evaluated", evaluated)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        if not self._watching_window and self.window() is not self:
            self.window().installEventFilter(self)  # cancel when the window closes
            self._watching_window = True
        if not self._restored:
            self._restored = True
            if app_settings.settings().value("dataset/evaluated", False) in (True, "true"):
                self.evaluate(cache_only=True)  # last session's results, only if all are cached

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.Close and obj is self.window():
            self.cancel(quiet=True)
        return super().eventFilter(obj, event)

    # ------------------------------------------------------------ evaluation
    # evaluate, cancel and the run's progress and outcome: app.views.dataset_run.DatasetRun
    def _on_exports_report_running(self, running: bool) -> None:
        self.cancel_button.setEnabled(running)
        self.cancel_button.setToolTip("Stop writing the report (nothing of it is kept)" if running
                                      else "Stop the evaluation (nothing half-done is kept)")
        self.report_button.setEnabled(not running and self.results is not None)

    # --------------------------------------------------------------- results
    def show_results(self, views: DatasetViews, keys: list[str] | None = None) -> None:
        """Draw one column per evaluated posterior, in the order evaluated; ``keys``: the
        workspace columns they are of (default: those of the run that made them)."""
        self.clear_results()
        self.results = views
        self.result_keys = list(self.result_keys_pending if keys is None else keys)
        self._kept[self.task] = (views, self.result_keys)
        self._shown_task = self.task
        score = self.score.currentData()
        notes = reference_notes(self.workspace, views, self.result_keys)
        shown = views.columns[:len(self.result_keys)]  # a tier's hidden reference last, not shown
        ev = views.evaluation
        ood_words = {name: set_words(name) for name in ev.ood_names()}
        best = best_among(views.tables.get("ood_sets", []), [c.name for c in shown])  # of the columns one sees
        for column in shown:
            sets = (set_words(ev.dataset), set_words(ev.ood_dataset) if ev.ood_dataset else None)
            widget = DatasetColumn(column, column.name, ev.class_names, score, sets, notes.get(column.name, ""),
                                   ood_words=ood_words, best=best, shown=len(shown))
            widget.export_requested.connect(self.exports.export_view_dialog)
            widget.cell_clicked.connect(self.show_cell_images)
            widget.bin_clicked.connect(self.show_bin_images)
            self.column_widgets[column.name] = widget
            self.columns_row.addWidget(widget, 1)
        self.report_button.setEnabled(True)
        self.results_shown.emit()

    def clear_results(self) -> None:
        for widget in self.column_widgets.values():
            self.columns_row.removeWidget(widget)
            widget.deleteLater()
        self.column_widgets.clear()
        self.results = None
        self.thumbnails.hide()
        self.report_button.setEnabled(False)

    def _on_score_current_index_changed(self, _index: int) -> None:
        for widget in self.column_widgets.values():
            widget.set_score(self.score.currentData())
        self.corruption.set_score(self.score.currentData())

    # ------------------------------------------------------------ corruption
    def show_corruption(self, shown: bool = True) -> None:
        """Show (or hide) the corrupted-images part below the columns."""
        if self.corruption_button.isChecked() != shown:
            self.corruption_button.setChecked(shown)  # comes back here through toggled
            return
        self.corruption.setVisible(shown)
        if shown:
            sizes = self.splitter.sizes()
            total = sum(sizes)
            rest = sizes[2]
            self.splitter.setSizes([max((total - rest) // 2, 100), max((total - rest) // 2, 240), rest])

    def evaluate_corrupted(self) -> bool:
        """Evaluate every column on the chosen sets corrupted as the corruption part says (False
        when nothing started; its status line says why)."""
        from core.analysis.corruption import run_corruption_evaluation

        self.show_corruption(True)

        def make(name: str, severities: tuple[float, ...]):
            columns = self.columns()
            if self.task == "faces":
                raise ValueError("face heads read descriptors of the faces, not their pixels: a corruption of "
                                 "the images cannot reach them. Choose the digits or your own images.")
            if not columns:
                raise ValueError("add a posterior first (“Add posterior” above the columns)")
            dataset, _ood, limit, samples = self.request()
            if self.task == "images" and dataset in (IMAGES_FOLDER, None, ""):
                raise ValueError(CHOOSE_IMAGES)
            samples_shown = self.samples.value()
            items = [EvaluationItem(c.title(samples_shown), c.posterior, c.key) for c in columns]
            arch = items[0].posterior.arch
            oods = self.sets.ood_specs()  # the one on the left: the histograms' set
            return run_corruption_evaluation(items, dataset, oods[0] if oods else None, app_settings.data_folder(),
                                             limit, name, severities, num_samples=samples,
                                             image_size=arch.image_size, channels=arch.channels)

        return self.corruption.start(make)

    def _show_kept(self, task: str) -> None:
        """After a mode change: the new task's own latest results, or none (never the other's)."""
        self.clear_results()
        self._shown_task = task
        kept = self._kept.get(task)
        if kept is not None:
            self.show_results(*kept)
        if not self.running:
            self.status.setText(IDLE_TEXT if kept is None else
                                f"The latest results of the {TASK_WORDS[task]}: press Evaluate to update them.")

    def _on_workspace_columns_changed(self) -> None:
        if not self.running:
            self.offer_sets()
        if self.task != self._shown_task:
            self._show_kept(self.task)
        if self._waiting_for_columns is not None and self.task not in self.workspace.unread_tasks:
            cache_only, self._waiting_for_columns = self._waiting_for_columns, None
            self.evaluate(cache_only=cache_only)
        if self.results is not None and [c.key for c in self.columns()] != self.result_keys:
            self.status.setText("The columns changed since this evaluation: press Evaluate to update it "
                                "(posteriors evaluated before come back from the cache at once).")

    # ---------------------------------------------------------------- images
    def show_cell_images(self, name: str, soft: bool, true_class: int, predicted_class: int) -> ImageSelection:
        """List the images behind one confusion cell of one column."""
        selection = confusion_cell_images(self.results, name, true_class, predicted_class, soft=soft)
        widget = self.column_widgets[name]
        (widget.soft if soft else widget.hard).mark(true_class, predicted_class)
        self._show_selection(name, selection, ood=False)
        return selection

    def show_bin_images(self, name: str, bin_index: int, ood: bool) -> ImageSelection:
        """List the images in one histogram bar (test or out-of-distribution set) of one column."""
        score = self.score.currentData()
        selection = histogram_bin_images(self.results, name, score, bin_index, ood=ood)
        self.column_widgets[name].histogram.mark(bin_index, ood)
        self._show_selection(name, selection, ood=ood)
        return selection

    def _show_selection(self, name: str, selection: ImageSelection, ood: bool) -> None:
        if self.thumbnails.isHidden():
            total_height = sum(self.splitter.sizes())
            self.splitter.setSizes([max(total_height - 200, 100), 200])
        self.thumbnails.show_selection(self.results, name, selection, ood, photos=self.task == "images")

    # ----------------------------------------------------------------- cache
    def clear_cache(self) -> int:
        """Delete every cached evaluation; the results shown stay."""
        from core.outputs.evaluation_cache import clear_cache

        removed = clear_cache()
        self.status.setText(f"Removed {plural(removed, 'cached evaluation')}." if removed
                            else "There were no cached evaluations.")
        return removed
