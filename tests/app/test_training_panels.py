"""The training dialog's panels, each alone: a value put in shows in its widgets and comes back
out the same (model → widget → model), and what a panel says or refuses comes from the method
registry and the run it binds. The composed dialog: test_training_dialog.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QMessageBox, QWidget

from app.views.training import memory
from app.views.training.estimate_panel import EstimatePanel, EstimatePlan
from app.views.training.images_panel import ImagesPanel
from app.views.training.method_panel import BEST_WEIGHTS_SETTINGS, MethodPanel
from app.views.training.network_panel import LEAST_PREDICTIVE_DROP_RATE, NetworkPanel
from app.views.training.run_panel import RunPanel
from core.engine.inference import METHODS
from core.engine.inference.base import ProgressRecord
from core.engine.models import ArchSpec
from core.engine.training_words import trace_words
from tests.app.test_training_dialog import isolated_settings, tiny_mnist  # noqa: F401 (fixtures)

DROPOUT = [m for m, method in METHODS.items() if method.uses_model_dropout]
NO_DROPOUT = [m for m, method in METHODS.items() if not method.uses_model_dropout]
STARTS_FROM_WEIGHTS = [m for m, method in METHODS.items() if method.fit_from is not None]


def _host(qtbot) -> tuple[QWidget, QFormLayout]:
    """A widget holding a form, as the dialog holds its panels' rows."""
    host = QWidget()
    qtbot.addWidget(host)
    form = QFormLayout(host)
    return host, form


class TestMethodPanel:
    @pytest.mark.parametrize("name", list(METHODS))
    def test_a_method_s_defaults_show_and_read_back_unchanged(self, qtbot, name):
        panel = MethodPanel()
        panel.select_method(name)
        assert panel.method_name == name and set(panel.setting_widgets) == set(METHODS[name].defaults())
        values = panel.setting_values()
        for key, default in METHODS[name].defaults().items():
            assert values[key] == pytest.approx(default) if isinstance(default, float) else values[key] == default, key
        assert panel.config() == METHODS[name].make_config()

    def test_typed_values_round_trip_and_survive_another_method(self, qtbot):
        panel = MethodPanel()
        changed: list[str] = []
        panel.method_changed.connect(lambda: changed.append(panel.method_name))
        panel.select_method("sghmc")
        typed = {"step_size": 3e-5, "num_chains": 2, "precondition": True, "init": "prior"}
        for key, value in typed.items():
            panel.set_setting(key, value)
        assert isinstance(panel.setting_widgets["precondition"], QCheckBox)
        assert isinstance(panel.setting_widgets["init"], QComboBox)
        assert {k: panel.setting_values()[k] for k in typed} == pytest.approx(typed)
        config = panel.config()
        assert (config.step_size, config.num_chains, config.precondition, config.init) == (3e-5, 2, True, "prior")
        panel.select_method("map")
        assert "friction" not in panel.setting_widgets
        panel.select_method("sghmc")
        assert {k: panel.setting_values()[k] for k in typed} == pytest.approx(typed)
        assert changed == ["sghmc", "map", "sghmc"]  # once per choice
        assert "Chen, Fox & Guestrin" in panel.method_about.text()

    def test_a_setting_shows_only_when_the_one_it_depends_on_has_its_value(self, qtbot):
        panel = MethodPanel()
        panel.select_method("sgld")
        assert not panel.is_setting_shown("decay_power")
        panel.set_setting("schedule", "polynomial")
        assert panel.is_setting_shown("decay_power")

    @pytest.mark.parametrize("name", STARTS_FROM_WEIGHTS)
    def test_a_saved_start_hides_the_best_weights_training(self, qtbot, name):
        panel = MethodPanel()
        panel.select_method(name)
        shown = [k for k in BEST_WEIGHTS_SETTINGS if k in panel.setting_widgets]
        assert shown and all(panel.is_setting_shown(k) for k in shown)
        panel.show_best_weights_given(True)
        assert not any(panel.is_setting_shown(k) for k in shown)
        panel.show_best_weights_given(False)
        assert all(panel.is_setting_shown(k) for k in shown)


