"""A first launch with no data folder anywhere: the Rotate and Dataset tabs work on the bundled
samples and say so in one line; choosing a data folder ends it."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QMessageBox

from app.main import MainWindow
from core.engine.data import locate
from core.engine.resources import resources_dir

FILES = [resources_dir() / "models" / "paper_softmax_map.pt"]


@pytest.fixture
def window(qtbot, monkeypatch, tmp_path):
    monkeypatch.delenv("BAYESCOPE_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(locate, "program_folder", lambda: tmp_path / "apps" / "bayescope")  # nothing near it
    win = MainWindow([str(p) for p in FILES])
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.dataset_view.cancel(quiet=True)


def test_rotate_shows_a_sample_letter_and_says_so(window):
    panel = window.rotate_panel
    window.modes.setCurrentWidget(panel)
    panel.source.setCurrentIndex(panel.source.findData("notmnist"))
    image, label = panel.base_image()
    assert image is not None and image.shape == (28, 28) and "notMNIST letter" in label
    text = panel.message.text()
    assert "bundled samples of 1,000 notMNIST letters" in text and "\n" not in text
    assert panel.choose_folder.isVisibleTo(panel) and panel.thumbnail.pixmap() is not None
    assert panel.index.maximum() == 999  # the sample's images, not the full set's 10,000


def test_dataset_tab_evaluates_the_samples_and_says_so(qtbot, window, monkeypatch):
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "critical", lambda *a: shown.append(a[2]))
    view = window.dataset_view
    window.views.setCurrentWidget(view)
    view.set_choice("mnist-test", "notmnist", 20, 2)
    with qtbot.waitSignal(view.results_shown, timeout=60_000):
        assert view.evaluate()
    assert shown == []
    lines = view.status.text().splitlines()
    assert "20 sample MNIST test digits and 20 sample notMNIST letters" in lines[0]
    assert len(lines) == 2 and "bundled samples of 1,000 MNIST test digits and 1,000 notMNIST letters" in lines[1]
