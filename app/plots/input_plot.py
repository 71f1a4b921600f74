"""The base of the per-input plots (:mod:`app.plots.input_views`): a plain widget that paints
itself in one ``QPainter`` pass, and its class and probability axes; it draws through the helpers
of :mod:`app.plots.drawing`, which hand Qt whole numpy arrays of lines and rectangles.

An :class:`InputPlot` stores the numbers it draws (:attr:`InputPlot.values`) and schedules one
repaint; subclasses give the view's ``view_key`` (the :mod:`core.outputs.input_figures` view that
exports the same numbers), a tooltip in plain words, and ``show``/``paint_data``. Its context
menu's "Export…" emits ``export_requested(view_key)``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from PySide6.QtCore import QEvent, QLineF, QPoint, QPointF, QRect, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QPainter,
    QPen,
    QPixmap,
    QPolygonF,
    QStaticText,
)
from PySide6.QtWidgets import QMenu, QSizePolicy, QWidget

from app.plots.axes import (
    LabelChoice,
    class_labels,
    fit_class_labels,
    shortened_note,
    small_font,
    sparsest,
)
from app.plots.drawing import draw_image, to_image
from app.plots.style import (
    BACKGROUND,
    FOREGROUND,
    MEAN,
)

if TYPE_CHECKING:  # the window is built before the engine (torch) loads: see app.__main__
    from core.analysis.predictive import Prediction

#: Up to this many draws, each draw is shown as a tick; above, as a histogram.
FEW_DRAWS = 30
PROBABILITY_TICKS = ((0.0, "0"), (0.5, ".5"), (1.0, "1"))
TICK_LENGTH = 4
TITLE_POINT_SIZE = 9.0


MEAN_PEN = QPen(QColor(*MEAN), 1)  # whole-pixel widths take Qt's fast line path
TITLE_COLOUR = QColor(FOREGROUND)

#: Half width and half height of the mean's diamond, in pixels.
DIAMOND = (3.5, 4.5)


@functools.cache
def diamond(colour: tuple[int, ...], ratio: float) -> QPixmap:
    """The mean's marker, drawn smooth once per colour and screen and then only copied."""
    w, h = DIAMOND
    pixmap = QPixmap(round(2 * w * ratio), round(2 * h * ratio))
    pixmap.setDevicePixelRatio(ratio)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(*colour))
    painter.drawPolygon(QPolygonF([QPointF(w, 0.5), QPointF(2 * w - 0.5, h), QPointF(w, 2 * h - 0.5), QPointF(0.5, h)]))
    painter.end()
    return pixmap


@functools.lru_cache(maxsize=256)
def _class_axis_labels(classes: tuple[str, ...], choice: LabelChoice | None) -> tuple[tuple[int, str], ...]:
    """A class axis's labels under ``choice``: one per class, by its index (see ``class_labels``)."""
    return tuple(enumerate(class_labels(classes, choice)))


@dataclass
class Axis:
    """One side of a plot: fixed ticks, or one tick per class with labels fitted to the room.

    ``choice`` is None while the class names are drawn as they are (see
    :func:`app.plots.axes.fit_class_labels`); ``drawn`` holds the labels of the last paint as
    (rectangle, text), for tests and tooltips.
    """

    orientation: str  # "left" or "bottom"
    ticks: Sequence[tuple[float, str]] = ()
    classes: tuple[str, ...] = ()
    label: str = ""
    width: float | None = None  # a fixed width (left axes), else what the labels need
    choice: LabelChoice | None = None
    drawn: list[tuple[QRectF, str]] = field(default_factory=list)
    #: This plot's own fit (``choice`` is the sparser of it and ``row``).
    own: LabelChoice | None = None
    #: What the row of columns agreed on (the sparsest of their own fits), or None while none is
    #: imposed: each column alone thinned its labels by its own room and history (0 2 4 6 8 in
    #: one column, 0–9 beside it).
    row: LabelChoice | None = None

    @property
    def class_names(self) -> tuple[str, ...]:
        return self.classes

    def labels(self) -> tuple[tuple[float, str], ...]:
        """Each label's value and text (a class axis's made once per choice: every paint of a
        stroke keys the plot's backdrop by them, 40 calls an update)."""
        if self.classes:
            return _class_axis_labels(self.classes, self.choice)
        return tuple(self.ticks)

    def font(self, base: QFont) -> QFont:
        return small_font(base) if self.choice is not None and self.choice[1] else base

    def toolTip(self) -> str:  # noqa: N802 (named like the Qt property it stands for)
        return shortened_note(self.classes, self.choice) if self.classes else ""

    def fit(self, base: QFont, length: float, span: float) -> None:
        if self.classes and length > 0 and span > 0:
            across = self.orientation == "bottom"
            self.own = fit_class_labels(self.classes, base, across, length / span, self.own)
            self.choice = self.own if self.row is None else sparsest([self.own, self.row], across)

    def extent(self, base: QFont) -> float:
        """Room the axis takes beside the data: its width (left) or height (bottom)."""
        metrics = QFontMetricsF(self.font(base))
        label = QFontMetricsF(base).height() + 2 if self.label else 0.0
        if self.orientation == "bottom":
            return TICK_LENGTH + 2 + metrics.height() + label
        if self.width is not None:
            return self.width
        texts = [t for _, t in self.labels()]
        return TICK_LENGTH + 4 + max((metrics.horizontalAdvance(t) for t in texts), default=0) + label


