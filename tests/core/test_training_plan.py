"""Training-time forecasts: planned steps agree with the fits' own counts, the per-step cost
is separated from start-up costs, the training-set size is read from the IDX header."""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import core.engine.training_plan as plan
from core.engine.data.idx import write_idx
from core.engine.inference import METHODS, Method, get_method
from core.engine.inference.base import Dataset, ProgressRecord
from core.engine.models import ArchSpec
from core.engine.training_plan import (
    count_training_images,
    duration_in_words,
    estimate_duration,
    planned_steps,
)


def drain(gen):
    records = []
    try:
        while True:
            records.append(next(gen))
    except StopIteration as stop:
        return stop.value, records


def tiny_data(n: int = 50) -> Dataset:
    g = torch.Generator().manual_seed(0)
    return Dataset(torch.rand((n, 1, 28, 28), generator=g), torch.randint(0, 10, (n,), generator=g), "tiny")


@pytest.mark.parametrize(
    ("method", "settings"),
    [
        ("map", {"epochs": 2, "batch_size": 16, "optimiser": "adam"}),
        ("ensemble", {"num_members": 2, "epochs": 1, "batch_size": 20}),
        ("sghmc", {"num_chains": 2, "epochs": 2, "burn_in_epochs": 1, "thin": 1, "batch_size": 16}),
        ("mfvi", {"epochs": 2, "batch_size": 16}),
        ("hmc", {"num_chains": 1, "num_warmup": 3, "num_samples": 2, "num_leapfrog": 2}),
    ],
)
def test_planned_steps_match_the_fits_own_count(method, settings):
    config = get_method(method).make_config(**settings)
    data = tiny_data(50)
    _, records = drain(get_method(method).fit(config, ArchSpec("softmax"), data, 0))
    totals = {r.total for r in records if r.total}
    assert totals == {planned_steps(method, config, len(data))}


def test_an_ensemble_plans_its_members_side_by_side_unless_memory_is_short(monkeypatch):
    """50 images in batches of 20 are 3 updates an epoch: side by side, 3 updates move both
    members; one after another (when the stacked training would not fit), 2 × 3."""
    import core.engine.inference.ensemble as ensemble

    config = get_method("ensemble").make_config(num_members=2, epochs=1, batch_size=20)
    arch, data = ArchSpec("softmax"), tiny_data(50)
    assert planned_steps("ensemble", config, len(data), arch) == 3
    monkeypatch.setattr(ensemble, "available_bytes", lambda: 1000)
    assert planned_steps("ensemble", config, len(data), arch) == 6
    _, records = drain(get_method("ensemble").fit(config, arch, data, 0))
    assert {r.total for r in records if r.total} == {6}


def test_step_cost_is_separated_from_start_up_costs(monkeypatch):
    """A fake method on a fake clock: 2 s to start (5 s more the first time), 0.25 s a step."""
    clock = [0.0]
    calls = []

    @dataclass(frozen=True)
    class FakeConfig:
        epochs: int = 10
        batch_size: int = 100

    def fit(config, arch, data, seed):
        assert len(data) == config.batch_size  # one probe batch per pass
        clock[0] += 2.0 + (5.0 if not calls else 0.0)
        calls.append(config.epochs)
        for step in range(config.epochs):
            clock[0] += 0.25
            yield ProgressRecord(step + 1, config.epochs)
        return None

    module = types.ModuleType("fake_method")  # a method's module, as the registry imports it by name
    module.FakeConfig, module.fit = FakeConfig, fit
    monkeypatch.setitem(sys.modules, "fake_method", module)
    monkeypatch.setitem(METHODS, "fake", Method("fake", "fake_method", "FakeConfig", "a fake method"))
    monkeypatch.setattr(plan.time, "perf_counter", lambda: clock[0])
    estimate, records = drain(estimate_duration("fake", FakeConfig(), ArchSpec("softmax"), 1000))
    assert estimate.seconds_per_step == pytest.approx(0.25)
    assert estimate.steps == 10 * math.ceil(1000 / 100)
    assert estimate.seconds == pytest.approx(100 * 0.25)
    # Warm-up, reference, then 2 steps: 0.25 s more than the reference is below 0.3 s, so 4.
    assert calls == [1, 1, 2, 4] and len(records) == 3


def test_an_estimate_can_be_cancelled_between_probes(monkeypatch):
    runs = []
    real = plan._timed_fit
    monkeypatch.setattr(plan, "_timed_fit", lambda *a: runs.append(1) or real(*a))
    config = get_method("map").make_config(batch_size=8)
    gen = estimate_duration("map", config, ArchSpec("softmax"), 60_000)
    next(gen)
    gen.close()
    assert len(runs) == 2  # warm-up and reference, nothing after the cancel


