"""The canvas → preview → histograms flow, with real mouse drags, offscreen."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from app.main import MainWindow
from core.resources import default_posterior_path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def drag(qtbot, widget, points):
    """Press at the first point, move through the rest, release at the last."""
    qtbot.mousePress(widget, Qt.MouseButton.LeftButton, pos=QPoint(*points[0]))
    for x, y in points[1:]:
        qtbot.mouseMove(widget, QPoint(x, y))
    qtbot.mouseRelease(widget, Qt.MouseButton.LeftButton, pos=QPoint(*points[-1]))


def seven(widget):
    w, h = widget.width(), widget.height()
    side = min(w, h)
    ox, oy = (w - side) // 2, (h - side) // 2
    pt = lambda fx, fy: (ox + int(fx * side), oy + int(fy * side))  # noqa: E731
    top = [pt(0.25 + 0.05 * i, 0.2) for i in range(11)]
    down = [pt(0.75 - 0.03 * i, 0.2 + 0.06 * i) for i in range(1, 12)]
    return top + down


@pytest.fixture
def window(qtbot):
    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


def test_bundled_posterior_is_loaded_on_launch(window):
    assert default_posterior_path().is_file()
    assert window.posterior is not None and window.posterior.method == "mc_dropout"
    assert window.model_box.count() >= 1


def test_drawing_a_seven_updates_preview_and_histograms(qtbot, window, tmp_path):
    with qtbot.waitSignal(window.inference.prediction_computed, timeout=20_000):
        drag(qtbot, window.canvas, seven(window.canvas))
    qtbot.waitUntil(lambda: not window.inference.busy and window.predictive.prediction is not None, timeout=20_000)
    qtbot.wait(200)
    prediction = window.predictive.prediction
    s = prediction.summary
    assert prediction.samples.shape == (window.samples.value(), 10)
    # the histogram rows describe the samples the controller received
    assert np.allclose(s.histograms.sum(-1).numpy(), 1.0)
    assert s.total == pytest.approx(s.aleatoric + s.epistemic, abs=1e-6)
    # the preview shows the preprocessed drawing: 28×28, ink centred
    assert window.model_input.shape == (28, 28) and window.model_input.max() > 0.5
    heights = window.predictive.hist_bars[s.predicted_class].opts["height"]
    assert np.allclose(heights, s.histograms[s.predicted_class].numpy())
    assert s.predicted_class == 7, f"a drawn 7 was read as {s.predicted_class}"
    # BAYESCOPE_SCREENSHOTS=1 refreshes the README's screenshot; otherwise it goes to tmp.
    target = DOCS if os.environ.get("BAYESCOPE_SCREENSHOTS") else tmp_path
    assert window.grab().save(str(target / "screenshot-draw.png"))


def test_undo_and_clear(qtbot, window):
    drag(qtbot, window.canvas, seven(window.canvas))
    qtbot.waitUntil(lambda: window.predictive.prediction is not None, timeout=20_000)
    window.canvas.undo()
    assert window.canvas.is_empty()
    drag(qtbot, window.canvas, seven(window.canvas))
    qtbot.keyClick(window, Qt.Key.Key_Delete)
    assert window.canvas.is_empty()
    qtbot.waitUntil(lambda: not window.inference.busy, timeout=20_000)
    qtbot.wait(100)
    assert window.predictive.prediction is None and window.model_input is None


def test_bad_posterior_file_gets_a_message(qtbot, window, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr("app.main.QMessageBox.warning", lambda *a: shown.append(a[2]))
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"junk")
    before = window.posterior
    assert window.load_posterior(bad) is False
    assert "not a readable posterior" in shown[0]
    assert window.posterior is before  # the working posterior is kept


def test_bad_image_gets_a_message(qtbot, window, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr("app.main.QMessageBox.warning", lambda *a: shown.append(a[2]))
    bad = tmp_path / "x.png"
    bad.write_text("no image")
    window.load_image_file(bad)
    assert "not a readable image" in shown[0] and window.canvas.is_empty()


def test_loading_an_image_predicts(qtbot, window, tmp_path):
    from PIL import Image

    arr = np.full((100, 80), 255, np.uint8)
    arr[15:85, 36:44] = 0  # a dark "1" on white paper
    Image.fromarray(arr).save(tmp_path / "one.png")
    with qtbot.waitSignal(window.inference.prediction_computed, timeout=20_000):
        window.load_image_file(tmp_path / "one.png")
    qtbot.waitUntil(lambda: window.predictive.prediction is not None, timeout=20_000)
    assert window.predictive.prediction.summary.predicted_class == 1


def test_overlapping_top_two_classes_are_flagged(qtbot):
    import torch

    from app.views.predictive import PredictiveView
    from core.predictive import Prediction
    from core.uncertainty import summarise

    view = PredictiveView()
    qtbot.addWidget(view)
    # half the samples favour 4, half 9, with the same spread: the two histograms coincide
    g = torch.Generator().manual_seed(0)
    p4 = 0.45 + 0.1 * torch.rand(200, generator=g)
    samples = torch.zeros(200, 10)
    samples[:, 4], samples[:, 9] = p4, 1 - p4
    view.show_prediction(Prediction(samples, summarise(samples)))
    text = view.headline.text()
    assert "Uncertain input" in text and ("4 and 9" in text or "9 and 4" in text)
    confident = torch.zeros(50, 10)
    confident[:, 7] = 1.0
    view.show_prediction(Prediction(confident, summarise(confident)))
    assert "Uncertain input" not in view.headline.text()


def test_every_bundled_posterior_is_selectable_and_reads_the_seven(qtbot, window):
    drag(qtbot, window.canvas, seven(window.canvas))
    qtbot.waitUntil(lambda: window.predictive.prediction is not None, timeout=20_000)
    methods = set()
    for index in range(window.model_box.count()):
        window.model_box.setCurrentIndex(index)
        window.model_box.activated.emit(index)
        qtbot.waitUntil(lambda: not window.inference.busy, timeout=20_000)
        qtbot.wait(50)
        qtbot.waitUntil(lambda: not window.inference.busy, timeout=20_000)
        prediction = window.predictive.prediction
        methods.add(window.posterior.method)
        assert prediction.samples.shape[0] == window.posterior.default_num_samples
        assert prediction.summary.predicted_class == 7, window.posterior.describe()
    assert {"mc_dropout", "map", "sghmc", "dsghmc"} <= methods
