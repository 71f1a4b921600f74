"""What the window remembers, and what it does when that memory or a posterior is bad: a column
that cannot predict, a corrupt or unreadable settings file, bundled posteriors of a moved copy
of the app, files gone since last time, a process killed before a clean quit."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt

from app import settings as app_settings
from app.main import MainWindow
from core.engine.resources import resources_dir

ROOT = Path(__file__).resolve().parents[2]
MODELS = resources_dir() / "models"


def open_window(qtbot, **kwargs) -> MainWindow:
    win = MainWindow(**kwargs)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


def settings_file() -> Path:
    """The settings file the window uses in this test (tests/app/conftest.py isolates it),
    named without opening it through the app (which checks a file once, when first opened)."""
    return Path(QSettings(app_settings.APP_NAME, app_settings.APP_NAME).fileName())


def write_settings(text: str) -> Path:
    path = settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def names(win: MainWindow) -> list[str]:
    return [Path(key).name for key in win.workspace.column_keys()]


def draw_a_one(qtbot, win: MainWindow) -> None:
    c = win.canvas
    qtbot.mousePress(c, Qt.MouseButton.LeftButton, pos=QPoint(c.width() // 2, c.height() // 5))
    for i in range(1, 9):
        qtbot.mouseMove(c, QPoint(c.width() // 2, c.height() // 5 + i * c.height() // 14))
    qtbot.mouseRelease(c, Qt.MouseButton.LeftButton, pos=QPoint(c.width() // 2, 4 * c.height() // 5))


# ------------------------------------------------------- 1. a column that cannot predict
@pytest.fixture
def broken_posterior(tmp_path, monkeypatch) -> Path:
    """A posterior file that loads but whose model raises when it predicts."""
    import core.engine.store

    path = tmp_path / "broken.pt"
    shutil.copy(MODELS / "paper_softmax_map.pt", path)
    real = core.engine.store.load_posterior

    def load_posterior(source, *args, **kwargs):
        posterior = real(source, *args, **kwargs)
        if Path(source).name == path.name:
            def predict_proba(*_args, **_kwargs):
                raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (1x784 and 100x10)")

            posterior.predict_proba = predict_proba
        return posterior

    monkeypatch.setattr(core.engine.store, "load_posterior", load_posterior)
    return path


def test_a_posterior_that_cannot_predict_fails_in_its_own_column_and_is_not_reopened(
        qtbot, monkeypatch, broken_posterior):
    dialogs = []
    monkeypatch.setattr("app.main.QMessageBox.critical", lambda *a: dialogs.append(a[2]))
    win = open_window(qtbot)
    assert win.add_posterior(broken_posterior)
    good = [c for c in win.workspace.columns if Path(c.key).name != "broken.pt"]
    broken = win.workspace.column(str(broken_posterior.resolve()))
    assert len(good) == 4
    draw_a_one(qtbot, win)
    qtbot.waitUntil(lambda: not win.inference.busy and not win._refine.isActive() and broken.failure is not None
                    and all(c.prediction is not None for c in good), timeout=30_000)
    assert all("\nReads " in win.column_views[c.key].verdict.text() for c in good)  # still judging
    said = win.column_views[broken.key].verdict.text()
    assert "Could not judge this input" in said and "remove this column" in said
    assert "mat1" not in said and "RuntimeError" not in said
    assert broken.prediction is None and not dialogs  # no dialog per input
    assert "“broken.pt” could not judge the input" in win.statusBar().currentMessage()
    # Left out of the columns saved for the next start, which opens without it.
    saved = app_settings.read_list("workspace/columns")
    assert len(saved) == 4 and not any("broken" in ref for ref in saved)
    again = open_window(qtbot)
    assert "broken.pt" not in names(again) and len(names(again)) == 4


def test_a_failure_is_said_in_words():
    from app.controllers.inference import failure_in_words

    assert failure_in_words(ValueError("the descriptor of these faces is dlib-resnet-v1, "
                                       "this posterior reads another")) \
        == "The descriptor of these faces is dlib-resnet-v1, this posterior reads another."
    generic = failure_in_words(RuntimeError("CUDA error: device-side assert triggered"))
    assert "CUDA" not in generic and "log file" in generic


# ---------------------------------------------------------- 2. corrupt settings values
def test_corrupt_settings_values_give_way_to_their_defaults(qtbot, caplog):
    write_settings("""
        [draw]
        brush=abc
        [sampling]
        samples=1e9
        level=nan
        [window]
        geometry=@ByteArray(not a geometry)
        [workspace]
        mode=banana
        columns=@Variant(\\0\\0\\0\\x7f\\0\\0\\0\\x18)
        face_columns=3
        [folders]
        image=@Invalid()
        [dataset]
        images=abc
        samples=-3
        score=@Variant(junk)
    """)
    with caplog.at_level(logging.WARNING, logger="app.settings"):
        win = open_window(qtbot)
    assert win.draw_panel.brush.value() == win.canvas.brush_size == 22
    assert win.samples.value() == 100 and win.level.value() == 90
    assert win.modes.currentIndex() == 0
    assert names(win) == list(app_settings.DEFAULT_COLUMNS)
    assert app_settings.last_folder("image") == str(Path.home())
    assert "draw/brush" in caplog.text and "sampling/samples" in caplog.text
    view = win.dataset_view  # the Dataset tab reads its own settings when it is first built
    assert view.images.value() == 0 and view.samples.value() == 30


def test_an_unreadable_settings_file_is_set_aside_and_the_window_opens(qtbot, caplog):
    path = write_settings("""
        [sampling
        samples=40
    """)
    broken = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="app.settings"):
        win = open_window(qtbot)
    assert win.samples.value() == 100 and names(win) == list(app_settings.DEFAULT_COLUMNS)
    aside = [p for p in path.parent.iterdir() if p.name.startswith(f"{path.name}.unreadable-")]
    assert len(aside) == 1 and aside[0].read_bytes() == broken
    assert "set aside" in caplog.text
    win.samples.setValue(40)  # and the fresh file keeps what changes
    assert QSettings(str(path), QSettings.Format.IniFormat).value("sampling/samples") in (40, "40")


def test_a_folder_in_place_of_the_settings_file_is_set_aside(qtbot):
    path = settings_file()
    path.mkdir(parents=True)
    win = open_window(qtbot)
    assert win.samples.value() == 100
    assert path.is_file() and any(p.name.startswith(f"{path.name}.unreadable-") for p in path.parent.iterdir())


# ---------------------------------------- 3. bundled posteriors by name, files gone since
def test_bundled_columns_are_saved_by_name_and_found_after_the_app_moved(qtbot):
    win = open_window(qtbot)
    win.save_settings()
    assert app_settings.read_list("workspace/columns") == [f"bundled:{n}" for n in app_settings.DEFAULT_COLUMNS]
    assert all(ref.startswith("bundled:faces_softmax_") for ref in app_settings.read_list("workspace/face_columns"))
    win.close()
    # Settings of an older bayescope, written by a copy that has moved since: absolute paths.
    old = "/opt/old-place/bayescope/_internal/resources/models"
    app_settings.settings().setValue("workspace/columns", [f"{old}/network_lenet5_sghmc.pt", f"{old}/paper_softmax_map.pt"])
    again = open_window(qtbot)
    assert names(again) == ["network_lenet5_sghmc.pt", "paper_softmax_map.pt"]
    assert Path(again.workspace.column_keys()[0]).parent == MODELS.resolve()


def test_columns_of_posteriors_that_left_the_bundle_open_their_successors(qtbot):
    """The LeNet and MLP posteriors gave way to the network tier's LeNet-5: a workspace saved
    with them opens the same methods on the new model, by name or by an old absolute path."""
    old = "/opt/old-place/bayescope/_internal/resources/models"
    app_settings.settings().setValue("workspace/columns", ["bundled:mnist_lenet_mfvi.pt", f"{old}/mnist_lenet_sghmc.pt",
                                                           "bundled:mnist_mlp_sgmmvi_c3r2.pt", "bundled:mnist_softmax_map.pt"])
    win = open_window(qtbot)
    assert names(win) == ["network_lenet5_mfvi.pt", "network_lenet5_sghmc.pt", "network_lenet5_sgmmvi.pt",
                          "paper_softmax_map.pt"]
    assert all(not (MODELS / old_name).exists() for old_name in app_settings.REPLACED)
    assert all((MODELS / new_name).is_file() for new_name in app_settings.REPLACED.values())


def test_a_saved_column_whose_file_is_gone_is_said_once_then_the_defaults_show(qtbot, tmp_path):
    gone = tmp_path / "my-own-sghmc.pt"
    app_settings.settings().setValue("workspace/columns", [str(gone)])
    win = open_window(qtbot)
    assert names(win) == list(app_settings.DEFAULT_COLUMNS)
    assert win.statusBar().currentMessage() == ("Of last time's posteriors, “my-own-sghmc.pt” is no longer "
                                                "there; the default posteriors are shown instead.")
    win.close()
    again = open_window(qtbot)  # said once: the next start does not repeat it
    assert "no longer there" not in again.statusBar().currentMessage()
    assert names(again) == list(app_settings.DEFAULT_COLUMNS)


def test_a_gone_file_beside_columns_that_open_leaves_those_columns(qtbot, tmp_path):
    app_settings.settings().setValue("workspace/columns", ["bundled:paper_softmax_map.pt", str(tmp_path / "a.pt"),
                                                           str(tmp_path / "b.pt")])
    win = open_window(qtbot)
    assert names(win) == ["paper_softmax_map.pt"]
    assert win.statusBar().currentMessage() == ("Of last time's posteriors, “a.pt” and “b.pt” are no longer "
                                                "there; the rest are shown.")


# ------------------------------------------- 4. state saved as it changes, not on quit
KILLED = r"""
import os, signal, sys
from pathlib import Path
from PySide6.QtWidgets import QApplication
app = QApplication(["bayescope"])
from app.main import MainWindow
window = MainWindow()
window.show()
keys = window.workspace.column_keys()
window.workspace.remove(keys[1])
window.workspace.move(keys[3], -2)
assert window.add_posterior(Path(sys.argv[1]))  # as a posterior trained in the window is added
window.samples.setValue(40)
window.level.setValue(80)
window.modes.setCurrentWidget(window.image_panel)
print("|".join(window.workspace.column_keys()), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no clean quit: no closeEvent, no destructor
"""


def test_the_state_survives_a_killed_process(qtbot, tmp_path):
    trained = tmp_path / "models" / "my-sghmc.pt"
    trained.parent.mkdir()
    shutil.copy(MODELS / "network_lenet5_sghmc.pt", trained)
    settings_home = settings_file().parents[1]  # <XDG_CONFIG_HOME>/bayescope/bayescope.conf
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT),
           "XDG_CONFIG_HOME": str(settings_home), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_STATE_HOME": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-c", KILLED, str(trained)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    shown = out.stdout.strip().splitlines()[-1].split("|")
    assert Path(shown[-1]).name == "my-sghmc.pt" and len(shown) == 4
    again = open_window(qtbot)
    assert again.workspace.column_keys() == shown
    assert again.samples.value() == 40 and again.level.value() == 80
    assert again.modes.currentWidget() is again.image_panel
