"""Ctrl+E (the comparison folder) counts its figures in the status bar and can be cancelled,
leaving no folder behind (issue 47, item 7)."""

from __future__ import annotations

import numpy as np
import torch
from PySide6.QtWidgets import QMainWindow

from app.workspace import Workspace
from core.analysis.predictive import predict_image
from core.engine.resources import resources_dir

MODELS = resources_dir() / "models"


def window_with_a_prediction(qtbot):
    window = QMainWindow()
    qtbot.addWidget(window)
    workspace = Workspace(window)
    image = np.zeros((28, 28), np.float32)
    image[6:22, 12:16] = 1.0
    workspace.set_input(image, "digit-1.png")
    for name in ("paper_softmax_map.pt", "paper_softmax_mc_dropout.pt"):
        column = workspace.add_posterior(MODELS / name)
        column.prediction = predict_image(column.posterior, torch.from_numpy(image)[None, None], num_samples=10)
    return window, workspace


def test_export_counts_its_figures_then_names_the_folder(qtbot, tmp_path):
    from app.controllers.export import ExportController

    window, workspace = window_with_a_prediction(qtbot)
    exports = ExportController(window, workspace)
    said: list[str] = []
    window.statusBar().messageChanged.connect(said.append)
    exports.export_comparison(tmp_path / "out")
    assert exports._cancel_button().isVisibleTo(window)
    qtbot.waitUntil(lambda: exports.worker is None, timeout=120_000)
    counts = [t for t in said if " of 10 figures written" in t]
    assert counts[0].endswith("0 of 10 figures written…") and counts[-1].endswith("10 of 10 figures written…")
    assert any("now its page" in t for t in said)  # 2 columns × 5 views, then the page
    assert said[-1].startswith("Saved the comparison") and (tmp_path / "out" / "index.html").is_file()
    assert not exports._cancel_button().isVisibleTo(window)


def test_cancel_stops_between_figures_and_leaves_nothing(qtbot, tmp_path):
    from app.controllers.export import ExportController

    window, workspace = window_with_a_prediction(qtbot)
    exports = ExportController(window, workspace)
    exports.export_comparison(tmp_path / "out")
    worker = exports.worker
    with qtbot.waitSignal(worker.yielded, timeout=60_000):
        pass
    exports._cancel_button().click()
    qtbot.waitUntil(lambda: exports.worker is None, timeout=60_000)
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary sibling left either
    assert window.statusBar().currentMessage() == "Export cancelled: no folder was written."
