"""Class-label axes that stay readable when a plot is small, and the compact pyqtgraph plot.

:func:`fit_class_labels` is the one rule for fitting class names to the room between two
classes; :class:`ClassAxis` applies it to a pyqtgraph axis (the data-set views) and
:mod:`app.plots.input_views` to its own painted axes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFont, QFontMetricsF

#: A label choice: (short names, small font, label every n-th class).
LabelChoice = tuple[bool, bool, int]
SMALL_POINT_SIZE = 7.0
#: Pixels kept between two class labels' glyphs side by side, and stacked (a 1-pixel gap reads as touching).
LABEL_GAP = 3.0
STACK_GAP = 1.5
ACROSS_LADDER: tuple[LabelChoice, ...] = ((False, False, 1), (True, False, 1), (True, True, 1), (True, True, 2))
DOWN_LADDER: tuple[LabelChoice, ...] = ((False, False, 1), (False, True, 1), (False, True, 2))


def short_class_name(name: str) -> str:
    """A range by its first value ("25-37" → "25", "60+" → "60"); other names unchanged."""
    match = re.fullmatch(r"(\d+)\s*(?:[-–]\s*\d+|\+)", name)
    return match.group(1) if match else name


def small_font(font: QFont) -> QFont:
    small = QFont(font)
    small.setPointSizeF(min(SMALL_POINT_SIZE, small.pointSizeF()))
    return small


def fit_class_labels(names: Sequence[str], font: QFont, across: bool, spacing: float,
                     current: LabelChoice | None) -> LabelChoice | None:
    """How to label one tick per class ``spacing`` pixels apart, or None to draw the names as
    they are.

    Along an axis (``across``): the full names, else each group's first age ("0 3 8 15 25 38
    48 60", an age scale), else those in a smaller font, else every other one. Down an axis:
    the full names, else in a smaller font, else every other one. Labels keep :data:`LABEL_GAP`
    (:data:`STACK_GAP` stacked) pixels between their glyphs. Single characters (the digits)
    are drawn as they are (None) wherever they fit so, and fitted like any name where they do
    not: a small matrix's 0–9 would otherwise touch. Going back to larger labels than
    ``current`` needs a margin: a font change resizes the axis, and so the plot, which must not
    flip the choice back and forth.
    """
    if spacing <= 0:
        return None
    single = max(map(len, names), default=1) <= 1
    shorts = [short_class_name(n) for n in names]
    ladder = ACROSS_LADDER if across else DOWN_LADDER
    # None is the first rung for single characters; for names it means "not fitted yet"
    at = 0 if single and current is None else ladder.index(current) if current in ladder else len(ladder)

    def fits(choice: LabelChoice) -> bool:
        short, small, every = choice
        metrics = QFontMetricsF(small_font(font) if small else font)
        if across:
            need = max((metrics.horizontalAdvance(n) for n in (shorts if short else names)), default=0) + LABEL_GAP
        else:
            need = metrics.capHeight() + STACK_GAP
        return need + (1.5 if ladder.index(choice) < at else 0) <= spacing * every

    choice = next((c for c in ladder if fits(c)), ladder[-1])
    return None if single and choice == ladder[0] else choice


def sparsest(choices: Sequence[LabelChoice | None], across: bool) -> LabelChoice | None:
    """The choice that labels fewest classes among ``choices`` (None: the names as they are, the
    ladder's first rung): what a row of columns agrees on, so that every column of the row labels
    the same ticks."""
    ladder = ACROSS_LADDER if across else DOWN_LADDER
    ranks = [0 if c is None else ladder.index(c) if c in ladder else 0 for c in choices]
    if not ranks or max(ranks) == 0:
        return None if all(c is None for c in choices) else ladder[0]
    return ladder[max(ranks)]


def class_labels(names: Sequence[str], choice: LabelChoice | None) -> list[str]:
    """The label of each class under ``choice`` ("" where a class goes unlabelled)."""
    if choice is None:
        return list(names)
    short, _, every = choice
    return [(short_class_name(n) if short else n) if i % every == 0 else "" for i, n in enumerate(names)]


def shortened_note(names: Sequence[str], choice: LabelChoice | None) -> str:
    """A tooltip naming every class when the labels drawn are not the full names."""
    return "" if class_labels(names, choice) == list(names) else "Labels shortened to fit: " + ", ".join(names)


class ClassAxis(pg.AxisItem):
    """A pyqtgraph axis with one tick per class, labels fitted by :func:`fit_class_labels`."""

    def __init__(self, orientation: str, class_names: tuple[str, ...]) -> None:
        super().__init__(orientation)
        self.class_names = tuple(class_names)
        self.choice: LabelChoice | None = None
        self.setTicks([list(enumerate(self.class_names))])

    def resizeEvent(self, ev=None) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(ev)
        self.fit_labels()

    def setRange(self, mn: float, mx: float) -> None:  # noqa: N802 (pyqtgraph override)
        super().setRange(mn, mx)
        self.fit_labels()

    def fit_labels(self) -> None:
        names = getattr(self, "class_names", ())  # setRange runs inside AxisItem.__init__
        across = self.orientation in ("top", "bottom")
        length, span = (self.width() if across else self.height()), abs(self.range[1] - self.range[0])
        if not names or length <= 0 or span <= 0:
            return
        choice = fit_class_labels(names, self.font(), across, length / span, self.choice)
        if choice == self.choice:
            return
        self.choice = choice
        self.setTickFont(small_font(self.font()) if choice is not None and choice[1] else None)
        self.setTicks([list(enumerate(class_labels(names, choice)))])
        self.setToolTip(shortened_note(names, choice))


class CompactPlot(pg.PlotWidget):
    """A plot with fixed axes (no pan, zoom or pyqtgraph menu) and a small preferred size.

    The small preferred size matters: a column's layout adds its plots' preferred heights
    (height-for-width, because of its wrapped labels), and columns must fit a 680-pixel window.
    """

    def __init__(self) -> None:
        super().__init__(enableMenu=False)  # no ViewBox menu is built (a cost at start-up)
        item = self.getPlotItem()
        item.setMenuEnabled(False)
        item.hideButtons()
        item.setMouseEnabled(False, False)
        item.getViewBox().setMenuEnabled(False)
        self.setMinimumHeight(70)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(240, self.minimumHeight() + 10)

    # A title or bottom label wider than the plot would widen it past its column (pyqtgraph
    # makes a title's text width its minimum width) or run off both edges. Each may come with
    # shorter wordings, longest first: the longest that fits the room over the data is shown,
    # and only when even the shortest does not fit is it cut with "…" (whole again when the
    # plot widens). The tooltip keeps the full words.
    TEXT_POINTS = 9

    def set_title(self, *wordings: str) -> None:
        self._texts = {**getattr(self, "_texts", {}), "title": wordings}
        self._fit_texts()

    def set_bottom_label(self, *wordings: str) -> None:
        self._texts = {**getattr(self, "_texts", {}), "bottom": wordings}
        self._fit_texts()

    def _fit_texts(self) -> None:
        texts, item = getattr(self, "_texts", None), self.getPlotItem()
        if not texts or item is None:  # (pyqtgraph resizes the view before its plot exists)
            return
        font = QFont(self.font())
        font.setPointSizeF(self.TEXT_POINTS)
        metrics = QFontMetricsF(font)
        left = item.getAxis("left")
        # the data's width: the view less the value axis, the layout's margins and a label's
        # own (a text item's document margin is 4 pixels a side)
        room = max(self.width() - (left.width() if left.isVisible() else 0) - 20, 40)
        for key, wordings in texts.items():
            fitted = next((w for w in wordings if metrics.horizontalAdvance(w) <= room),
                          metrics.elidedText(wordings[-1], Qt.TextElideMode.ElideRight, room))
            if key == "title" and fitted != item.titleLabel.text:
                item.setTitle(fitted, size=f"{self.TEXT_POINTS}pt")
                if self.range.width() > 1:  # laid out already: fit the plot to the view again
                    item.setGeometry(self.range)
            elif key == "bottom" and fitted != item.getAxis("bottom").labelText:
                item.setLabel("bottom", fitted)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._fit_texts()  # first: the view lays the plot out at its new size next
        super().resizeEvent(event)
