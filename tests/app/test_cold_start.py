"""The columns at launch: shown from their files' records before the engine (torch) loads, saying
their numbers are coming; the weights read once it has, with the same words; nothing predicted
from records (issue 49, item 4: the default columns on the window within 1.5 s of a cold start)."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from app.main import MainWindow
from app.settings import default_columns
from app.views.column import WAITING_NOTE

LAUNCH = r"""
import gc, json, sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import app.__main__ as entry
from app.main import MainWindow

seen = {}

def header(window):
    views = [window.column_views[c.key] for c in window.workspace.columns]
    return {"ready": [c.ready for c in window.workspace.columns],
            "titles": [v.title.text() for v in views], "tips": [v.title.toolTip() for v in views],
            "verdicts": [v.verdict.text() for v in views], "visible": [v.isVisible() for v in views],
            "diagnostics": [v.diagnostics.isEnabled() for v in views]}

def check():
    window = next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow))
    if window.workspace.columns and all(c.ready for c in window.workspace.columns):
        seen["after"] = header(window)
        seen["reference"] = window.workspace.reference is not None
        # the long-lived objects are out of the collector's sight: a column's posterior is frozen
        posteriors = [c.posterior for c in window.workspace.columns]
        seen["frozen"] = gc.get_freeze_count()
        seen["posteriors_collectable"] = sum(any(o is p for o in gc.get_objects()) for p in posteriors)
        print(json.dumps(seen))
        window.close()
        QApplication.instance().quit()

shown = MainWindow.show
def show(self):
    shown(self)
    QApplication.processEvents()
    seen["torch"] = "torch" in sys.modules  # the engine's thread starts after show() returns
    seen["before"] = header(self)
    timer = QTimer(self, interval=10)
    timer.timeout.connect(check)
    timer.start()
MainWindow.show = show
sys.exit(entry.main([]))
"""


def test_the_default_columns_are_on_the_shown_window_before_torch_is_imported(fresh_interpreter):
    """Through the launcher, in a fresh interpreter: when the window shows (built without importing
    torch, which takes most of the start-up time), every default column is on it with its title and
    words and says its numbers are coming; the engine loads in the background and once the weights
    are in, the same titles and words, the note gone, the tier's reference found, and the objects
    alive then (torch, the posteriors) frozen out of the cyclic collector's walks."""
    seen = json.loads(fresh_interpreter(LAUNCH))
    before, after = seen["before"], seen["after"]
    assert seen["torch"] is False
    assert len(before["titles"]) == len(default_columns()) >= 4
    assert all(before["visible"]) and not any(before["ready"])
    assert before["verdicts"] == [WAITING_NOTE] * len(before["titles"])  # no stale or placeholder number
    assert not any(before["diagnostics"])
    assert "HMC, softmax regression" in before["titles"][0] and any("SGHMC" in t for t in before["titles"])
    assert before["titles"] == after["titles"] and before["tips"] == after["tips"]
    assert all(after["ready"]) and WAITING_NOTE not in after["verdicts"]
    from core.analysis.diagnostics import diagnostics_unavailable
    from core.engine.store import load_posterior

    assert after["diagnostics"] == [diagnostics_unavailable(load_posterior(p).info) is None for p in default_columns()]
    assert seen["reference"]
    # the cyclic collector no longer walks the engine on a stroke's update (305 ms a full collection)
    assert seen["frozen"] > 100_000 and seen["posteriors_collectable"] == 0


def _window(qtbot, monkeypatch, shared_data, paths=None) -> MainWindow:
    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow(None if paths is None else [str(p) for p in paths], defer_columns=True)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


