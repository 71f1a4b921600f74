"""The sets the Dataset tab offers: known test and out-of-distribution sets by name, a folder
of IDX files or of a person's images; which of them the columns of each task can read, and why
the others are not offered, in words; an evaluation's failure as a sentence."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMenu,
    QSpinBox,
    QToolButton,
    QWidget,
)

from app import settings as app_settings
from core.engine.naming import dataset_words

#: The entry that asks for a folder of IDX files (MNIST's layout).
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
OOD_SETS = (("None", ""), ("notMNIST letters", "notmnist"), ("MNIST digits, inverted (built in)", "mnist-inverted"),
            ("MNIST test digits", "mnist-test"))
#: The more-sets button's words.
MORE_TIP = ("Compare more unfamiliar sets: each one gets the AUROC of every uncertainty score in every column, so you "
            "can see whether the best posterior for a score stays the best from one set to another. The histograms "
            "show the set chosen on the left.")
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
    from core.engine.data.listing import image_folder

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


def explain_failure(exc: BaseException, dataset: str, ood: str | list[str] | None) -> str:
    """Why an evaluation of ``dataset`` (and ``ood``: one set or several) stopped, as a sentence for a dialog."""
    from core.engine.data.datasets import DatasetNotFoundError
    from core.engine.data.locate import DatasetMissingError

    if isinstance(exc, DatasetMissingError):  # names the set, every place looked in, what to do
        return f"{exc} {CHOOSE_DATA_FOLDER}"
    if isinstance(exc, DatasetNotFoundError):
        if dataset == FACE_SET:
            return ("UTKFace could not be found. Choose the folder that holds it with File → Choose data "
                    "folder…: its “utkface” folder (or the folder itself) must hold UTKFace's archive "
                    "(UTKFace.tar.gz) or its folder of face images.")
        missing = [spec for spec in (dataset, *([ood] if isinstance(ood, str) else ood or [])) if spec]
        words = [dataset_words(spec) if not Path(spec).is_dir() else f"the folder “{Path(spec).name}”"
                 for spec in missing]
        return (f"The images could not be found ({' or '.join(words)}). For MNIST and notMNIST, choose the "
                "folder that holds them with File → Choose data folder…; a folder of your own must hold "
                "the test files in MNIST layout (t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, "
                "optionally gzipped).")
    return plain_sentence(exc)


class SetChooser(QObject):
    """The Dataset tab's first row: the test set, the out-of-distribution set, how many images
    and how many draws (``row``, laid out by the tab); ``note`` says why a set is not offered.

    Signals
    -------
    refused(str)
        A folder chosen holds nothing to judge; the sentence says so.
    """

    refused = Signal(str)

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.parent_widget = parent
        #: The sets last chosen for each task's columns (switching tasks brings them back).
        self._choices: dict[str, tuple[str, str]] = {"digits": ("mnist-test", "notmnist"), "faces": (FACE_SET, ""),
                                                     "images": (IMAGES_FOLDER, "")}
        self._offered_task: str | None = None
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
        #: Further OOD sets (known names or folders), in the order added; and folders offered for them.
        self.more: list[str] = []
        self._more_folders: list[str] = []
        self.more_button = QToolButton()
        self.more_button.setToolTip(MORE_TIP)
        self.more_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.more_menu = QMenu(self.more_button)
        self.more_menu.aboutToShow.connect(self._fill_more_menu)
        self.more_button.setMenu(self.more_menu)
        self._update_more_button()
        self.images = QSpinBox(minimum=0, maximum=100_000, value=0, singleStep=500)
        self.images.setSpecialValueText("all")
        self.images.setToolTip("How many images of each set to use: the first ones (faces: spread over the ages, "
                               "and only those are described); “all” takes the whole set.")
        self.samples = QSpinBox(minimum=1, maximum=1000, value=30, singleStep=10)
        self.samples.setToolTip("Posterior draws per image. Sampled posteriors (SGHMC, …) use at most the draws "
                                "they hold. More draws: smoother uncertainty, longer evaluation.")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #666;")
        for box in (self.test_set, self.ood_set):  # long names are cut, not the window widened
            box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            box.setMinimumContentsLength(10)
        self.row = QHBoxLayout()
        for label, widget, tip in (("Test set", self.test_set, self.test_set.toolTip()),
                                   ("Out of distribution", self.ood_set, self.ood_set.toolTip()),
                                   ("Images", self.images, self.images.toolTip()),
                                   ("Samples", self.samples, self.samples.toolTip())):
            text = QLabel(label)
            text.setToolTip(tip)
            self.row.addWidget(text)
            self.row.addWidget(widget, 1 if isinstance(widget, QComboBox) else 0)
            if widget is self.ood_set:
                self.row.addWidget(self.more_button)
            if widget is not self.samples:
                self.row.addSpacing(6)

    def set_enabled(self, enabled: bool) -> None:
        """Allow changing the choice (not while an evaluation runs)."""
        for widget in (self.test_set, self.ood_set, self.images, self.samples):
            widget.setEnabled(enabled)
        self.more_button.setEnabled(enabled and self._offered_task != "faces")

    def offer(self, task: str) -> None:
        """Enable only the sets the columns of ``task`` can read; say why the others are not offered.

        When the columns' task changes, the sets last chosen for that task come back.
        """
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
        self.more_button.setEnabled(task != "faces")
        self._update_more_button()
        self.note.setText(reason)
        self.note.setToolTip(reason)

    # ------------------------------------------------------------ more OOD sets
    def _more_offered(self, spec: str) -> bool:
        """Whether the columns offered now can read ``spec`` as a further OOD set."""
        task = self._offered_task or "digits"
        if task == "faces":
            return False
        if spec in dict(OOD_SETS).values():
            return task == "digits"
        if task == "images":
            return is_images_folder(spec)
        return True

    def _fill_more_menu(self) -> None:
        """The menu of further sets: every known set and folder, ticked when chosen; adding a folder."""
        menu = self.more_menu
        menu.clear()
        menu.setToolTipsVisible(True)
        for shown, spec in [*OOD_SETS[1:], *((f"{Path(f).name} (folder)", f) for f in self._more_folders)]:
            action = menu.addAction(shown)
            action.setCheckable(True)
            action.setChecked(spec in self.more)
            left = spec == (self.ood_set.currentData() or "")
            action.setEnabled(self._more_offered(spec) and not left)
            action.setToolTip("the set chosen on the left" if left else spec if spec in self._more_folders else "")
            action.toggled.connect(lambda on, spec=spec: self.set_more_chosen(spec, on))
        menu.addSeparator()
        if (self._offered_task or "digits") == "digits":
            menu.addAction("Add a folder of IDX files…", lambda: self._add_more_folder(FOLDER))
        menu.addAction("Add a folder of your images…", lambda: self._add_more_folder(IMAGES_FOLDER))
        if self.more:
            menu.addAction("Remove the further sets", lambda: self.set_more([]))

    def _add_more_folder(self, kind: str) -> None:
        title = ("Choose a folder of IDX files (MNIST layout)" if kind == FOLDER else
                 "Choose a folder of images the posteriors never saw")
        path = QFileDialog.getExistingDirectory(self.parent_widget, title, app_settings.last_folder("data"))
        if not path:
            return
        app_settings.remember_folder("data", path)
        if kind == IMAGES_FOLDER and not is_images_folder(path):
            self.refused.emit(f"“{Path(path).name}” holds no images (PNG, JPEG, …), CSV manifest or CIFAR files.")
            return
        self.set_more_chosen(path, True)

    def set_more_chosen(self, spec: str, chosen: bool) -> None:
        """Add ``spec`` (a known name or a folder) to the further OOD sets, or remove it."""
        if spec not in dict(OOD_SETS).values() and spec not in self._more_folders:
            self._more_folders.append(spec)
        if chosen and spec not in self.more and spec != (self.ood_set.currentData() or ""):  # never twice
            self.more.append(spec)
        elif not chosen and spec in self.more:
            self.more.remove(spec)
        self._update_more_button()

    def set_more(self, specs: list[str]) -> None:
        """Choose the further OOD sets (known names, or folders that still exist)."""
        self.more = []
        for spec in specs:
            if spec in dict(OOD_SETS).values() or (spec and Path(spec).is_dir()):
                self.set_more_chosen(spec, True)
        self._update_more_button()

    def _update_more_button(self) -> None:
        chosen = self.more_chosen()
        self.more_button.setText(f"+{len(chosen)}" if chosen else "+")
        names = [dict((spec, shown) for shown, spec in OOD_SETS).get(spec) or f"the folder “{Path(spec).name}”"
                 for spec in chosen]
        self.more_button.setToolTip(MORE_TIP + (f" Chosen: {', '.join(names)}." if names else ""))

    def more_chosen(self) -> list[str]:
        """The further OOD sets the columns offered now can read (the set on the left left out)."""
        first = self.ood_set.currentData() or ""
        return [spec for spec in self.more if spec != first and self._more_offered(spec)]

    def ood_specs(self) -> list[str]:
        """Every OOD set to evaluate: the one on the left (the histograms'), then the further ones."""
        first = self.ood_set.currentData() or ""
        return ([first] if first else []) + self.more_chosen()

    def _on_set_box_activated(self, box: QComboBox, index: int) -> None:
        spec = box.itemData(index)
        if spec not in (FOLDER, IMAGES_FOLDER):
            self._previous[box] = index
            return
        title = ("Choose a folder of IDX files (MNIST layout)" if spec == FOLDER else
                 "Choose a folder of your images (one sub-folder per class)" if box is self.test_set else
                 "Choose a folder of images the posteriors never saw")
        path = QFileDialog.getExistingDirectory(self.parent_widget, title, app_settings.last_folder("data"))
        if not path:
            box.setCurrentIndex(self._previous[box])
            return
        app_settings.remember_folder("data", path)
        if spec == IMAGES_FOLDER and not is_images_folder(path):
            box.setCurrentIndex(self._previous[box])
            self.refused.emit(f"“{Path(path).name}” holds no images (PNG, JPEG, …), CSV manifest or CIFAR files.")
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


def set_words(name: str) -> str:
    """A data set's name in words; a bundled sample (``mnist-sample-test``) is called one."""
    if "-sample-" in name:
        return "sample " + dataset_words(name.replace("-sample-", "-"))
    return dataset_words(name)