class TestNetworkPanel:
    def test_each_method_keeps_its_own_drop_rate_from_the_registry_default(self, qtbot):
        host, form = _host(qtbot)
        panel = NetworkPanel(host, form)
        panel.add_rows(form)
        first, second = DROPOUT[0], DROPOUT[1]
        panel.show_for_method(first)
        assert panel.drop_rate.value() == pytest.approx(METHODS[first].default_drop_rate)
        panel.drop_rate.setValue(0.3)
        panel.show_for_method(second)
        assert panel.drop_rate.value() == pytest.approx(METHODS[second].default_drop_rate)
        panel.show_for_method(first)
        assert panel.drop_rate.value() == pytest.approx(0.3) and panel.drop_rate_for(first) == pytest.approx(0.3)
        assert panel.drop_rates[second] == pytest.approx(METHODS[second].default_drop_rate)

    @pytest.mark.parametrize("name", list(METHODS))
    def test_the_dropout_row_and_its_floor_follow_the_registry(self, qtbot, name):
        host, form = _host(qtbot)
        panel = NetworkPanel(host, form)
        panel.add_start_row(form)
        panel.add_rows(form)
        panel.show_for_method(name)
        method = METHODS[name]
        assert form.isRowVisible(panel.drop_rate) == method.uses_model_dropout
        assert form.isRowVisible(panel.start_from) == (method.fit_from is not None)
        assert panel.drop_rate.minimum() == (LEAST_PREDICTIVE_DROP_RATE if method.needs_dropout else 0.0)
        if not method.uses_model_dropout:
            panel.drop_rate.setValue(0.4)
            assert panel.drop_rate_for(name) == 0.0  # the network's dropout stays off in its training

    def test_model_width_and_start_round_trip(self, qtbot, tmp_path):
        host, form = _host(qtbot)
        panel = NetworkPanel(host, form)
        panel.add_start_row(form)
        panel.add_rows(form)
        panel.show_for_method(DROPOUT[0])
        panel.select_model("mlp")
        panel.hidden.setValue(64)
        panel.drop_rate.setValue(0.25)
        assert form.isRowVisible(panel.hidden)
        assert panel.architecture(DROPOUT[0], False, None, None) == ArchSpec("mlp", drop_rate=0.25, hidden=64)
        panel.select_model("softmax")
        assert not form.isRowVisible(panel.hidden) and panel.model_name == "softmax"
        assert panel.start_path is None  # a method without a saved start has none
        panel.show_for_method(STARTS_FROM_WEIGHTS[0])
        start = tmp_path / "best.pt"
        panel.set_start_file(start)
        assert panel.start_path == str(start) and panel.start_from.currentText() == "best.pt"
        assert not form.isRowVisible(panel.model)  # the saved start brings its own network
        with pytest.raises(ValueError, match="has not been read yet"):
            panel.architecture(DROPOUT[0], True, None, None)


def _tinted_folder(root: Path, count: int = 4) -> Path:
    rng = np.random.default_rng(0)
    for name, channel in (("blue", 2), ("red", 0)):
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 80, (32, 32, 3)).astype(np.uint8)
            pixels[..., channel] += 150
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


