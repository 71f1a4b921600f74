"""D-SGHMC's uncertainty split separates the weights from the input masks it draws at prediction."""

from __future__ import annotations

import math

import pytest
import torch

from core.analysis.predictive import (
    MASKS_PER_DRAW,
    ProbabilitiesNotFiniteError,
    predict_input,
    predict_inputs,
)
from core.analysis.uncertainty import mask_split
from core.engine.inference.dsghmc import InputDropoutPosterior
from core.engine.models import ArchSpec, build_model

LN2 = math.log(2)


def test_split_of_hand_made_probabilities():
    # Two draws that agree once their masks are averaged: each mask makes a draw certain of
    # a different class, so all the disagreement is the masks' (ln 2), none the weights'.
    masks_only = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    split = mask_split(masks_only)
    assert split.total == pytest.approx(LN2) and split.aleatoric == pytest.approx(0.0)
    assert split.input_masks == pytest.approx(LN2) and split.weights == pytest.approx(0.0)
    # Two draws certain of different classes whatever the mask: all of it is the weights'.
    weights_only = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]])
    split = mask_split(weights_only)
    assert split.weights == pytest.approx(LN2) and split.input_masks == pytest.approx(0.0)
    # A fair coin inside every prediction: all aleatoric.
    split = mask_split(torch.full((3, 4, 2), 0.5))
    assert split.aleatoric == pytest.approx(LN2) and split.epistemic == pytest.approx(0.0)


def _posterior(weights: torch.Tensor, bias: torch.Tensor, *, mask_at_prediction: bool = True) -> InputDropoutPosterior:
    arch = ArchSpec(name="softmax", num_classes=3, image_size=6)
    names = list(build_model(arch).state_dict())
    assert len(names) == 2  # one linear layer: weight and bias
    samples = {names[0]: weights.unsqueeze(0), names[1]: bias.unsqueeze(0)}  # one chain
    return InputDropoutPosterior("dsghmc", arch, {"drop_rate": 0.5, "mask_at_prediction": mask_at_prediction},
                                 seed=3, dataset="test", samples=samples)


def _input() -> torch.Tensor:
    return torch.rand(1, 1, 6, 6, generator=torch.Generator().manual_seed(1))


def test_equal_weight_draws_have_no_weight_uncertainty_but_the_masks_still_vary():
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(3, 36, generator=g), torch.randn(3, generator=g)
    same = _posterior(w.expand(10, 3, 36).clone(), b.expand(10, 3).clone())
    summary = predict_input(same, _input(), seed=5).summary
    split = summary.masks
    assert split is not None and split.masks_per_draw == MASKS_PER_DRAW
    assert split.weights == pytest.approx(0.0, abs=1e-12)  # identical weights, same masked copies
    assert split.input_masks > 0.01  # the masks alone make the draws disagree
    assert summary.total == pytest.approx(summary.aleatoric + split.input_masks + split.weights, abs=1e-12)
    assert summary.epistemic == pytest.approx(split.input_masks)
    record = summary.uncertainty_record()
    assert record["epistemic_weights"] == pytest.approx(0.0, abs=1e-12) and record["input_masks"] == pytest.approx(split.input_masks)
    assert record["epistemic_is"] == "weights + input masks"
    # Weight draws that differ do carry weight uncertainty.
    spread = _posterior(w + torch.randn(10, 3, 36, generator=g) * 3, b.expand(10, 3).clone())
    assert predict_input(spread, _input(), seed=5).summary.masks.weights > 0.01


def test_no_split_without_masks_at_prediction():
    g = torch.Generator().manual_seed(0)
    clean = _posterior(torch.randn(4, 3, 36, generator=g), torch.zeros(4, 3), mask_at_prediction=False)
    summary = predict_input(clean, _input(), seed=5).summary
    assert summary.masks is None and "input_masks" not in summary.uncertainty_record()


def test_the_interactive_split_is_the_same_on_every_call():
    g = torch.Generator().manual_seed(0)
    posterior = _posterior(torch.randn(4, 3, 36, generator=g), torch.zeros(4, 3))
    first = predict_input(posterior, _input(), seed=None).summary.masks
    assert predict_input(posterior, _input(), seed=None).summary.masks == first


@pytest.mark.parametrize("seed", [5, None])
def test_several_posteriors_judged_at_once_each_as_alone_and_one_broken_one_in_its_place(seed):
    """``predict_inputs`` (the window's columns on one input, summarised in one pass): each
    prediction, its masks' split included, is the one ``predict_input`` gives alone (each posterior
    its own generator from the seed); a posterior whose probabilities are not numbers gives its
    error in its place and the others still judge."""
    g = torch.Generator().manual_seed(0)
    masked = _posterior(torch.randn(10, 3, 36, generator=g) * 3, torch.zeros(10, 3))
    clean = _posterior(torch.randn(4, 3, 36, generator=g), torch.zeros(4, 3), mask_at_prediction=False)
    broken = _posterior(torch.full((4, 3, 36), float("nan")), torch.zeros(4, 3), mask_at_prediction=False)
    x = _input()
    got = predict_inputs([(masked, x, None), (broken, x, None), (clean, x, 3), (masked, x, 4)], seed=seed, level=0.8)
    assert isinstance(got[1], ProbabilitiesNotFiniteError)
    for (posterior, count), prediction in zip([(masked, None), (clean, 3), (masked, 4)], [got[0], got[2], got[3]],
                                              strict=True):
        alone = predict_input(posterior, x, count, seed=seed, level=0.8)
        assert torch.equal(prediction.samples, alone.samples)
        assert prediction.summary.masks == alone.summary.masks
        assert torch.equal(prediction.summary.mean, alone.summary.mean)
        assert (prediction.summary.total, prediction.summary.epistemic) == (alone.summary.total, alone.summary.epistemic)
    assert got[0].summary.masks is not None and got[2].summary.masks is None
    with pytest.raises(ProbabilitiesNotFiniteError):
        predict_input(broken, x, seed=seed)
