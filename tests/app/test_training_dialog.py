"""The training dialog: methods and settings in words, only the settings that apply, a
measured time estimate before Start, no silent overwrite, runs, cancel, errors, memory."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PySide6.QtCore import QCoreApplication, QSettings, Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QMessageBox, QSpinBox

from app.settings import user_models_dir
from app.views.training import ScientificSpinBox, TrainingDialog
from core.engine.data.idx import read_idx, write_idx
from core.engine.inference import METHODS
from core.engine.naming import METHOD_LABELS
from core.engine.settings_help import has_own_words
from core.engine.store import load_posterior, save_posterior


def run_to_saved(qtbot, dialog, timeout: int = 60_000):
    """Start the dialog's run and wait until it has saved its posterior and stopped; the file."""
    with qtbot.waitSignal(dialog.posterior_saved, timeout=timeout) as saved:
        dialog.start()
    qtbot.waitUntil(lambda: not dialog.running, timeout=timeout)
    return saved.args[0]


@pytest.fixture(autouse=True)
def isolated_settings(qapp, tmp_path):
    """QSettings() in an INI file under tmp_path, as the app names it."""
    before = (QCoreApplication.organizationName(), QCoreApplication.applicationName())
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    # both formats: the dialog writes the app's one data folder through app.settings (native format)
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(tmp_path / "settings"))
    QCoreApplication.setOrganizationName("bayescope")
    QCoreApplication.setApplicationName("bayescope")
    yield
    QCoreApplication.setOrganizationName(before[0])
    QCoreApplication.setApplicationName(before[1])


