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