class TestImagesPanel:
    def _panel(self, qtbot) -> tuple[ImagesPanel, QFormLayout]:
        host, form = _host(qtbot)
        panel = ImagesPanel(host, form)
        panel.add_rows(form)
        panel.connect_fields()
        return panel, form

    def test_a_folder_chosen_is_read_and_counted_and_mnist_chosen_again(self, qtbot, tmp_path, tiny_mnist):  # noqa: F811
        panel, form = self._panel(qtbot)
        changed: list[bool] = []
        panel.changed.connect(lambda: changed.append(panel.uses_folder))
        folder = _tinted_folder(tmp_path / "tints")
        panel.choose_images_folder(folder)
        assert panel.uses_folder and panel.images_folder.text() == str(folder) and panel.reading_folder
        assert form.isRowVisible(panel.images_row) and not form.isRowVisible(panel.data_row)
        qtbot.waitUntil(lambda: not panel.reading_folder, timeout=20_000)
        data = panel.folder_data
        assert data.train.class_names == ("blue", "red") and changed and changed[-1] is True
        assert panel.estimate_images() == (len(data.train), "your") and panel.test_images == len(data.test) > 0
        assert "Found 8 colour images in 2 classes" in panel.folder_found.text()

        panel.choose_images_folder(None)
        assert not panel.uses_folder and form.isRowVisible(panel.data_row) and panel.test_images == 0
        panel.data_dir.setText(str(tiny_mnist))
        assert panel.estimate_images() == (200, "")  # MNIST's images as found there
        assert "200 training images" in panel.data_found.text()

    def test_mnist_missing_offers_the_download_and_assumes_its_size(self, qtbot, tmp_path, monkeypatch):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing in the user cache either
        panel, _ = self._panel(qtbot)
        panel.data_dir.setText(str(tmp_path / "empty"))
        if panel.estimate_images()[1] != "assumed":
            pytest.skip("MNIST lies in this machine's user cache")
        assert panel.estimate_images() == (60_000, "assumed")
        assert not panel.download.isHidden()

    def test_a_folder_that_cannot_train_says_why_and_holds_no_data(self, qtbot, tmp_path):
        panel, _ = self._panel(qtbot)
        panel.choose_images_folder(tmp_path / "nowhere")
        qtbot.waitUntil(lambda: not panel.reading_folder, timeout=20_000)
        assert panel.folder_data is None and panel.folder_problem and str(tmp_path) not in panel.folder_problem
        assert panel.folder_problem in panel.folder_found.text()


class TestEstimatePanel:
    def test_a_plan_is_measured_and_a_sentence_is_shown_as_it_is(self, qtbot):
        host = QWidget()
        qtbot.addWidget(host)
        plans: list[EstimatePlan | str] = ["Estimated time: not now."]
        blocked = [False]
        panel = EstimatePanel(host, lambda: plans[0], lambda: blocked[0])
        panel.request()
        assert panel.last_estimate is None and "measuring" in panel.estimate.text()
        host.show()
        panel.request()
        qtbot.waitUntil(lambda: panel.estimate.text() == "Estimated time: not now.", timeout=5_000)
        config = METHODS["map"].make_config(epochs=2, batch_size=32, optimiser="adam")  # Newton's has no epochs
        plans[0] = EstimatePlan("map", config, ArchSpec("softmax"), 100, "your")
        panel.request()
        qtbot.waitUntil(lambda: panel.last_estimate is not None, timeout=60_000)
        assert panel.last_estimate.steps == 2 * math.ceil(100 / 32) and panel.last_estimate.num_train == 100
        assert "over your 100 images" in panel.estimate.text()
        blocked[0] = True  # a run going: nothing is measured, the last words stay
        panel.request()
        assert panel.last_estimate is not None and "measuring" not in panel.estimate.text()


