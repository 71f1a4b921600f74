"""A column shows its conformal set beside its credible set, read once from beside its file."""

from __future__ import annotations

import shutil

import numpy as np

from app.views.column import ColumnView
from app.workspace import Column
from core.analysis.predictive import predict_image
from core.engine.resources import resources_dir
from core.engine.store import load_posterior

MODELS = resources_dir() / "models"
DIGITS = tuple("0123456789")


def _ambiguous() -> np.ndarray:
    """A 28×28 image half 4, half 9: a 4 whose top is nearly closed."""
    image = np.zeros((28, 28), np.float32)
    image[6:20, 8:11] = 1.0  # the 4's left stroke
    image[6:24, 17:20] = 1.0  # the right stroke
    image[17:20, 8:20] = 1.0  # the bar
    image[5:8, 10:18] = 1.0  # a lid: towards a 9
    return image


def test_a_calibrated_column_shows_both_sets_and_reads_the_calibration_once(qtbot, monkeypatch):
    import core.analysis.conformal_run as run

    path = MODELS / "paper_softmax_hmc.pt"
    posterior = load_posterior(path)
    column = Column(str(path), posterior, predict_image(posterior, _ambiguous(), 100))
    reads = []
    real = run.read_calibration
    monkeypatch.setattr(run, "read_calibration", lambda *a, **k: reads.append(a) or real(*a, **k))
    view = ColumnView(column.key, DIGITS)
    qtbot.addWidget(view)
    for _ in range(3):  # three strokes
        view.show_column(column, DIGITS, 0.9)
    text = view.verdict.text()
    assert "Conformal: " in text and "90 % guaranteed" in text
    assert "Credible: " in text and "of the belief" in text
    assert "not a probability for this one input" in view.verdict.toolTip()
    assert len(reads) == 1  # once per column, not per stroke


def test_a_column_without_calibration_says_how_to_get_one(qtbot, tmp_path):
    path = tmp_path / "paper_softmax_map.pt"
    shutil.copy(MODELS / "paper_softmax_map.pt", path)  # no sidecar beside this copy
    posterior = load_posterior(path)
    column = Column(str(path), posterior, predict_image(posterior, _ambiguous()))
    view = ColumnView(column.key, DIGITS)
    qtbot.addWidget(view)
    view.show_column(column, DIGITS, 0.9)
    assert "No conformal set yet: run bayescope-cli calibrate --posterior paper_softmax_map.pt" in view.verdict.text()
