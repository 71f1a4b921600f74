"""Corruption sweeps of one input and data-set evaluations at severities (core.analysis.corruption)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.analysis.corruption import (
    SWEEP_SEVERITIES,
    corrupt_dataset,
    corruption_evaluation,
    corruption_sweep,
    corruption_sweeps,
)
from core.analysis.evaluation import evaluate, load_posteriors, resolve_dataset
from core.analysis.evaluation_results import evaluation_tables
from core.engine.data.corruptions import corrupt
from core.engine.resources import resources_dir
from core.engine.runner import drain

FILES = ("paper_softmax_hmc", "paper_softmax_mc_dropout")


@pytest.fixture(scope="module")
def posteriors():
    return load_posteriors([resources_dir() / "models" / f"{name}.pt" for name in FILES])


@pytest.fixture(scope="module")
def sets(shared_data):
    data = resolve_dataset("mnist-test", shared_data).first(80)
    ood = resolve_dataset("notmnist", shared_data).first(80)
    return data, ood


def test_a_noise_sweep_visits_severities_0_to_5_and_starts_at_the_clean_prediction(posteriors, sets):
    data, _ = sets
    posterior = posteriors["paper_softmax_hmc"]  # fixed draws: a deterministic predictive
    sweep = corruption_sweep(posterior, data.x[0], "noise")
    assert np.array_equal(sweep.angles, np.arange(0, 5.01, 0.5))
    assert sweep.axis == "severity (noise σ = 0.08 per level)" and sweep.swept == "Gaussian noise"
    clean = posterior.predict_proba(data.x[:1]).double().mean(0)[0].numpy()
    assert np.allclose(sweep.mean[0], clean, atol=1e-6)
    # the image at the last severity is the corruption function's, judged as such
    noisy = torch.from_numpy(corrupt(data.x[0].numpy(), "noise", 5.0, 0))[None]
    assert np.allclose(sweep.mean[-1], posterior.predict_proba(noisy).double().mean(0)[0].numpy(), atol=1e-6)
    assert sweep.mean.shape == (len(SWEEP_SEVERITIES), 10) and sweep.total.shape == (len(SWEEP_SEVERITIES),)
    assert np.allclose(sweep.total, sweep.aleatoric + sweep.epistemic, atol=1e-9)


def test_an_occlusion_sweep_moves_the_patch_across_and_says_so(posteriors, sets):
    data, _ = sets
    sweep = corruption_sweep(posteriors["paper_softmax_hmc"], data.x[0], "occlusion", severity=3)
    assert sweep.angles[0] == 0 and sweep.angles[-1] == 28 and np.all(np.diff(sweep.angles) > 0)
    assert sweep.axis == "centre of the 8×8 px patch (pixels from the left)"  # round(3 · 28 / 10)
    assert sweep.swept == "occlusion" and sweep.parameter == "patch_centre_px"
    with pytest.raises(ValueError, match="severity above 0"):
        corruption_sweep(posteriors["paper_softmax_hmc"], data.x[0], "occlusion", severity=0)


def test_sweeps_of_several_posteriors_report_progress_and_return_each(posteriors, sets):
    data, _ = sets
    items = [(name, p, 10) for name, p in posteriors.items()]
    run = corruption_sweeps(items, data.x[0, 0].numpy(), "blur")
    records = []
    try:
        while True:
            records.append(next(run))
    except StopIteration as stop:
        sweeps = stop.value
    assert [r.step for r in records] == [0, 1, 2] and set(sweeps) == set(posteriors)
    assert sweeps["paper_softmax_mc_dropout"].mean.shape == (len(SWEEP_SEVERITIES), 10)


def test_an_unknown_corruption_is_refused_before_any_work(posteriors, sets):
    data, _ = sets
    with pytest.raises(ValueError, match="unknown corruption"):
        next(corruption_sweeps([("a", posteriors["paper_softmax_hmc"], 5)], data.x[0], "fog"))


def test_corrupting_a_set_at_severity_zero_keeps_every_image(sets):
    data, _ = sets
    same = corrupt_dataset(data, "noise", 0, seed=4)
    assert torch.equal(same.x, data.x) and torch.equal(same.y, data.y)
    assert same.source["corruption"] == {"name": "noise", "severity": 0.0, "seed": 4}
    noisy = corrupt_dataset(data, "noise", 2, seed=4)
    assert not torch.equal(noisy.x, data.x)
    # each image its own draw: two identical images get different noise
    twice = type(data)(torch.cat([data.x[:1], data.x[:1]]), data.y[:2], data.name)
    pair = corrupt_dataset(twice, "noise", 2, seed=4).x
    assert not torch.equal(pair[0], pair[1])


def test_severity_zero_reproduces_the_clean_evaluation_exactly(posteriors, sets):
    data, ood = sets
    clean = evaluation_tables(drain(evaluate(posteriors, data, ood, num_samples=20, seed=3)))
    result = drain(corruption_evaluation(posteriors, data, ood, "noise", (0, 5), num_samples=20, seed=3))
    at_zero = {row["posterior"]: row for row in result.rows if row["severity"] == 0}
    assert set(at_zero) == set(posteriors)  # every column
    for row in clean["summary"]:
        mine = at_zero[row["posterior"]]
        for key in ("accuracy", "nll", "brier", "ece"):
            assert mine[key] == row[key], key
    for row in clean["ood_detection"]:
        assert at_zero[row["posterior"]][f"auroc_{row['score']}"] == row["auroc"]


def test_accuracy_falls_with_noise_on_a_real_posterior(posteriors, sets):
    data, ood = sets
    result = drain(corruption_evaluation(posteriors, data, ood, "noise", (0, 2, 5), num_samples=20))
    for name in posteriors:
        acc = [row["accuracy"] for row in result.rows if row["posterior"] == name]
        assert acc[0] >= acc[1] >= acc[2] and acc[2] < acc[0] - 0.2, (name, acc)


def test_a_severity_off_the_scale_is_refused(posteriors, sets):
    data, ood = sets
    with pytest.raises(ValueError, match="between 0 and 5"):
        next(corruption_evaluation(posteriors, data, ood, "noise", (0, 7)))


def test_a_new_noise_draw_changes_the_swept_images_not_the_models_draws(posteriors, sets):
    data, _ = sets
    items = [("k", posteriors["paper_softmax_mc_dropout"], 20)]  # dropout: its own draws follow `seed`
    first = drain(corruption_sweeps(items, data.x[0], "noise", seed=5, corruption_seed=0))["k"]
    again = drain(corruption_sweeps(items, data.x[0], "noise", seed=5, corruption_seed=0))["k"]
    other = drain(corruption_sweeps(items, data.x[0], "noise", seed=5, corruption_seed=1))["k"]
    assert np.array_equal(first.mean, again.mean)  # a seed gives the same sweep every time
    assert np.array_equal(other.mean[0], first.mean[0])  # severity 0: the clean image, the same masks
    assert not np.allclose(other.mean[1:], first.mean[1:])  # above it another noise


def test_severity_steps_and_the_lines_drawn_against_them(posteriors, sets):
    from core.analysis.corruption import severity_lines, severity_steps

    assert severity_steps(3.0, True) == (0.0, 1.0, 2.0, 3.0)
    assert severity_steps(2.5, True) == (0.0, 1.0, 2.0, 2.5)
    assert severity_steps(0.0, True) == (0.0,) and severity_steps(2.5, False) == (2.5,)
    with pytest.raises(ValueError, match="between 0 and 5"):
        severity_steps(6.0, True)
    data, ood = sets
    result = drain(corruption_evaluation(posteriors, data.first(20), ood.first(20),
                                         "blur", (0, 4), num_samples=5))
    lines = severity_lines(result, "accuracy")
    assert list(lines) == list(posteriors)
    for name, values in lines.items():
        rows = [row for row in result.rows if row["posterior"] == name]
        assert values == [row["accuracy"] for row in rows]
    assert severity_lines(result, "no_such_number") == {name: [None, None] for name in posteriors}


def test_the_progress_counts_every_severity_with_one_rate(posteriors, sets):
    data, ood = sets
    records = []
    run = corruption_evaluation(posteriors, data.first(10), ood.first(10), "contrast", (0, 2, 4), num_samples=5)
    try:
        while True:
            records.append(next(run))
    except StopIteration:
        pass
    total = 3 * 2 * 20  # severities × posteriors × (test + OOD images)
    assert {r.total for r in records} == {total} and records[-1].step == total
    steps = [r.step for r in records]
    assert steps == sorted(steps)
    assert all(r.values["images_total"] == total for r in records)
    assert [r.values["severity"] for r in records][-1] == 4.0
    timed = [r for r in records if "seconds_left" in r.values]
    assert timed and timed[-1].values["seconds_left"] == pytest.approx(0.0, abs=1e-9)


def test_the_report_has_the_same_table(posteriors, sets):
    from core.analysis.corruption import severity_lines
    from core.outputs.corruption import corruption_lines
    from core.outputs.report import corruption_part

    data, ood = sets
    result = drain(corruption_evaluation(posteriors, data.first(20), ood.first(20), "noise", (0, 3), num_samples=5))
    page = "\n".join(corruption_part(result))
    printed = corruption_lines(result)
    accuracy_rows = printed[printed.index("accuracy %") + 2:]  # after the severities' header
    assert "When the images get worse: gaussian noise" in page
    for name, values in severity_lines(result, "accuracy").items():
        assert f'<td class="text">{name}</td><td>{100 * values[0]:.4f}</td><td>{100 * values[1]:.4f}</td>' in page
        assert any(line.split()[0] == name and line.endswith(f"{100 * values[0]:7.2f} {100 * values[1]:7.2f}")
                   for line in accuracy_rows)
    for name, values in severity_lines(result, "auroc_epistemic").items():
        assert f'<td class="text">{name}</td><td>{values[0]:.4f}</td><td>{values[1]:.4f}</td>' in page
    assert corruption_part(None) == []
