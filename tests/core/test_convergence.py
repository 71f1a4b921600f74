"""Rank-normalised split-R̂ and bulk/tail ESS, checked against ArviZ (the independent reference)
and against cases whose answer is known without either implementation."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.engine import convergence as cv
from core.engine.naming import why_not_measurable

with warnings.catch_warnings():  # ArviZ 0.x announces its refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    az = pytest.importorskip("arviz")


def _arviz(fn, draws: np.ndarray, **kwargs) -> np.ndarray:
    """ArviZ's value for each trailing element of (chains, draws, ...), one 2-D call each."""
    flat = draws.reshape(draws.shape[0], draws.shape[1], -1)
    with np.errstate(divide="ignore", invalid="ignore"):  # tied halves: ArviZ divides by 0, as we do
        values = [float(fn(np.ascontiguousarray(flat[..., i]), **kwargs)) for i in range(flat.shape[2])]
    return np.array(values).reshape(draws.shape[2:])


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20210101)
    shifted = rng.normal(size=(4, 200, 3))
    shifted[2] += np.array([0.3, 1.0, 3.0])  # one chain away from the others, by more and more
    constant_chain = rng.normal(size=(3, 60, 2))
    constant_chain[1] = 0.25  # one chain stuck on one value
    autocorrelated = np.cumsum(rng.normal(size=(2, 301, 2)), axis=1) * 0.1 + rng.normal(size=(2, 301, 2))
    ties = rng.integers(0, 4, size=(4, 50, 3)).astype(float)  # many ties in the ranks
    probabilities = rng.dirichlet(np.ones(10), size=(2, 8)).astype(np.float32).astype(float)
    return {
        "well mixed": rng.normal(size=(4, 500, 5)),
        "shifted means": shifted,
        "one constant chain": constant_chain,
        "odd draws, autocorrelated": autocorrelated,
        "ties": ties,
        "2 chains x 8 draws of probabilities": probabilities,
        "2 chains x 4 draws": rng.normal(size=(2, 4, 3)),
        "heavy tails": rng.standard_cauchy(size=(4, 100, 2)),
    }


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_rhat_matches_arviz_rank(name: str) -> None:
    draws = CASES[name]
    ours = cv.rhat(draws)
    reference = _arviz(az.rhat, draws, method="rank")
    np.testing.assert_allclose(ours, reference, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_bulk_and_tail_rhat_match_arviz_z_scale_and_folded(name: str) -> None:
    draws = CASES[name]
    np.testing.assert_allclose(cv.rhat_bulk(draws), _arviz(az.rhat, draws, method="z_scale"), rtol=1e-9)
    # ArviZ's "folded" folds before splitting; its "rank" (and we) fold the split chains.
    # They agree when the draw count is even (nothing is dropped by the split).
    if draws.shape[1] % 2 == 0:
        np.testing.assert_allclose(cv.rhat_tail(draws), _arviz(az.rhat, draws, method="folded"), rtol=1e-9)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("method", ["bulk", "tail"])
def test_ess_matches_arviz(name: str, method: str) -> None:
    draws = CASES[name]
    ours = cv.ess_bulk(draws) if method == "bulk" else cv.ess_tail(draws)
    reference = _arviz(az.ess, draws, method=method)
    np.testing.assert_allclose(ours, reference, rtol=1e-9, atol=1e-9)


def test_vectorised_over_any_trailing_shape() -> None:
    rng = np.random.default_rng(3)
    draws = rng.normal(size=(3, 40, 4, 5))
    assert cv.rhat(draws).shape == (4, 5)
    assert cv.ess_tail(draws).shape == (4, 5)
    np.testing.assert_allclose(cv.rhat(draws)[2, 3], cv.rhat(draws[:, :, 2, 3:4])[0])


@pytest.mark.parametrize("measure", [cv.rhat, cv.ess_bulk, cv.ess_tail])
def test_slices_of_elements_give_each_elements_own_value(measure, monkeypatch) -> None:
    rng = np.random.default_rng(8)
    draws = rng.normal(size=(4, 30, 7, 3)) + np.arange(4)[:, None, None, None] * rng.uniform(0, 0.5, size=(7, 3))
    draws[:, :, 2, 1] = 0.5  # a constant element among them
    one_by_one = np.array([[measure(draws[:, :, i, j : j + 1])[0] for j in range(3)] for i in range(7)])
    monkeypatch.setattr(cv, "CHUNK_DRAWS", 4 * 30 * 2)  # two elements a slice: 21 is cut 11 times
    np.testing.assert_allclose(measure(draws), one_by_one, rtol=1e-12)  # the sums' order alone differs


def test_memory_of_many_elements_stays_bounded() -> None:
    """A probe set's worth of elements: the passes' copies of every element at once (ranks,
    z-scores, a padded FFT at every lag) took 6.3 GiB for 4 × 840 draws of 10,000 probabilities."""
    import tracemalloc

    draws = np.random.default_rng(1).normal(size=(4, 500, 2000))  # 32 MB
    tracemalloc.start()
    try:
        for measure in (cv.rhat, cv.ess_bulk, cv.ess_tail):
            measure(draws)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # at once, each pass peaked at 265 MB (the FFT of 8 split chains at 512 padded lags alone is
    # 131 MB); sliced, it holds a few copies of one slice
    assert peak < draws.nbytes, f"peak {peak / 1e6:.0f} MB for {draws.nbytes / 1e6:.0f} MB of draws"


def test_chains_from_one_normal_agree_and_chains_apart_do_not() -> None:
    rng = np.random.default_rng(11)
    same = rng.normal(size=(4, 1000, 20))
    assert np.all(cv.rhat(same) < 1.01)
    apart = rng.normal(size=(4, 1000, 20)) + np.arange(4)[:, None, None]  # means 0, 1, 2, 3
    # the classic ratio would be √(1 + var(0, 1, 2, 3)) ≈ 1.63; ranks pull it in a little
    assert np.all(cv.rhat(apart) > 1.4)
    # independent draws are worth about their number; chains apart much less
    assert np.all(cv.ess_bulk(same) > 3000)
    assert np.all(cv.ess_bulk(apart) < 100)


def test_too_few_chains_or_draws_is_nan_with_the_reason() -> None:
    rng = np.random.default_rng(0)
    assert np.isnan(cv.rhat(rng.normal(size=(1, 100, 2)))).all()
    assert np.isnan(cv.rhat(rng.normal(size=(4, 3, 2)))).all()
    assert why_not_measurable(1, 100).startswith("one chain")
    assert "at least 4 draws" in why_not_measurable(8, 1)
    assert why_not_measurable(2, 4) is None


def test_summary_takes_the_worst_element_and_skips_constant_ones() -> None:
    rng = np.random.default_rng(5)
    draws = rng.normal(size=(2, 50, 3))
    draws[..., 1] += np.array([0.0, 4.0])[:, None]  # chains far apart in element 1 only
    draws[..., 2] = 1.0  # a probability that is 1 in every draw: nothing to compare
    summary = cv.summarise(draws)
    assert summary.rhat_max == pytest.approx(float(cv.rhat(draws)[1]))
    assert summary.rhat_max > 1.5
    assert summary.ess_bulk_min == pytest.approx(float(np.nanmin(cv.ess_bulk(draws)[:2])))
    np.testing.assert_array_equal(summary.rhat[:2], cv.rhat(draws)[:2])  # each element's R̂, for the caller
    assert np.isnan(summary.rhat[2])  # the skipped element has none


@pytest.mark.parametrize("draws", [4, 6, 9])
def test_ess_from_fewer_than_10_draws_per_chain_is_the_estimators_floor(draws: int) -> None:
    """Why the window and `info` call such an ESS "not estimable": each split half holds fewer
    than 5 draws, Geyer's sequence never starts, and ESS is N·log₁₀N whatever the chains."""
    from core.engine.naming import ess_estimable

    rng = np.random.default_rng(draws)
    x = rng.normal(size=(2, draws, 6))
    x[1] += 5.0  # chains far apart: a real estimate would be near 2
    n = 2 * (draws // 2) * 2
    np.testing.assert_allclose(cv.ess_bulk(x), n * np.log10(n))
    np.testing.assert_allclose(_arviz(az.ess, x, method="bulk"), n * np.log10(n))
    assert not ess_estimable(draws) and ess_estimable(10)


def test_a_probability_that_moves_by_one_float32_step_is_left_out_of_the_summary() -> None:
    """Probabilities saturated at 1 in float32 flip between 0.99999988 and 1.0: tied halves give
    an infinite R̂ (as ArviZ computes it) that says nothing about the chains."""
    rng = np.random.default_rng(9)
    draws = rng.normal(size=(2, 4, 2)) * 0.1
    draws[..., 1] = [[np.float32(1 - 2**-23), np.float32(1 - 2**-23), 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]
    assert np.isinf(cv.rhat(draws)[1])
    assert np.isinf(_arviz(az.rhat, draws, method="rank")[1])
    assert np.isinf(cv.summarise(draws).rhat_max)
    assert cv.summarise(draws, min_spread=1e-6).rhat_max == pytest.approx(float(cv.rhat(draws)[0]))


def _ar1(phi: float, chains: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.empty((chains, n))
    x[:, 0] = rng.normal(size=chains) / math.sqrt(1 - phi**2)
    noise = rng.normal(size=(chains, n))
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x


def test_ess_of_ar1_matches_closed_form():
    """AR(1) with coefficient φ has integrated autocorrelation time (1 + φ)/(1 − φ)."""
    phi, chains, n = 0.8, 4, 5000
    expected = chains * n * (1 - phi) / (1 + phi)
    assert float(cv.ess_bulk(_ar1(phi, chains, n, 0))) == pytest.approx(expected, rel=0.15)
    iid = np.random.default_rng(1).normal(size=(4, 2000))
    assert float(cv.ess_bulk(iid)) == pytest.approx(8000, rel=0.15)


def test_split_rhat_flags_disagreeing_chains():
    rng = np.random.default_rng(2)
    iid = rng.normal(size=(4, 1000))
    assert abs(float(cv.rhat(iid)) - 1) < 0.01
    shifted = iid + np.arange(4)[:, None] * 1.0
    assert float(cv.rhat(shifted)) > 1.2
    drifting = iid + np.linspace(0, 3, 1000)[None]
    assert float(cv.rhat(drifting)) > 1.1


@given(st.floats(min_value=1.0, max_value=3.0))
def test_the_shown_rhat_is_on_the_same_side_of_each_target_as_the_value(value):
    """A warning says R̂ is above 1.1 (or 1.01): the number beside it must not read 1.10 (or 1.010)."""
    from core.engine.naming import RHAT_LOOSE, RHAT_STRICT, rhat_text

    shown = float(rhat_text(value))
    for target in (RHAT_STRICT, RHAT_LOOSE):
        assert (shown > target) == (value > target), (value, rhat_text(value))
    assert rhat_text(1.1018) == "1.102" and rhat_text(1.31) == "1.31" and rhat_text(1.0042) == "1.004"


@pytest.mark.parametrize("draws", [40, 41])  # an odd count drops each chain's middle draw from its split
def test_shuffled_chains_rhat_equals_rhat_of_each_shuffle_bit_for_bit(draws: int) -> None:
    """The shuffled baseline ranks the pooled draws once; every order must still give exactly the
    R̂ that ranking its own shuffle gives, ties, constant and NaN elements included."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, draws, 6, 5))
    x[:, :, 0] = np.round(x[:, :, 0])  # many ties
    x[:, :, 1, 0] = 0.25  # constant: NaN
    x[0, 3, 2, 1] = np.nan  # one NaN draw: NaN
    x[:2, :, 3] += 2.0  # two chains apart: R̂ far above 1
    orders = [rng.permutation(4 * draws) for _ in range(5)]
    pooled = x.reshape(4 * draws, 6, 5)
    got = cv.rhat_of_shuffles(x, orders)
    for order, r in zip(orders, got, strict=True):
        assert np.array_equal(r, cv.rhat(pooled[order].reshape(x.shape)), equal_nan=True)
    assert np.isnan(got[0][1, 0]) and np.isnan(got[0][2, 1])
    assert cv.rhat(x)[3].min() > 1.3 > max(r[3].max() for r in got)  # apart unshuffled only
