"""The Rotation sweep tab: its line is the mean p̄ (what *This input* leads with), said on screen and
in the exported figure alike; a sweep of an earlier image is marked stale in words."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtWidgets import QTabWidget

from core.analysis.metrics import RotationSweep
from core.outputs.input_figures import sweep_figure

NAMES = tuple(str(k) for k in range(10))


def skewed_sweep() -> RotationSweep:
    """Three angles where class 5's draws are skewed: most near 0.2, a few at 1, so that its
    median (0.23) and mean (0.48) differ as HMC's did in the issue."""
    a, k = 3, 10
    mean = np.full((a, k), 0.52 / 9)
    mean[:, 5] = 0.48
    median = np.full((a, k), 0.7 / 9)
    median[:, 5] = 0.23
    lower, upper = np.zeros((a, k)), np.minimum(mean * 2.2, 1.0)
    return RotationSweep(np.array([0.0, 90.0, 180.0]), mean, median, lower, upper,
                         total=np.full(a, 1.5), aleatoric=np.full(a, 1.0), epistemic=np.full(a, 0.5),
                         level=0.9, expected_coverage=0.9)


def drawn_lines(plot: pg.PlotWidget) -> dict[int, np.ndarray]:
    """The visible curves of a pyqtgraph plot, by the class of their colour."""
    from app.plots.style import CLASS_COLOURS

    out = {}
    for item in plot.getPlotItem().listDataItems():
        colour = item.opts["pen"].color().getRgb()[:3] if item.opts.get("pen") is not None else None
        if colour in CLASS_COLOURS and item.opts["pen"].color().alpha() > 0:
            out[CLASS_COLOURS.index(colour)] = np.asarray(item.yData)
    return out


def test_window_and_export_draw_the_mean_and_say_so(qtbot):
    from app.views.sweep import SweepColumn

    sweep = skewed_sweep()
    column = SweepColumn("k", "HMC", sweep, NAMES)
    qtbot.addWidget(column)
    lines = drawn_lines(column.probability)
    assert np.allclose(lines[5], sweep.mean[:, 5]) and not np.allclose(lines[5], sweep.median[:, 5])
    title = column.probability.getPlotItem().titleLabel.text
    assert "mean" in title.lower() or "p̄" in title
    assert "median" not in column.probability.toolTip() and "mean" in column.probability.toolTip()

    fig = sweep_figure("HMC", sweep, NAMES)
    axis = fig.axes[0]
    curves = {line.get_label(): np.asarray(line.get_ydata()) for line in axis.get_lines()}
    assert np.allclose(curves["5"], sweep.mean[:, 5])
    assert "mean" in axis.get_ylabel().lower() and "median" not in axis.get_ylabel().lower()


def test_epistemic_is_purple_in_the_export_never_class_3s_red():
    from matplotlib.colors import to_rgb

    from core.outputs.palette import CLASS_COLOURS, UNCERTAINTY, mpl

    fig = sweep_figure("HMC", skewed_sweep(), NAMES)
    uncertainty = {line.get_label(): to_rgb(line.get_color()) for line in fig.axes[1].get_lines()}
    assert uncertainty["epistemic"] == pytest.approx(mpl(UNCERTAINTY["epistemic"]))
    assert uncertainty["epistemic"] != pytest.approx(mpl(CLASS_COLOURS[3]))


@pytest.fixture
def sweep_tab(qtbot):
    """The Sweep tab with its controller, Rotate tab and workspace, without the rest of the window."""
    from PySide6.QtWidgets import QMainWindow

    from app.controllers.sweep import SweepController
    from app.views.modes import RotatePanel
    from app.views.sweep import SweepView
    from app.workspace import Workspace

    window = QMainWindow()
    qtbot.addWidget(window)
    workspace = Workspace(window)
    panel, view, tabs = RotatePanel(lambda name: None), SweepView(), QTabWidget()
    for widget in (panel, view, tabs):
        qtbot.addWidget(widget)
    return workspace, view, SweepController(window, workspace, panel, view, tabs)


def test_a_sweep_of_an_earlier_image_is_marked_stale(sweep_tab):
    workspace, view, sweeps = sweep_tab
    swept = np.zeros((28, 28), np.float32)
    swept[10:18, 12:16] = 1.0
    sweeps._on_worker_returned({}, "your drawing", swept)
    assert view.label.text().startswith("Rotation sweep of your drawing") and not view.stale

    view.show_sweeps("your drawing", [("k", "HMC", skewed_sweep())], NAMES)  # as the worker's result shows it
    workspace.set_input(swept.copy(), "your drawing")  # the same image again: still its sweep
    assert not view.stale and view.columns["k"].isEnabled()

    other = np.zeros((28, 28), np.float32)
    other[4:20, 8:10] = 1.0
    workspace.set_input(other, "digit-7.png")  # a new image opened
    assert view.stale and not view.columns["k"].isEnabled()
    assert "earlier image" in view.label.text() and "Sweep 0–180°" in view.label.text()

    view.show_sweeps("digit-7.png", [("k", "HMC", skewed_sweep())], NAMES)  # swept again
    assert not view.stale and view.label.text().startswith("Rotation sweep of digit-7.png")


def test_a_corruption_sweep_result_is_shown_with_its_own_words(sweep_tab):
    _, view, _ = sweep_tab
    values = np.linspace(0, 28, 15)
    probs = np.full((15, 10), 0.1)
    sweep = RotationSweep(values, probs, probs, probs * 0.5, probs * 1.5, np.ones(15), np.ones(15) * 0.6,
                          np.ones(15) * 0.4, 0.9, swept="occlusion",
                          axis="centre of the 8×8 px patch (pixels from the left)", parameter="patch_centre_px")
    view.show_sweeps("your drawing", [("k", "HMC", sweep)], NAMES, kind="occlusion")
    assert view.label.text().startswith("Occlusion sweep of your drawing: a grey patch moved")
    axis = view.columns["k"].uncertainty.getPlotItem().getAxis("bottom")
    assert axis.labelText == "centre of the 8×8 px patch (pixels from the left)"
