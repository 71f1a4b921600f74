"""The parts the main window is composed of, each on its own (pytest-qt, offscreen): the
controllers of app/controllers/ and the views split out of the window and the Dataset tab."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QLabel, QMainWindow, QMessageBox, QTabWidget, QWidget

from app.workspace import Workspace
from core.engine.resources import bundled_face_posteriors, resources_dir

MODELS = resources_dir() / "models"
MAP = MODELS / "paper_softmax_map.pt"


@pytest.fixture
def main_window(qtbot) -> QMainWindow:
    window = QMainWindow()
    qtbot.addWidget(window)
    return window


@pytest.fixture
def workspace(main_window) -> Workspace:
    return Workspace(main_window)


class TestColumnsPanel:
    def test_one_widget_per_column_in_order_and_a_note_while_none(self, qtbot, workspace):
        from app.views.columns import ColumnsPanel

        panel = ColumnsPanel()
        qtbot.addWidget(panel)
        panel.show_columns(workspace)
        assert panel.views == {} and not panel.empty_note.isHidden()
        column = workspace.add_posterior(MAP)
        panel.show_columns(workspace)
        assert list(panel.views) == [column.key] and panel.empty_note.isHidden()
        with qtbot.waitSignal(panel.remove_requested) as removed:
            panel.views[column.key].remove_requested.emit(column.key)
        assert removed.args == [column.key]
        workspace.remove(column.key)
        panel.show_columns(workspace)
        assert panel.views == {} and not panel.empty_note.isHidden()


class TestRemovedNote:
    def test_says_what_was_removed_and_offers_undo(self, qtbot):
        from app.views.columns import RemovedNote

        note = RemovedNote()
        qtbot.addWidget(note)
        assert note.isHidden()
        note.show_removed("SGHMC, softmax regression")
        assert note.note.text() == "Removed “SGHMC, softmax regression”" and not note.isHidden()
        with qtbot.waitSignal(note.undo_requested):
            note.undo_button.click()


class TestColumnsBar:
    def test_holds_the_add_menu_draws_and_interval(self, qtbot):
        from PySide6.QtWidgets import QMenu

        from app.views.columns import ColumnsBar

        menu = QMenu()
        bar = ColumnsBar(menu)
        qtbot.addWidget(bar)
        assert bar.add_button.menu() is menu and bar.add_button.text() == "Add posterior"
        assert (bar.samples.value(), bar.level.value(), bar.level.suffix()) == (100, 90, " %")


class TestAddPosteriorMenu:
    def test_offers_the_tabs_posteriors_by_model_and_says_which_are_shown(self, qtbot, main_window, workspace):
        from app.views.add_menu import AddPosteriorMenu

        shown = workspace.add_posterior(MAP)
        tasks = {"digits"}
        menu = AddPosteriorMenu(workspace, lambda: tasks, main_window)
        menu.fill()
        entries = {a.text(): a for a in menu.actions() if a.isCheckable()}
        assert entries and all(".pt" not in text for text in entries)
        checked = [a for a in entries.values() if a.isChecked()]
        assert len(checked) == 1 and not checked[0].isEnabled()  # the one shown cannot be added twice
        other = next(a for a in entries.values() if not a.isChecked())
        with qtbot.waitSignal(menu.posterior_chosen) as chosen:
            other.trigger()
        assert isinstance(chosen.args[0], Path) and str(chosen.args[0].resolve()) != shown.key
        with qtbot.waitSignal(menu.open_requested):
            next(a for a in menu.actions() if a.text() == "Open a posterior file…").trigger()
        tasks.discard("digits")
        tasks.add("faces")  # the Face tab: its face heads only
        menu.fill()
        assert len([a for a in menu.actions() if a.isCheckable()]) == len(bundled_face_posteriors())


class TestInputSide:
    def test_says_what_the_posteriors_see(self, qtbot):
        from app.views.input_side import DIGIT_TIP, FACE_TIP, InputSide

        side = InputSide(lambda name: None)
        qtbot.addWidget(side)
        assert [side.modes.tabText(i) for i in range(side.modes.count())] == ["Draw", "Rotate", "Image", "Face"]
        side.show_seen(None, "", face=False, shown=False)
        assert "will show here" in side.preview_note.text() and side.preview.toolTip() == DIGIT_TIP
        side.show_seen(np.zeros((28, 28), np.float32), "Very faint drawing", face=False, shown=True)
        assert side.preview_note.text() == "The model sees this 28×28 image." and side.warning.text() == "Very faint drawing"
        side.show_seen(None, "", face=True, shown=False)
        assert side.preview.toolTip() == FACE_TIP


class TestSetChooser:
    def test_offers_only_what_the_columns_read_and_says_why(self, qtbot):
        from app.views.dataset_sets import FACE_SET, NOT_FOR_FACES, SetChooser, model_enabled

        parent = QWidget()
        qtbot.addWidget(parent)
        sets = SetChooser(parent)
        sets.offer("digits")
        assert sets.request() == ("mnist-test", "notmnist", None, 30)
        sets.offer("faces")
        enabled = [sets.test_set.itemData(i) for i in range(sets.test_set.count()) if model_enabled(sets.test_set, i)]
        assert enabled == [FACE_SET] and sets.note.text() == NOT_FOR_FACES
        assert sets.request()[:2] == (FACE_SET, None)
        sets.offer("digits")  # the digits' choice comes back
        assert sets.request()[:2] == ("mnist-test", "notmnist")
        sets.set_choice("notmnist", None, 500, 12)
        assert sets.request() == ("notmnist", None, 500, 12)
        sets.set_enabled(False)
        assert not any(w.isEnabled() for w in (sets.test_set, sets.ood_set, sets.images, sets.samples))

    def test_a_folder_without_images_is_refused_in_words(self, qtbot, tmp_path, monkeypatch):
        from PySide6.QtWidgets import QFileDialog

        from app.views.dataset_sets import IMAGES_FOLDER, SetChooser

        parent = QWidget()
        qtbot.addWidget(parent)
        sets = SetChooser(parent)
        (tmp_path / "empty").mkdir()
        monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(tmp_path / "empty"))
        before = sets.test_set.currentIndex()
        with qtbot.waitSignal(sets.refused) as refused:
            sets._on_set_box_activated(sets.test_set, sets.test_set.findData(IMAGES_FOLDER))
        assert refused.args[0].startswith("“empty” holds no images") and str(tmp_path) not in refused.args[0]
        assert sets.test_set.currentIndex() == before


class TestThumbnailPanel:
    def test_a_click_sends_the_image_to_the_workspace(self, qtbot):
        from app.views.thumbnails import ThumbnailPanel

        panel = ThumbnailPanel()
        qtbot.addWidget(panel)
        images = np.random.default_rng(0).random((3, 28, 28)).astype(np.float32)
        panel.show_images("three digits", images, ["a", "b", "c"], ["#0: a", "#1: b", "#2: c"])
        assert panel.grid.count() == 3 and panel.caption.text() == "three digits"
        with qtbot.waitSignal(panel.image_chosen) as chosen:
            panel.choose(1)
        assert np.array_equal(chosen.args[0], images[1]) and chosen.args[1] == "b"


class TestDatasetExports:
    def test_nothing_is_written_without_results(self, qtbot):
        from app.views.dataset_export import DatasetExports

        parent = QWidget()
        qtbot.addWidget(parent)
        status = QLabel("idle")
        exports = DatasetExports(parent, lambda: None, status)
        assert exports.export_view("rejection", Path("never.png")) is False
        assert exports.worker is None and status.text() == "idle"


class TestDeviceController:
    def test_says_where_the_work_runs_and_asks_for_new_predictions(self, qtbot, main_window, workspace):
        from app.controllers.devices import DeviceController

        devices = DeviceController(main_window, workspace)
        devices.set_device("cpu", announce=False)
        assert devices.label.text().startswith("Computing on the CPU")
        with qtbot.waitSignal(devices.device_changed):
            devices.set_device("cpu")
        devices.fill_menu()
        actions = devices.menu.actions()
        assert actions[0].data() == "auto" and [a.data() for a in actions if a.isChecked()] == ["cpu"]


class TestDataController:
    def test_reads_a_set_once_and_forgets_it_when_the_folder_changes(self, qtbot, main_window, monkeypatch,
                                                                     shared_data):
        from app.controllers.data import DataController
        from app.views.modes import RotatePanel

        monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
        data = DataController(main_window)
        panel = RotatePanel(data.load_dataset)
        qtbot.addWidget(panel)
        data.attach(panel)
        first = data.load_dataset("mnist-test")
        assert data.load_dataset("mnist-test") is first
        data.folder_changed()
        assert data.datasets == {}

    def test_an_unreadable_set_is_a_sentence(self, qtbot, main_window, monkeypatch, tmp_path):
        from app.controllers.data import DataController

        monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(tmp_path))
        with pytest.raises(Exception) as raised:
            DataController(main_window).load_dataset("mnist-test")
        assert "MNIST" in str(raised.value)


class TestSweepController:
    def test_no_sweep_without_columns(self, qtbot, main_window, workspace):
        from app.controllers.sweep import SweepController
        from app.views.modes import RotatePanel
        from app.views.sweep import SweepView

        panel, view, tabs = RotatePanel(lambda name: None), SweepView(), QTabWidget()
        for widget in (panel, view, tabs):
            qtbot.addWidget(widget)
        sweeps = SweepController(main_window, workspace, panel, view, tabs)
        assert sweeps.start(np.zeros((28, 28), np.float32), "a blank") is False and sweeps.worker is None
        sweeps.cancel()  # nothing running: nothing said, nothing raised
        assert main_window.statusBar().currentMessage() == ""


class TestExportController:
    def test_nothing_to_export_before_an_input(self, qtbot, main_window, workspace, monkeypatch):
        from app.controllers.export import ExportController

        shown = []
        monkeypatch.setattr(QMessageBox, "information", lambda parent, title, text: shown.append((title, text)))
        exports = ExportController(main_window, workspace)
        column = workspace.add_posterior(MAP)
        assert exports.comparison() is None
        exports.column_plot_dialog(column.key, "interval")
        exports.comparison_dialog()
        assert [title for title, _ in shown] == ["Nothing to export yet", "Nothing to export yet"]
        assert exports.worker is None


class TestJudgingController:
    def test_without_input_the_columns_say_what_to_do(self, qtbot, main_window, workspace):
        from app.controllers.inference import InferenceController
        from app.controllers.judging import JudgingController
        from app.controllers.session import WindowSession
        from app.views.columns import ColumnsPanel

        columns = ColumnsPanel()
        qtbot.addWidget(columns)
        workspace.add_posterior(MAP)
        columns.show_columns(workspace)
        inference = InferenceController(main_window)
        judging = JudgingController(main_window, workspace, inference, columns, WindowSession(main_window),
                                    lambda: False, lambda: "Draw a digit to see this posterior's belief.")
        judging.request_predictions()
        assert not inference.busy and not judging.refine.isActive()

    def test_a_preview_asks_few_draws_then_the_full_count(self, qtbot, main_window, workspace):
        from app.controllers.inference import InferenceController
        from app.controllers.judging import INLINE_MS, PREVIEW_SAMPLES, JudgingController
        from app.controllers.session import WindowSession
        from app.views.columns import ColumnsPanel

        columns = ColumnsPanel()
        qtbot.addWidget(columns)
        column = workspace.add_posterior(MODELS / "paper_softmax_mc_dropout.pt")
        workspace.set_input(np.zeros((28, 28), np.float32), "a blank")
        inference = InferenceController(main_window)
        asked, inline = [], []
        inference.request = lambda image, requests, level, threads=None, inline_ms=0.0: (
            inline.append(inline_ms), asked.append([r.num_samples for r in requests])) and 1
        judging = JudgingController(main_window, workspace, inference, columns, WindowSession(main_window),
                                    lambda: False, lambda: "")
        judging.request_predictions(preview=True)
        # the column and its tier's reference (HMC), judged beside it
        assert asked == [[PREVIEW_SAMPLES, PREVIEW_SAMPLES]] and judging.refine.isActive()
        qtbot.waitUntil(lambda: len(asked) == 2, timeout=2_000)  # the motion paused: the full count
        assert asked[1][0] == column.samples(workspace.num_samples) > PREVIEW_SAMPLES
        # both computed on the window's thread when their columns last took little: the full count
        # too (a worker started late on a busy machine, after the stroke's end)
        assert inline == [INLINE_MS, INLINE_MS] and INLINE_MS > 0


class TestWindowSession:
    def test_missing_columns_are_said_in_one_sentence(self):
        from app.controllers.session import missing_columns_note

        assert missing_columns_note(["a.pt"], [], defaults=False) == (
            "Of last time's posteriors, “a.pt” is no longer there; the rest are shown.")
        assert missing_columns_note(["a.pt", "b.pt"], ["c.pt"], defaults=True) == (
            "Of last time's posteriors, “a.pt” and “b.pt” are no longer there and “c.pt” could not be "
            "opened; the default posteriors are shown instead.")


class TestInputPlotHelpers:
    def test_colours_map_the_range_onto_the_table_ends(self):
        from app.plots.drawing import colours

        table = np.stack([np.arange(256, dtype=np.uint8)] * 3, axis=1)  # row i is grey i
        out = colours(np.array([[-1.0, 0.0, 0.5, 1.0, 2.0, np.nan]]), table, 0.0, 1.0)
        assert out.shape == (1, 6, 3)
        assert list(out[0, :, 0]) == [0, 0, 128, 255, 255, 0]  # clipped at both ends; NaN as the low end

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_colour_rows_are_those_of_nan_to_num_and_clip(self, dtype):
        """The table rows without numpy's slow wrappers (issue 49) are the rows they gave."""
        from app.plots.drawing import colour_index

        values = np.random.default_rng(0).uniform(-1.5, 1.5, (40, 10)).astype(dtype)
        values.flat[[3, 17, 99]] = [np.nan, np.inf, -np.inf]
        with np.errstate(over="ignore", invalid="ignore"):
            before = np.clip((np.nan_to_num(values, nan=-1.0) - -1.0) / 2.0 * 255.0 + 0.5, 0, 255).astype(np.uint8)
        assert np.array_equal(colour_index(values, -1.0, 1.0), before)

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    @pytest.mark.parametrize(("low", "high"), [(-1.0, 1.0), (0.0, 1.0)])
    def test_the_searched_rows_are_the_computed_ones_at_every_step(self, dtype, low, high):
        """The rows found by searching for the steps of ``colour_index`` are its rows, at each step,
        one representable value either side of it, at random values, at the ends and beyond, and
        at NaN and the infinities; a table read from its end gives the same colours."""
        from app.plots.drawing import colour_index, colours, reversed_index

        # where the computed row steps up, by the arithmetic alone: between two points of a fine grid
        grid = np.linspace(low, high, 100_001, dtype=dtype)
        rows = colour_index(grid, low, high).astype(int)
        up = np.flatnonzero(np.diff(rows) > 0)
        assert len(up) == 255  # every row 1..255 is reached on the way, one at a time
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, low, high, low - 1, high + 1], dtype=dtype)
        values = [np.random.default_rng(1).uniform(low - 0.5, high + 0.5, 50_000).astype(dtype), specials]
        for i in up:  # halved down to the two neighbouring values the row steps between
            below, above = grid[i], grid[i + 1]
            while np.nextafter(below, np.inf, dtype=dtype) != above:
                mid = dtype(below / 2 + above / 2)
                if colour_index(np.array([mid]), low, high)[0] > rows[i]:
                    above = mid
                else:
                    below = mid
            values.append(np.array([below, above]))
        values = np.concatenate(values)
        expected = colour_index(values, low, high)
        assert np.array_equal(255 - reversed_index(values, low, high), expected)
        table = np.random.default_rng(2).integers(0, 256, (256, 3), dtype=np.uint8)
        assert np.array_equal(colours(values, table, low, high), table[expected])

    def test_an_image_owns_its_pixels(self, qtbot):
        from app.plots.drawing import to_image

        pixels = np.zeros((2, 3), np.uint8)
        pixels[1, 2] = 200
        image = to_image(pixels)
        pixels[1, 2] = 0  # the image was copied: changing the array later leaves it as it was
        assert (image.width(), image.height()) == (3, 2) and image.pixelColor(2, 1).red() == 200
