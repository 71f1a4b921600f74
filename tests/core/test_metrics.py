"""Data-set metrics against hand-worked values, brute force and known limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.analysis.metrics import (
    accuracy,
    auroc,
    average_precision,
    box_statistics,
    brier_score,
    classwise_calibration_error,
    confusion_matrix,
    drop_rate_sensitivity,
    expected_calibration_error,
    negative_log_likelihood,
    ood_detection,
    per_class_error,
    rejection_curve,
    reliability_diagram,
    rotation_angles,
    rotation_sweep,
    score_edges,
    score_histograms,
    soft_confusion_matrix,
)
from core.analysis.scoring import SCORES
from core.analysis.streaming import chain_ids, predict_dataset
from core.engine.inference.base import Dataset, SampledPosterior
from core.engine.models import ArchSpec
from core.engine.runner import drain


def test_accuracy_nll_brier_by_hand():
    proba = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.5, 0.25, 0.25]])
    labels = np.array([0, 2, 1])
    assert accuracy(proba, labels) == pytest.approx(1 / 3)
    assert negative_log_likelihood(proba, labels) == pytest.approx(-(math.log(0.7) + math.log(0.1) + math.log(0.25)) / 3)
    brier = ((0.3**2 + 0.2**2 + 0.1**2) + (0.1**2 + 0.8**2 + 0.9**2) + (0.5**2 + 0.75**2 + 0.25**2)) / 3
    assert brier_score(proba, labels) == pytest.approx(brier)
    with pytest.raises(ValueError):
        accuracy(proba, np.array([0, 3, 1]))


def test_ece_of_calibrated_predictor_is_near_zero():
    rng = np.random.default_rng(0)
    n, k = 200_000, 4
    proba = rng.dirichlet(np.full(k, 0.5), size=n)
    labels = (rng.random(n)[:, None] > np.cumsum(proba, 1)).sum(1)  # y ~ Categorical(p)
    assert expected_calibration_error(proba, labels) < 0.01
    mean, per_class = classwise_calibration_error(proba, labels)
    assert per_class.shape == (k,) and mean < 0.01


def test_ece_of_overconfident_predictor():
    # always 100% confident, right 70% of the time → |0.7 − 1| = 0.3
    proba = np.tile([1.0, 0.0], (10, 1))
    labels = np.array([0] * 7 + [1] * 3)
    assert expected_calibration_error(proba, labels) == pytest.approx(0.3)
    diagram = reliability_diagram(proba, labels)
    assert len(diagram.edges) == 16 and diagram.counts[-1] == 10 and diagram.counts[:-1].sum() == 0
    assert diagram.accuracy[-1] == pytest.approx(0.7) and np.isnan(diagram.accuracy[0])


def test_reliability_two_bins_by_hand():
    # confidences 0.55 (right), 0.6 (wrong), 0.9 (right) with 2 bins: (0, .5], (.5, 1]
    proba = np.array([[0.55, 0.45], [0.6, 0.4], [0.1, 0.9]])
    labels = np.array([0, 1, 1])
    d = reliability_diagram(proba, labels, bins=2)
    assert d.counts.tolist() == [0, 3]
    assert d.confidence[1] == pytest.approx((0.55 + 0.6 + 0.9) / 3)
    assert d.accuracy[1] == pytest.approx(2 / 3)
    assert d.ece == pytest.approx(abs(2 / 3 - 2.05 / 3))


def test_confusion_matrices_by_hand():
    proba = np.array([[0.8, 0.2], [0.6, 0.4], [0.3, 0.7], [0.1, 0.9], [0.2, 0.8]])
    labels = np.array([0, 0, 0, 1, 1])
    hard = confusion_matrix(proba.argmax(1), labels, 2)
    assert hard.tolist() == [[2, 1], [0, 2]]
    soft = soft_confusion_matrix(proba, labels)
    assert soft[0] == pytest.approx([1.7 / 3, 1.3 / 3])
    assert soft[1] == pytest.approx([0.15, 0.85])
    empty = soft_confusion_matrix(np.array([[0.5, 0.3, 0.2]]), np.array([0]))
    assert np.isnan(empty[1]).all() and empty[0].sum() == pytest.approx(1)


def test_per_class_error_and_box_statistics():
    labels = np.array([0, 0, 1, 1, 1, 2])
    chains = np.array([[0, 1, 1, 1, 1, 2], [0, 0, 0, 0, 1, 0]])
    err = per_class_error(chains, labels, 4)
    assert err[0, :3].tolist() == [0.5, 0.0, 0.0]
    assert err[1, :3] == pytest.approx([0.0, 2 / 3, 1.0])
    assert np.isnan(err[:, 3]).all()
    box = box_statistics(np.array([[1.0], [2.0], [3.0], [4.0], [5.0]]))
    assert box["median"][0] == 3.0 and box["q1"][0] == 2.0 and box["q3"][0] == 4.0
    assert box["min"][0] == 1.0 and box["max"][0] == 5.0


def test_rejection_curve_by_hand():
    correct = np.array([1, 0, 1, 1, 0])
    scores = np.array([0.1, 0.9, 0.2, 0.3, 0.8])
    rates, acc = rejection_curve(correct, scores, [0.0, 0.2, 0.4, 0.6, 1.0])
    assert acc[:4] == pytest.approx([0.6, 0.75, 1.0, 1.0])
    assert np.isnan(acc[4])
    # an uninformative (constant) score gains nothing, whatever the input order
    _, flat = rejection_curve(np.array([0, 0, 1, 1, 1, 1, 1, 1, 1, 1]), np.zeros(10), [0.0, 0.3, 0.9])
    assert flat == pytest.approx([0.8, 0.8, 0.8])
    # ties within a group: scores (3, 2, 2, 1) with correct (0, 1, 0, 1); referring 2 of 4
    # removes the 3 and one of the two 2s at random → kept correct 1 + ½ out of 2
    _, acc = rejection_curve(np.array([0, 1, 0, 1]), np.array([3.0, 2.0, 2.0, 1.0]), [0.5])
    assert acc == pytest.approx([0.75])


def _brute_auroc(neg, pos):
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def _brute_average_precision(neg, pos):
    scores = np.concatenate([pos, neg])
    positive = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    total = 0.0
    for t in pos:  # precision at each positive's threshold (ties enter together)
        above = scores >= t
        total += positive[above].sum() / above.sum()
    return total / len(pos)


def test_auroc_limits_and_brute_force():
    rng = np.random.default_rng(1)
    assert auroc(np.array([0.1, 0.2, 0.3]), np.array([0.5, 0.9])) == 1.0
    assert auroc(np.array([0.5, 0.9]), np.array([0.1, 0.2])) == 0.0
    same = auroc(rng.normal(size=20_000), rng.normal(size=20_000))
    assert same == pytest.approx(0.5, abs=0.01)
    neg, pos = rng.integers(0, 5, 60).astype(float), rng.integers(1, 7, 45).astype(float)  # many ties
    assert auroc(neg, pos) == pytest.approx(_brute_auroc(neg, pos))
    assert average_precision(neg, pos) == pytest.approx(_brute_average_precision(neg, pos))
    assert average_precision(np.array([0.0, 0.1]), np.array([0.5, 0.6])) == 1.0
    # AP of a random score ≈ the positive fraction
    ap = average_precision(rng.random(30_000), rng.random(10_000))
    assert ap == pytest.approx(0.25, abs=0.01)


def test_ood_detection_and_histograms():
    in_scores = {"total": np.array([0.1, 0.2, 0.3]), "epistemic": np.array([0.5, 0.5, 0.5])}
    ood_scores = {"total": np.array([0.9, 1.0]), "epistemic": np.array([0.5, 0.5])}
    results = {r.score: r for r in ood_detection(in_scores, ood_scores)}
    assert results["total"].auroc == 1.0 and results["total"].aupr_out == 1.0
    assert results["total"].aupr_in == 1.0
    assert results["epistemic"].auroc is None  # the same score for every image: n/a, not 0.5
    frac, edges = score_histograms(np.array([0.0, math.log(10), 5.0]), "total", 10, bins=5)
    assert edges[-1] == pytest.approx(math.log(10)) and frac.sum() == pytest.approx(1.0)
    assert frac[0] == pytest.approx(1 / 3) and frac[-1] == pytest.approx(2 / 3)
    # shared edges shrink to the largest value seen, never beyond the theoretical range
    edges = score_edges("epistemic", 10, [np.array([0.0, 0.05]), np.array([0.1])], bins=4)
    assert edges[0] == 0.0 and edges[-1] == pytest.approx(0.1)
    assert score_edges("epistemic", 10, [np.zeros(3)])[-1] == pytest.approx(math.log(10))
    frac, _ = score_histograms(np.array([0.1, 0.0]), "epistemic", 10, edges=edges)
    assert frac.tolist() == [0.5, 0.0, 0.0, 0.5]


def test_drop_rate_sensitivity_summary():
    result = drop_rate_sensitivity({0.5: [0.9, 0.92, 0.94], 0.1: [0.8]})
    assert result.rates.tolist() == [0.1, 0.5]
    assert result.mean == pytest.approx([0.8, 0.92])
    assert result.std == pytest.approx([0.0, 0.02])
    rows = result.rows()
    assert rows[1]["chains"] == 3 and rows[1]["min"] == 0.9 and rows[1]["max"] == 0.94


# ----------------------------------------------------------------------------- posteriors


def _chain_posterior(num_chains: int = 3, num_draws: int = 2) -> SampledPosterior:
    """Softmax regression on 4×4 images; chain c always predicts class c (a huge bias)."""
    arch = ArchSpec("softmax", num_classes=4, image_size=4)
    weight = torch.zeros(num_chains, num_draws, 4, 16)
    bias = torch.zeros(num_chains, num_draws, 4)
    for c in range(num_chains):
        bias[c, :, c] = 20.0
    weight[:, -1, 0, 0] = 1.0  # the draws within a chain differ a little
    return SampledPosterior("test", arch, {}, 0, "synthetic", {"linear.weight": weight, "linear.bias": bias})


def test_chain_ids_follow_the_leading_dimension():
    posterior = _chain_posterior(3, 2)
    assert chain_ids(posterior).tolist() == [0, 0, 1, 1, 2, 2]
    assert chain_ids(posterior, 3).tolist() == [0, 1, 2]  # samples 0, 2(.5→2), 5


def test_predict_dataset_streams_and_tracks_chains():
    posterior = _chain_posterior(3, 2)
    g = torch.Generator().manual_seed(0)
    data = Dataset(torch.rand(10, 1, 4, 4, generator=g), torch.tensor([0, 1, 2, 3] * 2 + [0, 1]))
    result = drain(predict_dataset(posterior, data, batch_size=3))
    assert result.chain_predictions.shape == (3, 10)
    for c in range(3):
        assert (result.chain_predictions[c] == c).all()
    full = posterior.predict_proba(data.x).double()
    assert np.allclose(result.mean_proba, full.mean(0).numpy())
    assert set(result.scores) == set(SCORES)
    # three chains that each put ≈ all mass on their own class: MI ≈ ln 3, aleatoric ≈ 0
    assert np.allclose(result.scores["epistemic"], math.log(3), atol=1e-3)
    assert np.allclose(result.scores["aleatoric"], 0.0, atol=1e-3)
    err = per_class_error(result.chain_predictions, result.labels, 4)
    assert err[0].tolist() == [0.0, 1.0, 1.0, 1.0]


def test_predict_dataset_reports_progress_per_step(monkeypatch):
    """A step is as many images as STEP_BYTES holds; each step reports the images done."""
    import core.analysis.streaming as streaming

    posterior = _chain_posterior(1, 1)
    data = Dataset(torch.rand(7, 1, 4, 4), torch.zeros(7, dtype=torch.long))
    records, result = _records(predict_dataset(posterior, data, batch_size=2))
    assert [r.step for r in records] == [1] and records[0].values["examples"] == 7.0  # 7 tiny images: one step
    per_image = streaming._image_bytes(posterior, 1, True)
    monkeypatch.setattr(streaming, "STEP_BYTES", int(2 * per_image))  # two images a step
    records, result = _records(predict_dataset(posterior, data, batch_size=2))
    assert [r.step for r in records] == [1, 2, 3, 4] and records[-1].total == 4
    assert [r.values["examples"] for r in records] == [2.0, 4.0, 6.0, 7.0]
    assert result.num_chains == 1 and result.mean_proba.shape == (7, 4)


def _records(gen):
    records = []
    try:
        while True:
            records.append(next(gen))
    except StopIteration as stop:
        return records, stop.value


def test_rotation_sweep_angles_and_bands():
    assert rotation_angles(180, 45).tolist() == [0, 45, 90, 135, 180]
    posterior = _chain_posterior(3, 2)
    image = torch.zeros(4, 4)
    image[0, 0] = 1.0  # only the (0, 0) pixel feeds class 0's second draw
    sweep = rotation_sweep(posterior, image, [0, 90, 180])
    assert sweep.median.shape == (3, 4) and sweep.total.shape == (3,)
    assert np.all(sweep.lower <= sweep.median + 1e-12) and np.all(sweep.median <= sweep.upper + 1e-12)
    direct = posterior.predict_proba(image.reshape(1, 1, 4, 4)).double().mean(0)[0].numpy()
    assert np.allclose(sweep.mean[0], direct)
    assert np.allclose(sweep.total, sweep.aleatoric + sweep.epistemic)


def test_chainless_posterior_with_its_own_sample_count_is_one_chain():
    from core.engine.inference.base import Posterior

    class Seven(Posterior):
        """Returns 7 samples whatever is asked: class 0 in four of them, class 1 in three."""

        kind = "seven-test"

        def predict_proba(self, x, num_samples=None, generator=None):
            p = torch.zeros(7, len(x), 2)
            p[:4, :, 0] = 1.0
            p[4:, :, 1] = 1.0
            return p

        def state_tensors(self):
            return {}

        @classmethod
        def from_state(cls, *args):
            raise NotImplementedError

    posterior = Seven("test", ArchSpec("softmax", num_classes=2, image_size=4), {}, 0, "x")
    data = Dataset(torch.zeros(5, 1, 4, 4), torch.zeros(5, dtype=torch.long))
    result = drain(predict_dataset(posterior, data))
    assert result.num_samples == 7 and result.num_chains == 1
    assert np.allclose(result.mean_proba, [[4 / 7, 3 / 7]] * 5)
    # two one-hot groups: MI = H(4/7, 3/7)
    h = -(4 / 7) * math.log(4 / 7) - (3 / 7) * math.log(3 / 7)
    assert np.allclose(result.scores["epistemic"], h)


def test_box_statistics_of_a_class_without_values_is_nan_without_a_warning():
    import warnings

    values = np.array([[0.1, np.nan], [0.3, np.nan], [0.2, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        box = box_statistics(values)
    assert box["median"][0] == pytest.approx(0.2) and box["mean"][0] == pytest.approx(0.2)
    assert np.isnan(box["median"][1]) and np.isnan(box["mean"][1]) and np.isnan(box["q1"][1])


def test_a_score_that_is_the_same_for_every_image_has_no_auroc():
    """A one-draw posterior's mutual information is 0 for every image by construction: its AUROC
    is n/a (None), not 0.5, which would read as a measured failure to detect."""
    rng = np.random.default_rng(0)
    results = {r.score: r for r in ood_detection({"mi": np.zeros(50), "total": rng.random(50)},
                                                 {"mi": np.zeros(40), "total": rng.random(40) + 0.5})}
    assert results["mi"].auroc is None and results["mi"].aupr_out is None and results["mi"].aupr_in is None
    assert 0.5 < results["total"].auroc <= 1.0
