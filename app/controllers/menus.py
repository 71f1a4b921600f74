"""The window's menus as a table: each entry an id, a title, a shortcut, a tip and the handler
it calls with the window (napari declares its menus the same way, as ``Action`` records).
:func:`build_menus` makes the menu bar from :data:`MENUS`; adding an entry is one row here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

Shortcut = str | QKeySequence.StandardKey | None


@dataclass(frozen=True)
class MenuAction:
    """One menu entry: ``handler(window)`` runs when it is chosen."""

    id: str
    title: str
    handler: Callable[[Any], object]
    shortcut: Shortcut = None
    tip: str = ""


@dataclass(frozen=True)
class Submenu:
    """A menu the window fills itself when it opens (the posteriors to add, the devices):
    ``menu(window)`` returns it."""

    id: str
    title: str
    menu: Callable[[Any], QMenu]


#: A line between groups of entries.
SEPARATOR = None

Entry = MenuAction | Submenu | None


def _brush(window, step: int) -> None:
    brush = window.draw_panel.brush
    brush.setValue(brush.value() + step)


MENUS: tuple[tuple[str, tuple[Entry, ...]], ...] = (
    ("&File", (
        MenuAction("file.open_posterior", "Open posterior…", lambda w: w.open_posterior_dialog(),
                   QKeySequence.StandardKey.Open, "Add a column from a posterior file"),
        MenuAction("file.open_image", "Open image…", lambda w: w.open_image_dialog(), "Ctrl+I",
                   "Judge a picture of a digit"),
        SEPARATOR,
        MenuAction("file.export_comparison", "Export comparison…", lambda w: w.exports.comparison_dialog(), "Ctrl+E",
                   "Write every column's plots, the numbers behind them and where each posterior comes from "
                   "into one folder"),
        MenuAction("file.save_picture", "Save window picture…", lambda w: w.exports.screenshot_dialog(),
                   "Ctrl+Shift+E"),
        SEPARATOR,
        MenuAction("file.data_folder", "Choose data folder…", lambda w: w.data.choose_folder(),
                   tip="The one data folder, holding “mnist”, “notmnist” and “utkface”: read by the Rotate "
                       "and Dataset tabs and the training dialog"),
        SEPARATOR,
        MenuAction("file.quit", "Quit", lambda w: w.close(), QKeySequence.StandardKey.Quit),
    )),
    ("&Edit", (
        MenuAction("edit.undo", "Undo stroke", lambda w: w.undo(), QKeySequence.StandardKey.Undo,
                   "Undo the last stroke, or bring back the column removed last"),
        MenuAction("edit.clear", "Clear drawing", lambda w: w.clear_drawing(), "Delete"),
        MenuAction("edit.bigger_brush", "Bigger brush", lambda w: _brush(w, 4), "]"),
        MenuAction("edit.smaller_brush", "Smaller brush", lambda w: _brush(w, -4), "["),
    )),
    ("&View", (
        MenuAction("view.draw", "Draw mode", lambda w: w.modes.setCurrentWidget(w.draw_panel), "Ctrl+1"),
        MenuAction("view.rotate", "Rotate mode", lambda w: w.modes.setCurrentWidget(w.rotate_panel), "Ctrl+2"),
        MenuAction("view.image", "Image mode", lambda w: w.modes.setCurrentWidget(w.image_panel), "Ctrl+3"),
        MenuAction("view.face", "Face mode", lambda w: w.modes.setCurrentWidget(w.face_panel), "Ctrl+4"),
        SEPARATOR,
        MenuAction("view.this_input", "This input", lambda w: w.views.setCurrentIndex(0), "Alt+1"),
        MenuAction("view.sweep", "Sweep", lambda w: w.views.setCurrentIndex(1), "Alt+2"),
        MenuAction("view.dataset", "Dataset", lambda w: w.views.setCurrentIndex(2), "Alt+3"),
        MenuAction("view.clear_cache", "Clear cached evaluations", lambda w: w.dataset_view.clear_cache(),
                   tip="Forget the Dataset tab's stored results; the next evaluation recomputes them"),
        SEPARATOR,
        Submenu("view.device", "Compute on", lambda w: w.device_menu),
        MenuAction("view.run_sweep", "Run the sweep", lambda w: w.run_sweep(), "Ctrl+R",
                   "Rotate the Rotate tab's image from 0° to 180° (or corrupt it at severities 0–5, as its Sweep "
                   "choice says) and plot every column against the angle or the severity"),
    )),
    ("&Posterior", (
        Submenu("posterior.add", "Add posterior", lambda w: w.add_menu),
        MenuAction("posterior.train", "Train a posterior…", lambda w: w.show_training_dialog(), "Ctrl+T"),
    )),
    ("&Help", (
        MenuAction("help.contents", "How to read this window", lambda w: w.show_help(),
                   QKeySequence.StandardKey.HelpContents),
        MenuAction("help.about", "About bayescope", lambda w: w.show_about()),
    )),
)


def build_menus(window: QMainWindow, menus: tuple[tuple[str, tuple[Entry, ...]], ...] = MENUS) -> dict[str, QAction]:
    """Add ``menus`` to the window's menu bar; return every entry's action by its id."""
    actions: dict[str, QAction] = {}
    for title, entries in menus:
        menu = window.menuBar().addMenu(title)
        for entry in entries:
            if entry is SEPARATOR:
                menu.addSeparator()
            elif isinstance(entry, Submenu):
                action = menu.addMenu(entry.menu(window))
                action.setText(entry.title)
                actions[entry.id] = action
            else:
                actions[entry.id] = _add_action(window, menu, entry)
    return actions


def _add_action(window: QMainWindow, menu: QMenu, entry: MenuAction) -> QAction:
    action = QAction(entry.title, window)
    if entry.shortcut is not None:
        action.setShortcut(QKeySequence(entry.shortcut))
        # the shortcut works wherever the focus is in the window, as the menu promises
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    if entry.tip:
        action.setStatusTip(entry.tip)
    action.triggered.connect(lambda _checked=False, handler=entry.handler: handler(window))
    menu.addAction(action)
    return action
