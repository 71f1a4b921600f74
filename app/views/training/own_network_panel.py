"""A network of your own and a folder of images: every method on a head over the network's
features, HMC the exact reference (a features tier, ``bayescope-cli zoo --tier features``).

The panel binds that build both ways: the network file, the layer it is split at (picked from
the network's own linear layers), the folder and the methods in; the estimate, the progress, the
time left and the outcome out. What it runs is the command's own run
(:func:`core.commands.zoo.observed_build`) in a worker, and its estimate
:func:`core.commands.zoo.estimate_own_tier`; Cancel stops the build as Ctrl-C does, keeping the
files made so far (the same build again goes on from them).
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.settings import own_tiers_dir
from app.views.training.fields import WrappedLabel, browse_row, form_label
from app.views.training.run_panel import file_stem
from app.workers import ComputationError, function_worker, generator_worker
from core.commands import zoo
from core.engine import tiers
from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.naming import method_label, plural
from core.engine.networks import NetworkError, linear_layers
from core.engine.training_plan import duration_in_words
from core.engine.training_words import (
    error_in_words,
    folder_problem,
    network_problem,
    tier_stage_words,
)

#: The head combo's first entry: the layer bayescope finds itself.
FOUND_BY_ITSELF = "the last linear layer, found by itself"
INTRO = ("Bring an image classifier you trained elsewhere, saved with torch.jit.save (.pt) or torch.export.save "
         "(.pt2), and a folder of your images with one sub-folder per class. bayescope splits the network at its "
         "last linear layer, passes every image through it once, and trains each method below on a "
         "softmax-regression head over those features, full-batch HMC as the exact reference. The posteriors "
         "join “Add posterior” as one group.")


class OwnNetworkPanel(QWidget):
    """Binds one features-tier build.

    Signals
    -------
    tier_built(Path)
        A build finished; its files are in this folder.
    running_changed(bool)
        A build started (True) or ended.
    """

    tier_built = Signal(object)
    running_changed = Signal(bool)
    DELAY_MS = 500

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.worker: Any = None
        self._estimate_worker: Any = None
        self._layers_worker: Any = None
        self._layers_of: str | None = None  # the network whose layers are listed (or being read)
        self._pending = False
        self.last_estimate: zoo.TierEstimate | None = None
        self._stage = zoo.TierStage("network")
        self._fraction = 0.0
        self._started = 0.0
        self._failure = ""
        self._out: Path | None = None

        about = WrappedLabel(INTRO)
        about.setStyleSheet("color: #555555;")
        self.network = QLineEdit()
        self.network.setPlaceholderText("none chosen")
        self.network.setToolTip("<p>Your classifier, saved with torch.jit.save (.pt) or torch.export.save (.pt2). "
                                "What it reads (image size, mean and standard deviation, class names) is read from "
                                "a JSON file of the same name beside it (net.json).</p>")
        self.network_row = browse_row(self.network, "Choose your network file (.pt or .pt2).", self._on_browse_network)
        self.network_found = WrappedLabel()
        self.network_found.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.head = QComboBox()
        self.head.addItem(FOUND_BY_ITSELF, None)
        self.head.setToolTip("<p>The layer the network is split at: its last linear layer, whose outputs are the "
                             "class scores. bayescope finds it itself; pick one of the network's linear layers "
                             "when several could be its last.</p>")
        self.folder = QLineEdit()
        self.folder.setPlaceholderText("none chosen")
        self.folder.setToolTip("<p>A folder with one sub-folder of images per class (or a CSV file of path,label "
                               "rows). A fifth of each class is kept aside to measure the posteriors.</p>")
        self.folder_row = browse_row(self.folder, "Choose the folder of your images (one sub-folder per class).",
                                     self._on_browse_folder)
        self.folder_found = WrappedLabel()
        self.folder_found.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.methods = QListWidget()
        self.methods.setToolTip("The methods trained on the head; HMC, the exact reference, is measured against "
                                "by every other.")
        for name in zoo.TIERS[zoo.FEATURES_TIER].methods:
            item = QListWidgetItem(method_label(name))
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked)
            self.methods.addItem(item)
        self.methods.setMinimumHeight(self.methods.sizeHintForRow(0) * self.methods.count() + 6)  # all in view
        self.estimate = WrappedLabel("Estimated time: once a network and a folder are chosen.")
        self.estimate.setToolTip("Measured here and now: a batch of images passed through your network, and a few "
                                 "training steps of each method timed, multiplied by the images and steps the build "
                                 "will take. Other programs running at the same time make it slower.")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.status = WrappedLabel("Ready.")
        self.build_button = QPushButton("Build")
        self.build_button.setToolTip("Build every chosen method's posterior in the background.")
        self.build_button.setEnabled(False)
        self.cancel_button = QPushButton("Cancel build")
        self.cancel_button.setToolTip("Stop the build; the posteriors finished so far are kept, and Build goes on "
                                      "from them.")
        self.cancel_button.setEnabled(False)
        for button in (self.build_button, self.cancel_button):
            button.setAutoDefault(False)

        self.form = QFormLayout()
        self.form.addRow(form_label("Network", self.network.toolTip()), self.network_row)
        self.form.addRow("", self.network_found)
        self.form.addRow(form_label("Split at", self.head.toolTip()), self.head)
        self.form.addRow(form_label("Images folder", self.folder.toolTip()), self.folder_row)
        self.form.addRow("", self.folder_found)
        self.form.addRow(form_label("Methods", self.methods.toolTip()), self.methods)
        self.settings = QWidget()
        self.settings.setLayout(self.form)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.build_button)
        buttons.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addWidget(about)
        layout.addWidget(self.settings)
        layout.addStretch(1)
        layout.addWidget(self.estimate)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(buttons)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(self.DELAY_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self.network.textChanged.connect(self._on_network_text_changed)
        self.folder.textChanged.connect(self._request)
        self.head.currentIndexChanged.connect(self._request)
        self.methods.itemChanged.connect(self._request)
        self.build_button.clicked.connect(self.build)
        self.cancel_button.clicked.connect(self.cancel)
        self._request()

    # ------------------------------------------------------------------ what it binds

    @property
    def running(self) -> bool:
        return self.worker is not None

    def chosen_methods(self) -> list[str]:
        return [self.methods.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.methods.count())
                if self.methods.item(i).checkState() == Qt.CheckState.Checked]

    def choose(self, network: str | Path | None = None, folder: str | Path | None = None,
               methods: list[str] | None = None) -> None:
        """Fill the fields (the window's tests, and a person's last choice)."""
        if methods is not None:
            for i in range(self.methods.count()):
                item = self.methods.item(i)
                item.setCheckState(Qt.CheckState.Checked if item.data(Qt.ItemDataRole.UserRole) in methods
                                   else Qt.CheckState.Unchecked)
        if folder is not None:
            self.folder.setText(str(folder))
        if network is not None:
            self.network.setText(str(network))

    def arguments(self, out: Path | str = "OUT", settings: tuple[str, ...] = ()) -> list[str]:
        """The ``bayescope-cli zoo`` arguments of the build these fields describe."""
        return zoo.own_tier_arguments(self.network.text().strip(), self.folder.text().strip(), out,
                                      methods=self.chosen_methods(), head=self.head.currentData(), settings=settings)

    #: ``--set`` settings every build of this panel is given (tests shorten the runs with them).
    extra_settings: tuple[str, ...] = ()

    def _on_browse_network(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose your network (saved with torch.jit.save or torch.export.save)",
                                              self.network.text(), "Networks (*.pt *.pt2);;All files (*)")
        if path:
            self.network.setText(path)

    def _on_browse_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose the folder of your images (one sub-folder per class)",
                                                  self.folder.text())
        if folder:
            self.folder.setText(folder)

    # ------------------------------------------------------------------ the estimate

    def _on_network_text_changed(self) -> None:
        """A new network: its linear layers listed (for “Split at”), then the estimate measured."""
        self.head.blockSignals(True)
        self.head.clear()
        self.head.addItem(FOUND_BY_ITSELF, None)
        self.head.blockSignals(False)
        self._layers_of = None
        self._request()

    def _read_layers(self) -> None:
        """List the chosen network's linear layers under “Split at” (once per network, after typing)."""
        path = self.network.text().strip()
        if path == self._layers_of or self._layers_worker is not None or not path or not Path(path).is_file():
            return
        self._layers_of = path
        worker = function_worker(linear_layers, path)
        worker.returned.connect(lambda names, p=path: self._on_layers_read(p, names))
        worker.errored.connect(lambda exc: None)  # the estimate says why the network cannot be read
        worker.finished.connect(self._on_layers_finished)
        self._layers_worker = worker
        worker.start()

    def _on_layers_read(self, path: str, names: tuple[str, ...]) -> None:
        if path != self.network.text().strip() or self.head.count() > 1:
            return  # another network was chosen meanwhile
        self.head.blockSignals(True)
        for name in names:
            self.head.addItem(name, name)
        self.head.blockSignals(False)

    def _on_layers_finished(self) -> None:
        self._layers_worker = None
        if self.network.text().strip() != self._layers_of:  # another network was chosen while this one was read
            self._read_layers()

    def _request(self, *_: object) -> None:
        """Measure again shortly (typing a path measures once, after the last key)."""
        if self.running:
            return
        self.last_estimate = None
        self.build_button.setEnabled(False)
        network, folder = self.network.text().strip(), self.folder.text().strip()
        self.network_found.setText("" if network else "Choose your network file.")
        self.folder_found.setText("" if folder else "Choose a folder of your images: one sub-folder per class.")
        if not (network and folder):
            self.estimate.setText("Estimated time: once a network and a folder are chosen.")
            return
        if not self.chosen_methods():
            self.estimate.setText("Estimated time: none, as no method is chosen.")
            return
        self.estimate.setText("Estimated time: measuring…")
        self._timer.start()

    def _on_timer_timeout(self) -> None:
        self._read_layers()
        if self._estimate_worker is not None:
            self._pending = True
            self._estimate_worker.quit()
            return
        worker = generator_worker(zoo.estimate_own_tier(self.arguments(settings=self.extra_settings)))
        network, folder = self.network.text().strip(), self.folder.text().strip()
        worker.returned.connect(self._on_estimate_returned)
        worker.errored.connect(lambda exc: self._on_estimate_errored(exc, network, folder))
        worker.finished.connect(self._on_estimate_finished)
        self._estimate_worker = worker
        worker.start()

    def _on_estimate_returned(self, estimate: zoo.TierEstimate) -> None:
        if self._pending:
            return
        self.last_estimate = estimate
        colour = "colour" if estimate.channels == 3 else "grey"
        self.network_found.setText(f"Split at {estimate.head}: {estimate.features:,} features of "
                                   f"{colour} {estimate.image_size}×{estimate.image_size} images.")
        classes = ", ".join(estimate.class_names)
        self.folder_found.setText(f"{estimate.images:,} images in {len(estimate.class_names)} classes ({classes}): "
                                  f"about {estimate.train_images:,} train the heads, the others measure them.")
        features, *methods = estimate.stages
        once = ("their features are already kept from before" if estimate.cached
                else f"features of {estimate.images:,} images once, {duration_in_words(features[1])}")
        each = "; ".join(f"{method_label(m)} " + ("not measured" if m in estimate.unmeasured
                                                   else duration_in_words(s).removeprefix("about "))
                         for m, s in methods)
        self.estimate.setText(f"<b>Estimated time: {duration_in_words(estimate.seconds)} on this computer</b>, "
                              f"then a while to measure them<br>{html.escape(once)}; {html.escape(each)}")
        self.build_button.setEnabled(True)

    def _on_estimate_errored(self, exc: BaseException, network: str, folder: str) -> None:
        if self._pending:
            return
        self._stage = zoo.TierStage("network")  # no method's run to word the error by
        self.estimate.setText("Estimated time: none, as this network and these images cannot be built on yet.")
        self._say_problem(exc, network, folder)

    def _say_problem(self, exc: BaseException, network: str, folder: str) -> None:
        """The one sentence of why: under the network, under the folder, or in the status line."""
        if isinstance(exc, NetworkError):
            self.network_found.setText(f"<b>{html.escape(network_problem(exc, network))}</b>")
        elif isinstance(exc, DatasetNotFoundError | DatasetContentError):
            self.folder_found.setText(f"<b>{html.escape(folder_problem(exc, folder))}</b>")
        elif self._stage.method:  # a method's run failed: its settings in words
            self.status.setText(error_in_words(exc, self._stage.method, (ComputationError,)))
        else:
            text = str(exc).strip() or "the computation failed"
            self.status.setText(f"It could not be measured: {text[:1].lower() + text[1:]}")

    def _on_estimate_finished(self) -> None:
        self._estimate_worker = None
        if self._pending:
            self._pending = False
            self._request()

    # ------------------------------------------------------------------ the build

    def out_folder(self) -> Path:
        """Where the build of this network keeps its files (one folder per network file)."""
        estimate = self.last_estimate
        tag = f"-{estimate.sha256[:8]}" if estimate is not None else ""
        return own_tiers_dir() / f"{file_stem(Path(self.network.text().strip()).stem)}{tag}"

    def build(self) -> None:
        """Build the tier in the background (after its estimate)."""
        if self.running or self.last_estimate is None:
            return
        out = self.out_folder()
        self._out, self._failure = out, ""
        self._stage, self._fraction, self._started = zoo.TierStage("network"), 0.0, time.monotonic()
        worker = generator_worker(zoo.observed_build(self.arguments(out, self.extra_settings)))
        network, folder = self.network.text().strip(), self.folder.text().strip()
        worker.yielded.connect(self._on_worker_yielded)
        worker.returned.connect(self._on_worker_returned)
        worker.errored.connect(lambda exc: self._on_worker_errored(exc, network, folder))
        worker.aborted.connect(self._on_worker_aborted)
        worker.finished.connect(self._on_worker_finished)
        self.worker = worker
        self.settings.setEnabled(False)
        self.build_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setValue(0)
        self.status.setText("Starting…")
        worker.start()
        self.running_changed.emit(True)

    def cancel(self) -> None:
        if self.worker is not None:
            self.status.setText("Cancelling: the posterior being trained stops; those finished are kept…")
            self.worker.quit()

    def _on_worker_yielded(self, progress: zoo.TierProgress) -> None:
        stage, record = progress.stage, progress.record
        if record is None:
            self._stage, self._fraction = stage, 0.0
            if stage.kind == "failed":
                self._failure = stage.words
        elif record.total:
            self._fraction = max(self._fraction, min(1.0, record.step / record.total))
        estimate = self.last_estimate
        if stage.kind == "measuring":
            self.progress.setRange(0, 0)  # busy: the measuring is not estimated
        elif estimate is not None:
            self.progress.setRange(0, 1000)
            self.progress.setValue(round(1000 * estimate.done_share(stage, self._fraction)))
        head = tier_stage_words(stage.kind, stage.method, stage.done, stage.count, stage.kept)
        if record is not None and record.total:
            head += f": {record.step:,} of {record.total:,}"
        left = None if estimate is None else estimate.seconds_left(stage, self._fraction,
                                                                      time.monotonic() - self._started)
        self.status.setText(head + ("…" if left is None else f" · {duration_in_words(left)} left"))

    def _made(self) -> str:
        """``"3 posteriors"``: the files the build has made so far."""
        count = len(list(self._out.glob("*.pt"))) if self._out is not None and self._out.is_dir() else 0
        return plural(count, "posterior")

    def _on_worker_returned(self, code: int) -> None:
        self.progress.setRange(0, 1000)
        if code == 0:
            self.progress.setValue(1000)
            group = tiers.tier_words({"zoo": {"tier": zoo.FEATURES_TIER},
                                      "network": {"file": self.network.text().strip()}})
            took = duration_in_words(time.monotonic() - self._started).removeprefix("about ")
            self.status.setText(f"Built {self._made()} after {took}. They are in “Add posterior”, "
                                f"in the group “Same model, every method: {group}”.")
            self.tier_built.emit(self._out)
            return
        why = self._failure or "a method could not be trained"
        self.status.setText(f"Not finished: {why[:1].lower() + why[1:]}. Kept: {self._made()} made so far; Build "
                            "goes on from them.")

    def _on_worker_errored(self, exc: BaseException, network: str, folder: str) -> None:
        self.progress.setRange(0, 1000)
        self.status.setText(f"Not built. Kept: {self._made()} made so far.")
        self._say_problem(exc, network, folder)

    def _on_worker_aborted(self) -> None:
        self.progress.setRange(0, 1000)
        self.status.setText(f"Cancelled. Kept: {self._made()} finished so far; Build goes on from them.")

    def _on_worker_finished(self) -> None:
        self.worker = None
        self.settings.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.build_button.setEnabled(self.last_estimate is not None)
        self.running_changed.emit(False)
