"""Per-input analytics: entropy and variance splits, correlation, top-two overlap, summary."""

from __future__ import annotations

import math

import pytest
import torch

from core.analysis.uncertainty import (
    UNCERTAIN_THRESHOLD,
    aleatoric_covariance,
    bhattacharyya_coefficient,
    class_correlation,
    class_histograms,
    credible_interval,
    epistemic_covariance,
    expected_entropy,
    is_uncertain,
    mutual_information,
    predictive_covariance,
    predictive_entropy,
    summarise,
    summarise_many,
    top_two,
    top_two_overlap,
    variance_decomposition,
)


def _random_samples(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2 * torch.randn(*shape, generator=g, dtype=torch.float64), -1)


def test_identical_samples_have_zero_mutual_information():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64).expand(8, 3)
    assert float(mutual_information(p)) == 0.0
    v = variance_decomposition(p)
    assert torch.allclose(v.epistemic, torch.zeros(3, dtype=torch.float64))
    # p(1 − p) by hand
    assert torch.allclose(v.aleatoric, torch.tensor([0.25, 0.21, 0.16], dtype=torch.float64))


def test_two_disagreeing_one_hot_samples_have_ln2_mutual_information():
    p = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    assert float(mutual_information(p)) == pytest.approx(math.log(2))
    v = variance_decomposition(p)
    # one-hot samples carry no aleatoric variance; p̄ = (½, ½, 0) → Var = ¼, ¼, 0
    assert torch.allclose(v.aleatoric, torch.zeros(3))
    assert torch.allclose(v.epistemic, torch.tensor([0.25, 0.25, 0.0]))
    assert float(v.total_sum) == pytest.approx(0.5)


def test_variance_split_sums_to_predictive_covariance():
    samples = _random_samples((50, 4, 6))  # S, N, K
    ale, epi = aleatoric_covariance(samples), epistemic_covariance(samples)
    mean = samples.mean(0)
    total = torch.diag_embed(mean) - mean.unsqueeze(-1) * mean.unsqueeze(-2)
    assert torch.allclose(ale + epi, total, atol=1e-12)
    assert torch.allclose(predictive_covariance(samples), total)
    # Cov_s by numpy's unbiased covariance rescaled to the population form
    one = samples[:, 2, :].numpy()
    import numpy as np

    ref = np.cov(one, rowvar=False) * (len(one) - 1) / len(one)
    assert np.allclose(epi[2].numpy(), ref)
    v = variance_decomposition(samples)
    assert torch.allclose(v.aleatoric, torch.diagonal(ale, dim1=-2, dim2=-1))
    assert torch.allclose(v.epistemic, torch.diagonal(epi, dim1=-2, dim2=-1))
    assert torch.allclose(v.total, v.aleatoric + v.epistemic)
    # the rows of each covariance sum to 0 because probabilities sum to 1
    assert torch.allclose(ale.sum(-1), torch.zeros(4, 6, dtype=torch.float64), atol=1e-12)


def test_entropy_split_still_adds_up():
    samples = _random_samples((30, 5))
    total = predictive_entropy(samples)
    assert torch.allclose(expected_entropy(samples) + mutual_information(samples), total)


def test_correlation_of_two_trading_classes_is_minus_one():
    a = torch.tensor([0.1, 0.4, 0.7, 0.2], dtype=torch.float64)
    samples = torch.stack([a, 0.9 - a, torch.full_like(a, 0.1)], 1)  # class 2 constant
    corr = class_correlation(samples)
    assert corr[0, 1] == pytest.approx(-1.0)
    assert corr[1, 0] == pytest.approx(-1.0)
    # documented choice: constant class → 0 off the diagonal, 1 on it
    assert corr[2].tolist() == [0.0, 0.0, 1.0]
    assert corr[:, 2].tolist() == [0.0, 0.0, 1.0]


