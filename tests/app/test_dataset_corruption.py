"""The Dataset tab's corrupted-images evaluation (issue 48): a corruption and a severity chosen,
every column judged at each severity in the background, one line per column against severity,
severity 0 the clean evaluation's numbers, and the report's table of them."""

from __future__ import annotations

import pyqtgraph as pg
import pytest

from core.engine.resources import resources_dir
from tests.app.test_dataset_view import open_dataset_tab

MODELS = resources_dir() / "models"
FILES = [MODELS / "paper_softmax_map.pt", MODELS / "paper_softmax_mc_dropout.pt"]


@pytest.fixture
def tab(qtbot, monkeypatch, shared_data):
    view = open_dataset_tab(qtbot, monkeypatch, shared_data, FILES).dataset_view
    view.set_choice("mnist-test", "notmnist", 24, 4)
    return view


def test_two_severities_one_line_per_column_and_severity_0_is_the_clean_evaluation(qtbot, tab, tmp_path):
    view = tab
    with qtbot.waitSignal(view.run_ended, timeout=300_000):
        assert view.evaluate()
    assert view.results is not None, view.status.text()
    panel = view.corruption
    panel.set_choice("noise", 1.0, sweep=True)
    assert panel.severities() == (0.0, 1.0)
    with qtbot.waitSignal(panel.run_ended, timeout=300_000):
        assert view.evaluate_corrupted()
        assert panel.running and not panel.evaluate_button.isEnabled() and panel.cancel_button.isEnabled()
    assert view.corruption.isVisible() and view.corruption_button.isChecked()
    result = panel.result
    assert result is not None, panel.status.text()
    assert result.severities == (0.0, 1.0) and result.images == 24 and result.ood_images == 24
    columns = list(view.column_widgets)
    for plot in (panel.accuracy_plot, panel.auroc_plot):
        assert list(plot.lines) == columns  # one line per column, in the columns' order
        assert all(len(values) == 2 for values in plot.lines.values())
        drawn = [item for item in plot.getPlotItem().listDataItems() if item.name() in columns]
        assert len(drawn) == len(columns)
    # severity 0 gives the clean evaluation's numbers, column by column
    summary = {row["posterior"]: row for row in view.results.tables["summary"]}
    ood = {(row["posterior"], row["score"]): row["auroc"] for row in view.results.tables["ood_detection"]}
    for name in columns:
        assert panel.accuracy_plot.lines[name][0] == pytest.approx(summary[name]["accuracy"], abs=1e-12)
        assert panel.auroc_plot.lines[name][0] == pytest.approx(ood[name, "total"], abs=1e-12)
    # noise at severity 1 changes what the columns see: not every number stays put
    assert any(panel.accuracy_plot.lines[n][1] != panel.accuracy_plot.lines[n][0] for n in columns) or \
        any(panel.auroc_plot.lines[n][1] != panel.auroc_plot.lines[n][0] for n in columns)
    assert "Gaussian noise" in panel.status.text() and "24 MNIST test digits" in panel.status.text()
    # the AUROC follows the score chosen for the histograms
    view.score.setCurrentIndex(view.score.findData("epistemic"))
    for name in columns:
        assert panel.auroc_plot.lines[name][0] == pytest.approx(ood[name, "epistemic"], abs=1e-12)
    # the pointer on a point: its tooltip says the column and the number in words
    plot = panel.accuracy_plot
    value = plot.lines[columns[1]][1]
    at = plot.getPlotItem().getViewBox().mapViewToScene(pg.Point(1.0, value))
    plot._on_scene_mouse_moved(at)
    name, words = plot.toolTip().split("\n")
    assert name in columns and words == f"accuracy at severity 1: {100 * value:.1f} %"  # (columns may meet)
    assert plot.lines[name][1] == value
    plot._on_scene_mouse_moved(at + pg.Point(200, 200))
    assert plot.toolTip() == plot.explanation
    # the report has a section with the same numbers
    path = tmp_path / "report.html"
    with qtbot.waitSignal(view.exports.report_running, timeout=120_000, check_params_cb=lambda running: not running):
        assert view.exports.export_report(path)
    page = path.read_text(encoding="utf-8")
    assert "When the images get worse: gaussian noise" in page
    first = panel.accuracy_plot.lines[columns[0]]
    assert f"<td>{100 * first[0]:.4f}</td><td>{100 * first[1]:.4f}</td>" in page


def test_cancel_stops_and_keeps_nothing(qtbot, tab):
    view = tab
    panel = view.corruption
    panel.set_choice("blur", 5.0, sweep=True)
    assert panel.severities() == (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
    assert view.evaluate_corrupted()
    with qtbot.waitSignal(panel.run_ended, timeout=10_000):
        panel.cancel()
    assert not panel.running and panel.result is None and panel.evaluate_button.isEnabled()
    assert "cancelled" in panel.status.text()


def test_progress_says_the_rate_and_the_time_left(qtbot, tab):
    from core.engine.inference.base import ProgressRecord

    panel = tab.corruption
    panel._run = 7
    panel._on_worker_yielded(7, ProgressRecord(120, 480, {"severity": 1.0, "images_per_s": 40.0,
                                                          "seconds_left": 9.0}, "noise 1 · MAP · mnist-test"))
    assert panel.progress.value() == 120 and panel.progress.maximum() == 480
    assert panel.status.text() == "Severity 1, MAP: 120 of 480 images · 40 images a second · about 9 s left…"
