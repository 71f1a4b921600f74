"""The per-input plots of one column, one view each, all fed a :class:`core.analysis.predictive.Prediction`.

They are plain widgets that paint themselves with one ``QPainter`` pass: a stroke updates
20 of them (5 views × 4 columns). As pyqtgraph scenes (bounding rectangles, axis items and
text laid out in Python per item) their own paint took 16–18 ms per update, 7.6–8.4 ms now
(``benchmarks/bench_gui.py``, "painting the plots per update"). Their axes are fixed; a new prediction only stores
the numbers drawn (:attr:`InputPlot.values`) and schedules one repaint, which hands Qt whole numpy
arrays of lines and rectangles kept with the layout (:class:`app.plots.drawing.Rows`): no Python object per
drawn item.

Each plot has a ``view_key`` naming the :mod:`core.outputs.input_figures` view that exports the same
numbers, a tooltip in plain words, and a context menu whose "Export…" emits
``export_requested(view_key)``.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRect, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPen

from app.plots.drawing import Rows, colours, draw_image, lookup_table, reversed_index, to_image
from app.plots.input_plot import (
    DIAMOND,
    FEW_DRAWS,
    MEAN_PEN,
    PROBABILITY_TICKS,
    TICK_LENGTH,
    Axis,
    InputPlot,
    diamond,
)
from app.plots.style import (
    BAR,
    BAR_TOP,
    FOREGROUND,
    GRID,
    MEAN,
    REFERENCE,
    UNCERTAINTY,
    diverging_lut,
    sequential_lut,
)
from core.engine.naming import FADE_SD, plural

if TYPE_CHECKING:  # the window is built before the engine (torch) loads: see app.__main__
    from core.analysis.predictive import Prediction

# Made once: a stroke paints 20 plots many times a second.
BAR_COLOUR, BAR_TOP_COLOUR = QColor(*BAR), QColor(*BAR_TOP)
UNCERTAINTY_COLOURS = {name: QColor(*rgb) for name, rgb in UNCERTAINTY.items()}
DRAW_PEN = QPen(BAR_COLOUR, 1)  # whole-pixel widths take Qt's fast line path
REFERENCE_MEAN_PEN = QPen(QColor(*REFERENCE), 2.5)
REFERENCE_MEAN_PEN.setCapStyle(Qt.PenCapStyle.FlatCap)
REFERENCE_PEN = QPen(QColor(*REFERENCE), 1.5)
MOST_PEN = QPen(QColor(*GRID), 1, Qt.PenStyle.DashLine)
FOREGROUND_COLOUR = QColor(FOREGROUND)
NO_PEN = QPen(Qt.PenStyle.NoPen)  # (the enum looked up on every paint took a µs)
#: The entropy's row labels: right-aligned, centred on their row, as the int Qt takes (the enum's
#: ``|`` took 2 µs a label, a sixth of drawing it).
LABEL_ALIGN = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


@functools.lru_cache(maxsize=64)
def _interval_note(num_samples: int, level: float) -> str:
    """:func:`core.analysis.uncertainty.interval_note`, a function of the two numbers alone, worded
    once per draw count and level: a stroke asks for the same two or three on every prediction
    of every column (its order statistics and coverage computed anew each time)."""
    from core.analysis.uncertainty import interval_note  # the engine is loaded by now

    return interval_note(num_samples, level)


class DrawsPlot(InputPlot):
    """Per-class distribution of the draws p_s,k: a class × probability heat map, or one tick
    per draw when there are few; the mean as a diamond and the credible interval as a line."""

    view_key = "histograms"
    tooltip = (
        "Each row is a class. Every posterior draw (one plausible model) gives each class a "
        "probability between 0 and 1; the shading shows where the draws put it (darker: more "
        "draws), or one tick per draw when there are few. The scale at the right: the share of "
        "a class's draws in one stretch of probability, from none (white) to all (dark blue), "
        "in square-root steps so that a few draws show (a quarter is halfway). The diamond is "
        "the average and the line the credible interval. Rows that spread wide mean the models "
        "disagree."
    )
    y_down = True
    scale_room = 28.0  # its colour scale, none to all of a class's draws (only with the shading)

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(class_names)
        k = len(class_names)
        self.x_range = (-0.02, 1.02)
        self.y_range = (-0.5, k - 0.5)
        self.left = Axis("left", classes=self.class_names)
        self.bottom = Axis("bottom", ticks=PROBABILITY_TICKS, label="probability")
        self.setMinimumHeight(112)  # ten rows of labels at 8 px; the column fits an 860 px window
        self._table = lookup_table(sequential_lut())
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        s = summary.num_samples
        values = {"mean": summary.mean.numpy(), "lower": summary.lower.numpy(), "upper": summary.upper.numpy()}
        if s <= FEW_DRAWS:
            values["ticks"] = prediction.samples.numpy()  # (S, K): one tick per draw and class
        else:
            # √share: a spread-out class (many bins with a few draws each) stays visible beside
            # classes whose draws all sit in one bin at 0.
            values["heat"] = np.sqrt(summary.histograms.numpy())  # (K, bins)
            self._heat = to_image(colours(values["heat"], self._table, 0.0, 1.0))
        values["top"] = np.asarray(summary.predicted_class)
        self.values = values
        self.set_title(f"Draws per class · {plural(s, 'draw')}")
        self.update_data()

    def clear_view(self) -> None:
        super().clear_view()
        self.set_title("Draws per class")

    def backdrop_key(self) -> object:
        return "heat" in self.values

    def paint_backdrop(self, painter: QPainter) -> None:
        if "heat" in self.values:  # ticks, one per draw, need no scale
            self.paint_colour_scale(painter, self._table, ("0", "¼", "all"))

    def paint_data(self, painter: QPainter) -> None:
        v, k = self.values, len(self.class_names)
        a, b, c, d = self._affine
        rows = self.geometry("rows", lambda: c * np.arange(k) + d)  # each class's row, in pixels
        if "heat" in v:
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            draw_image(painter, self.span(0, -0.5, 1, k - 0.5), self._heat)
        else:
            ticks = v["ticks"]  # (S, K): one tick per draw, in its class's row
            lines = self.geometry(("ticks", len(ticks)), lambda: Rows(self._tick_lines(rows, len(ticks)), QLineF))
            lines.array[:, 0] = lines.array[:, 2] = (a * ticks + b).ravel()
            painter.setPen(DRAW_PEN)
            lines.draw(painter)
        # the interval as whiskers across each row, with their beams: values low→high at row,
        # low→low and high→high at row ∓ 0.125 (one array for the three)
        whiskers = self.geometry("whiskers", lambda: Rows(self._whisker_rows(k), QLineF))  # y kept; x filled in place
        low, high = a * v["lower"] + b, a * v["upper"] + b
        whiskers.array[:, 0] = np.concatenate([low, low, high])
        whiskers.array[:, 2] = np.concatenate([high, low, high])
        painter.setPen(MEAN_PEN)
        whiskers.draw(painter)
        top, ratio = int(v["top"]), self.devicePixelRatioF()
        tops = self.geometry("diamonds", lambda: (rows - DIAMOND[1]).tolist())
        marks = (diamond(MEAN, ratio), diamond(BAR_TOP, ratio))
        for row, (x, y) in enumerate(zip((a * v["mean"] + b - DIAMOND[0]).tolist(), tops, strict=True)):
            painter.drawPixmap(QPointF(x, y), marks[row == top])

    def _whisker_rows(self, k: int) -> np.ndarray:
        """Rows (x0, y, x1, y) of the whiskers (at each class's row) and their beams (at row ∓
        0.125, the low beams then the high ones), their x to be filled."""
        c, d = self._affine[2:]
        edges = c * np.concatenate([np.arange(k), np.arange(k) - 0.125, np.arange(k) + 0.125]) + d
        rows = np.empty((3 * k, 4))
        rows[:k, 1] = rows[:k, 3] = edges[:k]
        rows[k:, 1] = np.tile(edges[k:2 * k], 2)
        rows[k:, 3] = np.tile(edges[2 * k:], 2)
        return rows

    def _tick_lines(self, rows: np.ndarray, draws: int) -> np.ndarray:
        """Rows (x, top, x, bottom) of ``draws`` ticks per class, their x to be filled: ticks 11
        pixels tall, less in small plots."""
        half = min(5.5, self._data_rect.height() / len(rows) * 0.4)
        lines = np.empty((draws * len(rows), 4))
        lines[:, 1], lines[:, 3] = np.tile(rows - half, draws), np.tile(rows + half, draws)
        return lines


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
        self.x_range = (-0.6, k - 0.4)
        self.y_range = (0.0, 1.02)
        self.bottom = Axis("bottom", classes=self.class_names)
        self.left = Axis("left", ticks=PROBABILITY_TICKS)
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        self.values = {"mean": summary.mean.numpy(), "lower": summary.lower.numpy(),
                       "upper": summary.upper.numpy(), "top": np.asarray(summary.predicted_class)}
        s, label = summary.num_samples, summary.interval_label  # "78% interval (90% asked)"
        draws = plural(s, "draw")
        if s < 2:
            self.set_title(f"Mean · no interval from {draws}", "Mean · no interval")
        elif summary.expected_coverage < summary.level:  # too few draws for the level asked
            held, asked = round(100 * summary.expected_coverage), round(100 * summary.level)
            self.set_title(f"Mean and {held}% interval ({asked}% asked) · {draws}",
                           f"Mean and {held}% interval ({asked}% asked)",
                           f"Mean, {held}% interval ({asked}% asked)", f"{held}% interval ({asked}% asked)")
        else:
            self.set_title(f"Mean and {label} · {draws}", f"Mean and {label}", label)
        note = _interval_note(s, summary.level)
        if self.reference is not None:
            note += "\n\n" + self.REFERENCE_NOTE.format(who=self.reference_who)
        self.set_tip_note(note)
        self.update_data()

    REFERENCE_NOTE = (
        "Black marks: the same input judged by {who}: its average (—) and its interval (the thin "
        "line right of each bar). The closer the bars and whiskers are to them, the closer this "
        "method comes to it. \"Differs by\" below is the total variation: the most probability "
        "that any choice of classes gets from one and not the other.")

    def set_reference(self, summary: Any | None, who: str = "") -> None:
        """The tier reference's summary on the same input, drawn as marks (None: no marks);
        ``who`` names it in the tooltip (exact inference, or HMC that has not converged)."""
        self.reference = None if summary is None else {
            "mean": summary.mean.numpy(), "lower": summary.lower.numpy(), "upper": summary.upper.numpy()}
        self.reference_who = who

    def clear_view(self) -> None:
        super().clear_view()
        self.reference, self.reference_who = None, ""
        self.set_title("Mean and interval")

    def paint_data(self, painter: QPainter) -> None:
        v, r = self.values, self.reference
        k = len(v["mean"])
        x = self.geometry("x", self._x_pixels)  # the rows drawn, their x kept, y filled in place
        a, b, c, d = self._affine
        y = c * np.concatenate([v["mean"], v["lower"], v["upper"], *((r["mean"], r["lower"], r["upper"]) if r else ())]) + d
        mean, low, high = y[:k], y[k:2 * k], y[2 * k:3 * k]
        base = c * 0.0 + d
        bars = x["bars"]  # (x, y, width, height) from the axis to each mean
        bars.array[:, 1], bars.array[:, 3] = np.minimum(base, mean), np.abs(mean - base)
        # every bar, then the predicted class's again in its colour: both opaque and unsmoothed,
        # so its pixels are all its own (two boolean selections of the bars cost more than a bar)
        top = int(v["top"])
        painter.setPen(NO_PEN)
        painter.setBrush(BAR_COLOUR)
        bars.draw(painter)
        painter.setBrush(BAR_TOP_COLOUR)
        bars.draw(painter, top, top + 1)
        # whiskers low→high at each class, beams at low and at high
        whiskers = x["whiskers"]
        whiskers.array[:, 1], whiskers.array[:, 3] = np.concatenate([low, low, high]), np.concatenate([high, low, high])
        painter.setPen(MEAN_PEN)
        whiskers.draw(painter)
        if r is not None:
            ref_mean, ref_low, ref_high = y[3 * k:4 * k], y[4 * k:5 * k], y[5 * k:]
            means = x["reference"]
            means.array[:, 1] = means.array[:, 3] = ref_mean
            painter.setPen(REFERENCE_MEAN_PEN)
            means.draw(painter)
            # its interval right of each bar, with beams reaching back to it at low and high
            marks = x["reference_interval"]
            marks.array[:, 1] = np.concatenate([ref_low, ref_low, ref_high])
            marks.array[:, 3] = np.concatenate([ref_high, ref_low, ref_high])
            painter.setPen(REFERENCE_PEN)
            marks.draw(painter)

    def _x_pixels(self) -> dict[str, Rows]:
        """The pixel columns of everything drawn at a class: bars 0.7 wide, whiskers and their beams
        0.25 wide, the reference's mean 0.9 wide and its interval at the right of that (their y
        filled by each paint)."""
        a, b = self._affine[:2]
        at = np.arange(len(self.class_names), dtype=float)
        left, right = a * (at - 0.35) + b, a * (at + 0.35) + b
        bars = np.empty((len(at), 4))
        bars[:, 0], bars[:, 2] = np.minimum(left, right), np.abs(right - left)
        whiskers = np.empty((3 * len(at), 4))
        whiskers[:, 0] = a * np.concatenate([at, at - 0.125, at - 0.125]) + b
        whiskers[:, 2] = a * np.concatenate([at, at + 0.125, at + 0.125]) + b
        side = at + 0.45
        reference = np.empty((len(at), 4))
        reference[:, 0], reference[:, 2] = a * (at - 0.45) + b, a * (at + 0.45) + b
        interval = np.empty((3 * len(at), 4))
        interval[:, 0] = a * np.concatenate([side, side - 0.08, side - 0.08]) + b
        interval[:, 2] = a * np.concatenate([side, side, side]) + b
        return {"bars": Rows(bars, QRectF), "whiskers": Rows(whiskers, QLineF), "reference": Rows(reference, QLineF),
                "reference_interval": Rows(interval, QLineF)}


class EntropyPlot(InputPlot):
    """Total = aleatoric + epistemic uncertainty in nats, against the maximum ln K."""

    view_key = "entropy"
    tooltip = (
        "How unsure the posterior is, in nats (0 = certain). Total = aleatoric + epistemic. "
        "Aleatoric: every model finds the input ambiguous on its own (e.g. a 4 that looks like "
        "a 9). Epistemic: the models disagree with each other, a sign that the input is unlike "
        "the training data (n/a for a posterior of one draw, which cannot disagree with itself). The "
        "dashed line is the most possible, ln K, when all K classes are equally likely."
    )
    NAMES = ("total", "aleatoric", "epistemic")
    #: rows for a posterior that drops input pixels at prediction (D-SGHMC): its epistemic
    #: part in two, what the weights disagree on and what the random masks add
    MASK_NAMES = ("total", "aleatoric", "input masks", "weights")
    MASK_NOTE = (
        "This posterior (D-SGHMC) keeps dropping random pixels of the input when it predicts, "
        "so its epistemic part is shown in two. Weights: the sampled models disagree with each "
        "other; more training data would shrink this. Input masks: one model judges the input "
        "differently depending on which pixels are dropped; this is noise the method adds on "
        "purpose, and no amount of data removes it. ({masks} random masks per draw.)"
    )
    #: measured on the bundled MC-dropout and MF-VI LeNets, 200 test digits (docs/uncertainty.md)
    FEW_DRAWS_NOTE = (
        "From only {draws} the epistemic part reads low: the draws have not yet shown all the "
        "disagreement there is. On the bundled networks 8 draws show 13–21% less than 1000 "
        "draws do, 100 draws 0–4% less. Compare columns with about as many draws."
    )
    y_down = True

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(class_names)
        self.most = math.log(len(class_names))
        self.x_range = (0.0, self.most * 1.12)
        self.y_range = (-0.6, 2.6)
        step = 0.5 if self.most * 1.12 <= 3 else float(math.ceil(self.most * 1.12 / 5))
        self.bottom = Axis("bottom", ticks=[(i * step, f"{i * step:g}") for i in range(int(self.most * 1.12 / step) + 1)])
        # A fixed width that fits every value, so the data area never moves with the numbers.
        metrics = QFontMetricsF(self.font())
        self.left = Axis("left", ticks=[(i, "") for i in range(len(self.NAMES))],
                         width=math.ceil(max(metrics.horizontalAdvance(f"{n} 8.888")
                                             for n in self.NAMES + self.MASK_NAMES)) + TICK_LENGTH + 8)
        self.names = self.NAMES
        self._set_rows(self.NAMES)
        self.clear_view()

    def _set_rows(self, names: tuple[str, ...]) -> None:
        """One bar per name; tall enough for the labels of the longest list not to overlap (the
        y range spans len + 0.2 label rows), plus the title and the bottom axis."""
        self.names = names
        self.y_range = (-0.6, len(names) - 0.4)
        self.left.ticks = [(i, "") for i in range(len(names))]
        # every column keeps the room of the longest list (D-SGHMC's four rows): a column whose
        # panel grew would push its plots below their neighbours'
        rows = max(len(self.NAMES), len(self.MASK_NAMES))
        self.setMinimumHeight(math.ceil((rows + 0.2) * QFontMetricsF(self.font()).lineSpacing()) + 48)
        self.update()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        split = summary.masks
        if split is None:
            names, nats = self.NAMES, [summary.total, summary.aleatoric, summary.epistemic]
        else:
            names, nats = self.MASK_NAMES, [split.total, split.aleatoric, split.input_masks, split.weights]
        if names != self.names:
            self._set_rows(names)
        self.values = {"nats": np.array(nats, dtype=float)}
        self.epistemic_defined = summary.num_samples > 1  # one draw: 0 by construction, not measured
        draws = plural(summary.num_samples, "draw")
        self.set_title(*((f"Uncertainty (nats) · {draws}", "Uncertainty (nats)") if split is None else
                         (f"Uncertainty (nats) · {draws} · epistemic in two", f"Uncertainty (nats) · {draws}",
                          "Uncertainty (nats)")))
        notes = [] if split is None else [self.MASK_NOTE.format(masks=split.masks_per_draw)]
        if 1 < summary.num_samples < FEW_DRAWS:
            notes.append(self.FEW_DRAWS_NOTE.format(draws=draws))
        self.set_tip_note("\n\n".join(notes))
        self.update_data()

    def clear_view(self) -> None:
        super().clear_view()
        self.set_title("Uncertainty (nats)")

    def paint_data(self, painter: QPainter) -> None:
        a, b = self._affine[:2]
        bars = self.geometry(("bars", self.names), lambda: Rows(self._bar_rows(), QRectF))  # (x, y, width, height)
        zero, ends = a * 0.0 + b, a * self.values["nats"] + b
        bars.array[:, 0], bars.array[:, 2] = np.minimum(zero, ends), np.abs(ends - zero)
        painter.setPen(NO_PEN)
        for i, name in enumerate(self.names):
            painter.setBrush(UNCERTAINTY_COLOURS[name])
            bars.draw(painter, i, i + 1)

    def _bar_rows(self) -> np.ndarray:
        """Each row's bar, 0.6 tall, its y and height in pixels (x and width follow the numbers)."""
        c, d = self._affine[2:]
        rows = np.arange(len(self.names), dtype=float)
        y0, y1 = c * (rows - 0.3) + d, c * (rows + 0.3) + d
        bars = np.empty((len(rows), 4))
        bars[:, 1], bars[:, 3] = np.minimum(y0, y1), np.abs(y1 - y0)
        return bars

    def _most_label(self) -> QRectF:
        """Where "ln K" is written: atop its dashed line, reaching up into the title's band."""
        metrics = QFontMetricsF(self.font())
        width, height = metrics.horizontalAdvance("ln K"), metrics.height()
        label = self.px(self.most, -0.35)
        return QRectF(label.x() - width / 2, label.y() - height, width, height)

    def title_room(self) -> float:
        # a centred title keeps clear of "ln K" (in a narrow column it takes its shorter wording)
        self.data_rect()
        clear = self._most_label().left() - 3 - self.width() / 2
        return max(min(super().title_room(), 2 * clear), 10.0)

    def _paint_axes(self, painter: QPainter, rect: QRectF) -> None:
        super()._paint_axes(painter, rect)
        painter.setPen(QColor(*GRID))
        painter.setFont(self.font())
        painter.drawText(self._most_label(), Qt.AlignmentFlag.AlignCenter, "ln K")  # named once, with the axes

    def paint_overlay(self, painter: QPainter) -> None:
        # the most possible, ln K, dashed over the bars
        most, labels = self.geometry(("overlay", self.names), self._overlay_places)
        painter.setPen(MOST_PEN)
        painter.drawLine(most)
        # The values go into the axis labels (text beside the bars collides in narrow columns);
        # drawn here, not with the axis, which is painted once.
        painter.setPen(FOREGROUND_COLOUR)
        for box, text in zip(labels, self._label_texts(), strict=True):
            painter.drawText(box, LABEL_ALIGN, text)

    def _label_texts(self) -> list[str]:
        """Each row's label: its name and value ("total 1.234"), "n/a" for a disagreement that one
        draw cannot measure, the bare names with no numbers."""
        if not self.values:
            return list(self.names)
        defined = getattr(self, "epistemic_defined", True)
        return [f"{name} n/a" if not defined and name in ("epistemic", "weights") else f"{name} {value:.3f}"
                for name, value in zip(self.names, self.values["nats"].tolist(), strict=True)]

    def data_region(self) -> QRect:
        # the row labels show the numbers too (drawn over the axis, left of the data)
        return self.geometry("labels region", lambda: super(EntropyPlot, self).data_region().united(
            QRect(0, 0, math.ceil(self._data_rect.left()), self.height())))

    def _overlay_places(self) -> tuple[QLineF, list[QRectF]]:
        """Where ln K's dashed line goes, and the box of each row's label."""
        most = QLineF(self.px(self.most, self.y_range[0]), self.px(self.most, self.y_range[1]))
        right, height = self._data_rect.left() - TICK_LENGTH - 2, QFontMetricsF(self.font()).height()
        return most, [QRectF(0, self.px(0.0, i).y() - height / 2, right, height) for i in range(len(self.names))]


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
        self.x_range = (-0.6, k - 0.4)
        self.y_range = (0.0, 0.26)
        self.bottom = Axis("bottom", classes=self.class_names)
        self.left = Axis("left", ticks=((0.0, "0"), (0.125, ".125"), (0.25, ".25")))
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        self.values = {"aleatoric": summary.aleatoric_variance.numpy(), "epistemic": summary.epistemic_variance.numpy()}
        self.update_data()

    def clear_view(self) -> None:
        super().clear_view()
        self.set_title("Variance per class")

    def paint_data(self, painter: QPainter) -> None:
        aleatoric, epistemic = self.values["aleatoric"], self.values["epistemic"]
        k = len(aleatoric)
        c, d = self._affine[2:]
        # the bars' x and width kept with the layout: both rows of bars, aleatoric then epistemic
        bars = self.geometry("bars", lambda: Rows(self._bar_columns(), QRectF))  # y and height filled in place
        # aleatoric from 0, epistemic stacked on it: their edges mapped in one operation (slices,
        # not np.split, whose Python wrapper cost more than the arithmetic)
        edges = c * np.concatenate([aleatoric, aleatoric + epistemic]) + d
        low, high = np.concatenate([np.full(k, c * 0.0 + d), edges[:k]]), edges
        bars.array[:, 1], bars.array[:, 3] = np.minimum(low, high), np.abs(high - low)
        painter.setPen(NO_PEN)
        for i, fill in enumerate((UNCERTAINTY_COLOURS["aleatoric"], UNCERTAINTY_COLOURS["epistemic"])):
            painter.setBrush(fill)
            bars.draw(painter, i * k, (i + 1) * k)

    def _bar_columns(self) -> np.ndarray:
        """Each class's bar, 0.7 wide, twice (aleatoric, then epistemic): rows (x, y, width,
        height) with the left edge and width in pixels, y and height to be filled."""
        a, b = self._affine[:2]
        at = np.arange(len(self.class_names), dtype=float)
        left, right = a * (at - 0.35) + b, a * (at + 0.35) + b
        bars = np.zeros((2 * len(at), 4))
        bars[:, 0], bars[:, 2] = np.tile(np.minimum(left, right), 2), np.tile(np.abs(right - left), 2)
        return bars


