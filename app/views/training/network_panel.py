"""The network whose weights are learned: where a run starts (its own best weights, or a saved
posterior for the methods that start from one), the architecture, the MLP's width and the
network's own dropout, each method keeping its drop rate (:class:`core.engine.inference.Method`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QSpinBox, QWidget

from app.settings import user_models_dir
from app.views.training.fields import follow_count, form_label
from core.engine.data.folder import FolderData, default_folder_model, folder_architecture
from core.engine.files import file_sha256
from core.engine.inference import METHODS, get_method
from core.engine.inference.base import Posterior
from core.engine.models import ARCHITECTURES, ArchSpec
from core.engine.naming import ARCH_LABELS
from core.engine.runner import start_weights
from core.engine.store import load_posterior
from core.engine.training_words import ARCH_TOOLTIPS

#: The “Start from” choice that opens a file dialog.
BROWSE_FOR_START = "browse"
#: The network a training dialog opened for the first time offers.
DEFAULT_MODEL = "mlp"
#: The smallest drop rate of a method that predicts with the network's dropout (0 would be no posterior).
LEAST_PREDICTIVE_DROP_RATE = 0.05


class NetworkPanel(QObject):
    """Binds the network of a run both ways: :meth:`select_model`, :meth:`set_start_file` and the
    drop rate per method in, :attr:`model_name`, :attr:`start_path` and :meth:`drop_rate_for` out.

    Signals
    -------
    changed
        The start, the model, its width or its drop rate changed.
    """

    changed = Signal()

    def __init__(self, dialog: QWidget, form: QFormLayout) -> None:
        super().__init__(dialog)
        self._dialog, self._form = dialog, form
        self._method = ""
        #: Each method's drop rate as last set (only methods that train with the network's dropout).
        self.drop_rates: dict[str, float] = {}
        self.model = QComboBox()
        for name in ARCHITECTURES:
            words = ARCH_LABELS.get(name, name)
            self.model.addItem(words[:1].upper() + words[1:], name)
            self.model.setItemData(self.model.count() - 1, ARCH_TOOLTIPS.get(name, ""), Qt.ItemDataRole.ToolTipRole)
        self.model.setToolTip("The network whose weights are learned.")
        self.hidden = QSpinBox(minimum=8, maximum=4096, value=100)
        follow_count(self.hidden, "units")
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
        self.start_from = QComboBox()
        self.start_from.addItem("their own best weights, trained first with the settings below", None)
        self.start_from.addItem("a saved posterior…", BROWSE_FOR_START)
        self.start_from.setToolTip(
            "Laplace and SWAG spread belief around one set of best weights. They can train those "
            "first (a MAP run, part of this run), or start from a MAP posterior you trained or "
            "downloaded before: its network is used, and the model settings are hidden."
        )
        self.start_from.activated.connect(self._on_start_from_activated)
        self.model.currentIndexChanged.connect(self._on_changed)
        self.hidden.valueChanged.connect(self.changed)
        self.drop_rate.valueChanged.connect(self.changed)

    def add_start_row(self, form: QFormLayout) -> None:
        form.addRow(form_label("Start from", self.start_from.toolTip()), self.start_from)

    def add_rows(self, form: QFormLayout) -> None:
        form.addRow(form_label("Model", self.model.toolTip()), self.model)
        form.addRow(form_label("Hidden layer width", self.hidden.toolTip()), self.hidden)
        form.addRow(form_label("Dropout in the network", self.drop_rate.toolTip()), self.drop_rate)

    @property
    def model_name(self) -> str:
        return self.model.currentData()

    def select_model(self, name: str) -> None:
        """Choose an architecture by its internal name."""
        index = self.model.findData(name)
        if index < 0:
            raise ValueError(f"unknown architecture {name!r}")
        self.model.setCurrentIndex(index)

    def offer_models(self, offered: tuple[str, ...]) -> None:
        """Only the networks the chosen images can train are enabled; another choice moves to the first."""
        items = self.model.model()
        for i in range(self.model.count()):
            items.item(i).setEnabled(self.model.itemData(i) in offered)  # type: ignore[attr-defined]
        if self.model_name not in offered:
            self.select_model(offered[0])

    def show_for_method(self, method: str) -> None:
        """Keep the last method's drop rate; show this one's rows and its own drop rate."""
        if self._method and METHODS[self._method].uses_model_dropout:
            self.drop_rates[self._method] = self.drop_rate.value()
        self._method = method
        self.update_rows()
        entry = METHODS[method]
        if entry.uses_model_dropout:
            self.drop_rate.setValue(self.drop_rates.get(method, entry.default_drop_rate))

    def stash(self) -> None:
        """Keep the chosen method's drop rate (before saving the dialog's settings)."""
        if self._method and METHODS[self._method].uses_model_dropout:
            self.drop_rates[self._method] = self.drop_rate.value()

    def drop_rate_for(self, method: str) -> float:
        """The network's drop rate in training: the one shown where the method trains with it, else 0."""
        return self.drop_rate.value() if METHODS[method].uses_model_dropout else 0.0

    def update_rows(self) -> None:
        """Show what applies: the start for methods that can start from a saved posterior (which
        brings its own network), the width for the MLP, the dropout where training uses it."""
        if not self._method:
            return  # shown once a method is chosen
        entry = METHODS[self._method]
        self._form.setRowVisible(self.start_from, entry.fit_from is not None)
        own_network = self.start_path is None
        self._form.setRowVisible(self.model, own_network)
        self._form.setRowVisible(self.hidden, own_network and self.model_name == "mlp")
        self._form.setRowVisible(self.drop_rate, own_network and entry.uses_model_dropout)
        self.drop_rate.setMinimum(LEAST_PREDICTIVE_DROP_RATE if entry.needs_dropout else 0.0)

    @property
    def start_path(self) -> str | None:
        """The saved posterior the method starts from (None: train one first, or it cannot)."""
        if not self._method or METHODS[self._method].fit_from is None:
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
        self._on_changed()

    def models_offered(self, data: FolderData | None) -> tuple[str, ...]:
        """The networks images can train: every one for MNIST (``data`` None) and grey folders (at
        their size), the colour network for colour images (the command line's choice without --model)."""
        return (default_folder_model(3),) if data is not None and data.channels == 3 else ARCHITECTURES

    def architecture(self, method: str, folder: bool, data: FolderData | None, problem: str | None) -> ArchSpec:
        """The chosen network, its dropout only where ``method`` trains with it. For a ``folder`` of
        one's own images, it reads their classes, channels and size from ``data`` (``ValueError``
        before the folder has been read, or for a network that folder does not train)."""
        drop, hidden = self.drop_rate_for(method), self.hidden.value()
        if not folder:
            return ArchSpec(self.model_name, drop_rate=drop, hidden=hidden)
        if data is None:
            raise ValueError(problem or "the images folder has not been read yet")
        offered = self.models_offered(data)
        if self.model_name not in offered:
            raise ValueError(f"a folder of {'colour' if data.channels == 3 else 'grey'} images trains "
                             f"{' or '.join(ARCH_LABELS.get(m, m) for m in offered)}, not "
                             f"{ARCH_LABELS.get(self.model_name, self.model_name)}")
        return folder_architecture(data, self.model_name, drop, hidden)

    def checked_start(self) -> tuple[Posterior, dict[str, Any]] | None:
        """The chosen start, loaded and checked, with where it came from; None for none chosen.
        A file that cannot start the run is refused here, in words, before anything runs."""
        path = self.start_path
        if path is None:
            return None
        start = load_posterior(path)
        start_weights(get_method(self._method), start)
        return start, {"file": str(Path(path).absolute()), "file_sha256": file_sha256(path)}

    def _on_start_from_activated(self, index: int) -> None:
        if self.start_from.itemData(index) == BROWSE_FOR_START:
            path, _ = QFileDialog.getOpenFileName(
                self._dialog, "Choose a MAP posterior to start from", str(user_models_dir()), "Posteriors (*.pt)")
            if path:
                self.set_start_file(path)
                return
            self.start_from.setCurrentIndex(0)
        self._on_changed()

    def _on_changed(self, *_: object) -> None:
        self.update_rows()
        self.changed.emit()