class TestRunPanel:
    def _panel(self, qtbot) -> RunPanel:
        host, form = _host(qtbot)
        panel = RunPanel(host)
        panel.add_rows(form)
        return panel

    def test_a_run_s_records_fill_the_trace_and_its_file_is_said_by_name(self, qtbot, tmp_path):
        panel = self._panel(qtbot)
        out = tmp_path / "tiny.pt"

        def run():
            for step, loss in enumerate((2.0, 1.5, 1.2), 1):
                yield ProgressRecord(step, 3, {"loss": loss}, phase="train")
            out.write_bytes(b"posterior")
            return out

        with qtbot.waitSignal(panel.run_finished, timeout=10_000), \
                qtbot.waitSignal(panel.posterior_saved, timeout=10_000) as saved:
            panel.begin(run(), "map", 0)
            assert panel.running and not panel.start_button.isEnabled() and panel.cancel_button.isEnabled()
        assert saved.args == [out] and not panel.running
        assert panel.trace_y == [2.0, 1.5, 1.2] and panel.trace_x == [1, 2, 3]
        assert panel.trace.getPlotItem().getAxis("left").labelText == "training loss (mean of the steps since the last point)"
        assert panel.progress.maximum() == 1 and "Saved as “tiny”" in panel.status.text()
        assert panel.close_button.text() == "Close"
        # where the file is, with a link that opens its folder (issue 47, item 10)
        where = panel.saved_where.text()
        assert panel.saved_where.isVisibleTo(panel.saved_where.parentWidget() or panel.saved_where)
        assert "tiny.pt" in where and str(tmp_path) in where and "Open the folder" in where
        assert QUrl.fromLocalFile(str(tmp_path)).toString() in where

    def test_a_new_run_starts_on_a_clear_trace(self, qtbot, tmp_path):
        """The old run's points, axis label and x range go when a new run starts (issue 47, item 11)."""
        import threading

        panel = self._panel(qtbot)
        out = tmp_path / "tiny.pt"

        def long_run():
            for step in range(50, 5001, 50):
                yield ProgressRecord(step, 5000, {"elbo": -step / 1000}, phase="train")
            out.write_bytes(b"posterior")
            return out

        with qtbot.waitSignal(panel.run_finished, timeout=10_000):
            panel.begin(long_run(), "mfvi", 0)
        item = panel.trace.getPlotItem()
        item.setXRange(4000, 5000)  # zoomed in by hand, which turns auto-range off
        assert max(item.viewRange()[0]) >= 4000
        go_on = threading.Event()

        def short_run():
            yield ProgressRecord(0, 0, {}, phase="loading data")
            go_on.wait(10)
            out.write_bytes(b"posterior")
            return out

        panel.begin(short_run(), "map", 0)
        try:
            assert panel.trace_x == [] and panel.trace_y == []
            xs, _ = panel.curve.getData()
            assert xs is None or len(xs) == 0
            assert item.getAxis("left").labelText == ""
            assert max(item.viewRange()[0]) < 100  # not the old run's 5,000 steps
        finally:
            with qtbot.waitSignal(panel.run_finished, timeout=10_000):
                go_on.set()
        panel.begin(long_run(), "mfvi", 0)  # the new run's points re-range the axes by themselves
        qtbot.waitUntil(lambda: not panel.running, timeout=10_000)
        panel.trace.getViewBox().updateAutoRange()
        assert max(panel.trace.getPlotItem().viewRange()[0]) >= 5000

    def test_the_time_left_starts_from_the_estimate_and_blends_in_the_run_s_pace(self, qtbot, tmp_path):
        """The dialog said about 20 seconds: the progress line's first time left says the same,
        not nothing and not the pace of a slow first step (issue 47, item 10)."""
        import threading

        from core.engine.training_plan import TrainingEstimate

        panel = self._panel(qtbot)
        go_on = threading.Event()
        out = tmp_path / "tiny.pt"

        def run():
            yield ProgressRecord(1, 101, {"loss": 1.0}, phase="train")
            go_on.wait(10)
            out.write_bytes(b"posterior")
            return out

        estimate = TrainingEstimate(seconds=20.2, steps=101, seconds_per_step=0.2, num_train=1000)
        panel.begin(run(), "map", 0, estimate=estimate)
        try:
            qtbot.waitUntil(lambda: "step 1 of 101" in panel.status.text(), timeout=10_000)
            assert "about 20 seconds left" in panel.status.text()
        finally:
            with qtbot.waitSignal(panel.run_finished, timeout=10_000):
                go_on.set()

    def test_a_failed_run_is_said_in_words_and_a_cancelled_one_saves_nothing(self, qtbot, monkeypatch):
        panel = self._panel(qtbot)
        shown: list[str] = []
        monkeypatch.setattr(QMessageBox, "critical", lambda parent, title, text: shown.append(text))

        def failing():
            yield ProgressRecord(0, 0, {}, phase="train")
            raise MemoryError

        with qtbot.waitSignal(panel.run_finished, timeout=10_000):
            panel.begin(failing(), "map", 0)
        assert "ran out of memory" in shown[0] and panel.status.text() == "Training failed; nothing was saved."

        def endless():
            step = 0
            while True:
                step += 1
                yield ProgressRecord(step, 0, {}, phase="train")

        panel.begin(endless(), "map", 0)
        assert panel.run_words(0, 0) == f"Training {METHODS['map'].label}…"
        with qtbot.waitSignal(panel.run_finished, timeout=10_000):
            panel.cancel()
        assert "Cancelled" in panel.status.text()

    @pytest.mark.parametrize(("share", "near"), [(0.5, True), (0.95, False)])
    def test_a_result_near_chance_says_so_and_what_to_try(self, qtbot, tmp_path, share, near):
        panel = self._panel(qtbot)
        out = tmp_path / "tiny.pt"

        def run():
            yield ProgressRecord(1, 1, {"loss": 0.7}, phase="train")
            yield ProgressRecord(24, 24, {"accuracy": share}, phase="eval")
            out.write_bytes(b"posterior")
            return out

        with qtbot.waitSignal(panel.run_finished, timeout=10_000):
            panel.begin(run(), "map", 24, num_classes=2)
        said = panel.status.text()
        assert f"right class of {round(share * 24)} of the 24 images kept aside" in said
        assert ("hardly better than guessing, which gets 1 in 2 right" in said) is near
        assert ("more passes (epochs)" in said) is near

    def test_the_name_is_the_file_and_an_existing_one_is_replaced_only_when_agreed(self, qtbot, monkeypatch):
        panel = self._panel(qtbot)
        panel.name.setText("two words")
        out = panel.output_path()
        assert out.name == "two_words.pt"
        assert panel.confirm_output() == out  # nothing there: nothing asked
        out.write_bytes(b"an earlier posterior")
        answers = [QMessageBox.StandardButton.No]
        monkeypatch.setattr(QMessageBox, "question", lambda *a: answers[0])
        assert panel.confirm_output() is None and "another name" in panel.status.text()
        answers[0] = QMessageBox.StandardButton.Yes
        assert panel.confirm_output() == out


