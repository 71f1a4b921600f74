"""What the window keeps between launches: its size and place, the brush, the number of draws
and the interval, the mode, and each task's columns. Every change is saved as it happens (a
crash keeps what the person set up); each task's posteriors are read only when its tab first
opens, and last time's files that are gone or unreadable are said once in the status bar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer

from app import settings as app_settings
from app.views.columns import EMPTY_NOTE

#: Where the columns of each task are remembered between launches.
SAVED_COLUMNS = {"digits": "workspace/columns", "faces": "workspace/face_columns", "images": "workspace/image_columns"}
#: How long the window's size and place must rest before they are saved.
GEOMETRY_SAVE_MS = 500
LOADING_NOTE = "Loading the posteriors… (you can draw meanwhile)"


def missing_columns_note(gone: list[str], failed: list[str], defaults: bool, last_time: bool = True) -> str:
    """One sentence for the status bar: the posteriors of last time (or the default ones) that
    are not shown, and why."""
    def names(files: list[str]) -> str:
        quoted = [f"“{name}”" for name in files]
        return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]

    parts = []
    if gone:
        parts.append(f"{names(gone)} {'is' if len(gone) == 1 else 'are'} no longer there")
    if failed:
        parts.append(f"{names(failed)} could not be opened")
    after = "; the default posteriors are shown instead." if defaults else "; the rest are shown."
    return ("Of last time's posteriors, " if last_time else "Of the default posteriors, ") + " and ".join(parts) + after


class WindowSession(QObject):
    """``unread``: the posterior files per task not read yet; ``loading``: columns are being
    read (nothing is saved meanwhile); ``ready``: the settings were read back (saving may start)."""

    def __init__(self, window: Any) -> None:
        """``window``: the main window (app.main sits above this layer, hence not named)."""
        super().__init__(window)
        self.window = window
        self.unread: dict[str, list[Path]] = {}
        self.from_last_time: set[str] = set()
        self.allowed = False  # columns are read only once the engine is loaded (load_columns)
        self.asked = False  # asked for on the command line: failures get a dialog
        self.ready = False  # nothing is saved before the settings were read back
        self.loading = False
        #: The keys of the columns shown from their files' records (:meth:`show_records`).
        self.shown_as_records: set[str] = set()
        self.geometry_timer = QTimer(self, singleShot=True, interval=GEOMETRY_SAVE_MS)
        self.geometry_timer.timeout.connect(self.save_state)

    def restore(self, posteriors: list[str] | None) -> None:
        """Every value read back is checked (``app.settings.read_*``): a value that is not
        what this window would have written gives way to its default, never to an error."""
        w = self.window
        geometry = app_settings.read_bytes("window/geometry")
        if geometry is None or not w.restoreGeometry(geometry):
            free = w.screen().availableGeometry()  # first launch: 1400×860, or the free area
            w.resize(min(1400, free.width()), min(860, free.height()))
        brush = w.draw_panel.brush
        brush.setValue(app_settings.read_int("draw/brush", w.canvas.brush_size, brush.minimum(), brush.maximum()))
        for box, key in ((w.samples, "sampling/samples"), (w.level, "sampling/level")):
            box.blockSignals(True)
            box.setValue(app_settings.read_int(key, box.value(), box.minimum(), box.maximum()))
            box.blockSignals(False)
        w.workspace.set_sampling(w.samples.value(), w.level.value() / 100)
        saved = {task: [app_settings.resolve_reference(r) for r in app_settings.read_list(key)]
                 for task, key in SAVED_COLUMNS.items()}
        self.unread = {"digits": saved["digits"] or app_settings.default_columns(),
                       "faces": saved["faces"] or app_settings.default_face_columns(),
                       "images": saved["images"]}
        if posteriors:
            self.unread["digits"] = [Path(p) for p in posteriors]
        # Tasks whose columns come from last time: a file gone since is said once, then forgotten.
        self.from_last_time = {task for task in SAVED_COLUMNS if saved[task]} - ({"digits"} if posteriors else set())
        w.workspace.unread_tasks = {task for task, unread in self.unread.items() if unread}
        self.asked = bool(posteriors)
        w.modes.setCurrentIndex(app_settings.read_int("workspace/mode", 0, 0, w.modes.count() - 1))

    def show_records(self) -> None:
        """Before the engine loads: show the digit columns from their files' records (titles,
        words, empty plots that say their numbers are coming), their weights read by
        :meth:`read_columns`. All or none: a file whose records cannot be read this way (gone,
        damaged, not plainly a digit posterior) leaves every column to the engine, in order."""
        from app.workspace import reads_digits
        from core.engine.store_records import RecordsUnreadable, read_records

        w, task = self.window, "digits"
        if self.allowed or w.workspace.task != task or not self.unread.get(task):
            return
        paths = self.unread[task]
        try:
            records = [read_records(path) for path in paths]
        except (RecordsUnreadable, OSError):
            return
        if not all(map(reads_digits, records)):
            return
        self.loading = True
        try:
            for path, found in zip(paths, records, strict=True):
                self.shown_as_records.add(w.workspace.add_records(path, found).key)
        except ValueError:  # more than fit, or other classes: the engine reads them and says why
            w.workspace.columns_of(task).clear()
            self.shown_as_records.clear()
            w.workspace.columns_changed.emit()
        finally:
            self.loading = False

    def read_columns(self, task: str) -> None:
        """Open ``task``'s posteriors if they were not yet (once the engine is loaded)."""
        w = self.window
        if not self.allowed or task not in self.unread:
            return
        shown = {c.key for c in w.workspace.columns_of(task)}
        # a column shown from its records and removed meanwhile stays removed
        paths = [p for p in self.unread.pop(task) if str(p.expanduser().resolve()) in shown
                 or str(p.expanduser().resolve()) not in self.shown_as_records]
        from_last_time = task in self.from_last_time
        if paths:
            w.empty_note.setText(LOADING_NOTE)
            w.empty_note.repaint()  # say so before the weights are read
        self.loading = True
        try:
            gone = [path.name for path in paths if from_last_time and not path.exists()]
            failed = [path.name for path in paths if not (from_last_time and not path.exists())
                      and not w.add_posterior(path, quiet=not self.asked)]
            defaults = from_last_time and (gone or failed) and not w.workspace.columns_of(task)
            if defaults:
                defaults_of = {"digits": app_settings.default_columns, "faces": app_settings.default_face_columns}
                for path in defaults_of[task]() if task in defaults_of else []:
                    w.add_posterior(path, quiet=True)
        finally:
            self.loading = False
        w.empty_note.setText(EMPTY_NOTE)
        w.workspace.columns_read(task)
        if (gone or failed) and not self.asked:
            w.statusBar().showMessage(missing_columns_note(gone, failed, bool(defaults), from_last_time), 20_000)
        self.save_state()  # what could not be opened is said once, not at every start

    def save_state(self) -> None:
        """Save the window's state as it changes (columns, samples, interval, mode, brush):
        a crash or a killed process keeps what the person set up."""
        if self.ready and not self.loading:
            self.save()

    def save(self) -> None:
        w = self.window
        s = app_settings.settings()
        s.setValue("window/geometry", w.saveGeometry())
        s.setValue("draw/brush", w.draw_panel.brush.value())
        s.setValue("sampling/samples", w.samples.value())
        s.setValue("sampling/level", w.level.value())
        for task, key in SAVED_COLUMNS.items():
            unread = self.unread.get(task)  # a tab never opened keeps last time's columns
            # A column whose posterior failed on its input is not reopened at the next start.
            paths = unread if unread is not None else [c.key for c in w.workspace.columns_of(task) if c.failure is None]
            s.setValue(key, [app_settings.column_reference(p) for p in paths])
        s.setValue("workspace/mode", w.modes.currentIndex())
        s.sync()

    def geometry_changed(self) -> None:
        if self.ready:
            self.geometry_timer.start()  # saved once the size and place rest

    def close(self) -> None:
        """Save once more; a closed window saves nothing after (a new one may be reading)."""
        self.save()
        self.geometry_timer.stop()
        self.ready = False
