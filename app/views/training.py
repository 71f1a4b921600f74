"""Train a posterior in the background: settings in words, a measured time estimate,
progress bar, live trace, cancel.

The settings form is built from the chosen method's config dataclass; words, tooltips,
units, ranges and which setting matters when come from :mod:`core.engine.settings_help`. The
estimate comes from :func:`core.engine.training_plan.estimate_duration`, run in a worker whenever
the settings change (debounced), never while a run is going.
"""

from __future__ import annotations

import contextlib
import html
import math
import re
import time
from functools import partial
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QHideEvent, QValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app import settings as app_settings
from app.plots import style
from app.settings import user_models_dir
from app.workers import ComputationError, generator_worker
from core.analysis.diagnostics import PROBE_SIZE, diagnose_progress, not_applicable
from core.engine.data.datasets import (
    DatasetContentError,
    DatasetDownloadError,
    DatasetNotFoundError,
    load_split,
)
from core.engine.data.folder import (
    SHOWN_UNREADABLE,
    FolderData,
    NoImagesError,
    NoReadableImageError,
    NotAFolderError,
    OneClassError,
    check_training_classes,
    default_folder_model,
    folder_architecture,
    listing_digest,
    read_image_folder,
    streamed_refusal,
)
from core.engine.data.idx import IdxFormatError
from core.engine.data.locate import DatasetMissingError, download_dataset, find_dataset
from core.engine.files import NotSavedError, file_sha256
from core.engine.inference import METHODS, get_method
from core.engine.inference.base import Posterior, ProgressRecord, accuracy_progress
from core.engine.inference.sampling import SampleBudgetError, SamplerDivergedError, chains_in_words
from core.engine.models import (
    ARCHITECTURES,
    COLOUR_IMAGE_SIZE,
    IMAGE_SIZE,
    ArchSpec,
    check_model_fits,
)
from core.engine.naming import ARCH_LABELS, METHOD_DESCRIPTIONS, METHOD_LABELS, samples_used
from core.engine.runner import fit_posterior, start_weights
from core.engine.settings_help import (
    SettingHelp,
    in_words,
    method_settings,
    setting_choices,
    unit_for,
)
from core.engine.store import PosteriorFileError, load_posterior, save_posterior
from core.engine.training_plan import (
    MNIST_TRAIN_IMAGES,
    TrainingEstimate,
    count_training_images,
    duration_in_words,
    estimate_duration,
)

#: Samples a posterior of one's own images is checked with on the images kept aside (the
#: command line's ``--eval-samples`` default).
EVAL_SAMPLES = 30

#: Methods whose training runs the network with its own dropout layers switched on.
USES_MODEL_DROPOUT = ("map", "mc_dropout", "ensemble")
#: The network's drop rate each starts with: MC dropout needs one (Gal & Ghahramani use 0.5);
#: for MAP and ensembles dropout is an optional regulariser, off unless asked for.
DEFAULT_DROP_RATES = {"mc_dropout": 0.5}

ARCH_TOOLTIPS: dict[str, str] = {
    "softmax": "One linear layer from pixels to classes: the model of the D-SGHMC paper's MNIST "
    "experiment. The fastest to train.",
    "mlp": "A fully connected network with two hidden layers.",
    "lenet": "A small convolutional network (LeNet-5 style: two convolution layers and one "
    "hidden layer). The most accurate and the slowest to train.",
    "lenet5": "LeNet-5 at its own small widths (two convolution layers, two hidden layers; 44,426 "
    "weights): reads digits nearly as well as LeNet, trains several times faster, and its "
    "stored draws are a tenth of the size.",
    "resnet": "A small residual convolutional network (eight layers) for colour images: what a "
    "folder of colour images trains.",
}

#: What the trace and the status line call the numbers a run reports.
VALUE_WORDS: dict[str, str] = {
    "elbo": "ELBO per image",
    "log_posterior": "log posterior",
    "loss": "training loss",
    "train_accuracy": "training accuracy",
    "acceptance": "acceptance rate",
    "step_size": "step size",
    "epoch": "pass",
    "lr": "learning rate",
    "kl": "KL per image",
    "expected_log_likelihood": "expected log-likelihood",
    "grad_norm": "gradient size",
    "param_norm": "weight size",
    "member": "network",
}

#: Why the trace shows what it shows, per kind of method.
TRACE_WORDS: dict[str, str] = {
    "sampler": "The trace is the <b>log posterior</b> of the current weights. A sampler does not "
    "minimise a loss: it wanders over the weights, staying longer where the posterior is high, and "
    "keeps what it visits as draws. The log posterior rises while the chain finds the posterior "
    "(burn-in), then levels off and wobbles: that wobble is the spread of belief, not a problem.",
    "loss": "The trace is the <b>training loss</b> (lower is better). This method trains one network "
    "(one per member for ensembles) the usual way; MC dropout gets its spread of belief afterwards, "
    "from switching units off at random at prediction time, so training is plain minimisation.",
    "post_hoc": "The trace is the <b>training loss</b> of the best weights first (lower is better). "
    "The spread of belief comes after them, around them: Laplace measures how flat the loss is "
    "there (a short last phase), SWAG keeps taking snapshots of the weights while plain SGD moves "
    "them about (its loss then wobbles instead of falling).",
    "elbo": "The trace is the <b>ELBO</b> per image (higher is better): a variational method fits a "
    "distribution over the weights by raising it, balancing how well its draws fit the images "
    "against how far it strays from the prior.",
}
#: Which trace each method reports (the first of TrainingDialog.TRACE_KEYS it yields).
TRACE_OF_METHOD: dict[str, str] = {
    **dict.fromkeys(("sgld", "sghmc", "dsghmc", "hmc"), "sampler"),
    **dict.fromkeys(("map", "mc_dropout", "ensemble"), "loss"),
    **dict.fromkeys(("mfvi", "snvi", "sgmmvi", "vdropout"), "elbo"),
    **dict.fromkeys(("laplace", "swag"), "post_hoc"),
}

PHASE_WORDS: dict[str, str] = {
    "loading data": "Loading the training images",
    "reading images": "Reading the images",
    "eval": "Checking it on the images kept aside",
    "train": "Training",
    "warmup": "Warming up",
    "burn-in": "Burn-in (steps not kept)",
    "sampling": "Sampling",
    "saving": "Saving",
    "convergence": "Checking whether the chains agree",
    "MAP": "Finding the best weights",
    "curvature": "Measuring the loss's curvature around them",
    # a sampler's fixed metric (metric=curvature or kron), before its first step
    "finding the mode": "Finding the most probable weights",
    "curvature at the mode": "Measuring how sharply the data pin them down",
    "averaging": "Taking snapshots around them",
}


def method_item_text(name: str) -> str:
    """``"SGHMC — stochastic gradient Hamiltonian Monte Carlo"``: the label and the first
    clause of the description."""
    label = METHOD_LABELS.get(name, name)
    description = METHOD_DESCRIPTIONS.get(name, "")
    short = description.split(":")[0].strip()
    return f"{label} — {short}" if short else label


def _number_text(value: float) -> str:
    """``1e-06`` → ``1e-6``; ``0.001`` stays ``0.001``."""
    text = f"{value:.4g}"
    return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m.group(1) == '-' else ''}{m.group(2)}", text)