class InputPlot(QWidget):
    """Base of the per-input plots: title, axes, data area, tooltip and export menu.

    A subclass sets its axes and ranges in ``__init__``, stores what it draws in
    :attr:`values` in :meth:`show`, and paints it in :meth:`paint_data` with :meth:`px`.
    """

    export_requested = Signal(str)
    #: The title was clicked: open the Help paragraph on this view (its anchor, the view key).
    help_requested = Signal(str)
    #: A resize changed how this plot alone would label its classes (:meth:`own_choices`): the
    #: row of columns agrees on one choice again (:meth:`set_row_choices`).
    labels_fitted = Signal()
    view_key: ClassVar[str]
    tooltip: ClassVar[str]
    x_range: tuple[float, float] = (0.0, 1.0)
    y_range: tuple[float, float] = (0.0, 1.0)
    y_down = False  # the first row at the top
    square = False  # one data unit as wide as it is tall

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__()
        self.class_names = tuple(class_names)
        self.left = Axis("left")
        self.bottom = Axis("bottom")
        self.values: dict[str, np.ndarray] = {}
        self._title = ""
        self._title_wordings: tuple[str, ...] = ("",)
        self._tip_note: str | None = None  # none set yet
        self._layout_key: tuple | None = None
        self._shown_backdrop: tuple | None = None  # the layout and backdrop_key() last painted
        self._data_rect = QRectF()
        self._affine = (1.0, 0.0, 1.0, 0.0)  # pixel x = a·x + b, pixel y = c·y + d: set with the data rectangle
        self._geometry: dict[object, object] = {}  # what derives from the layout alone: see geometry()
        self._title_font = QFont(self.font())
        self._title_font.setPointSizeF(TITLE_POINT_SIZE)
        self._title_texts: dict[tuple, QStaticText] = {}  # laid out once per wording and width
        #: background and axes by what they depend on, with the axes' labels as drawn on them
        self._backdrops: dict[tuple, tuple[QPixmap, tuple[list, list]]] = {}
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)  # paints every pixel itself
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumHeight(64)
        self.setToolTip(self.tooltip)
        self.setMouseTracking(True)  # the hand over the title, which opens its help
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._on_context_menu_requested)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        # no more than its minimum: the columns' scroll area makes a column as tall as its plots'
        # preferred heights add up to (height for width), and a column must fit the first
        # launch's 860-pixel window without scrolling (ten pixels more a plot cut its last plot)
        return QSize(240, self.minimumHeight())

    def changeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.FontChange:  # the axes and what derives from them, in the new font
            self._layout_key = None
        super().changeEvent(event)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        before = self.own_choices()
        self.data_rect()  # fits the labels to the new room
        if self.class_axes() and self.own_choices() != before:
            self.labels_fitted.emit()

    def own_choices(self) -> dict[str, LabelChoice | None]:
        """How this plot alone would label each class axis at its size, by orientation."""
        return {axis.orientation: axis.own for axis in self.class_axes()}

    def set_row_choices(self, choices: dict[str, LabelChoice | None]) -> None:
        """Label each class axis at least as sparsely as ``choices`` (by orientation: what the row
        of columns agreed on); repainted when that changes what is drawn."""
        changed = False
        for axis in self.class_axes():
            row = choices.get(axis.orientation)
            if row != axis.row:
                axis.row, changed = row, True
        if changed:
            self._layout_key = None  # lay the axes out again under the row's choice
            self.update()

    def _on_context_menu_requested(self, pos: QPoint) -> None:
        menu = QMenu(self)
        menu.addAction("Export this plot (PNG, SVG, CSV, JSON)…", lambda: self.export_requested.emit(self.view_key))
        menu.exec(self.mapToGlobal(pos))

    def title_rect(self) -> QRectF:
        """Where the title is painted: a click there opens its Help paragraph."""
        return QRectF(0, 0, self.width(), QFontMetricsF(self._title_font).height() + 3)

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if event.button() == Qt.MouseButton.LeftButton and self.title_rect().contains(event.position()):
            self.help_requested.emit(self.view_key)
            return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt override)
        over = self.title_rect().contains(event.position())
        self.setCursor(Qt.CursorShape.PointingHandCursor if over else Qt.CursorShape.ArrowCursor)
        super().mouseMoveEvent(event)

    # ------------------------------------------------------------------ what is drawn

    def title(self) -> str:
        return self._title

    def set_title(self, *wordings: str) -> None:
        """The title, with shorter wordings after it (longest first): the longest that fits the
        plot's width is drawn, the shortest cut with "…" only when even it does not fit."""
        wordings = wordings or ("",)
        if wordings != self._title_wordings:
            had_title = bool(self._title)
            self._title, self._title_wordings = wordings[0], wordings
            if bool(self._title) != had_title:  # a title that comes or goes moves the data
                self.update()
            else:  # another wording: the title's band
                self.update(self.title_rect().toAlignedRect())

    def update_data(self) -> None:
        """Schedule the repaint of what new numbers change (:meth:`data_region`), not of the axes
        around them, which the window keeps as they were painted (20 plots copying their whole
        backdrop on every update of a stroke); everything while the backdrop on screen is not the
        one for this layout and these numbers (a colour scale that comes or goes)."""
        if self._shown_backdrop != (self._layout_key, self.backdrop_key()):
            self.update()
        else:
            self.update(self.data_region())

    def data_region(self) -> QRect:
        """What painting new numbers changes: the data area and the pixel around it that the data
        are clipped to (subclasses add what else shows the numbers); kept with the layout, which
        a resize or new ranges make anew (and repaint whole)."""
        return self.geometry("data region", lambda: self._data_rect.adjusted(-2, -2, 2, 2).toAlignedRect())

    #: Pixels kept right of the data for a colour scale (:meth:`paint_colour_scale`); 0: none.
    scale_room = 0.0

    def _scale_font(self) -> QFont:
        font = QFont(self.font())
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.8))
        return font

    def title_room(self) -> float:
        """The width a title may take, centred on the plot."""
        return max(self.width() - 4.0, 10.0)

    def drawn_title(self) -> str:
        """The wording of the title that fits the plot's width now (what is painted)."""
        metrics = QFontMetricsF(self._title_font)
        room = self.title_room()
        return next((w for w in self._title_wordings if metrics.horizontalAdvance(w) <= room),
                    metrics.elidedText(self._title_wordings[-1], Qt.TextElideMode.ElideRight, room))

    def _laid_out_title(self) -> QStaticText:
        """The drawn title, laid out once per wording and width (a stroke repaints every plot's
        title many times a second; drawText measured about 70 µs a title, twice the data of some).
        The last few are kept: a stroke's previews and the full count that follows alternate
        between two wordings ("· 16 draws", "· 100 draws")."""
        key = (self._title_wordings, self.width())
        text = self._title_texts.get(key)
        if text is None:
            text = QStaticText(self.drawn_title())
            text.setTextFormat(Qt.TextFormat.PlainText)
            text.prepare(font=self._title_font)
            if len(self._title_texts) >= 4:
                self._title_texts.pop(next(iter(self._title_texts)))
            self._title_texts[key] = text
        return text

    def class_axes(self) -> list[Axis]:
        return [axis for axis in (self.left, self.bottom) if axis.classes]

    def show(self, prediction: Prediction, level: float) -> None:
        """Draw one column's prediction (S draws of K class probabilities and their summary)."""
        raise NotImplementedError

    def clear_view(self) -> None:
        self.values = {}
        self.update()

    # ------------------------------------------------------------------ geometry

    def data_rect(self) -> QRectF:
        """Where the data go, in pixels; the axes' label choices follow the room."""
        key = (self.width(), self.height(), bool(self._title), tuple(self.left.ticks), tuple(self.bottom.ticks),
               self.x_range, self.y_range)  # the ranges: the pixel mapping (_affine) is derived here
        if key != self._layout_key:
            self._layout_key = key
            self._lay_out()
        return self._data_rect

    def _lay_out(self) -> None:
        base = self.font()
        top = QFontMetricsF(self._title_font).height() + 3 if self._title else 4.0
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        rect = QRectF()
        for _ in range(3):  # a label choice changes an axis's room, which changes the choice
            left, bottom = self.left.extent(base), self.bottom.extent(base)
            rect = QRectF(left, top, max(1.0, self.width() - left - 8 - self.scale_room),
                          max(1.0, self.height() - top - bottom - 2))
            if self.square:
                side = min(rect.width() / (x1 - x0), rect.height() / (y1 - y0))
                w, h = side * (x1 - x0), side * (y1 - y0)
                rect = QRectF(rect.left() + (rect.width() - w) / 2, rect.top(), w, h)
            before = (self.left.choice, self.bottom.choice)
            self.left.fit(base, rect.height(), abs(y1 - y0))
            self.bottom.fit(base, rect.width(), abs(x1 - x0))
            if (self.left.choice, self.bottom.choice) == before:
                break
        self._data_rect = rect
        self._geometry = {}
        sx, sy = rect.width() / (x1 - x0), rect.height() / (y1 - y0)
        self._affine = (sx, rect.left() - x0 * sx, *((sy, rect.top() - y0 * sy) if self.y_down else
                                                     (-sy, rect.bottom() + y0 * sy)))
        self._update_tooltip()

    def set_tip_note(self, text: str) -> None:
        """Words about the numbers shown now, added to the plot's tooltip."""
        if text != self._tip_note:  # the same on most updates of a stroke: the tooltip stands
            self._tip_note = text
            self._update_tooltip()

    def _update_tooltip(self) -> None:
        notes = [self._tip_note, *(a.toolTip() for a in self.class_axes()), "Click the title for its help."]
        tip = "\n\n".join([self.tooltip, *(n for n in notes if n)])
        if tip != self.toolTip():
            self.setToolTip(tip)

    def to_px(self, x, y):
        """Pixel coordinates of data points: numbers, or numpy arrays computed at once (a stroke
        repaints 20 plots 30+ times a second: a few numpy operations per plot, none per point)."""
        a, b, c, d = self._affine
        return a * x + b, c * y + d

    def geometry(self, name: object, build):
        """What ``build()`` derives from this layout alone (the pixels of the classes' positions, of
        the fixed bars' edges), made once per layout: a stroke's paints then map only the numbers
        that change, in one array operation per plot instead of one per drawn part (a plot's data
        paint was a few dozen small numpy calls, the most of its time)."""
        made = self._geometry.get(name)
        if made is None:
            made = self._geometry[name] = build()
        return made

    def px(self, x: float, y: float) -> QPointF:
        """The pixel of data point (x, y)."""
        return QPointF(*self.to_px(float(x), float(y)))

    def span(self, x0: float, y0: float, x1: float, y1: float) -> QRectF:
        """The pixel rectangle of a data rectangle."""
        return QRectF(self.px(x0, y0), self.px(x1, y1)).normalized()

    # ------------------------------------------------------------------ painting

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        rect = self.data_rect()
        painter = QPainter(self)
        try:
            painter.drawPixmap(0, 0, self._backdrop(rect))  # with the title
            if self._title:  # the font and pen the title left (the entropy's labels are drawn in its font)
                painter.setFont(self._title_font)
                painter.setPen(TITLE_COLOUR)
            painter.setClipRect(rect.adjusted(-1, -1, 1, 1))
            if self.values:
                self.paint_data(painter)
            painter.setClipping(False)
            self.paint_overlay(painter)
        finally:
            painter.end()

    def _backdrop(self, rect: QRectF) -> QPixmap:
        """Background, axes, the title and what else never changes with the numbers (a colour
        scale: :meth:`paint_backdrop`), painted once per size, labels and title: a new prediction
        repaints only the data over it. (Text costs most of a plot's paint: the title drawn on
        every paint took a quarter of it.)"""
        ratio = self.devicePixelRatioF()
        key = (self._layout_key, ratio, self.left.labels(), self.bottom.labels(), self.backdrop_key(),
               self._title_wordings)
        self._shown_backdrop = (self._layout_key, self.backdrop_key())
        kept = self._backdrops.get(key)
        if kept is not None:
            pixmap, drawn = kept
            self.left.drawn, self.bottom.drawn = drawn  # the labels this one shows
        else:
            pixmap = QPixmap(max(1, round(self.width() * ratio)), max(1, round(self.height() * ratio)))
            pixmap.setDevicePixelRatio(ratio)
            pixmap.fill(QColor(BACKGROUND))
            painter = QPainter(pixmap)
            try:
                self._paint_axes(painter, rect)
                self.paint_backdrop(painter)
                if self._title:
                    painter.setFont(self._title_font)
                    painter.setPen(TITLE_COLOUR)
                    title = self._laid_out_title()
                    painter.drawStaticText(QPointF((self.width() - title.size().width()) / 2, 1), title)
            finally:
                painter.end()
            # The last two are kept: a stroke's previews and the full count after it alternate
            # between two (titles of 16 and of 100 draws; the draws' ticks without a colour
            # scale, their shading with one), and rebuilding one cost ≈ 1 ms a plot.
            if len(self._backdrops) >= 2:
                self._backdrops.pop(next(iter(self._backdrops)))
            self._backdrops[key] = (pixmap, (self.left.drawn, self.bottom.drawn))
        return pixmap

    def paint_data(self, painter: QPainter) -> None:
        raise NotImplementedError

    def backdrop_key(self) -> object:
        """What else :meth:`paint_backdrop` depends on (whether a colour scale is shown)."""
        return None

    def paint_backdrop(self, painter: QPainter) -> None:
        """What is painted once with the axes and never overlaps the data (a colour scale right
        of them): a stroke's 20 repaints no longer build and draw it each time (none by default)."""

    def paint_colour_scale(self, painter: QPainter, table: np.ndarray, labels: tuple[str, str, str]) -> None:
        """A vertical colour scale right of the data: ``table`` (N, 3 or 4) from its bottom to its
        top, ``labels`` at the bottom, middle and top (a heat map is read against it)."""
        rect = self.data_rect()
        bar = QRectF(rect.right() + 5, rect.top(), 7, rect.height())
        column = np.ascontiguousarray(table[::-1, None, :3].repeat(2, axis=1)).astype(np.uint8)
        draw_image(painter, bar, to_image(column))
        painter.setPen(QColor(FOREGROUND))
        painter.setFont(self._scale_font())
        metrics = QFontMetricsF(painter.font())
        for label, y in zip(labels, (bar.bottom(), bar.center().y(), bar.top()), strict=True):
            painter.drawText(QPointF(bar.right() + 2, y + metrics.ascent() / 2 - 1), label)

    def paint_overlay(self, painter: QPainter) -> None:
        """What is drawn over the data whether or not there are any, unclipped (none by default)."""

    def _paint_axes(self, painter: QPainter, rect: QRectF) -> None:
        base = self.font()
        painter.setPen(QPen(QColor(FOREGROUND), 1))
        painter.drawLine(QLineF(rect.bottomLeft(), rect.bottomRight()))
        painter.drawLine(QLineF(rect.topLeft(), rect.bottomLeft()))
        for axis in (self.left, self.bottom):
            font = axis.font(base)
            painter.setFont(font)
            metrics = QFontMetricsF(font)
            height, cap = metrics.height(), metrics.capHeight()
            axis.drawn = []
            for value, text in axis.labels():
                if axis.orientation == "bottom":
                    x = self.px(value, self.y_range[0]).x()
                    painter.drawLine(QLineF(x, rect.bottom(), x, rect.bottom() + TICK_LENGTH))
                    width = metrics.horizontalAdvance(text)
                    box = QRectF(x - width / 2, rect.bottom() + TICK_LENGTH + 1, width, height)
                else:
                    y = self.px(self.x_range[0], value).y()
                    painter.drawLine(QLineF(rect.left() - TICK_LENGTH, y, rect.left(), y))
                    right = rect.left() - TICK_LENGTH - 2
                    box = QRectF(0, y - height / 2, right, height)
                # A label that would collide with the one before goes unlabelled: numbers side
                # by side, and labels stacked so close that their glyphs overlap by a quarter
                # (fitted class names never are; single digits can be, in a squeezed plot).
                if not axis.drawn:
                    crowded = False
                elif axis.orientation == "bottom":
                    crowded = not axis.classes and box.left() < axis.drawn[-1][0].right() + 3
                else:
                    crowded = abs(box.center().y() - axis.drawn[-1][0].center().y()) < 0.75 * cap
                if text and not crowded:
                    align = Qt.AlignmentFlag.AlignCenter if axis.orientation == "bottom" else (
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    painter.drawText(box, align, text)
                    if axis.orientation == "left":  # the ink's box, as the text is right-aligned
                        width = metrics.horizontalAdvance(text)
                        box = QRectF(right - width, box.top(), width, height)
                    axis.drawn.append((box, text))
            if axis.label:
                painter.setFont(base)
                painter.drawText(QRectF(rect.left(), self.height() - QFontMetricsF(base).height() - 1,
                                        rect.width(), QFontMetricsF(base).height()),
                                 Qt.AlignmentFlag.AlignHCenter, axis.label)
