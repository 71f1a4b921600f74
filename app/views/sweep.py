"""The sweep, one column per posterior: class probabilities (the mean p̄ of the draws and the
credible band) and total / aleatoric / epistemic uncertainty against the angle (Gal & Ghahramani's
rotated-digit figure), a corruption's severity or an occluding patch's place. Draws
:class:`core.analysis.metrics.RotationSweep` results, whose ``axis`` names the horizontal axis."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMenu, QScrollArea, QVBoxLayout, QWidget

from app.plots.axes import CompactPlot
from app.plots.style import CLASS_COLOURS, UNCERTAINTY
from app.views.column import column_title

if TYPE_CHECKING:  # the window is built before the engine (torch) loads: see app.__main__
    from core.analysis.metrics import RotationSweep

#: Classes whose band never reaches this probability are left out (they would be noise at 0).
MIN_PROBABILITY = 0.1

PROBABILITY_TIP = (
    "How each class's probability changes as the image turns or is corrupted. The line is the mean probability "
    "over the draws (p̄, the number This input shows) and the shaded band the credible interval "
    "(the Interval box sets its level). "
    "Only classes that reach 0.1 somewhere are drawn."
)
UNCERTAINTY_TIP = (
    "Uncertainty in nats against the angle or the corruption. Total (grey) = aleatoric (green: the image is "
    "ambiguous) + epistemic (purple: the models disagree). Epistemic uncertainty usually rises "
    "where the image looks like nothing in the training data."
)


class SweepColumn(QFrame):
    """Signals: export_requested(str) with the column key."""

    export_requested = Signal(str)

    def __init__(self, key: str, title: str, sweep: RotationSweep, class_names: tuple[str, ...]) -> None:
        super().__init__()
        self.key = key
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumWidth(200)
        self.probability = CompactPlot()
        self.uncertainty = CompactPlot()
        for plot, tip in ((self.probability, PROBABILITY_TIP), (self.uncertainty, UNCERTAINTY_TIP)):
            plot.setMinimumHeight(150)
            plot.setToolTip(tip)
            plot.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
            plot.customContextMenuRequested.connect(lambda pos, p=plot: self._on_context_menu_requested(p, pos))
            plot.set_bottom_label(*(w for w in (sweep.axis, sweep.axis_short) if w))
            plot.getPlotItem().showGrid(x=True, y=True, alpha=0.2)
        p = self.probability.getPlotItem()
        from core.outputs.palette import sweep_probability_words

        self.probability.set_title(*sweep_probability_words(sweep))  # says the line is the mean
        p.setYRange(0, 1.1, padding=0)  # room for the class names above peaks at 1
        p.getAxis("left").setTicks([[(0.0, "0"), (0.5, ".5"), (1.0, "1")]])
        invisible = pg.mkPen((0, 0, 0, 0))
        for k, name in enumerate(class_names):
            if sweep.upper[:, k].max() < MIN_PROBABILITY:
                continue
            colour = CLASS_COLOURS[k % len(CLASS_COLOURS)]
            lower = pg.PlotDataItem(sweep.angles, sweep.lower[:, k], pen=invisible)
            upper = pg.PlotDataItem(sweep.angles, sweep.upper[:, k], pen=invisible)
            p.addItem(lower)
            p.addItem(upper)
            p.addItem(pg.FillBetweenItem(lower, upper, brush=pg.mkBrush(*colour, 45)))
            # the mean p̄, as This input and the exported figure show it
            p.plot(sweep.angles, sweep.mean[:, k], pen=pg.mkPen(colour, width=2))
            # The class name at the curve's peak: a legend of ten entries would hide the curves.
            peak = int(np.argmax(sweep.mean[:, k]))
            edge = 0.0 if peak == 0 else 1.0 if peak == len(sweep.angles) - 1 else 0.5
            label = pg.TextItem(str(name), color=colour, anchor=(edge, 1.0))
            label.setPos(float(sweep.angles[peak]), float(sweep.mean[peak, k]))
            p.addItem(label)
        u = self.uncertainty.getPlotItem()
        self.uncertainty.set_title("Uncertainty (nats)")
        u.setYRange(0, math.log(len(class_names)) * 1.05, padding=0)
        u.addLegend(offset=(-5, 5), labelTextSize="8pt")
        for name, values, style in (("total", sweep.total, Qt.PenStyle.DashLine),
                                    ("aleatoric", sweep.aleatoric, Qt.PenStyle.SolidLine),
                                    ("epistemic", sweep.epistemic, Qt.PenStyle.SolidLine)):
            u.plot(sweep.angles, np.asarray(values), pen=pg.mkPen(UNCERTAINTY[name], width=2, style=style), name=name)
        for plot in (p, u):
            plot.setXRange(float(sweep.angles[0]), float(sweep.angles[-1]), padding=0)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(column_title(title))
        layout.addWidget(self.probability, 3)
        layout.addWidget(self.uncertainty, 2)

    def _on_context_menu_requested(self, plot: pg.PlotWidget, pos: QPoint) -> None:
        menu = QMenu(self)
        menu.addAction("Export the sweep (PNG, SVG, CSV, JSON)…", lambda: self.export_requested.emit(self.key))
        menu.exec(plot.mapToGlobal(pos))


class SweepView(QWidget):
    """All columns' sweeps side by side, with a line saying what was rotated.

    Signals: export_requested(str) with the column key.
    """

    export_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel("No sweep yet: in the Rotate tab, pick an image, choose what to sweep (the angle or a "
                            "corruption) and press the sweep button.")
        self.label.setWordWrap(True)
        self.row = QHBoxLayout()
        self.row.setContentsMargins(0, 0, 0, 0)
        inner = QWidget()
        inner.setLayout(self.row)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(inner)
        layout = QVBoxLayout(self)
        layout.addWidget(self.label)
        layout.addWidget(scroll, 1)
        self.columns: dict[str, SweepColumn] = {}
        self.swept_label = ""
        self.kind = "rotation"
        self.described = ""  # the first column's horizontal axis, in words
        self.stale = False

    def show_sweeps(self, label: str, items: list[tuple[str, str, RotationSweep]], class_names: tuple[str, ...],
                    kind: str = "rotation") -> None:
        """``items``: (key, title, sweep) per column, in column order; ``kind`` what was swept
        (``"rotation"`` or a corruption's name)."""
        self.clear_sweeps()
        self.swept_label = label
        self.kind = kind
        self.described = items[0][2].axis if items else ""
        self.stale = False
        self.label.setText(self._words())
        for key, title, sweep in items:
            column = SweepColumn(key, title, sweep, class_names)
            column.export_requested.connect(self.export_requested)
            self.columns[key] = column
            self.row.addWidget(column, 1)

    def set_stale(self, stale: bool) -> None:
        """Whether the sweep shown is of an earlier image than the one now judged: its plots are
        greyed and the line above them says so, until the image is swept again (or comes back)."""
        if not self.columns or stale == self.stale:
            return
        self.stale = stale
        self.label.setText(self._words())
        for column in self.columns.values():
            column.setEnabled(not stale)

    def _words(self) -> str:
        from app.views.modes import sweep_button_words

        if self.stale:
            return (f"An earlier image's sweep ({self.swept_label}): the image now shown has not been "
                    f"swept. Press “{sweep_button_words(self.kind)}” in the Rotate tab to sweep it.")
        if self.kind == "rotation":
            return f"Rotation sweep of {self.swept_label}, 0–180° in 10° steps."
        if self.kind == "occlusion":
            return (f"Occlusion sweep of {self.swept_label}: a grey patch moved from the left edge to the right "
                    f"edge across the middle ({self.described}).")
        from core.engine.data.corruptions import CORRUPTIONS

        corruption = CORRUPTIONS[self.kind]
        return (f"{corruption.label} sweep of {self.swept_label}, severity 0–5 in half levels "
                f"({corruption.scale}).")

    def clear_sweeps(self) -> None:
        for column in self.columns.values():
            self.row.removeWidget(column)
            column.deleteLater()
        self.columns.clear()
        self.stale = False