@pytest.fixture
def tiny_mnist(tmp_path):
    """A 200-image MNIST-layout folder: class 0 bright on the left, class 1 on the right."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200).astype(np.uint8)
    x = rng.integers(0, 60, (200, 28, 28)).astype(np.uint8)
    x[y == 0, :, :14] += 150
    x[y == 1, :, 14:] += 150
    folder = tmp_path / "tiny"
    folder.mkdir()
    write_idx(folder / "train-images-idx3-ubyte.gz", x)
    write_idx(folder / "train-labels-idx1-ubyte.gz", y)
    return folder


@pytest.fixture(scope="module")
def mnist_slice(tmp_path_factory):
    """The first 256 training images of the real MNIST (../shared/data/mnist)."""
    from tests.conftest import SHARED_DATA

    source = SHARED_DATA / "mnist"
    if not (source / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not found at {source}")
    folder = tmp_path_factory.mktemp("mnist-slice")
    write_idx(folder / "train-images-idx3-ubyte.gz", read_idx(source / "train-images-idx3-ubyte.gz")[:256])
    write_idx(folder / "train-labels-idx1-ubyte.gz", read_idx(source / "train-labels-idx1-ubyte.gz")[:256])
    return folder


def make_dialog(qtbot, data_dir=None) -> TrainingDialog:
    dialog = TrainingDialog()
    qtbot.addWidget(dialog)
    if data_dir is not None:
        dialog.data_dir.setText(str(data_dir))
    return dialog


# ----------------------------------------------------------------------------- words and form


def test_methods_are_listed_in_words_with_their_names_as_data(qtbot):
    dialog = make_dialog(qtbot)
    items = {dialog.method.itemData(i): dialog.method.itemText(i) for i in range(dialog.method.count())}
    assert set(items) == set(METHODS)
    assert items["sghmc"] == "SGHMC — stochastic gradient Hamiltonian Monte Carlo"
    assert items["map"] == "MAP — maximum a posteriori"
    for name, text in items.items():
        # The label in words and a description, never the bare internal name.
        assert text.startswith(METHOD_LABELS[name] + " — ") and "_" not in text
    dialog.select_method("dsghmc")
    assert dialog.method_name == "dsghmc" and "Hernández" in dialog.method_about.text()


def test_the_dialog_fits_a_1024_by_680_screen_for_every_method(qtbot):
    """It opened at 1120×700 whatever the screen: on a 1024×680 one its buttons were off it."""
    dialog = make_dialog(qtbot)
    free = dialog.screen().availableGeometry()
    assert dialog.width() <= free.width() and dialog.height() <= free.height()
    for name in METHODS:
        dialog.select_method(name)
        hint = dialog.minimumSizeHint()
        assert hint.width() <= 1024 and hint.height() <= 680, (name, hint)


def test_switching_method_shows_only_its_settings(qtbot):
    dialog = make_dialog(qtbot)
    dialog.select_model("softmax")
    dialog.select_method("sghmc")
    assert {"step_size", "friction", "burn_in_epochs", "num_chains"} <= set(dialog.setting_widgets)
    assert dialog.is_setting_shown("friction")
    # The network's dropout is not used by samplers; the MLP width not by other models.
    assert not dialog.form.isRowVisible(dialog.drop_rate)
    assert not dialog.form.isRowVisible(dialog.hidden)
    dialog.select_model("mlp")
    assert dialog.form.isRowVisible(dialog.hidden)

    dialog.select_method("map")
    assert "friction" not in dialog.setting_widgets and "prior_std" in dialog.setting_widgets
    assert dialog.form.isRowVisible(dialog.drop_rate) and dialog.drop_rate.value() == 0.0
    dialog.drop_rate.setValue(0.2)
    dialog.select_method("mc_dropout")
    assert dialog.drop_rate.minimum() > 0  # MC dropout without dropout is no posterior
    assert dialog.drop_rate.value() == 0.5 and dialog.architecture().drop_rate == 0.5
    dialog.select_method("map")
    assert dialog.drop_rate.value() == 0.2  # each method keeps its own

    # Settings that only matter given another one appear with it.
    dialog.select_method("sgld")
    assert not dialog.is_setting_shown("decay_power") and not dialog.is_setting_shown("rms_decay")
    dialog.set_setting("schedule", "polynomial")
    dialog.set_setting("precondition", True)
    assert dialog.is_setting_shown("decay_power") and dialog.is_setting_shown("rms_decay")
    dialog.select_method("mfvi")
    assert not dialog.is_setting_shown("sampling")  # draws of weights are unused with local reparam.
    dialog.set_setting("local_reparam", False)
    assert dialog.is_setting_shown("sampling")
    combo = dialog.setting_widgets["sampling"]
    assert [combo.itemData(i) for i in range(combo.count())] == ["naive", "paired"]


def test_every_setting_has_a_fitting_widget_and_a_tooltip(qtbot):
    dialog = make_dialog(qtbot)
    for name, method in METHODS.items():
        dialog.select_method(name)
        defaults = method.defaults()
        for key, widget in dialog.setting_widgets.items():
            assert has_own_words(name, key), f"{name}.{key} has no words in core/engine/setting_words.py or method_setting_words.py"
            assert widget.toolTip().strip(), f"{name}.{key} has no tooltip"
            if isinstance(defaults[key], bool):
                assert isinstance(widget, QCheckBox), f"{name}.{key}"
            elif isinstance(defaults[key], str):
                assert isinstance(widget, QComboBox), f"{name}.{key}"
    dialog.select_method("sghmc")
    widgets = dialog.setting_widgets
    assert isinstance(widgets["precondition"], QCheckBox)
    assert isinstance(widgets["num_chains"], QSpinBox) and widgets["num_chains"].text() == "4 chains"
    dialog.set_setting("num_chains", 1)
    assert widgets["num_chains"].text() == "1 chain"
    assert isinstance(widgets["step_size"], ScientificSpinBox)
    assert "Unit:</i> images" in widgets["batch_size"].toolTip()
    init = widgets["init"]
    assert [init.itemData(i) for i in range(init.count())] == ["default", "prior", "overdispersed"]
    assert init.currentText() == "usual initialisation"
    # The form builds the config with typed values.
    dialog.set_setting("precondition", True)
    dialog.set_setting("init", "prior")
    config = dialog.config()
    assert config.precondition is True and config.init == "prior" and config.step_size == 1e-6


def test_scientific_spin_box_types_and_steps_through_decades(qtbot):
    box = ScientificSpinBox(1e-12, 1.0)
    qtbot.addWidget(box)
    box.setValue(1e-6)
    assert box.text() == "1e-6"
    box.stepBy(1)
    assert box.value() == pytest.approx(2e-6)
    box.stepBy(2)
    assert box.value() == pytest.approx(1e-5)
    box.stepBy(-1)
    assert box.value() == pytest.approx(5e-6)
    box.lineEdit().selectAll()
    qtbot.keyClicks(box, "3.5e-7")
    box.interpretText()
    assert box.value() == pytest.approx(3.5e-7)


# ----------------------------------------------------------------------------- estimate


def test_estimate_is_measured_before_start(qtbot, tiny_mnist):
    dialog = make_dialog(qtbot, tiny_mnist)
    dialog.select_method("map")
    dialog.select_model("softmax")
    dialog.set_setting("optimiser", "adam")  # passes of mini-batches (Newton's steps have no epochs)
    dialog.set_setting("epochs", 3)
    dialog.set_setting("batch_size", 32)
    assert dialog.last_estimate is None  # a hidden dialog does not measure
    dialog.show()
    qtbot.waitUntil(lambda: dialog.last_estimate is not None, timeout=60_000)
    estimate = dialog.last_estimate
    # 200 images in batches of 32 → 7 steps per pass, 3 passes.
    assert estimate.num_train == 200 and estimate.steps == 3 * math.ceil(200 / 32)
    assert estimate.seconds_per_step > 0
    assert estimate.seconds == pytest.approx(estimate.steps * estimate.seconds_per_step)
    assert "on this computer" in dialog.estimate.text() and "200 images" in dialog.estimate.text()
    assert not dialog.running and dialog.start_button.isEnabled()
    # A changed setting invalidates the estimate and measures again.
    dialog.set_setting("epochs", 6)
    assert dialog.last_estimate is None and "measuring" in dialog.estimate.text()
    qtbot.waitUntil(lambda: dialog.last_estimate is not None, timeout=60_000)
    assert dialog.last_estimate.steps == 6 * math.ceil(200 / 32)


def test_estimate_waits_for_settings_that_fit_together(qtbot, tiny_mnist):
    dialog = make_dialog(qtbot, tiny_mnist)
    dialog.select_method("sghmc")
    dialog.set_setting("epochs", 2)
    dialog.set_setting("burn_in_epochs", 2)  # must be fewer than the passes
    dialog.show()
    qtbot.waitUntil(lambda: "fit together" in dialog.estimate.text(), timeout=10_000)
    assert "“passes discarded first”" in dialog.estimate.text()
    assert "burn_in_epochs" not in dialog.estimate.text()


# ----------------------------------------------------------------------------- save as


def test_overwriting_asks_and_no_keeps_the_old_file(qtbot, tiny_mnist, monkeypatch):
    asked = []
    answer = [QMessageBox.StandardButton.No]

    def question(parent, title, text, *args):
        asked.append(text)
        return answer[0]

    monkeypatch.setattr("app.views.training.dialog.QMessageBox.question", question)
    old = user_models_dir() / "taken.pt"
    old.write_bytes(b"an earlier posterior")
    dialog = make_dialog(qtbot, tiny_mnist)
    dialog.select_method("map")
    dialog.select_model("softmax")
    dialog.set_setting("epochs", 1)
    dialog.name.setText("taken")
    dialog.start()
    assert len(asked) == 1 and "“taken”" in asked[0]
    assert not dialog.running and old.read_bytes() == b"an earlier posterior"
    assert "another name" in dialog.status.text()

    answer[0] = QMessageBox.StandardButton.Yes
    with qtbot.waitSignal(dialog.posterior_saved, timeout=30_000) as saved:
        dialog.start()
    qtbot.waitUntil(lambda: not dialog.running)
    assert len(asked) == 2 and saved.args[0] == old
    assert load_posterior(old).method == "map"


def test_a_new_name_is_not_asked_about(qtbot, tiny_mnist, monkeypatch):
    monkeypatch.setattr(
        "app.views.training.dialog.QMessageBox.question", lambda *a: pytest.fail("asked without a reason")
    )
    dialog = make_dialog(qtbot, tiny_mnist)
    dialog.select_method("map")
    dialog.select_model("softmax")
    dialog.set_setting("epochs", 1)
    dialog.name.setText("tiny map")
    with qtbot.waitSignal(dialog.posterior_saved, timeout=30_000) as saved:
        dialog.start()
    assert saved.args[0].name == "tiny_map.pt" and saved.args[0].is_file()
    assert load_posterior(saved.args[0]).info["name"] == "tiny map"  # as typed: its column's title
    assert len(dialog._trace_y) >= 1 and dialog.progress.maximum() == 1
    assert "“tiny_map”" in dialog.status.text() and str(user_models_dir()) not in dialog.status.text()
    qtbot.waitUntil(lambda: not dialog.running)


# ----------------------------------------------------------------------------- runs


def test_short_sghmc_run_on_real_mnist_completes(qtbot, mnist_slice):
    dialog = make_dialog(qtbot, mnist_slice)
    dialog.select_method("sghmc")
    dialog.select_model("softmax")
    for key, value in {"num_chains": 2, "epochs": 3, "burn_in_epochs": 1, "thin": 2, "batch_size": 64}.items():
        dialog.set_setting(key, value)
    dialog.set_setting("step_size", 1e-4)
    dialog.name.setText("slice sghmc")
    posterior = load_posterior(run_to_saved(qtbot, dialog, 60_000))
    assert posterior.method == "sghmc" and posterior.arch.name == "softmax"
    assert posterior.arch.drop_rate == 0.0  # samplers never use the network's dropout
    assert posterior.info["training_data"]["images"] == 256
    # 256 images / 64 = 4 steps per pass, 2 passes kept, every 2nd step: 4 draws per chain.
    assert posterior.num_chains == 2 and posterior.num_draws == 4
    assert dialog.trace.getPlotItem().getAxis("left").labelText == "log posterior"


@pytest.mark.parametrize(
    ("method", "settings", "trace"),
    [
        ("mfvi", {"epochs": 2}, "ELBO per image (mean of the steps since the last point)"),
        ("mc_dropout", {"epochs": 2}, "training loss (mean of the steps since the last point)"),
    ],
)
def test_variational_and_dropout_runs_plot_their_trace(qtbot, tiny_mnist, method, settings, trace):
    dialog = make_dialog(qtbot, tiny_mnist)
    dialog.select_method(method)
    dialog.select_model("softmax")
    for key, value in settings.items():
        dialog.set_setting(key, value)
    dialog.name.setText(f"tiny {method}")
    with qtbot.waitSignal(dialog.posterior_saved, timeout=60_000) as saved:
        dialog.start()
    qtbot.waitUntil(lambda: not dialog.running)
    assert dialog.trace.getPlotItem().getAxis("left").labelText == trace
    assert len(dialog._trace_y) >= 1
    assert load_posterior(saved.args[0]).method == method


def test_cancel_saves_nothing(qtbot, tiny_mnist):
    dialog = make_dialog(qtbot, tiny_mnist)
    dialog.select_method("map")
    dialog.select_model("softmax")
    dialog.set_setting("epochs", 1000)
    dialog.name.setText("cancelled")
    saved = []
    dialog.posterior_saved.connect(saved.append)

    def cancel_when_running(record):
        if record.step > 0:
            dialog.cancel()

    dialog.start()
    assert not dialog.settings_panel.isEnabled()  # a run keeps the settings it started with
    dialog._worker.yielded.connect(cancel_when_running)
    qtbot.waitUntil(lambda: not dialog.running, timeout=30_000)
    assert saved == [] and "Cancelled" in dialog.status.text()
    assert dialog.settings_panel.isEnabled() and dialog.start_button.isEnabled()
    assert not (user_models_dir() / "cancelled.pt").exists()


def test_a_missing_data_set_is_explained_in_words(qtbot, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr("app.views.training.run_panel.QMessageBox.critical", lambda *a: shown.append(a[1:3]))
    dialog = make_dialog(qtbot, tmp_path / "empty")
    dialog.download.setChecked(False)
    dialog.start()
    qtbot.waitUntil(lambda: not dialog.running, timeout=10_000)
    (title, message), = shown
    assert title == "Training failed"
    assert "train-images-idx3-ubyte" in message and "download" in message
    assert "Error" not in message and "Traceback" not in message


def test_settings_that_do_not_fit_together_are_refused_in_words(qtbot, monkeypatch):
    shown = []
    monkeypatch.setattr("app.views.training.dialog.QMessageBox.warning", lambda *a: shown.append(a[2]))
    dialog = make_dialog(qtbot)
    dialog.select_method("sghmc")
    dialog.set_setting("friction", 0.05)
    dialog.set_setting("noise_estimate", 0.1)  # must stay below the friction
    dialog.start()
    assert not dialog.running
    assert shown and "“gradient-noise estimate”" in shown[0] and "noise_estimate" not in shown[0]


# ----------------------------------------------------------------------------- memory


def test_fields_survive_a_new_dialog(qtbot, tiny_mnist):
    dialog = make_dialog(qtbot, tiny_mnist)
    dialog.select_method("sgld")
    dialog.select_model("mlp")
    dialog.hidden.setValue(64)
    dialog.seed.setValue(7)
    dialog.download.setChecked(False)
    dialog.name.setText("remembered")
    dialog.set_setting("step_size", 3e-5)
    dialog.set_setting("schedule", "polynomial")
    dialog.set_setting("precondition", True)
    dialog.select_method("map")
    dialog.set_setting("epochs", 4)  # a second method's values are kept too
    dialog.drop_rate.setValue(0.3)
    dialog.select_method("sgld")
    dialog.close()

    again = make_dialog(qtbot)
    assert again.method_name == "sgld" and again.model_name == "mlp"
    assert again.hidden.value() == 64 and again.seed.value() == 7
    assert again.data_dir.text() == str(tiny_mnist) and not again.download.isChecked()
    assert again.name.text() == "remembered"
    values = again.setting_values()
    assert values["step_size"] == pytest.approx(3e-5)
    assert values["schedule"] == "polynomial" and values["precondition"] is True
    assert again.is_setting_shown("decay_power")
    again.select_method("map")
    assert again.setting_values()["epochs"] == 4 and again.drop_rate.value() == 0.3


# ----------------------------------------------------------------------------- words (issue 21)


@pytest.mark.parametrize("method, key, advice", [
    ("mc_dropout", "length_scale", "Leave it at the default unless"),
    ("mc_dropout", "tau", "Lower it if the posterior is too sure"),
    ("sgld", "thin", "1 keeps every step"),
    ("sgld", "temperature", "Leave it at 1 unless"),
    ("sgld", "memory_budget_mb", "each draw is one copy of all the"),
    ("sgld", "on_budget", "the run ends with fewer draws than planned"),
])
def test_the_settings_a_new_user_asked_about_say_what_to_do(qtbot, method, key, advice):
    dialog = make_dialog(qtbot)
    dialog.select_method(method)
    assert advice in dialog.setting_widgets[key].toolTip()


def test_the_trace_says_why_it_is_a_loss_a_log_posterior_or_an_elbo(qtbot):
    dialog = make_dialog(qtbot)
    for method in METHODS:
        dialog.select_method(method)
        assert dialog.trace_about.text(), method
    dialog.select_method("sgld")
    assert "<b>log posterior</b>" in dialog.trace_about.text() and "does not minimise a loss" in dialog.trace_about.text()
    dialog.select_method("mc_dropout")
    assert "<b>training loss</b>" in dialog.trace_about.text() and "MC dropout" in dialog.trace_about.text()
    dialog.select_method("laplace")
    assert "<b>training loss</b>" in dialog.trace_about.text() and "Laplace measures" in dialog.trace_about.text()
    dialog.select_method("mfvi")
    assert "<b>ELBO</b>" in dialog.trace_about.text()


# ----------------------------------------------------------------------------- in the background


def test_closing_the_dialog_leaves_the_run_going_in_the_status_bar(qtbot, monkeypatch):
    """A fake quick fit, held halfway until the dialog has been closed and opened again."""
    import threading

    from app.main import MainWindow
    from core.engine.inference.base import ProgressRecord
    from core.engine.resources import resources_dir
    from core.engine.store import save_posterior

    halfway = threading.Event()

    def quick_fit(method, arch, config, data_dir, download, seed, out, name="", start=None, start_source=None,
                  device=None):
        for step in range(1, 11):
            yield ProgressRecord(step, 10, {"log_posterior": -10.0 + step}, phase="sampling")
            if step == 4:
                assert halfway.wait(30), "the test never let the run go on"
        posterior = load_posterior(resources_dir() / "models" / "paper_softmax_map.pt")
        posterior.info["name"] = name
        return save_posterior(posterior, out)

    monkeypatch.setattr("app.views.training.runs.training_run", quick_fit)
    monkeypatch.setattr("app.views.training.dialog.QMessageBox.question", lambda *a: pytest.fail("asked"))
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.show_training_dialog()
    dialog, indicator = window.training_dialog, window.training_indicator
    dialog.select_method("sgld")
    dialog.name.setText("background run")
    assert not indicator.isVisible()
    dialog.start()
    assert dialog.close_button.text() == "Run in background"
    qtbot.waitUntil(lambda: dialog.progress.value() == 4)
    dialog.close()
    assert dialog.isHidden() and dialog.running  # closed, not cancelled
    assert indicator.isVisible() and indicator.label.text() == "Training SGLD… 40 %"
    assert indicator.bar.value() == 4 and indicator.bar.maximum() == 10 and not indicator.bar.isTextVisible()
    assert indicator.toolTip()

    qtbot.mouseClick(indicator, Qt.MouseButton.LeftButton)
    assert dialog.isVisible() and dialog.running
    dialog.close_button.click()  # “Run in background”
    assert dialog.isHidden() and dialog.running

    halfway.set()
    qtbot.waitUntil(lambda: not dialog.running, timeout=30_000)
    key = str((user_models_dir() / "background_run.pt").resolve())
    assert key in window.workspace.column_keys()
    assert "background run: MAP" in window.column_views[key].title.text()
    assert not indicator.isVisible() and dialog.close_button.text() == "Close"
    assert "background_run" in window.statusBar().currentMessage()


def test_quitting_during_a_run_asks_and_cancels_it(qtbot, monkeypatch):
    import threading

    from app.main import MainWindow
    from core.engine.inference.base import ProgressRecord

    release = threading.Event()

    def endless_fit(*args, **kwargs):
        step = 0
        while not release.is_set():
            step += 1
            yield ProgressRecord(step, 0, {}, phase="train")
            release.wait(0.01)
        return None

    asked = []
    answer = [QMessageBox.StandardButton.No]
    monkeypatch.setattr("app.views.training.runs.training_run", endless_fit)
    monkeypatch.setattr("app.views.training.dialog.QMessageBox.question",
                        lambda parent, title, text, *a: asked.append(text) or answer[0])
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.show_training_dialog()
    dialog = window.training_dialog
    dialog.select_method("map")
    dialog.name.setText("endless")
    dialog.start()
    dialog.close()
    try:
        assert not window.close() and window.isVisible() and dialog.running  # No: the run goes on
        assert "nothing of it is saved" in asked[0]
        answer[0] = QMessageBox.StandardButton.Yes
        assert window.close()
        qtbot.waitUntil(lambda: not dialog.running, timeout=30_000)
        assert "Cancelled" in dialog.status.text()
    finally:
        release.set()


def test_laplace_starts_from_a_saved_map_posterior_or_refuses_one_that_cannot(qtbot, tiny_mnist, tmp_path,
                                                                              monkeypatch):
    """Laplace and SWAG could start from a saved MAP posterior on the command line only."""
    from core.engine.data.datasets import load_split
    from core.engine.files import file_sha256
    from core.engine.inference.map import MapConfig
    from core.engine.inference.map import fit as fit_map
    from core.engine.models import ArchSpec
    from core.engine.resources import resources_dir
    from core.engine.runner import drain

    dialog = make_dialog(qtbot, tiny_mnist)
    dialog.select_method("sghmc")
    assert not dialog.form.isRowVisible(dialog.start_from)  # only for methods that start from best weights
    dialog.select_method("laplace")
    assert dialog.form.isRowVisible(dialog.start_from) and dialog.start_path is None
    assert dialog.form.isRowVisible(dialog.model)

    train = load_split("mnist", "train", root=tiny_mnist)
    best = drain(fit_map(MapConfig(epochs=2, batch_size=50), ArchSpec("softmax"), train, 1))
    start_file = save_posterior(best, tmp_path / "best.pt")
    dialog.select_model("mlp")  # the saved start's network wins over the form's
    dialog.set_start_file(start_file)
    assert dialog.start_path == str(start_file)
    assert not dialog.form.isRowVisible(dialog.model) and not dialog.form.isRowVisible(dialog.hidden)
    assert not dialog.is_setting_shown("epochs") and dialog.is_setting_shown("structure")  # no training phase
    assert "not measured" in dialog.estimate.text() or dialog.last_estimate is None
    dialog.set_setting("structure", "diag")
    dialog.name.setText("from saved best weights")
    posterior = load_posterior(run_to_saved(qtbot, dialog, 60_000))
    assert posterior.method == "laplace" and posterior.arch.name == "softmax"
    assert posterior.info["started_from"] == {"method": "map", "file": str(start_file.absolute()),
                                              "file_sha256": file_sha256(start_file)}

    # a sampled posterior is not one set of best weights: refused in words, nothing runs
    warned: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text: warned.append(text))
    dialog.set_start_file(resources_dir() / "models" / "network_lenet5_sghmc.pt")
    dialog.start()
    assert not dialog.running and warned and "one set of best weights" in warned[0]
    assert "Error" not in warned[0] and "/" not in warned[0].split(":", 1)[1]



def test_every_phase_of_a_sampler_moving_by_the_curvature_reads_in_words():
    """The phases a run shows in the dialog's status line: SGLD with ``metric=kron`` finds a mode,
    measures the curvature there, burns in and samples; each has words, none its code name."""
    import torch

    from core.engine.inference import sgld
    from core.engine.inference.base import Dataset
    from core.engine.models import ArchSpec
    from core.engine.runner import drain
    from core.engine.training_words import PHASE_WORDS

    gen = torch.Generator().manual_seed(0)
    data = Dataset(torch.rand(64, 1, 28, 28, generator=gen), torch.randint(0, 10, (64,), generator=gen), "toy")
    config = sgld.SgldConfig(num_chains=2, epochs=2, batch_size=1, burn_in_epochs=1, thin=8, metric="kron")
    phases: set[str] = set()
    drain(sgld.fit(config, ArchSpec("lenet5", num_classes=10), data, 0), lambda record: phases.add(record.phase))
    assert phases == {"finding the mode", "curvature at the mode", "burn-in", "sampling"}
    assert phases <= set(PHASE_WORDS)


def test_a_data_set_not_found_or_not_downloaded_is_said_without_paths_or_file_names():
    """The rarer ways the training set is not there (a folder without MNIST's files, a failed
    download) are said in words a person can act on: no path, no IDX file name, no URL."""
    from core.engine.data.datasets import DatasetDownloadError, DatasetNotFoundError
    from core.engine.training_words import error_in_words

    folder = "/home/someone/data/mnist"
    cases = {
        DatasetNotFoundError(f"mnist train split not found: looked for ['train-images-idx3-ubyte'] in {folder}"):
            "not found in the data folder",
        DatasetDownloadError("could not download train-images-idx3-ubyte.gz for 'mnist': "
                             "https://example.org/mnist/train-images-idx3-ubyte.gz: timed out"): "could not be downloaded",
    }
    for exc, words in cases.items():
        text = error_in_words(exc, "sgld")
        assert words in text
        assert "internet" in text or "download box" in text  # what to do about it
        assert "/" not in text and "idx" not in text.lower() and "Details" not in text and "Error" not in text


def test_a_sampler_that_ran_away_is_said_by_its_chain_and_step():
    """A divergence names the run's chain and the step in words, and what to change, without the
    log posterior's numbers or the exception's name."""
    from core.engine.inference.sampling import SamplerDivergedError
    from core.engine.training_words import error_in_words

    exc = SamplerDivergedError("the log posterior of chain 3 fell from -9.4e+04 to -3.91e+11 at step 1200: "
                               "the chain diverged; lower the step size", (3,), 1200)
    text = error_in_words(exc, "sghmc")
    assert text.startswith("Training went out of bounds: chain 3 of the sampler ran away at step 1,200")
    assert "A smaller step size usually helps." in text
    assert "e+" not in text and "log posterior" not in text and "Error" not in text


def test_cancel_run_stays_where_it_was_when_a_run_starts(qtbot):
    """The close button becomes “Run in background” during a run; no button moves, so a click
    aimed at Cancel run before the run started lands on it after (issue 47, item 3)."""
    from PySide6.QtCore import QPoint

    from core.engine.inference.base import ProgressRecord

    dialog = make_dialog(qtbot)
    dialog.show()
    qtbot.waitExposed(dialog)

    def where(button):
        return button.mapTo(dialog, QPoint(0, 0)), button.size()

    before = {b.text(): where(b) for b in (dialog.start_button, dialog.cancel_button, dialog.close_button)}

    def endless():
        step = 0
        while True:
            step += 1
            yield ProgressRecord(step, 0, {}, phase="train")

    dialog.run.begin(endless(), "map", 0)
    try:
        QCoreApplication.processEvents()
        assert dialog.close_button.text() == "Run in background"
        assert where(dialog.cancel_button) == before["Cancel run"]
        assert where(dialog.start_button) == before["Start"]
        assert where(dialog.close_button) == before["Close"]
    finally:
        with qtbot.waitSignal(dialog.run_finished, timeout=10_000):
            dialog.cancel()