def test_correlation_matches_numpy_and_single_sample_is_identity():
    import numpy as np

    samples = _random_samples((40, 5), seed=3)
    assert np.allclose(class_correlation(samples).numpy(), np.corrcoef(samples.numpy(), rowvar=False))
    one = _random_samples((1, 5))
    assert torch.equal(class_correlation(one), torch.eye(5, dtype=one.dtype))
    eigenvalues = torch.linalg.eigvalsh(class_correlation(_random_samples((3, 6))))
    assert eigenvalues.min() > -1e-9  # still positive semi-definite


def test_bhattacharyya_identical_and_disjoint():
    p = torch.tensor([0.2, 0.3, 0.5, 0.0])
    assert float(bhattacharyya_coefficient(p, p)) == pytest.approx(1.0)
    q = torch.tensor([0.0, 0.0, 0.0, 1.0])
    assert float(bhattacharyya_coefficient(p, q)) == 0.0
    # √(½·½) + √(½·0) + √(0·½) for half-overlapping uniform histograms
    assert float(bhattacharyya_coefficient(torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.0, 0.5, 0.5]))) == pytest.approx(0.5)


def test_top_two_overlap_confident_and_ambiguous():
    confident = torch.tensor([[0.97, 0.02, 0.01], [0.96, 0.03, 0.01], [0.98, 0.01, 0.01]])
    assert float(top_two_overlap(confident)) == 0.0
    assert not bool(is_uncertain(top_two_overlap(confident)))
    # classes 0 and 1 swap the same values across samples: identical distributions
    ambiguous = torch.tensor([[0.6, 0.4, 0.0], [0.4, 0.6, 0.0], [0.62, 0.38, 0.0], [0.38, 0.62, 0.0]])
    assert float(top_two_overlap(ambiguous)) == pytest.approx(1.0)
    assert bool(is_uncertain(top_two_overlap(ambiguous)))
    # batched: (S, N, K) → (N,)
    both = torch.stack([confident[:3], ambiguous[:3]], 1)
    assert top_two_overlap(both).shape == (2,)


def test_histograms_use_fixed_bins():
    s = torch.tensor([[0.0, 1.0], [0.5, 0.5], [0.99, 0.01]])
    hist, edges = class_histograms(s, bins=4)
    assert edges.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert hist[0].tolist() == pytest.approx([1 / 3, 0.0, 1 / 3, 1 / 3])
    assert hist[1].tolist() == pytest.approx([1 / 3, 0.0, 1 / 3, 1 / 3])


def test_summarise_fills_new_fields():
    samples = torch.tensor([[0.6, 0.4, 0.0], [0.4, 0.6, 0.0]])
    s = summarise(samples)
    assert s.top_two[0] in (0, 1) and set(s.top_two) == {0, 1}
    assert s.epistemic_variance.tolist() == pytest.approx([0.01, 0.01, 0.0])
    assert s.aleatoric_variance.tolist() == pytest.approx([0.24, 0.24, 0.0])
    assert s.total_variance.tolist() == pytest.approx([0.25, 0.25, 0.0])
    assert s.correlation[0, 1] == pytest.approx(-1.0)
    # classes 0 and 1 both take the values {0.4, 0.6}: the same distribution
    assert s.overlap == pytest.approx(1.0)
    assert s.uncertain is True
    assert UNCERTAIN_THRESHOLD == 0.5
    # one sample (MAP): 0.50 lies in bin [0.50, 0.55), 0.49 in [0.45, 0.50) → no overlap
    s2 = summarise(torch.tensor([[0.5, 0.49, 0.01]]))
    assert s2.overlap == 0.0 and s2.uncertain is False
    s3 = summarise(torch.tensor([[0.49, 0.48, 0.03]]))  # same bin [0.45, 0.50)
    assert s3.overlap == pytest.approx(1.0) and s3.uncertain


