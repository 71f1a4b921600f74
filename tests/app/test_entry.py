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
