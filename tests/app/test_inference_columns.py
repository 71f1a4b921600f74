"""The worker's request for every column (``predict_columns``): the digit is made into the model
input once per request, not once per column (issue 49), and every column's prediction is the one
it makes alone, bit for bit; an input a column must refuse is still refused by each in its words."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.controllers.inference import (
    ColumnFailure,
    ColumnRequest,
    failure_in_words,
    predict_columns,
)
from app.settings import default_columns
from core.analysis.predictive import predict_image
from core.engine.data.preprocess import EmptyDrawingError, image_to_input
from core.engine.store import load_posterior


@pytest.fixture(scope="module")
def columns() -> list[ColumnRequest]:
    return [ColumnRequest(str(path), load_posterior(path), 16) for path in default_columns()]


def digit() -> np.ndarray:
    image = np.zeros((28, 28), dtype=np.float32)
    image[5:23, 12:16] = 1.0
    image[5:8, 9:16] = 0.7
    return image


@pytest.mark.parametrize("draws", [16, 100])
def test_each_column_predicts_as_it_would_alone(columns, draws):
    image = digit()
    requests = [ColumnRequest(c.key, c.posterior, draws) for c in columns]
    together = dict(predict_columns(image, requests, 0.8, threads=1))
    for c in requests:
        alone = predict_image(c.posterior, image, draws, seed=None, level=0.8)
        got = together[c.key]
        assert torch.equal(got.samples, alone.samples), c.key
        for field in ("mean", "lower", "upper", "histograms", "correlation", "epistemic_variance"):
            assert torch.equal(getattr(got.summary, field), getattr(alone.summary, field)), (c.key, field)
        assert (got.summary.total, got.summary.epistemic, got.summary.overlap) == (
            alone.summary.total, alone.summary.epistemic, alone.summary.overlap)
    assert np.array_equal(image, digit())  # the input is not changed by being read once


def test_an_empty_drawing_is_refused_by_every_column_in_its_words(columns):
    blank = np.zeros((28, 28), dtype=np.float32)
    with pytest.raises(EmptyDrawingError) as refused:
        image_to_input(blank)
    outcomes = predict_columns(blank, columns, 0.9, threads=1)
    assert [key for key, _ in outcomes] == [c.key for c in columns]
    for _, outcome in outcomes:
        assert isinstance(outcome, ColumnFailure) and outcome.message == failure_in_words(refused.value)


def test_a_quick_request_is_computed_at_once_and_a_slow_one_in_a_worker(qtbot, columns):
    """The first request of some columns goes to a worker, which measures it; the next one of the
    same columns and draw counts is computed before ``request`` returns when it took no longer
    than ``inline_ms`` (issue 49: a preview's hand-over to a thread cost more than its work), with
    the very predictions the worker gave; with ``inline_ms`` 0, or while a worker runs, never."""
    from app.controllers.inference import InferenceController, request_signature

    controller = InferenceController()
    got: list = []
    controller.predictions_computed.connect(lambda number, predictions: got.append((number, predictions)))
    finished: list[int] = []
    controller.request_finished.connect(finished.append)
    image = digit()
    with qtbot.waitSignal(controller.request_finished, timeout=60_000):
        first = controller.request(image, columns, 0.9, threads=1, inline_ms=1e9)
        assert finished == []  # in a worker: nothing yet when request returns
    assert request_signature(columns) in controller.took_ms and controller.took_ms[request_signature(columns)] > 0
    second = controller.request(image, columns, 0.9, threads=1, inline_ms=1e9)
    assert finished == [first, second] and not controller.busy  # computed here, signals already out
    (_, by_worker), (_, here) = got
    for (key, a), (other, b) in zip(by_worker, here, strict=True):
        assert key == other and torch.equal(a.samples, b.samples) and torch.equal(a.summary.mean, b.summary.mean)
    with qtbot.waitSignal(controller.request_finished, timeout=60_000):
        third = controller.request(image, columns, 0.9, threads=1, inline_ms=0.0)
        assert finished[-1] == second  # too slow for a budget of 0 ms: a worker
        fourth = controller.request(image, columns, 0.9, threads=1, inline_ms=1e9)
        assert finished[-1] == second and controller.busy  # a worker runs: it waits, never beside it
    qtbot.waitUntil(lambda: finished[-1] == fourth and not controller.busy, timeout=60_000)
    assert third in finished
    controller.shutdown()


@pytest.mark.parametrize("shape, dtype", [((28, 28), np.float32), ((28, 28), np.float64), ((280, 280), np.float32),
                                          ((60, 45), np.uint8)])
def test_a_digit_column_reads_the_request_s_model_input_as_image_batch_makes_it(columns, shape, dtype):
    """A digit column takes the request's model input as it is: the float32 (1, 1, 28, 28) tensor
    that ``image_batch`` makes of the drawing, bit for bit, whatever the drawing's size and type."""
    from app.controllers.inference import _column_input, _digit_input
    from core.analysis.predictive import image_batch

    rng = np.random.default_rng(len(shape) + shape[0])
    image = np.zeros(shape)
    image[shape[0] // 4: 3 * shape[0] // 4, shape[1] // 3: shape[1] // 2] = 1.0
    image = (image * (0.6 + 0.4 * rng.random(shape)) * (255 if dtype == np.uint8 else 1)).astype(dtype)
    digit_input = _digit_input(image)
    for column in columns:
        got = _column_input(image, column, digit_input)
        want = image_batch(image)
        assert got.dtype == torch.float32 and got.shape == (1, 1, 28, 28)
        assert torch.equal(got, want), column.key