class TestMemory:
    def _panels(self, qtbot) -> tuple[MethodPanel, NetworkPanel, ImagesPanel, RunPanel]:
        host, form = _host(qtbot)
        method = MethodPanel(host)
        network, images, run = NetworkPanel(host, form), ImagesPanel(host, form), RunPanel(host)
        method.method_changed.connect(lambda: network.show_for_method(method.method_name))
        return method, network, images, run

    def test_every_field_saved_is_shown_again(self, qtbot, tmp_path):
        method, network, images, run = self._panels(qtbot)
        memory.load(method, network, images, run)
        method.select_method("sgld")
        method.set_setting("step_size", 4e-5)
        method.set_setting("schedule", "polynomial")
        method.select_method(DROPOUT[0])
        network.drop_rate.setValue(0.35)
        network.select_model("lenet")
        network.hidden.setValue(32)
        run.seed.setValue(11)
        run.name.setText("kept")
        images.images_folder.setText(str(tmp_path / "mine"))
        images.image_size.setCurrentIndex(images.image_size.findData(64))
        images.data_dir.setText(str(tmp_path))
        memory.save(method, network, images, run)

        again = self._panels(qtbot)
        memory.load(*again)
        method2, network2, images2, run2 = again
        assert method2.method_name == DROPOUT[0] and network2.drop_rate.value() == pytest.approx(0.35)
        assert (network2.model_name, network2.hidden.value(), run2.seed.value(), run2.name.text()) == (
            "lenet", 32, 11, "kept")
        assert images2.images_folder.text() == str(tmp_path / "mine") and images2.image_size.currentData() == 64
        assert images2.data_dir.text() == str(tmp_path)  # the app's one data folder, set from here
        method2.select_method("sgld")
        assert method2.setting_values()["step_size"] == pytest.approx(4e-5)
        assert method2.setting_values()["schedule"] == "polynomial"

    def test_an_unknown_stored_method_opens_the_registry_s_default(self, qtbot):
        from app import settings as app_settings
        from core.engine.inference import DEFAULT_METHOD

        app_settings.settings().setValue(f"{memory.GROUP}/method", "a method no longer there")
        method, network, images, run = self._panels(qtbot)
        memory.load(method, network, images, run)
        assert method.method_name == DEFAULT_METHOD
        assert trace_words(DEFAULT_METHOD)
