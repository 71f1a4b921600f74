"""The columns on “This input”: one :class:`~app.views.column.ColumnView` per posterior of the
workspace, in its order, their titles and warnings given the same room so that their plots line
up, a note in words while there is none; the bar above them (add a posterior, draws, interval)
and the status bar's “Removed X — Undo”."""

from __future__ import annotations

from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSpinBox,
    QToolButton,
    QWidget,
)

from app.views.column import ColumnView
from app.views.rich_lines import RichLines
from core.engine import tiers

if TYPE_CHECKING:
    from app.workspace import Workspace

#: How long “Removed X — Undo” stays in the status bar.
REMOVED_NOTE_MS = 20_000
EMPTY_NOTE = "No posterior yet: add one with “Add posterior”, open a file (Ctrl+O) or train one (Ctrl+T)."


def trusted_for(workspace: Workspace, column) -> str | None:
    """The shown column to read instead of ``column`` should its chains disagree: its set's
    reference (exact inference), when that is a column and its own chains converged."""
    ref = workspace.reference_for(column)
    if ref is None or ref.key not in workspace.column_keys():
        return None
    name = tiers.reference_words(ref.posterior.info)[0]
    return name if name.startswith("Exact") else None


class ColumnsPanel(QScrollArea):
    """Signals (each a column's own, with its key)
    -------
    remove_requested(str), move_requested(str, int), export_requested(str, str), diagnostics_requested(str),
    calibrate_requested(str)
    """

    remove_requested = Signal(str)
    move_requested = Signal(str, int)
    export_requested = Signal(str, str)
    diagnostics_requested = Signal(str)
    calibrate_requested = Signal(str)
    #: A column's term was clicked: open the Help paragraph of this anchor.
    help_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        #: The column widgets by the workspace's column key.
        self.views: dict[str, ColumnView] = {}
        # Columns whose latest prediction arrived while another tab was in front: fed when this
        # one shows again (showEvent), from the workspace as it is then.
        self._unfed: set[str] = set()
        self._unfed_workspace: Workspace | None = None
        # per column key: what decided its trusted column and reference, and the two (see _reference_of)
        self._references: dict[str, tuple[tuple, list[str], str | None, object | None]] = {}
        self.row = QHBoxLayout()
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(4)
        self.empty_note = QLabel(EMPTY_NOTE)
        self.empty_note.setWordWrap(True)
        self.empty_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.row.addWidget(self.empty_note)
        inner = QWidget()
        inner.setLayout(self.row)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setWidget(inner)

    def show_columns(self, workspace: Workspace) -> None:
        """Match the widgets to the workspace's columns: new ones made, gone ones dropped, order kept."""
        keys = workspace.column_keys()
        for key in list(self.views):
            if key not in keys:
                view = self.views.pop(key)
                self._references.pop(key, None)  # nor its posterior kept alive by the memo
                self.row.removeWidget(view)
                view.hide()  # at once: deleteLater waits for the event loop
                view.deleteLater()
        for i, column in enumerate(workspace.columns):
            view = self.views.get(column.key)
            if view is None:
                view = ColumnView(column.key, workspace.class_names)
                view.remove_requested.connect(self.remove_requested)
                view.move_requested.connect(self.move_requested)
                view.export_requested.connect(self.export_requested)
                view.diagnostics_requested.connect(self.diagnostics_requested)
                view.calibrate_requested.connect(self.calibrate_requested)
                view.help_requested.connect(self.help_requested)
                view.width_changed.connect(self.align_heads)
                view.labels_fitted.connect(self._align_labels_soon)
                self.views[column.key] = view
            self.row.removeWidget(view)
            self.row.insertWidget(i, view, 1)
            view.set_header(column, workspace.num_samples, trusted_for(workspace, column))
            view.set_place(i, len(workspace.columns))
        # while any column says its chains disagree, all keep that room: plots stay aligned
        # (the room of the tallest of their warnings, so that none is cut and none is padded)
        reserve = [view.warning for view in self.views.values() if view.warning]
        marked = (any(workspace.reference_for(c) is not None for c in workspace.columns)
                  or workspace.reference_expected())
        for view in self.views.values():
            view.reserve_warning_room(reserve)
            view.reserve_reference_room(marked)
        self.align_heads()
        self.align_labels()
        self.empty_note.setVisible(not keys)

    def show_headers(self, workspace: Workspace) -> None:
        """Every column's header again (after the number of draws changed)."""
        for column in workspace.columns:
            view = self.views.get(column.key)
            if view is not None:
                view.set_header(column, workspace.num_samples, trusted_for(workspace, column))
        self.align_heads()  # a title's draw count may wrap it to another number of lines

    def show_prediction(self, workspace: Workspace, key: str) -> None:
        """Draw the column ``key``'s latest prediction, with its tier's reference marked; while
        another tab is in front, once this one shows again (a stroke drawn beside the Sweep or
        Dataset tab fed four columns' plots and words nobody saw: 4.8 ms of its update)."""
        if self.isHidden():  # only ever hidden by its tab widget, which shows it again
            self._unfed.add(key)
            self._unfed_workspace = workspace
            return
        column = workspace.column(key)
        view = self.views.get(key)
        if column is not None and view is not None:
            trusted, reference = self._reference_of(workspace, column)
            view.set_header(column, workspace.num_samples, trusted)
            view.show_column(column, workspace.class_names, workspace.level,
                             full=column.samples(workspace.num_samples),
                             reference=None if reference is None else reference.prediction,
                             reference_info=None if reference is None else reference.posterior.info)

    def _reference_of(self, workspace: Workspace, column) -> tuple[str | None, object | None]:
        """:func:`trusted_for` and the column's reference (``Workspace.reference_for``), found
        again only when what decides them is another: the column's posterior, the reference
        column (a new object whenever the reference changes) and its posterior, and the columns
        shown. A stroke asked for both on every prediction of every column (tiers compared, the
        reference's convergence put in words)."""
        ref = workspace.reference
        # compared by identity (a posterior is not compared by value), the keys by value
        decided_by = (column.posterior, ref, None if ref is None else ref.posterior)
        shown = workspace.column_keys()
        kept = self._references.get(column.key)
        if (kept is not None and kept[1] == shown
                and all(a is b for a, b in zip(kept[0], decided_by, strict=True))):
            return kept[2], kept[3]
        found = (trusted_for(workspace, column), workspace.reference_for(column))
        self._references[column.key] = (decided_by, shown, *found)
        return found

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        unfed, workspace = self._unfed, self._unfed_workspace
        self._unfed, self._unfed_workspace = set(), None
        if workspace is not None:
            for column in list(workspace.columns):
                if column.key in unfed:
                    self.show_prediction(workspace, column.key)

    def fed_together(self):
        """A block in which the columns are fed one request's predictions: their verdicts are laid
        out together when it ends (:meth:`RichLines.together`)."""
        return RichLines.together()

    def set_calibrating(self, key: str | None) -> None:
        """Column ``key``'s conformal sets are being calibrated (None: no column's): its menu entry
        stops it, the others' wait for it."""
        for view_key, view in self.views.items():
            view.set_calibrating(None if key is None else view_key == key)

    def clear_columns(self, message: str) -> None:
        """Empty every column, saying ``message`` (what to do to give them an input)."""
        self._unfed.clear()  # what they were to show is gone with the input
        for view in self.views.values():
            view.clear_column(message)

    def _align_labels_soon(self) -> None:
        """Once the resizes of this turn of the event loop are done: every column's plots resize
        together, and the row agrees on their labels once."""
        if not getattr(self, "_labels_pending", False):
            self._labels_pending = True
            QTimer.singleShot(0, self.align_labels)

    def align_labels(self) -> None:
        """Every column labels the same classes on each plot's class axes: the sparsest of their
        own choices (a row read across must not say 0 2 4 6 8 in one column and 0–9 in the next)."""
        from app.plots.axes import sparsest

        self._labels_pending = False
        views = [view for view in self.views.values() if shiboken6.isValid(view)]
        if not views:
            return
        for key in views[0].plots:
            plots = [view.plots[key] for view in views]
            owns = [plot.own_choices() for plot in plots]
            agreed = {side: sparsest([own.get(side) for own in owns], side == "bottom") for side in owns[0]}
            for plot in plots:
                plot.set_row_choices(agreed)

    def align_heads(self) -> None:
        """Every column's title and verdict get the room of the row's tallest: a title that wraps
        to three lines in a narrow column, or a verdict room a line taller, would otherwise start
        its plots below its neighbours'."""
        views = list(self.views.values())
        height = max((view.title_height() for view in views), default=0)
        room = max((view.verdict_room_height() for view in views), default=0)
        for view in views:
            view.set_title_room(height)
            view.set_verdict_room(room)


