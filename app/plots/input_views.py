"""The per-input plots of one column, one view each, all fed a :class:`core.predictive.Prediction`.

Each plot creates its items once and updates them with ``setData``/``setOpts``; each has a
``view_key`` naming the :mod:`core.input_figures` view that exports the same numbers, a tooltip
in plain words, and a context menu whose "Export…" emits ``export_requested(view_key)``.
"""

from __future__ import annotations

import functools
import math
import re
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QFont, QFontMetricsF
from PySide6.QtWidgets import QMenu

from app.plots.style import BAR, BAR_TOP, GRID, MEAN, UNCERTAINTY, diverging_lut, sequential_lut
from core.naming import FADE_SD, plural

if TYPE_CHECKING:  # the window is built before the engine (torch) loads: see app.__main__
    from core.predictive import Prediction

#: Up to this many draws, each draw is shown as a tick; above, as a histogram.
FEW_DRAWS = 30
PROBABILITY_TICKS = [[(0.0, "0"), (0.5, ".5"), (1.0, "1")]]


@functools.cache
def brush(colour: tuple[int, ...]) -> QBrush:
    """One brush per colour, made once: the same objects let pyqtgraph reuse its symbol cache."""
    return pg.mkBrush(colour)


def short_class_name(name: str) -> str:
    """A range by its first value ("25-37" → "25", "60+" → "60"); other names unchanged."""
    match = re.fullmatch(r"(\d+)\s*(?:[-–]\s*\d+|\+)", name)
    return match.group(1) if match else name


class ClassAxis(pg.AxisItem):
    """An axis with one tick per class whose labels stay readable when the plot is small.

    Labels longer than one character (the age groups) are fitted to the room between two
    classes: along the x axis the full names, else each group's first age ("0 3 8 15 25 38
    48 60", an age scale), else those in a smaller font, else every other one; down the y
    axis the full names, else in a smaller font, else every other one. Single-character
    names (the digits) are always drawn as they are.
    """

    SMALL_POINT_SIZE = 7.0

    def __init__(self, orientation: str, class_names: tuple[str, ...]) -> None:
        super().__init__(orientation)
        self.class_names = tuple(class_names)
        self.short_names = tuple(short_class_name(n) for n in self.class_names)
        #: (short names, small font, label every n-th class), or None before the first fit
        self.choice: tuple[bool, bool, int] | None = None
        self.setTicks([list(enumerate(self.class_names))])

    def resizeEvent(self, ev=None) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(ev)
        self.fit_labels()

    def setRange(self, mn: float, mx: float) -> None:  # noqa: N802 (pyqtgraph override)
        super().setRange(mn, mx)
        self.fit_labels()

    def fit_labels(self) -> None:
        names = getattr(self, "class_names", ())  # setRange runs inside AxisItem.__init__
        if max(map(len, names), default=1) <= 1:
            return
        across = self.orientation in ("top", "bottom")
        length, span = (self.width() if across else self.height()), abs(self.range[1] - self.range[0])
        if length <= 0 or span <= 0:
            return
        spacing = length / span  # pixels from one class to the next
        small = QFont(self.font())
        small.setPointSizeF(min(self.SMALL_POINT_SIZE, small.pointSizeF()))

        ladder = ([(False, False, 1), (True, False, 1), (True, True, 1), (True, True, 2)] if across
                  else [(False, False, 1), (False, True, 1), (False, True, 2)])
        current = ladder.index(self.choice) if self.choice in ladder else len(ladder)

        def fits(choice: tuple[bool, bool, int]) -> bool:
            short, small_font, every = choice
            metrics = QFontMetricsF(small if small_font else self.font())
            if across:
                need = max(metrics.horizontalAdvance(n) for n in (self.short_names if short else names)) + 3
            else:
                need = metrics.capHeight() + 1.5
            # Going back to larger labels needs a margin: a font change resizes the axis, and
            # so the plot, which must not flip the choice back and forth.
            return need + (1.5 if ladder.index(choice) < current else 0) <= spacing * every

        choice = next((c for c in ladder if fits(c)), ladder[-1])
        if choice == self.choice:
            return
        self.choice = choice
        short, small_font, every = choice
        self.setTickFont(small if small_font else None)
        self.setTicks([[(i, n if i % every == 0 else "") for i, n in
                        enumerate(self.short_names if short else names)]])
        shown = self.short_names if short else names
        self.setToolTip("" if shown == names and every == 1 else
                        "Labels shortened to fit: " + ", ".join(names))


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


