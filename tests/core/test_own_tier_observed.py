"""The features tier's build as the window runs it: ``zoo``'s own run observed (its stages and
progress yielded, Ctrl-C's cancel by closing it), and its estimate measured before it starts."""

from __future__ import annotations

import threading

import pytest
import torch

from core.commands import zoo
from core.engine.runner import observed, report
from core.engine.store import load_posterior
from tests.core.test_own_network import TinyCNN, colour_folder, save_torchscript

#: A handful of steps: what is checked is the way through, not the numbers.
QUICK = ("epochs=2", "num_chains=2", "num_warmup=6", "num_samples=8", "num_leapfrog=3")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The user cache (features, kept networks) inside the test's folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _tier(tmp_path, methods=("map", "mfvi")):
    torch.manual_seed(0)
    network = save_torchscript(TinyCNN().eval(), tmp_path / "net.pt")
    photos = colour_folder(tmp_path / "photos", per_class=7)
    return zoo.own_tier_arguments(network, photos, tmp_path / "tier", methods=list(methods), settings=QUICK)


def drain_all(gen):
    items = []
    try:
        while True:
            items.append(next(gen))
    except StopIteration as stop:
        return stop.value, items


def test_observed_reports_and_returns_and_closing_cancels_as_ctrl_c():
    seen = []

    def work(n):
        try:
            for i in range(n):
                report(i)
            return "done"
        except KeyboardInterrupt:
            seen.append("interrupted")
            raise

    value, items = drain_all(observed(work, 3))
    assert value == "done" and items == [0, 1, 2]
    gen = observed(work, 10**9)
    assert next(gen) == 0
    gen.close()  # waits for the work to unwind
    assert seen == ["interrupted"]
    with pytest.raises(ZeroDivisionError):
        drain_all(observed(lambda: 1 / 0))


def test_the_observed_build_is_the_commands_own_run(tmp_path, cache):
    argv = _tier(tmp_path)
    code, items = drain_all(zoo.observed_build(argv))
    assert code == 0
    stages = [p.stage for p in items if p.record is None]
    assert [s.kind for s in stages] == ["network", "features", "method", "method", "measuring"]
    assert [(s.method, s.done, s.count, s.kept) for s in stages if s.kind == "method"] == [
        ("map", 0, 2, False), ("mfvi", 1, 2, False)]
    phases = {p.record.phase for p in items if p.record is not None and p.stage.kind == "features"}
    assert "network features" in phases  # every image through the network once, reported
    out = tmp_path / "tier"
    assert {p.name for p in out.glob("*.pt")} == {"features_map.pt", "features_mfvi.pt",
                                                   "features_network.pt"}
    assert (out / "zoo.json").is_file()
    # the same build again keeps every file, as the command does
    code, items = drain_all(zoo.observed_build(argv))
    assert code == 0 and all(p.stage.kept for p in items if p.stage.kind == "method")


def test_cancelling_the_build_keeps_the_files_made_so_far(tmp_path, cache):
    argv = _tier(tmp_path)
    gen = zoo.observed_build(argv)
    for progress in gen:
        if progress.stage.kind == "method" and progress.stage.method == "mfvi" and progress.record is not None:
            break
    gen.close()
    out = tmp_path / "tier"
    assert (out / "features_map.pt").is_file() and not (out / "features_mfvi.pt").exists()
    assert load_posterior(out / "features_map.pt").info["zoo"]["tier"] == "features"
    assert not [t for t in threading.enumerate() if t.name == "bayescope-observed"]
    # going on: the MAP is kept, MF-VI trained
    code, items = drain_all(zoo.observed_build(argv))
    assert code == 0
    assert [(s.method, s.kept) for s in (p.stage for p in items if p.record is None) if s.kind == "method"] == [
        ("map", True), ("mfvi", False)]


def test_the_estimate_measures_features_then_each_method(tmp_path, cache):
    argv = _tier(tmp_path, methods=("map", "hmc"))
    estimate, records = drain_all(zoo.estimate_own_tier(argv))
    assert [n for n, _ in estimate.stages] == ["features", "map", "hmc"]
    assert estimate.images == 21 and 0 < estimate.train_images < 21 and not estimate.cached
    assert all(s > 0 for _, s in estimate.stages) and records
    first = zoo.TierStage("method", "map", 0, 2)
    assert estimate.seconds_left(zoo.TierStage("features"), 0.0, 0.0) == pytest.approx(estimate.seconds)
    assert estimate.seconds_left(first, 0.5, 0.0) == pytest.approx(
        estimate.seconds - estimate.stages[0][1] - 0.5 * estimate.stages[1][1])
    assert estimate.done_share(first, 0.0) == pytest.approx(estimate.stages[0][1] / estimate.seconds)
    drain_all(zoo.observed_build(zoo.own_tier_arguments(*argv[3:6:2], tmp_path / "t2", methods=["map"])))
    assert drain_all(zoo.estimate_own_tier(argv))[0].stages[0] == ("features", 0.0)  # cached: no image read


def test_a_tier_built_under_the_former_file_names_is_read_and_kept(tmp_path, cache, monkeypatch):
    """Earlier versions named a features tier's files ``features_features_<method>.pt``: a folder
    built so is read as it is, its reference found, and a rebuild keeps its files and names."""
    from core.engine import tiers

    argv = _tier(tmp_path)
    former = {"features_features_map.pt", "features_features_mfvi.pt", "features_features_network.pt"}
    with monkeypatch.context() as earlier:
        earlier.setattr(tiers, "file_name", lambda tier, model, method: f"{tier}_{model}_{method}.pt")
        assert drain_all(zoo.observed_build(argv))[0] == 0
    out = tmp_path / "tier"
    assert {p.name for p in out.glob("*.pt")} == former
    code, items = drain_all(zoo.observed_build(argv))
    assert code == 0 and [(p.stage.method, p.stage.kept) for p in items if p.stage.kind == "method"] == [
        ("map", True), ("mfvi", True)]
    assert {p.name for p in out.glob("*.pt")} == former
    bundled = tmp_path / "bundled"
    assert tiers.reference_candidates("features", "features", out, bundled) == [
        out / "features_features_hmc.pt", bundled / "features_hmc.pt"]
    assert tiers.reference_candidates("features", "features", tmp_path, bundled)[0] == tmp_path / "features_hmc.pt"
