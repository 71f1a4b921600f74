"""The window's engine gives the numbers their definitions give (issue 49, the engine's fixed cost).

``predict_inputs`` judges several posteriors on one input and summarises them in one numpy pass
(:func:`core.analysis.uncertainty.summarise_many`, written for few array operations), and checks
that the probabilities are numbers in the same pass (``summarise_finite``). Here every number a column shows, from the bundled default
posteriors on several drawings and at several draw counts, is checked against the torch helpers
that define it (``credible_interval``, ``class_histograms``, ``entropy``, ``variance_decomposition``,
``class_correlation``, ``top_two``, ``top_two_overlap``, ``is_uncertain``): the path the summaries
took before they were computed in numpy. Tensors to 1e-12 (they are float32, so bit for bit in
practice), entropies to 1e-12, classes and flags exactly.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from core.analysis.predictive import (
    ProbabilitiesNotFiniteError,
    check_finite,
    image_batch,
    not_finite_error,
    predict_input,
    predict_inputs,
)
from core.analysis.uncertainty import (
    class_correlation,
    class_histograms,
    credible_interval,
    expected_entropy,
    is_uncertain,
    mutual_information,
    predictive_entropy,
    summarise_finite,
    summarise_many,
    top_two,
    top_two_overlap,
    variance_decomposition,
)
from core.engine.data.preprocess import check_drawing, image_to_input
from core.engine.resources import resources_dir
from core.engine.store import load_posterior

#: The window's default columns (app.settings.DEFAULT_COLUMNS: exact, SG sampling, dropout, VI).
DEFAULTS = ("paper_softmax_hmc.pt", "paper_softmax_sghmc.pt", "paper_softmax_mc_dropout.pt",
            "paper_softmax_mfvi.pt")


@pytest.fixture(scope="module")
def posteriors():
    return [load_posterior(resources_dir() / "models" / name) for name in DEFAULTS]


def _drawings() -> list[np.ndarray]:
    """A 1, a blot, a noisy smear and a ring: inputs the columns agree and disagree on."""
    one = np.zeros((28, 28), np.float32)
    one[5:23, 13:16] = 1.0
    blot = np.zeros((28, 28), np.float32)
    blot[9:19, 9:19] = 0.8
    smear = np.clip(np.random.default_rng(3).random((28, 28), dtype=np.float32) - 0.3, 0, 1)
    yy, xx = np.mgrid[:28, :28]
    ring = (np.abs(np.hypot(yy - 14, xx - 14) - 7) < 2).astype(np.float32)
    return [one, blot, smear, ring]


def _assert_defined_numbers(summary, samples: torch.Tensor, level: float) -> None:
    """Every field of ``summary`` as its torch helper defines it, from the draws in float64."""
    p = samples.double()
    lower, upper = credible_interval(p, level)
    parts = variance_decomposition(p)
    hist, edges = class_histograms(p)
    expected = {"mean": p.mean(0), "lower": lower, "upper": upper, "histograms": hist, "bin_edges": edges,
                "total_variance": parts.total, "aleatoric_variance": parts.aleatoric,
                "epistemic_variance": parts.epistemic, "correlation": class_correlation(p)}
    for name, want in expected.items():
        got = getattr(summary, name)
        assert got.dtype == torch.float32, name
        assert torch.allclose(got.double(), want.float().double(), rtol=0, atol=1e-12), name
    assert summary.total == pytest.approx(float(predictive_entropy(p)), abs=1e-12)
    assert summary.aleatoric == pytest.approx(float(expected_entropy(p)), abs=1e-12)
    assert summary.epistemic == pytest.approx(float(mutual_information(p)), abs=1e-12)
    assert summary.top_two == tuple(int(i) for i in top_two(p))
    assert summary.overlap == float(top_two_overlap(p))
    assert summary.uncertain == bool(is_uncertain(top_two_overlap(p)))
    assert summary.num_samples == len(samples) and summary.level == level


@pytest.mark.parametrize("draws", [1, 16, 100])
@pytest.mark.parametrize("seed", [None, 5])
def test_the_default_columns_summaries_are_their_definitions(posteriors, draws, seed):
    """All four columns in one request, as the window asks, on four drawings: each summary is
    what the helpers give for its draws, and what the column gets when judged alone."""
    for level in (0.9, 0.5):
        for drawing in _drawings():
            x = image_batch(drawing)
            together = predict_inputs([(p, x, draws) for p in posteriors], seed=seed, level=level)
            for posterior, prediction in zip(posteriors, together, strict=True):
                assert not isinstance(prediction, Exception), prediction
                assert prediction.samples.shape == (draws, 10)
                _assert_defined_numbers(prediction.summary, prediction.samples, level)
                alone = predict_input(posterior, x, draws, seed=seed, level=level)
                assert torch.equal(alone.samples, prediction.samples)
                assert alone.summary.overlap == prediction.summary.overlap
                assert torch.equal(alone.summary.correlation, prediction.summary.correlation)


def test_summaries_of_awkward_draws_are_their_definitions():
    """Draws with ties between classes, a class without mass, one class certain, float64 and
    float16 draws, stacked with others of their shape."""
    g = torch.Generator().manual_seed(11)
    arrays = [torch.softmax(4 * torch.randn(16, 10, generator=g), -1) for _ in range(6)]
    arrays[0][:, 2] = 0.0  # a class no draw gives mass to
    arrays[1] = torch.round(arrays[1] * 4) / 4  # ties between classes and draws
    arrays[2] = torch.zeros(16, 10).index_fill_(1, torch.tensor([7]), 1.0)  # certain: overlap of empty rows
    arrays[3] = arrays[3].double()
    arrays[4] = arrays[4].half()
    for summary, samples in zip(summarise_many(arrays, level=0.8), arrays, strict=True):
        _assert_defined_numbers(summary, samples, 0.8)
        for name in ("mean", "correlation", "histograms", "bin_edges"):  # each its own numbers only
            tensor = getattr(summary, name)
            assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size(), name


def test_summaries_on_the_bins_edges_and_with_tied_leaders_are_their_definitions():
    """Draws exactly on the histograms' edges, just below them, at 0 and 1 and just outside
    [0, 1] (the bins are cut from p·bins clamped to [0, bins − 1]); classes tied for first,
    second or third place, where the top two come from torch's topk, and two classes only."""
    edges = torch.linspace(0, 1, 21, dtype=torch.float64)
    below = torch.nextafter(edges, torch.zeros(()))
    values = torch.cat([edges, below, torch.tensor([0.0, 1.0, -1e-12, 1 + 1e-12, 1e-300, 0.05, 0.95])])
    g = torch.Generator().manual_seed(2)
    on_edges = values[torch.randint(len(values), (100, 10), generator=g)]
    uniform = torch.full((16, 10), 0.1, dtype=torch.float64)  # every class tied
    second = torch.tensor([[0.4, 0.2, 0.2, 0.1, 0.1]] * 8, dtype=torch.float64)  # tie for second place
    third = torch.tensor([[0.4, 0.3, 0.1, 0.1, 0.1]] * 8, dtype=torch.float64)  # tie for third place
    first = torch.tensor([[0.1, 0.35, 0.35, 0.2, 0.0]] * 8, dtype=torch.float64)  # tie for first place
    two = torch.softmax(torch.randn(16, 2, generator=g, dtype=torch.float64), -1)
    for arrays in ([on_edges], [uniform], [second, third, first], [two, two.flip(1)]):
        for summary, samples in zip(summarise_many(arrays, level=0.9), arrays, strict=True):
            _assert_defined_numbers(summary, samples, 0.9)
    # the flag at its threshold: strictly above it, in float32 as is_uncertain compares
    overlap = summarise_many([on_edges])[0].overlap
    for threshold in (overlap, float(np.nextafter(np.float32(overlap), np.float32(0))), overlap - 1e-12):
        want = bool(is_uncertain(torch.tensor(overlap, dtype=torch.float32), threshold))
        assert summarise_many([on_edges], threshold=threshold)[0].uncertain == want


