"""The entry point: argument parsing and the last-resort error dialog."""

from __future__ import annotations

import json
import sys

from app.__main__ import build_parser, install_excepthook
from app.settings import default_columns
from core.engine.resources import resources_dir

MODELS = resources_dir() / "models"
EXAMPLES = resources_dir() / "examples"


def test_arguments():
    args = build_parser().parse_args(["digit.png", "--posterior", "a.pt", "b.pt"])
    assert args.files == ["digit.png"] and args.posterior == ["a.pt", "b.pt"] and not args.self_test
    assert build_parser().parse_args(["--self-test"]).self_test
    # `bayescope model.pt`: a posterior file is one of the files, as a drop would be (it was read
    # as an image, "not a readable image"); several files are all kept, in order
    assert build_parser().parse_args(["model.pt"]).files == ["model.pt"]
    assert build_parser().parse_args(["a.pt", "b.png", "c.txt"]).files == ["a.pt", "b.png", "c.txt"]
    assert build_parser().parse_args([]).files == []


def test_the_help_says_what_a_file_on_the_command_line_becomes():
    words = " ".join(build_parser().format_help().split())
    assert "posterior file (.pt) becomes a column" in words and "opens in the Image tab" in words


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
import json, os, sys
from pathlib import Path
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox
import app.__main__ as entry
from app.main import MainWindow

seen = {"dialogs": []}
def shown(box):
    seen["dialogs"].append([box.parentWidget().isVisible(), box.windowTitle(), box.text()])
    return 0
QMessageBox.exec = shown
QMessageBox.warning = lambda parent, title, text, *a: seen["dialogs"].append([parent.isVisible(), title, text])

def check():
    window = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)
    if window is None or not window.workspace.engine_loaded or window.files_waiting:
        return
    seen["columns"] = [Path(c.key).name for c in window.workspace.columns]
    seen["ready"] = all(c.ready for c in window.workspace.columns)
    seen["tab"] = window.modes.tabText(window.modes.currentIndex())
    seen["image"] = window.workspace.image is not None
    print(json.dumps(seen), flush=True)
    os._exit(0)

app = QApplication(sys.argv[:1])
timer = QTimer(interval=20)
timer.timeout.connect(check)
timer.start()
entry.main(sys.argv[1:])
"""


def test_files_on_the_command_line_open_as_a_drop_of_them_does(tmp_path, fresh_interpreter):
    """`bayescope model.pt digit.png notes.txt`, through the launcher in a fresh interpreter: the
    posterior file becomes a column beside the default ones (it was read as an image: "not a
    readable image"), the picture opens in the Image tab, and the one file that is neither gets
    the drop's sentence, in one dialog over the shown window that says how the files came."""
    (tmp_path / "notes.txt").write_text("hello")
    seen = json.loads(fresh_interpreter(LAUNCH, str(MODELS / "paper_softmax_laplace.pt"),
                                        str(EXAMPLES / "digit-7.png"), str(tmp_path / "notes.txt")))
    assert seen["columns"] == [p.name for p in default_columns()] + ["paper_softmax_laplace.pt"]
    assert seen["ready"] and seen["tab"] == "Image" and seen["image"]
    assert len(seen["dialogs"]) == 1, seen["dialogs"]
    visible, title, text = seen["dialogs"][0]
    assert visible and title == "Some files could not be opened"
    assert text.splitlines() == ["Opened 2 of the 3 files named on the command line; this one was refused:",
                                 "• “notes.txt” is neither a posterior (.pt) nor an image (PNG, JPEG, …)."]


def test_an_image_on_the_command_line_that_cannot_be_read_is_explained_over_the_shown_window(
        tmp_path, fresh_interpreter):
    """Not in a dialog of its own before the window exists, behind the start-up picture. (The
    launch itself, window before torch, is tests/app/test_cold_start.py's.)"""
    seen = json.loads(fresh_interpreter(LAUNCH, str(tmp_path / "no-such-digit.png")))
    assert len(seen["dialogs"]) == 1, seen["dialogs"]
    visible, title, text = seen["dialogs"][0]
    assert visible and title == "Cannot use this image"
    assert "no-such-digit.png" in text and "no such file" in text and str(tmp_path) not in text
    assert seen["columns"] == [p.name for p in default_columns()]  # the window goes on as launched
