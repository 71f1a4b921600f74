"""Conformal prediction sets: hand computations, nesting, coverage by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.analysis.conformal import (
    Calibration,
    calibration_mask,
    conformal_quantile,
    conformal_scores,
    coverage_bounds,
    coverage_table,
    credible_sets,
    image_fingerprints,
    prediction_sets,
    sets_in_words,
)

P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]])
U = np.array([0.5, 0.25])


class TestHandComputed:
    def test_threshold_scores(self) -> None:
        # 1 − p̄ at the label: 1 − 0.3 and 1 − 0.3
        np.testing.assert_allclose(conformal_scores(P, [1, 2], "threshold"), [0.7, 0.7])

    def test_aps_scores(self) -> None:
        # row 0, label 1: class 0 (0.5) ranks above, + u·p̄₁ = 0.5 + 0.5·0.3 = 0.65
        # row 1, label 2: class 1 (0.6) ranks above, + u·p̄₂ = 0.6 + 0.25·0.3 = 0.675
        np.testing.assert_allclose(conformal_scores(P, [1, 2], "aps", U), [0.65, 0.675])
        # the top class scores u·p̄_top: row 0, label 0 → 0.5·0.5
        np.testing.assert_allclose(conformal_scores(P[:1], [0], "aps", U[:1]), [0.25])
        # one u for every input: row 1, label 2, u = ½ → 0.6 + 0.15
        np.testing.assert_allclose(conformal_scores(P, [1, 2], "aps", 0.5), [0.65, 0.75])

    def test_quantile_rank(self) -> None:
        scores = np.array([0.9, 0.1, 0.5, 0.3])  # sorted: 0.1 0.3 0.5 0.9
        assert conformal_quantile(scores, 0.5) == 0.5  # ⌈5·0.5⌉ = 3rd smallest
        assert conformal_quantile(np.arange(1, 10) / 10, 0.9) == 0.9  # n = 9: ⌈10·0.9⌉ = 9th = 0.9
        assert conformal_quantile(np.arange(1, 9) / 10, 0.9) == math.inf  # n = 8: ⌈9·0.9⌉ = 9 > 8

    def test_threshold_set(self) -> None:
        # q̂ = 0.65: classes with 1 − p̄ ≤ 0.65, i.e. p̄ ≥ 0.35: row 0 {0}, row 1 {1}
        sets = prediction_sets(P, 0.65, "threshold")
        np.testing.assert_array_equal(sets, [[True, False, False], [False, True, False]])

    def test_aps_set(self) -> None:
        # q̂ = 0.65, row 0 (u 0.5): scores 0.25, 0.5 + 0.15 = 0.65, 0.8 + 0.1 = 0.9 → {0, 1}
        # row 1 (u 0.25): scores 0.15, 0.6 + 0.075 = 0.675, 0.9 + 0.025 = 0.925 → {1}
        sets = prediction_sets(P, 0.65, "aps", U)
        np.testing.assert_array_equal(sets, [[True, True, False], [False, True, False]])

    def test_credible_set(self) -> None:
        np.testing.assert_array_equal(credible_sets(P, 0.75), [[True, True, False], [False, True, True]])
        np.testing.assert_array_equal(credible_sets(P, 0.5), [[True, False, False], [False, True, False]])
        np.testing.assert_array_equal(credible_sets(P, 0.95), [[True, True, True], [True, True, True]])

    def test_bounds(self) -> None:
        assert coverage_bounds(0.9, 99) == (0.9, pytest.approx(0.91))


def test_quantile_levels_between_ranks() -> None:
    scores = np.array([0.9, 0.1, 0.5, 0.3])
    # n = 4, level 0.6: ⌈5·0.6⌉ = 3 → 0.5; level 0.61: ⌈3.05⌉ = 4 → 0.9
    assert conformal_quantile(scores, 0.6) == 0.5
    assert conformal_quantile(scores, 0.61) == 0.9


def test_sets_nested_as_alpha_falls() -> None:
    rng = np.random.default_rng(3)
    cal = rng.dirichlet(np.ones(10) * 0.3, 500)
    labels = np.array([rng.choice(10, p=p) for p in cal])
    calibration = Calibration.of(cal, labels)
    test = rng.dirichlet(np.ones(10) * 0.3, 300)
    u = rng.random(300)
    for score in ("threshold", "aps"):
        previous = None
        for level in (0.5, 0.7, 0.8, 0.9, 0.95, 0.99):
            sets = calibration.sets(test, level, score, u)
            if previous is not None:
                assert np.all(sets >= previous), (score, level)  # a higher level only adds classes
            previous = sets
    previous = None
    for level in (0.5, 0.7, 0.9, 0.99):
        sets = credible_sets(test, level)
        if previous is not None:
            assert np.all(sets >= previous)
        previous = sets


def _simulated_coverage(score: str, reps: int, n_cal: int, n_test: int, temperature: float, seed: int) -> np.ndarray:
    """Coverage of each repetition: inputs whose true class law is q (Dirichlet), a posterior
    whose p̄ is q sharpened by ``temperature`` (miscalibrated on purpose), labels drawn from q."""
    rng = np.random.default_rng(seed)
    out = np.empty(reps)
    for r in range(reps):
        q = rng.dirichlet(np.ones(5), n_cal + n_test)
        labels = (rng.random((len(q), 1)) > np.cumsum(q, axis=1)).sum(1)
        p = q ** temperature
        p /= p.sum(1, keepdims=True)
        calibration = Calibration.of(p[:n_cal], labels[:n_cal], u=rng.random(n_cal))
        rows = {row.score: row for row in coverage_table(calibration, p[n_cal:], labels[n_cal:], 0.9,
                                                         u=rng.random(n_test))}
        out[r] = rows[score].coverage
    return out


@pytest.mark.parametrize("score", ["threshold", "aps"])
def test_coverage_by_simulation(score: str) -> None:
    """E[coverage] ∈ [1 − α, 1 − α + 1/(n + 1)] for exchangeable data, whatever the posterior:
    the mean over repetitions lies there within 4 standard errors."""
    n_cal = 99  # the upper bound 0.9 + 1/100 = 0.91
    cover = _simulated_coverage(score, reps=300, n_cal=n_cal, n_test=200, temperature=3.0, seed=7)
    se = cover.std(ddof=1) / math.sqrt(len(cover))
    low, high = coverage_bounds(0.9, n_cal)
    assert low - 4 * se <= cover.mean() <= high + 4 * se, (cover.mean(), se)
    assert se < 0.0025  # tight enough to tell a wrong quantile apart (below)


def test_naive_quantile_undercovers() -> None:
    """Negative control: the plain empirical 90 % quantile (no (n + 1) correction) on a small
    calibration set covers less than 1 − α by more than the simulation's error, and a
    sharpened posterior's credible set covers far less: the test above can fail."""
    rng = np.random.default_rng(11)
    reps, n_cal, n_test = 400, 10, 200  # naive rank ⌈10·0.9⌉ = 9: E[coverage] = 9/11; conformal ⌈11·0.9⌉ = 10
    naive, credible = [], []
    for _ in range(reps):
        q = rng.dirichlet(np.ones(5), n_cal + n_test)
        labels = (rng.random((len(q), 1)) > np.cumsum(q, axis=1)).sum(1)
        p = q ** 3.0
        p /= p.sum(1, keepdims=True)
        scores = conformal_scores(p[:n_cal], labels[:n_cal], "threshold")
        qhat = np.sort(scores)[math.ceil(n_cal * 0.9) - 1]  # ⌈n·0.9⌉-th: the naive rank
        sets = prediction_sets(p[n_cal:], qhat, "threshold")
        naive.append(sets[np.arange(n_test), labels[n_cal:]].mean())
        cred = credible_sets(p[n_cal:], 0.9)
        credible.append(cred[np.arange(n_test), labels[n_cal:]].mean())
    naive, credible = np.array(naive), np.array(credible)
    assert naive.mean() + 4 * naive.std(ddof=1) / math.sqrt(reps) < 0.9
    assert credible.mean() < 0.85