def test_full_batch_hmc_scales_with_the_training_set(monkeypatch):
    seen = []
    monkeypatch.setattr(plan, "_timed_fit", lambda m, c, a, data, s: seen.append(len(data)) or 1.0 * c.num_samples)
    config = get_method("hmc").make_config(num_warmup=10, num_samples=20)
    estimate, _ = drain(estimate_duration("hmc", config, ArchSpec("softmax"), 60_000))
    assert set(seen) == {plan.HMC_PROBE_IMAGES}
    assert estimate.steps == 30 and estimate.step_name == "iterations"
    assert estimate.seconds_per_step == pytest.approx(1.0 * 60_000 / plan.HMC_PROBE_IMAGES)


def test_training_images_are_counted_from_the_header(tmp_path):
    images = np.zeros((37, 28, 28), np.uint8)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", images)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(37, np.uint8))
    assert count_training_images(tmp_path) == 37
    nested = tmp_path / "root" / "mnist"
    nested.mkdir(parents=True)
    write_idx(nested / "train-images-idx3-ubyte", images[:5], compress=False)
    write_idx(nested / "train-labels-idx1-ubyte", np.zeros(5, np.uint8), compress=False)
    assert count_training_images(tmp_path / "root") == 5
    assert count_training_images(tmp_path / "nothing here") is None
    assert count_training_images("") is None


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(3, "a few seconds"), (22, "about 20 seconds"), (70, "about a minute"), (185, "about 3 minutes"),
     (3 * 3600, "about 3 hours"), (5 * 86400, "about 5 days")],
)
def test_durations_in_words(seconds, words):
    assert duration_in_words(seconds) == words


def test_a_newton_map_is_planned_in_newton_steps_not_epochs():
    """A MAP found by Newton's method makes no passes over mini-batches: its epochs and batch size
    change nothing in its run, so nothing in its plan (the old plan counted epochs × batches)."""
    arch = ArchSpec("softmax")
    for epochs, batch in ((1, 128), (100, 16)):
        for optimiser in ("newton", "auto"):  # auto is Newton on a model linear in its weights
            config = get_method("map").make_config(optimiser=optimiser, epochs=epochs, batch_size=batch)
            assert planned_steps("map", config, 60_000, arch) == plan.NEWTON_STEPS
    adam = get_method("map").make_config(optimiser="adam", epochs=2, batch_size=100)
    assert planned_steps("map", adam, 60_000, arch) == 2 * 600
    assert plan.newton_steps(get_method("map").make_config(), ArchSpec("lenet5")) is False  # auto: Adam


def test_a_newton_map_takes_about_the_planned_steps():
    """The fit's own count of Newton steps (to ‖∇‖ ≤ 10⁻³) lies within the plan's order."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand((1000, 1, 28, 28), generator=g)
    data = Dataset(x, (x.flatten(1)[:, :10].argmax(1) + torch.randint(0, 2, (1000,), generator=g)) % 10, "probe")
    config = get_method("map").make_config(optimiser="newton")
    posterior, _ = drain(get_method("map").fit(config, ArchSpec("softmax"), data, 0))
    iterations = posterior.info["map"]["iterations"]
    assert posterior.info["map"]["converged"] and plan.NEWTON_STEPS / 3 <= iterations <= 2 * plan.NEWTON_STEPS


def test_a_newton_map_estimate_has_the_order_of_the_run():
    """The estimate (a few Newton steps timed, scaled to the planned count) lies within a factor 4 of
    the whole fit's wall time on the same images; the old plan counted epochs × batches (12,500 steps
    here) for a run that makes about 15, each priced as a mini-batch step: about 5 hours for a fit of
    16 seconds (measured at load average 10 on 2 cores)."""
    import time

    config = get_method("map").make_config(optimiser="newton", epochs=100, batch_size=16)
    arch, n = ArchSpec("softmax"), 2000
    estimate, _ = drain(estimate_duration("map", config, arch, n))
    assert estimate.steps == plan.NEWTON_STEPS and estimate.step_name == "Newton steps"
    data = plan._probe_data(arch, n, torch.Generator().manual_seed(0))  # the images the estimate timed
    started = time.perf_counter()
    posterior, _ = drain(get_method("map").fit(config, arch, data, 0))
    took = time.perf_counter() - started
    assert posterior.info["map"]["optimiser"] == "newton"
    assert took / 4 <= estimate.seconds <= 4 * took, (estimate, took, posterior.info["map"]["iterations"])