@pytest.mark.parametrize("s", [1, 2, 3, 16, 100, 800])
@pytest.mark.parametrize("seed", range(4))
def test_summarise_equals_the_helpers_it_stands_for(s, seed):
    """summarise computes every field at once (in numpy, for speed: issue 49); every field must
    still equal the torch helper that defines it: the tensors bit for bit (the correlation to
    1e-12: a matrix product sums in its own order), the entropies to 1e-15 (numpy's log and torch's may differ in the last bit). Some inputs have a class without
    mass (correlation 0, a histogram all in the first bin) and ties between classes."""
    g = torch.Generator().manual_seed(1000 * s + seed)
    samples = torch.softmax(3 * torch.randn(s, 10, generator=g), -1).double()
    if seed == 1:
        samples[:, 3] = 0.0  # a class no draw gives any mass
    if seed == 2:
        samples = samples.float()  # the window's float32 probabilities
    if seed == 3 and s > 1:
        samples[:, :2] = samples[:, :2].mean(1, keepdim=True)  # two classes tied in every draw
    got = summarise(samples, level=0.8)
    samples = samples.double()
    lower, upper = credible_interval(samples, 0.8)
    parts = variance_decomposition(samples)
    assert torch.equal(got.mean, samples.mean(0).float())
    assert torch.equal(got.lower, lower.float()) and torch.equal(got.upper, upper.float())
    assert torch.equal(got.histograms, class_histograms(samples)[0])
    assert torch.equal(got.bin_edges, class_histograms(samples)[1])
    assert got.total == pytest.approx(float(predictive_entropy(samples)), abs=1e-15)
    assert got.aleatoric == pytest.approx(float(expected_entropy(samples)), abs=1e-15)
    assert got.epistemic == pytest.approx(float(mutual_information(samples)), abs=1e-15)
    assert torch.equal(got.total_variance, parts.total.float())
    assert torch.equal(got.aleatoric_variance, parts.aleatoric.float())
    assert torch.equal(got.epistemic_variance, parts.epistemic.float())
    # the correlation's covariance is one matrix product, summed in its own order: to 1e-12
    assert torch.allclose(got.correlation.double(), class_correlation(samples).float().double(), rtol=0, atol=1e-12)
    assert got.top_two == tuple(int(i) for i in top_two(samples))
    assert got.overlap == float(top_two_overlap(samples))
    assert got.uncertain == bool(is_uncertain(got.overlap)) and got.num_samples == s and got.level == 0.8
    assert got.mean.dtype == got.correlation.dtype == got.histograms.dtype == torch.float32


def _fields_equal(a, b) -> bool:
    """Every field of two summaries the same: tensors bit for bit (dtype included), floats as
    floats (a −0.0 is not a 0.0 here), the rest by ==."""
    from dataclasses import fields

    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor):
            if not (x.dtype == y.dtype and torch.equal(x, y)):
                return False
        elif isinstance(x, float):
            if not (x == y and math.copysign(1, x) == math.copysign(1, y)):
                return False
        elif x != y:
            return False
    return True


def test_summarise_many_gives_each_posterior_its_own_summary_bit_for_bit():
    """The window summarises a request's columns in one pass (issue 49): stacked with others of
    its shape, a posterior's summary is the one it gets alone, in its place in the list; draws of
    other counts or classes (S, K) are summarised in their own pass; the tensors are each their own."""
    g = torch.Generator().manual_seed(7)
    shapes = [(16, 10), (16, 10), (100, 10), (16, 10), (1, 10), (8, 3), (100, 10), (16, 10)]
    arrays = [torch.softmax(3 * torch.randn(*shape, generator=g), -1) for shape in shapes]
    arrays[1][:, 4] = 0.0  # a class without mass
    arrays[3] = torch.round(arrays[3] * 4) / 4  # ties between classes and draws
    arrays[6] = arrays[6].double()
    for level in (0.5, 0.9):
        many = summarise_many(arrays, level=level)
        assert len(many) == len(arrays)
        for samples, got in zip(arrays, many, strict=True):
            assert _fields_equal(got, summarise(samples, level=level))
    for summary in many:  # each owns its tensors: a pickle of one carries no other column's numbers
        for name in ("mean", "lower", "histograms", "correlation", "bin_edges"):
            tensor = getattr(summary, name)
            assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size(), name
    assert summarise_many([]) == []
    with pytest.raises(ValueError, match="shape"):
        summarise_many([arrays[0], arrays[0][0]])