class ColumnsBar(QWidget):
    """The row above the columns: “Add posterior” (``add_menu``), how many draws judge the input
    (``samples``), the credible interval's level (``level``) and what is judged (``input_label``)."""

    def __init__(self, add_menu: QMenu, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.samples = QSpinBox(minimum=1, maximum=1000, value=100, singleStep=10)
        self.samples.setToolTip(
            "How many posterior draws (plausible models) judge the input. MC dropout and the "
            "variational posteriors draw as many as asked; sampled posteriors (SGHMC, HMC ...) "
            "hold a fixed set and use at most that many: their column header says how many."
        )
        self.level = QSpinBox(minimum=50, maximum=99, value=90, suffix=" %")
        self.level.setToolTip("Credible interval: the range that holds this share of the draws, per class")
        self.add_button = QToolButton(text="Add posterior")
        self.add_button.setToolTip("Add a column: a bundled posterior, one you trained, or a file (Ctrl+O)")
        self.add_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.add_menu = add_menu
        add_menu.setParent(self.add_button, add_menu.windowFlags())
        self.add_button.setMenu(add_menu)
        self.input_label = QLabel()
        self.input_label.setObjectName("inputLabel")
        top = QHBoxLayout(self)
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.add_button)
        top.addSpacing(12)
        top.addWidget(QLabel("Samples"))
        top.addWidget(self.samples)
        top.addWidget(QLabel("Interval"))
        top.addWidget(self.level)
        top.addSpacing(12)
        top.addWidget(self.input_label, 1)


class RemovedNote(QWidget):
    """“Removed X — Undo” beside the status bar's messages (a message would hide a plain widget);
    it goes after ``REMOVED_NOTE_MS``.

    Signals
    -------
    undo_requested
        Undo was clicked: bring the column back.
    """

    undo_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.note = QLabel()
        self.undo_button = QToolButton(text="Undo")
        self.undo_button.setToolTip("Bring the removed column back at its place (Ctrl+Z)")
        self.undo_button.clicked.connect(self.undo_requested)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.note)
        row.addWidget(self.undo_button)
        self.hide()
        self._timer = QTimer(self, singleShot=True, interval=REMOVED_NOTE_MS)
        self._timer.timeout.connect(self.hide)

    def show_removed(self, title: str) -> None:
        """Say that the column ``title`` was removed, with Undo, for a while."""
        self.note.setText(f"Removed “{title}”")
        self.show()
        self._timer.start()
