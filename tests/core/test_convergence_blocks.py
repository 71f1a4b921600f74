"""The probe pass by blocks of elements gives the figures of the reference functions
(``convergence.summarise`` and ``rhat_of_shuffles``, themselves checked against ArviZ) to within
1e-12, and its parts (ranks, median, quantiles, ESS) those of numpy, the reference and ArviZ."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from core.engine import convergence as cv
from core.engine import convergence_blocks as cb

with warnings.catch_warnings():  # ArviZ 0.x announces its refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    az = pytest.importorskip("arviz")

MIN_SPREAD = 1e-6


def _probabilities(rng, chains: int, draws: int, images: int = 30, shift: float = 0.0) -> np.ndarray:
    """(chains, draws, images, 4) softmax probabilities rounded through float32, as the probe's:
    classes far apart (many saturate at 1.0 or vanish: ties, elements left out), autocorrelated
    draws, and the last chain's logits moved by ``shift``."""
    base = rng.normal(size=(1, 1, images, 4)) * 6.0
    walk = np.cumsum(rng.normal(size=(chains, draws, images, 4)), axis=1) * 0.05
    logits = base + walk + rng.normal(size=(chains, draws, images, 4)) * 0.3
    logits[-1] += shift
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)).astype(np.float32).astype(np.float64)


