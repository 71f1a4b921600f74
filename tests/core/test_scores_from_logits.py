"""Stored draws are scored from their logits: the softmax taken in float64 and each draw's
entropy as log Z − Σ_k p_k z_k, one logarithm a draw instead of one a class.

The reference is exact: mpmath at 50 digits on the same float32 logits (every float32 is a
float64 exactly, so the logits are the same numbers in both). The old path, the float32
softmax scored by p log p, is not within 1e-12 of it (its probabilities carry float32
rounding), and the test says so, so that it fails on the old code rather than agreeing with it.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

from core.analysis.scoring import SCORES, PartScorer
from core.analysis.uncertainty import (
    expected_entropy,
    mutual_information,
    predictive_entropy,
    top_two_overlap,
    variance_decomposition,
)

mpmath.mp.dps = 50

#: What exact means here: float64 rounding of sums of a few hundred terms, not float32's 6e-8.
EXACT = 1e-13


def _exact(z: torch.Tensor, chains: torch.Tensor) -> dict[str, np.ndarray]:
    """p̄, the entropies, the variance form and each chain's arg-max of logits z (S, n, K), in
    mpmath: softmax as e^z / Σ e^z with no shift, p log p summed directly (0 log 0 = 0)."""
    s, n, k = z.shape
    out: dict[str, list] = {key: [] for key in ("mean", "total", "aleatoric", "epistemic", "epistemic_variance")}
    out["chains"] = []
    for j in range(n):
        draws = []
        for i in range(s):
            logits = [mpmath.mpf(float(v)) for v in z[i, j]]
            exps = [mpmath.exp(v) for v in logits]
            norm = mpmath.fsum(exps)
            draws.append([e / norm for e in exps])
        mean = [mpmath.fsum(p[c] for p in draws) / s for c in range(k)]

        def entropy(p: list) -> mpmath.mpf:
            return -mpmath.fsum(x * mpmath.log(x) for x in p if x > 0)

        total = entropy(mean)
        aleatoric = mpmath.fsum(entropy(p) for p in draws) / s
        variance = mpmath.fsum(mpmath.fsum((p[c] - mean[c]) ** 2 for p in draws) / s for c in range(k))
        out["mean"].append([float(m) for m in mean])
        out["total"].append(float(total))
        out["aleatoric"].append(float(aleatoric))
        out["epistemic"].append(float(max(total - aleatoric, 0)))
        out["epistemic_variance"].append(float(variance))
        own = []
        for c in torch.unique(chains).tolist():
            rows = [draws[i] for i in range(s) if int(chains[i]) == c]
            sums = [mpmath.fsum(p[m] for p in rows) for m in range(k)]
            own.append(max(range(k), key=lambda m, sums=sums: sums[m]))
        out["chains"].append(own)
    return {key: np.array(v, dtype=np.float64 if key != "chains" else np.int64) for key, v in out.items()}


def _logits(case: str, s: int, n: int, k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(11)
    z = torch.randn(s, n, k, generator=g)
    if case == "moderate":  # the fast path: no shift
        return (3 * z).float()
    if case == "confident":  # one class far ahead: entropies of 1e-10 and less
        z[..., 0] += 25
        return (2 * z).float()
    if case == "large":  # logits of several hundred: exponentiated as they are they would overflow
        return (40 * z + 300).float()
    if case == "very negative":  # every class far below 0: as they are, Z would underflow
        return (5 * z - 720).float()
    if case == "minus infinity":  # a class that cannot be (a masked logit)
        z = 3 * z
        z[:, :, 2] = -torch.inf
        return z.float()
    raise ValueError(case)


@pytest.mark.parametrize("case", ["moderate", "confident", "large", "very negative", "minus infinity"])
@pytest.mark.parametrize("chains", ["three chains", "one chain", "members"])
def test_scores_of_logits_are_exact(case, chains):
    s, n, k = 12, 7, 5
    ids = {"three chains": torch.arange(3).repeat_interleave(4), "one chain": torch.zeros(s, dtype=torch.long),
           "members": torch.arange(s)}[chains]
    z = _logits(case, s, n, k)
    expected = _exact(z, ids)
    mean, scores, chain_preds = PartScorer(ids, k, n).score(z, logits=True)
    np.testing.assert_allclose(mean.numpy(), expected["mean"], rtol=0, atol=EXACT)
    for row, key in zip(scores, SCORES, strict=True):
        if key in expected:
            np.testing.assert_allclose(row.numpy(), expected[key], rtol=0, atol=EXACT, err_msg=key)
    np.testing.assert_allclose(scores[SCORES.index("one_minus_max_prob")].numpy(),
                               1 - expected["mean"].max(1), rtol=0, atol=EXACT)
    assert torch.equal(chain_preds, torch.as_tensor(expected["chains"]).T)


def test_the_float32_probabilities_were_not_exact():
    """The old path (float32 softmax, then p log p in float64) misses the exact entropies by
    far more than 1e-12: the reason the logits path exists besides its speed."""
    s, n, k = 12, 7, 5
    ids = torch.zeros(s, dtype=torch.long)
    z = _logits("moderate", s, n, k)
    expected = _exact(z, ids)
    _, old, _ = PartScorer(ids, k, n).score(torch.softmax(z, -1))
    _, new, _ = PartScorer(ids, k, n).score(z, logits=True)
    aleatoric = SCORES.index("aleatoric")
    assert np.abs(old[aleatoric].numpy() - expected["aleatoric"]).max() > 1e-9
    assert np.abs(new[aleatoric].numpy() - expected["aleatoric"]).max() < EXACT


@pytest.mark.parametrize("case", ["moderate", "confident", "large", "minus infinity"])
def test_one_draw_from_logits(case):
    """MAP: aleatoric = total (the same bits), the mutual information and variance exactly 0."""
    z = _logits(case, 1, 9, 5)
    expected = _exact(z, torch.zeros(1, dtype=torch.long))
    mean, scores, _ = PartScorer(torch.zeros(1, dtype=torch.long), 5, 9).score(z, logits=True)
    np.testing.assert_allclose(mean.numpy(), expected["mean"], rtol=0, atol=EXACT)
    np.testing.assert_allclose(scores[0].numpy(), expected["total"], rtol=0, atol=EXACT)
    assert torch.equal(scores[0], scores[1])
    assert (scores[2] == 0).all() and (scores[3] == 0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_logits_that_are_not_numbers_are_refused_not_scored(bad):
    """A NaN or +∞ logit has no softmax (torch's float32 softmax gives NaN there too): the
    part is not scored, for the caller to word, never scored into a NaN metric."""
    z = _logits("moderate", 6, 4, 3)
    z[2, 1, 0] = bad
    assert PartScorer(torch.zeros(6, dtype=torch.long), 3, 4).score(z, logits=True) is None


def test_a_part_of_fewer_images_than_the_buffers_hold():
    """The last part of a run is shorter than the scorer's buffers: the same numbers as alone."""
    z = _logits("moderate", 10, 9, 4)
    ids = torch.arange(2).repeat_interleave(5)
    scorer = PartScorer(ids, 4, 9)
    scorer.score(z, logits=True)
    short = scorer.score(z[:, :4], logits=True)
    alone = PartScorer(ids, 4, 4).score(z[:, :4], logits=True)
    for a, b in zip(short, alone, strict=True):
        assert torch.equal(a, b)


def test_logits_laid_out_image_by_image_or_draw_by_draw_score_the_same():
    """Stored draws' logits come laid out image by image (n, S, K in memory); any layout gives
    the same bits."""
    z = _logits("moderate", 8, 6, 5)
    image_major = z.transpose(0, 1).contiguous().transpose(0, 1)
    ids = torch.arange(2).repeat_interleave(4)
    for a, b in zip(PartScorer(ids, 5, 6).score(z, logits=True), PartScorer(ids, 5, 6).score(image_major, logits=True),
                    strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("s", [1, 5, 30, 100])
def test_the_top_two_overlap_is_the_uncertainty_modules_bit_for_bit(s):
    """The scorer roots the overlap's empty bins apart (torch's float32 square root of 0 is
    slow) and adds each draw's histogram cells from a tensor made once: every image's overlap
    is still top_two_overlap's, the same bits, from the logits and from the probabilities, on
    confident draws (most of the two classes' bins empty) and on spread ones."""
    ids = torch.arange(s)  # an ensemble's members: one draw a chain
    overlap = SCORES.index("top_two_overlap")
    seen = torch.zeros(0, dtype=torch.float64)
    for case in ("confident", "moderate"):
        z = _logits(case, s, 300, 6)
        proba = torch.softmax(z.double(), -1)
        expected = top_two_overlap(proba).double()
        _, from_logits, _ = PartScorer(ids, 6, 300).score(z, logits=True)
        _, from_proba, _ = PartScorer(ids, 6, 300).score(proba)
        assert torch.equal(from_logits[overlap], expected)
        assert torch.equal(from_proba[overlap], expected)
        seen = torch.cat([seen, expected])
    assert (seen == 0).any()  # disjoint histograms: every product of the two empty
    if s == 1:
        assert (seen == 1).any()  # one draw: the two classes in one bin
    else:
        assert ((seen > 0) & (seen < 1)).any()  # partly overlapping histograms


def _extreme_logits(s: int, n: int, k: int, shifted: bool) -> torch.Tensor:
    """Logits (S, n, K) whose first rows hold the extremes: every draw certain (p = 1 and 0,
    −∞ logits), every class tied (p = 1/K), two classes tied at the top and the rest −∞
    (p = 1/2, on a bin's edge), logits near ±60 (Z near e^±62, the products of 8 of them near
    e^±500), draws that all agree; with ``shifted`` one image's logits of +300, so that the
    part is exponentiated less each draw's largest."""
    g = torch.Generator().manual_seed(s)
    z = 4 * torch.randn(s, n, k, generator=g)
    z[:, 0] = -torch.inf
    z[:, 0, 3] = 2.0
    z[:, 1] = 2.5
    z[:, 2] = -torch.inf
    z[:, 2, 1] = z[:, 2, 5] = -1.0
    z[:, 3] = 60 + 0.5 * torch.randn(s, k, generator=g)
    z[:, 4] = -60 + 0.5 * torch.randn(s, k, generator=g)
    z[:, 5] = z[:1, 5]
    if shifted:
        z[:, 6] = 300 + 4 * torch.randn(s, k, generator=g)
    return z.float()


@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("s", [1, 5, 6, 8, 400])
@pytest.mark.parametrize("chains", ["one chain", "four chains", "interleaved", "members"])
def test_scores_of_logits_are_the_uncertainty_modules_at_the_extremes(chains, s, shifted):
    """The logits' path (Σ_s log Z_s from products of up to 8 draws' Z, the bins in int32)
    against the uncertainty module's definitions on the float64 softmax of the same logits:
    each score within 1e-12, the overlap the same bits, p̄ within 1e-12, each chain's
    prediction the arg-max of its own mean (ties: the first class), and the entropies of draws
    that are all certain exactly 0. S = 1, 5, 6, 8 and 400 draws fold
    their normalisers' products 0, 0, 1, 3 and 3 times."""
    k, n = 8, 40
    ids = {"one chain": torch.zeros(s, dtype=torch.long), "four chains": torch.arange(s) * 4 // s,
           "interleaved": torch.arange(s) % 4, "members": torch.arange(s)}[chains]
    z = _extreme_logits(s, n, k, shifted)
    mean, scores, chain_preds = PartScorer(ids, k, n).score(z, logits=True)
    d = torch.softmax(z.double(), -1)
    assert d[0, 0, 3] == 1 and d[0, 2, 1] == 0.5  # the extremes are what they say
    np.testing.assert_allclose(mean.numpy(), d.mean(0).numpy(), rtol=0, atol=1e-12)
    expected = {"total": predictive_entropy(d), "aleatoric": expected_entropy(d),
                "epistemic": mutual_information(d), "epistemic_variance": variance_decomposition(d).epistemic_sum,
                "one_minus_max_prob": 1 - d.mean(0).max(-1).values}
    for row, key in zip(scores, SCORES, strict=True):
        if key in expected:
            np.testing.assert_allclose(row.numpy(), expected[key].numpy(), rtol=0, atol=1e-12, err_msg=key)
    # every draw certain of one class: 0 exactly, but the variance, whose Σ p² is a squared
    # norm, sqrt(S)², a few 1e-16 from S
    for key in ("total", "aleatoric", "epistemic", "one_minus_max_prob"):
        assert scores[SCORES.index(key)][0] == 0.0, key
    assert 0 <= scores[SCORES.index("epistemic_variance")][0] < 1e-15
    assert torch.equal(scores[SCORES.index("top_two_overlap")], top_two_overlap(d).double())
    assert scores[SCORES.index("top_two_overlap")][2] == 1.0  # two classes at 1/2 in every draw: one bin
    if s > 1:
        assert scores[SCORES.index("epistemic")][5] < 1e-14  # draws that agree
    own = torch.stack([d[ids == c].mean(0).argmax(-1) for c in torch.unique(ids)])
    assert torch.equal(chain_preds, own)
