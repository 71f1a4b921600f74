"""The fast painting paths paint what the plain ones would: lines and rectangles handed to Qt as
numpy rows, and the canvas repainting only around the newest stroke segment."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PySide6.QtCore import QLineF, QPoint, QPointF, QRect, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen
from PySide6.QtTest import QTest

from app.views.canvas import DrawingCanvas


def _pixels(image: QImage) -> np.ndarray:
    return np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())[:, : 4 * image.width()].copy()


def _paint(draw) -> np.ndarray:
    image = QImage(160, 120, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.setPen(QPen(QColor(20, 40, 200), 1))
    painter.setBrush(QColor(200, 30, 30))
    draw(painter)
    painter.end()
    return _pixels(image)



def watch_paints(widgets, what):
    """The paint events of ``widgets`` as they come, each as ``what(widget, event)``; keep the
    returned filter alive as long as the list is read."""
    from PySide6.QtCore import QEvent, QObject

    painted: list = []

    class Spy(QObject):
        def eventFilter(self, watched, event):  # noqa: N802 (Qt override)
            if event.type() == QEvent.Type.Paint:
                painted.append(what(watched, event))
            return False

    spy = Spy()
    for widget in widgets:
        widget.installEventFilter(spy)
    return painted, spy

def test_rows_kept_with_a_layout_paint_what_they_hold_now_as_qt_objects():
    """A plot's ``Rows``, filled in place between paints, draws its numbers of the moment (not
    those it was made with) as ``QLineF``/``QRectF`` objects paint, whole or from row to row."""
    from app.plots.drawing import Rows

    rng = np.random.default_rng(2)
    lines, rects = Rows(np.zeros((30, 4)), QLineF), Rows(np.zeros((12, 4)), QRectF)
    for _ in range(3):  # filled anew each time, as a stroke's paints do
        lines.array[:] = rng.uniform(-10, 170, (30, 4))
        rects.array[:, :2], rects.array[:, 2:] = rng.uniform(-5, 150, (12, 2)), rng.uniform(0.3, 30, (12, 2))
        expected = _paint(lambda p: p.drawLines([QLineF(*row) for row in lines.array.tolist()]))
        assert (expected != 255).any()
        assert np.array_equal(_paint(lines.draw), expected)
        part = _paint(lambda p: p.drawLines([QLineF(*row) for row in lines.array[7:19].tolist()]))
        assert np.array_equal(_paint(lambda p: lines.draw(p, 7, 19)), part) and not np.array_equal(part, expected)

        def filled(painter: QPainter, rows) -> None:
            for x, y, w, h in rows.tolist():
                painter.fillRect(QRectF(x, y, w, h), QColor(200, 30, 30))

        def drawn(painter: QPainter, *span) -> None:
            painter.setPen(Qt.PenStyle.NoPen)
            rects.draw(painter, *span)

        assert np.array_equal(_paint(drawn), _paint(lambda p: filled(p, rects.array)))
        assert np.array_equal(_paint(lambda p: drawn(p, 5, 6)), _paint(lambda p: filled(p, rects.array[5:6])))
    assert np.array_equal(_paint(lambda p: lines.draw(p, 4, 4)), _paint(lambda p: None))  # no rows: nothing
    # a column of a wider array (not contiguous) and float32 rows are copied, not misread
    rows = rng.uniform(-10, 170, (200, 4))
    expected = _paint(lambda p: p.drawLines([QLineF(*row) for row in rows.tolist()]))
    wide = np.concatenate([rows, rows], axis=1)[:, :4]
    assert np.array_equal(_paint(Rows(wide, QLineF).draw), expected)
    assert np.array_equal(_paint(Rows(rows.astype(np.float32), QLineF).draw),
                          _paint(lambda p: p.drawLines([QLineF(*row) for row in rows.astype(np.float32).tolist()])))
    assert np.array_equal(_paint(Rows(np.empty((0, 4)), QLineF).draw), _paint(lambda p: None))


@pytest.mark.parametrize("size", [280, 456, 333])
def test_canvas_repaints_every_pixel_a_segment_changed(qtbot, size):
    canvas = DrawingCanvas()
    qtbot.addWidget(canvas)
    canvas.resize(size, size)
    asked: list[QRect] = []
    canvas.update = lambda *rect: asked.append(rect[0] if rect else canvas.rect())  # what would be repainted

    def shown() -> np.ndarray:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(0)
        canvas.render(image)
        return _pixels(image).reshape(size, size, 4)

    rng = np.random.default_rng(size)
    before = shown()
    for stroke, brush in enumerate((22, 5, 40, 1)):
        canvas.brush_size = brush
        # a hand's moves: a few widget pixels to a few dozen apart, some leaving the canvas
        points = rng.uniform(0, size, 2) + np.cumsum(rng.uniform(-40, 40, (6, 2)), axis=0)
        for i, (x, y) in enumerate(points.tolist()):
            asked.clear()
            if i == 0:
                canvas._begin(QPointF(x, y), pressure=0.5 + 0.25 * stroke)
            else:
                canvas._draw_to(canvas._to_image(QPointF(x, y)))
            after = shown()
            changed = np.argwhere((after != before).any(axis=2))
            before = after
            assert len(asked) == 1
            assert all(asked[0].contains(int(c), int(r)) for r, c in changed), (stroke, i)
            assert asked[0].width() * asked[0].height() < size * size / 2  # a part, not the whole
        canvas._end()


def test_a_strokes_segment_repaints_the_canvas_only_and_the_screen_shows_it(qtbot):
    """The canvas covers every pixel with its image: a segment repaints it alone, not the seven
    widgets behind it (the window, its splitter, the tab widget and the containers, on every move of
    a stroke), and the screen then holds what a full paint gives."""
    from PySide6.QtWidgets import QApplication, QTabWidget, QVBoxLayout, QWidget

    from app.views.square import SquareContainer

    top, tabs = QWidget(), QTabWidget()
    qtbot.addWidget(top)
    canvas = DrawingCanvas()
    holder = SquareContainer(canvas)
    tabs.addTab(holder, "Draw")
    QVBoxLayout(top).addWidget(tabs)
    top.resize(400, 440)
    top.show()
    qtbot.waitExposed(top)
    qtbot.wait(100)  # the first paints done
    painted, _spy = watch_paints((top, tabs, holder, canvas), lambda watched, event: type(watched).__name__)
    QTest.mousePress(canvas, Qt.MouseButton.LeftButton, pos=QPoint(100, 100))
    QTest.mouseMove(canvas, QPoint(140, 160))
    qtbot.waitUntil(lambda: "DrawingCanvas" in painted, timeout=2000)
    QTest.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=QPoint(140, 160))
    qtbot.wait(20)
    assert set(painted) == {"DrawingCanvas"}
    at = canvas.mapTo(top, QPoint(0, 0))
    screen = QApplication.primaryScreen().grabWindow(top.winId(), at.x(), at.y(), canvas.width(), canvas.height())
    assert np.array_equal(_pixels(screen.toImage().convertToFormat(QImage.Format.Format_RGB32)),
                          _pixels(canvas.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)))


@pytest.mark.parametrize("folding", [True, False])
def test_a_stroke_keeps_every_mouse_move_and_gives_the_folding_back_when_it_ends(qtbot, folding):
    """Qt folds the mouse moves that queue up while the window is busy into the newest one
    (X11): during a stroke that drew a burst of moves as one straight line, not the digit drawn.
    A stroke turns the folding off for its moves and gives back the setting it found, also for
    a pen's stroke; a move without a stroke changes nothing."""
    from PySide6.QtCore import QCoreApplication

    flag = Qt.ApplicationAttribute.AA_CompressHighFrequencyEvents
    before = QCoreApplication.testAttribute(flag)
    QCoreApplication.setAttribute(flag, folding)
    try:
        canvas = DrawingCanvas()
        qtbot.addWidget(canvas)
        canvas.show()
        qtbot.waitExposed(canvas)
        QTest.mouseMove(canvas, QPoint(50, 50))
        assert QCoreApplication.testAttribute(flag) is folding
        QTest.mousePress(canvas, Qt.MouseButton.LeftButton, pos=QPoint(100, 100))
        assert QCoreApplication.testAttribute(flag) is False
        QTest.mouseMove(canvas, QPoint(140, 160))
        assert QCoreApplication.testAttribute(flag) is False
        QTest.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=QPoint(140, 160))
        assert QCoreApplication.testAttribute(flag) is folding
        canvas._begin(QPointF(10, 10), 0.8)  # a pen's stroke takes the same two steps
        assert QCoreApplication.testAttribute(flag) is False
        canvas._end()
        assert QCoreApplication.testAttribute(flag) is folding
    finally:
        QCoreApplication.setAttribute(flag, before)