class ScientificSpinBox(QDoubleSpinBox):
    """A spin box for numbers spanning decades (step sizes, learning rates).

    Shows four significant digits (``5e-7``), accepts typed scientific notation, and the
    arrows move along 1, 2, 5, 10, 20, ... so that each click is a sensible change.
    """

    _PARTIAL = re.compile(r"^[+-]?(\d*\.?\d*)?([eE][+-]?\d*)?$")

    def __init__(self, minimum: float, maximum: float, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Enough decimals that values down to 1e-12 keep their significant digits.
        self.setDecimals(20)
        self.setRange(minimum, maximum)

    def textFromValue(self, value: float) -> str:  # noqa: N802 (Qt override)
        return _number_text(value)

    def valueFromText(self, text: str) -> float:  # noqa: N802 (Qt override)
        try:
            return float(text)
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int) -> object:
        stripped = text.strip()
        try:
            value = float(stripped)
        except ValueError:
            state = (
                QValidator.State.Intermediate
                if self._PARTIAL.match(stripped)
                else QValidator.State.Invalid
            )
            return state, text, pos
        if self.minimum() <= value <= self.maximum():
            return QValidator.State.Acceptable, text, pos
        return QValidator.State.Intermediate, text, pos

    def fixup(self, text: str) -> str:
        return _number_text(self.value())

    def stepBy(self, steps: int) -> None:  # noqa: N802 (Qt override)
        value = self.value()
        for _ in range(abs(steps)):
            value = self._next_on_grid(value, up=steps > 0)
        self.setValue(min(max(value, self.minimum()), self.maximum()))

    def _next_on_grid(self, value: float, up: bool) -> float:
        if value <= 0:
            return max(self.minimum(), 1e-6) if up else 0.0
        exponent = math.floor(math.log10(value))
        grid = [m * 10.0**e for e in (exponent - 1, exponent, exponent + 1) for m in (1, 2, 5)]
        if up:
            return min(g for g in grid if g > value * (1 + 1e-9))
        below = [g for g in grid if g < value * (1 - 1e-9)]
        return max(below) if below else value / 2