class InputPlot(CompactPlot):
    """Base of the per-input plots: a tooltip, and a context menu that exports the view."""

    export_requested = Signal(str)
    view_key: ClassVar[str]
    tooltip: ClassVar[str]

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__()
        self.class_names = class_names
        self.setToolTip(self.tooltip)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._on_context_menu_requested)

    def _on_context_menu_requested(self, pos: QPoint) -> None:
        menu = QMenu(self)
        menu.addAction("Export this plot (PNG, SVG, CSV, JSON)…", lambda: self.export_requested.emit(self.view_key))
        menu.exec(self.mapToGlobal(pos))

    def set_title(self, text: str) -> None:
        # Re-laying out a title costs more than redrawing the data: only when it changes.
        if text != getattr(self, "_title", None):
            self._title = text
            self.getPlotItem().setTitle(text, size="9pt")

    def use_class_axis(self, *sides: str) -> None:
        """One class per tick on these sides, with labels fitted to the plot's size."""
        self.getPlotItem().setAxisItems({side: ClassAxis(side, self.class_names) for side in sides})

    def show(self, prediction: Prediction, level: float) -> None:
        """Draw one column's prediction (S draws of K class probabilities and their summary)."""
        raise NotImplementedError

    def clear_view(self) -> None:
        raise NotImplementedError


class DrawsPlot(InputPlot):
    """Per-class distribution of the draws p_s,k: a class × probability heat map, or one tick
    per draw when there are few; the mean as a diamond and the credible interval as a line."""

    view_key = "histograms"
    tooltip = (
        "Each row is a class. Every posterior draw (one plausible model) gives each class a "
        "probability between 0 and 1; the shading shows where the draws put it (darker: more "
        "draws), or one tick per draw when there are few. The diamond is the average and the "
        "line the credible interval. Rows that spread wide mean the models disagree."
    )

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(class_names)
        k = len(class_names)
        item = self.getPlotItem()
        item.invertY(True)
        item.setXRange(0, 1, padding=0.02)
        item.setYRange(-0.5, k - 0.5, padding=0)
        self.use_class_axis("left")
        item.getAxis("bottom").setTicks(PROBABILITY_TICKS)
        item.setLabel("bottom", "probability")
        self.setMinimumHeight(130)
        self.heat = pg.ImageItem(np.zeros((1, k)))
        self.heat.setColorMap(sequential_lut())
        self.heat.setRect(QRectF(0, -0.5, 1, k))
        self.ticks = pg.ScatterPlotItem(symbol="|", size=11, pen=pg.mkPen(BAR, width=1.5), brush=None)
        self.interval = pg.ErrorBarItem(x=np.zeros(k), y=np.arange(k), left=0, right=0, beam=0.25, pen=pg.mkPen(MEAN, width=1.2))
        self.mean = pg.ScatterPlotItem(symbol="d", size=8, pen=None)
        for it in (self.heat, self.ticks, self.interval, self.mean):
            item.addItem(it)
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        k = len(self.class_names)
        s = summary.num_samples
        samples = summary.histograms  # (K, bins) shares of draws
        few = s <= FEW_DRAWS
        self.heat.setVisible(not few)
        self.ticks.setVisible(few)
        if few:
            values = prediction.samples.numpy()  # (S, K)
            self.ticks.setData(x=values.reshape(-1), y=np.tile(np.arange(k), values.shape[0]))
        else:
            # √share: a spread-out class (many bins with a few draws each) stays visible beside
            # classes whose draws all sit in one bin at 0.
            self.heat.setImage(np.sqrt(samples.numpy().T), levels=(0, 1))
            self.heat.setRect(QRectF(0, -0.5, 1, k))
        mean = summary.mean.numpy()
        top = summary.predicted_class
        self.mean.setData(x=mean, y=np.arange(k), brush=[brush(BAR_TOP if c == top else MEAN) for c in range(k)])
        self.interval.setData(x=mean, y=np.arange(k), left=mean - summary.lower.numpy(), right=summary.upper.numpy() - mean)
        self.interval.setVisible(True)
        self.set_title(f"Draws per class · {plural(s, 'draw')}")

    def clear_view(self) -> None:
        self.heat.setVisible(False)
        self.ticks.setData(x=[], y=[])
        self.mean.setData(x=[], y=[])
        self.interval.setVisible(False)
        self.set_title("Draws per class")


