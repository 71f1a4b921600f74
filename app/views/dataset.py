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
"""

from __future__ import annotations

import time

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
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
from app.views.dataset_sets import (
    CHOOSE_DATA_FOLDER,
    CHOOSE_IMAGES,
    FACE_SET,
    IDLE_TEXT,
    IMAGES_FOLDER,
    MODE_WORDS,
    TASK_WORDS,
    SetChooser,
    explain_failure,
    plain_sentence,
)
from app.views.thumbnails import ThumbnailPanel
from app.workers import PythonThreadGenerator, function_worker, generator_worker
from app.workspace import Workspace
from core.analysis.dataset import (
    SCORE_WORDS,
    DatasetViews,
    EvaluationItem,
    ImageSelection,
    confusion_cell_images,
    histogram_bin_images,
)
from core.analysis.evaluation import progress_in_words
from core.analysis.ood_sets import best_among
from core.engine.data.locate import sample_notice
from core.engine.naming import dataset_words, plural


def _set_words(name: str) -> str:
    """A data set's name in words; a bundled sample (``mnist-sample-test``) is called one."""
    if "-sample-" in name:
        return "sample " + dataset_words(name.replace("-sample-", "-"))
    return dataset_words(name)


class DatasetView(QWidget):
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
        second.addWidget(self.progress, 2)
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
        layout.addWidget(self.status)  # a line of its own: it wraps at the tab's width, not beside a bar
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
    @property
    def running(self) -> bool:
        return self._worker is not None

    def evaluate(self, cache_only: bool = False) -> bool:
        """Start evaluating every column (False when nothing to do or already running).

        Right after start-up the columns may still be being read: the evaluation then starts
        when they are (True is returned)."""
        from core.outputs.evaluation_cache import run_evaluation

        if self.running:
            if cache_only or not (self._current_request and self._current_request[-1]):
                return False
            self._worker.quit()  # a silent look into the cache gives way to the real run
            self._worker = None
            self._set_running(False)
        items = self.items()
        if not items and self.task in self.workspace.unread_tasks:
            waiting = self._waiting_for_columns
            self._waiting_for_columns = cache_only and (waiting is None or waiting)
            if not cache_only:
                self.status.setText("The posteriors are still being read (the engine starts in the background): "
                                    "the evaluation starts as soon as they are ready.")
            return True
        if not items:
            if not cache_only:
                kind = "face head" if self.task == "faces" else "digit posterior"
                self.status.setText(f"Add a {kind} first (“Add posterior” above the columns).")
            return False
        self.offer_sets()
        dataset, ood, limit, samples = self.request()
        shape = {}
        if self.task == "images" and dataset in (IMAGES_FOLDER, None, ""):
            if not cache_only:
                self.status.setText(CHOOSE_IMAGES)
            return False
        if self.task != "faces":  # a folder of images (test or unfamiliar set) is read as the models read
            arch = items[0].posterior.arch
            shape = {"image_size": arch.image_size, "channels": arch.channels}
        self.result_keys_pending = [c.key for c in self.columns()]
        self._item_count = len(items)
        self._run += 1
        run = self._run
        self._run_task = self.task
        oods = self.sets.ood_specs()  # the one on the left (the histograms'), then any further ones
        ood_arg = oods if len(oods) > 1 else (oods[0] if oods else None)
        self._current_request = (dataset, ood_arg, limit, samples, cache_only)
        gen = run_evaluation(items, dataset, ood_arg, app_settings.data_folder(), limit, num_samples=samples,
                             cache_only=cache_only, **shape)
        # the faces may have to be described first, with dlib, which hangs in Qt's pool threads
        worker = PythonThreadGenerator(gen) if dataset == FACE_SET else generator_worker(gen)
        worker.yielded.connect(lambda record: self._on_worker_yielded(run, record))
        worker.returned.connect(lambda views: self._on_worker_returned(run, views))
        worker.errored.connect(lambda exc: self._on_worker_errored(run, exc))
        worker.finished.connect(lambda: self._on_worker_finished(run))
        self._worker = worker
        self._started = time.perf_counter()
        self._set_running(True)
        self.status.setText("Looking for earlier results…" if cache_only else "Reading the images…")
        self.save_settings()
        worker.start()
        return True

    def cancel(self, quiet: bool = False) -> None:
        """Stop the evaluation: the screen is free at once; the worker ends after its current batch.
        While the report is written instead, stop that."""
        if self._worker is None:
            self.exports.cancel()
            return
        self._worker.quit()
        self._worker = None
        self._run += 1  # late signals of the stopped run are ignored
        self._set_running(False)
        self.offer_sets()
        if not quiet:
            self.status.setText("Evaluation cancelled; nothing of it was kept.")
        self.run_ended.emit()

    def _on_exports_report_running(self, running: bool) -> None:
        self.cancel_button.setEnabled(running)
        self.cancel_button.setToolTip("Stop writing the report (nothing of it is kept)" if running
                                      else "Stop the evaluation (nothing half-done is kept)")
        self.report_button.setEnabled(not running and self.results is not None)

    def _set_running(self, running: bool) -> None:
        self.evaluate_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.sets.set_enabled(not running)
        self.progress.setVisible(running)
        if running:
            self.progress.setRange(0, 0)
            self.progress.setFormat("%v / %m images")

    def _on_worker_yielded(self, run: int, record) -> None:
        if run != self._run or record.phase == "loading":
            return
        if record.phase == "descriptors":  # the faces test split, described once, then cached
            if record.values.get("cached"):
                self.status.setText("Read the face descriptors from the cache.")
                return
            from core.engine.training_plan import duration_in_words

            self.progress.setRange(0, max(record.total, 1))
            self.progress.setValue(record.step)
            left = ""
            if "to_describe" in record.values:  # the first record, before any face is described
                faces = int(record.values["to_describe"])
                kept = f" ({record.step:,} described before)" if record.step else ""
                self.status.setText(
                    f"Describing {plural(faces, 'face')} with dlib takes "
                    f"{duration_in_words(record.values['estimated_seconds'])}{kept}. They are kept: a "
                    "cancelled run, or a later one with more images, goes on from them.")
            elif record.values.get("faces_per_second"):
                seconds = (record.total - record.step) / record.values["faces_per_second"]
                left = f", {duration_in_words(seconds).replace('a few seconds', 'seconds')} left"
            self.progress.setFormat(f"describing faces: %v / %m{left}")
            self.progress_reported.emit(record.step, record.total, "describing faces")
            return
        self.progress.setFormat("%v / %m images")
        index = int(record.values.get("index", 0))
        total = int(record.values.get("images_total", 0))
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(int(record.values.get("images_done", 0)))
        n = max(len(self.result_keys_pending), self._item_count)  # a tier's hidden reference included
        rate = progress_in_words(record.values.get("images_done", 0), total, record.values)  # images/s, time left
        self.status.setText(f"Evaluating {record.phase} ({index + 1} of {n}): {rate}…")
        self.progress_reported.emit(self.progress.value(), total, record.phase)

    def _on_worker_returned(self, run: int, views: DatasetViews | None) -> None:
        if run != self._run:
            return
        if views is None:
            self.status.setText(IDLE_TEXT)
            return
        elapsed = time.perf_counter() - self._started
        if self._run_task != self.task:  # the mode changed meanwhile: kept for when it comes back
            self._kept[self._run_task] = (views, list(self.result_keys_pending))
            self.status.setText(f"The evaluation of the {TASK_WORDS[self._run_task]} has finished: choose "
                                f"{MODE_WORDS[self._run_task]} to see it.")
            self.save_settings(evaluated=True)
            return
        self.show_results(views)
        cached = sum(c.cached for c in views.columns[:len(self.result_keys)])
        ev = views.evaluation
        text = f"{plural(len(self.result_keys), 'posterior')} on {len(views.data):,} {_set_words(ev.dataset)}"
        for other, set_name in zip(views.ood_sets or ([views.ood] if views.ood is not None else []),
                                   ev.ood_names(), strict=False):
            text += f" and {len(other):,} {_set_words(set_name)}"
        text += f", in {elapsed:.1f} s"
        if cached:
            text += f" ({cached} from the cache)"
        what = "photos" if views.faces is not None else "images"
        text += f". Click a confusion cell or a histogram bar to see its {what}."
        note = (views.data.source.get("data_check") or {}).get("note")
        if note:  # the folder changed since training: what changed, and which images were left out
            text += f" Note: {note[0].upper()}{note[1:]}"
        notice = sample_notice(ev.data_source, *(ev.ood_sources or [ev.ood_source]))  # the bundled samples
        self.status.setText(text + (f"\n{notice}" if notice else ""))
        self.save_settings(evaluated=True)

    def _on_worker_errored(self, run: int, exc: BaseException) -> None:
        if run != self._run:
            return
        if self._current_request and self._current_request[-1]:  # the silent look into the cache
            self.status.setText(IDLE_TEXT)
            return
        self.status.setText("The evaluation stopped.")
        if not self._offer_download(exc):
            QMessageBox.critical(self, "The evaluation stopped",
                                 explain_failure(exc, *(self._current_request or ("", None))[:2]))

    def _offer_download(self, exc: BaseException) -> bool:
        """For a missing MNIST: say what and where, and offer to download it (True when shown)."""
        from core.engine.data.locate import DOWNLOAD_IN_WINDOW, DatasetMissingError

        if not (isinstance(exc, DatasetMissingError) and exc.downloadable):
            return False
        box = QMessageBox(QMessageBox.Icon.Warning, "The evaluation stopped",
                          exc.with_hint(DOWNLOAD_IN_WINDOW) + " " + CHOOSE_DATA_FOLDER, parent=self)
        download = box.addButton("Download MNIST", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Close)
        box.exec()
        if box.clickedButton() is download:
            self.download_and_evaluate(exc.name, exc.split)
        return True

    def download_and_evaluate(self, name: str, split: str = "test") -> None:
        """Download ``name`` into the user cache in the background, then evaluate again."""
        from core.engine.data.locate import download_dataset

        worker = function_worker(download_dataset, name, split)
        worker.returned.connect(lambda _folder: self.evaluate())
        worker.errored.connect(lambda exc: self.status.setText(f"The download failed: {plain_sentence(exc)}"))
        worker.finished.connect(lambda: setattr(self, "_download_worker", None))
        self._download_worker = worker  # kept until it has finished
        self.status.setText("Downloading MNIST into the user cache…")
        worker.start()

    def _on_worker_finished(self, run: int) -> None:
        if run != self._run:
            return
        self._worker = None
        self._set_running(False)
        self.offer_sets()
        self.run_ended.emit()

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
        ood_words = {name: _set_words(name) for name in ev.ood_names()}
        best = best_among(views.tables.get("ood_sets", []), [c.name for c in shown])  # of the columns one sees
        for column in shown:
            sets = (_set_words(ev.dataset), _set_words(ev.ood_dataset) if ev.ood_dataset else None)
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
