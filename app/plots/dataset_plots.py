"""The data-set plots of one posterior's column, each fed a :class:`core.analysis.dataset.ColumnViews`.

Every plot has a ``view_key`` (the :data:`core.analysis.dataset.DATASET_VIEWS` entry it exports),
a tooltip in plain words and a context menu whose "Export…" emits ``export_requested(view_key)``.
The confusion matrices emit ``cell_clicked(true, predicted)`` and the histogram
``bin_clicked(bin, ood)`` when a person clicks them, so the view can list the images behind.
Nothing here computes a statistic: the numbers arrive ready from core and are only drawn. The
column's two tables (its summary numbers, the AUROC per out-of-distribution set) are widgets of
their own: :mod:`app.views.dataset_tables`.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import (
    QMenu,
    QToolTip,
)

from app.help import DATASET_TERMS
from app.plots.axes import ClassAxis, CompactPlot, short_class_name
from app.plots.colour_scale import ColourScaleItem, sqrt_ticks
from app.plots.style import BAR, BAR_TOP, GRID, MEAN, UNCERTAINTY, sequential_lut
from core.analysis.dataset import SCORE_WORDS, SHORT_SCORE_WORDS, ColumnViews
from core.analysis.metrics import REJECTION_SCORES
from core.engine.naming import plural
from core.outputs.palette import SQRT_SCALE_TICKS

OOD_COLOUR = (230, 126, 34)
#: Histogram fractions below this are drawn at the floor of the log scale.
LOG_FLOOR = 1e-4
PERCENT_TICKS = [[(-4, ".01%"), (-3, ".1%"), (-2, "1%"), (-1, "10%"), (0, "100%")]]


def class_members(name: str) -> str:
    """The images of a class in words: "the 3s", or "the faces aged 25-37" for an age group."""
    return f"the faces aged {name}" if short_class_name(name) != name else f"the {name}s"


#: A legend entry's width besides its label's: pyqtgraph's sample (20 px), the spacing to the
#: label and to the next entry (2 px each); and the legend's margin at each side.
LEGEND_SAMPLE_WIDTH = 24
LEGEND_MARGIN = 2


def legend_below(item: pg.PlotItem) -> pg.LegendItem:
    """A legend in a row of its own under the plot's bottom label: never over the data (a legend
    inside the plot hides the bars or curves beneath it), and part of the plot in every export. Its entries take as many to a row as fit the plot's
    width (:meth:`DatasetPlot.fit_legend`), so it never widens the plot."""
    legend = pg.LegendItem(labelTextSize="7pt", horSpacing=2, verSpacing=-6, frame=False)
    legend.layout.setContentsMargins(LEGEND_MARGIN, 0, LEGEND_MARGIN, 0)
    legend.setMinimumWidth(0)
    item.layout.addItem(legend, 4, 1)
    item.layout.setAlignment(legend, Qt.AlignmentFlag.AlignHCenter)
    return legend


class DatasetPlot(CompactPlot):
    """Base of the data-set plots: a title, a tooltip, and a context menu that exports the view."""

    export_requested = Signal(str)
    view_key: ClassVar[str]
    tooltip: ClassVar[str]
    legend: pg.LegendItem | None = None  # under the plot (legend_below), fitted to its width

    def __init__(self) -> None:
        super().__init__()
        self.setToolTip(self.tooltip)
        self.setMinimumHeight(170)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._on_context_menu_requested)

    def _on_context_menu_requested(self, pos: QPoint) -> None:
        menu = QMenu(self)
        menu.addAction("Export this view for every column (PNG, SVG, CSV, JSON)…",
                       lambda: self.export_requested.emit(self.view_key))
        menu.exec(self.mapToGlobal(pos))

    def resizeEvent(self, event=None) -> None:  # noqa: N802 (Qt override; pyqtgraph calls it with None)
        self.fit_legend(None if event is None else event.size().width())
        super().resizeEvent(event)

    def fit_legend(self, width: int | None = None) -> None:
        """As many of the legend's entries to a row as fit ``width`` (the plot's), one at least."""
        if self.legend is None or not self.legend.items:
            return
        left = self.getPlotItem().getAxis("left")  # the legend lies under the data, right of this axis
        room = (self.width() if width is None else width) - (left.width() if left.isVisible() else 0) - 4
        room -= 2 * LEGEND_MARGIN
        entries = [LEGEND_SAMPLE_WIDTH + label.minimumWidth() for _, label in self.legend.items]
        columns = len(entries)
        while columns > 1:
            rows = [entries[i : i + columns] for i in range(0, len(entries), columns)]
            if sum(max(row[c] for row in rows if c < len(row)) for c in range(columns)) <= room:
                break
            columns -= 1
        self.legend.setColumnCount(columns)

    def view_point(self, scene_pos: QPointF) -> QPointF:
        return self.getPlotItem().getViewBox().mapSceneToView(scene_pos)

    def scene_point(self, x: float, y: float) -> QPoint:
        """Widget coordinates of the data point (x, y) (tests click there)."""
        scene = self.getPlotItem().getViewBox().mapViewToScene(QPointF(x, y))
        return self.mapFromScene(scene)


class ReliabilityPlot(DatasetPlot):
    """Accuracy per confidence bin against the diagonal; the gap to it hatched in red."""

    view_key = "reliability"
    tooltip = (
        "Reliability: the test images are grouped by how confident the posterior is (its highest "
        "mean probability). Blue bars: how often it is right in each group. On the dashed "
        "diagonal, confidence can be taken at its word; red outlines show the gap (the ECE is "
        "its average). Better: bars on the diagonal. The grey line: " + DATASET_TERMS["reliability_share"].tooltip
    )

    def __init__(self) -> None:
        super().__init__()
        item = self.getPlotItem()
        item.setXRange(0, 1, padding=0.02)
        item.setYRange(0, 1, padding=0.02)
        self.set_bottom_label("confidence")
        item.setLabel("left", "accuracy")
        item.addItem(pg.PlotDataItem([0, 1], [0, 1], pen=pg.mkPen(GRID, style=Qt.PenStyle.DashLine)))
        self.bars = pg.BarGraphItem(x0=[], width=[], height=[], brush=pg.mkBrush(BAR), pen=pg.mkPen("w"))
        self.gaps = pg.BarGraphItem(x0=[], y0=[], width=[], height=[], brush=None, pen=pg.mkPen(BAR_TOP, width=1.2))
        self.share = pg.PlotDataItem([], [], pen=pg.mkPen((110, 110, 110), width=1), stepMode="center")
        for it in (self.bars, self.gaps, self.share):
            item.addItem(it)

    def show_column(self, column: ColumnViews) -> None:
        d = column.reliability
        lo, hi = d.edges[:-1], d.edges[1:]
        filled = d.counts > 0
        self.bars.setOpts(x0=lo[filled], width=(hi - lo)[filled], height=d.accuracy[filled])
        low = np.minimum(d.accuracy, d.confidence)[filled]
        self.gaps.setOpts(x0=lo[filled], y0=low, width=(hi - lo)[filled],
                          height=np.abs(d.accuracy - d.confidence)[filled])
        self.share.setData(d.edges, d.counts / max(d.counts.sum(), 1))
        self.set_title(f"Reliability · ECE {d.ece:.4f}")


class ConfusionPlot(DatasetPlot):
    """A K×K heat map, rows = true class, columns = predicted; a click picks a cell."""

    cell_clicked = Signal(int, int)

    soft: ClassVar[bool]
    #: What the colour means, under the colour scale.
    scale_caption: ClassVar[str]

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__()
        # the matrix keeps ~13 pixels a row (digits in the normal font) above its colour scale (the tab's columns scroll)
        self.setMinimumHeight(228)
        self.class_names = class_names
        self.values = np.zeros((len(class_names), len(class_names)))
        self.counts: np.ndarray | None = None
        k = len(class_names)
        item = self.getPlotItem()
        # age groups ("25-37") are fitted to narrow columns as in the per-input views
        item.setAxisItems({side: ClassAxis(side, class_names) for side in ("left", "bottom")})
        item.invertY(True)
        item.setLabel("left", "true class")
        self.set_bottom_label("predicted class")
        item.setXRange(-0.5, k - 0.5, padding=0)
        item.setYRange(-0.5, k - 0.5, padding=0)
        self.image = pg.ImageItem(np.zeros((k, k)))
        self.image.setColorMap(sequential_lut())
        self.image.setRect(QRectF(-0.5, -0.5, k, k))
        self.marker = pg.PlotDataItem([], [], pen=pg.mkPen(BAR_TOP, width=2))
        item.addItem(self.image)
        item.addItem(self.marker)
        # under the bottom axis, in the view's column: as wide as the matrix, labelled at the
        # values' square roots as the cells are coloured
        self.scale = ColourScaleItem(sequential_lut(), sqrt_ticks(SQRT_SCALE_TICKS, percent=not self.soft),
                                     self.scale_caption)
        item.layout.addItem(self.scale, 4, 1)
        self.scene().sigMouseClicked.connect(self._on_scene_mouse_clicked)
        self.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)

    def show_column(self, column: ColumnViews) -> None:
        self.counts = column.hard_confusion
        self.values = column.soft_confusion if self.soft else column.hard_confusion_rows
        # √: shares of a few % stay visible beside a diagonal near 1 (the tooltip gives the values)
        self.image.setImage(np.sqrt(np.nan_to_num(self.values)).T, levels=(0, 1))
        self.marker.setData([], [])
        diagonal = float(np.nanmean(np.diag(self.values)))
        if self.soft:
            self.set_title(f"Soft confusion · diagonal {diagonal:.3f}", f"Soft confusion {diagonal:.3f}")
        else:
            mistakes = int(self.counts.sum() - np.trace(self.counts))
            self.set_title(f"Confusion · {plural(mistakes, 'mistake')}", plural(mistakes, "mistake"))

    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        p = self.view_point(scene_pos)
        i, j = round(p.y()), round(p.x())
        k = len(self.class_names)
        return (i, j) if 0 <= i < k and 0 <= j < k else None

    def mark(self, i: int, j: int) -> None:
        x0, x1, y0, y1 = j - 0.5, j + 0.5, i - 0.5, i + 0.5
        self.marker.setData([x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0])

    def _on_scene_mouse_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.mark(*cell)
            self.cell_clicked.emit(*cell)

    def _on_scene_mouse_moved(self, scene_pos: QPointF) -> None:
        cell = self.cell_at(scene_pos)
        if cell is None or self.counts is None:
            return
        i, j = cell
        t, p = self.class_names[i], self.class_names[j]
        if self.soft:
            text = f"true {t} → {p}: mean probability {self.values[i, j]:.3f}"
        else:
            text = (f"true {t}, predicted {p}: {plural(int(self.counts[i, j]), 'image')} "
                    f"({self.values[i, j]:.1%} of {class_members(t)})")
        QToolTip.showText(QCursor.pos(), text, self)


class SoftConfusionPlot(ConfusionPlot):
    """Mean probability per true class (rows) given to each class (columns)."""

    soft = True
    view_key = "confusion_soft"
    scale_caption = "colour: mean probability given"
    tooltip = (
        "Soft confusion: each row is a true class; the colour of a cell is the mean probability the "
        "posterior gives the column's class to the images of that row (as in the D-SGHMC paper's "
        "matrices; the colour grows with the square root, so that a few % show). Colour off the "
        "diagonal shows which classes it hesitates between. Hover a cell for its value; click it to "
        "see the images that give the column's class at least 5%. The diagonal: "
        + DATASET_TERMS["soft_diagonal"].tooltip
    )


class HardConfusionPlot(ConfusionPlot):
    """Share of each true class (rows) predicted as each class (columns)."""

    soft = False
    view_key = "confusion_hard"
    scale_caption = "colour: share of the row's images"
    tooltip = (
        "Confusion: each row is a true class; the colour of a cell is the share of that row's images "
        "predicted as the column's class (square-root colour scale, so that single mistakes show). "
        "Hover a cell for its count; click it to see exactly those images."
    )


class ClassErrorPlot(DatasetPlot):
    """Error rate per true class: a box over the chains with a dot per chain, or bars for one chain."""

    view_key = "per_class_error"
    tooltip = (
        "How often the posterior is wrong on each true class, in %. For posteriors sampled in "
        "several independent chains (SGHMC and the like), a box spans the middle half of the "
        "chains, the line inside is their median, the whiskers their range and each dot one "
        "chain (the D-SGHMC paper's box plots). With one chain, one bar per class. Lower is better. "
        + DATASET_TERMS["Chains"].good
    )

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__()
        self.class_names = class_names
        k = len(class_names)
        item = self.getPlotItem()
        item.setAxisItems({"bottom": ClassAxis("bottom", class_names)})
        item.setXRange(-0.6, k - 0.4, padding=0)
        item.setLabel("left", "error %")
        self.set_bottom_label("true class")
        self.bars = pg.BarGraphItem(x=np.arange(k), height=np.zeros(k), width=0.6, brush=pg.mkBrush(BAR), pen=None)
        self.boxes = pg.BarGraphItem(x=np.arange(k), y0=np.zeros(k), height=np.zeros(k), width=0.6,
                                     brush=pg.mkBrush(*BAR, 110), pen=pg.mkPen(MEAN, width=1))
        self.whiskers = pg.PlotDataItem([], [], pen=pg.mkPen(MEAN, width=1), connect="pairs")
        self.medians = pg.PlotDataItem([], [], pen=pg.mkPen(MEAN, width=2), connect="pairs")
        self.dots = pg.ScatterPlotItem(size=4, pen=None, brush=pg.mkBrush(BAR_TOP))
        for it in (self.bars, self.whiskers, self.boxes, self.medians, self.dots):
            item.addItem(it)

    def show_column(self, column: ColumnViews) -> None:
        errors = column.per_class_error * 100  # (C, K)
        c, k = errors.shape
        x = np.arange(k, dtype=np.float64)
        several = c > 1
        for it in (self.boxes, self.whiskers, self.medians, self.dots):
            it.setVisible(several)
        self.bars.setVisible(not several)
        top = float(np.nanmax(errors)) if np.isfinite(errors).any() else 1.0
        self.getPlotItem().setYRange(0, max(top * 1.1, 1.0), padding=0)
        if not several:
            self.bars.setOpts(height=np.nan_to_num(errors[0]))
            self.set_title("Error per class · 1 chain", "Error per class")
            return
        box = {key: np.nan_to_num(value * 100) for key, value in column.error_box.items()}
        self.boxes.setOpts(y0=box["q1"], height=box["q3"] - box["q1"])
        self.whiskers.setData(np.repeat(x, 2), np.column_stack([box["min"], box["max"]]).ravel())
        self.medians.setData(np.column_stack([x - 0.3, x + 0.3]).ravel(), np.repeat(box["median"], 2))
        # the chains' dots spread a little sideways so that equal values stay visible
        offsets = np.linspace(-0.2, 0.2, c)
        self.dots.setData(x=(x[None, :] + offsets[:, None]).ravel(), y=np.nan_to_num(errors).ravel())
        self.set_title(f"Error per class · {plural(c, 'chain')}", f"Error · {plural(c, 'chain')}")


class RejectionPlot(DatasetPlot):
    """Accuracy on the kept images against the share referred, one line per uncertainty score."""

    view_key = "rejection"
    tooltip = (
        "If the posterior may hand its most uncertain images to a person, how accurate is it on "
        "the rest? x: share of images handed over (most uncertain first, by each score); y: "
        "accuracy on those kept. A curve that rises fast means the uncertainty points at the "
        "mistakes. Dotted: the best possible, every mistake handed over first. "
        + DATASET_TERMS["images_referred"].good
    )

    def __init__(self) -> None:
        super().__init__()
        item = self.getPlotItem()
        self.set_bottom_label("images referred %")
        item.setLabel("left", "accuracy %")
        item.setXRange(0, 95, padding=0.01)
        item.showGrid(x=True, y=True, alpha=0.2)
        self.legend = legend_below(item)
        self.curves = {score: item.plot([], [], pen=pg.mkPen(UNCERTAINTY[score], width=2)) for score in REJECTION_SCORES}
        self.oracle = item.plot([], [], pen=pg.mkPen(MEAN, width=1, style=Qt.PenStyle.DotLine))
        for score, curve in self.curves.items():
            self.legend.addItem(curve, score)
        self.legend.addItem(self.oracle, "best")
        self.fit_legend()

    def show_column(self, column: ColumnViews) -> None:
        lowest = 100.0
        for score, curve in self.curves.items():
            rates, acc = column.rejection[score]
            curve.setData(rates * 100, acc * 100)
            if np.isfinite(acc).any():
                lowest = min(lowest, float(np.nanmin(acc)) * 100)
        rates, best = column.oracle
        self.oracle.setData(rates * 100, best * 100)
        self.getPlotItem().setYRange(max(0.0, math.floor(lowest) - 0.5), 100.2, padding=0)
        self.set_title("Accuracy on the images kept", "Accuracy on those kept", "Accuracy kept")


class OodHistogramPlot(DatasetPlot):
    """One score's histogram on the test set (left half of each bin) and the OOD set (right half)."""

    view_key = "ood_histograms"
    tooltip = (
        "How uncertain the posterior is, image by image: blue on the test set, orange on the "
        "out-of-distribution set (images of something it was never trained on), as shares of "
        "each set on a log scale. The further apart, the better this score flags unfamiliar "
        "images; AUROC says how well (0.5 = chance, 1 = perfect). Click a bar to see its images."
    )
    bin_clicked = Signal(int, bool)

    def __init__(self) -> None:
        super().__init__()
        item = self.getPlotItem()
        item.getAxis("left").setTicks(PERCENT_TICKS)
        item.setYRange(math.log10(LOG_FLOOR), 0.05, padding=0)
        item.setLabel("left", "share of images")
        self.edges = np.linspace(0, 1, 2)
        self.heights: dict[bool, np.ndarray] = {False: np.zeros(1)}
        self.has_ood = False
        self.test_bars = pg.BarGraphItem(x0=[], y0=[], width=[], height=[], brush=pg.mkBrush(BAR), pen=None)
        self.ood_bars = pg.BarGraphItem(x0=[], y0=[], width=[], height=[], brush=pg.mkBrush(*OOD_COLOUR), pen=None)
        self.marker = pg.PlotDataItem([], [], pen=pg.mkPen(MEAN, width=2))
        for it in (self.test_bars, self.ood_bars, self.marker):
            item.addItem(it)
        self.legend = legend_below(item)  # which colour is which set (set_set_names)
        self.set_set_names("test set", None)
        self.scene().sigMouseClicked.connect(self._on_scene_mouse_clicked)

    def set_set_names(self, test: str, ood: str | None) -> None:
        """Name the test set's bars and the out-of-distribution set's (None: no such set)."""
        self.legend.clear()
        self.legend.addItem(self.test_bars, test)
        if ood:
            self.legend.addItem(self.ood_bars, ood)
        self.fit_legend()

    def legend_names(self) -> list[str]:
        return [label.text for _, label in self.legend.items]

    @staticmethod
    def _heights(fraction: np.ndarray) -> np.ndarray:
        floor = math.log10(LOG_FLOOR)
        with np.errstate(divide="ignore"):
            return np.where(fraction > 0, np.log10(np.maximum(fraction, LOG_FLOOR)) - floor, 0.0)

    def show_column(self, column: ColumnViews, score: str) -> None:
        pair = column.histograms[score]
        self.edges = pair.edges
        lo, width = pair.edges[:-1], np.diff(pair.edges)
        self.has_ood = pair.ood_fraction is not None
        floor = math.log10(LOG_FLOOR)
        half = width / 2 if self.has_ood else width
        self.heights = {False: self._heights(pair.in_fraction)}
        self.test_bars.setOpts(x0=lo, y0=np.full(len(lo), floor), width=half, height=self.heights[False])
        if self.has_ood:
            self.heights[True] = self._heights(pair.ood_fraction)
            self.ood_bars.setOpts(x0=lo + half, y0=np.full(len(lo), floor), width=half, height=self.heights[True])
        self.ood_bars.setVisible(self.has_ood)
        self.marker.setData([], [])
        self.getPlotItem().setXRange(float(pair.edges[0]), float(pair.edges[-1]), padding=0.01)
        self.set_bottom_label(SCORE_WORDS.get(score, score), SHORT_SCORE_WORDS.get(score, score))
        result = column.ood.get(score)
        if result is not None:
            if result["auroc"] is None:
                self.set_title("AUROC n/a: this score is the same for every image", "AUROC n/a (same for all)")
            else:
                self.set_title(f"AUROC {result['auroc']:.3f} · AUPR {result['aupr_out']:.3f}",
                               f"AUROC {result['auroc']:.3f}")
        else:
            self.set_title("Uncertainty on the test set (no out-of-distribution set)",
                           "Uncertainty on the test set", "Test set only")

    def bin_at(self, scene_pos: QPointF) -> tuple[int, bool] | None:
        x = self.view_point(scene_pos).x()
        if not self.edges[0] <= x <= self.edges[-1]:
            return None
        b = int(np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, len(self.edges) - 2))
        middle = (self.edges[b] + self.edges[b + 1]) / 2
        return b, bool(self.has_ood and x >= middle)

    def mark(self, b: int, ood: bool) -> None:
        """Outline the bar of bin ``b`` (of the OOD set when ``ood``)."""
        lo, hi = self.edges[b], self.edges[b + 1]
        if self.has_ood:
            lo, hi = ((lo + hi) / 2, hi) if ood else (lo, (lo + hi) / 2)
        floor = math.log10(LOG_FLOOR)
        top = floor + max(float(self.heights[ood][b]), 0.15)
        self.marker.setData([lo, hi, hi, lo, lo], [floor, floor, top, top, floor])

    def _on_scene_mouse_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        found = self.bin_at(event.scenePos())
        if found is not None:
            self.mark(*found)
            self.bin_clicked.emit(*found)
