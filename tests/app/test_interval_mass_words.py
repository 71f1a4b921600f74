"""A tier column's reference line says how much of exact inference's belief its interval holds,
from the record in its file (``bayescope-cli fidelity --record``); a column without the record says
nothing of it."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from app.main import MainWindow
from core.engine.store import add_to_info
from tests.app.test_main_window import MODELS, settle


@pytest.fixture
def swag_copy(tmp_path):
    """The bundled SWAG file with a record of known figures (the bundled HMC is its reference)."""
    path = tmp_path / "paper_softmax_swag.pt"
    shutil.copy(MODELS / "paper_softmax_swag.pt", path)
    add_to_info(path, {"interval_mass": {"status": "measured", "level": 0.9, "stated_level": 0.9, "draws": 100,
                                         "mean": 0.094, "p10": 0.004, "min": 0.0, "cells": 10, "min_mass": 0.01,
                                         "probe": "the first 1000 images of mnist-test",
                                         "reference": {"method": "hmc", "draws": 800}}})
    plain = tmp_path / "paper_softmax_mfvi.pt"
    shutil.copy(MODELS / "paper_softmax_mfvi.pt", plain)
    add_to_info(plain, {"interval_mass": {"status": "n/a", "reason": "not measured here"}})
    return path, plain


def test_the_reference_line_says_how_much_of_exact_inference_the_interval_holds(qtbot, swag_copy, tmp_path):
    if not (MODELS / "paper_softmax_hmc.pt").exists():
        pytest.skip("the paper tier's reference is not bundled")
    from PIL import Image

    swag, plain = swag_copy
    window = MainWindow([swag, plain])
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    arr = np.full((100, 80), 255, np.uint8)
    arr[15:85, 36:44] = 0  # a dark "1" on white paper
    Image.fromarray(arr).save(tmp_path / "one.png")
    assert window.load_image_file(tmp_path / "one.png")
    settle(qtbot, window)
    ref = window.workspace.reference
    qtbot.waitUntil(lambda: ref is not None and ref.prediction is not None, timeout=60_000)
    qtbot.waitUntil(lambda: "differs by" in window.column_views[str(swag.resolve())].verdict.text(), timeout=10_000)
    swag_view, plain_view = (window.column_views[str(p.resolve())] for p in (swag, plain))
    assert "its 90 % interval holds about 9 % of what exact inference believes" in swag_view.verdict.text()
    assert "interval holds about" not in plain_view.verdict.text() and "differs by" in plain_view.verdict.text()
    assert "800 draws on the first 1,000 MNIST test digits" in swag_view.title.toolTip()