class IntervalPlot(InputPlot):
    """Mean probability per class with its equal-tailed credible interval."""

    view_key = "interval"
    tooltip = (
        "The average probability the posterior gives each class (bars) and the credible "
        "interval (whiskers): the range that holds the chosen share of the draws. The "
        "predicted class is the tallest bar, in red."
    )

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(class_names)
        k = len(class_names)
        item = self.getPlotItem()
        item.setYRange(0, 1.02, padding=0)
        item.setXRange(-0.6, k - 0.4, padding=0)
        self.use_class_axis("bottom")
        item.getAxis("left").setTicks(PROBABILITY_TICKS)
        self.bars = pg.BarGraphItem(x=np.arange(k), height=np.zeros(k), width=0.7, brush=pg.mkBrush(BAR), pen=None)
        self.errors = pg.ErrorBarItem(x=np.arange(k), y=np.zeros(k), top=0, bottom=0, beam=0.25, pen=pg.mkPen(MEAN, width=1.2))
        item.addItem(self.bars)
        item.addItem(self.errors)
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        k = len(self.class_names)
        mean = summary.mean.numpy()
        top = summary.predicted_class
        self.bars.setOpts(height=mean, brushes=[brush(BAR_TOP if c == top else BAR) for c in range(k)])
        self.errors.setData(x=np.arange(k), y=mean, top=summary.upper.numpy() - mean, bottom=mean - summary.lower.numpy())
        self.errors.setVisible(True)
        self.set_title(f"Mean and {round(100 * level)}% interval")

    def clear_view(self) -> None:
        self.bars.setOpts(height=np.zeros(len(self.class_names)))
        self.errors.setVisible(False)
        self.set_title("Mean and interval")


class EntropyPlot(InputPlot):
    """Total = aleatoric + epistemic uncertainty in nats, against the maximum ln K."""

    view_key = "entropy"
    tooltip = (
        "How unsure the posterior is, in nats (0 = certain). Total = aleatoric + epistemic. "
        "Aleatoric: every model finds the input ambiguous on its own (e.g. a 4 that looks like "
        "a 9). Epistemic: the models disagree with each other, a sign that the input is unlike "
        "the training data. The dashed line is the most possible, ln K, when all K classes are "
        "equally likely."
    )
    NAMES = ("total", "aleatoric", "epistemic")

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(class_names)
        k = len(class_names)
        item = self.getPlotItem()
        left = item.getAxis("left")
        left.setTicks([list(enumerate(self.NAMES))])
        # A fixed width that fits every value: an axis that grew or shrank with its labels'
        # text would re-lay out the plot and repaint every axis of the column on each update.
        metrics = QFontMetricsF(left.style["tickFont"] or left.font())
        left.setWidth(math.ceil(max(metrics.horizontalAdvance(f"{n} 8.888") for n in self.NAMES))
                      + left.style["tickTextOffset"][0] + 6)
        # Tall enough for the three labels not to overlap (the y range spans 3.2 label rows),
        # plus the title and the bottom axis.
        self.setMinimumHeight(math.ceil(3.2 * metrics.lineSpacing()) + 56)
        item.setXRange(0, math.log(k) * 1.12, padding=0)
        item.setYRange(-0.6, 2.6, padding=0)
        item.invertY(True)
        self.bars = pg.BarGraphItem(x0=np.zeros(3), y=np.arange(3), height=0.6, width=np.zeros(3),
                                    brushes=[pg.mkBrush(UNCERTAINTY[n]) for n in self.NAMES], pen=None)
        item.addItem(self.bars)
        item.addItem(pg.InfiniteLine(pos=math.log(k), angle=90, pen=pg.mkPen(GRID, style=Qt.PenStyle.DashLine)))
        most = pg.TextItem("ln K", color=GRID, anchor=(0.5, 1.0))
        most.setPos(math.log(k), -0.35)
        item.addItem(most)
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        values = [summary.total, summary.aleatoric, summary.epistemic]
        self.bars.setOpts(width=values)
        # The values go into the axis labels: text beside the bars collides in narrow columns.
        self.getPlotItem().getAxis("left").setTicks(
            [[(i, f"{name} {v:.3f}") for i, (name, v) in enumerate(zip(self.NAMES, values, strict=True))]])

    def clear_view(self) -> None:
        self.bars.setOpts(width=np.zeros(3))
        self.getPlotItem().getAxis("left").setTicks([list(enumerate(self.NAMES))])
        self.set_title("Uncertainty (nats)")