def test_calibration_mask_depends_on_each_image_alone() -> None:
    rng = np.random.default_rng(0)
    images = rng.random((400, 1, 4, 4)).astype(np.float32)
    prints = image_fingerprints(images)
    mask = calibration_mask(prints)
    assert 0.4 < mask.mean() < 0.6
    # a subset (the first 100) splits as the whole did; the same pixels split alike
    np.testing.assert_array_equal(calibration_mask(prints[:100]), mask[:100])
    np.testing.assert_array_equal(calibration_mask(image_fingerprints(images.copy())), mask)


def test_sets_in_words_says_where_they_differ() -> None:
    # a calibration whose q̂ at 90 % is 0.8: the threshold set holds classes with p̄ ≥ 0.2
    calibration = Calibration({"threshold": np.full(99, 0.8), "aps": np.full(99, 0.8)}, 99, {})
    mean = np.array([0.1, 0.0, 0.0, 0.0, 0.6, 0.0, 0.0, 0.05, 0.0, 0.25])
    words = sets_in_words(mean, [str(k) for k in range(10)], calibration, 0.9)
    assert words.conformal == "Conformal: could be 4 or 9, 90 % guaranteed"
    assert words.credible == "Credible: 4, 9 or 0 hold 90 % of the belief"
    assert words.disagreement == "They differ: the belief also needs 0"
    assert "not a probability for this one input" in words.tooltip
    same = sets_in_words(np.array([0.0] * 4 + [0.95] + [0.0] * 4 + [0.05]), [str(k) for k in range(10)],
                         calibration, 0.9)
    assert same.conformal == "Conformal: 4, 90 % guaranteed" and same.disagreement == ""
    # too unclear for the level: no class reaches p̄ ≥ 0.2
    unclear = sets_in_words(np.full(10, 0.1), [str(k) for k in range(10)], calibration, 0.9)
    assert unclear.conformal.startswith("Conformal: names no class at 90 %")
