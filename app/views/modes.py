"""The input modes: draw a digit, rotate a character, load an image (a face mode plugs in here).

Each mode is a panel that emits ``input_changed`` when its input changes; ``current_input()``
gives the 28×28 model input (or None when there is nothing to judge) and a label in words.
The main window reads the current mode's input, at most once per tick, and shows it to every
column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSlider,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.views.canvas import DrawingCanvas
from app.views.square import SquareContainer
from core.engine.data.corruptions import CORRUPTIONS, MAX_SEVERITY, corrupt
from core.engine.data.preprocess import EmptyDrawingError, load_image, rotate_image, to_mnist

#: Below this share of the canvas the drawing is scaled up a lot and thin strokes blur.
SMALL_INK = 0.3


class ModePanel(QWidget):
    """Signals
    -------
    input_changed
        The input changed: read it with :meth:`current_input`. The signal carries nothing, so
        that a stroke's many events cost no preprocessing until the window reads the input
        (which it does at most once per tick).
    """

    input_changed = Signal()
    mode_name = ""

    def current_input(self) -> tuple[np.ndarray | None, str]:
        raise NotImplementedError

    def note(self) -> str:
        """A warning in words about the current input, or ''."""
        return ""


class DrawPanel(ModePanel):
    mode_name = "Draw"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.canvas = DrawingCanvas()
        self.brush = QSlider(Qt.Orientation.Horizontal, minimum=4, maximum=60, value=self.canvas.brush_size)
        self.brush.setToolTip("Brush size ([ and ] change it)")
        self.brush.valueChanged.connect(self._on_brush_changed)
        undo = QToolButton(text="Undo")
        undo.setToolTip("Undo the last stroke (Ctrl+Z)")
        clear = QToolButton(text="Clear")
        clear.setToolTip("Clear the drawing (Delete)")
        undo.clicked.connect(self.canvas.undo)
        clear.clicked.connect(self.canvas.clear)
        tools = QHBoxLayout()
        tools.addWidget(QLabel("Brush"))
        tools.addWidget(self.brush, 1)
        tools.addWidget(undo)
        tools.addWidget(clear)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(tools)
        layout.addWidget(SquareContainer(self.canvas), 1)
        self.canvas.drawing_changed.connect(self.input_changed)
        self.canvas.stroke_finished.connect(self.input_changed)
        # the grey levels last preprocessed and the model input made of them (see current_input)
        self._last_read: tuple[int, np.ndarray | None] | None = None

    def _on_brush_changed(self, value: int) -> None:
        self.canvas.brush_size = value

    def current_input(self) -> tuple[np.ndarray | None, str]:
        # A stroke's end asks again for the drawing its last move was read from (the full count
        # follows the preview): the canvas's revision is compared with that of the last read
        # rather than the drawing preprocessed again (≈ 1.1 ms of the full count's update).
        revision = self.canvas.revision
        if self._last_read is not None and self._last_read[0] == revision:
            model_input = self._last_read[1]
        else:
            try:
                model_input = to_mnist(self.canvas.ink_array())
            except EmptyDrawingError:
                model_input = None
            self._last_read = (revision, model_input)
        # a copy: whoever reads it may keep or change it
        return (None, "") if model_input is None else (model_input.copy(), "your drawing")

    def note(self) -> str:
        extent = self.canvas.ink_extent()
        if 0 < extent < SMALL_INK:
            return "The drawing is small: draw the digit larger, filling most of the square, so thin strokes are not blurred."
        return ""


#: What the Rotate tab sweeps, by key: the rotation, or one corruption of
#: :mod:`core.engine.data.corruptions` (its severity slider then corrupts the image shown).
SWEEP_KINDS: tuple[tuple[str, str], ...] = (("rotation", "Rotation"),
                                            *((c.name, c.label) for c in CORRUPTIONS.values()))


def sweep_button_words(kind: str) -> str:
    """The sweep button's words for ``kind`` (the Sweep tab names the button the same way)."""
    if kind == "rotation":
        return "Sweep 0–180°"
    if kind == "occlusion":
        return "Move the patch across"
    return "Sweep severity 0–5"