class WrappedLabel(QLabel):
    """A word-wrapped label as tall as its text at its width: a form sizes a plain one by the
    height its text takes at a narrow guessed width, which left blank lines around a long
    found-summary."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)

    def sizeHint(self) -> Any:  # noqa: N802 (Qt override)
        hint = super().sizeHint()
        if self.width() > 0:
            hint.setHeight(self.heightForWidth(self.width()))
        return hint

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self.updateGeometry()


def _tooltip(help_: SettingHelp, default: Any, choices: dict[str, str] | None) -> str:
    """Rich text (so Qt wraps it): what the setting does, its unit and its default."""
    if isinstance(default, bool):
        default_words = "on" if default else "off"
    elif choices is not None:
        default_words = choices.get(default, str(default))
    elif isinstance(default, float):
        default_words = _number_text(default)
    else:
        default_words = str(default)
    if help_.special and default == help_.minimum:
        default_words = help_.special
    facts = []
    if help_.unit:
        facts.append(f"<i>Unit:</i> {html.escape(help_.unit)}")
    facts.append(f"<i>Default:</i> {html.escape(default_words)}")
    return f"<p>{html.escape(help_.tooltip)}</p><p>{' · '.join(facts)}</p>"


def _follow_count(widget: QSpinBox | QDoubleSpinBox, unit: str) -> None:
    """Show the unit after the number, singular for 1 (“1 chain”, “4 chains”)."""

    def update(value: float) -> None:
        widget.setSuffix(f" {unit_for(value, unit)}")

    widget.valueChanged.connect(update)
    update(widget.value())


def make_setting_widget(method: str, name: str, default: Any, help_: SettingHelp) -> QWidget:
    """A check box, combo box or spin box for one setting, with its tooltip."""
    choices = setting_choices(method, name)
    widget: QWidget
    if isinstance(default, bool):
        widget = QCheckBox()
    elif choices is not None:
        widget = QComboBox()
        for value, words in choices.items():
            widget.addItem(words, value)
    elif isinstance(default, int):
        widget = QSpinBox()
        widget.setRange(int(help_.minimum), int(min(help_.maximum, 2**31 - 1)))
        if help_.unit:
            _follow_count(widget, help_.unit)
        if help_.special:
            widget.setSpecialValueText(help_.special)
    elif isinstance(default, float) and help_.log_scale:
        widget = ScientificSpinBox(help_.minimum, help_.maximum)
    elif isinstance(default, float):
        widget = QDoubleSpinBox()
        widget.setDecimals(help_.decimals)
        widget.setRange(help_.minimum, help_.maximum)
        widget.setSingleStep(10.0 ** -help_.decimals * (5 if help_.decimals >= 2 else 1))
        if help_.unit:
            _follow_count(widget, help_.unit)
    else:
        widget = QLineEdit()
    widget.setToolTip(_tooltip(help_, default, choices))
    set_widget_value(widget, default)
    return widget


def widget_value(widget: QWidget) -> Any:
    """The typed value a setting widget holds."""
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if isinstance(widget, QComboBox):
        return widget.currentData()
    if isinstance(widget, QSpinBox):
        return int(widget.value())
    if isinstance(widget, QDoubleSpinBox):
        return float(widget.value())
    return widget.text()  # type: ignore[attr-defined]


def set_widget_value(widget: QWidget, value: Any) -> None:
    """Show ``value`` (typed, or text as stored by QSettings) in a setting widget."""
    if isinstance(widget, QCheckBox):
        widget.setChecked(value is True or str(value).lower() in ("true", "1", "yes", "on"))
    elif isinstance(widget, QComboBox):
        index = widget.findData(value)
        if index < 0:
            raise ValueError(f"{value!r} is not one of the choices")
        widget.setCurrentIndex(index)
    elif isinstance(widget, QSpinBox):
        widget.setValue(int(float(value)))
    elif isinstance(widget, QDoubleSpinBox):
        widget.setValue(float(value))
    else:
        widget.setText(str(value))  # type: ignore[attr-defined]


def _changed_signal(widget: QWidget) -> Any:
    if isinstance(widget, QCheckBox):
        return widget.toggled
    if isinstance(widget, QComboBox):
        return widget.currentIndexChanged
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        return widget.valueChanged
    return widget.textChanged  # type: ignore[attr-defined]


def error_in_words(exc: BaseException, method: str) -> str:
    """A message for a failed run that a person can act on (never an exception class name)."""
    text = str(exc).strip()
    if isinstance(exc, DatasetMissingError):
        return exc.with_hint(DOWNLOAD_HINT)
    if isinstance(exc, DatasetNotFoundError):
        if isinstance(exc, DatasetDownloadError):
            return (
                "MNIST's training images could not be downloaded: the download site did not answer "
                "or sent a damaged file. Check the internet connection and train again, or choose "
                "a data folder that holds the “mnist” folder."
            )
        return (
            "The MNIST training images were not found in the data folder. Choose the data folder "
            "that holds the “mnist” folder with MNIST's training files, or tick the download box "
            "while online."
        )
    if isinstance(exc, (IdxFormatError, DatasetContentError)):
        return f"The training images could not be read: {text}"
    if isinstance(exc, SampleBudgetError):
        return f"The kept draws would not fit in memory: {in_words(method, text)}"
    if isinstance(exc, SamplerDivergedError) and exc.chains:
        return (
            f"Training went out of bounds: {chains_in_words(exc.chains)} of the sampler ran away at step "
            f"{exc.step:,} (its fit to the training images collapsed), so nothing was saved.\n\n"
            "A smaller step size usually helps."
        )
    if isinstance(exc, FloatingPointError):
        return (
            f"Training went out of bounds: {in_words(method, text)}\n\nA smaller step size or "
            "learning rate usually helps."
        )
    if isinstance(exc, MemoryError) or "out of memory" in text.lower():
        return (
            "The computer ran out of memory. Try fewer chains or networks, fewer images per "
            "step, or a smaller model."
        )
    if isinstance(exc, NotSavedError):
        return f"Training finished but the posterior could not be saved: {text}"
    if isinstance(exc, (ValueError, ComputationError)):
        return in_words(method, text) or "The settings could not be used."
    if isinstance(exc, OSError):
        return f"A file could not be read or written: {exc.strerror or text}"
    return text or "Training stopped for an unknown reason."


def training_run(
    method_name: str, arch: ArchSpec, config: Any, data_dir: str, download: bool, seed: int, out: Path,
    name: str = "", start: Posterior | None = None, start_source: dict[str, Any] | None = None,
    device: Any = None,
):
    """Generator run in the worker: load data, fit, save; yields ProgressRecords. ``name``, the
    one typed under “Save as”, is kept in the posterior's ``info["name"]``: its column's title.
    ``start``: a MAP posterior that Laplace or SWAG starts from instead of training its own.
    The fit runs on ``device`` (View ▸ Compute on; None: the CPU)."""
    yield ProgressRecord(0, 0, {}, phase="loading data")
    folder = mnist_training_folder(data_dir, download)
    train = load_split("mnist", "train", root=folder)
    posterior = yield from fit_posterior(get_method(method_name), config, arch, train, seed, start, start_source,
                                         device=device)
    posterior.info["diagnostics"] = yield from convergence_run(posterior, folder, seed)
    if name.strip():
        posterior.info["name"] = name.strip()
    yield ProgressRecord(1, 1, {}, phase="saving")
    return save_posterior(posterior, out)


def folder_training_run(
    method_name: str, arch: ArchSpec, config: Any, data: FolderData, seed: int, out: Path, name: str = "",
    start: Posterior | None = None, start_source: dict[str, Any] | None = None, device: Any = None,
):
    """:func:`training_run` for a person's images, already read (:func:`read_image_folder`): fit
    on their training split, record the class names (the folder names) as ``bayescope-cli train
    --dataset FOLDER`` does, check convergence on the first test images, save."""
    posterior = yield from fit_posterior(get_method(method_name), config, arch, data.train, seed, start,
                                         start_source, device=device)
    posterior.info["class_names"] = list(data.train.class_names)
    if len(data.test):  # the images kept aside, as the command line measures them (before saving here)
        import torch

        try:
            acc = yield from accuracy_progress(posterior, data.test, EVAL_SAMPLES, torch.Generator().manual_seed(seed))
        except (ValueError, MemoryError) as exc:
            posterior.info["test_accuracy_not_measured"] = str(exc)
        else:
            posterior.info.update({"test_accuracy": acc, "eval_samples": samples_used(posterior, EVAL_SAMPLES),
                                   "test_data": {"name": data.test.name, "images": len(data.test), **data.test.source}})
    try:
        probe = data.test if len(data.test) else None
        posterior.info["diagnostics"] = yield from diagnose_progress(posterior, probe, seed)
    except (OSError, ValueError) as exc:  # no test image to compare the chains on: the fit is kept
        posterior.info["diagnostics"] = {"status": "not measured", "reason": str(exc)}
    if name.strip():
        posterior.info["name"] = name.strip()
    yield ProgressRecord(1, 1, {}, phase="saving")
    return save_posterior(posterior, out)


def folder_in_words(data: FolderData) -> tuple[str, str]:
    """What a read folder holds, in words for the dialog, and the unreadable files in detail
    (for its tooltip; empty when every file was read)."""
    names = data.train.class_names
    shown = ", ".join(f"“{n}”" for n in names[:8]) + (f" and {len(names) - 8:,} more" if len(names) > 8 else "")
    images = len(data.train) + len(data.test)
    kind = "colour" if data.channels == 3 else "grey"
    words = (f"Found {images:,} {kind} images in {len(names):,} classes: {shown}. The network sees them "
             f"at {data.image_size}×{data.image_size} pixels; {len(data.train):,} train it and "
             f"{len(data.test):,} are kept aside to check it.")
    if not data.unreadable:
        return words, ""
    count = len(data.unreadable)
    first = Path(data.unreadable[0]["file"])
    first_words = first.name if first.parent == Path(".") else f"{first.name} in “{first.parent.as_posix()}”"
    more = f" and {count - 1:,} more" if count > 1 else ""
    words += (f" {count:,} {'file' if count == 1 else 'files'} could not be read and "
              f"{'is' if count == 1 else 'are'} left out: {first_words}{more} (point here to see why).")
    details = "".join(f"<li>{html.escape(u['file'])}: {html.escape(u['reason'])}</li>"
                      for u in data.unreadable[:SHOWN_UNREADABLE])
    rest = f"<p>and {count - SHOWN_UNREADABLE:,} more</p>" if count > SHOWN_UNREADABLE else ""
    return words, f"<p>Left out, as they could not be read:</p><ul>{details}</ul>{rest}"


def folder_problem(exc: BaseException, folder: str | Path = "") -> str:
    """Why a chosen folder cannot train a posterior, in a sentence without its path."""
    text = str(exc).strip()
    if str(folder).strip():
        for spelling in sorted({str(Path(folder).resolve()), str(folder), str(Path(folder))}, key=len, reverse=True):
            text = text.replace(spelling, "this folder")
    if isinstance(exc, NoReadableImageError):
        first = text.partition("(the first: ")[2].rstrip(")")
        return f"None of the images in this folder could be read (the first: {first})."
    if isinstance(exc, NotAFolderError):
        return "This is not a folder that can be read. Choose a folder that holds one sub-folder of images per class."
    if isinstance(exc, NoImagesError):
        return ("No images were found in this folder (PNG, JPEG, BMP, WebP or TIFF). Put each class's images "
                "in a sub-folder named after the class.")
    if isinstance(exc, OneClassError):
        return ("These images are all of one class, and a classifier needs at least two to tell apart: put "
                "each class's images in a sub-folder named after the class (for example “cats” and “dogs”).")
    if isinstance(exc, DatasetContentError):
        return f"These images cannot train a posterior: {text.split(': ', 1)[-1]}"
    if isinstance(exc, OSError):
        return f"The folder could not be read: {exc.strerror or text}"
    return f"These images cannot train a posterior: {text}"


CLOSE_TIP = "Close this window."
BACKGROUND_TIP = ("Hide this window and go on using bayescope: the run goes on, the status bar shows "
                  "its progress (click it to come back here), and the posterior is added as a column "
                  "when it is done. “Cancel run” stops it.")

#: Laplace's and SWAG's settings of the best-weights training that a saved start replaces.
BEST_WEIGHTS_SETTINGS = ("epochs", "lr")
#: The “Start from” choice that opens a file dialog.
BROWSE_FOR_START = "browse"

#: The “Training images” choices.
MNIST_IMAGES = "mnist"
FOLDER_IMAGES = "folder"

#: What the dialog asks a person to do for a missing MNIST.
DOWNLOAD_HINT = "tick “download” under the data folder"
#: The sides a person may choose for their own images (the command line's --image-size takes any).
FOLDER_SIDES = (28, 32, 48, 64, 96, 128, 224)


def convergence_run(posterior, folder: Path, seed: int):
    """Whether the chains agree, on the first MNIST test images beside the training files
    (:mod:`core.analysis.diagnostics`); a test set that cannot be read leaves it "not measured"."""
    if not_applicable(posterior) is not None:
        return (yield from diagnose_progress(posterior, None, seed))
    yield ProgressRecord(0, 0, {}, phase="convergence")
    try:
        probe = load_split("mnist", "test", root=folder).first(PROBE_SIZE)
    except (OSError, ValueError) as exc:  # missing or damaged test files: the fit is kept all the same
        return {"status": "not measured", "reason": f"the test images could not be read ({exc})"}
    return (yield from diagnose_progress(posterior, probe, seed))


def mnist_training_folder(data_folder: str | Path | None, download: bool = False) -> Path:
    """The folder of MNIST's training files, found in the one data folder (or the user cache);
    downloaded into the user cache when missing and ``download`` is set."""
    try:
        return find_dataset("mnist", data_folder or None, "train", download_hint=DOWNLOAD_HINT)
    except DatasetMissingError:
        if not download:
            raise
        return download_dataset("mnist", "train")


def _stem(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name.strip()) or "posterior"



def browse_row(edit: QLineEdit, tip: str, slot) -> QHBoxLayout:
    """A path field with its Browse… button beside it."""
    browse = QPushButton("Browse…")
    browse.setToolTip(tip)
    browse.clicked.connect(slot)
    row = QHBoxLayout()
    row.addWidget(edit, 1)
    row.addWidget(browse)
    return row

class TrainingDialog(QDialog):
    """Choose a method, a model and their settings; train in the background.

    Closing the dialog during a run only hides it: the run goes on in the background (the main
    window's status bar shows a :class:`RunIndicator`); the Cancel button stops it.

    Signals
    -------
    posterior_saved(Path)
        A run finished and its posterior file was written.
    progress_reported(str, int, int)
        A run reported progress: a short line in words (“Training SGLD… 40 %”), the step and the
        steps planned (0 when unknown).
    run_finished
        A run ended: saved, failed or cancelled.
    """

    posterior_saved = Signal(object)
    progress_reported = Signal(str, int, int)
    run_finished = Signal()
    TRACE_KEYS = ("elbo", "log_posterior", "loss", "acceptance", "step_size")  # first present is plotted
    SETTINGS_GROUP = "training"
    ESTIMATE_DELAY_MS = 600
    SCAN_DELAY_MS = 400  # typing a path reads the folder once, after the last key

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a posterior")
        free = (parent or self).screen().availableGeometry()  # 1120×700, or the free area of a smaller screen
        self.resize(min(1120, free.width()), min(700, free.height()))
        self._worker = None
        self._estimate_worker = None
        self._estimate_pending = False
        self._trace_x: list[float] = []
        self._trace_y: list[float] = []
        self._last_draw = 0.0
        self._run_started = 0.0
        self._run_first_step: tuple[float, int] | None = None
        self.last_estimate: TrainingEstimate | None = None
        self._estimate_assumed = False
        self._run_method = ""
        self._run_accuracy: tuple[float, int] | None = None  # share right, images kept aside
        self._run_test_images = 0
        self.setting_widgets: dict[str, QWidget] = {}
        self._setting_help: dict[str, SettingHelp] = {}
        self._current_method = ""
        # Values typed per method, so switching methods and back keeps them.
        self._method_values: dict[str, dict[str, Any]] = {}
        self._drop_rates: dict[str, float] = {}

        self.method = QComboBox()
        ordered = [m for m in METHOD_LABELS if m in METHODS] + sorted(set(METHODS) - set(METHOD_LABELS))
        for name in ordered:
            self.method.addItem(method_item_text(name), name)
            self.method.setItemData(
                self.method.count() - 1, METHOD_DESCRIPTIONS.get(name, ""), Qt.ItemDataRole.ToolTipRole
            )
        self.method.setToolTip("The inference method: how the spread of belief over the weights is found.")
        self.method_about = WrappedLabel()
        self.method_about.setStyleSheet("color: #555555;")  # a quieter grey than the labels
        self.model = QComboBox()
        for name in ARCHITECTURES:
            words = ARCH_LABELS.get(name, name)
            self.model.addItem(words[:1].upper() + words[1:], name)
            self.model.setItemData(self.model.count() - 1, ARCH_TOOLTIPS.get(name, ""), Qt.ItemDataRole.ToolTipRole)
        self.model.setToolTip("The network whose weights are learned.")
        self.hidden = QSpinBox(minimum=8, maximum=4096, value=100)
        _follow_count(self.hidden, "units")
        self.hidden.setToolTip(
            "<p>How many units each of the MLP's two hidden layers has. Wider layers can learn "
            "more and take longer.</p><p><i>Unit:</i> units · <i>Default:</i> 100</p>"
        )
        self.drop_rate = QDoubleSpinBox(decimals=2, minimum=0.0, maximum=0.95, singleStep=0.05, value=0.5)
        self.drop_rate.setToolTip(
            "<p>The share of units the network's dropout layers switch off at random during "
            "training. MC dropout keeps them switching at prediction too, so it needs a rate "
            "above 0 (0.5 is the usual choice); for MAP and ensembles it is a regulariser.</p>"
            "<p><i>Unit:</i> share of units, 0 to 0.95</p>"
        )
        self.seed = QSpinBox(minimum=0, maximum=2**31 - 1, value=0)
        self.seed.setToolTip(
            "The starting number of the random generator: the same seed and settings give the "
            "same posterior again."
        )
        chosen = app_settings.data_folder()
        self.data_dir = QLineEdit(str(chosen) if chosen else "")
        self.data_dir.setPlaceholderText("none chosen: the user cache")
        self.data_dir.setToolTip(
            "The data folder, the same one the Rotate and Dataset tabs read (File → Choose data "
            "folder…): it holds one folder per data set, “mnist”, “notmnist” and “utkface”. "
            "MNIST's training files (train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz) "
            "are looked for in its “mnist” folder, then in bayescope's user cache."
        )
        data_row = browse_row(self.data_dir, "Choose the data folder (the folder that holds “mnist”).",
                              self._on_browse_clicked)
        self.data_found = WrappedLabel()
        self.data_found.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download = QCheckBox("download MNIST's training images (about 10 MB) into the user cache")
        self.download.setChecked(False)
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
        images_row = browse_row(self.images_folder, "Choose the folder of your images (one sub-folder per class).",
                                self._on_browse_images_clicked)
        self._images_row = QWidget()
        self._images_row.setLayout(images_row)
        images_row.setContentsMargins(0, 0, 0, 0)
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
        self.image_size.currentIndexChanged.connect(self._on_images_folder_text_changed)
        self.folder_data: FolderData | None = None
        self._folder_read: str | None = None  # the folder folder_data (or the problem) is of
        self._folder_problem: str | None = None
        self._scan_worker = None
        self._scan_number = 0  # of the latest reading started
        self._scan_timer = QTimer(self)
        self._scan_timer.setSingleShot(True)
        self._scan_timer.setInterval(self.SCAN_DELAY_MS)
        self._scan_timer.timeout.connect(self._on_scan_timer_timeout)
        self.name = QLineEdit("my-posterior")
        self.name.setToolTip(
            "The name of the new posterior. It heads its column and its entry in the “Add "
            "posterior” menu, so that two runs of one method can be told apart. It is saved in "
            "bayescope's own posteriors folder; you are asked before an existing one is replaced."
        )

        self.start_from = QComboBox()
        self.start_from.addItem("their own best weights, trained first with the settings below", None)
        self.start_from.addItem("a saved posterior…", BROWSE_FOR_START)
        self.start_from.setToolTip(
            "Laplace and SWAG spread belief around one set of best weights. They can train those "
            "first (a MAP run, part of this run), or start from a MAP posterior you trained or "
            "downloaded before: its network is used, and the model settings are hidden."
        )
        self.start_from.activated.connect(self._on_start_from_activated)

        self.form = QFormLayout()
        self.form.addRow(self._label("Method", self.method.toolTip()), self.method)
        self.form.addRow("", self.method_about)
        self.form.addRow(self._label("Start from", self.start_from.toolTip()), self.start_from)
        self.form.addRow(self._label("Training images", self.images_source.toolTip()), self.images_source)
        self._data_row = QWidget()
        self._data_row.setLayout(data_row)
        data_row.setContentsMargins(0, 0, 0, 0)
        self.form.addRow(self._label("Data folder", self.data_dir.toolTip()), self._data_row)
        self.form.addRow("", self.data_found)
        self.form.addRow("", self.download)
        self.form.addRow(self._label("Images folder", self.images_folder.toolTip()), self._images_row)
        self.form.addRow("", self.folder_found)
        self.form.addRow(self._label("Image size", self.image_size.toolTip()), self.image_size)
        self.form.addRow(self._label("Model", self.model.toolTip()), self.model)
        self.form.addRow(self._label("Hidden layer width", self.hidden.toolTip()), self.hidden)
        self.form.addRow(self._label("Dropout in the network", self.drop_rate.toolTip()), self.drop_rate)
        self.form.addRow(self._label("Seed", self.seed.toolTip()), self.seed)
        self.form.addRow(self._label("Save as", self.name.toolTip()), self.name)

        self.settings_form = QFormLayout()
        self.estimate = QLabel()
        self.estimate.setWordWrap(True)
        self.estimate.setMinimumHeight(2 * self.estimate.fontMetrics().lineSpacing() + 4)
        self.estimate.setToolTip(
            "Measured here and now: a few training steps of the chosen method and model are "
            "timed, and the time of one step is multiplied by the steps the run will take. Other "
            "programs running at the same time make it slower."
        )
        self.progress = QProgressBar()
        self.status = QLabel("Ready.")
        self.status.setWordWrap(True)
        self.trace = pg.PlotWidget(title="Training trace")
        self.trace.setLabel("bottom", "step")
        self.trace.setToolTip(
            "How training is going: the ELBO for variational methods (higher is better), the log "
            "posterior for samplers (it rises, then levels off when the chains reach the posterior), "
            "the training loss otherwise (lower is better)."
        )
        self.curve = self.trace.plot(pen=pg.mkPen(style.BAR, width=2))
        self.trace_about = QLabel()
        self.trace_about.setWordWrap(True)
        self.trace_about.setStyleSheet("color: #555555;")

        self.buttons = QDialogButtonBox()
        self.start_button = self.buttons.addButton("Start", QDialogButtonBox.ButtonRole.AcceptRole)
        self.cancel_button = self.buttons.addButton("Cancel run", QDialogButtonBox.ButtonRole.RejectRole)
        self.close_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.close_button.setToolTip(CLOSE_TIP)
        for button in (self.start_button, self.cancel_button, self.close_button):
            button.setAutoDefault(False)  # Enter in a field must not start an hour-long run
        self.start_button.setToolTip("Train with these settings in the background.")
        self.cancel_button.setToolTip("Stop the run; nothing is saved.")
        self.cancel_button.setEnabled(False)
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.close)

        settings_box = QGroupBox("Method settings")
        settings_box.setLayout(self.settings_form)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(settings_box)
        # One panel, so that a run can lock what it was started with.
        self.settings_panel = QWidget()
        left = QVBoxLayout(self.settings_panel)
        left.setContentsMargins(0, 0, 0, 0)
        left.addLayout(self.form)
        left.addWidget(scroll, 1)
        right = QVBoxLayout()
        right.addWidget(self.trace, 1)
        right.addWidget(self.trace_about)
        right.addWidget(self.progress)
        right.addWidget(self.status)
        columns = QHBoxLayout()
        columns.addWidget(self.settings_panel, 2)
        columns.addLayout(right, 3)
        layout = QVBoxLayout(self)
        layout.addLayout(columns, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.estimate, 1)
        bottom.addWidget(self.buttons, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addLayout(bottom)

        self._estimate_timer = QTimer(self)
        self._estimate_timer.setSingleShot(True)
        self._estimate_timer.setInterval(self.ESTIMATE_DELAY_MS)
        self._estimate_timer.timeout.connect(self._on_estimate_timer_timeout)

        self._load_settings()
        self._on_data_dir_text_changed()
        self.data_dir.textChanged.connect(self._on_data_dir_text_changed)
        self._on_images_source_changed()
        self.images_source.currentIndexChanged.connect(self._on_images_source_changed)
        self.images_folder.textChanged.connect(self._on_images_folder_text_changed)
        self._on_method_changed()
        self.method.currentIndexChanged.connect(self._on_method_changed)
        self.model.currentIndexChanged.connect(self._on_model_changed)
        for signal in (
            self.hidden.valueChanged,
            self.drop_rate.valueChanged,
            self.data_dir.textChanged,
        ):
            signal.connect(self._request_estimate)

    # ------------------------------------------------------------------ building the form

    @staticmethod
    def _label(text: str, tooltip: str) -> QLabel:
        label = QLabel(text)
        label.setToolTip(tooltip)
        return label

    @property
    def method_name(self) -> str:
        """The internal name of the chosen method (``"sghmc"``)."""
        return self.method.currentData()

    @property
    def model_name(self) -> str:
        return self.model.currentData()

    def select_method(self, name: str) -> None:
        """Choose a method by its internal name."""
        index = self.method.findData(name)
        if index < 0:
            raise ValueError(f"unknown method {name!r}")
        self.method.setCurrentIndex(index)

    def select_model(self, name: str) -> None:
        """Choose an architecture by its internal name."""
        index = self.model.findData(name)
        if index < 0:
            raise ValueError(f"unknown architecture {name!r}")
        self.model.setCurrentIndex(index)

    def _stash_method_values(self) -> None:
        if self._current_method:
            self._method_values[self._current_method] = self.setting_values()
            if self._current_method in USES_MODEL_DROPOUT:
                self._drop_rates[self._current_method] = self.drop_rate.value()

    def _on_method_changed(self, *_: object) -> None:
        """Rebuild the settings form from the method's config, with values typed before."""
        self._stash_method_values()
        name = self.method_name
        self._current_method = name
        while self.settings_form.rowCount():
            self.settings_form.removeRow(0)
        self.setting_widgets.clear()
        self._setting_help.clear()
        stored = self._method_values.get(name, {})
        shown_advanced_title = False
        for key, default, help_ in method_settings(name):
            widget = make_setting_widget(name, key, default, help_)
            if key in stored:
                # A stored value an older version wrote may not fit: the default stays.
                with contextlib.suppress(ValueError, TypeError):
                    set_widget_value(widget, stored[key])
            if help_.advanced and not shown_advanced_title:
                title = QLabel("<b>Fine-tuning</b> (most runs leave these alone)")
                self.settings_form.addRow(title)
                shown_advanced_title = True
            self.setting_widgets[key] = widget
            self._setting_help[key] = help_
            self.settings_form.addRow(self._label(help_.label, widget.toolTip()), widget)
            _changed_signal(widget).connect(self._on_setting_changed)
        # The combo shows the description up to its colon; the rest and the source go here.
        description, summary = METHOD_DESCRIPTIONS.get(name, ""), METHODS[name].summary
        rest = description.partition(":")[2].strip()
        about = f"{rest[:1].upper()}{rest[1:]}. " if rest else ""
        self.method_about.setText(f"{about}{summary[:1].upper()}{summary[1:]}.")
        self.trace_about.setText(TRACE_WORDS.get(TRACE_OF_METHOD.get(name, ""), ""))
        self._update_rows()
        if name in USES_MODEL_DROPOUT:
            self.drop_rate.setValue(self._drop_rates.get(name, DEFAULT_DROP_RATES.get(name, 0.0)))
        self._request_estimate()

    def _on_model_changed(self, *_: object) -> None:
        self._update_rows()
        self._request_estimate()

    def _on_setting_changed(self, *_: object) -> None:
        self._update_rows()
        self._request_estimate()

    def _update_rows(self) -> None:
        """Show only what applies: width for the MLP, network dropout where training uses it,
        the start for Laplace and SWAG (whose saved start brings its own network), and
        settings that depend on another only when it has the value they need."""
        method = self.method_name
        self.form.setRowVisible(self.start_from, METHODS[method].fit_from is not None)
        own_network = self.start_path is None
        self.form.setRowVisible(self.model, own_network)
        self.form.setRowVisible(self.hidden, own_network and self.model_name == "mlp")
        self.form.setRowVisible(self.drop_rate, own_network and method in USES_MODEL_DROPOUT)
        # MC dropout predicts with the network's dropout, so a rate of 0 would be no posterior.
        self.drop_rate.setMinimum(0.05 if method == "mc_dropout" else 0.0)
        for key, widget in self.setting_widgets.items():
            condition = self._setting_help[key].shown_when
            visible = not (key in BEST_WEIGHTS_SETTINGS and not own_network)  # a saved start skips that phase
            if condition is not None:
                other, wanted = condition
                visible = visible and other in self.setting_widgets and widget_value(self.setting_widgets[other]) == wanted
            self.settings_form.setRowVisible(widget, visible)

    @property
    def start_path(self) -> str | None:
        """The saved posterior that Laplace or SWAG starts from (None: train one first)."""
        if METHODS[self.method_name].fit_from is None:
            return None
        data = self.start_from.currentData()
        return None if data in (None, BROWSE_FOR_START) else data

    def set_start_file(self, path: str | Path) -> None:
        """Start from this saved posterior (listed by its file name above “a saved posterior…”)."""
        path = str(path)
        index = self.start_from.findData(path)
        if index < 0:
            index = self.start_from.count() - 1
            self.start_from.insertItem(index, Path(path).name, path)
            self.start_from.setItemData(index, path, Qt.ItemDataRole.ToolTipRole)
        self.start_from.setCurrentIndex(index)
        self._update_rows()

    def _on_start_from_activated(self, index: int) -> None:
        if self.start_from.itemData(index) == BROWSE_FOR_START:
            path, _ = QFileDialog.getOpenFileName(
                self, "Choose a MAP posterior to start from", str(user_models_dir()), "Posteriors (*.pt)")
            if path:
                self.set_start_file(path)
            else:
                self.start_from.setCurrentIndex(0)
        self._update_rows()
        self._request_estimate()

    def _checked_start(self) -> tuple[Posterior, dict[str, Any]] | None:
        """The chosen start, loaded and checked, with where it came from; None for none chosen.
        A file that cannot start the run is refused here, in words, before anything runs."""
        path = self.start_path
        if path is None:
            return None
        start = load_posterior(path)
        start_weights(get_method(self.method_name), start)
        return start, {"file": str(Path(path).absolute()), "file_sha256": file_sha256(path)}

    def is_setting_shown(self, name: str) -> bool:
        """Whether setting ``name`` has a visible row for the chosen method and model."""
        widget = self.setting_widgets.get(name)
        return widget is not None and self.settings_form.isRowVisible(widget)

    def set_setting(self, name: str, value: object) -> None:
        set_widget_value(self.setting_widgets[name], value)

    def setting_values(self) -> dict[str, Any]:
        return {key: widget_value(widget) for key, widget in self.setting_widgets.items()}

    def architecture(self) -> ArchSpec:
        """The chosen network; its dropout only where the method trains with it. For a folder of
        one's own images, it reads their classes, channels and size (``ValueError`` before the
        folder has been read, or for a network that folder does not train)."""
        drop = self.drop_rate.value() if self.method_name in USES_MODEL_DROPOUT else 0.0
        if not self.uses_folder:
            return ArchSpec(self.model_name, drop_rate=drop, hidden=self.hidden.value())
        data = self.folder_data
        if data is None:
            raise ValueError(self._folder_problem or "the images folder has not been read yet")
        offered = self.models_offered()
        if self.model_name not in offered:
            words = ARCH_LABELS.get(self.model_name, self.model_name)
            raise ValueError(
                f"a folder of {'colour' if data.channels == 3 else 'grey'} images trains "
                f"{' or '.join(ARCH_LABELS.get(m, m) for m in offered)}, not {words}")
        return folder_architecture(data, self.model_name, drop, self.hidden.value())

    # ------------------------------------------------------------------ one's own images

    @property
    def uses_folder(self) -> bool:
        """Whether the posterior learns a folder of one's own images (else MNIST's digits)."""
        return self.images_source.currentData() == FOLDER_IMAGES

    def choose_images_folder(self, folder: str | Path | None) -> None:
        """Train on this folder of one's own images (None: on MNIST's digits)."""
        if folder is not None:
            self.images_folder.setText(str(folder))
        self.images_source.setCurrentIndex(self.images_source.findData(MNIST_IMAGES if folder is None else FOLDER_IMAGES))

    def models_offered(self) -> tuple[str, ...]:
        """The networks the chosen images can train: every one for MNIST and grey folders (at their
        size), the colour network for colour images (the command line's choice without --model)."""
        data = self.folder_data if self.uses_folder else None
        if data is not None and data.channels == 3:
            return (default_folder_model(3),)
        return ARCHITECTURES

    def _update_models_offered(self) -> None:
        offered = self.models_offered()
        items = self.model.model()
        for i in range(self.model.count()):
            items.item(i).setEnabled(self.model.itemData(i) in offered)  # type: ignore[attr-defined]
        if self.model_name not in offered:
            self.select_model(offered[0])

    def _on_images_source_changed(self, *_: object) -> None:
        folder = self.uses_folder
        for row in (self._data_row, self.data_found, self.download):
            self.form.setRowVisible(row, not folder)
        for row in (self._images_row, self.folder_found, self.image_size):
            self.form.setRowVisible(row, folder)
        if not folder:
            self._on_data_dir_text_changed()  # shows the download box where MNIST is missing
        if folder and self.images_folder.text().strip() != (self._folder_read or ""):
            self._on_images_folder_text_changed()
        self._update_models_offered()
        self._update_start_enabled()
        self._request_estimate()

    def _on_browse_images_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Choose the folder of your images (one sub-folder per class)", self.images_folder.text())
        if folder:
            self.images_folder.setText(folder)

    def _on_images_folder_text_changed(self, *_: object) -> None:
        """Forget what was read (a reading under way is stopped, its reports dropped); read the
        folder shortly (after the last key typed)."""
        if self._scan_worker is not None:
            self._scan_worker.quit()
            self._scan_worker = None
        self._scan_number += 1
        self.folder_data, self._folder_read, self._folder_problem = None, None, None
        text = self.images_folder.text().strip()
        self.folder_found.setToolTip("")
        self.folder_found.setText("Choose a folder of your images: one sub-folder per class." if not text
                                  else "Reading the images…")
        self._update_models_offered()
        self._update_start_enabled()
        if text and self.uses_folder:
            self._scan_timer.start()

    def _on_scan_timer_timeout(self) -> None:
        path = self.images_folder.text().strip()
        if not path:
            return
        self._scan_number += 1
        worker = generator_worker(read_image_folder(path, self.image_size.currentData()))
        # each slot is told which reading reported, so that a stale one's reports are dropped
        number = self._scan_number
        worker.yielded.connect(partial(self._on_scan_worker_yielded, number))
        worker.returned.connect(partial(self._on_scan_worker_returned, number, path))
        worker.errored.connect(partial(self._on_scan_worker_errored, number, path))
        worker.finished.connect(partial(self._on_scan_worker_finished, number))
        self._scan_worker = worker
        worker.start()

    def _on_scan_worker_yielded(self, number: int, record: ProgressRecord) -> None:
        if number == self._scan_number and record.total:
            self.folder_found.setText(f"Reading the images… {record.step:,} of {record.total:,}")

    def _on_scan_worker_returned(self, number: int, path: str, data: FolderData) -> None:
        if number != self._scan_number:
            return  # a stale reading
        self._folder_read = path
        try:
            check_training_classes(data, "the folder")
        except DatasetContentError as exc:
            self._show_folder_problem(exc, path)
            return
        self.folder_data = data
        words, details = folder_in_words(data)
        self.folder_found.setText(words)
        self.folder_found.setToolTip(details)
        if self.start_path is None:  # the network the command line picks for these images
            self.select_model(default_folder_model(data.channels))
        self._update_models_offered()
        self._update_start_enabled()
        self._request_estimate()

    def _on_scan_worker_errored(self, number: int, path: str, exc: Exception) -> None:
        if number == self._scan_number:
            self._folder_read = path
            self._show_folder_problem(exc, path)

    def _show_folder_problem(self, exc: BaseException, path: str) -> None:
        self.folder_data = None
        self._folder_problem = folder_problem(exc, path)
        self.folder_found.setText(f"<b>{html.escape(self._folder_problem, quote=False)}</b>")
        self.folder_found.setToolTip("")
        self._update_models_offered()
        self._update_start_enabled()
        self._request_estimate()

    def _on_scan_worker_finished(self, number: int) -> None:
        if number == self._scan_number:
            self._scan_worker = None

    def _folder_changed(self) -> bool:
        """Whether the folder's files changed since it was read (or it could not be used then)."""
        if self._folder_read is None:
            return False
        if self.folder_data is None:
            return True  # perhaps mended since: worth reading again
        read = self.folder_data.train.source.get("listing_sha256")
        return read is not None and listing_digest(self._folder_read) != read

    def _read_folder_again_if_changed(self) -> bool:
        """Read the folder again when its files changed since it was read; True when it did."""
        if not self.uses_folder or self.running or not self._folder_changed():
            return False
        self._on_images_folder_text_changed()
        return True

    @property
    def reading_folder(self) -> bool:
        """Whether a folder of one's own images is being read (or about to be)."""
        return self._scan_worker is not None or self._scan_timer.isActive()

    def _update_start_enabled(self) -> None:
        """Start needs images that can train: MNIST (found or to download) or a read folder."""
        ready = not self.uses_folder or self.folder_data is not None
        self.start_button.setEnabled(ready and not self.running)
        self.start_button.setToolTip("Train with these settings in the background." if ready else
                                     "The images folder must be read, and usable, first.")

    def config(self) -> Any:
        """The method's config from the form (``ValueError`` when settings do not fit together)."""
        return get_method(self.method_name).make_config(**self.setting_values())

    def output_path(self) -> Path:
        return user_models_dir() / f"{_stem(self.name.text())}.pt"

    # ------------------------------------------------------------------ settings that persist

    def _load_settings(self) -> None:
        settings = app_settings.settings()
        settings.beginGroup(self.SETTINGS_GROUP)
        try:
            method = settings.value("method")
            if method in METHODS:
                self.select_method(str(method))
            else:
                self.select_method("mc_dropout")
            model = settings.value("model")
            self.select_model(str(model) if model in ARCHITECTURES else "mlp")
            for widget, key in (
                (self.hidden, "hidden"),
                (self.seed, "seed"),
                (self.name, "name"),
                (self.images_folder, "images_folder"),
                (self.images_source, "images"),
            ):
                value = settings.value(key)
                if value is not None:
                    with contextlib.suppress(ValueError, TypeError):  # unreadable: default stays
                        set_widget_value(widget, value)
            with contextlib.suppress(ValueError, TypeError):  # stored as a number, 0 for the usual side
                set_widget_value(self.image_size, int(settings.value("image_size", 0)) or None)
            settings.beginGroup("drop_rates")
            for method_name in settings.childKeys():
                with contextlib.suppress(ValueError, TypeError):
                    self._drop_rates[method_name] = float(settings.value(method_name))
            settings.endGroup()
            settings.beginGroup("methods")
            for method_name in settings.childGroups():
                if method_name not in METHODS:
                    continue
                settings.beginGroup(method_name)
                self._method_values[method_name] = {k: settings.value(k) for k in settings.childKeys()}
                settings.endGroup()
            settings.endGroup()
        finally:
            settings.endGroup()

    def save_settings(self) -> None:
        """Remember every field for the next dialog (QSettings)."""
        self._stash_method_values()
        settings = app_settings.settings()
        settings.beginGroup(self.SETTINGS_GROUP)
        settings.setValue("method", self.method_name)
        settings.setValue("model", self.model_name)
        settings.setValue("hidden", self.hidden.value())
        for method_name, rate in self._drop_rates.items():
            settings.setValue(f"drop_rates/{method_name}", rate)
        settings.setValue("seed", self.seed.value())
        settings.setValue("name", self.name.text())
        settings.setValue("images", self.images_source.currentData())
        settings.setValue("images_folder", self.images_folder.text().strip())
        settings.setValue("image_size", self.image_size.currentData() or 0)
        for method_name, values in self._method_values.items():
            for key, value in values.items():
                settings.setValue(f"methods/{method_name}/{key}", value)
        settings.endGroup()
        settings.sync()
        self._store_data_folder()

    def _store_data_folder(self) -> None:
        """The data folder typed or browsed here becomes the app's one data folder."""
        text = self.data_dir.text().strip()
        if text and Path(text) != app_settings.data_folder():
            app_settings.set_data_folder(Path(text))

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

    # ------------------------------------------------------------------ the estimate

    def _request_estimate(self, *_: object) -> None:
        """Measure again shortly (typing several digits triggers one measurement)."""
        if self.running:
            return
        self.last_estimate = None
        self.estimate.setText("Estimated time: measuring…")
        if self.isVisible():  # a hidden dialog measures when it is shown (showEvent)
            self._estimate_timer.start()

    def _on_estimate_timer_timeout(self) -> None:
        if self.running or not self.isVisible():
            return
        if self._estimate_worker is not None:
            # Measure again once the stale measurement has stopped.
            self._estimate_pending = True
            self._estimate_worker.quit()
            return
        method = self.method_name
        if self.start_path is not None:
            # the measured steps would be the best-weights training that this run skips
            self.estimate.setText("Estimated time: not measured for a run that starts from a saved posterior.")
            return
        if self.uses_folder and self.folder_data is None:
            self.estimate.setText("Estimated time: once the images folder has been read." if self._folder_problem
                                  is None else "Estimated time: none, as these images cannot train a posterior.")
            return
        try:
            arch = self.architecture()
            config = self.config()
        except ValueError as exc:
            self.estimate.setText(
                f"Estimated time: none until the settings fit together ({in_words(method, str(exc))})."
            )
            return
        if self.uses_folder:
            found = len(self.folder_data.train) if self.folder_data is not None else None
        else:
            try:
                found = count_training_images(mnist_training_folder(self.data_dir.text().strip()))
            except DatasetMissingError:
                found = None
        num_train = found or MNIST_TRAIN_IMAGES
        self._estimate_assumed = found is None
        worker = generator_worker(estimate_duration(method, config, arch, num_train))
        worker.returned.connect(self._on_estimate_worker_returned)
        worker.errored.connect(self._on_estimate_worker_errored)
        worker.finished.connect(self._on_estimate_worker_finished)
        self._estimate_worker = worker
        worker.start()

    def _on_estimate_worker_returned(self, estimate: TrainingEstimate) -> None:
        if self._estimate_pending:
            return  # the settings changed while measuring
        self.last_estimate = estimate
        images = f"{estimate.num_train:,} images"
        if self.uses_folder:
            images = f"your {images}"
        elif self._estimate_assumed:
            images = f"MNIST's {images}, once downloaded"
        per_step = estimate.seconds_per_step
        step_words = f"{per_step * 1000:.0f} ms" if per_step < 1 else f"{per_step:.1f} s"
        self.estimate.setText(
            f"<b>Estimated time: {duration_in_words(estimate.seconds)} on this computer</b><br>"
            f"{estimate.steps:,} {estimate.step_name} over {images}, {step_words} each, "
            "measured just now"
        )

    def _on_estimate_worker_errored(self, exc: Exception) -> None:
        if not self._estimate_pending:
            self.estimate.setText(
                f"Estimated time: could not be measured: {error_in_words(exc, self.method_name)}"
            )

    def _on_estimate_worker_finished(self) -> None:
        self._estimate_worker = None
        if self._estimate_pending:
            self._estimate_pending = False
            self._request_estimate()

    def _stop_estimate(self) -> None:
        self._estimate_timer.stop()
        self._estimate_pending = False
        if self._estimate_worker is not None:
            self._estimate_worker.quit()

    # ------------------------------------------------------------------ running

    @property
    def running(self) -> bool:
        return self._worker is not None

    def _on_browse_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Choose the data folder (it holds “mnist”, “notmnist”, “utkface”)", self.data_dir.text()
        )
        if folder:
            self.data_dir.setText(folder)

    def start(self) -> None:
        if self.running:
            return
        method = self.method_name
        try:
            arch = self.architecture()
            config = self.config()
        except ValueError as exc:
            QMessageBox.warning(self, "These settings do not work together", in_words(method, str(exc)))
            return
        try:
            start, start_source = self._checked_start() or (None, None)
        except (PosteriorFileError, ValueError, OSError) as exc:
            QMessageBox.warning(self, "This posterior cannot be a starting point",
                                f"{Path(self.start_path or '').name}: {in_words(method, str(exc))}")
            return
        if start is not None:
            arch = start.arch
        if self.uses_folder:
            if self._read_folder_again_if_changed():
                self.status.setText("Not started: the images folder changed since it was read; it is being "
                                    "read again. Press Start when it has been.")
                return
            refusal = self._folder_refusal(arch, config, start)
            if refusal:
                QMessageBox.warning(self, "These images cannot train this run", refusal)
                return
        out = self.output_path()
        if out.exists():
            answer = QMessageBox.question(
                self,
                "Replace the posterior?",
                f"A posterior named “{out.stem}” already exists. Replace it with the one this run "
                "trains? (It is replaced only when the run finishes.)",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                QMessageBox.StandardButton.No,
            )
            if answer != QMessageBox.StandardButton.Yes:
                self.status.setText("Not started: choose another name under “Save as”.")
                return
        self.save_settings()
        self._stop_estimate()
        if self.last_estimate is None:
            self.estimate.setText("Estimated time: not measured, as the run started first.")
        if self.uses_folder and self.folder_data is not None:
            gen = folder_training_run(method, arch, config, self.folder_data, self.seed.value(), out,
                                      self.name.text(), start, start_source, device=app_settings.compute_device())
        else:
            gen = training_run(
                method, arch, config, self.data_dir.text().strip(), self.download.isChecked(), self.seed.value(),
                out, self.name.text(), start, start_source, device=app_settings.compute_device(),
            )
        self._trace_x.clear()
        self._trace_y.clear()
        self.curve.setData([], [])
        self._run_started = time.monotonic()
        self._run_first_step = None
        self._run_accuracy = None
        self._run_test_images = len(self.folder_data.test) if self.uses_folder and self.folder_data else 0
        worker = generator_worker(gen)
        worker.yielded.connect(self._on_worker_yielded)
        worker.returned.connect(self._on_worker_returned)
        worker.errored.connect(self._on_worker_errored)
        worker.aborted.connect(self._on_worker_aborted)
        worker.finished.connect(self._on_worker_finished)
        self._worker = worker
        self._run_method = method
        self.settings_panel.setEnabled(False)
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.close_button.setText("Run in background")
        self.close_button.setToolTip(BACKGROUND_TIP)
        self.status.setText("Starting…")
        worker.start()
        self.progress_reported.emit(self.run_words(0, 0), 0, 0)

    def _folder_refusal(self, arch: ArchSpec, config: Any, start: Posterior | None) -> str | None:
        """Why the read folder cannot train this run, in a sentence (what the command line refuses),
        or None."""
        data = self.folder_data
        if data is None:
            return self._folder_problem or "The images folder has not been read yet."
        if start is not None and (start.arch.channels, start.arch.image_size, start.arch.num_classes) != (
                data.channels, data.image_size, len(data.train.class_names)):
            return (f"The saved posterior reads {start.arch.num_classes} classes of "
                    f"{'colour' if start.arch.channels == 3 else 'grey'} {start.arch.image_size}×"
                    f"{start.arch.image_size} images, and these images are {len(data.train.class_names)} classes "
                    f"of {'colour' if data.channels == 3 else 'grey'} {data.image_size}×{data.image_size}."
                    + (f" Choose {start.arch.image_size}×{start.arch.image_size} pixels under “Image size”."
                       if start.arch.image_size != data.image_size and start.arch.image_size in FOLDER_SIDES
                       and start.arch.channels == data.channels else ""))
        device = app_settings.compute_device()
        refusal = streamed_refusal(data, self.method_name, device)
        if refusal:
            return f"These images are {refusal}. Choose another method, or compute on the CPU."
        # weights, gradients and Adam's two moments for every chain or member, as the command line checks
        copies = 4 * max(int(getattr(config, "num_chains", 1)), int(getattr(config, "num_members", 1)))
        try:
            check_model_fits(arch, copies, f"training {copies // 4} {ARCH_LABELS.get(arch.name, arch.name)} "
                             f"network(s) of {arch.parameter_count():,} weights", device)
        except (ValueError, MemoryError) as exc:
            return str(exc)
        return None

    def run_words(self, step: int, total: int) -> str:
        """The running run in a few words, for the status bar: ``"Training SGLD… 40 %"``."""
        words = f"Training {METHOD_LABELS.get(self._run_method, self._run_method)}…"
        return f"{words} {100 * step // total} %" if total else words

    def cancel(self) -> None:
        if self._worker is not None:
            self.status.setText("Cancelling…")
            self._worker.quit()

    def _time_left(self, record: ProgressRecord) -> str:
        """Remaining time from this run's own pace (after its first reported step)."""
        if not record.total or record.step <= 0 or record.phase in ("loading data", "saving"):
            return ""
        now = time.monotonic()
        if self._run_first_step is None:
            self._run_first_step = (now, record.step)
            return ""
        t0, s0 = self._run_first_step
        if record.step <= s0 or now - t0 < 1.0:
            return ""
        left = (record.total - record.step) * (now - t0) / (record.step - s0)
        return f" · {duration_in_words(left)} left"

    def _on_worker_yielded(self, record: ProgressRecord) -> None:
        if record.total:
            self.progress.setRange(0, record.total)
            self.progress.setValue(record.step)
        else:
            self.progress.setRange(0, 0)  # busy indicator
        key = next((k for k in self.TRACE_KEYS if k in record.values), None)
        if key is not None:
            self._trace_x.append(record.step)
            self._trace_y.append(record.values[key])
            self.trace.setLabel("left", VALUE_WORDS.get(key, key.replace("_", " ")))
        now = time.monotonic()
        if now - self._last_draw > 1 / 30:  # throttle redraws to ~30 Hz
            self._last_draw = now
            self.curve.setData(self._trace_x, self._trace_y)
        if record.phase == "eval" and record.step == record.total and "accuracy" in record.values:
            self._run_accuracy = (record.values["accuracy"], self._run_test_images)
        phase = PHASE_WORDS.get(record.phase, record.phase[:1].upper() + record.phase[1:])
        parts = [f"{phase}…" if not record.total else f"{phase}: step {record.step:,} of {record.total:,}"]
        values = "  ".join(
            f"{VALUE_WORDS.get(k, k.replace('_', ' '))} {v:.4g}" for k, v in record.values.items()
        )
        self.status.setText(parts[0] + self._time_left(record) + (f"\n{values}" if values else ""))
        self.progress_reported.emit(self.run_words(record.step, record.total), record.step, record.total)

    def _on_worker_returned(self, path: Path) -> None:
        self.curve.setData(self._trace_x, self._trace_y)
        took = duration_in_words(time.monotonic() - self._run_started).removeprefix("about ")
        checked = ""
        if self._run_accuracy is not None:
            share, images = self._run_accuracy
            checked = f" It names the right class of {round(share * images):,} of the {images:,} images kept aside."
        self.status.setText(f"Saved as “{Path(path).stem}” after {took}; it is now a column and in the “Add "
                            f"posterior” menu.{checked}")
        self.posterior_saved.emit(Path(path))

    def _on_worker_errored(self, exc: Exception) -> None:
        self.status.setText("Training failed; nothing was saved.")
        QMessageBox.critical(self, "Training failed", error_in_words(exc, self._run_method))

    def _on_worker_aborted(self) -> None:
        self.status.setText("Cancelled; nothing was saved.")

    def _on_worker_finished(self) -> None:
        self._worker = None
        self.settings_panel.setEnabled(True)
        self._update_start_enabled()
        self.cancel_button.setEnabled(False)
        self.close_button.setText("Close")
        self.close_button.setToolTip(CLOSE_TIP)
        self.progress.setRange(0, 1)
        if self.last_estimate is None:  # the run interrupted a measurement
            self._request_estimate()
        self.run_finished.emit()

    # ------------------------------------------------------------------ closing

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 (Qt override)
        self.save_settings()
        self._stop_estimate()
        super().hideEvent(event)

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        chosen = app_settings.data_folder()
        if chosen is not None and not self.running:  # chosen in the window since the dialog was made
            self.data_dir.setText(str(chosen))
        self._read_folder_again_if_changed()  # images added or mended while the dialog was closed
        if not self.running and self.last_estimate is None:
            if self._estimate_worker is None:
                self._request_estimate()
            else:
                self._estimate_pending = True  # the one stopped on hiding: measure again after it

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt override)
        # A run goes on in the background: closing only hides the dialog (Cancel stops a run).
        self.save_settings()
        self._stop_estimate()
        super().closeEvent(event)

    def stop_to_quit(self) -> bool:
        """Asked when the app quits during a run: True, and the run is cancelled, when the
        person agrees to lose it."""
        if not self.running:
            return True
        answer = QMessageBox.question(
            self.parentWidget() or self,
            "Training is running",
            f"{self.run_words(self.progress.value(), self.progress.maximum())}: quitting stops the "
            "run and nothing of it is saved. Quit anyway?",
        )
        if answer != QMessageBox.StandardButton.Yes:
            return False
        self.cancel()
        return True


class RunIndicator(QWidget):
    """The status bar's word on a training run going on while its dialog is hidden: a small
    progress bar and “Training SGLD… 40 %”; a click shows the training dialog again.

    Signals
    -------
    clicked
        The person clicked it.
    """

    clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)  # the words stay beside the bar, never under its fill
        self.bar.setFixedSize(90, 12)
        self.label = QLabel()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.addWidget(self.bar)
        layout.addWidget(self.label)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        tip = ("A posterior is training in the background. Click to show the training window: its "
               "trace, the time left, and Cancel. When it is done, it is added as a column.")
        for widget in (self, self.bar, self.label):
            widget.setToolTip(tip)

    def show_progress(self, text: str, step: int, total: int) -> None:
        if total:
            self.bar.setRange(0, total)
            self.bar.setValue(step)
        else:
            self.bar.setRange(0, 0)  # busy: nothing counted yet
        self.label.setText(text)

    def mouseReleaseEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit()
        super().mouseReleaseEvent(event)