def _stroke(qtbot, canvas) -> None:
    w, h = canvas.width(), canvas.height()
    qtbot.mousePress(canvas, Qt.MouseButton.LeftButton, pos=QPoint(w // 2, h // 5))
    for i in range(1, 9):
        qtbot.mouseMove(canvas, QPoint(w // 2, h // 5 + i * h // 14))
    qtbot.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=QPoint(w // 2, h * 4 // 5))


def test_a_digit_drawn_before_the_weights_are_in_is_judged_once_they_are(qtbot, monkeypatch, shared_data):
    win = _window(qtbot, monkeypatch, shared_data)
    columns = list(win.workspace.columns)
    assert columns and not any(c.ready for c in columns)
    _stroke(qtbot, win.canvas)
    qtbot.wait(150)  # the input is read at most once per frame
    assert win.workspace.image is not None
    assert all(c.prediction is None for c in columns)  # records never predict
    assert all(win.column_views[c.key].verdict.text() == WAITING_NOTE for c in columns)
    win.load_columns()  # what the launcher does once the engine is imported
    assert all(c.ready for c in win.workspace.columns)
    qtbot.waitUntil(lambda: all(c.prediction is not None for c in win.workspace.columns), timeout=60_000)
    assert all(WAITING_NOTE not in win.column_views[c.key].verdict.text() for c in win.workspace.columns)


def test_a_column_removed_before_its_weights_are_in_stays_removed_and_undo_reads_it(qtbot, monkeypatch,
                                                                                  shared_data):
    win = _window(qtbot, monkeypatch, shared_data)
    first = win.workspace.columns[0].key
    win.remove_column(first)
    win.load_columns()
    assert first not in win.workspace.column_keys() and all(c.ready for c in win.workspace.columns)
    win.undo_remove_column()
    assert win.workspace.column_keys()[0] == first and win.workspace.columns[0].ready


def test_a_file_whose_records_cannot_be_read_leaves_every_column_to_the_engine(qtbot, monkeypatch, shared_data,
                                                                            tmp_path):
    """All or none, so the columns keep their order; the damaged file is said as before."""
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"not a posterior")
    paths = [*default_columns()[:2], damaged]
    win = _window(qtbot, monkeypatch, shared_data, paths)
    assert not win.workspace.columns
    shown = []
    monkeypatch.setattr("PySide6.QtWidgets.QMessageBox.warning", lambda *a: shown.append(a[2]))
    win.load_columns()
    assert [Path(k) for k in win.workspace.column_keys()] == [p.resolve() for p in paths[:2]]
    assert shown and "damaged.pt" in shown[0]


def test_a_plot_asked_for_before_the_weights_are_in_is_said_to_be_coming(qtbot, monkeypatch, shared_data):
    win = _window(qtbot, monkeypatch, shared_data)
    told = []
    monkeypatch.setattr("PySide6.QtWidgets.QMessageBox.information", lambda *a: told.append(a[2]))
    win.exports.column_plot_dialog(win.workspace.columns[0].key, "histograms")
    assert told and "still being read" in told[0]


COLLECTIONS = r"""
import gc, json, sys, time
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import app.__main__ as entry
from app.main import MainWindow

kept = []
seen = {"before": [], "after": []}  # the cyclic collections begun, by generation, before and after the weights

def collected(phase, info):
    if phase == "start":
        window = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)
        columns = window.workspace.columns if window is not None else []
        seen["after" if columns and all(c.ready for c in columns) else "before"].append(info["generation"])
gc.callbacks.append(collected)

def check():
    window = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)
    if window is None or not window.workspace.columns or not all(c.ready for c in window.workspace.columns):
        return
    if "ready_at" not in seen:
        seen["ready_at"] = time.monotonic()
        kept.extend([] for _ in range(5000))  # past the youngest generation's threshold: its next tick collects
    seen["automatic"] = gc.isenabled()
    if seen["after"] or time.monotonic() - seen["ready_at"] > 5:
        del seen["ready_at"]
        print(json.dumps(seen))
        window.close()
        QApplication.instance().quit()

app = QApplication(sys.argv[:1])
timer = QTimer(interval=20)
timer.timeout.connect(check)
timer.start()
sys.exit(entry.main([]))
"""


def test_no_collection_walks_the_engine_while_it_imports_and_the_window_collects_once_it_is_in(fresh_interpreter):
    """Through the launcher: from the first line to the columns' weights in, no cyclic collection
    runs (each walked the objects the engine's import had made so far, 80–90 ms of the interpreter
    that the import waited for); once they are in, the window's own collector (automatic collection
    stays off: a worker thread must never collect a widget) collects again, on its timer."""
    seen = json.loads(fresh_interpreter(COLLECTIONS))
    assert seen["before"] == []
    assert seen["after"] and seen["automatic"] is False


def test_the_plots_stay_where_they_are_when_the_weights_arrive(qtbot, monkeypatch, shared_data):
    # the comparison line with exact inference comes only once the weights are in; its room is
    # kept from the start, so the plots do not jump down (about 70 px) as the columns fill
    win = _window(qtbot, monkeypatch, shared_data)
    win.resize(1600, 1000)
    qtbot.wait(50)

    def tops() -> list[tuple[int, int]]:
        QApplication.processEvents()
        return [(view.plots["histograms"].mapTo(win, QPoint(0, 0)).y(), view.plots["histograms"].height())
                for view in win.column_views.values()]

    assert not any(c.ready for c in win.workspace.columns)
    before = tops()
    win.load_columns()
    _stroke(qtbot, win.canvas)
    qtbot.waitUntil(lambda: all(c.prediction is not None for c in win.workspace.columns), timeout=60_000)
    assert any(win.workspace.reference_for(c) is not None for c in win.workspace.columns)
    assert tops() == before
