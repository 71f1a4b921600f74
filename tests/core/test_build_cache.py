"""A tier's build computes the samplers' mode and curvature once (core.engine.inference.build_cache)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.engine.inference import build_cache, curvature, sgld
from core.engine.inference.base import Dataset
from core.engine.models import ArchSpec
from core.engine.runner import drain
from tests.conftest import toy_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ARCH = ArchSpec("softmax", num_classes=2, image_size=4)


@pytest.fixture
def counted(monkeypatch):
    """How often the curvature was built."""
    calls = []
    real = curvature.curvature_metric

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(curvature, "curvature_metric", counting)
    return calls


def _same(a, b) -> None:
    mode_a, logp_a, metric_a = a
    mode_b, logp_b, metric_b = b
    assert logp_a == logp_b
    assert all(torch.equal(mode_a[k], mode_b[k]) for k in mode_a)
    assert torch.equal(metric_a.chol, metric_b.chol) and torch.equal(metric_a.inverse, metric_b.inverse)
    assert metric_a.about == metric_b.about


def test_within_a_build_the_curvature_is_computed_once_and_is_the_fresh_one(counted):
    data = toy_data(80)
    fresh = drain(curvature.mode_and_curvature(ARCH, data, 1.0))
    assert len(counted) == 1
    with build_cache.shared_within_build():
        first = drain(curvature.mode_and_curvature(ARCH, data, 1.0, 10))
        # another method reads the same training set afresh: equal tensors, other objects
        again = Dataset(data.x.clone(), data.y.clone(), "toy again")
        second = drain(curvature.mode_and_curvature(ARCH, again, 1.0, 999))
        assert len(counted) == 2  # the fresh one above, then one for the whole build
        _same(first, fresh)
        _same(second, fresh)
        # a caller that changes its copy leaves the next caller's as it was
        second[0]["linear.weight"].add_(1.0)
        second[2].about["kind"] = "changed"
        third = drain(curvature.mode_and_curvature(ARCH, data, 1.0))
        _same(third, fresh)
        assert len(counted) == 2
        # other data or another prior: computed anew
        other = Dataset(data.x.flip(0), data.y.flip(0), "toy")
        drain(curvature.mode_and_curvature(ARCH, other, 1.0))
        drain(curvature.mode_and_curvature(ARCH, other, 2.0))
        assert len(counted) == 4
    drain(curvature.mode_and_curvature(ARCH, data, 1.0))  # outside a build: nothing kept
    assert len(counted) == 5
    assert build_cache._SHARED is None


def test_a_sampler_in_a_build_gives_the_file_it_gives_alone(counted):
    """SGLD with the curvature metric, alone and as the second sampler of a build (its metric
    from the first): the same draws, bit for bit, and the curvature built once in the build."""
    data = toy_data(80)
    config = sgld.SgldConfig(num_chains=2, epochs=6, batch_size=40, burn_in_epochs=1, thin=2, step_size=0.2,
                             metric="curvature", init="overdispersed")
    alone = drain(sgld.fit(config, ARCH, data, seed=3))
    with build_cache.shared_within_build():
        drain(sgld.fit(dataclasses.replace(config, step_size=0.1), ARCH, data, seed=1))
        built = drain(sgld.fit(config, ARCH, data, seed=3))
    assert len(counted) == 2
    for k, v in alone.samples.items():
        assert torch.equal(built.samples[k], v)


def test_fingerprint_tells_inputs_apart_by_value():
    x = torch.arange(6.0)
    assert build_cache.fingerprint(x) == build_cache.fingerprint(x.clone())
    assert build_cache.fingerprint(x) != build_cache.fingerprint(x.double())
    assert build_cache.fingerprint(x) != build_cache.fingerprint(x.reshape(2, 3))
    changed = x.clone()
    changed[5] = 5.5
    assert build_cache.fingerprint(x) != build_cache.fingerprint(changed)
    assert build_cache.fingerprint(ARCH) != build_cache.fingerprint(dataclasses.replace(ARCH, num_classes=3))


def test_fingerprint_takes_any_tensor():
    for t in (torch.tensor(2.5), torch.zeros(0, 3), torch.tensor([True, False]), torch.arange(12).reshape(3, 4).T):
        assert build_cache.fingerprint(t) == build_cache.fingerprint(t.clone())
    assert build_cache.fingerprint(torch.tensor(2.5)) != build_cache.fingerprint(torch.tensor(2.25))
    assert build_cache.fingerprint(torch.arange(12).reshape(3, 4).T) != build_cache.fingerprint(torch.arange(12).reshape(4, 3))
