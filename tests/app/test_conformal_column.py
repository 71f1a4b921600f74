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
    assert "No conformal set yet: “Calibrate conformal sets…” in this column's ⋯ menu makes one" in view.verdict.text()
    assert "bayescope-cli" not in view.verdict.text()


def test_the_column_menu_calibrates_a_column_and_it_then_shows_its_sets(qtbot, monkeypatch, tmp_path, shared_data):
    """A column without a calibration told a person to run a command line; its ⋯ menu now
    calibrates it (the same run as ``bayescope-cli calibrate``), with its progress in the status bar,
    and the column shows its conformal set at once. Where the posterior's folder cannot be written
    (an installed app's bundled files), the calibration goes to the user's data folder."""
    import core.engine.calibration_file as files
    from app.main import MainWindow
    from core.engine.calibration_file import read_calibration, sidecar_path

    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    path = tmp_path / "models" / "paper_softmax_map.pt"
    path.parent.mkdir()
    shutil.copy(MODELS / "paper_softmax_map.pt", path)
    monkeypatch.setattr(files, "_folder_writable", lambda folder: folder != path.parent)  # as if read-only
    window = MainWindow([str(path)])
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: all(c.ready for c in window.workspace.columns), timeout=30_000)
    window.load_image_file(resources_dir() / "examples" / "digit-7.png")
    view = window.column_views[str(path)]
    qtbot.waitUntil(lambda: "No conformal set yet" in view.verdict.text(), timeout=30_000)
    messages = []
    window.statusBar().messageChanged.connect(messages.append)
    view.calibrate.trigger()
    assert view.calibrate.text() == "Stop calibrating"
    qtbot.waitUntil(lambda: window.calibrating.worker is None, timeout=120_000)
    qtbot.waitUntil(lambda: "Conformal: " in view.verdict.text(), timeout=30_000)
    assert "90 % guaranteed" in view.verdict.text()
    assert view.calibrate.text() == "Calibrate conformal sets…"
    assert not sidecar_path(path).exists()  # its folder taken as read-only: the user's data folder holds it
    record = read_calibration(path)
    assert record is not None and record["identity"]["of_images"] == 10_000
    assert any("reading MNIST's test digits" in m for m in messages)
    assert any(" of " in m and "images" in m for m in messages if m.startswith("Calibrating"))
    assert messages[-1].startswith("Calibrated MAP") and "90 % conformal sets hold the true class" in messages[-1]
