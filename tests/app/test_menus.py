"""The menus built from the table in app.controllers.menus hold the entries and shortcuts the
window had when it built them by hand (the expected list is read off that code, not dumped)."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence

SEPARATOR = "—"


def key(standard: QKeySequence.StandardKey) -> str:
    return QKeySequence(standard).toString(QKeySequence.SequenceFormat.PortableText)


def expected() -> list:
    """(menu title, [(entry title, shortcut or ""), SEPARATOR, ("▸ submenu", "")]) as app/main.py's
    _build_menus declared them before the table (a function: a standard key needs the application)."""
    return [
    ("&File", [("Open posterior…", key(QKeySequence.StandardKey.Open)), ("Open image…", "Ctrl+I"), SEPARATOR,
               ("Export comparison…", "Ctrl+E"), ("Save window picture…", "Ctrl+Shift+E"), SEPARATOR,
               ("Choose data folder…", ""), SEPARATOR, ("Quit", key(QKeySequence.StandardKey.Quit))]),
    ("&Edit", [("Undo stroke", key(QKeySequence.StandardKey.Undo)), ("Clear drawing", "Del"),
               ("Bigger brush", "]"), ("Smaller brush", "[")]),
    ("&View", [("Draw mode", "Ctrl+1"), ("Rotate mode", "Ctrl+2"), ("Image mode", "Ctrl+3"), ("Face mode", "Ctrl+4"),
               SEPARATOR, ("This input", "Alt+1"), ("Sweep", "Alt+2"), ("Dataset", "Alt+3"),
               ("Clear cached evaluations", ""), SEPARATOR, ("▸ Compute on", ""),
               ("Run the sweep", "Ctrl+R")]),
    ("&Posterior", [("▸ Add posterior", ""), ("Train a posterior…", "Ctrl+T")]),
    ("&Help", [("How to read this window", key(QKeySequence.StandardKey.HelpContents)), ("About bayescope", "")]),
    ]


def entries(menu) -> list:
    out = []
    for action in menu.actions():
        if action.isSeparator():
            out.append(SEPARATOR)
        elif action.menu() is not None:
            out.append((f"▸ {action.text()}", ""))
        else:
            out.append((action.text(), action.shortcut().toString(QKeySequence.SequenceFormat.PortableText)))
    return out


def test_menus_hold_the_same_entries_and_shortcuts_as_before(window):
    bar = window.menuBar()
    menus = [(a.text(), entries(a.menu())) for a in bar.actions() if a.menu() is not None]
    assert menus == expected()


def test_status_tips_kept(window):
    tips = {a.text(): a.statusTip() for m in window.menuBar().actions() if m.menu() for a in m.menu().actions()}
    assert tips["Open posterior…"] == "Add a column from a posterior file"
    assert tips["Open image…"] == "Judge a picture of a digit"
    assert tips["Undo stroke"] == "Undo the last stroke, or bring back the column removed last"
    assert tips["Clear cached evaluations"] == "Forget the Dataset tab's stored results; the next evaluation recomputes them"
    assert tips["Run the sweep"].startswith("Rotate the Rotate tab's image from 0° to 180°")
    assert tips["Choose data folder…"].startswith("The one data folder")


def test_shortcuts_act_on_the_whole_window(window):
    from PySide6.QtCore import Qt

    for menu in window.menuBar().actions():
        for action in menu.menu().actions():
            if not action.shortcut().isEmpty():
                assert action.shortcutContext() == Qt.ShortcutContext.WindowShortcut, action.text()


def test_menu_entries_reach_their_handlers(qtbot, window):
    actions = {a.text(): a for m in window.menuBar().actions() if m.menu() for a in m.menu().actions()}
    actions["Dataset"].trigger()
    assert window.views.currentIndex() == 2
    actions["Face mode"].trigger()
    assert window.current_panel() is window.face_panel
    actions["Draw mode"].trigger()
    brush = window.draw_panel.brush.value()
    actions["Bigger brush"].trigger()
    assert window.draw_panel.brush.value() == min(brush + 4, window.draw_panel.brush.maximum())
