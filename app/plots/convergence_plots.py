"""The two plots of a column's Diagnostics window: each chain's trace against the step, and R̂
per class on the probe set. They draw what a posterior file records; they compute nothing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from app.plots.axes import ClassAxis
from app.plots.style import BAR, BAR_TOP, FOREGROUND, GRID
from core.engine.naming import RHAT_LOOSE, RHAT_STRICT

#: One colour per chain (more chains cycle through them).
CHAIN_COLOURS = [(31, 119, 180), (214, 96, 77), (44, 160, 44), (148, 103, 189), (140, 86, 75),
                 (227, 119, 194), (127, 127, 127), (188, 189, 34)]

TRACE_TIP = (
    "Each line is one chain: the log posterior (how well its weights fit the training images, "
    "plus the prior) at each step. Good: after the shaded burn-in every chain wanders around "
    "the same level, the lines overlapping like one fuzzy band. Bad: lines at different "
    "levels, or still climbing or falling at the end."
)
RHAT_TIP = (
    "For each class, the largest R̂ over the probe images: how much the chains disagree about "
    "that class's probability. 1.00 means they agree perfectly. Good: every bar below the "
    "lower dashed line (1.01). Above the upper dashed line (1.1) the chains disagree: their "
    "predictions depend on which chain you ask, so more or longer chains are needed."
)


class TracePlot(pg.PlotWidget):
    """Per-chain traces (chains × points) against the step, the burn-in shaded."""

    def __init__(self) -> None:
        super().__init__(enableMenu=False)
        item = self.getPlotItem()
        item.setLabel("bottom", "step")
        item.setLabel("left", "log posterior")
        item.showGrid(x=False, y=True, alpha=0.25)
        # one row along the top, in headroom that show_traces leaves above the traces
        self.legend = item.addLegend(offset=(-10, 5), brush=pg.mkBrush(255, 255, 255, 220))
        self.setToolTip(TRACE_TIP)
        self.note = pg.TextItem("", color=FOREGROUND, anchor=(0.5, 0.5))
        self.note.setVisible(False)

    def show_traces(self, traces: Sequence[Sequence[float]] | None, steps: int | None,
                    burn_in: int | None, name: str = "log posterior", shaded: str = "burn-in",
                    along: str = "step") -> None:
        """``shaded`` names the steps before the first kept draw (a sampler's burn-in, HMC's
        warm-up); ``along`` the x axis (a step, an HMC iteration)."""
        item = self.getPlotItem()
        item.clear()
        if not traces:
            item.addItem(self.note)
            self.note.setText("This file keeps no per-chain trace.")
            self.note.setPos(0.5, 0.5)
            self.note.setVisible(True)
            item.setXRange(0, 1)
            item.setYRange(0, 1)
            return
        values = np.asarray(traces, dtype=float)
        points = values.shape[1]
        total = steps if steps and steps >= points else points
        x = np.linspace(1, total, points) if points > 1 else np.array([1.0])
        # The range leaves out the first 5% of the run: the climb from the starting weights
        # would flatten everything after it to a line (it runs off the bottom instead).
        settled = values[:, max(1, points // 20):] if points > 20 else values
        low, high = float(np.nanmin(settled)), float(np.nanmax(settled))
        pad = 0.15 * (high - low) if high > low else 1.0
        if burn_in:
            shade = pg.LinearRegionItem((0, burn_in), movable=False, brush=pg.mkBrush(*GRID, 40),
                                        pen=pg.mkPen(None))
            shade.setZValue(-10)
            item.addItem(shade)
            label = pg.TextItem(f"{shaded} (not kept)", color=FOREGROUND, anchor=(0, 1))
            label.setPos(0, low - pad)
            item.addItem(label)
        for c, row in enumerate(values):
            pen = pg.mkPen(CHAIN_COLOURS[c % len(CHAIN_COLOURS)], width=1.2)
            item.plot(x, row, pen=pen, name=f"chain {c + 1}")
        self.legend.setColumnCount(min(len(values), 4))
        item.setLabel("left", name)
        item.setLabel("bottom", along)
        item.setXRange(0, total, padding=0.02)
        item.setYRange(low - pad, high + 2.5 * pad, padding=0)


class RhatPlot(pg.PlotWidget):
    """R̂ per class as bars, dashed lines at 1.01 and 1.1."""

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(enableMenu=False)
        self.class_names = tuple(class_names)
        k = len(self.class_names)
        item = self.getPlotItem()
        item.setAxisItems({"bottom": ClassAxis("bottom", self.class_names)})
        item.setMouseEnabled(False, False)
        item.hideButtons()
        item.setLabel("bottom", "class")
        item.setLabel("left", "largest R̂ on the probe images")
        item.setXRange(-0.6, k - 0.4, padding=0)
        self.setToolTip(RHAT_TIP)
        self.bars = pg.BarGraphItem(x=np.arange(k), y0=np.ones(k), height=np.zeros(k), width=0.6,
                                    brush=pg.mkBrush(BAR), pen=None)
        item.addItem(self.bars)
        self.lines = []
        # the labels at opposite ends, so that they never sit on each other when R̂ is large
        for value, words, position, anchor in ((RHAT_STRICT, "1.01: agree at or below", 0.02, (0, 1)),
                                               (RHAT_LOOSE, "1.1: disagree above", 0.98, (1, 1))):
            line = pg.InfiniteLine(pos=value, angle=0, movable=False,
                                   pen=pg.mkPen(FOREGROUND, width=1, style=Qt.PenStyle.DashLine),
                                   label=words, labelOpts={"position": position, "color": FOREGROUND,
                                                           "fill": (255, 255, 255, 220),
                                                           "anchors": [anchor, anchor]})
            item.addItem(line)
            self.lines.append(line)
        self.note = pg.TextItem("", color=FOREGROUND, anchor=(0.5, 0.5))
        item.addItem(self.note)

    def show_rhat(self, per_class: Sequence[float | None] | None, note: str = "") -> None:
        k = len(self.class_names)
        item = self.getPlotItem()
        if not per_class:
            self.bars.setOpts(height=np.zeros(k))
            self.note.setText(note)
            self.note.setPos((k - 1) / 2, 1.06)
            item.setYRange(0.98, 1.15, padding=0)
            return
        values = np.array([np.nan if v is None else float(v) for v in per_class], dtype=float)
        finite = values[np.isfinite(values)]
        top = max(float(finite.max()) if finite.size else 1.0, 1.15)
        # an infinite R̂ (each half-chain stuck on its own value) is drawn past the tallest bar
        shown = np.where(np.isinf(values), top * 1.05, values)
        heights = np.nan_to_num(shown - 1.0, nan=0.0)
        brushes = [pg.mkBrush(BAR_TOP if v > RHAT_LOOSE else BAR) for v in np.nan_to_num(shown, nan=1.0)]
        self.bars.setOpts(height=heights, brushes=brushes)
        self.note.setText(note)
        item.setYRange(0.98, top * 1.1, padding=0)
