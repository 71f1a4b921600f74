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

import re
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEvent, QObject, QSize, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QImage, QPainter, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import settings as app_settings
from app.plots.dataset_plots import (
    ClassErrorPlot,
    HardConfusionPlot,
    MetricsTable,
    OodHistogramPlot,
    RejectionPlot,
    ReliabilityPlot,
    SoftConfusionPlot,
)
from app.views.column import column_title
from app.workers import PythonThreadGenerator, function_worker, generator_worker
from app.workspace import Workspace
from core.analysis.dataset import (
    DATASET_VIEWS,
    SCORE_WORDS,
    ColumnViews,
    DatasetViews,
    EvaluationItem,
    ImageSelection,
    confusion_cell_images,
    histogram_bin_images,
)
from core.analysis.evaluation import progress_in_words
from core.engine import tiers
from core.engine.naming import dataset_words, plural

FOLDER = "folder…"
#: The entry that asks for a folder of a person's images (class folders, a CSV, CIFAR files).
IMAGES_FOLDER = "images folder…"
#: The faces test split (core.engine.faces.testset.FACE_TEST_SET; not imported: torch loads later).
FACE_SET = "utkface-test"
#: Where a missing data set's message sends a person.
CHOOSE_DATA_FOLDER = "Or choose the data folder that holds it with File → Choose data folder…"
#: (shown, spec) of the sets offered; a chosen folder is added with its path as spec.
TEST_SETS = (("MNIST test digits", "mnist-test"), ("notMNIST letters", "notmnist"),
             ("UTKFace test split (faces)", FACE_SET))
OOD_SETS = (("None", ""), ("notMNIST letters", "notmnist"), ("MNIST test digits", "mnist-test"))
#: At most this many thumbnails are shown for one selection (most telling first).
MAX_THUMBNAILS = 240
THUMBNAIL_SIDE = 56
#: Why a set is not offered, by the columns' task.
NOT_FOR_FACES = ("The columns are face heads: they read 128 numbers describing a face, not images, so only "
                 "UTKFace's test split is offered, without an out-of-distribution set (no other faces with "
                 "known ages are at hand).")
NOT_FOR_DIGITS = ("The columns are digit posteriors: they read 28×28 images, so the faces test split is not "
                  "offered (open the Face tab on the left to evaluate the face heads on it).")
NOT_FOR_IMAGES = ("The columns are posteriors of your own images: they are judged on a folder of your images "
                  "with the classes they were trained on (one sub-folder per class; a train/ and test/ pair "
                  "gives its test/ part, otherwise the part training kept aside), and, as unfamiliar images, "
                  "on another folder. The digits, letters and faces are not offered to them.")
#: What the columns of one's own images need before Evaluate.
CHOOSE_IMAGES = "Choose a folder of your images to judge the columns on (“A folder of your images…” above)."
IDLE_TEXT = "Choose the images and press Evaluate to judge every column's posterior on them."
#: The columns of each task, and the modes that show them, in words.
TASK_WORDS = {"digits": "digit posteriors", "faces": "face heads", "images": "posteriors of your images"}
MODE_WORDS = {"digits": "a digit mode on the left (Draw, Rotate or Image)", "faces": "the Face mode on the left",
              "images": "the Image mode on the left"}


def readable_by(task: str, spec: str, ood: bool) -> bool:
    """Whether the columns of ``task`` ("digits", "faces", "images") can read the set ``spec``."""
    if task == "images":  # a folder of their images (test), or none / another folder (OOD)
        return (ood and spec == "") or (spec not in ("", FOLDER, IMAGES_FOLDER) and is_images_folder(spec))
    if task == "faces":
        return spec == "" if ood else spec == FACE_SET
    return spec != FACE_SET


def is_images_folder(spec: str) -> bool:
    """Whether ``spec`` is a folder (or CSV manifest) of a person's images."""
    from core.engine.data.folder import image_folder

    return image_folder(spec)


