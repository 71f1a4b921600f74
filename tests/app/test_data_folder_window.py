"""One data folder: the Rotate tab, the Dataset tab and the training dialog read the same folder,
name what is missing and where they looked, and offer MNIST's download."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app import settings as app_settings
from app.main import MainWindow
from core.engine.data.datasets import cache_dir
from core.engine.data.idx import write_idx
from core.engine.resources import resources_dir

FILES = [resources_dir() / "models" / "network_lenet5_mc_dropout.pt"]


def write_digits(folder: Path, splits=("train", "test"), n: int = 12) -> Path:
    """A tiny MNIST-layout folder (not the official files)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split in splits:
        prefix = {"train": "train", "test": "t10k"}[split]
        write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8))
    return folder


@pytest.fixture
def window(qtbot, monkeypatch):
    monkeypatch.delenv("BAYESCOPE_DATA_DIR", raising=False)
    win = MainWindow([str(p) for p in FILES])
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.dataset_view.cancel(quiet=True)
    if win.training_dialog is not None:
        win.training_dialog.close()


def rotate_message(win: MainWindow, source: str) -> str:
    panel = win.rotate_panel
    win.modes.setCurrentWidget(panel)
    panel.source.setCurrentIndex(panel.source.findData(source))
    return panel.message.text()


def evaluate_and_catch(qtbot, win: MainWindow, monkeypatch) -> list[str]:
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "critical", lambda *a: shown.append(a[2]))
    view = win.dataset_view
    win.views.setCurrentWidget(view)
    view.set_choice("mnist-test", "notmnist", 5, 2)
    with qtbot.waitSignal(view.run_ended, timeout=60_000):
        assert view.evaluate()
    return shown


def test_rotate_dataset_and_training_read_the_one_data_folder(qtbot, window, tmp_path, monkeypatch):
    first = tmp_path / "first"
    write_digits(first / "mnist")
    app_settings.set_data_folder(first)

    # Rotate: the digits come from first/mnist; the letters are missing, said with where it looked
    assert rotate_message(window, "mnist-test") == ""
    assert window.data.datasets["mnist-test"].source["folder"] == str((first / "mnist").resolve())
    text = rotate_message(window, "notmnist")
    assert "notMNIST letters" in text and str(first / "notmnist") in text and str(cache_dir("notmnist")) in text
    assert "by hand" in text and window.rotate_panel.choose_folder.isVisibleTo(window.rotate_panel)
    assert not window.rotate_panel.download.isVisibleTo(window.rotate_panel)  # notMNIST cannot be downloaded

    # Dataset tab: the same folder, the same words
    (message,) = evaluate_and_catch(qtbot, window, monkeypatch)
    assert "notMNIST letters" in message and str(first / "notmnist") in message
    assert "File → Choose data folder" in message

    # Training dialog: the same folder, and MNIST's training images found in it
    window.show_training_dialog()
    dialog = window.training_dialog
    assert dialog.data_dir.text() == str(first)
    assert str(first / "mnist") in dialog.data_found.text() and not dialog.download.isVisibleTo(dialog)
    dialog.close()

    # choosing another folder once moves all three
    second = tmp_path / "second"
    write_digits(second / "notmnist", splits=("test",))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a: str(second))
    window.data.choose_folder()
    assert app_settings.data_folder() == second
    assert rotate_message(window, "notmnist") == ""
    text = rotate_message(window, "mnist-test")
    assert "MNIST test digits" in text and str(second / "mnist") in text
    window.show_training_dialog()
    assert dialog.data_dir.text() == str(second)
    assert "MNIST training digits were not found" in dialog.data_found.text()
    assert dialog.download.isVisibleTo(dialog) and not dialog.download.isChecked()


def test_training_dialog_browse_sets_the_one_folder(qtbot, window, tmp_path, monkeypatch):
    chosen = tmp_path / "chosen"
    write_digits(chosen / "mnist")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a: str(chosen))
    window.show_training_dialog()
    window.training_dialog._on_browse_clicked()
    window.training_dialog.close()
    assert app_settings.data_folder() == chosen
    assert rotate_message(window, "mnist-test") == ""


def fake_download(name: str, split: str = "test") -> Path:
    return write_digits(cache_dir(name), splits=(split,))


def test_rotate_offers_mnists_download(qtbot, window, tmp_path, monkeypatch):
    app_settings.set_data_folder(tmp_path / "empty")
    text = rotate_message(window, "mnist-test")
    assert "MNIST test digits were not found" in text and "press “Download MNIST”" in text
    panel = window.rotate_panel
    assert panel.download.isVisibleTo(panel)
    monkeypatch.setattr("core.engine.data.locate.download_dataset", fake_download)
    panel.download.click()
    qtbot.waitUntil(lambda: panel.message.text() == "" and window.data.download_worker is None, timeout=10_000)
    assert window.data.datasets["mnist-test"].source["folder"] == str(cache_dir("mnist").resolve())
    assert not panel.download.isVisibleTo(panel)


def test_dataset_tab_offers_mnists_download_then_evaluates(qtbot, window, tmp_path, monkeypatch):
    app_settings.set_data_folder(tmp_path / "empty")
    shown: list[str] = []

    def press_download(box: QMessageBox) -> int:
        shown.append(box.text())
        return 0

    monkeypatch.setattr(QMessageBox, "exec", press_download)
    monkeypatch.setattr(QMessageBox, "clickedButton",
                        lambda box: next(b for b in box.buttons() if b.text() == "Download MNIST"))
    monkeypatch.setattr("core.engine.data.locate.download_dataset", fake_download)
    view = window.dataset_view
    window.views.setCurrentWidget(view)
    view.set_choice("mnist-test", None, 5, 2)
    with qtbot.waitSignal(view.results_shown, timeout=60_000):
        view.evaluate()
    (message,) = shown
    assert "MNIST test digits were not found" in message and str(tmp_path / "empty" / "mnist") in message
    assert "press “Download MNIST”" in message
    assert view.results is not None and len(view.results.data) == 5
