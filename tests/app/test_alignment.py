"""Columns line up: D-SGHMC's four-row uncertainty panel does not push its plots below those of
its neighbours (issue 47, item 14)."""

from __future__ import annotations

import numpy as np
import torch
from PySide6.QtWidgets import QMainWindow

from app.workspace import Workspace
from core.analysis.predictive import predict_image
from core.engine.resources import resources_dir

MODELS = resources_dir() / "models"


def test_every_plot_starts_at_one_height_in_every_column(qtbot):
    from app.views.columns import ColumnsPanel

    window = QMainWindow()
    qtbot.addWidget(window)
    workspace = Workspace(window)
    image = np.zeros((28, 28), np.float32)
    image[6:22, 12:16] = 1.0
    workspace.set_input(image, "a stroke")
    for name in ("paper_softmax_hmc.pt", "paper_softmax_dsghmc.pt", "paper_softmax_mc_dropout.pt"):
        column = workspace.add_posterior(MODELS / name)
        column.prediction = predict_image(column.posterior, torch.from_numpy(image)[None, None],
                                          num_samples=column.samples(20))
    panel = ColumnsPanel()
    window.setCentralWidget(panel)
    window.resize(1000, 900)
    window.show()
    qtbot.waitExposed(window)
    panel.show_columns(workspace)
    for column in workspace.columns:
        panel.show_prediction(workspace, column.key)
    qtbot.wait(50)
    assert workspace.columns[1].prediction.summary.masks is not None  # D-SGHMC's four rows
    places = {c.posterior.method: [(p.mapTo(panel, p.rect().topLeft()).y(), p.height())
                                   for p in panel.views[c.key].plots.values()] for c in workspace.columns}
    assert places["hmc"] == places["dsghmc"] == places["mc_dropout"]


def _first_launch(qtbot, monkeypatch, shared_data, size=(1400, 860)):
    from app.main import MainWindow

    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow()
    qtbot.addWidget(win)
    win.resize(*size)
    win.show()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: len(win.column_views) == 4, timeout=60_000)
    qtbot.wait(50)
    return win


def test_the_columns_fit_the_first_launch_window_down_to_the_class_correlation(qtbot, monkeypatch, shared_data):
    """At 1400×860 the class-correlation matrix, and the lower half of its colour scale, were cut:
    the columns took their plots' preferred heights (ten pixels a plot over their minimum) and
    scrolled."""
    win = _first_launch(qtbot, monkeypatch, shared_data)
    scroll = win.columns_scroll
    assert not scroll.verticalScrollBar().isVisible()
    viewport = scroll.viewport()
    for view in win.column_views.values():
        plot = view.plots["correlation"]
        bottom = plot.mapTo(viewport, plot.rect().bottomLeft()).y()
        assert bottom < viewport.height(), (bottom, viewport.height())
        # the colour scale runs the data's height, −1 at its foot inside the plot
        assert plot.data_rect().bottom() < plot.height()


def test_every_column_labels_the_same_classes_on_each_plot(qtbot, monkeypatch, shared_data):
    """Each plot thinned its class labels by its own room and history: 0 2 4 6 8 in one column,
    0–9 in the next. The row now agrees on the sparsest of its columns' choices."""
    win = _first_launch(qtbot, monkeypatch, shared_data, size=(1400, 1000))
    views = list(win.column_views.values())
    for view in views[1:]:  # squeezed: too little room for ten labels, as a column alone would be
        view.plots["histograms"].setMaximumHeight(112)
    qtbot.wait(100)
    heights = [view.plots["histograms"].height() for view in views]
    assert heights[0] > 150 and max(heights[1:]) <= 112  # the columns' own fits differ
    owns = {view.plots["histograms"].own_choices()["left"] for view in views}
    assert len(owns) > 1
    for key in views[0].plots:
        for side in ("left", "bottom"):
            drawn = {tuple(getattr(view.plots[key], side).labels()) for view in views}
            assert len(drawn) == 1, (key, side, drawn)
    # given back their room, the row labels every class again where all columns have room
    for view in views[1:]:
        view.plots["histograms"].setMaximumHeight(16777215)
    win.resize(1400, 1200)
    qtbot.waitUntil(lambda: win.height() == 1200)
    qtbot.wait(100)
    labels = {tuple(view.plots["histograms"].left.labels()) for view in views}
    assert labels == {tuple(enumerate(str(k) for k in range(10)))}
