"""A few paragraphs of text with bold, italic and coloured runs, wrapped to the width: the
columns' verdicts (:class:`RichLines`).

Laid out once per text and width with ``QTextLayout`` and painted by the bands that changed: the
verdict changes on every prediction of a stroke.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import shiboken6
from PySide6.QtCore import QEvent, QPointF, QRect, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPalette, QRegion, QTextCharFormat, QTextLayout
from PySide6.QtWidgets import QWidget

#: A run of text and how it is set: "" plain, "b" bold, "i" italic.
Run = tuple[str, str]
#: A paragraph: its runs and its colour (None: the text colour); it wraps at the widget's width.
Paragraph = tuple[tuple[Run, ...], "str | tuple[int, int, int] | None"]


class Band(NamedTuple):
    """A laid-out paragraph's place: its layout, the heights it starts and ends at, and the rows
    it covers (at least one) across the widget's width."""

    layout: QTextLayout
    top: float
    end: float
    rows: QRect


class RichLines(QWidget):
    """A few paragraphs of text with bold, italic and coloured runs, wrapped to the width and
    laid out once per text and width (``QTextLayout``).

    The verdict changes on every prediction of a stroke. As a rich-text ``QLabel`` (HTML parsed
    into a document, laid out and painted) it took 0.35–0.6 ms a column per update; here 0.31 ms
    beside the label's 0.54 in the same run. Runs are plain text, never markup: a class named
    "<b>" reads as written.
    """

    #: Paragraphs kept laid out, the most recently shown by any of the widgets (the four columns'
    #: verdicts): besides the last texts, those that come back (the preview's note while a stroke
    #: moves, gone at the full count; a verdict that returns as the numbers move back and forth)
    #: and those another column shows too ("Torn between 2 and 3", "2 vs 3: overlap 0.00").
    KEPT = 96
    #: The layouts kept, by paragraph, width and font (see KEPT); a layout once made is never
    #: changed, only drawn, so the widgets of one width and font share it.
    _kept: dict[tuple[Paragraph, int, str], tuple[QTextLayout, float]] = {}

    #: How strongly a pending paragraph is painted (see ``set_paragraphs``): a line that waits for
    #: work still to come is faded, so that it reads as waiting.
    PENDING_OPACITY = 0.4

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._paragraphs: tuple[Paragraph, ...] = ()
        self._pending: frozenset[int] = frozenset()
        # width, each layout with the height it starts at, the height of all, and the bands (see _layouts)
        self._laid_out: tuple[int, list[Band], float] | None = None
        self._font_described: str | None = None
        self._palette_colours: tuple[tuple[bool, bool], QColor, QColor] | None = None  # see _colours
        sizes = self.sizePolicy()
        sizes.setHeightForWidth(True)
        self.setSizePolicy(sizes)
        # paints its own background: the column's frame behind it is not repainted on each update
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)

    #: The widgets given paragraphs inside :meth:`together`, with their latest (None: outside it).
    _held: dict[RichLines, tuple] | None = None

    @classmethod
    @contextmanager
    def together(cls) -> Iterator[None]:
        """Lay out what every widget is given in this block once it ends, one widget after the
        other (a request's four verdicts): laid out between each column's plots, they cost the
        window's thread more (by turns in one window, a preview's 12.4 against 11.4 ms:
        docs/performance.md). A widget read meanwhile (its text, its height) is laid out first."""
        if cls._held is not None:  # within another block: that one lays out
            yield
            return
        cls._held = {}
        try:
            yield
        finally:
            held, cls._held = cls._held, None
            for widget, given in held.items():
                if shiboken6.isValid(widget):
                    widget.set_paragraphs(*given)

    def _release(self) -> None:
        """Take this widget's paragraphs given in a :meth:`together` block now."""
        given = self._held.pop(self, None) if self._held is not None else None
        if given is not None:
            self._set_paragraphs(*given)

    def set_paragraphs(self, paragraphs, pending=()) -> None:
        """Show ``paragraphs``; those whose indices are in ``pending`` are painted faded
        (:attr:`PENDING_OPACITY`): lines that wait for work still to come. Inside
        :meth:`together`, once its block ends."""
        if self._held is not None:
            self._held[self] = (paragraphs, pending)
            return
        self._set_paragraphs(paragraphs, pending)

    def _set_paragraphs(self, paragraphs, pending=()) -> None:
        paragraphs = tuple((tuple(runs), colour) for runs, colour in paragraphs)
        pending = frozenset(pending)
        if paragraphs == self._paragraphs and pending == self._pending:
            return
        before, pending_before = self._laid_out, self._pending
        self._paragraphs, self._pending, self._laid_out = paragraphs, pending, None
        width = self.width()
        if before is None or before[0] != width or not self.isVisible():
            self.update()
            return
        # Only the bands of the paragraphs that changed, moved or came or went from pending are
        # repainted: a stroke changes the numbers of a line or two, and drawing text costs most of
        # the verdict's paint. A band is the same where its layout, its heights and its fading
        # are (bands lie one below the other, so an unchanged band keeps its index).
        new, old = self._layouts(width)[0], before[1]
        spans: list[list[int]] = []
        for i in range(max(len(old), len(new))):
            was = old[i] if i < len(old) else None
            now = new[i] if i < len(new) else None
            if (was is not None and now is not None and was.layout is now.layout and was.top == now.top
                    and was.end == now.end and (i in pending_before) == (i in pending)):
                continue
            spans.extend([band.rows.top(), band.rows.bottom() + 1] for band in (was, now) if band is not None)
        if spans:
            self.update(_region(spans, width))

    def setText(self, text: str) -> None:  # noqa: N802 (as QLabel's)
        """One plain paragraph (or none for "")."""
        self.set_paragraphs([(((text, ""),), None)] if text else [])

    @property
    def paragraphs(self) -> tuple[Paragraph, ...]:
        self._release()
        return self._paragraphs

    @property
    def pending(self) -> frozenset[int]:
        """The indices of the paragraphs painted faded: those that wait for work still to come."""
        self._release()
        return self._pending

    def text(self) -> str:
        """The words shown, a paragraph a line."""
        self._release()
        return "\n".join("".join(text for text, _ in runs) for runs, _ in self._paragraphs)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt override)
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt override)
        self._release()
        return int(self._layouts(width)[1] + 0.999)

    def _layouts(self, width: int) -> tuple[list[Band], float]:
        """Each paragraph's band (its layout and where it lies), and the height of all. A
        paragraph laid out at this width for the text before is reused: a stroke changes the
        numbers of a line or two, while the conformal and credible sets and the preview's note
        stay as they were."""
        if self._laid_out is not None and self._laid_out[0] == width:
            return self._laid_out[1], self._laid_out[2]
        kept, bands, y, font = self._kept, [], 0.0, self._font_key()
        for paragraph in self._paragraphs:
            key = (paragraph, width, font)
            laid = kept.pop(key, None) or self._lay_out(paragraph, width)
            kept[key] = laid  # the most recently used last
            top, y = y, y + laid[1]
            bands.append(Band(laid[0], top, y, QRect(0, math.floor(top), width, max(1, math.ceil(y) - math.floor(top)))))
        while len(kept) > self.KEPT:
            kept.pop(next(iter(kept)))
        self._laid_out = (width, bands, y)
        return bands, y

    def _font_key(self) -> str:
        """The font's description, kept until the font changes (``QFont.key`` builds a string on
        every call, ≈ 30 µs, once per update)."""
        if self._font_described is None:
            self._font_described = self.font().key()
        return self._font_described

    def _colours(self) -> tuple[QColor, QColor]:
        """The palette's background and text colours as the widget paints them now (the colour
        group follows whether it is enabled and its window active), kept until either or the
        palette changes: ``palette()`` and ``color()`` copy them, ≈ 8 µs a paint."""
        state = (self.isEnabled(), self.isActiveWindow())
        kept = self._palette_colours
        if kept is None or kept[0] != state:
            palette = self.palette()
            kept = self._palette_colours = (state, palette.color(QPalette.ColorRole.Window),
                                            palette.color(QPalette.ColorRole.WindowText))
        return kept[1], kept[2]

    def changeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        kind = event.type()
        if kind == QEvent.Type.FontChange:  # laid out again in the new font
            self._font_described, self._laid_out = None, None
            self.update()
        elif kind in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            self._palette_colours = None
        super().changeEvent(event)

    def _lay_out(self, paragraph: Paragraph, width: int) -> tuple[QTextLayout, float]:
        """One paragraph wrapped to ``width``, its first line at the top, and its height."""
        runs, colour = paragraph
        layout = QTextLayout("".join([text for text, _ in runs]), self.font())
        formats = _format_ranges(tuple([(len(text), how) for text, how in runs]), colour)
        if formats:
            layout.setFormats(formats)
        # keep the shaped glyphs: without the cache every draw shapes the text again (a 4-line
        # paragraph drew in 108 µs, 57 µs with it)
        layout.setCacheEnabled(True)
        layout.beginLayout()
        y = 0.0
        while (line := layout.createLine()).isValid():
            line.setLineWidth(max(width, 1))
            line.setPosition(QPointF(0, y))
            y += line.height()
        layout.endLayout()
        return layout, y

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        painter = QPainter(self)
        background, text = self._colours()
        painter.fillRect(event.rect(), background)
        painter.setPen(text)
        # the painter is clipped to what needs painting: a paragraph outside it is skipped, also
        # one between two changed paragraphs (the region, not its bounding rectangle)
        shown, pending, fainter, opacity = event.region(), self._pending, self.PENDING_OPACITY, 1.0
        for i, (layout, top, _, rows) in enumerate(self._layouts(self.width())[0]):
            if shown.intersects(rows):
                # a pending paragraph keeps its layout and is only painted fainter: no new shaping
                faded = fainter if i in pending else 1.0
                if faded != opacity:
                    painter.setOpacity(opacity := faded)
                layout.draw(painter, QPointF(0, top))
        painter.end()