class RotatePanel(ModePanel):
    """A digit, a letter or the drawing, rotated by a slider and, when a corruption is chosen,
    corrupted by a severity slider; and the sweep of the angle (0–180°), of the severity (0–5),
    or of the occluding patch's place.

    Signals
    -------
    sweep_requested(object, str)
        The image to sweep and its label: unrotated for the rotation sweep, turned by the angle
        slider for a corruption sweep (:meth:`sweep_kind` says which).
    data_folder_requested
        The person wants to choose the data folder (it holds ``mnist/``, ``notmnist/``).
    download_requested(str)
        The person asked to download a missing data set (MNIST) into the user cache.
    """

    mode_name = "Rotate"
    sweep_requested = Signal(object, str)
    sweep_cancelled = Signal()
    data_folder_requested = Signal()
    download_requested = Signal(str)
    SOURCES = (("drawing", "Your drawing or image"), ("mnist-test", "An MNIST test digit"), ("notmnist", "A notMNIST letter"))
    ROTATION_TIP = ("Rotate the image from 0° to 180° in 10° steps and plot, for every column, how the class "
                    "probabilities and the uncertainties change with the angle (Gal & Ghahramani's rotated-digit "
                    "figure)")
    SEVERITY_TIP = ("Corrupt the image shown (turned by the angle) at severities 0 to 5 in half levels and plot, "
                    "for every column, how the class probabilities and the uncertainties change with the "
                    "severity (as MNIST-C and CIFAR-C grade their corruptions)")
    OCCLUSION_TIP = ("Move a grey patch, of the size the severity slider sets, from the left edge to the right "
                     "edge across the middle of the image shown, and plot for every column how the class "
                     "probabilities and the uncertainties change with where it lies")

    def __init__(self, load_dataset, parent: QWidget | None = None) -> None:
        """``load_dataset(name)`` returns a core Dataset or raises with a message in words."""
        super().__init__(parent)
        self._load_dataset = load_dataset
        self._drawing: np.ndarray | None = None
        self._drawing_label = ""
        self.source = QComboBox()
        for key, text in self.SOURCES:
            self.source.addItem(text, key)
        self.source.setToolTip("What to rotate: your drawing (Draw tab) or image (Image tab), a digit from MNIST's test set, or a letter A–J from notMNIST (characters the digit models never saw)")
        self.index = QSpinBox(minimum=0, maximum=9999)
        self.index.setToolTip("Which image of the test set")
        self.random = QToolButton(text="Random")
        self.random.setToolTip("Pick a random image")
        self.angle = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=360, value=0)
        self.angle.setToolTip("Rotation angle, counter-clockwise (Left/Right keys step 1°, Page Up/Down 10°)")
        self.angle.setPageStep(10)
        self.angle_label = QLabel("0°")
        self.angle_label.setMinimumWidth(36)
        self.kind = QComboBox()
        for key, text in SWEEP_KINDS:
            self.kind.addItem(text, key)
        self.kind.setToolTip("What the sweep changes: the angle, or a corruption of the image (Gaussian noise, "
                             "blur, contrast, a grey patch, a shift) whose severity the slider below sets")
        self.severity = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=int(MAX_SEVERITY), value=0)
        self.severity.setPageStep(1)
        self.severity.setTickPosition(QSlider.TickPosition.TicksBelow)
        self.severity_label = QLabel("0")
        self.severity_label.setMinimumWidth(36)
        #: The seed of the random part (the noise, the shift's direction) of the image shown and swept:
        #: one fixed draw that the slider only scales, until "New draw" takes the next seed.
        self.noise_seed = 0
        self.new_draw = QToolButton(text="New draw")
        self.new_draw.clicked.connect(self._on_new_draw_clicked)
        self.seed_label = QLabel()
        self.seed_label.setToolTip("Which random draw the image shows and a sweep uses: the same seed gives the "
                                   "same noise (or direction) every time")
        self.sweep = QPushButton(sweep_button_words("rotation"))
        self.sweep.setToolTip(self.ROTATION_TIP)
        self.cancel = QPushButton("Cancel")
        self.cancel.setVisible(False)
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        # hidden between sweeps but keeping their room: the image, the slider and the Sweep
        # button stay where they are when a sweep starts and ends (they jumped, issue 47 item 14)
        for widget in (self.cancel, self.progress):
            policy = widget.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            widget.setSizePolicy(policy)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.choose_folder = QPushButton("Choose data folder…")
        self.choose_folder.setToolTip(
            "The one data folder (also read by the Dataset tab and the training dialog): it holds a "
            "folder per data set, “mnist” and “notmnist”, each with its IDX files")
        self.choose_folder.setVisible(False)
        self.download = QPushButton("Download MNIST")
        self.download.setToolTip("Fetch MNIST's 10,000 test digits (about 2 MB) into bayescope's user cache")
        self.download.setVisible(False)
        self._missing = None
        self._sample_line: str | None = None
        self.thumbnail = QLabel()
        self.thumbnail.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.thumbnail.setMinimumSize(168, 168)

        pick = QHBoxLayout()
        pick.addWidget(QLabel("Image"))
        pick.addWidget(self.index, 1)
        pick.addWidget(self.random)
        angle = QHBoxLayout()
        angle.addWidget(QLabel("Angle"))
        angle.addWidget(self.angle, 1)
        angle.addWidget(self.angle_label)
        kind_label = QLabel("S&weep")
        kind_label.setBuddy(self.kind)  # Alt+W reaches the choice from the keyboard
        kind = QHBoxLayout()
        kind.addWidget(kind_label)
        kind.addWidget(self.kind, 1)
        self.severity_row = QWidget()
        severity = QHBoxLayout(self.severity_row)
        severity.setContentsMargins(0, 0, 0, 0)
        severity_name = QLabel("Se&verity")
        severity_name.setBuddy(self.severity)  # Alt+V
        severity.addWidget(severity_name)
        severity.addWidget(self.severity, 1)
        severity.addWidget(self.severity_label)
        severity.addWidget(self.new_draw)
        severity.addWidget(self.seed_label)
        sweep = QHBoxLayout()
        sweep.addWidget(self.sweep, 1)
        sweep.addWidget(self.cancel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.source)
        layout.addLayout(pick)
        layout.addWidget(self.message)
        layout.addWidget(self.choose_folder)
        layout.addWidget(self.download)
        layout.addWidget(self.thumbnail, 1)
        layout.addLayout(angle)
        layout.addLayout(kind)
        layout.addWidget(self.severity_row)
        layout.addLayout(sweep)
        layout.addWidget(self.progress)

        self.source.currentIndexChanged.connect(self._on_source_changed)
        self.index.valueChanged.connect(self._on_changed)
        self.random.clicked.connect(self._on_random_clicked)
        self.angle.valueChanged.connect(self._on_changed)
        self.angle.sliderReleased.connect(self._on_changed)
        self.kind.currentIndexChanged.connect(self._on_kind_changed)
        self.severity.valueChanged.connect(self._on_changed)
        self.sweep.clicked.connect(self._on_sweep_clicked)
        self.cancel.clicked.connect(self.sweep_cancelled)
        self.choose_folder.clicked.connect(self.data_folder_requested)
        self.download.clicked.connect(self._on_download_clicked)
        self._on_kind_changed()
        self._on_source_changed()

    # ------------------------------------------------------------------ state
    def set_drawing(self, image: np.ndarray | None, label: str = "your drawing") -> None:
        """The latest drawing or loaded image (28×28), offered as the first source."""
        self._drawing, self._drawing_label = image, label
        if self.source.currentData() == "drawing":
            self._on_changed()

    def base_image(self) -> tuple[np.ndarray | None, str]:
        """The unrotated 28×28 image and its label, or (None, reason)."""
        key = self.source.currentData()
        if key == "drawing":
            if self._drawing is None:
                return None, "Draw a digit or open an image first, or pick an MNIST digit or a notMNIST letter."
            return self._drawing, self._drawing_label
        self._missing = None
        self._sample_line = None
        try:
            data = self._load_dataset(key)
        except Exception as exc:  # noqa: BLE001 — any failure is shown in words beside the button
            from core.engine.data.locate import DOWNLOAD_IN_WINDOW, DatasetMissingError

            if isinstance(exc, DatasetMissingError):  # what, where looked, what to do
                self._missing = exc
                return None, exc.with_hint(DOWNLOAD_IN_WINDOW) + " Or choose another data folder."
            return None, str(exc)
        from core.engine.data.locate import sample_notice

        self._sample_line = sample_notice(data.source)  # the bundled sample, until a data folder is chosen
        if self.index.maximum() != len(data) - 1:
            self.index.blockSignals(True)
            self.index.setMaximum(len(data) - 1)
            self.index.blockSignals(False)
        i = min(self.index.value(), len(data) - 1)
        label = data.class_names[int(data.y[i])] if data.class_names else str(int(data.y[i]))
        kind = "MNIST test digit" if key == "mnist-test" else "notMNIST letter"
        return data.x[i, 0].numpy(), f"{kind} #{i} (a {label})"

    def sweep_kind(self) -> str:
        """What the sweep changes: ``"rotation"`` or a corruption's name."""
        return self.kind.currentData()

    def sweep_severity(self) -> float:
        """The severity slider's value (0 while the rotation is swept)."""
        return 0.0 if self.sweep_kind() == "rotation" else float(self.severity.value())

    def sweep_base(self) -> tuple[np.ndarray | None, str]:
        """The image a sweep of the chosen kind starts from, and its label: the unrotated image for
        the rotation sweep, the image turned by the angle slider for a corruption sweep."""
        image, label = self.base_image()
        if image is None or self.sweep_kind() == "rotation":
            return image, label
        degrees = self.angle.value()
        return rotate_image(image, degrees), (f"{label} rotated {degrees}°" if degrees else label)

    def current_input(self) -> tuple[np.ndarray | None, str]:
        image, label = self.base_image()
        self._show_message(image, label)
        if image is None:
            return None, ""
        degrees = self.angle.value()
        shown = rotate_image(image, degrees)
        label = f"{label} rotated {degrees}°"
        kind, severity = self.sweep_kind(), self.sweep_severity()
        if severity > 0:
            # one fixed draw (noise_seed), so the slider only scales it; the patch in the middle
            options = {"position": (0.5, 0.5)} if kind == "occlusion" else {}
            shown = corrupt(shown, kind, severity, self.noise_seed, **options)
            label += f", {CORRUPTIONS[kind].in_sentence} at severity {severity:g}"
            if CORRUPTIONS[kind].random:
                label += f" (draw {self.noise_seed})"
        self._show_thumbnail(shown)
        return shown, label

    def set_sweep_running(self, running: bool) -> None:
        self.sweep.setEnabled(not running)
        self.cancel.setVisible(running)
        self.progress.setVisible(running)
        if running:
            self.progress.setValue(0)

    # ---------------------------------------------------------------- display
    def _show_message(self, image: np.ndarray | None, text: str) -> None:
        missing = image is None and self.source.currentData() != "drawing"
        sample = image is not None and self.source.currentData() != "drawing" and self._sample_line
        self.message.setText(self._sample_line if sample else "" if image is not None else text)
        self.choose_folder.setVisible(missing or bool(sample))
        self.download.setVisible(missing and self._missing is not None and self._missing.downloadable)
        sizeless = self.sweep_kind() == "occlusion" and self.severity.value() == 0  # no patch to move
        self.sweep.setEnabled(image is not None and not self.cancel.isVisible() and not sizeless)
        if image is None:
            self.thumbnail.clear()

    def set_downloading(self, running: bool) -> None:
        """A download started (button off, saying so) or ended."""
        self.download.setEnabled(not running)
        self.download.setText("Downloading MNIST…" if running else "Download MNIST")

    def set_download_failed(self, text: str) -> None:
        self.message.setText(f"The download failed: {text}")

    def _show_thumbnail(self, image: np.ndarray) -> None:
        data = np.ascontiguousarray((np.clip(image, 0, 1) * 255).astype(np.uint8))
        qimage = QImage(data.data, 28, 28, 28, QImage.Format.Format_Grayscale8).copy()
        self.thumbnail.setPixmap(QPixmap.fromImage(qimage).scaled(168, 168, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.FastTransformation))

    # ------------------------------------------------------------------ slots
    def _on_source_changed(self) -> None:
        from_set = self.source.currentData() != "drawing"
        self.index.setEnabled(from_set)
        self.random.setEnabled(from_set)
        self._on_changed()

    def _on_kind_changed(self) -> None:
        kind = self.sweep_kind()
        self.severity_row.setVisible(kind != "rotation")
        self.sweep.setText(sweep_button_words(kind))
        self.sweep.setToolTip({"rotation": self.ROTATION_TIP, "occlusion": self.OCCLUSION_TIP}.get(kind, self.SEVERITY_TIP))
        if kind != "rotation":
            self.severity.setToolTip(f"How strong the {CORRUPTIONS[kind].in_sentence} of the image shown is, "
                                     f"0 (none) to 5: {CORRUPTIONS[kind].scale} (Left/Right keys step one level)")
        random = kind != "rotation" and CORRUPTIONS[kind].random
        self.new_draw.setVisible(random)
        self.seed_label.setVisible(random)
        if random:
            what = "noise" if kind == "noise" else "direction of the shift"
            self.new_draw.setToolTip(f"The {what} is random: draw it anew (the next seed). The image shown and "
                                     "the next sweep use the new draw; severity 0 stays the clean image.")
        self._on_changed()

    def _on_changed(self) -> None:
        self.angle_label.setText(f"{self.angle.value()}°")
        self.severity_label.setText(str(self.severity.value()))
        self.seed_label.setText(f"seed {self.noise_seed}")
        self.current_input()  # the panel's own thumbnail and message follow at once; the window reads on its tick
        self.input_changed.emit()

    def new_noise_draw(self, seed: int | None = None) -> int:
        """Draw the random part anew: ``seed``, or the next one; returns it."""
        self.noise_seed = self.noise_seed + 1 if seed is None else int(seed)
        self._on_changed()
        return self.noise_seed

    def _on_new_draw_clicked(self) -> None:
        self.new_noise_draw()

    def _on_random_clicked(self) -> None:
        self.index.setValue(int(np.random.default_rng().integers(0, self.index.maximum() + 1)))

    def _on_download_clicked(self) -> None:
        if self._missing is not None:
            self.download_requested.emit(self._missing.name)

    def _on_sweep_clicked(self) -> None:
        image, label = self.sweep_base()
        if image is not None:
            self.sweep_requested.emit(image, label)


