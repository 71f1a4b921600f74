"""SWAG (Maddox et al. 2019): its Gaussian is the snapshots' moments, exactly, and it trains,
saves, loads and predicts end to end like every posterior."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.engine.inference import get_method
from core.engine.inference.gaussian_family import mixture_sample
from core.engine.inference.swag import SwagConfig, swag_moments, swag_tensors
from core.engine.models import ArchSpec
from core.engine.store import load_posterior, save_posterior


def _snapshots(t: int = 7, p: int = 5, seed: int = 0) -> torch.Tensor:
    """Correlated snapshots with unequal spreads, as SGD iterates around an optimum."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(p, p))
    return torch.from_numpy(rng.normal(size=(t, p)) @ mix + 3.0).double()


def test_diagonal_is_the_snapshots_variance_and_low_rank_their_sample_covariance():
    snaps = _snapshots()
    mean, diag, d = swag_moments(snaps, rank=snaps.shape[0])
    s = snaps.numpy()
    np.testing.assert_allclose(mean.numpy(), s.mean(0), rtol=1e-12)
    np.testing.assert_allclose(diag.numpy(), s.var(0, ddof=0), rtol=1e-10)  # the paper's θ̄² − θ̄²
    np.testing.assert_allclose((d @ d.T / (len(s) - 1)).numpy(), np.cov(s.T, ddof=1), rtol=1e-10, atol=1e-12)


def test_rank_k_keeps_the_last_k_snapshots_deviations_from_the_swa_mean():
    snaps = _snapshots(t=9)
    mean, _, d = swag_moments(snaps, rank=3)
    np.testing.assert_allclose(d.T.numpy(), (snaps[-3:] - snaps.mean(0)).numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="rank"):
        swag_moments(snaps, rank=10)


def test_the_stored_gaussian_has_covariance_half_diagonal_plus_half_low_rank():
    snaps = _snapshots()
    t = swag_tensors(snaps, rank=snaps.shape[0])
    s = snaps.numpy()
    want = 0.5 * np.diag(s.var(0, ddof=0)) + 0.5 * np.cov(s.T, ddof=1)
    std, f = t["diag_std"][0].double(), t["factors"][0].double()
    got = torch.diag(std**2) + f @ f.T
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    # and the draws the posterior predicts with have that covariance (statistically)
    draws = mixture_sample(200_000, t["mean"], t["diag_std"], t["factors"], t["log_weights"],
                           torch.Generator().manual_seed(1)).double()
    np.testing.assert_allclose(draws.mean(0).numpy(), s.mean(0), atol=0.02 * np.sqrt(np.diag(want)).max())
    np.testing.assert_allclose(np.cov(draws.numpy().T), want, atol=0.03 * np.abs(want).max())


def test_settings_that_cannot_make_the_low_rank_part_are_refused_in_words():
    with pytest.raises(ValueError, match="needs at least 30 snapshots"):
        SwagConfig(swa_epochs=2, snapshots_per_epoch=4, rank=30)
    with pytest.raises(ValueError, match="at least 2"):
        SwagConfig(rank=1)


def test_swag_trains_saves_loads_and_predicts(tmp_path, two_halves):
    data = two_halves
    config = SwagConfig(epochs=2, batch_size=64, swa_epochs=2, snapshots_per_epoch=3, rank=5, swa_lr=0.05)
    run = get_method("swag").fit(config, ArchSpec("softmax", num_classes=2), data, seed=3)
    phases = set()
    try:
        while True:
            phases.add(next(run).phase)
    except StopIteration as stop:
        posterior = stop.value
    assert phases == {"MAP", "averaging"}
    assert posterior.info["snapshots"] == 6 and posterior.rank == 5
    assert (posterior.diag_std > 0).any()  # SGD moved: the Gaussian has width
    path = save_posterior(posterior, tmp_path / "swag.pt")
    loaded = load_posterior(path)
    assert loaded.method == "swag" and loaded.default_num_samples == 30
    proba = loaded.predict_proba(data.x[:50])
    assert proba.shape == (30, 50, 2)
    assert (proba.mean(0).argmax(-1) == data.y[:50]).float().mean() > 0.9
    # the draws differ from one another: a spread of belief, not a point
    assert proba[:, :, 0].std(0).max() > 0
    # float16 storage (the bundled network tier's SWAG) predicts every draw as float32 does, to 1e-3
    half = load_posterior(save_posterior(posterior, tmp_path / "half.pt", storage="float16"))
    draws = [p.predict_proba(data.x[:50], generator=torch.Generator().manual_seed(5)) for p in (half, loaded)]
    torch.testing.assert_close(*draws, atol=1e-3, rtol=0)
