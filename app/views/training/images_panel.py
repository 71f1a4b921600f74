"""The training images: MNIST's digits from the one data folder (found, or to download), or a
folder of one's own images, read in the background and said in words."""

from __future__ import annotations

import html
from collections.abc import Generator
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QFileDialog, QFormLayout, QLineEdit, QWidget

from app import settings as app_settings
from app.views.training import runs
from app.views.training.fields import WrappedLabel, browse_row, form_label
from app.views.training.folder_reader import FolderReader
from core.engine.data.datasets import DatasetContentError
from core.engine.data.folder import FolderData, check_training_classes
from core.engine.data.listing import listing_digest
from core.engine.data.locate import DatasetMissingError, find_dataset
from core.engine.inference.base import Posterior
from core.engine.models import COLOUR_IMAGE_SIZE, IMAGE_SIZE, ArchSpec
from core.engine.training_plan import MNIST_TRAIN_IMAGES, count_training_images
from core.engine.training_words import DOWNLOAD_HINT, FOLDER_SIDES, folder_in_words, folder_problem

#: The “Training images” choices.
MNIST_IMAGES = "mnist"
FOLDER_IMAGES = "folder"


class ImagesPanel(QObject):
    """Binds the training images both ways: :meth:`choose_images_folder` in, :attr:`uses_folder`,
    :attr:`folder_data` (once read) and :attr:`folder_problem` out.

    Signals
    -------
    changed
        The source changed, or a folder was read (or found unusable).
    folder_read(FolderData)
        A folder of one's own images was read and can train.
    """

    changed = Signal()
    folder_read = Signal(object)

    def __init__(self, dialog: QWidget, form: QFormLayout) -> None:
        super().__init__(dialog)
        self._dialog, self._form = dialog, form
        self.folder_data: FolderData | None = None
        self.folder_problem: str | None = None
        self._folder_read: str | None = None  # the folder folder_data (or the problem) is of
        chosen = app_settings.data_folder()
        self.data_dir = QLineEdit(str(chosen) if chosen else "")
        self.data_dir.setPlaceholderText("none chosen: the user cache")
        self.data_dir.setToolTip(
            "The data folder, the same one the Rotate and Dataset tabs read (File → Choose data "
            "folder…): it holds one folder per data set, “mnist”, “notmnist” and “utkface”. "
            "MNIST's training files (train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz) "
            "are looked for in its “mnist” folder, then in bayescope's user cache."
        )
        self.data_row = browse_row(self.data_dir, "Choose the data folder (the folder that holds “mnist”).",
                                   self.browse_data_folder)
        self.data_found = WrappedLabel()
        self.data_found.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download = QCheckBox("download MNIST's training images (about 10 MB) into the user cache")
        self.download.setToolTip(
            "MNIST is not in the data folder: fetch its 60,000 training images from the public "
            "mirrors when the run starts. They are kept in bayescope's user cache for next time."
        )
        self.images_source = QComboBox()
        self.images_source.addItem("MNIST digits", MNIST_IMAGES)
        self.images_source.addItem("a folder of your own images…", FOLDER_IMAGES)
        self.images_source.setToolTip(
            "<p>What the posterior learns to tell apart: MNIST's handwritten digits, or your own "
            "images, one sub-folder per class (the sub-folders' names become the class names). "
            "A posterior of your own images judges photos on the Image tab.</p>"
        )
        self.images_folder = QLineEdit()
        self.images_folder.setPlaceholderText("none chosen")
        self.images_folder.setToolTip(
            "<p>A folder with one sub-folder of images per class (“cats/”, “dogs/”…), or a CSV file "
            "of path,label rows, or CIFAR's binary files. Colour images train the colour network "
            "(ResNet-8); grey ones the digit networks. A fifth of each class is kept aside to "
            "check the result.</p>"
        )
        self.images_row = browse_row(self.images_folder, "Choose the folder of your images (one sub-folder per "
                                     "class).", self._on_browse_images_clicked)
        self.folder_found = WrappedLabel()
        self.folder_found.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.image_size = QComboBox()
        self.image_size.addItem(f"as usual: {COLOUR_IMAGE_SIZE} pixels for colour, {IMAGE_SIZE} for grey", None)
        for side in FOLDER_SIDES:
            self.image_size.addItem(f"{side}×{side} pixels", side)
        self.image_size.setToolTip(
            "<p>The side every image is brought to before the network sees it: its shorter side is "
            "scaled to this many pixels and the centre square is cut out. A larger side keeps more "
            "detail and trains more slowly (the estimate below follows the choice). Photos judged "
            "later are read at the same side.</p>"
            f"<p><i>Unit:</i> pixels · <i>Default:</i> {COLOUR_IMAGE_SIZE} for colour, {IMAGE_SIZE} for grey</p>"
        )
        self.reader = FolderReader(self)
        self.reader.progressed.connect(self._on_reader_progressed)
        self.reader.read.connect(self._on_reader_read)
        self.reader.failed.connect(self._on_reader_failed)

    def add_rows(self, form: QFormLayout) -> None:
        form.addRow(form_label("Training images", self.images_source.toolTip()), self.images_source)
        form.addRow(form_label("Data folder", self.data_dir.toolTip()), self.data_row)
        form.addRow("", self.data_found)
        form.addRow("", self.download)
        form.addRow(form_label("Images folder", self.images_folder.toolTip()), self.images_row)
        form.addRow("", self.folder_found)
        form.addRow(form_label("Image size", self.image_size.toolTip()), self.image_size)

    def connect_fields(self) -> None:
        """Follow the fields from now on (once their stored values are shown), and show what they say."""
        self.image_size.currentIndexChanged.connect(self._on_images_folder_text_changed)
        self._on_data_dir_text_changed()
        self.data_dir.textChanged.connect(self._on_data_dir_text_changed)
        self._on_images_source_changed()
        self.images_source.currentIndexChanged.connect(self._on_images_source_changed)
        self.images_folder.textChanged.connect(self._on_images_folder_text_changed)

    @property
    def uses_folder(self) -> bool:
        """Whether the posterior learns a folder of one's own images (else MNIST's digits)."""
        return self.images_source.currentData() == FOLDER_IMAGES

    @property
    def reading_folder(self) -> bool:
        """Whether a folder of one's own images is being read (or about to be)."""
        return self.reader.reading

    def choose_images_folder(self, folder: str | Path | None) -> None:
        """Train on this folder of one's own images (None: on MNIST's digits)."""
        if folder is not None:
            self.images_folder.setText(str(folder))
        self.images_source.setCurrentIndex(self.images_source.findData(MNIST_IMAGES if folder is None else FOLDER_IMAGES))

    @property
    def test_images(self) -> int:
        """The images kept aside to check a run (of a read folder; MNIST's are checked apart)."""
        return len(self.folder_data.test) if self.uses_folder and self.folder_data is not None else 0

    def estimate_images(self) -> tuple[int, str]:
        """How many images a run learns, and whose: ``"your"``, ``"assumed"`` (MNIST's count, not
        downloaded yet) or ``""`` (MNIST's, found)."""
        if self.uses_folder and self.folder_data is not None:
            return len(self.folder_data.train), "your"
        try:
            found = count_training_images(runs.mnist_training_folder(self.data_dir.text().strip()))
        except DatasetMissingError:
            found = None
        return found or MNIST_TRAIN_IMAGES, "" if found else "assumed"

    def training_run(self, method: str, arch: ArchSpec, config: Any, seed: int, out: Path, name: str,
                     start: Posterior | None, start_source: dict[str, Any] | None, device: Any) -> Generator:
        """The run's work on these images (:mod:`app.views.training.runs`), for a worker."""
        if self.uses_folder and self.folder_data is not None:
            return runs.folder_training_run(method, arch, config, self.folder_data, seed, out, name, start,
                                            start_source, device=device)
        return runs.training_run(method, arch, config, self.data_dir.text().strip(), self.download.isChecked(),
                                 seed, out, name, start, start_source, device=device)

    def browse_data_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self._dialog, "Choose the data folder (it holds “mnist”, “notmnist”, “utkface”)", self.data_dir.text())
        if folder:
            self.data_dir.setText(folder)

    def read_again_if_changed(self) -> bool:
        """Read the folder again when its files changed since it was read (or it could not be
        used then: perhaps mended since); True when it does."""
        if not self.uses_folder or self._folder_read is None:
            return False
        if self.folder_data is not None:
            read = self.folder_data.train.source.get("listing_sha256")
            if read is None or listing_digest(self._folder_read) == read:
                return False
        self._on_images_folder_text_changed()
        return True

    def _on_images_source_changed(self, *_: object) -> None:
        folder = self.uses_folder
        for row in (self.data_row, self.data_found, self.download):
            self._form.setRowVisible(row, not folder)
        for row in (self.images_row, self.folder_found, self.image_size):
            self._form.setRowVisible(row, folder)
        if not folder:
            self._on_data_dir_text_changed()  # shows the download box where MNIST is missing
        if folder and self.images_folder.text().strip() != (self._folder_read or ""):
            self._on_images_folder_text_changed()
        self.changed.emit()

    def _on_data_dir_text_changed(self, *_: object) -> None:
        """Say where MNIST's training images were found, or what is missing and where looked."""
        try:
            folder = find_dataset("mnist", self.data_dir.text().strip() or None, "train", download_hint=DOWNLOAD_HINT)
        except DatasetMissingError as exc:
            self.data_found.setText(str(exc))
            self.download.setVisible(not self.uses_folder)
            return
        count = count_training_images(folder)
        images = f"{count:,} " if count else ""
        self.data_found.setText(f"MNIST's {images}training images: found in {folder}.")
        self.download.setVisible(False)
        self.download.setChecked(False)

    def _on_browse_images_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self._dialog, "Choose the folder of your images (one sub-folder per class)", self.images_folder.text())
        if folder:
            self.images_folder.setText(folder)

    def _on_images_folder_text_changed(self, *_: object) -> None:
        """Forget what was read (a reading under way is stopped, its reports dropped); read the
        folder shortly (after the last key typed)."""
        self.reader.stop()
        self.folder_data, self._folder_read, self.folder_problem = None, None, None
        text = self.images_folder.text().strip()
        self.folder_found.setToolTip("")
        self.folder_found.setText("Choose a folder of your images: one sub-folder per class." if not text
                                  else "Reading the images…")
        self.changed.emit()
        if text and self.uses_folder:
            self.reader.read_soon(text, self.image_size.currentData())

    def _on_reader_progressed(self, step: int, total: int) -> None:
        self.folder_found.setText(f"Reading the images… {step:,} of {total:,}")

    def _on_reader_read(self, path: str, data: FolderData) -> None:
        self._folder_read = path
        try:
            check_training_classes(data, "the folder")
        except DatasetContentError as exc:
            self._on_reader_failed(path, exc)
            return
        self.folder_data = data
        words, details = folder_in_words(data)
        self.folder_found.setText(words)
        self.folder_found.setToolTip(details)
        self.folder_read.emit(data)
        self.changed.emit()

    def _on_reader_failed(self, path: str, exc: BaseException) -> None:
        self._folder_read = path
        self.folder_data = None
        self.folder_problem = folder_problem(exc, path)
        self.folder_found.setText(f"<b>{html.escape(self.folder_problem, quote=False)}</b>")
        self.folder_found.setToolTip("")
        self.changed.emit()