@pytest.mark.parametrize(("shape", "target", "clip"), [
    ((28, 28), QRectF(6, 6, 140, 140), None),  # what the model sees
    ((10, 10, 3), QRectF(20.3, 10.7, 151.4, 151.4), QRect(15, 5, 200, 160)),  # a class correlation, clipped
    ((10, 10, 3), QRectF(60.6, 38.4, 68.6, 68.6), QRect(58, 36, 73, 73)),  # one in a 1400×860 window: one draw
    ((10, 10, 3), QRectF(3.5, 2.5, 94.0, 95.0), None),  # 96 rows touched (2 to 97): two bands
    ((10, 40, 3), QRectF(30.5, 3.25, 160.0, 222.6), None),  # the draws' shading
    ((280, 280), QRectF(0, 0, 236, 236), QRect(40, 90, 30, 120)),  # the canvas, a segment's repaint
])
def test_an_image_drawn_in_bands_paints_what_one_draw_paints_and_no_band_reaches_qts_thread_pool(shape, target, clip):
    """``draw_image`` draws in bands so that Qt's raster engine never hands the rows to its thread
    pool (it does for a scaled image over 95 rows, and then waits for the pool's threads to get a
    core): every pixel as one ``drawImage`` paints it, each band at most 95 rows high."""
    from app.plots.drawing import draw_image, to_image

    image = to_image(np.random.default_rng(len(shape)).integers(0, 256, shape))
    heights: list[int] = []

    class Counting(QPainter):
        def drawImage(self, *args):  # noqa: N802 (Qt's name)
            heights.append(self.clipBoundingRect().toAlignedRect().height())
            super().drawImage(*args)

    def painted(draw) -> np.ndarray:
        canvas = QImage(260, 260, QImage.Format.Format_ARGB32_Premultiplied)
        canvas.fill(QColor("white"))
        painter = Counting(canvas)
        if clip is not None:
            painter.setClipRect(clip)
        draw(painter)
        painter.end()
        return _pixels(canvas)

    whole = painted(lambda painter: QPainter.drawImage(painter, target, image))
    banded = painted(lambda painter: draw_image(painter, target, image))
    assert np.array_equal(whole, banded)
    assert heights and max(heights) <= 95
    # as few bands as 95 rows each allow: one draw, unclipped, for an image over 95 rows or fewer
    rows = math.ceil(target.bottom()) - math.floor(target.top())
    assert len(heights) == -(-rows // 95)


def test_rich_lines_show_text_as_written_and_wrap_to_the_width(qtbot):
    from app.views.rich_lines import RichLines

    lines = RichLines()
    qtbot.addWidget(lines)
    # a class of one's own images may be named anything: it is text, never markup
    lines.set_paragraphs([((("Reads ", ""), ("<b>cats & dogs</b>", "b"), (": p̄ 0.70", "")), None),
                          ((("Uncertain:", "b"), (" <i>x</i> and y overlap (0.52)", "")), "#b2182b")])
    assert lines.text() == "Reads <b>cats & dogs</b>: p̄ 0.70\nUncertain: <i>x</i> and y overlap (0.52)"
    placed, _ = lines._layouts(400)
    layouts = [band.layout for band in placed]
    assert [layout.text() for layout in layouts] == lines.text().split("\n")
    assert placed[0].top == 0 and placed[1].top == layouts[0].boundingRect().height()  # one below the other
    bold = layouts[0].formats()[0]
    assert (bold.start, bold.length, bold.format.fontWeight()) == (6, 18, QFont.Weight.Bold)
    wide, narrow = lines.heightForWidth(400), lines.heightForWidth(60)
    assert narrow > wide >= 2 * QFontMetricsF(lines.font()).height() - 1  # two lines at least, more when wrapped
    lines.resize(60, narrow)
    placed_narrow, _ = lines._layouts(60)
    image = QImage(60, narrow, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(QColor("white"))
    lines.render(image)
    ink = (_pixels(image).reshape(narrow, 60, 4)[..., :3] < 128).any(axis=(1, 2))
    assert ink[int(0.8 * narrow):].any()  # the wrapped lines are painted, down to the last
    # a new text lays out only its new paragraphs (issue 49): the unchanged second line is reused
    lines.set_paragraphs([((("Reads ", ""), ("x", "b"), (": p̄ 0.71", "")), None), lines.paragraphs[1]])
    again, _ = lines._layouts(60)
    assert again[1].layout is placed_narrow[1].layout and again[0].layout is not placed_narrow[0].layout


def test_a_new_verdict_repaints_the_verdict_only(qtbot):
    """The verdict paints its own background, so a new one (every prediction of a stroke) does
    not repaint the column's frame and holder behind it."""
    from app.views.column import ColumnView

    view = ColumnView("key", tuple("0123456789"))
    qtbot.addWidget(view)
    view.resize(260, 700)
    view.show()
    qtbot.waitExposed(view)
    qtbot.wait(200)  # the first paints done
    painted, _spy = watch_paints((view, view._verdict_holder, view.verdict),
                                 lambda watched, event: watched.objectName() or type(watched).__name__)
    view.verdict.set_paragraphs([((("Reads ", ""), ("7", "b"), (": p̄ 0.97", "")), None)])
    qtbot.waitUntil(lambda: "verdict" in painted, timeout=2000)
    assert painted == ["verdict"]


def test_a_plot_maps_data_to_pixels_by_its_ranges_even_when_only_they_change(qtbot):
    from app.plots.input_views import IntervalPlot

    plot = IntervalPlot(tuple("0123456789"))
    qtbot.addWidget(plot)
    plot.resize(300, 200)
    rect = plot.data_rect()
    assert plot.px(0.0, 1.02).y() == pytest.approx(rect.top())
    assert plot.px(-0.6, 0.0).x() == pytest.approx(rect.left()) and plot.px(0.0, 0.0).y() == pytest.approx(rect.bottom())
    plot.y_range = (0.0, 2.04)  # the ticks stay: only the mapping changes
    rect = plot.data_rect()
    assert plot.px(0.0, 1.02).y() == pytest.approx(rect.center().y())


def _prediction(draws: int, seed: int | None = None):
    import torch

    from core.analysis.predictive import Prediction
    from core.analysis.uncertainty import summarise

    logits = torch.randn(draws, 10, generator=torch.Generator().manual_seed(draws if seed is None else seed)) * 2
    samples = torch.softmax(logits, -1)
    return Prediction(samples, summarise(samples, level=0.9))


def _grab(plot) -> np.ndarray:
    return _pixels(plot.grab().toImage().convertToFormat(QImage.Format.Format_ARGB32_Premultiplied))


@pytest.mark.parametrize("view", ["histograms", "interval", "entropy", "variance", "correlation"])
def test_a_stroke_alternating_previews_and_full_counts_paints_each_as_a_fresh_plot_would(qtbot, view):
    """A stroke alternates a 16-draw preview and the 100-draw full count (other titles; the draws
    as ticks, then shaded with a colour scale): each plot keeps both backdrops (axes, scale, title)
    rather than painting its axes again on every update, and paints exactly what a new plot shown
    the same prediction paints."""
    from app.plots.input_views import INPUT_PLOTS

    cls = next(c for c in INPUT_PLOTS if c.view_key == view)
    names = tuple("0123456789")
    preview, full = _prediction(16), _prediction(100)
    fresh = {}
    for draws, prediction in ((16, preview), (100, full)):
        plot = cls(names)
        qtbot.addWidget(plot)
        plot.resize(300, 180)
        plot.show(prediction, 0.9)
        fresh[draws] = _grab(plot)
    plot = cls(names)
    qtbot.addWidget(plot)
    plot.resize(300, 180)
    axes_painted = []
    paint_axes = plot._paint_axes
    plot._paint_axes = lambda *args: (axes_painted.append(1), paint_axes(*args))
    for draws, prediction in ((16, preview), (100, full)) * 3:
        plot.show(prediction, 0.9)
        assert np.array_equal(_grab(plot), fresh[draws]), f"{view} at {draws} draws"
    changes = 2 if view in ("histograms", "interval", "entropy") else 1  # titles or scales that change
    assert len(axes_painted) == changes


@pytest.mark.parametrize("view", ["histograms", "interval", "entropy", "variance", "correlation"])
def test_what_a_plot_keeps_from_its_layout_follows_a_resize_a_new_font_and_new_numbers(qtbot, view):
    """A plot maps the classes' positions to pixels once per layout (``InputPlot.geometry``) and
    only the numbers on each paint: after a resize, a font change, another draw count (ticks of
    another length) or the reference's marks coming and going, it paints what a new plot shown
    the same at that size paints, so nothing kept from the layout before shows."""
    from app.plots.input_views import INPUT_PLOTS

    cls = next(c for c in INPUT_PLOTS if c.view_key == view)
    names = tuple("0123456789")
    small = QFont()
    small.setPointSizeF(7.0)

    def shown(plot, size, prediction, reference=None, font=None):
        if font is not None:
            plot.setFont(font)
        plot.resize(*size)
        if view == "interval":
            plot.set_reference(reference, "exact inference")
        plot.show(prediction, 0.9)
        return _grab(plot)

    kept = cls(names)
    qtbot.addWidget(kept)
    steps = [((300, 180), _prediction(16), None, None), ((360, 240), _prediction(8), None, None),
             ((360, 240), _prediction(16), _prediction(100).summary, None),
             ((250, 150), _prediction(100), None, small), ((250, 150), _prediction(16), _prediction(8).summary, None)]
    for size, prediction, reference, font in steps:
        fresh = cls(names)
        qtbot.addWidget(fresh)
        if font is not None or kept.font() != fresh.font():
            fresh.setFont(kept.font() if font is None else font)
        expected = shown(fresh, size, prediction, reference)
        assert np.array_equal(shown(kept, size, prediction, reference, font), expected), (view, size)


@pytest.mark.parametrize("view", ["histograms", "interval", "entropy", "variance", "correlation"])
def test_new_numbers_repaint_the_data_only_and_the_window_shows_what_a_full_paint_would(qtbot, view):
    """New numbers of the same kind repaint the plot's data area (and the entropy's labels that
    show them), not the axes around it; a new title wording adds its band, a colour scale that
    comes or goes the whole plot. After every step of a stroke (previews of 16 and 8 draws, the
    full count's shading and its scale, the reference's marks coming and going) the window holds
    exactly what painting the whole plot anew gives."""
    from PySide6.QtWidgets import QApplication

    from app.plots.input_views import INPUT_PLOTS

    cls = next(c for c in INPUT_PLOTS if c.view_key == view)
    plot = cls(tuple("0123456789"))
    qtbot.addWidget(plot)
    plot.resize(300, 180)
    plot.show(_prediction(16), 0.9)
    plot.setVisible(True)
    qtbot.waitExposed(plot)
    qtbot.wait(50)
    painted, _spy = watch_paints((plot,), lambda watched, event: event.region().boundingRect())
    format_ = QImage.Format.Format_RGB32
    # (prediction, reference marks, whether the plot's kind of picture stays: same draw count,
    # same marks, so that only the data may be repainted when the title keeps its words too)
    steps = [(_prediction(16, 1), None, True), (_prediction(16, 2), None, True), (_prediction(100), None, False),
             (_prediction(100, 3), None, True), (_prediction(16), _prediction(100).summary, False),
             (_prediction(16, 4), _prediction(100, 5).summary, True), (_prediction(8), None, False)]
    for step, (prediction, reference, same_kind) in enumerate(steps):
        painted.clear()
        if view == "interval":
            plot.set_reference(reference, "exact inference")
        title = plot._title_wordings
        plot.show(prediction, 0.9)
        qtbot.waitUntil(lambda: bool(painted), timeout=2000)
        qtbot.wait(20)
        shown = QApplication.primaryScreen().grabWindow(plot.winId()).toImage()
        assert np.array_equal(_pixels(shown.convertToFormat(format_)), _pixels(plot.grab().toImage().convertToFormat(format_))), (view, step)
        whole = painted[0].contains(plot.rect())
        if same_kind and plot._title_wordings == title:
            assert not whole, (view, step)  # the data only


def test_a_verdict_repaints_only_the_paragraphs_that_changed_and_shows_what_a_full_paint_would(qtbot):
    """A stroke changes a line or two of the verdict: only their bands are repainted, and the
    window then shows exactly what painting the whole verdict anew shows."""
    from PySide6.QtWidgets import QApplication

    from app.views.rich_lines import RichLines

    lines = RichLines()
    qtbot.addWidget(lines)
    lines.resize(260, 160)
    paragraphs = [((("Probably an 8", "b"),), None), ((("Reads ", ""), ("8", "b"), (": p̄ 0.70", "")), None),
                  ((("8 vs 6: overlap 0.12", ""),), None), ((("Conformal: 8, 90 % guaranteed", "b"),), None)]
    lines.set_paragraphs(paragraphs)
    lines.show()
    qtbot.waitExposed(lines)
    qtbot.wait(100)
    painted, _spy = watch_paints((lines,), lambda watched, event: event.region().boundingRect())
    placed, _ = lines._layouts(lines.width())
    second, third = placed[1].top, placed[2].top
    lines.set_paragraphs([paragraphs[0], ((("Reads ", ""), ("8", "b"), (": p̄ 0.74", "")), None), *paragraphs[2:]])
    qtbot.waitUntil(lambda: bool(painted), timeout=2000)
    assert painted[0].top() <= second and painted[0].bottom() < third + 1  # the second paragraph's band only
    shown = QApplication.primaryScreen().grabWindow(lines.winId()).toImage()
    fresh = lines.grab().toImage()
    format_ = QImage.Format.Format_RGB32
    assert np.array_equal(_pixels(shown.convertToFormat(format_)), _pixels(fresh.convertToFormat(format_)))
    # a paragraph that grows moves the ones below it: they are repainted too
    painted.clear()
    lines.set_paragraphs([paragraphs[0], ((("Reads ", ""), ("8", "b"), (": p̄ 0.74 " + "and more " * 12, "")), None),
                          *paragraphs[2:]])
    qtbot.waitUntil(lambda: bool(painted), timeout=2000)
    assert painted[0].bottom() >= lines._layouts(lines.width())[1] - 1
    shown = QApplication.primaryScreen().grabWindow(lines.winId()).toImage()
    assert np.array_equal(_pixels(shown.convertToFormat(format_)), _pixels(lines.grab().toImage().convertToFormat(format_)))


def test_a_paragraph_between_two_changed_ones_is_not_drawn_again(qtbot):
    """The verdict draws only the paragraphs in the region to repaint, not all within its bounding
    rectangle: a stroke changes the numbers of the first lines and of the reference's line, with
    the unchanged ones between them left as they are on screen (which then shows what a full
    paint gives)."""
    from PySide6.QtWidgets import QApplication

    from app.views.rich_lines import RichLines

    lines = RichLines()
    qtbot.addWidget(lines)
    lines.resize(260, 160)
    paragraphs = [((("Reads ", ""), ("8", "b"), (": p̄ 0.70", "")), None), ((("a quick look at 16 draws", "i"),), None),
                  ((("Conformal: 8, 90 % guaranteed", "b"),), None), ((("differs by 0.12", ""),), None)]
    lines.set_paragraphs(paragraphs)
    lines.show()
    qtbot.waitExposed(lines)
    qtbot.wait(100)
    drawn: list[str] = []
    original = RichLines._layouts

    def spied(self, width):
        placed, height = original(self, width)
        for layout, *_ in placed:
            text = layout.text()
            layout.draw = lambda painter, at, _layout=layout, _text=text: (drawn.append(_text),
                                                                         type(_layout).draw(_layout, painter, at))
        return placed, height

    lines._layouts = spied.__get__(lines)
    lines.set_paragraphs([((("Reads ", ""), ("8", "b"), (": p̄ 0.74", "")), None), *paragraphs[1:3],
                          ((("differs by 0.15", ""),), None)])
    qtbot.waitUntil(lambda: bool(drawn), timeout=2000)
    qtbot.wait(20)
    assert drawn == ["Reads 8: p̄ 0.74", "differs by 0.15"]
    format_ = QImage.Format.Format_RGB32
    shown = QApplication.primaryScreen().grabWindow(lines.winId()).toImage()
    del lines._layouts
    assert np.array_equal(_pixels(shown.convertToFormat(format_)), _pixels(lines.grab().toImage().convertToFormat(format_)))


def test_a_paragraph_that_comes_back_is_not_laid_out_again(qtbot):
    """The preview's note is shown while a stroke moves and gone at the full count: when it comes
    back with the next stroke its layout is the one made before (laying out text is most of the
    verdict's cost per update)."""
    from app.views.rich_lines import RichLines

    lines = RichLines()
    qtbot.addWidget(lines)
    reads = ((("Reads ", ""), ("8", "b"), (": p̄ 0.70", "")), None)
    note = ((("a quick look at 16 draws while you draw; all 100 when you stop", "i"),), None)
    lines.set_paragraphs([reads, note])
    first, _ = lines._layouts(200)
    lines.set_paragraphs([((("Reads ", ""), ("8", "b"), (": p̄ 0.71", "")), None)])
    lines._layouts(200)
    lines.set_paragraphs([reads, note])
    again, _ = lines._layouts(200)
    assert again[1][0] is first[1][0] and again[0][0] is first[0][0]


def test_columns_showing_the_same_paragraph_lay_it_out_once(qtbot, monkeypatch):
    """Two columns' verdicts often say the same sentence ("Torn between 2 and 3"): laid out once
    for both at the same width and font, anew for another font or width, and each draws it as a
    verdict laid out alone would."""
    from PySide6.QtGui import QFont

    from app.views.rich_lines import RichLines

    monkeypatch.setattr(RichLines, "_kept", {})
    laid: list[str] = []
    original = RichLines._lay_out

    def counted(self, paragraph, width):
        laid.append("".join(text for text, _ in paragraph[0]))
        return original(self, paragraph, width)

    monkeypatch.setattr(RichLines, "_lay_out", counted)
    torn = ((("Torn between 2 and 3", "b"),), None)
    first, second, bigger = RichLines(), RichLines(), RichLines()
    for lines in (first, second, bigger):
        qtbot.addWidget(lines)
    font = QFont(first.font())
    font.setPointSizeF(font.pointSizeF() * 1.5)
    bigger.setFont(font)
    for lines in (first, second, bigger):
        lines.set_paragraphs([torn, ((("Reads ", ""), ("2", "b"), (": p̄ 0.52", "")), None)])
    placed = [lines._layouts(200)[0] for lines in (first, second, bigger)]
    assert placed[0][0][0] is placed[1][0][0] is not placed[2][0][0]
    assert laid == ["Torn between 2 and 3", "Reads 2: p̄ 0.52", "Torn between 2 and 3", "Reads 2: p̄ 0.52"]
    assert second._layouts(120)[0][0][0] is not placed[1][0][0]  # another width: laid out for it
    format_ = QImage.Format.Format_RGB32
    for lines in (first, second):
        lines.resize(200, lines.heightForWidth(200))
    alone = RichLines()
    qtbot.addWidget(alone)
    monkeypatch.setattr(RichLines, "_kept", {})
    alone.set_paragraphs([torn, ((("Reads ", ""), ("2", "b"), (": p̄ 0.52", "")), None)])
    alone.resize(200, alone.heightForWidth(200))
    expected = _pixels(alone.grab().toImage().convertToFormat(format_))
    for lines in (first, second):
        assert np.array_equal(_pixels(lines.grab().toImage().convertToFormat(format_)), expected)


def test_the_canvas_reads_its_ink_from_the_grey_levels_as_from_the_float_drawing(qtbot):
    """The small-drawing note and the emptiness check read the grey levels directly: the same
    answers as thresholding the float drawing at 0.1 and at 0, at every grey level."""
    canvas = DrawingCanvas()
    qtbot.addWidget(canvas)
    assert canvas.is_empty() and canvas.ink_extent() == 0.0
    for level in (1, 25, 26, 255):
        ramp = np.zeros((28, 28), dtype=np.float32)
        ramp[10:14, 3:9] = level / 255.0
        canvas.set_array(ramp)
        drawing = canvas.to_array()
        ink = drawing > 0.1
        expected = 0.0 if not ink.any() else max(
            np.ptp(np.flatnonzero(ink.any(1))) + 1, np.ptp(np.flatnonzero(ink.any(0))) + 1) / canvas.SIDE
        assert canvas.ink_extent() == expected
        assert canvas.is_empty() == (not drawing.any())


def test_the_ink_box_and_extent_follow_every_change_of_the_ink(qtbot):
    """The ink's box and extent share the grey levels' maxima, read once per change of the ink:
    after each segment, undo, clear and image set they are those of the drawing as it is then
    (found here from the float drawing, at the thresholds 0 and 0.1)."""
    canvas = DrawingCanvas()
    qtbot.addWidget(canvas)
    canvas.resize(280, 280)

    def check():
        drawing = canvas.to_array()
        box = np.flatnonzero(drawing.any(1)), np.flatnonzero(drawing.any(0))
        cut = (np.zeros((1, 1), np.float32) if not len(box[0])
               else drawing[box[0][0]:box[0][-1] + 1, box[1][0]:box[1][-1] + 1])
        assert np.array_equal(canvas.ink_array(), cut)
        ink = drawing > 0.1
        extent = 0.0 if not ink.any() else max(
            np.ptp(np.flatnonzero(ink.any(1))) + 1, np.ptp(np.flatnonzero(ink.any(0))) + 1) / canvas.SIDE
        assert canvas.ink_extent() == extent

    check()
    revisions = [canvas.revision]
    canvas._begin(QPointF(40, 40))
    for x in (80, 160, 250):
        check()
        canvas._draw_to(QPointF(x, x / 2))
        revisions.append(canvas.revision)
    check()
    canvas._end()
    assert canvas.revision == revisions[-1]  # the stroke's end changes no ink
    for change in (canvas.undo, lambda: canvas.set_array(np.eye(28, dtype=np.float32) * 0.3), canvas.clear):
        change()
        revisions.append(canvas.revision)
        check()
    assert len(set(revisions)) == len(revisions)


def test_the_model_input_from_the_ink_box_is_the_one_from_the_whole_drawing(qtbot):
    """The Draw tab hands the preprocessing only the box around the drawing's ink (any grey level
    above 0): the same 28×28 input bit for bit as from the whole float drawing, for strokes drawn
    with the mouse at several brush sizes, faint greys below the ink threshold beside them, ink
    against every edge; a blank or only faintly grey canvas is refused with the same sentence."""
    from core.engine.data.preprocess import EmptyDrawingError, to_mnist

    canvas = DrawingCanvas()
    qtbot.addWidget(canvas)
    canvas.show()
    rng = np.random.default_rng(5)
    side = canvas.SIDE
    for case in range(12):
        canvas.clear()
        canvas.brush_size = int(rng.integers(3, 40))
        for _ in range(int(rng.integers(1, 4))):
            start = QPoint(*(int(v) for v in rng.integers(0, side, 2)))
            end = QPoint(*(int(v) for v in rng.integers(0, side, 2)))
            QTest.mousePress(canvas, Qt.MouseButton.LeftButton, pos=start)
            QTest.mouseMove(canvas, (start + end) / 2)
            QTest.mouseMove(canvas, end)
            QTest.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=end)
        drawing = canvas.to_array()
        if case % 3 == 0:  # faint grey (below the ink threshold of 0.05) far from the ink, and at an edge
            drawing[0, int(rng.integers(0, side))] = 12 / 255.0
            drawing[int(rng.integers(0, side)), side - 1] = 3 / 255.0
            canvas.set_array(drawing)
            drawing = canvas.to_array()
        assert canvas.ink_array().shape[0] < side or drawing[[0, -1]].any()
        assert np.array_equal(to_mnist(canvas.ink_array()), to_mnist(drawing)), case
    for faint in (0, 12):
        blank = np.zeros((side, side), dtype=np.float32)
        blank[100:140, 50:60] = faint / 255.0
        canvas.set_array(blank)
        with pytest.raises(EmptyDrawingError) as whole:
            to_mnist(canvas.to_array())
        with pytest.raises(EmptyDrawingError) as cut:
            to_mnist(canvas.ink_array())
        assert str(cut.value) == str(whole.value)


def test_a_verdict_is_laid_out_again_in_a_new_font(qtbot):
    from PySide6.QtGui import QFont

    from app.views.rich_lines import RichLines

    lines = RichLines()
    qtbot.addWidget(lines)
    lines.set_paragraphs([((("Probably an 8", "b"),), None)])
    before, height = lines._layouts(200)
    font = QFont(lines.font())
    font.setPointSizeF(font.pointSizeF() * 2)
    lines.setFont(font)
    after, taller = lines._layouts(200)
    assert after[0][0] is not before[0][0] and taller > height


def test_the_drawing_is_preprocessed_again_only_when_its_ink_changed(qtbot, monkeypatch):
    """A stroke's end asks for the drawing its last move was read from: the model input comes
    from that read, not from preprocessing it again; any change of ink (a move, undo, clear, an
    image put on the canvas) is read anew, and what is handed out is the reader's own copy."""
    import app.views.modes
    from app.views.modes import DrawPanel
    from core.engine.data.preprocess import to_mnist

    reads: list[int] = []
    real = app.views.modes.to_mnist
    monkeypatch.setattr(app.views.modes, "to_mnist", lambda a: reads.append(1) or real(a))
    panel = DrawPanel()
    qtbot.addWidget(panel)
    panel.resize(320, 360)
    canvas = panel.canvas

    def expected():
        return to_mnist(canvas.to_array())

    assert panel.current_input() == (None, "")  # blank
    canvas._begin(QPointF(100, 60))
    for y in (90, 130, 170):
        canvas._draw_to(canvas._to_image(QPointF(100, y)))
    first, label = panel.current_input()
    assert label == "your drawing" and np.array_equal(first, expected()) and len(reads) == 2
    canvas._end()  # the stroke ends where it was read: no preprocessing
    again, _ = panel.current_input()
    assert len(reads) == 2 and np.array_equal(again, first) and again is not first
    again[:] = 0  # the reader's copy: the next read is untouched
    assert np.array_equal(panel.current_input()[0], first) and len(reads) == 2
    for change in (lambda: canvas._begin(QPointF(150, 100)), canvas.undo, canvas.clear,
                   lambda: canvas.set_array(np.eye(28, dtype=np.float32))):
        change()
        shown, _ = panel.current_input()
        now = None if canvas.is_empty() else expected()
        assert (shown is None and now is None) or np.array_equal(shown, now)
    assert len(reads) == 2 + 4  # the blank and the stroke, then each change read anew


def test_what_the_model_sees_is_repainted_only_when_it_changed(qtbot):
    """A stroke's end shows the input its last move showed: the same numbers make no new image and
    no repaint; different ones (or another shape) do, and the widget shows them."""
    from app.views.preview import PreviewView

    view = PreviewView()
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    digit = np.zeros((28, 28), np.float32)
    digit[4:24, 13:16] = 1.0
    view.show_image(digit)
    qtbot.wait(50)
    painted, _spy = watch_paints((view,), lambda watched, event: 1)
    view.show_image(digit.copy())  # equal numbers, another array
    qtbot.wait(50)
    assert painted == []
    before = _pixels(view.grab().toImage())
    moved = np.roll(digit, 3, axis=1)
    view.show_image(moved)
    qtbot.waitUntil(lambda: bool(painted), timeout=2000)
    assert np.array_equal(view.shown, moved) and not np.array_equal(_pixels(view.grab().toImage()), before)
    view.show_image(None)  # cleared: a black square
    assert view.shown.shape == (28, 28) and not view.shown.any()


def test_a_class_axis_labels_each_class_as_its_choice_says_and_follows_a_new_choice():
    """An axis's labels are made once per choice (every paint keys its plot's backdrop by them)
    and follow the choice: the names as they are, shortened, every other one."""
    from app.plots.axes import ACROSS_LADDER
    from app.plots.input_plot import Axis

    names = ("0-2", "3-7", "8-14", "15-24", "25-37")
    axis = Axis("bottom", classes=names)
    assert axis.labels() == tuple(enumerate(names))
    expected = {(False, False, 1): names, (True, False, 1): ("0", "3", "8", "15", "25"),
                (True, True, 1): ("0", "3", "8", "15", "25"), (True, True, 2): ("0", "", "8", "", "25")}
    for choice in (*ACROSS_LADDER, None, ACROSS_LADDER[-1]):
        axis.choice = choice
        assert axis.labels() == tuple(enumerate(expected.get(choice, names))), choice
        assert axis.labels() is axis.labels()  # made once for this choice
    assert Axis("left", ticks=((0.0, "0"), (1.0, "1"))).labels() == ((0.0, "0"), (1.0, "1"))