@functools.cache
def _char_format(how: str, colour: str | tuple[int, int, int] | None) -> QTextCharFormat:
    """How a run is set ("b" bold, "i" italic, in ``colour``), made once: a stroke lays out a few
    paragraphs of every column's verdict anew."""
    char = QTextCharFormat()
    if "b" in how:
        char.setFontWeight(QFont.Weight.Bold)
    if "i" in how:
        char.setFontItalic(True)
    if colour is not None:
        char.setForeground(QColor(colour) if isinstance(colour, str) else QColor(*colour))
    return char


@functools.lru_cache(maxsize=256)
def _format_ranges(runs: tuple[tuple[int, str], ...], colour) -> list[QTextLayout.FormatRange]:
    """The format ranges of a paragraph of runs of these lengths and settings (a plain run in
    no colour has none), made once for each: a stroke changes a run's digits, rarely its length."""
    formats, start = [], 0
    for length, how in runs:
        if how or colour is not None:
            span = QTextLayout.FormatRange()
            span.start, span.length, span.format = start, length, _char_format(how, colour)
            formats.append(span)
        start += length
    return formats


def _region(spans: list[list[int]], width: int) -> QRect | QRegion:
    """The full-width rows of ``spans`` (each [first row, row after the last]): one rectangle
    where they touch or overlap, as the bands of neighbouring paragraphs do."""
    spans.sort()
    merged = [spans[0]]
    for first, after in spans[1:]:
        if first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], after)
        else:
            merged.append([first, after])
    if len(merged) == 1:
        return QRect(0, merged[0][0], width, merged[0][1] - merged[0][0])
    region = QRegion()
    for first, after in merged:
        region += QRect(0, first, width, after - first)
    return region
