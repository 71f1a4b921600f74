"""Per-input views for one posterior: mean ± credible interval per class, the uncertainty
split and the per-class predictive histograms. Draws what :mod:`core.uncertainty` computed;
plot items are created once and updated with ``setData``/``setOpts``."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.plots.style import BAND, BAR, BAR_TOP, MEAN, UNCERTAINTY
from core.predictive import Prediction


class PredictiveView(QWidget):
    """Mean probabilities with intervals, entropy split, and a grid of class histograms."""

    def __init__(self, class_names: tuple[str, ...] = tuple("0123456789"), parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.class_names = class_names
        k = len(class_names)
        self.headline = QLabel("Draw a digit to see the posterior's belief.")
        self.headline.setObjectName("headline")
        self.headline.setWordWrap(True)
        self.graphics = pg.GraphicsLayoutWidget()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.headline)
        layout.addWidget(self.graphics, 1)

        ticks = [list(enumerate(class_names))]
        self.mean_plot = self.graphics.addPlot(row=0, col=0, colspan=3, title="Mean probability and 90% interval")
        self.mean_plot.setYRange(0, 1.02, padding=0)
        self.mean_plot.setXRange(-0.6, k - 0.4, padding=0)
        self.mean_plot.getAxis("bottom").setTicks(ticks)
        self.mean_plot.setMouseEnabled(False, False)
        self.mean_plot.hideButtons()
        self.mean_bars = pg.BarGraphItem(x=np.arange(k), height=np.zeros(k), width=0.7, brush=pg.mkBrush(BAR), pen=None)
        self.mean_errors = pg.ErrorBarItem(x=np.arange(k), y=np.zeros(k), top=np.zeros(k), bottom=np.zeros(k), beam=0.25, pen=pg.mkPen(MEAN, width=1.5))
        self.mean_plot.addItem(self.mean_bars)
        self.mean_plot.addItem(self.mean_errors)

        self.unc_plot = self.graphics.addPlot(row=0, col=3, colspan=2, title="Uncertainty (nats)")
        names = ["total", "aleatoric", "epistemic"]
        self.unc_plot.getAxis("left").setTicks([list(enumerate(["total", "aleatoric", "epistemic"]))])
        self.unc_plot.setXRange(0, math.log(k), padding=0.02)
        self.unc_plot.setYRange(-0.6, 2.6, padding=0)
        self.unc_plot.invertY(True)
        self.unc_plot.setMouseEnabled(False, False)
        self.unc_plot.hideButtons()
        self.unc_bars = pg.BarGraphItem(x0=np.zeros(3), y=np.arange(3), height=0.6, width=np.zeros(3),
                                        brushes=[pg.mkBrush(UNCERTAINTY[n]) for n in names], pen=None)
        self.unc_plot.addItem(self.unc_bars)
        self.unc_labels = [pg.TextItem(anchor=(0, 0.5), color=MEAN) for _ in names]
        for i, label in enumerate(self.unc_labels):
            label.setPos(0, i)
            self.unc_plot.addItem(label)
        self.unc_plot.addLine(x=math.log(k), pen=pg.mkPen((150, 150, 150), style=pg.QtCore.Qt.PenStyle.DashLine))

        self.hist_plots, self.hist_bars, self.hist_mean, self.hist_band = [], [], [], []
        cols = 5
        for c in range(k):
            plot = self.graphics.addPlot(row=1 + c // cols, col=c % cols)
            plot.setXRange(0, 1, padding=0)
            plot.setYRange(0, 1, padding=0)
            plot.setMouseEnabled(False, False)
            plot.hideButtons()
            plot.getAxis("left").setTicks([[(0, "0"), (0.5, ".5"), (1, "1")]])
            plot.getAxis("bottom").setTicks([[(0, "0"), (0.5, ".5"), (1, "1")]])
            band = pg.LinearRegionItem(values=(0, 0), movable=False, brush=pg.mkBrush(BAND), pen=pg.mkPen(None))
            bars = pg.BarGraphItem(x0=[], x1=[], y0=0, height=[], brush=pg.mkBrush(BAR), pen=None)
            mean = pg.InfiniteLine(pos=0, angle=90, pen=pg.mkPen(MEAN, width=2))
            for item in (band, bars, mean):
                plot.addItem(item)
            self.hist_plots.append(plot)
            self.hist_bars.append(bars)
            self.hist_mean.append(mean)
            self.hist_band.append(band)
        self.prediction: Prediction | None = None
        self.clear()

    def _set_hist_titles(self, prediction: Prediction | None) -> None:
        for c, plot in enumerate(self.hist_plots):
            if prediction is None:
                plot.setTitle(f"class {self.class_names[c]}", size="9pt")
                continue
            mean = float(prediction.summary.mean[c])
            top = c == prediction.summary.predicted_class
            colour = "#d6604d" if top else "#333333"
            plot.setTitle(f"<b>{self.class_names[c]}</b>  p̄={mean:.2f}", size="9pt", color=colour)

    def _set_markers_visible(self, visible: bool) -> None:
        """Intervals and mean lines mean nothing without a prediction: hide them."""
        self.mean_errors.setVisible(visible)
        for item in (*self.hist_mean, *self.hist_band):
            item.setVisible(visible)

    def show_prediction(self, prediction: Prediction) -> None:
        self.prediction = prediction
        self._set_markers_visible(True)
        s = prediction.summary
        mean = s.mean.numpy()
        top = s.predicted_class
        brushes = [pg.mkBrush(BAR_TOP if c == top else BAR) for c in range(len(mean))]
        self.mean_bars.setOpts(height=mean, brushes=brushes)
        self.mean_errors.setData(x=np.arange(len(mean)), y=mean, top=s.upper.numpy() - mean, bottom=mean - s.lower.numpy())
        values = [s.total, s.aleatoric, s.epistemic]
        self.unc_bars.setOpts(width=values)
        for label, v in zip(self.unc_labels, values, strict=True):
            label.setText(f"{v:.3f}")
            label.setPos(v, label.pos().y())
        edges = s.bin_edges.numpy()
        for c in range(len(mean)):
            freq = s.histograms[c].numpy()
            self.hist_bars[c].setOpts(x0=edges[:-1], x1=edges[1:], height=freq, brush=pg.mkBrush(BAR_TOP if c == top else BAR))
            self.hist_mean[c].setValue(float(mean[c]))
            self.hist_band[c].setRegion((float(s.lower[c]), float(s.upper[c])))
            self.hist_plots[c].setYRange(0, 1, padding=0)
        self._set_hist_titles(prediction)
        name = self.class_names[top]
        first, second = (self.class_names[c] for c in s.top_two)
        flag = (
            f"<br><span style='color:#b2182b'><b>Uncertain input:</b> the sample distributions of "
            f"{first} and {second} overlap (Bhattacharyya {s.overlap:.2f})</span>"
            if s.uncertain
            else f"<br>overlap of {first} and {second}: Bhattacharyya {s.overlap:.2f}"
        )
        self.headline.setText(
            f"<b>Prediction: {name}</b> (p̄ = {mean[top]:.2f}, 90% interval "
            f"{float(s.lower[top]):.2f}–{float(s.upper[top]):.2f}) from {s.num_samples} samples · "
            f"total {s.total:.3f} = aleatoric {s.aleatoric:.3f} + epistemic {s.epistemic:.3f} nats"
            + flag
        )

    def clear(self, message: str = "Draw a digit to see the posterior's belief.") -> None:
        self.prediction = None
        k = len(self.class_names)
        self.mean_bars.setOpts(height=np.zeros(k))
        self.mean_errors.setData(x=np.arange(k), y=np.zeros(k), top=np.zeros(k), bottom=np.zeros(k))
        self.unc_bars.setOpts(width=np.zeros(3))
        for label in self.unc_labels:
            label.setText("")
        for c in range(k):
            self.hist_bars[c].setOpts(x0=[], x1=[], height=[])
            self.hist_mean[c].setValue(0)
            self.hist_band[c].setRegion((0, 0))
        self._set_hist_titles(None)
        self._set_markers_visible(False)
        self.headline.setText(message)
