"""Train a posterior in the background: a short composer of panels that share one form.

Each panel binds one thing both ways: the method and its settings (:mod:`.method_panel`), the
network (:mod:`.network_panel`), the training images (:mod:`.images_panel`), the estimate
(:mod:`.estimate_panel`) and the run (:mod:`.run_panel`); :mod:`.memory` keeps their fields. This
class lays them out, tells each what the others chose, and checks a run before it starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QCloseEvent, QHideEvent
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QMessageBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import settings as app_settings
from app.views.training import memory
from app.views.training.estimate_panel import EstimatePanel, EstimatePlan
from app.views.training.fields import form_label
from app.views.training.images_panel import ImagesPanel
from app.views.training.method_panel import MethodPanel
from app.views.training.network_panel import NetworkPanel
from app.views.training.own_network_panel import OwnNetworkPanel
from app.views.training.run_panel import RunPanel
from core.engine.data.folder import default_folder_model
from core.engine.models import ArchSpec
from core.engine.settings_help import in_words
from core.engine.store import PosteriorFileError
from core.engine.training_words import folder_refusal, trace_words

#: What the dialog trains: one posterior, or every method on a network of one's own (the pages' order).
POSTERIOR_JOB, OWN_NETWORK_JOB = "posterior", "own-network"
JOBS = (("one posterior: a method on MNIST's digits or on your images", POSTERIOR_JOB),
        ("a network of your own and a folder of images: every method on it", OWN_NETWORK_JOB))
JOB_TIP = ("<p>One posterior: one method trains a network of bayescope's on MNIST or on your images.</p><p>A network "
           "of your own: a classifier you trained elsewhere is split at its last linear layer, and every method "
           "is trained on a head over its features, with HMC as the exact reference; they are compared side by "
           "side.</p>")


class TrainingDialog(QDialog):
    """Choose a method, a model and their settings; train in the background.

    Closing the dialog during a run only hides it: the run goes on in the background (the status
    bar shows a :class:`~app.views.training.indicator.RunIndicator`); Cancel stops it.

    Signals
    -------
    posterior_saved(Path)
        A run finished and its posterior file was written.
    progress_reported(str, int, int)
        A run reported progress: a short line in words (“Training SGLD… 40 %”), the step and the
        steps planned (0 when unknown).
    run_finished
        A run ended: saved, failed or cancelled.
    tier_built(Path)
        Every method was built on a network of one's own (:mod:`.own_network_panel`); the folder of
        their files.
    """

    posterior_saved = Signal(object)
    progress_reported = Signal(str, int, int)
    run_finished = Signal()
    tier_built = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a posterior")
        free = (parent or self).screen().availableGeometry()  # 1120×700, or the free area of a smaller screen
        self.resize(min(1120, free.width()), min(700, free.height()))
        self.form = QFormLayout()
        self.methods = MethodPanel(self)
        self.network = NetworkPanel(self, self.form)
        self.images = ImagesPanel(self, self.form)
        self.run = RunPanel(self)
        self.estimates = EstimatePanel(self, self._estimate_plan, lambda: self.running)
        for add_rows in (self.methods.add_rows, self.network.add_start_row, self.images.add_rows,
                         self.network.add_rows, self.run.add_rows):
            add_rows(self.form)
        # the panels' widgets, by the names the window and its tests use
        m, n, i, r = self.methods, self.network, self.images, self.run
        self.method, self.method_about, self.setting_widgets = m.method, m.method_about, m.setting_widgets
        self.model, self.hidden, self.drop_rate, self.start_from = n.model, n.hidden, n.drop_rate, n.start_from
        self.images_source, self.data_dir, self.data_found = i.images_source, i.data_dir, i.data_found
        self.download, self._data_row = i.download, i.data_row
        self.images_folder, self.folder_found, self.image_size = i.images_folder, i.folder_found, i.image_size
        self._images_row, self._scan_timer = i.images_row, i.reader.timer
        self.seed, self.name, self.progress, self.status = r.seed, r.name, r.progress, r.status
        self.trace, self.curve, self.trace_about, self._trace_y = r.trace, r.curve, r.trace_about, r.trace_y
        self.start_button, self.cancel_button, self.close_button = r.start_button, r.cancel_button, r.close_button
        self.estimate = self.estimates.estimate
        self.select_method, self.set_setting, self.setting_values = m.select_method, m.set_setting, m.setting_values
        self.is_setting_shown, self.config, self.select_model = m.is_setting_shown, m.config, n.select_model
        self.set_start_file, self.choose_images_folder = n.set_start_file, i.choose_images_folder
        self.output_path, self.run_words, self.cancel, self.stop_to_quit = (r.output_path, r.run_words, r.cancel,
                                                                            r.stop_to_quit)
        self._on_browse_clicked = i.browse_data_folder

        # one panel of settings, so that a run can lock what it was started with
        self.settings_panel = QWidget()
        left = QVBoxLayout(self.settings_panel)
        left.setContentsMargins(0, 0, 0, 0)
        left.addLayout(self.form)
        left.addWidget(m.scroll, 1)
        right = QVBoxLayout()
        for widget, stretch in ((r.trace, 1), (r.trace_about, 0), (r.progress, 0), (r.status, 0),
                              (r.saved_where, 0)):
            right.addWidget(widget, stretch)
        columns = QHBoxLayout()
        columns.addWidget(self.settings_panel, 2)
        columns.addLayout(right, 3)
        posterior_page = QWidget()
        page = QVBoxLayout(posterior_page)
        page.setContentsMargins(0, 0, 0, 0)
        page.addLayout(columns, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.estimate, 1)
        bottom.addWidget(r.buttons, 0, Qt.AlignmentFlag.AlignBottom)
        page.addLayout(bottom)
        # the second job: every method on a head over a network of one's own (a features tier)
        self.own_network = OwnNetworkPanel(self)
        self.pages = QStackedWidget()
        self.pages.addWidget(posterior_page)
        self.pages.addWidget(self.own_network)
        self.job = QComboBox()
        for text, job in JOBS:
            self.job.addItem(text, job)
        self.job.setToolTip(JOB_TIP)
        top = QHBoxLayout()
        top.addWidget(form_label("Train", JOB_TIP))
        top.addWidget(self.job, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.pages, 1)
        self.job.currentIndexChanged.connect(self._on_job_changed)
        self.own_network.running_changed.connect(self._on_own_network_running_changed)
        self.own_network.tier_built.connect(self.tier_built)

        memory.load(m, n, i, r)
        m.method_changed.connect(self._on_method_changed)
        m.setting_changed.connect(self.estimates.request)
        n.changed.connect(self._on_network_changed)
        i.changed.connect(self._on_images_changed)
        i.folder_read.connect(self._on_folder_read)
        i.data_dir.textChanged.connect(self.estimates.request)
        r.start_button.clicked.connect(self.start)
        r.close_button.clicked.connect(self.close)
        for signal, relay in ((r.posterior_saved, self.posterior_saved), (r.progress_reported, self.progress_reported)):
            signal.connect(relay)
        r.run_finished.connect(self._on_run_finished)
        self._on_method_changed()
        i.connect_fields()

    # ------------------------------------------------------------------ what the panels bind

    method_name = property(lambda self: self.methods.method_name, doc="The chosen method's registry key.")
    model_name = property(lambda self: self.network.model_name)
    start_path = property(lambda self: self.network.start_path, doc="The saved posterior a run starts from.")
    uses_folder = property(lambda self: self.images.uses_folder)
    folder_data = property(lambda self: self.images.folder_data)
    reading_folder = property(lambda self: self.images.reading_folder)
    last_estimate = property(lambda self: self.estimates.last_estimate)
    running = property(lambda self: self.run.running)
    _worker = property(lambda self: self.run.worker)

    def save_settings(self) -> None:
        memory.save(self.methods, self.network, self.images, self.run)

    def models_offered(self) -> tuple[str, ...]:
        return self.network.models_offered(self.folder_data if self.uses_folder else None)

    def architecture(self) -> ArchSpec:
        return self.network.architecture(self.method_name, self.uses_folder, self.folder_data,
                                         self.images.folder_problem)

    # ------------------------------------------------------------------ what one panel tells the others

    def _fit_steps_to_images(self) -> None:
        """A small folder's defaults: enough steps a pass and in all, said in the status line."""
        if self.running:
            return
        folder = self.folder_data if self.uses_folder else None
        words = self.methods.fit_to_images(len(folder.train) if folder is not None else None)
        if words:
            self.status.setText(words)
        elif self.status.text().startswith("For "):  # said of another folder or method
            self.status.setText("Ready.")

    def _on_method_changed(self) -> None:
        self._fit_steps_to_images()
        self.network.show_for_method(self.method_name)
        self.methods.show_best_weights_given(self.start_path is not None)
        self.trace_about.setText(trace_words(self.method_name))
        self.estimates.request()

    def _on_network_changed(self) -> None:
        self.methods.show_best_weights_given(self.start_path is not None)  # a saved start skips that phase
        self.estimates.request()

    def _on_images_changed(self) -> None:
        self._fit_steps_to_images()
        self.network.offer_models(self.models_offered())
        self._update_start_enabled()
        self.estimates.request()

    def _on_folder_read(self, data: Any) -> None:
        if self.start_path is None:  # the network the command line picks for these images
            self.select_model(default_folder_model(data.channels))
        self._fit_steps_to_images()

    def _update_start_enabled(self) -> None:
        """Start needs images that can train: MNIST (found or to download) or a read folder."""
        ready = not self.uses_folder or self.folder_data is not None
        self.start_button.setEnabled(ready and not self.running)
        self.start_button.setToolTip("Train with these settings in the background." if ready else
                                     "The images folder must be read, and usable, first.")

    def _estimate_plan(self) -> EstimatePlan | str:
        """What the estimate measures, or why it measures nothing now."""
        if self.start_path is not None:  # the measured steps would be the best-weights training it skips
            return "Estimated time: not measured for a run that starts from a saved posterior."
        if self.uses_folder and self.folder_data is None:
            return ("Estimated time: once the images folder has been read." if self.images.folder_problem is None
                    else "Estimated time: none, as these images cannot train a posterior.")
        try:
            arch, config = self.architecture(), self.config()
        except ValueError as exc:
            return f"Estimated time: none until the settings fit together ({in_words(self.method_name, str(exc))})."
        return EstimatePlan(self.method_name, config, arch, *self.images.estimate_images())

    # ------------------------------------------------------------------ a run

    def start(self) -> None:
        """Check the settings, the start and the images in words, ask before replacing a posterior,
        and run in the background."""
        if self.running:
            return
        method = self.method_name
        try:
            arch, config = self.architecture(), self.config()
        except ValueError as exc:
            QMessageBox.warning(self, "These settings do not work together", in_words(method, str(exc)))
            return
        try:
            start, start_source = self.network.checked_start() or (None, None)
        except (PosteriorFileError, ValueError, OSError) as exc:
            QMessageBox.warning(self, "This posterior cannot be a starting point",
                                f"{Path(self.start_path or '').name}: {in_words(method, str(exc))}")
            return
        arch = start.arch if start is not None else arch
        device = app_settings.compute_device()
        if self.uses_folder:
            if self.images.read_again_if_changed():
                self.status.setText("Not started: the images folder changed since it was read; it is being "
                                    "read again. Press Start when it has been.")
                return
            data = self.folder_data
            refusal = (folder_refusal(data, method, arch, config, start, device) if data is not None
                       else self.images.folder_problem or "The images folder has not been read yet.")
            if refusal:
                QMessageBox.warning(self, "These images cannot train this run", refusal)
                return
        out = self.run.confirm_output()
        if out is None:
            return
        self.save_settings()
        self.estimates.stop()
        if self.last_estimate is None:
            self.estimate.setText("Estimated time: not measured, as the run started first.")
        gen = self.images.training_run(method, arch, config, self.seed.value(), out, self.name.text(), start,
                                       start_source, device)
        self.settings_panel.setEnabled(False)
        self.job.setEnabled(False)
        self.run.begin(gen, method, self.images.test_images, arch.num_classes, self.last_estimate)

    def show_own_network(self) -> None:
        """Show the page of a network of one's own."""
        self.job.setCurrentIndex(self.job.findData(OWN_NETWORK_JOB))

    def _on_job_changed(self) -> None:
        self.pages.setCurrentIndex(self.job.currentIndex())
        if self.job.currentData() == POSTERIOR_JOB:
            self.estimates.request()

    def _on_own_network_running_changed(self, running: bool) -> None:
        self.job.setEnabled(not running and not self.running)

    def _on_run_finished(self) -> None:
        self.job.setEnabled(not self.own_network.running)
        self.settings_panel.setEnabled(True)
        self._update_start_enabled()
        if self.last_estimate is None:  # the run interrupted a measurement
            self.estimates.request()
        self.run_finished.emit()

    # ------------------------------------------------------------------ closing

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 (Qt override)
        self.save_settings()
        self.estimates.stop()
        super().hideEvent(event)

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        chosen = app_settings.data_folder()
        if chosen is not None and not self.running:  # chosen in the window since the dialog was made
            self.data_dir.setText(str(chosen))
        if not self.running:
            self.images.read_again_if_changed()  # images added or mended while the dialog was closed
        if not self.running and self.last_estimate is None:
            self.estimates.request_after_current()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt override)
        # A run goes on in the background: closing only hides the dialog (Cancel stops a run).
        self.save_settings()
        self.estimates.stop()
        super().closeEvent(event)
