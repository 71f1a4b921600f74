"""Every heat map carries its colour scale: the class correlation (red +1 at the top, blue −1 at
the bottom) and the Dataset tab's confusion matrices (a strip under the matrix), window and export alike."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPointF

from core.analysis.predictive import predict_image
from core.engine.resources import resources_dir
from core.engine.store import load_posterior
from core.outputs.palette import SEQUENTIAL


def test_correlation_plot_draws_its_scale_beside_the_matrix(qtbot):
    from app.plots.input_views import CorrelationPlot

    plot = CorrelationPlot(tuple(str(k) for k in range(10)))
    qtbot.addWidget(plot)
    plot.resize(220, 170)
    plot.setVisible(True)
    image = np.zeros((1, 1, 28, 28), np.float32)
    image[0, 0, 6:22, 12:16] = 1.0
    prediction = predict_image(load_posterior(resources_dir() / "models" / "paper_softmax_mc_dropout.pt"),
                               torch.from_numpy(image), num_samples=20)
    plot.show(prediction, 0.9)
    rect = plot.data_rect()
    assert plot.width() - rect.right() >= CorrelationPlot.scale_room  # room kept for the scale
    picture = plot.grab().toImage()
    x = int(rect.right() + 8)
    top, bottom = picture.pixelColor(x, int(rect.top()) + 2), picture.pixelColor(x, int(rect.bottom()) - 2)
    assert top.red() > 80 and top.blue() < 60  # dark red: +1
    assert bottom.blue() > 80 and bottom.red() < 40  # dark blue: −1


def _stops_colour(stops, at: float) -> np.ndarray:
    """The colour at ``at`` of a map given by its stops, interpolated by hand (not by the code)."""
    positions = [p for p, _ in stops]
    return np.array([np.interp(at, positions, [c[i] for _, c in stops]) for i in range(3)])


@pytest.mark.parametrize("soft", [False, True])
def test_confusion_matrices_carry_a_labelled_scale_under_them_at_the_column_width(qtbot, soft):
    """Every heat map has a colour scale (issue 47, item 8): the Dataset tab's confusion matrices
    have one under the matrix, as wide as it, saying what the colour means, its labels whole
    inside the plot at a column's real width, and a cell of a value coloured as the scale is
    where that value is written."""
    from app.plots.dataset_plots import HardConfusionPlot, SoftConfusionPlot
    from app.views.dataset_column import DatasetColumn

    plot = (SoftConfusionPlot if soft else HardConfusionPlot)(tuple(str(k) for k in range(10)))
    qtbot.addWidget(plot)
    plot.resize(DatasetColumn.MIN_WIDTH - 8, plot.minimumHeight())  # the column less its margins
    plot.show()
    qtbot.waitExposed(plot)
    counts = np.diag(np.full(10, 75.0))
    counts[3, 3], counts[3, 5] = 75, 25  # a quarter of the 3s read as 5
    rows = counts / counts.sum(1, keepdims=True)
    plot.show_column(SimpleNamespace(hard_confusion=counts, hard_confusion_rows=rows, soft_confusion=rows))
    qtbot.wait(50)
    picture = plot.grab().toImage()
    scale = plot.scale
    view = plot.getPlotItem().getViewBox()
    strip = scale.mapRectToScene(scale.strip_rect())
    matrix = view.mapRectToScene(view.boundingRect())
    assert abs(strip.left() - matrix.left()) <= 1.5 and abs(strip.right() - matrix.right()) <= 1.5
    assert strip.top() > matrix.bottom()  # under the matrix, not squeezing it
    texts = [text for _, text in scale.drawn]
    assert texts[-1] == ("colour: mean probability given" if soft else "colour: share of the row's images")
    assert texts[:-1] == (["0", ".05", ".25", "1"] if soft else ["0", "5%", "25%", "100%"])
    boxes = [scale.mapRectToScene(box) for box, _ in scale.drawn[:-1]]
    assert all(b.left() >= 0 and b.right() <= plot.width() for b in boxes)  # none clipped
    assert all(a.right() < b.left() for a, b in zip(boxes, boxes[1:], strict=False))  # none touch
    # the square-root scale: a quarter is written halfway along the strip
    assert abs(boxes[2].center().x() - strip.center().x()) <= 1.5
    # the cell 3 → 5 (a quarter) is the colour of the strip halfway, and of the map's stops there
    cell = view.mapViewToScene(QPointF(5, 3))
    shown = picture.pixelColor(int(cell.x()), int(cell.y()))
    halfway = picture.pixelColor(int(strip.center().x()), int(strip.center().y()))
    expected = _stops_colour(SEQUENTIAL, 0.5)
    for colour in (shown, halfway):
        assert np.abs(np.array([colour.red(), colour.green(), colour.blue()]) - expected).max() <= 3


def test_exported_confusion_matrices_use_the_window_colours_and_scale():
    """The report's confusion figure colours as the window does (its map, by the square root)
    and labels its colour bar at the same values."""
    from core.outputs.figures import confusion_figure

    fig = confusion_figure({"a": np.eye(3)}, ("0", "1", "2"), "Confusion")
    image = fig.axes[0].images[0]
    got = np.array(image.cmap(image.norm(0.25))[:3]) * 255
    assert np.abs(got - _stops_colour(SEQUENTIAL, 0.5)).max() <= 2
    bar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    assert [t.get_text() for t in bar.get_yticklabels()] == ["0", "0.05", "0.25", "1"]
    assert "square root" in bar.get_ylabel()


@pytest.mark.parametrize("draws", [100, 20])
def test_draws_shading_carries_its_scale_and_ticks_do_not(qtbot, draws):
    """The draws-per-class shading (more than 30 draws) has its scale right of the data, none of
    a class's draws (white) to all (dark blue); one tick per draw (30 or fewer) needs none."""
    from app.plots.input_plot import FEW_DRAWS
    from app.plots.input_views import DrawsPlot

    plot = DrawsPlot(tuple(str(k) for k in range(10)))
    qtbot.addWidget(plot)
    plot.resize(220, 170)
    plot.setVisible(True)
    image = np.zeros((1, 1, 28, 28), np.float32)
    image[0, 0, 6:22, 12:16] = 1.0
    prediction = predict_image(load_posterior(resources_dir() / "models" / "paper_softmax_mc_dropout.pt"),
                               torch.from_numpy(image), num_samples=draws)
    plot.show(prediction, 0.9)
    rect = plot.data_rect()
    assert plot.width() - rect.right() >= DrawsPlot.scale_room
    picture = plot.grab().toImage()
    x = int(rect.right() + 8)
    top, bottom = picture.pixelColor(x, int(rect.top()) + 2), picture.pixelColor(x, int(rect.bottom()) - 2)
    expected_top = _stops_colour(SEQUENTIAL, 1.0)
    if draws > FEW_DRAWS:
        assert np.abs(np.array([top.red(), top.green(), top.blue()]) - expected_top).max() <= 8  # all: dark blue
        assert min(bottom.red(), bottom.green(), bottom.blue()) > 235  # none: white
    else:
        assert min(top.red(), top.green(), top.blue()) > 235  # nothing painted there


def test_correlation_of_draws_that_all_agree_says_so(qtbot):
    """The paper tier's ensemble: five members that each reached the one mode (issue 46) give five
    identical draws, so every class is veiled and only the diagonal shows; the title says why
    rather than leaving a blank matrix unexplained. Draws that differ keep the plain title."""
    from app.plots.input_views import CorrelationPlot

    plot = CorrelationPlot(tuple(str(k) for k in range(10)))
    qtbot.addWidget(plot)
    image = np.zeros((1, 1, 28, 28), np.float32)
    image[0, 0, 6:22, 12:16] = 1.0
    models = resources_dir() / "models"
    ensemble = predict_image(load_posterior(models / "paper_softmax_ensemble.pt"), torch.from_numpy(image))
    assert ensemble.summary.num_samples == 5
    plot.show(ensemble, 0.9)
    assert plot.title() == "Class correlation (the draws agree)"
    dropout = predict_image(load_posterior(models / "paper_softmax_mc_dropout.pt"), torch.from_numpy(image),
                            num_samples=20)
    plot.show(dropout, 0.9)
    assert plot.title() == "Class correlation"