class VariancePlot(InputPlot):
    """Per class: aleatoric E[p(1−p)] and epistemic Var[p], stacked to the total p̄(1−p̄)."""

    view_key = "variance"
    tooltip = (
        "The same split class by class, as variances. Green (aleatoric): the average of "
        "p(1−p) over the draws, high when each model hesitates about this class. Purple "
        "(epistemic): how much the draws disagree on this class's probability. Together "
        "they make p̄(1−p̄), at most 0.25."
    )

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(class_names)
        k = len(class_names)
        item = self.getPlotItem()
        item.setXRange(-0.6, k - 0.4, padding=0)
        item.setYRange(0, 0.26, padding=0)
        self.use_class_axis("bottom")
        item.getAxis("left").setTicks([[(0.0, "0"), (0.125, ".125"), (0.25, ".25")]])
        self.aleatoric = pg.BarGraphItem(x=np.arange(k), height=np.zeros(k), width=0.7, brush=pg.mkBrush(UNCERTAINTY["aleatoric"]), pen=None)
        self.epistemic = pg.BarGraphItem(x=np.arange(k), y0=np.zeros(k), height=np.zeros(k), width=0.7, brush=pg.mkBrush(UNCERTAINTY["epistemic"]), pen=None)
        item.addItem(self.aleatoric)
        item.addItem(self.epistemic)
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        aleatoric = summary.aleatoric_variance.numpy()
        epistemic = summary.epistemic_variance.numpy()
        self.aleatoric.setOpts(height=aleatoric)
        self.epistemic.setOpts(y0=aleatoric, height=epistemic)
        self.set_title("Variance per class")

    def clear_view(self) -> None:
        k = len(self.class_names)
        self.aleatoric.setOpts(height=np.zeros(k))
        self.epistemic.setOpts(y0=np.zeros(k), height=np.zeros(k))
        self.set_title("Variance per class")


class CorrelationPlot(InputPlot):
    """K×K correlation of the class probabilities across draws, on a fixed [−1, 1] scale."""

    view_key = "correlation"
    tooltip = (
        "How the classes' probabilities move together from draw to draw. Blue (−1): when one "
        "model gives more to this class it gives less to the other: the two classes trade "
        "belief. Red (+1): they rise and fall together. White: unrelated, or a probability "
        "that does not change between draws (always the case with a single draw). Classes whose "
        "probability hardly changes between draws are veiled in white."
    )

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(class_names)
        k = len(class_names)
        item = self.getPlotItem()
        item.invertY(True)
        item.setAspectLocked(True)
        self.use_class_axis("left", "bottom")
        item.setXRange(-0.5, k - 0.5, padding=0)
        item.setYRange(-0.5, k - 0.5, padding=0)
        self.image = pg.ImageItem(np.zeros((k, k)))
        self.image.setColorMap(diverging_lut())
        self.image.setRect(QRectF(-0.5, -0.5, k, k))
        # A white veil over classes whose probability hardly changes between draws: their
        # correlations are real but concern probabilities of ~0 and would drown the trades
        # that matter (the same rule as the exported figure, core.input_figures.FADE_SD).
        self.veil = pg.ImageItem(np.zeros((k, k, 4), dtype=np.uint8))
        self.veil.setRect(QRectF(-0.5, -0.5, k, k))
        item.addItem(self.image)
        item.addItem(self.veil)
        self.setMinimumHeight(110)
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        corr = summary.correlation.numpy()
        self.image.setImage(corr.T, levels=(-1, 1))
        self.image.setVisible(True)
        faded = np.sqrt(np.clip(summary.epistemic_variance.numpy(), 0, None)) < FADE_SD
        veil = np.zeros((*corr.shape, 4), dtype=np.uint8)
        veil[..., :3] = 255
        veil[..., 3] = np.where(faded[:, None] | faded[None, :], 200, 0)
        self.veil.setImage(veil.transpose(1, 0, 2), levels=None)
        self.veil.setVisible(True)
        note = " (needs 2+ draws)" if summary.num_samples < 2 else ""
        self.set_title(f"Class correlation{note}")

    def clear_view(self) -> None:
        self.image.setVisible(False)
        self.veil.setVisible(False)
        self.set_title("Class correlation")


INPUT_PLOTS: tuple[type[InputPlot], ...] = (DrawsPlot, IntervalPlot, EntropyPlot, VariancePlot, CorrelationPlot)
