"""The class-correlation heat map carries its colour scale: red +1 at the top, blue −1 at the bottom."""

from __future__ import annotations

import numpy as np
import torch

from core.analysis.predictive import predict_image
from core.engine.resources import resources_dir
from core.engine.store import load_posterior


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
