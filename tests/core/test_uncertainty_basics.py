"""Hand-worked cases for the entropy decomposition, intervals and histograms."""

from __future__ import annotations

import math

import pytest
import torch

from core.analysis.uncertainty import (
    class_histograms,
    credible_interval,
    entropy,
    expected_entropy,
    mutual_information,
    predictive_entropy,
    summarise,
)


def test_identical_samples_have_no_epistemic_uncertainty():
    p = torch.tensor([0.7, 0.2, 0.1]).expand(25, 3)
    h = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    assert float(predictive_entropy(p)) == pytest.approx(h)
    assert float(expected_entropy(p)) == pytest.approx(h)
    assert float(mutual_information(p)) == 0.0


def test_two_disagreeing_one_hot_samples_give_ln2():
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert float(expected_entropy(p)) == 0.0
    assert float(mutual_information(p)) == pytest.approx(math.log(2))
    assert float(predictive_entropy(p)) == pytest.approx(math.log(2))


def test_uniform_over_k_classes_is_all_aleatoric():
    k = 10
    p = torch.full((7, k), 1.0 / k)
    assert float(expected_entropy(p)) == pytest.approx(math.log(k))
    assert float(mutual_information(p)) == pytest.approx(0.0, abs=1e-7)


def test_k_one_hot_samples_cycle_give_log_k():
    p = torch.eye(4).repeat(3, 1)  # 12 samples, each class equally often
    assert float(mutual_information(p)) == pytest.approx(math.log(4))


def test_mixed_case_by_hand():
    # Two samples: (0.5, 0.5) and (1, 0); mean (0.75, 0.25).
    p = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    total = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    aleatoric = 0.5 * math.log(2)
    assert float(predictive_entropy(p)) == pytest.approx(total)
    assert float(expected_entropy(p)) == pytest.approx(aleatoric)
    assert float(mutual_information(p)) == pytest.approx(total - aleatoric)


def test_batched_shapes_and_never_negative():
    p = torch.softmax(torch.randn(30, 8, 10) * 3, -1)
    mi = mutual_information(p)
    assert mi.shape == (8,) and (mi >= 0).all()
    torch.testing.assert_close(predictive_entropy(p), expected_entropy(p) + mi)


def test_entropy_of_zero_probability_is_finite():
    assert float(entropy(torch.tensor([1.0, 0.0, 0.0]))) == 0.0


def test_credible_interval_of_uniform_grid():
    # 101 samples 0.00, 0.01, ..., 1.00: the 5th smallest and 5th largest (0.04, 0.96) hold
    # (101 + 1 − 2·5)/(101 + 1) = 90.2% ≥ 90% on average; the 6th pair would hold 88.2%.
    grid = torch.linspace(0, 1, 101).unsqueeze(1)
    lower, upper = credible_interval(grid, 0.9)
    assert float(lower[0]) == pytest.approx(0.04) and float(upper[0]) == pytest.approx(0.96)
    with pytest.raises(ValueError):
        credible_interval(grid, 1.0)


def test_histograms_fixed_bins():
    p = torch.tensor([[0.0, 1.0], [0.04, 0.96], [0.5, 0.5], [1.0, 0.0]])
    counts, edges = class_histograms(p, bins=10)
    assert edges.tolist() == pytest.approx([i / 10 for i in range(11)])
    # class 0: 0.0 and 0.04 in bin 0, 0.5 in bin 5, 1.0 in the last bin
    assert counts[0].tolist() == pytest.approx([0.5, 0, 0, 0, 0, 0.25, 0, 0, 0, 0.25])
    assert counts.sum(-1).tolist() == pytest.approx([1.0, 1.0])


def test_summarise_one_input():
    p = torch.tensor([[0.9, 0.1], [0.7, 0.3]])
    s = summarise(p, level=0.5)
    assert s.predicted_class == 0 and s.num_samples == 2
    assert float(s.mean[0]) == pytest.approx(0.8)
    assert s.total == pytest.approx(s.aleatoric + s.epistemic)
    with pytest.raises(ValueError):
        summarise(torch.ones(2, 3, 4))
