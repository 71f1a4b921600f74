"""The verdict's text widget (``RichLines``) paints what plain rich text would: its paragraphs as
runs of formats over the widget's font, in the palette's colours, kept between paints, of the
group the widget's state picks."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPalette, QTextCharFormat, QTextLayout

from app.views.rich_lines import RichLines
from tests.app.test_painting import _pixels

#: Paragraphs in one setting throughout and in mixed ones, in colour or not; long enough to wrap
#: at the narrow width.
PARAGRAPHS = [
    ((("Sure it is a 7", "b"),), None),
    ((("a quick look at 16 draws while you draw; all 100 when you stop", "i"),), None),
    ((("Exact inference (HMC): compared when you stop", "i"),), "#2166ac"),
    ((("Conformal: could be 4 or 9, ", "b"), ("90 % guaranteed", "b")), None),
    ((("Leans to “ABCDEFGHIJ”, but unlike anything it was trained on", "bi"),), (178, 24, 43)),
    ((("4 vs 9: overlap 0.21 — WAVE fifty ff fi", ""),), "#b2182b"),
    ((("Reads ", ""), ("7", "b"), (": p̄ 0.62 (88%: 0.19–0.84)", "")), None),
]


def _as_rich_text(paragraphs, font: QFont, width: int, background: QColor, text: QColor) -> np.ndarray:
    """What the paragraphs look like set the plain way: every run a format range of its own over
    the widget's font (bold and italic as formats, the colour as the runs' foreground), wrapped
    at ``width``, one below the other."""
    layouts, y = [], 0.0
    for runs, colour in paragraphs:
        layout = QTextLayout("".join(part for part, _ in runs), font)
        ranges, start = [], 0
        for part, how in runs:
            char = QTextCharFormat()
            if "b" in how:
                char.setFontWeight(QFont.Weight.Bold)
            if "i" in how:
                char.setFontItalic(True)
            if colour is not None:
                char.setForeground(QColor(colour) if isinstance(colour, str) else QColor(*colour))
            span = QTextLayout.FormatRange()
            span.start, span.length, span.format = start, len(part), char
            ranges.append(span)
            start += len(part)
        layout.setFormats(ranges)
        layout.beginLayout()
        top = y
        while (line := layout.createLine()).isValid():
            line.setLineWidth(width)
            line.setPosition(QPointF(0, y - top))
            y += line.height()
        layout.endLayout()
        layouts.append((layout, top))
    image = QImage(width, int(y + 0.999), QImage.Format.Format_RGB32)
    image.fill(background)
    painter = QPainter(image)
    painter.setPen(text)
    for layout, top in layouts:
        layout.draw(painter, QPointF(0, top))
    painter.end()
    return _pixels(image)


@pytest.mark.parametrize("width", [90, 240, 600])
def test_paragraphs_paint_as_formatted_runs_would(qtbot, width):
    lines = RichLines()
    qtbot.addWidget(lines)
    lines.set_paragraphs(PARAGRAPHS)
    lines.resize(width, lines.heightForWidth(width))
    shown = _pixels(lines.grab().toImage().convertToFormat(QImage.Format.Format_RGB32))
    palette = lines.palette()
    expected = _as_rich_text(PARAGRAPHS, lines.font(), width, palette.color(QPalette.ColorRole.Window),
                             palette.color(QPalette.ColorRole.WindowText))
    assert shown.shape == expected.shape
    assert np.array_equal(shown, expected)
    assert (shown != expected[0, 0]).any()  # text was painted


def test_the_colours_painted_follow_the_palette_and_the_enabled_state(qtbot):
    lines = RichLines()
    qtbot.addWidget(lines)
    lines.set_paragraphs([((("Sure it is a 7", "b"),), None)])
    lines.resize(160, 40)
    lines.show()
    qtbot.waitExposed(lines)

    def corner() -> QColor:
        return lines.grab().toImage().pixelColor(150, 35)

    assert corner() == lines.palette().color(QPalette.ColorRole.Window)
    palette = QPalette(lines.palette())
    palette.setColor(QPalette.ColorGroup.All, QPalette.ColorRole.Window, QColor("#fdf6e3"))
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Window, QColor("#d0d0d0"))
    lines.setPalette(palette)
    assert corner() == QColor("#fdf6e3") == lines.palette().color(QPalette.ColorRole.Window)
    lines.setEnabled(False)
    assert corner() == QColor("#d0d0d0") == lines.palette().color(QPalette.ColorRole.Window)
    lines.setEnabled(True)
    assert corner() == QColor("#fdf6e3")


def test_widgets_given_paragraphs_together_lay_them_out_when_the_block_ends(qtbot, monkeypatch):
    """A request's verdicts are laid out one after the other once every column is fed
    (``RichLines.together``), not between each column's plots; a widget read meanwhile is laid out
    first, so what is read is what it was given, and the pixels are those of each set at once."""
    laid_out: list[str] = []
    real = RichLines._lay_out
    monkeypatch.setattr(RichLines, "_lay_out",
                        lambda self, paragraph, width: laid_out.append(paragraph[0][0][0]) or real(self, paragraph, width))
    # texts no other test laid out: the layouts kept across widgets would hide a layout
    given = [[(((f"{runs[0][0]} · {i}", runs[0][1]), *runs[1:]), colour) for runs, colour in PARAGRAPHS[i : i + 3]]
             for i in range(3)]
    widgets = [RichLines() for _ in range(4)]
    for widget in widgets:
        qtbot.addWidget(widget)
        widget.resize(220, 160)
        widget.set_paragraphs(PARAGRAPHS[:2])
        widget.show()
        qtbot.waitExposed(widget)
    qtbot.wait(20)
    laid_out.clear()
    with RichLines.together():
        for widget, paragraphs in zip(widgets, given, strict=False):
            widget.set_paragraphs(paragraphs, pending=[1])
        assert laid_out == []
        assert widgets[1].text() == "\n".join("".join(t for t, _ in runs) for runs, _ in given[1])
        assert laid_out  # the widget read was laid out first
    assert [widget.paragraphs for widget in widgets[:3]] == [tuple(p) for p in given]
    assert all(widget.pending == frozenset({1}) for widget in widgets[:3])
    widgets[3].set_paragraphs(given[2], pending=[1])  # the same, set outside a block
    qtbot.wait(20)
    assert (_pixels(widgets[2].grab().toImage()) == _pixels(widgets[3].grab().toImage())).all()