def test_the_finite_checks_still_find_one_bad_number(posteriors):
    """The probabilities' check is one pass over the stacked draws of each shape: a NaN or an
    infinity anywhere in a posterior's draws gives None in its place, and its error counts the
    samples that hold one; the other posteriors' summaries are the ones ``summarise_many`` gives
    them, bit for bit. The drawing is
    clipped by two ufuncs, and handed on contiguous whatever its layout. ``check_finite`` (one
    tensor, as ``predict --task age`` checks it) looks at a sum first, and a sum that overflows from
    finite numbers alone is not taken for a NaN."""
    samples = torch.full((16, 10), 0.1)
    assert check_finite(samples, posteriors[1]) is samples
    for bad in (float("nan"), float("inf"), -float("inf")):
        broken = samples.clone()
        broken[9, 4] = bad
        with pytest.raises(ProbabilitiesNotFiniteError, match="not numbers in 1 of its 16 samples"):
            check_finite(broken, posteriors[1])
    huge = torch.full((4, 10), 3e38)  # finite numbers whose sum is not
    assert check_finite(huge, posteriors[1]) is huge
    g = torch.Generator().manual_seed(4)
    clean = [torch.softmax(3 * torch.randn(16, 10, generator=g), -1) for _ in range(3)]
    certain = torch.zeros(16, 10).index_fill_(1, torch.tensor([3]), 1.0)
    other = torch.softmax(torch.randn(8, 10, generator=g), -1)  # a shape of its own
    for bad in (float("nan"), float("inf"), -float("inf")):
        broken = clean[1].clone()
        broken[9, 4] = bad
        broken[3, 0] = bad
        arrays = [clean[0], broken, certain, clean[2], other]
        got = summarise_finite(arrays, level=0.8)
        assert got[1] is None
        for summary, want in zip([got[i] for i in (0, 2, 3, 4)],
                                 summarise_many([clean[0], certain, clean[2], other], level=0.8), strict=True):
            for field in fields(want):
                a, b = getattr(summary, field.name), getattr(want, field.name)
                assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, field.name
        error = not_finite_error(broken, posteriors[1])
        assert isinstance(error, ProbabilitiesNotFiniteError) and "not numbers in 2 of its 16 samples" in str(error)
        assert summarise_finite([broken.double()]) == [None]
    x = image_batch(_drawings()[0])
    nan = torch.full((16, 1, 10), float("nan"))
    with pytest.MonkeyPatch.context() as patch:  # one column's probabilities not numbers: the others judge
        patch.setattr(posteriors[1], "predict_proba", lambda *args, **kwargs: nan, raising=False)
        got = predict_inputs([(p, x, 16) for p in posteriors], seed=None)
    assert isinstance(got[1], ProbabilitiesNotFiniteError) and "in 16 of its 16 samples" in str(got[1])
    for posterior, prediction in zip(posteriors[:1] + posteriors[2:], got[:1] + got[2:], strict=True):
        assert torch.equal(prediction.summary.mean, predict_input(posterior, x, 16, seed=None).summary.mean)
    drawing = np.zeros((28, 28), np.float32)
    drawing[10:18, 10:18] = 1.0
    drawing[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite"):
        check_drawing(drawing)
    drawing[0, 0] = 3.0  # clipped to 1 by the two ufuncs as np.clip did
    assert float(image_to_input(drawing)[0, 0, 0, 0]) == 1.0
    transposed = np.asfortranarray(_drawings()[0])
    assert image_to_input(transposed).is_contiguous()