def model_enabled(box: QComboBox, index: int) -> bool:
    """Whether entry ``index`` of a combo box (a standard item model) can be chosen."""
    item = box.model().item(index) if index >= 0 else None
    return item is not None and item.isEnabled()


def plain_sentence(exc: BaseException) -> str:
    """An engine error as a sentence for a dialog: folders left out, files named by their name."""
    text = str(exc) or "something went wrong"
    text = re.sub(r"(?:[A-Za-z]:)?[\\/][^\s:;,'\"()]*[\\/]([^\s\\/:;,'\"()]+)", r"“\1”", text)
    return text[0].upper() + text[1:]


class ThumbnailPanel(QFrame):
    """The test images behind a clicked cell or bar, as a grid; a click sends one to the workspace.

    Signals: image_chosen(np.ndarray 28×28, str label) for digit images, face_chosen(np.ndarray
    (H, W, 3) uint8, str name) for face photos, photo_chosen(np.ndarray (H, W, 3) uint8, str
    label) for a person's colour images.
    """

    image_chosen = Signal(object, str)
    face_chosen = Signal(object, str)
    photo_chosen = Signal(object, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        close = QToolButton(text="✕")
        close.setAutoRaise(True)
        close.setToolTip("Hide the images")
        close.clicked.connect(self.hide)
        self.grid = QListWidget()
        self.grid.setViewMode(QListView.ViewMode.IconMode)
        self.grid.setIconSize(QSize(THUMBNAIL_SIDE, THUMBNAIL_SIDE))
        self.grid.setGridSize(QSize(THUMBNAIL_SIDE + 12, THUMBNAIL_SIDE + 22))
        self.grid.setResizeMode(QListView.ResizeMode.Adjust)
        self.grid.setMovement(QListView.Movement.Static)
        self.grid.setUniformItemSizes(True)
        self.grid.setToolTip("Click an image to judge it in the “This input” tab, with every column.")
        self.grid.itemClicked.connect(self._on_grid_item_clicked)
        top = QHBoxLayout()
        top.addWidget(self.caption, 1)
        top.addWidget(close)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.grid, 1)
        self.images: list[np.ndarray] = []
        self.labels: list[str] = []
        self.faces = False
        self.photos = False

    def show_message(self, caption: str) -> None:
        """Only a caption (while photos are read, or when there are none)."""
        self.grid.clear()
        self.images, self.labels = [], []
        self.caption.setText(caption)
        self.show()

    def show_images(self, caption: str, images, labels: list[str], tips: list[str], photos: bool = False) -> None:
        """``images``: digits (N, 28, 28) in [0, 1], or face photos (or, with ``photos``, a person's
        colour images), each (H, W, 3) uint8; each with the label the workspace shows and a tooltip."""
        self.grid.clear()
        self.caption.setText(caption)
        self.photos = photos
        self.faces = len(images) > 0 and np.asarray(images[0]).ndim == 3
        self.images = [np.asarray(im) if self.faces else np.asarray(im, dtype=np.float32) for im in images]
        self.labels = list(labels)
        for i, (image, tip) in enumerate(zip(self.images, tips, strict=True)):
            if self.faces:
                pixels = np.ascontiguousarray(image, dtype=np.uint8)
                h, w, _ = pixels.shape
                qimage = QImage(pixels.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()
                smooth = Qt.TransformationMode.SmoothTransformation
            else:
                pixels = np.ascontiguousarray((np.clip(image, 0, 1) * 255).astype(np.uint8))
                h, w = pixels.shape
                qimage = QImage(pixels.data, w, h, w, QImage.Format.Format_Grayscale8).copy()
                smooth = Qt.TransformationMode.FastTransformation
            pixmap = QPixmap.fromImage(qimage).scaled(THUMBNAIL_SIDE, THUMBNAIL_SIDE,
                                                      Qt.AspectRatioMode.KeepAspectRatio, smooth)
            painter = QPainter(pixmap)  # a frame, so that a white image stays visible on white
            painter.setPen(QColor(150, 150, 150))
            painter.drawRect(0, 0, pixmap.width() - 1, pixmap.height() - 1)
            painter.end()
            item = QListWidgetItem(QIcon(pixmap), tip.split(":")[0])
            item.setToolTip(tip)
            item.setData(Qt.ItemDataRole.UserRole, i)
            self.grid.addItem(item)
        self.show()

    def choose(self, row: int) -> None:
        """Send the image in ``row`` to the workspace (what a click does): a face photo to the Face
        mode, a digit or one's own photo to the Image mode."""
        signal = self.photo_chosen if self.photos else self.face_chosen if self.faces else self.image_chosen
        signal.emit(self.images[row], self.labels[row])

    def _on_grid_item_clicked(self, item: QListWidgetItem) -> None:
        self.choose(int(item.data(Qt.ItemDataRole.UserRole)))


class DatasetColumn(QFrame):
    """One posterior's data-set views, fed a :class:`core.analysis.dataset.ColumnViews`.

    Signals: export_requested(str view), cell_clicked(str name, bool soft, int true, int
    predicted), bin_clicked(str name, int bin, bool ood).
    """

    export_requested = Signal(str)
    cell_clicked = Signal(str, bool, int, int)
    bin_clicked = Signal(str, int, bool)

    #: Four columns fit beside the left panel in a 1600-pixel-wide window.
    MIN_WIDTH = 228

    REFERENCE_TIP = ("This posterior belongs to a set that shares one model, data set and prior with HMC, the "
                     "set's reference (exact inference once its chains have converged: its column says whether "
                     "they have). Same top class: how often both predict the same "
                     "class. Differs by: the total variation between their average predictions, averaged over "
                     "the images (0 = the same; it is the most probability that any choice of classes gets from "
                     "one and not the other).")

    def __init__(self, column: ColumnViews, title: str, class_names: tuple[str, ...], score: str,
                 set_names: tuple[str, str | None] = ("test set", None), reference_note: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.column = column
        self.name = column.name
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.metrics = MetricsTable()
        self.setMinimumWidth(max(self.MIN_WIDTH, self.metrics.minimumWidth() + 8))  # the metrics' names whole
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.title = column_title(title)
        self.note = QLabel("from the cache" if column.cached else "")
        self.note.setStyleSheet("color: #777;")
        self.note.setToolTip("These results were computed before with the same posterior file, images, "
                             "draws and seed, and kept; nothing was recomputed.")
        self.reliability = ReliabilityPlot()
        self.soft = SoftConfusionPlot(class_names)
        self.hard = HardConfusionPlot(class_names)
        self.errors = ClassErrorPlot(class_names)
        self.rejection = RejectionPlot()
        self.histogram = OodHistogramPlot()
        self.histogram.set_set_names(*set_names)
        self.plots = {"reliability": self.reliability, "ood_histograms": self.histogram, "rejection": self.rejection,
                      "confusion_soft": self.soft, "confusion_hard": self.hard, "per_class_error": self.errors}
        for widget in (self.metrics, *self.plots.values()):
            widget.export_requested.connect(self.export_requested)
        self.soft.cell_clicked.connect(lambda i, j: self.cell_clicked.emit(self.name, True, i, j))
        self.hard.cell_clicked.connect(lambda i, j: self.cell_clicked.emit(self.name, False, i, j))
        self.histogram.bin_clicked.connect(lambda b, ood: self.bin_clicked.emit(self.name, b, ood))
        header = QHBoxLayout()
        header.addWidget(self.title, 1)
        header.addWidget(self.note)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addLayout(header)
        self.reference = QLabel(reference_note)
        self.reference.setWordWrap(True)
        self.reference.setToolTip(self.REFERENCE_TIP)
        self.reference.setVisible(bool(reference_note))
        layout.addWidget(self.reference)
        layout.addWidget(self.metrics)
        for plot in self.plots.values():
            layout.addWidget(plot)
        layout.addStretch(1)
        for plot in (self.reliability, self.soft, self.hard, self.errors, self.rejection):
            plot.show_column(column)
        self.set_score(score)

    def set_score(self, score: str) -> None:
        """Show the histogram (and AUROC) of another uncertainty score."""
        self.metrics.show_column(self.column, score)
        self.histogram.show_column(self.column, score)


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
        self._export_worker = None
        self._run = 0
        self._started = 0.0
        self._restored = False
        self._watching_window = False
        self._current_request: tuple | None = None
        self.result_keys_pending: list[str] = []
        self._item_count = 0  # posteriors of the run under way, a tier's hidden reference included
        self._photo_worker = None
        self._selection_run = 0
        #: The sets last chosen for each task's columns (switching tasks brings them back).
        self._choices: dict[str, tuple[str, str]] = {"digits": ("mnist-test", "notmnist"), "faces": (FACE_SET, ""),
                                                     "images": (IMAGES_FOLDER, "")}
        self._offered_task: str | None = None
        #: Each task's latest results and the column keys they are of: a mode change shows its own.
        self._kept: dict[str, tuple[DatasetViews, list[str]]] = {}
        self._shown_task = workspace.task
        self._run_task = workspace.task
        #: An Evaluate waiting for the columns read at start-up (True: only the silent cache look).
        self._waiting_for_columns: bool | None = None

        self.test_set = QComboBox()
        self.test_set.setToolTip("The images every posterior is judged on. Their true classes give accuracy and "
                                 "calibration; “A folder of IDX files…” takes any data set stored as MNIST is.")
        self.ood_set = QComboBox()
        self.ood_set.setToolTip("Images of something the posteriors never saw in training (letters for a digit "
                                "model). A good posterior is more uncertain on them; the histograms and AUROC "
                                "show how much.")
        for box, entries in ((self.test_set, TEST_SETS), (self.ood_set, OOD_SETS)):
            for shown, spec in entries:
                box.addItem(shown, spec)
            box.addItem("A folder of IDX files…", FOLDER)
            box.addItem("A folder of your images…", IMAGES_FOLDER)
            box.setItemData(box.count() - 1, "One sub-folder of images per class (PNG, JPEG, …), a CSV file of "
                            "path,label rows, or CIFAR's binary files", Qt.ItemDataRole.ToolTipRole)
            box.activated.connect(lambda index, b=box: self._on_set_box_activated(b, index))
        self._previous = {self.test_set: 0, self.ood_set: 1}
        self.ood_set.setCurrentIndex(1)
        self.images = QSpinBox(minimum=0, maximum=100_000, value=0, singleStep=500)
        self.images.setSpecialValueText("all")
        self.images.setToolTip("How many images of each set to use: the first ones (faces: spread over the ages, "
                               "and only those are described); “all” takes the whole set.")
        self.samples = QSpinBox(minimum=1, maximum=1000, value=30, singleStep=10)
        self.samples.setToolTip("Posterior draws per image. Sampled posteriors (SGHMC, …) use at most the draws "
                                "they hold. More draws: smoother uncertainty, longer evaluation.")
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
        self.report_button.clicked.connect(self.export_report_dialog)
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m images")
        self.progress.setToolTip("Images judged by the posterior being evaluated now, out of its total "
                                 "(test and out-of-distribution sets together)")
        self.progress.setVisible(False)
        # wide enough for its words at the largest count: they never run under the bar's fill, cut
        self.progress.setMinimumWidth(self.progress.fontMetrics().horizontalAdvance("100,000 / 100,000 images") + 24)
        self.status = QLabel(IDLE_TEXT)
        self.status.setWordWrap(True)
        self.sets_note = QLabel()
        self.sets_note.setWordWrap(True)
        self.sets_note.setStyleSheet("color: #666;")

        # Two rows that fit a 1024-pixel-wide window: what to evaluate, then running it and the results.
        for box in (self.test_set, self.ood_set, self.score):  # long names are cut, not the window widened
            box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            box.setMinimumContentsLength(10)
        row = QHBoxLayout()
        for label, widget, tip in (("Test set", self.test_set, self.test_set.toolTip()),
                                   ("Out of distribution", self.ood_set, self.ood_set.toolTip()),
                                   ("Images", self.images, self.images.toolTip()),
                                   ("Samples", self.samples, self.samples.toolTip())):
            text = QLabel(label)
            text.setToolTip(tip)
            row.addWidget(text)
            row.addWidget(widget, 1 if isinstance(widget, QComboBox) else 0)
            if widget is not self.samples:
                row.addSpacing(6)
        second = QHBoxLayout()
        second.addWidget(self.evaluate_button)
        second.addWidget(self.cancel_button)
        second.addWidget(self.progress, 2)
        second.addStretch(1)
        histogram_label = QLabel("Histograms of")
        histogram_label.setToolTip(self.score.toolTip())
        second.addWidget(histogram_label)
        second.addWidget(self.score, 1)
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
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.scroll)
        self.splitter.addWidget(self.thumbnails)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addLayout(row)
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
        """Enable only the sets the current columns can read; say why the others are not offered.

        When the columns' task changes, the sets last chosen for that task come back.
        """
        task = self.task
        if self._offered_task is not None and self._offered_task != task:
            self._choices[self._offered_task] = (self.test_set.currentData(), self.ood_set.currentData())
            wanted = self._choices.get(task)
        else:
            wanted = None
        self._offered_task = task
        reason = {"faces": NOT_FOR_FACES, "images": NOT_FOR_IMAGES}.get(task, NOT_FOR_DIGITS)
        for box in (self.test_set, self.ood_set):
            model = box.model()
            for i in range(box.count()):
                spec = box.itemData(i)
                ok = ({FOLDER: task == "digits", IMAGES_FOLDER: task == "images"}.get(spec)
                      if spec in (FOLDER, IMAGES_FOLDER) else readable_by(task, spec, box is self.ood_set))
                model.item(i).setEnabled(ok)
                model.item(i).setToolTip("" if ok else reason)
        if wanted is not None:
            self.set_choice(wanted[0], wanted[1] or None, self.images.value(), self.samples.value())
        for box in (self.test_set, self.ood_set):
            if not model_enabled(box, box.currentIndex()):
                first = next((i for i in range(box.count()) if model_enabled(box, i)), None)
                if first is None:  # nothing these columns read: the choice stays for the other tabs
                    continue
                box.setCurrentIndex(first)
                self._previous[box] = first
        self.sets_note.setText(reason)
        self.sets_note.setToolTip(reason)

    def _on_set_box_activated(self, box: QComboBox, index: int) -> None:
        spec = box.itemData(index)
        if spec not in (FOLDER, IMAGES_FOLDER):
            self._previous[box] = index
            return
        title = ("Choose a folder of IDX files (MNIST layout)" if spec == FOLDER else
                 "Choose a folder of your images (one sub-folder per class)" if box is self.test_set else
                 "Choose a folder of images the posteriors never saw")
        path = QFileDialog.getExistingDirectory(self, title, app_settings.last_folder("data"))
        if not path:
            box.setCurrentIndex(self._previous[box])
            return
        app_settings.remember_folder("data", path)
        if spec == IMAGES_FOLDER and not is_images_folder(path):
            box.setCurrentIndex(self._previous[box])
            self.status.setText(f"“{Path(path).name}” holds no images (PNG, JPEG, …), CSV manifest or CIFAR files.")
            return
        self.set_folder(box, Path(path))

    def set_folder(self, box: QComboBox, folder: Path) -> None:
        """Offer ``folder`` in ``box`` (named by its last part) and select it."""
        found = box.findData(str(folder))
        if found < 0:
            found = box.count() - 2  # before the two "A folder of …" entries
            box.insertItem(found, f"{folder.name} (folder)", str(folder))
            box.setItemData(found, str(folder), Qt.ItemDataRole.ToolTipRole)
        box.setCurrentIndex(found)
        self._previous[box] = found

    def set_choice(self, dataset: str, ood: str | None, images: int = 0, samples: int = 30) -> None:
        """Choose the sets (known names or folders), the number of images (0 = all) and draws."""
        for box, spec in ((self.test_set, dataset), (self.ood_set, ood or "")):
            index = box.findData(spec)
            if index < 0 and spec and Path(spec).is_dir():
                self.set_folder(box, Path(spec))
            elif index >= 0:
                box.setCurrentIndex(index)
                self._previous[box] = index
        self.images.setValue(images)
        self.samples.setValue(samples)

    def request(self) -> tuple[str, str | None, int | None, int]:
        """(test set, OOD set or None, image limit or None, draws) as chosen now."""
        ood = self.ood_set.currentData() or None
        limit = self.images.value() or None
        return self.test_set.currentData(), ood, limit, self.samples.value()

    def columns(self) -> list:
        """The workspace's current columns: digit posteriors, or face heads in the Face mode."""
        return self.workspace.columns_of(self.task)

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

    def reference_notes(self, views: DatasetViews, keys: list[str]) -> dict[str, str]:
        """Per shown column of a tier (by its name in ``views``), how far its predictive lies from
        the tier's reference over the images: top-class agreement and mean total variation."""
        from core.analysis.fidelity import predictive_fidelity

        ref = self.workspace.reference
        if ref is None:
            return {}
        by_key = dict(zip(keys, views.columns, strict=False))
        ref_name = (by_key[ref.key].name if ref.key in by_key else
                    views.columns[-1].name if len(views.columns) > len(keys) else None)
        results = views.evaluation.results
        if ref_name is None or ref_name not in results:
            return {}
        notes = {}
        for key, column in by_key.items():
            shown = self.workspace.column(key)
            if shown is None or self.workspace.reference_for(shown) is None:
                continue
            f = predictive_fidelity(results[ref_name].data.mean_proba, results[column.name].data.mean_proba)
            notes[column.name] = (f"Against {tiers.reference_words(ref.posterior.info)[0].replace('Exact', 'exact')}: "
                                  f"same top class on {f.agreement * 100:.1f}% "
                                  f"of the images; differs by {f.total_variation:.3f} on average")
        return notes

    def _restore_settings(self) -> None:
        read_int, read_str = app_settings.read_int, app_settings.read_str  # a bad value gives way to its default
        self.set_choice(read_str("dataset/test", "mnist-test"), read_str("dataset/ood", "notmnist"),
                        read_int("dataset/images", 0, self.images.minimum(), self.images.maximum()),
                        read_int("dataset/samples", 30, self.samples.minimum(), self.samples.maximum()))
        index = self.score.findData(read_str("dataset/score", "total"))
        self.score.setCurrentIndex(max(index, 0))

    def save_settings(self, evaluated: bool | None = None) -> None:
        dataset, ood, limit, samples = self.request()
        s = app_settings.settings()
        s.setValue("dataset/test", dataset)
        s.setValue("dataset/ood", ood or "")
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
        if self.task == "images":
            if dataset in (IMAGES_FOLDER, None, ""):
                if not cache_only:
                    self.status.setText(CHOOSE_IMAGES)
                return False
            arch = items[0].posterior.arch  # a person's images are read as the models read them
            shape = {"image_size": arch.image_size, "channels": arch.channels}
        self.result_keys_pending = [c.key for c in self.columns()]
        self._item_count = len(items)
        self._run += 1
        run = self._run
        self._run_task = self.task
        self._current_request = (dataset, ood, limit, samples, cache_only)
        gen = run_evaluation(items, dataset, ood, app_settings.data_folder(), limit, num_samples=samples,
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
        """Stop the evaluation: the screen is free at once; the worker ends after its current batch."""
        if self._worker is None:
            return
        self._worker.quit()
        self._worker = None
        self._run += 1  # late signals of the stopped run are ignored
        self._set_running(False)
        self.offer_sets()
        if not quiet:
            self.status.setText("Evaluation cancelled; nothing of it was kept.")
        self.run_ended.emit()

    def _set_running(self, running: bool) -> None:
        self.evaluate_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for widget in (self.test_set, self.ood_set, self.images, self.samples):
            widget.setEnabled(not running)
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
        text = f"{plural(len(self.result_keys), 'posterior')} on {len(views.data):,} {dataset_words(ev.dataset)}"
        if views.ood is not None:
            text += f" and {len(views.ood):,} {dataset_words(ev.ood_dataset or '')}"
        text += f", in {elapsed:.1f} s"
        if cached:
            text += f" ({cached} from the cache)"
        what = "photos" if views.faces is not None else "images"
        self.status.setText(text + f". Click a confusion cell or a histogram bar to see its {what}.")
        self.save_settings(evaluated=True)

    def _on_worker_errored(self, run: int, exc: BaseException) -> None:
        if run != self._run:
            return
        if self._current_request and self._current_request[-1]:  # the silent look into the cache
            self.status.setText(IDLE_TEXT)
            return
        self.status.setText("The evaluation stopped.")
        if not self._offer_download(exc):
            QMessageBox.critical(self, "The evaluation stopped", self._explain(exc))

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

    def _explain(self, exc: BaseException) -> str:
        from core.engine.data.datasets import DatasetNotFoundError
        from core.engine.data.locate import DatasetMissingError

        if isinstance(exc, DatasetMissingError):  # names the set, every place looked in, what to do
            return f"{exc} {CHOOSE_DATA_FOLDER}"
        if isinstance(exc, DatasetNotFoundError):
            dataset, ood, _, _, _ = self._current_request or ("", None, None, 0, False)
            if dataset == FACE_SET:
                return ("UTKFace could not be found. Choose the folder that holds it with File → Choose data "
                        "folder…: its “utkface” folder (or the folder itself) must hold UTKFace's archive "
                        "(UTKFace.tar.gz) or its folder of face images.")
            missing = [spec for spec in (dataset, ood) if spec]
            words = [dataset_words(spec) if not Path(spec).is_dir() else f"the folder “{Path(spec).name}”"
                     for spec in missing]
            return (f"The images could not be found ({' or '.join(words)}). For MNIST and notMNIST, choose the "
                    "folder that holds them with File → Choose data folder…; a folder of your own must hold "
                    "the test files in MNIST layout (t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, "
                    "optionally gzipped).")
        return plain_sentence(exc)

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
        notes = self.reference_notes(views, self.result_keys)
        for column in views.columns[:len(self.result_keys)]:  # a tier's hidden reference last, not shown
            ev = views.evaluation
            sets = (dataset_words(ev.dataset), dataset_words(ev.ood_dataset) if ev.ood_dataset else None)
            widget = DatasetColumn(column, column.name, ev.class_names, score, sets, notes.get(column.name, ""))
            widget.export_requested.connect(self.export_view_dialog)
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
        views = self.results
        data = views.ood if ood else views.data
        preds = views.evaluation.results[name].ood if ood else views.evaluation.results[name].data
        shown = selection.indices[:MAX_THUMBNAILS]
        names = views.evaluation.class_names
        own = data.class_names or names
        words = dataset_words(selection.set_name)
        labels, tips = [], []
        for index in shown:
            truth = own[int(data.y[index])]
            guess = int(preds.predictions[index])
            labels.append(f"{words} #{index} (true class {truth})")
            tips.append(f"#{index}: true {truth}, read as {names[guess]} "
                        f"(mean probability {preds.mean_proba[index, guess]:.2f})")
        total = len(selection.indices)
        more = f", the first {len(shown)} shown" if total > len(shown) else ""
        faces = views.faces if not ood else None
        noun = "face" if faces is not None else "image"
        where = "the Face tab" if faces is not None else "“This input”"
        caption = (f"<b>{name}</b> · {plural(total, noun)} of the {words}: {selection.description}{more}. "
                   f"Click one to judge it in {where}.")
        if total == 0:
            caption = f"<b>{name}</b>: no {noun} of the {words} here ({selection.description})."
        if self.thumbnails.isHidden():
            total_height = sum(self.splitter.sizes())
            self.splitter.setSizes([max(total_height - 200, 100), 200])
        self._selection_run += 1
        if faces is not None:
            rows = [int(i) for i in shown]
            labels = [faces.names[r].rsplit("/", 1)[-1] for r in rows]
            if not rows:
                self.thumbnails.show_message(caption)
                self.thumbnails_shown.emit()
                return
            self.thumbnails.show_message(f"Reading {plural(len(rows), 'photo')}…")
            self._read_photos(faces, rows, caption, labels, tips)
            return
        if data.x.ndim == 4 and data.x.shape[1] == 3:  # a person's colour images, as the models see them
            colour = np.rint(np.clip(data.x[shown].numpy().transpose(0, 2, 3, 1), 0, 1) * 255).astype(np.uint8)
            self.thumbnails.show_images(caption, list(colour), labels, tips, photos=True)
            return
        images = data.x[shown, 0].numpy() if len(shown) else np.zeros((0, 28, 28), np.float32)
        self.thumbnails.show_images(caption, images, labels, tips, photos=self.task == "images")

    def _read_photos(self, faces, rows: list[int], caption: str, labels: list[str], tips: list[str]) -> None:
        """Read the photos behind a selection from UTKFace's archive or folder (a second or two),
        then show them; a newer selection supersedes a pending one."""
        selection = self._selection_run
        worker = function_worker(faces.photos, rows)

        def show(photos) -> None:
            if selection == self._selection_run:
                self.thumbnails.show_images(caption, photos, labels, tips)
                self.thumbnails_shown.emit()

        def fail(exc) -> None:
            if selection == self._selection_run:
                self.thumbnails.show_message(f"The photos could not be read: {plain_sentence(exc)}")

        worker.returned.connect(show)
        worker.errored.connect(fail)
        worker.finished.connect(lambda: setattr(self, "_photo_worker", None))
        self._photo_worker = worker
        worker.start()

    # ---------------------------------------------------------------- export
    def export_view_dialog(self, view: str) -> None:
        from core.outputs.export import PLOT_FILTERS, slug, with_suffix_from_filter

        if self.results is None:
            return
        filters = PLOT_FILTERS if view != "summary" else {k: v for k, v in PLOT_FILTERS.items() if v in (".csv", ".json")}
        suggested = f"{slug(DATASET_VIEWS[view])}{'.csv' if view == 'summary' else '.png'}"
        path, chosen = QFileDialog.getSaveFileName(self, f"Export: {DATASET_VIEWS[view].lower()}",
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

        return self._export(export_dataset_view, (self.results, view, path),
                            f"Exporting {DATASET_VIEWS[view].lower()}…",
                            lambda written: f"Exported {DATASET_VIEWS[view].lower()} to "
                                            f"{', '.join(p.name for p in written)}.")

    def export_report_dialog(self) -> None:
        if self.results is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export the evaluation report",
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

        return self._export(write_html_report, (self.results.evaluation, path, self.results.tables),
                            "Writing the report…", lambda written: f"Wrote the report “{Path(written).name}”.")

    def _export(self, func, args: tuple, busy: str, done) -> bool:
        if self.results is None or self._export_worker is not None:
            return False
        worker = function_worker(func, *args)
        worker.returned.connect(lambda written: self.status.setText(done(written)))
        worker.errored.connect(lambda exc: QMessageBox.warning(self, "Could not export", plain_sentence(exc)))
        worker.finished.connect(self._on_export_worker_finished)
        self._export_worker = worker
        self.status.setText(busy)
        worker.start()
        return True

    def _on_export_worker_finished(self) -> None:
        self._export_worker = None

    # ----------------------------------------------------------------- cache
    def clear_cache(self) -> int:
        """Delete every cached evaluation; the results shown stay."""
        from core.outputs.evaluation_cache import clear_cache

        removed = clear_cache()
        self.status.setText(f"Removed {plural(removed, 'cached evaluation')}." if removed
                            else "There were no cached evaluations.")
        return removed
