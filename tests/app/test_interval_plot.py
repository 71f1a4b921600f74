"""The window's interval plot says what its interval holds at the number of draws shown."""

from __future__ import annotations

import torch

from app.plots.input_views import IntervalPlot
from core.analysis.predictive import Prediction
from core.analysis.uncertainty import summarise
from core.engine.resources import resources_dir

MODELS = resources_dir() / "models"
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
    # what is painted is laid out once, then follows the wording and the width
    plot.grab()
    assert plot._laid_out_title().text() == drawn
    plot.resize(420, 160)
    plot.grab()
    assert plot._laid_out_title().text() == plot.drawn_title() == plot.title() != drawn
    plot.show(_prediction(100), 0.9)
    plot.grab()
    assert plot._laid_out_title().text() == "Mean and 90% interval · 100 draws"


def test_dsghmc_uncertainty_is_shown_as_weights_and_input_masks(qtbot):
    from app.plots.input_views import EntropyPlot
    from core.analysis.predictive import predict_input
    from core.engine.store import load_posterior

    posterior = load_posterior(MODELS / "network_lenet5_dsghmc.pt")
    x = torch.rand(1, 1, 28, 28, generator=torch.Generator().manual_seed(0))  # noise: the models disagree
    prediction = predict_input(posterior, x, seed=None)
    split = prediction.summary.masks
    plot = EntropyPlot(NAMES)
    qtbot.addWidget(plot)
    plot.resize(320, plot.minimumHeight() + 10)
    plot.show(prediction, 0.9)
    plot.grab()  # paints the labels
    assert plot.names == ("total", "aleatoric", "input masks", "weights")
    assert list(plot.values["nats"]) == [split.total, split.aleatoric, split.input_masks, split.weights]
    assert "no amount of data removes it" in plot.toolTip() and "16 random masks per draw" in plot.toolTip()
    # a plain posterior's plot goes back to three rows
    plot.show(_prediction(8), 0.9)
    assert plot.names == ("total", "aleatoric", "epistemic") and "D-SGHMC" not in plot.toolTip()


def test_few_draws_warn_that_the_epistemic_part_reads_low(qtbot):
    from app.plots.input_views import EntropyPlot

    plot = EntropyPlot(NAMES)
    qtbot.addWidget(plot)
    plot.show(_prediction(8), 0.9)
    assert plot.title() == "Uncertainty (nats) · 8 draws" and "reads low" in plot.toolTip()
    plot.show(_prediction(100), 0.9)
    assert plot.title() == "Uncertainty (nats) · 100 draws" and "reads low" not in plot.toolTip()


def test_the_uncertainty_title_keeps_clear_of_the_ln_k_label(qtbot):
    """"ln K" stands atop its dashed line, reaching up into the title's band: in a column's width
    the centred title takes its shorter wording rather than run into it ("· 100 drawsln K")."""
    from PySide6.QtGui import QFontMetricsF

    from app.plots.input_views import EntropyPlot

    plot = EntropyPlot(NAMES)
    qtbot.addWidget(plot)
    plot.show(_prediction(100), 0.9)
    for width, wording in ((230, "Uncertainty (nats)"), (600, "Uncertainty (nats) · 100 draws")):
        plot.resize(width, 110)
        plot.grab()
        drawn = plot.drawn_title()
        right = (width + QFontMetricsF(plot._title_font).horizontalAdvance(drawn)) / 2
        assert drawn == wording and right < plot._most_label().left(), (width, drawn, right)


def test_the_note_kept_per_draw_count_and_level_follows_both(qtbot):
    """The note is worded once per draw count and level (``_interval_note``): a stroke's
    predictions alternating 16 and 100 draws, and the level changed between them, each show the
    note of their own two numbers."""
    from core.analysis.uncertainty import interval_note

    plot = IntervalPlot(NAMES)
    qtbot.addWidget(plot)
    for draws, level in ((16, 0.9), (100, 0.9), (16, 0.9), (100, 0.8), (16, 0.8), (100, 0.9)):
        samples = _prediction(draws).samples
        plot.show(Prediction(samples, summarise(samples, level=level)), level)
        assert interval_note(draws, level) in plot.toolTip()
        other = interval_note(draws, 0.8 if level == 0.9 else 0.9)
        assert other not in plot.toolTip()
