"""The window's interval plot says what its interval holds at the number of draws shown."""

from __future__ import annotations

import torch

from app.plots.input_views import IntervalPlot
from core.analysis.predictive import Prediction
from core.analysis.uncertainty import summarise

NAMES = tuple(str(k) for k in range(10))


def _prediction(draws: int) -> Prediction:
    logits = torch.randn(draws, 10, generator=torch.Generator().manual_seed(draws)) * 2
    samples = torch.softmax(logits, -1)
    return Prediction(samples, summarise(samples, level=0.9))


def test_too_few_draws_state_the_level_the_interval_really_holds(qtbot):
    plot = IntervalPlot(NAMES)
    qtbot.addWidget(plot)
    plot.resize(420, 180)
    plot.show(_prediction(8), 0.9)
    # the widest interval from 8 draws, smallest to largest, holds 7/9 = 78% on average
    assert plot.title() == "Mean and 78% interval (90% asked) · 8 draws"
    assert plot.drawn_title() == plot.title()
    assert "8 draws are too few" in plot.toolTip() and "78%" in plot.toolTip() and "19 draws" in plot.toolTip()
    plot.show(_prediction(100), 0.9)
    assert plot.title() == "Mean and 90% interval · 100 draws"
    assert "5th smallest to the 5th largest of 100 draws" in plot.toolTip()
    assert "too few" not in plot.toolTip()
    plot.show(_prediction(1), 0.9)
    assert plot.title() == "Mean · no interval from 1 draw"


def test_a_narrow_plot_takes_a_shorter_wording_not_a_cut_one(qtbot):
    plot = IntervalPlot(NAMES)
    qtbot.addWidget(plot)
    plot.resize(200, 160)
    plot.show(_prediction(8), 0.9)
    drawn = plot.drawn_title()
    assert "78%" in drawn and "90% asked" in drawn and not drawn.endswith("…")