def _awkward(rng, chains: int, draws: int) -> np.ndarray:
    """(chains, draws, 8, 5) normal draws with every special element: many ties, constant, varying
    by less than the spread kept, a NaN, two chains apart, two values in equal numbers (folded
    draws all alike), one value but a single draw, and one chain stuck."""
    x = rng.normal(size=(chains, draws, 8, 5))
    x[:, :, 0] = np.round(x[:, :, 0])
    x[:, :, 1, 0] = 0.25
    x[:, :, 1, 1] = 0.5 + 1e-9 * rng.normal(size=(chains, draws))
    x[0, draws // 2, 2, 1] = np.nan
    x[: max(1, chains // 2), :, 3] += 2.0
    x[:, :, 4, 0] = rng.permutation(np.resize([0.25, 0.75], chains * draws)).reshape(chains, draws)
    x[:, :, 4, 1] = 0.5
    x[-1, -1, 4, 1] = 0.9
    x[0, :, 5, 2] = 0.125
    return x


def _compare(x: np.ndarray, orders: list[np.ndarray]) -> None:
    summary, shuffled = cb.summarise_with_shuffles(x, MIN_SPREAD, orders)
    expected = cv.summarise(x, MIN_SPREAD)
    varies = cv.spread(x) > MIN_SPREAD
    for name in ("rhat_max", "ess_bulk_min", "ess_tail_min"):
        np.testing.assert_allclose(getattr(summary, name), getattr(expected, name), rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(summary.rhat, expected.rhat, rtol=0, atol=1e-12)  # NaN where the other is
    reference = cv.rhat_of_shuffles(x[:, :, varies], orders)
    assert len(shuffled) == len(reference)
    for got, want in zip(shuffled, reference, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        assert ((got > 1.01).sum(), (got > 1.1).sum()) == ((want > 1.01).sum(), (want > 1.1).sum())


@pytest.mark.parametrize("chains, draws", [(4, 40), (8, 60), (2, 12), (4, 41), (8, 25), (2, 5), (3, 7), (1, 40),
                                           (3, 2)])
def test_awkward_elements_give_the_reference_figures(chains: int, draws: int) -> None:
    """Ties, constants, NaN, folds all alike, chains apart; odd draw counts (a middle draw left out
    of each chain's split, another for each order); one chain and too few draws go to the reference
    itself."""
    rng = np.random.default_rng(5)
    x = _awkward(rng, chains, draws)
    _compare(x, [rng.permutation(chains * draws) for _ in range(4)])


@pytest.mark.parametrize("draws", [50, 25])
@pytest.mark.parametrize("block_draws", [1, 3 * 8 * 50, cb.BLOCK_DRAWS])
@pytest.mark.parametrize("shift", [0.0, 1.5])
def test_probe_probabilities_give_the_reference_figures_whatever_the_blocks(block_draws, shift, draws,
                                                                            monkeypatch) -> None:
    """Probabilities as the probe's, mixed and with one chain apart, in blocks of one element, of
    three and all at once; 25 draws a chain is what the feature tiers' sampler files keep."""
    monkeypatch.setattr(cb, "BLOCK_DRAWS", block_draws)
    rng = np.random.default_rng(11)
    x = _probabilities(rng, 8, draws, shift=shift)
    varies = cv.spread(x) > MIN_SPREAD
    assert 0 < varies.sum() < varies.size  # some saturate and are left out
    _compare(x, [rng.permutation(8 * draws) for _ in range(8)])


@pytest.mark.parametrize("draws", [24, 25])
def test_odd_and_even_counts_take_the_block_path(draws: int, monkeypatch) -> None:
    """Neither count hands its draws to the reference functions (which the checks above compare
    against): an odd count is computed by blocks as an even one is."""
    rng = np.random.default_rng(draws)
    x = _probabilities(rng, 4, draws, images=5)

    def refused(*args, **kwargs):
        raise AssertionError("the draws went to the reference functions")

    for name in ("summarise", "rhat_of_shuffles", "rhat", "ess_bulk", "ess_tail"):
        monkeypatch.setattr(cv, name, refused)
    summary, shuffled = cb.summarise_with_shuffles(x, MIN_SPREAD, [rng.permutation(4 * draws) for _ in range(3)])
    assert np.isfinite(summary.rhat_max) and len(shuffled) == 3


def test_probe_figures_against_arviz_on_a_few_elements() -> None:
    """An independent check: ArviZ's rank R̂ and bulk and tail ESS of the elements that vary."""
    rng = np.random.default_rng(2)
    x = _probabilities(rng, 4, 100, images=3, shift=0.4)
    summary, _ = cb.summarise_with_shuffles(x, MIN_SPREAD, [])
    varies = cv.spread(x) > MIN_SPREAD
    flat = x.reshape(4, 100, -1)[:, :, varies.ravel()]
    rhat = [az.rhat(np.ascontiguousarray(flat[..., i]), method="rank") for i in range(flat.shape[2])]
    bulk = [az.ess(np.ascontiguousarray(flat[..., i]), method="bulk") for i in range(flat.shape[2])]
    tail = [az.ess(np.ascontiguousarray(flat[..., i]), method="tail") for i in range(flat.shape[2])]
    np.testing.assert_allclose(summary.rhat[varies], rhat, rtol=1e-9)
    np.testing.assert_allclose(summary.rhat_max, max(rhat), rtol=1e-9)
    np.testing.assert_allclose(summary.ess_bulk_min, min(bulk), rtol=1e-9)
    np.testing.assert_allclose(summary.ess_tail_min, min(tail), rtol=1e-9)
    assert summary.rhat_max > 1.01  # the shifted chain is seen


def test_normal_scores_are_rank_normalise_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    rows = np.concatenate([rng.normal(size=(3, 400)), np.round(rng.normal(size=(3, 400)) * 2)])  # ties in half
    order = np.argsort(rows, axis=1)
    scores = cb._normal_scores(np.take_along_axis(rows, order, axis=1), order)
    for row, got in zip(rows, scores, strict=True):
        assert np.array_equal(got, cv.rank_normalise(row.reshape(4, 100)).ravel())


@pytest.mark.parametrize("size", [2, 3, 8, 101, 400, 4000])
def test_median_and_tail_quantiles_are_numpys_bit_for_bit(size: int) -> None:
    rng = np.random.default_rng(size)
    rows = np.concatenate([rng.normal(size=(4, size)), rng.integers(0, 3, size=(2, size)) * 0.1])
    ordered = np.sort(rows, axis=1)
    assert np.array_equal(cb._median(ordered), np.median(rows, axis=1))
    for q in cb.TAIL_QUANTILES:
        assert np.array_equal(cb._quantile(ordered, q), np.quantile(rows, q, axis=1))


@pytest.mark.parametrize("draws", [2, 3, 4, 5, 6, 7, 40, 301])
@pytest.mark.parametrize("phi", [0.0, 0.7, 0.99, -0.6])
def test_ess_rows_is_the_reference_estimator(draws: int, phi: float) -> None:
    """Independent, autocorrelated (the positive sequence runs to the last lags at 0.99 over few
    draws), anticorrelated (pairs that sum below zero at once) and the fewest draws."""
    rng = np.random.default_rng([draws, int(phi * 100) + 100])
    x = np.zeros((6, 3, draws))
    noise = rng.normal(size=x.shape)
    x[..., 0] = noise[..., 0]
    for t in range(1, draws):
        x[..., t] = phi * x[..., t - 1] + noise[..., t]
    reference = cv.effective_sample_size(np.moveaxis(x, 0, -1))
    np.testing.assert_allclose(cb._ess_rows(x), reference, rtol=1e-12)
