"""The entry point: argument parsing and the last-resort error dialog."""

from __future__ import annotations

import sys

from app.__main__ import build_parser, install_excepthook


def test_arguments():
    args = build_parser().parse_args(["digit.png", "--posterior", "a.pt", "b.pt"])
    assert args.image == "digit.png" and args.posterior == ["a.pt", "b.pt"] and not args.self_test
    assert build_parser().parse_args(["--self-test"]).self_test


def test_an_uncaught_error_becomes_a_sentence_in_a_dialog(qtbot, monkeypatch):
    shown = []
    monkeypatch.setattr("PySide6.QtWidgets.QMessageBox.critical", lambda *a: shown.append(a[2]))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    install_excepthook()
    try:
        raise ValueError("the disk went away")
    except ValueError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    assert shown and "the disk went away" in shown[0] and "Traceback" not in shown[0]


LAUNCH = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import app.__main__ as entry
from app.main import MainWindow

seen = {}

def check():
    window = next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow))
    seen.setdefault("torch when the window showed", "torch" in sys.modules and not window.workspace.columns)
    if window.workspace.columns:
        print(seen["torch when the window showed"], [c.title(100) for c in window.workspace.columns])
        window.close()
        QApplication.instance().quit()

shown = MainWindow.show
def show(self):
    shown(self)
    seen["torch when the window showed"] = "torch" in sys.modules
    timer = QTimer(self, interval=10)
    timer.timeout.connect(check)
    timer.start()
MainWindow.show = show
sys.exit(entry.main([]))
"""


def test_the_window_shows_before_the_engine_loads_then_the_columns_arrive(tmp_path):
    """Start-up: the window is built and shown without importing torch (which takes most of
    the start-up time); the engine loads in the background and the default columns follow."""
    import os
    import subprocess

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", LAUNCH], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    torch_before, titles = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert torch_before == "False"
    assert "HMC, softmax regression" in titles and "SGHMC" in titles


MISSING_IMAGE = r"""
import os, sys
from PySide6.QtWidgets import QMessageBox
import app.__main__ as entry

def warning(parent, title, text):
    print(parent.isVisible(), "|", title, "|", text, flush=True)
    os._exit(0)

QMessageBox.warning = warning
entry.main([sys.argv[1]])
"""


def test_an_image_on_the_command_line_that_cannot_be_read_is_explained_over_the_shown_window(tmp_path):
    """Not in a dialog of its own before the window exists, behind the start-up picture."""
    import os
    import subprocess

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", MISSING_IMAGE, str(tmp_path / "no-such-digit.png")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    visible, title, text = out.stdout.strip().splitlines()[-1].split(" | ")
    assert visible == "True" and title == "Cannot use this image"
    assert "no-such-digit.png" in text and "no such file" in text and str(tmp_path) not in text
