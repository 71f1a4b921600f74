"""Files dropped on the window: however many, at most one dialog, which counts what opened and
gives one line, in words, for each file refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QMessageBox

from app.controllers import drop
from core.engine.resources import resources_dir

MODELS = resources_dir() / "models"
EXAMPLES = resources_dir() / "examples"


def dropped(window, paths: list[Path]) -> None:
    """Drop ``paths`` on the window as a file manager does."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    event = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                       Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)


@pytest.fixture
def dialogs(monkeypatch):
    """Every message box the window shows, as (title, text), none of them waiting for a click."""
    shown: list[tuple[str, str]] = []
    for name in ("warning", "critical", "information"):
        monkeypatch.setattr(QMessageBox, name, lambda parent, title, text, *a, **k: shown.append((title, text)))
    monkeypatch.setattr(QMessageBox, "exec", lambda box: shown.append((box.windowTitle(), box.text())) or 0)
    return shown


@pytest.fixture
def bad_and_good(tmp_path) -> tuple[list[Path], list[Path]]:
    (tmp_path / "notes.pt").write_bytes(b"not a torch file at all")
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n but then nothing")
    (tmp_path / "readme.txt").write_text("hello")
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    bad = [tmp_path / n for n in ("notes.pt", "empty.pt", "broken.png", "readme.txt", "table.csv")]
    good = [MODELS / "paper_softmax_map.pt", EXAMPLES / "digit-3.png"]
    return bad, good


def test_dropping_five_bad_and_two_good_files_gives_one_summary(qtbot, window, dialogs, bad_and_good):
    bad, good = bad_and_good
    before = len(window.workspace.columns)
    dropped(window, [bad[0], good[0], bad[1], bad[2], bad[3], good[1], bad[4]])
    assert len(dialogs) == 1, dialogs  # the old window opened one dialog per refused file: 5
    title, text = dialogs[0]
    lines = text.splitlines()
    assert lines[0] == "Opened 2 of the 7 files dropped; these 5 were refused:"
    assert len(lines) == 6  # one line per refused file
    for path, line in zip(bad, lines[1:], strict=True):
        assert line.count(path.name) == 1 and f"“{path.name}”" in line  # named once, in quotes
        assert str(path.parent) not in line and "Traceback" not in line and "Error" not in line
    assert "neither a posterior (.pt) nor an image" in lines[4] and "neither a posterior" in lines[5]
    assert title == "Some files could not be opened"
    # what could be opened was: a column more, the picture in the Image tab
    assert len(window.workspace.columns) == before + 1
    assert window.current_panel() is window.image_panel and window.workspace.image is not None


def test_every_file_opened_gives_no_dialog(qtbot, window, dialogs):
    dropped(window, [MODELS / "paper_softmax_map.pt", EXAMPLES / "digit-7.png"])
    assert dialogs == []


def test_one_refused_file_alone_reads_as_before(qtbot, window, dialogs, tmp_path):
    (tmp_path / "readme.txt").write_text("hello")
    dropped(window, [tmp_path / "readme.txt"])
    assert dialogs == [("Cannot open this file", "“readme.txt” is neither a posterior (.pt) nor an image (PNG, JPEG, …).")]


def test_fifty_files_give_one_dialog_that_fits_on_a_screen(qtbot, window, monkeypatch, tmp_path):
    boxes: list[QMessageBox] = []
    monkeypatch.setattr(QMessageBox, "exec", lambda box: boxes.append(box) or 0)
    paths = []
    for i in range(50):
        path = tmp_path / f"run-{i:02}.pt"
        path.write_bytes(b"garbage")
        paths.append(path)
    dropped(window, paths)
    assert len(boxes) == 1
    text, details = boxes[0].text(), boxes[0].detailedText()
    assert text.splitlines()[0] == "None of the 50 files dropped could be opened:"
    assert len(text.splitlines()) == 1 + drop.LINES_SHOWN + 1 and "40 more files" in text
    assert [f"“{p.name}”" in line for p, line in zip(paths, details.splitlines(), strict=True)] == [True] * 50


def test_summary_counts_and_names_each_file_once():
    outcome = drop.DropOutcome(opened=["a.pt"], refused=[
        ("b.pt", "posterior", "“b.pt” was written by another version of bayescope."),
        ("c.png", "image", "the picture is empty"),
    ])
    title, text, details = drop.summary(outcome)
    assert text.splitlines() == ["Opened 1 of the 3 files dropped; these 2 were refused:",
                                 "• “b.pt” was written by another version of bayescope.",
                                 "• “c.png”: the picture is empty"]
    assert details == ""
    assert drop.summary(drop.DropOutcome(opened=["a.pt", "b.png"])) is None


def test_a_reason_that_starts_with_the_bare_name_names_it_once():
    assert drop.refusal_line("broken.png", "broken.png: not a readable image") == "“broken.png”: not a readable image"
    assert drop.refusal_line("a.pt", "“a.pt”: damaged") == "“a.pt”: damaged"


def test_files_are_sorted_by_suffix():
    assert [drop.kind_of(Path(n)) for n in ("x.PT", "y.jpeg", "z.WebP", "w.txt", "v")] == [
        "posterior", "image", "image", "other", "other"]


def test_files_named_on_the_command_line_are_counted_as_such():
    outcome = drop.DropOutcome(opened=["a.pt"], refused=[("b.txt", "other", "no")], given=drop.COMMAND_LINE)
    assert drop.summary(outcome)[1].splitlines()[0] == (
        "Opened 1 of the 2 files named on the command line; this one was refused:")
    alone = drop.DropOutcome(refused=[("b.txt", "other", "no"), ("c.txt", "other", "no")], given=drop.COMMAND_LINE)
    assert drop.summary(alone)[1].splitlines()[0] == "None of the 2 files named on the command line could be opened:"


def test_a_posterior_file_given_to_the_window_becomes_a_column(qtbot, monkeypatch, shared_data, dialogs):
    """``MainWindow(files=...)``, what `bayescope model.pt` passes: the file is a column beside
    the default ones, not an image that cannot be read."""
    from app.main import MainWindow
    from app.settings import default_columns

    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow(files=[str(MODELS / "paper_softmax_laplace.pt")])
    qtbot.addWidget(win)
    assert dialogs == []
    assert [Path(k).name for k in win.workspace.column_keys()] == [
        *(p.name for p in default_columns()), "paper_softmax_laplace.pt"]


def test_files_given_before_the_engine_is_loaded_wait_for_it(qtbot, monkeypatch, shared_data, dialogs):
    """At launch the window shows before the engine (torch) is loaded; files named then open once
    it is, after the columns are read, in order, and the status bar says so meanwhile."""
    from app.main import MainWindow

    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow(defer_columns=True)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    records = [c.key for c in win.workspace.columns]
    assert win.open_files([MODELS / "paper_softmax_laplace.pt", EXAMPLES / "digit-3.png"], drop.COMMAND_LINE) is None
    assert win.statusBar().currentMessage() == "2 files open once the posteriors are loaded…"
    assert [c.key for c in win.workspace.columns] == records and win.workspace.image is None
    win.load_columns()  # what the launcher does once the engine is imported
    assert [Path(c.key).name for c in win.workspace.columns][-1] == "paper_softmax_laplace.pt"
    assert all(c.ready for c in win.workspace.columns)
    assert win.current_panel() is win.image_panel
    qtbot.waitUntil(lambda: win.workspace.image is not None)  # read at the input's next tick
    assert win.files_waiting == [] and "once the posteriors are loaded" not in win.statusBar().currentMessage()
    assert dialogs == []
