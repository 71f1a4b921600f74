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


def test_an_image_on_the_command_line_that_cannot_be_read_is_explained_over_the_shown_window(
        tmp_path, fresh_interpreter):
    """Not in a dialog of its own before the window exists, behind the start-up picture. (The
    launch itself, window before torch, is tests/app/test_cold_start.py's.)"""
    visible, title, text = fresh_interpreter(MISSING_IMAGE, str(tmp_path / "no-such-digit.png")).split(" | ")
    assert visible == "True" and title == "Cannot use this image"
    assert "no-such-digit.png" in text and "no such file" in text and str(tmp_path) not in text