class CorrelationPlot(InputPlot):
    """K×K correlation of the class probabilities across draws, on a fixed [−1, 1] scale."""

    view_key = "correlation"
    tooltip = (
        "How the classes' probabilities move together from draw to draw. Blue (−1): when one "
        "model gives more to this class it gives less to the other: the two classes trade "
        "belief. Red (+1): they rise and fall together. White: unrelated, or a probability "
        "that does not change between draws (always the case with a single draw). Classes whose "
        "probability hardly changes between draws are veiled in white; when every class is, the "
        "title says the draws agree: there is no spread to correlate."
    )
    y_down = True
    square = True
    scale_room = 26.0  # its colour scale, −1 to +1

    def __init__(self, class_names: tuple[str, ...]) -> None:
        super().__init__(class_names)
        k = len(class_names)
        self.x_range = (-0.5, k - 0.5)
        self.y_range = (-0.5, k - 0.5)
        self.left = Axis("left", classes=self.class_names)
        self.bottom = Axis("bottom", classes=self.class_names)
        self.setMinimumHeight(104)
        self._table = lookup_table(diverging_lut())
        veiled = (self._table * (55 / 255) + 255 * (200 / 255)).round().astype(np.uint8)  # white at 200/255 opacity
        # the table and its veiled copy, each read from its end (see reversed_index), one after the
        # other: row r of the veiled copy is row 256 + r
        self._reversed_tables = np.concatenate([self._table[::-1], veiled[::-1]])
        self.clear_view()

    def show(self, prediction: Prediction, level: float) -> None:
        summary = prediction.summary
        corr = summary.correlation.numpy()
        # A white veil over classes whose probability hardly changes between draws: their
        # correlations are real but concern probabilities of ~0 and would drown the trades
        # that matter (the same rule as the exported figure, core.outputs.input_figures.FADE_SD).
        # (np.maximum, the ufunc, for np.clip's Python wrapper: the same values, NaN kept)
        faded = np.sqrt(np.maximum(summary.epistemic_variance.numpy(), 0)) < FADE_SD
        veil = faded[:, None] | faded[None, :]
        # one lookup in the two reversed tables, the veil moving a cell's row to the veiled copy's
        rows = reversed_index(corr, -1.0, 1.0)
        np.add(rows, 256, out=rows, where=veil)
        self._image = to_image(self._reversed_tables.take(rows, axis=0))
        self.values = {"correlation": corr}
        if summary.num_samples < 2:
            note = " (needs 2+ draws)"
        elif np.minimum.reduce(faded, None):  # every class (``.all()``'s wrapper took 5 µs)
            # e.g. an ensemble whose members all reached the one mode
            note = " (the draws agree)"
        else:
            note = ""
        self.set_title(f"Class correlation{note}", "Class correlation")
        self.update_data()

    def clear_view(self) -> None:
        super().clear_view()
        self.set_title("Class correlation")

    def paint_data(self, painter: QPainter) -> None:
        k = len(self.class_names)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        draw_image(painter, self.span(-0.5, -0.5, k - 0.5, k - 0.5), self._image)

    def paint_backdrop(self, painter: QPainter) -> None:
        self.paint_colour_scale(painter, self._table, ("−1", "0", "+1"))


INPUT_PLOTS: tuple[type[InputPlot], ...] = (DrawsPlot, IntervalPlot, EntropyPlot, VariancePlot, CorrelationPlot)
