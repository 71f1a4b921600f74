"""Accuracy or OOD AUROC against corruption severity, one line per column: the Dataset tab's
corruption plot. It draws the numbers :func:`core.analysis.corruption.severity_lines` gives; a
point's tooltip says them in words."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg

from app.plots.axes import CompactPlot
from app.plots.style import CLASS_COLOURS, GRID

#: One symbol per column beside its colour, so that lines stay told apart in grey print; and the
#: same symbol as a character, for the legend the two plots share.
SYMBOLS = ("o", "s", "t", "d", "+", "x", "star", "p", "h", "t1")
SYMBOL_GLYPHS = ("●", "■", "▼", "◆", "+", "×", "★", "⬟", "⬢", "▲")


def column_colour(index: int) -> tuple[int, int, int]:
    """The colour of the ``index``-th column's line."""
    return tuple(CLASS_COLOURS[index % len(CLASS_COLOURS)])


def legend_html(names: Sequence[str]) -> str:
    """The lines' legend as rich text: each column's symbol in its colour, then its name."""
    import html

    entries = []
    for i, name in enumerate(names):
        r, g, b = column_colour(i)
        # an entry never wraps inside (at its spaces or at the hyphen of "Mean-field"): whole entries do
        entries.append(f'<span style="white-space:nowrap"><span style="color:#{r:02x}{g:02x}{b:02x}">'
                       f"{SYMBOL_GLYPHS[i % len(SYMBOL_GLYPHS)]}</span>&nbsp;"
                       f"{html.escape(name).replace(' ', '&nbsp;').replace('-', '&#8209;')}</span>")
    return "&nbsp;&nbsp; ".join(entries)


class SeverityPlot(CompactPlot):
    """One number against severity for every column.

    ``lines`` (column name → its values, one per severity, None where undefined) is what is drawn
    now; ``percent`` says values in [0, 1] are shown as a percentage in the tooltips.
    """

    def __init__(self, title: str, tooltip: str, percent: bool, chance: float | None = None) -> None:
        super().__init__()
        self.setMinimumHeight(170)
        self.percent = percent
        self.chance = chance
        self.lines: dict[str, list[float | None]] = {}
        self.severities: tuple[float, ...] = ()
        self.set_title(title)
        self.explanation = tooltip
        self.setToolTip(tooltip)
        # a point near the pointer says its number in words (the plot's own words elsewhere)
        self.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        item = self.getPlotItem()
        item.showGrid(x=True, y=True, alpha=0.2)
        item.getAxis("left").setTicks([[(0.0, "0"), (0.25, ".25"), (0.5, ".5"), (0.75, ".75"), (1.0, "1")]])
        self.set_bottom_label("severity (0 = the clean images)", "severity")
        self.show_lines((), {})

    def show_lines(self, severities: Sequence[float], lines: dict[str, list[float | None]],
                   what: str = "", scale: str = "") -> None:
        """Draw ``lines`` (name → one value per severity) against ``severities``; ``what`` names the
        number in the tooltips ("accuracy", "AUROC"), ``scale`` what a severity does."""
        item = self.getPlotItem()
        item.clear()
        if scale:
            self.set_bottom_label(f"severity ({scale})", "severity")
        self.severities = tuple(float(s) for s in severities)
        self.lines = {name: list(values) for name, values in lines.items()}
        if self.chance is not None:
            item.addItem(pg.InfiniteLine(self.chance, angle=0, pen=pg.mkPen(GRID, width=1, style=pg.QtCore.Qt.PenStyle.DotLine)))
        x = np.asarray(self.severities, dtype=float)
        for i, (name, values) in enumerate(self.lines.items()):
            y = np.asarray([np.nan if v is None else v for v in values], dtype=float)
            colour = column_colour(i)
            symbol = SYMBOLS[i % len(SYMBOLS)]
            line = pg.PlotDataItem(x, y, pen=pg.mkPen(colour, width=2), symbol=symbol, symbolSize=7,
                                   symbolBrush=pg.mkBrush(colour), symbolPen=pg.mkPen(colour), name=name,
                                   connect="finite")
            item.addItem(line)
        low = float(x.min()) if len(x) else 0.0
        high = float(x.max()) if len(x) else 5.0
        pad = max(0.15, 0.04 * (high - low))
        item.setXRange(low - pad, high + pad, padding=0)
        item.setYRange(-0.04, 1.06, padding=0)  # room for the 0 and 1 tick labels
        item.getAxis("bottom").setTicks([[(s, f"{s:g}") for s in self.severities]] if self.severities else None)
        self._what = what

    def point_near(self, scene_pos, pixels: float = 8.0) -> tuple[str, float, float] | None:
        """The (column, severity, value) drawn within ``pixels`` of a scene position, or None."""
        view = self.getPlotItem().getViewBox()
        best, best_distance = None, pixels
        for name, values in self.lines.items():
            for severity, value in zip(self.severities, values, strict=True):
                if value is None:
                    continue
                at = view.mapViewToScene(pg.Point(severity, value))
                distance = float(np.hypot(at.x() - scene_pos.x(), at.y() - scene_pos.y()))
                if distance <= best_distance:
                    best, best_distance = (name, severity, value), distance
        return best

    def _on_scene_mouse_moved(self, scene_pos) -> None:
        point = self.point_near(scene_pos)
        self.setToolTip(self.explanation if point is None else self._tip(point[1], point[2], point))

    def _tip(self, x: float, y: float, data: tuple[str, float, float]) -> str:
        name, severity, value = data
        number = f"{100 * value:.1f} %" if self.percent else f"{value:.3f}"
        where = "on the clean images" if severity == 0 else f"at severity {severity:g}"
        return f"{name}\n{self._what or 'value'} {where}: {number}"
