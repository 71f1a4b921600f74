"""The Dataset tab's two tables of one posterior's column, each fed a
:class:`core.analysis.dataset.ColumnViews`: its summary numbers (:class:`MetricsTable`) and the
AUROC of every score on every out-of-distribution set (:class:`OodSetsTable`).

Like the plots beside them (:mod:`app.plots.dataset_plots`), each has a ``view_key`` and a context
menu whose "Export…" emits ``export_requested(view_key)``, and a tooltip in plain words on every
number; nothing here computes a statistic.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QMenu,
    QTableWidget,
    QTableWidgetItem,
)

from app.help import DATASET_TERMS
from core.analysis.dataset import SCORE_WORDS, ColumnViews
from core.analysis.ood_sets import AUROC_WORDS


class MetricsTable(QTableWidget):
    """The summary numbers of one posterior, a plain-words tooltip on every row."""

    export_requested = Signal(str)
    view_key = "summary"

    ROWS: tuple[tuple[str, str], ...] = (
        ("Accuracy", "Share of the test images whose most probable class is the true one."),
        ("Log loss", DATASET_TERMS["Log loss"].tooltip),
        ("Brier", DATASET_TERMS["Brier"].tooltip),
        ("ECE", DATASET_TERMS["ECE"].tooltip),
        ("Classwise ECE", DATASET_TERMS["Classwise ECE"].tooltip),
        ("SmoothECE", DATASET_TERMS["SmoothECE"].tooltip),
        ("Set size", DATASET_TERMS["Set size"].tooltip),
        ("Set coverage", DATASET_TERMS["Set coverage"].tooltip),
        ("Guaranteed", DATASET_TERMS["Guaranteed"].tooltip),
        ("Uncertain", "Share of the test images whose two most likely classes overlap in the draws "
                             "(Bhattacharyya coefficient above 0.5): the posterior cannot tell them apart."),
        ("Draws", "How many posterior draws (plausible models) judged each image."),
        ("Chains", DATASET_TERMS["Chains"].tooltip),
        ("AUROC", DATASET_TERMS["AUROC"].tooltip),
        ("AUPR", DATASET_TERMS["AUPR"].tooltip),
    )

    ROW_HEIGHT = 19
    WIDEST_NUMBER = "100–100.0 %"  # the widest value: a guaranteed range ("90–90.0 %") or "100.00 %"

    def __init__(self) -> None:
        super().__init__(0, 0)
        self.setToolTip("The posterior's scores on the whole test set; hover a row for what it means.")
        self.horizontalHeader().hide()
        self.verticalHeader().hide()
        self.verticalHeader().setDefaultSectionSize(self.ROW_HEIGHT)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setShowGrid(False)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._names: list[QTableWidgetItem] = []
        self._values: dict[str, QTableWidgetItem] = {}
        for label, tip in self.ROWS:
            name = QTableWidgetItem(label)
            name.setToolTip(tip)
            value = QTableWidgetItem(self.WIDEST_NUMBER)  # measured with it (below), then emptied
            value.setToolTip(tip)
            value.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self._names.append(name)
            self._values[label] = value
        self._ood_shown = True
        # Two measures a row where the names fit whole beside the widest numbers, else one: a
        # name or a number is never cut.
        self._pairs = 0
        self._widths = {pairs: self._arrange(pairs) for pairs in (1, 2)}
        for value in self._values.values():
            value.setText("")
        self.setMinimumWidth(self._widths[1])
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._on_context_menu_requested)

    def _arrange(self, pairs: int) -> int:
        """Lay the measures out ``pairs`` to a row; return the narrowest width showing them whole."""
        if pairs == self._pairs:
            return self._widths[pairs]
        for row in range(self.rowCount()):
            for c in range(self.columnCount()):
                self.takeItem(row, c)
        self._pairs = pairs
        self.setRowCount((len(self.ROWS) + pairs - 1) // pairs)
        self.setColumnCount(2 * pairs)
        for i, (label, _) in enumerate(self.ROWS):
            self.setItem(i // pairs, 2 * (i % pairs), self._names[i])
            self.setItem(i // pairs, 2 * (i % pairs) + 1, self._values[label])
        header = self.horizontalHeader()
        for c in range(0, 2 * pairs, 2):  # the names whole; the numbers share what is left, right-aligned
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
            header.setSectionResizeMode(c + 1, QHeaderView.ResizeMode.Stretch)
        self._fit_height()
        names = sum(self.sizeHintForColumn(c) for c in range(0, 2 * pairs, 2))
        number = max(self.sizeHintForColumn(c) for c in range(1, 2 * pairs, 2))
        return names + pairs * number + 2 * self.frameWidth()

    def _fit_height(self) -> None:
        ood_rows = 2 // self._pairs  # AUROC and AUPR: the last row, or the last two
        for row in range(self.rowCount()):
            self.setRowHidden(row, not self._ood_shown and row >= self.rowCount() - ood_rows)
        shown = sum(not self.isRowHidden(r) for r in range(self.rowCount()))
        self.setFixedHeight(self.ROW_HEIGHT * shown + 4)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        pairs = 2 if event.size().width() >= self._widths[2] else 1
        if pairs != self._pairs:
            self._arrange(pairs)
        super().resizeEvent(event)

    def _on_context_menu_requested(self, pos: QPoint) -> None:
        menu = QMenu(self)
        menu.addAction("Export every column's metrics (CSV, JSON)…", lambda: self.export_requested.emit(self.view_key))
        menu.exec(self.mapToGlobal(pos))

    def _value_item(self, label: str) -> QTableWidgetItem:
        return self._values[label]

    def value(self, label: str) -> str:
        """The text shown for the measure ``label`` (one of :attr:`ROWS`)."""
        return self._value_item(label).text()

    def show_column(self, column: ColumnViews, score: str) -> None:
        s = column.summary
        result = column.ood.get(score)
        values = {
            "Accuracy": _percent(s["accuracy"], 2),
            "Log loss": _number(s["nll"]),
            "Brier": _number(s["brier"]),
            "ECE": _number(s["ece"]),
            "Classwise ECE": _number(s["classwise_ece"]),
            "SmoothECE": _number(s.get("smooth_ece")),
            "Set size": "–" if s.get("conformal_set_size") is None else f"{s['conformal_set_size']:.2f}",
            "Set coverage": _percent(s.get("conformal_coverage"), 1),
            "Guaranteed": ("–" if s.get("conformal_guaranteed_lower") is None else
                           f"{s['conformal_guaranteed_lower'] * 100:.1f}–{s['conformal_guaranteed_upper'] * 100:.2f} %"),
            "Uncertain": _percent(s["uncertain_fraction"], 1),
            "Draws": f"{s['samples']:,}",
            "Chains": f"{s['chains']:,}",
            "AUROC": (_number(result["auroc"]) if result["auroc"] is not None else "n/a") if result else "–",
            "AUPR": (_number(result["aupr_out"]) if result["aupr_out"] is not None else "n/a") if result else "–",
        }
        for label, _ in self.ROWS:
            self._value_item(label).setText(values[label])
        self._ood_shown = result is not None  # AUROC and AUPR
        self._fit_height()


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def _percent(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value * 100:.{digits}f} %"


#: The scores of the AUROC table, in the fewest words that still say which (rows of the table).
OOD_TABLE_SCORES: dict[str, str] = {
    "total": "total",
    "aleatoric": "aleatoric",
    "epistemic": "epistemic",
    "epistemic_variance": "variance",
    "one_minus_max_prob": "1 − top p",
    "top_two_overlap": "overlap",
}
#: Known sets' names short enough for a column header (others: the folder's name).
SHORT_SET_NAMES = {"notmnist-test": "letters", "notmnist": "letters", "mnist-inverted": "inverted",
                   "mnist-test": "digits"}
BEST_BACKGROUND = (216, 236, 216)


class OodSetsTable(QTableWidget):
    """The AUROC of every score (rows) on every out-of-distribution set (columns) of one posterior;
    the best of the columns shown for that score on that set in bold on green.

    Reading across the posteriors' columns row by row shows whether the best posterior for a
    score stays the same from one unfamiliar set to another.
    """

    export_requested = Signal(str)
    view_key = "ood_sets"
    ROW_HEIGHT = 19

    def __init__(self) -> None:
        super().__init__(0, 0)
        self.setToolTip("How well each uncertainty score tells each unfamiliar set from the test images. "
                        + AUROC_WORDS + " In bold on green: the best of the columns for that score on that set.")
        # a little smaller than the metrics above: three sets' numbers whole in a column's width
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 0.9)
        self.setFont(font)
        self.horizontalHeader().setFont(font)
        self.verticalHeader().setFont(font)
        self.setStyleSheet("QTableWidget::item { padding: 0px; } QHeaderView::section { padding: 0px 1px; }")
        self.verticalHeader().setDefaultSectionSize(self.ROW_HEIGHT)
        self.horizontalHeader().setDefaultSectionSize(self.ROW_HEIGHT)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.horizontalHeader().setTextElideMode(Qt.TextElideMode.ElideRight)
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.horizontalHeader().setMinimumSectionSize(20)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._on_context_menu_requested)

    def _on_context_menu_requested(self, pos: QPoint) -> None:
        menu = QMenu(self)
        menu.addAction("Export every column's AUROC per set (CSV, JSON)…",
                       lambda: self.export_requested.emit(self.view_key))
        menu.exec(self.mapToGlobal(pos))

    def show_column(self, column: ColumnViews, set_words: dict[str, str],
                    best: dict[tuple[str, str], tuple[str, ...]], columns: int) -> None:
        """Fill the table from ``column.ood_sets``; ``set_words``: each set's name in words,
        ``best``: (set, score) → the columns shown that are best there, of ``columns`` shown."""
        sets = list(column.ood_sets)
        scores = [s for s in OOD_TABLE_SCORES if any(s in column.ood_sets[n] for n in sets)]
        self.clear()
        self.setRowCount(len(scores))
        self.setColumnCount(len(sets))
        for c, set_name in enumerate(sets):
            words = set_words.get(set_name, set_name)
            head = QTableWidgetItem(short_set_name(set_name))
            head.setToolTip(f"AUROC on the {words}")
            self.setHorizontalHeaderItem(c, head)
        for r, score in enumerate(scores):
            head = QTableWidgetItem(OOD_TABLE_SCORES[score])
            head.setToolTip(SCORE_WORDS.get(score, score))
            self.setVerticalHeaderItem(r, head)
            for c, set_name in enumerate(sets):
                row = column.ood_sets[set_name].get(score)
                item = QTableWidgetItem()
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                words = set_words.get(set_name, set_name)
                if row is None or row["auroc"] is None:
                    item.setText("n/a")
                    item.setToolTip(f"{SCORE_WORDS.get(score, score)} is the same for every image of this "
                                    "posterior (one draw), so it cannot tell any set apart.")
                else:
                    first = columns > 1 and column.name in best.get((set_name, score), ())
                    item.setText(f"{row['auroc']:.3f}")
                    place = (f"; the best of the {columns} columns" if first else "") if columns > 1 else ""
                    item.setToolTip(f"{SCORE_WORDS.get(score, score)} on the {words}: AUROC "
                                    f"{row['auroc']:.4f}{place}. {AUROC_WORDS}")
                    if first:
                        font = QFont(self.font())  # the table's size, not the application's
                        font.setBold(True)
                        item.setFont(font)
                        item.setBackground(QColor(*BEST_BACKGROUND))
                self.setItem(r, c, item)
        header = self.horizontalHeader().sizeHint().height()
        self.setFixedHeight(self.ROW_HEIGHT * len(scores) + header + 2 * self.frameWidth() + 2)

    def cell_text(self, score: str, set_index: int) -> str:
        """The text of one cell (a score's row, a set's column)."""
        scores = [self.verticalHeaderItem(r).text() for r in range(self.rowCount())]
        return self.item(scores.index(OOD_TABLE_SCORES[score]), set_index).text()


def short_set_name(name: str) -> str:
    """A set's name short enough for a column header: ``notmnist-test`` → "letters",
    ``mnist-inverted`` → "inverted", a folder's ``squares-test`` → "squares"."""
    if name in SHORT_SET_NAMES:
        return SHORT_SET_NAMES[name]
    if "-sample-" in name:  # a bundled sample, named as its set
        return SHORT_SET_NAMES.get(name.replace("-sample-", "-"), name)
    return name.removesuffix("-test")