class ImagePanel(ModePanel):
    """An image file: opened with the button or Ctrl+I, or dropped on the window.

    It judges a digit (the file read as MNIST's digits were prepared) while the columns are
    digit posteriors, and a photo (:class:`core.engine.data.images.Photo`, which each column
    reads at its own size and channels, as its training images were read) while they are
    posteriors of a person's own images: the window says which with :meth:`set_judges_photos`.

    Signals
    -------
    open_requested
        The person asked to pick a file.
    """

    mode_name = "Image"
    open_requested = Signal()
    DIGIT_WORDS = ("The digit posteriors judge this image as a digit. A posterior trained on your own "
                   "images, once added, judges it in colour instead.")
    PHOTO_WORDS = ("The posteriors of your own images judge this photo, each reading it as its training images "
                   "were read. The digit posteriors judge the Draw and Rotate tabs, and this one again "
                   "when no posterior of your images is shown.")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._image: np.ndarray | None = None  # the digit (28×28), or None when the file shows none
        self._photo = None  # the file as a Photo, or None (a digit picked in the Dataset tab)
        self._grey: np.ndarray | None = None
        self._label = ""
        self._digit_problem = ""  # why the file gives no digit, in a sentence
        self.photos = False
        self.open = QPushButton("Open an image…")
        self.open.setToolTip("A photo or scan: PNG, JPEG, BMP, GIF, TIFF or WebP (Ctrl+I). You can also drop a file on the window.")
        self.open.clicked.connect(self.open_requested)
        self.judging = QLabel(self.DIGIT_WORDS)
        self.judging.setWordWrap(True)
        self.picture = QLabel("No image yet.\nOpen one, or drop a file on the window.")
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.picture.setMinimumSize(200, 200)
        self.picture.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.open)
        layout.addWidget(self.judging)
        layout.addWidget(self.picture, 1)

    def set_judges_photos(self, photos: bool) -> None:
        """Whether the columns shown read photos (one's own images) or digits; the caller reads
        :meth:`current_input` again."""
        self.photos = photos
        self.judging.setText(self.PHOTO_WORDS if photos else self.DIGIT_WORDS)
        self._show_picture()

    def load(self, path: Path) -> None:
        """Read an image file; raises ``ImageLoadError`` (or, while digits are judged,
        ``EmptyDrawingError``) with a sentence."""
        from core.engine.data.images import open_photo

        photo = open_photo(path)
        try:
            grey = load_image(path)
            digit, problem = to_mnist(grey), ""
        except EmptyDrawingError as exc:
            if not self.photos:
                raise
            grey, digit, problem = None, None, str(exc)
        self._photo, self._digit_problem = photo, problem
        self._set(digit, f"the image {Path(path).name}", grey)

    def set_photo(self, photo, label: str) -> None:
        """Show a :class:`core.engine.data.images.Photo` (e.g. one of a person's images picked in
        the Dataset tab) for the posteriors of one's own images; it shows no digit."""
        self._photo, self._digit_problem = photo, "This image is one of your own, not a digit."
        self._set(None, label, None)

    def set_array(self, model_input: np.ndarray, label: str, picture: np.ndarray | None = None) -> None:
        """Show a ready 28×28 model input (e.g. a test image picked in the Dataset tab)."""
        self._photo, self._digit_problem = None, ""
        self._set(np.asarray(model_input, dtype=np.float32), label, picture)

    def _set(self, digit: np.ndarray | None, label: str, grey: np.ndarray | None) -> None:
        self._image, self._label = digit, label
        self._grey = digit if grey is None else grey
        self._show_picture()
        self.input_changed.emit()

    def _show_picture(self) -> None:
        if self._photo is not None and (self.photos or self._grey is None):
            rgb = self._photo.picture(240)
            h, w, _ = rgb.shape
            qimage = QImage(np.ascontiguousarray(rgb).data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()
        elif self._grey is not None:
            data = np.ascontiguousarray((np.clip(self._grey, 0, 1) * 255).astype(np.uint8))
            h, w = data.shape
            qimage = QImage(data.data, w, h, w, QImage.Format.Format_Grayscale8).copy()
        else:
            return
        self.picture.setPixmap(QPixmap.fromImage(qimage).scaled(240, 240, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation))

    def current_input(self):
        """The photo while photos are judged (the 28×28 digit when there is no file, e.g. a
        digit picked in the Dataset tab: those columns then say why they cannot judge it), else
        the digit."""
        if self.photos and self._photo is not None:
            return self._photo, self._label
        return self.digit_input()

    def digit_input(self) -> tuple[np.ndarray | None, str]:
        """The file as a digit (what the Rotate tab turns), or (None, "")."""
        return (self._image, self._label) if self._image is not None else (None, "")

    def note(self) -> str:
        if not self.photos and self._photo is not None and self._image is None and self._digit_problem:
            return "This image shows no digit for the digit posteriors to judge."
        return ""
