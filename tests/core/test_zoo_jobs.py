"""``zoo --jobs``: a tier's methods trained side by side in processes of their own make the files
the one-at-a-time build makes (same arguments recorded, same draws for the same seed), share the
samplers' mode and curvature, cancel cleanly and go on from what finished."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch

from core.commands import zoo, zoo_build, zoo_tiers
from core.commands.main import main
from core.commands.zoo_jobs import Job, schedule
from core.engine.device import cpu_cores
from core.engine.inference import build_cache
from core.engine.store import load_posterior
from tests.core.test_own_network import TinyCNN, colour_folder, save_torchscript
from tests.core.test_own_tier_observed import drain_all

#: A handful of steps of three samplers that share the mode and curvature, MAP and the Laplace that
#: starts from it: what is checked is the way through and the bits, not the numbers.
QUICK = ("epochs=3", "num_chains=2", "num_warmup=6", "num_samples=8", "num_leapfrog=3", "burn_in_epochs=1",
         "thin=1", "num_samples=8")
METHODS = ["hmc", "sgld", "map", "laplace", "mfvi"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def one_thread():
    """Every process at one torch thread (the workers take this process's share): the same
    arithmetic in both builds, so their draws can be compared bit for bit."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tier_inputs(tmp_path, cache):
    torch.manual_seed(0)
    network = save_torchscript(TinyCNN().eval(), tmp_path / "net.pt")
    return network, colour_folder(tmp_path / "photos", per_class=7)


def _argv(inputs, out, methods=METHODS, jobs=None):
    argv = zoo.own_tier_arguments(*inputs, out, methods=list(methods), settings=QUICK)
    return argv + (["--jobs", str(jobs)] if jobs else [])


def _tensors(path):
    """Every tensor a posterior file holds (its draws, weights, factors), by name."""
    return torch.load(path, weights_only=False, map_location="cpu")["tensors"]


def test_side_by_side_makes_the_files_one_at_a_time_makes(tmp_path, tier_inputs, one_thread, capsys):
    alone, together = tmp_path / "alone", tmp_path / "together"
    assert main(["zoo", *_argv(tier_inputs, alone, jobs=1)]) == 0
    assert main(["zoo", *_argv(tier_inputs, together, jobs=2)]) == 0
    said = capsys.readouterr()
    assert "2 at a time" in said.out and "[5/5]" in said.out
    if cpu_cores() > 1:  # a worker at one torch thread says so, not the machine's cores
        assert f"Training on the CPU (1 thread of its {cpu_cores()} cores)." in said.err
    assert not multiprocessing.active_children() and not (together / zoo_build.SHARED_FOLDER).exists()
    for method in METHODS:
        a, b = load_posterior(alone / f"features_{method}.pt"), load_posterior(together / f"features_{method}.pt")
        # the same arguments recorded (the imported network's file in each build's own folder)
        assert [x.replace(str(alone), str(together)) for x in a.info["zoo"]["arguments"]] == b.info["zoo"]["arguments"]
        assert a.info["zoo"]["listing"] == b.info["zoo"]["listing"]
        assert a.seed == b.seed and a.config == b.config
        draws_a, draws_b = _tensors(alone / f"features_{method}.pt"), _tensors(together / f"features_{method}.pt")
        assert draws_a.keys() == draws_b.keys() and draws_a
        for k in draws_a:
            assert torch.equal(draws_a[k], draws_b[k]), f"{method}'s {k} differ"
    # a rebuild side by side keeps every file
    assert main(["zoo", *_argv(tier_inputs, together, jobs=2)]) == 0
    assert capsys.readouterr().out.count("kept features_") == len(METHODS)


def test_laplace_waits_for_the_map_it_starts_from(tmp_path, tier_inputs, one_thread):
    out = tmp_path / "tier"
    code, items = drain_all(zoo.observed_build(_argv(tier_inputs, out, methods=["laplace", "map"], jobs=2)))
    assert code == 0
    started = [p.stage.method for p in items if p.record is None and p.stage.kind == "method"]
    assert started == ["map", "laplace"]  # both could start at once, but Laplace needs the MAP's file
    assert "features_map.pt" in load_posterior(out / "features_laplace.pt").info["zoo"]["arguments"]


def test_cancelling_stops_the_workers_and_keeps_what_finished(tmp_path, tier_inputs, one_thread):
    out = tmp_path / "tier"
    argv = _argv(tier_inputs, out, methods=["map", "mfvi", "hmc"], jobs=2)
    gen = zoo.observed_build(argv)
    finished = None
    for progress in gen:  # the first method to finish (MAP or MF-VI, beside the longer HMC)
        stage = progress.stage
        if stage.kind == "method" and stage.done == 1:
            finished = True
            break
    assert finished
    gen.close()  # as Ctrl-C: the workers are stopped, the build unwinds
    assert not multiprocessing.active_children()
    assert not [t for t in threading.enumerate() if t.name == "bayescope-observed"]
    assert not (out / zoo_build.SHARED_FOLDER).exists()
    made = {p.name for p in out.glob("features_*.pt")} - {"features_network.pt"}
    assert 1 <= len(made) < 3 and not list(out.glob("*.tmp*"))
    # finished: a file with the tier's record of the arguments that made it. A worker's file the
    # stop caught before the build recorded it (a race that CI met) is trained again, not trusted.
    recorded = {m.removeprefix("features_").removesuffix(".pt") for m in made
                if "zoo" in load_posterior(out / m).info}
    assert len(recorded) >= 1
    # going on: what finished is kept, the rest trained
    code, items = drain_all(zoo.observed_build(argv))
    assert code == 0
    kept = {s.method for s in (p.stage for p in items if p.record is None) if s.kind == "method" and s.kept}
    assert kept == recorded
    assert {p.name for p in out.glob("features_*.pt")} >= {"features_map.pt", "features_mfvi.pt", "features_hmc.pt"}


def test_a_failed_method_stops_the_build_with_its_code(tmp_path, tier_inputs, capsys):
    out = tmp_path / "tier"
    argv = [*_argv(tier_inputs, out, methods=["map", "mfvi"], jobs=2), "--set", "lr=-1"]
    assert main(["zoo", *argv]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "failed (exit 2)" in err and "Traceback" not in err
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(("extra", "words"), [
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--jobs", "2", "--chains", "0"], "leave out --cluster and --chains"),
])
def test_bad_jobs_are_refused_in_one_sentence(tmp_path, extra, words, capsys):
    argv = ["zoo", "--tier", "paper", "--out", str(tmp_path / "z"), "--methods", "sgld", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_the_longest_methods_go_first_and_the_window_builds_one_at_a_time():
    jobs = [Job("map", ("train",)), Job("sgld", ("train",), cost=478), Job("hmc", ("train",), cost=986),
            Job("mfvi", ("train",))]
    assert [j.method for j in schedule(jobs)] == ["hmc", "sgld", "map", "mfvi"]
    args = zoo.parse_arguments(["--tier", "features", "--out", "x"])
    assert zoo_build.jobs_for(zoo_tiers.TIERS["features"], ["map", "hmc"], args) == min(2, multiprocessing.cpu_count())
    assert zoo_build.jobs_for(zoo_tiers.TIERS["paper"], ["map", "hmc"], zoo.parse_arguments(["--tier", "paper", "--out", "x"])) == 1
    from core.engine.runner import observed

    assert drain_all(observed(zoo_build.jobs_for, zoo_tiers.TIERS["features"], ["map", "hmc"], args))[0] == 1


def test_a_result_shared_through_the_store_is_computed_once(tmp_path):
    calls = []

    @build_cache.once_per_build(lambda x: x, lambda r: r.clone())
    def doubled(x):
        calls.append(1)
        yield None
        return 2 * x

    store = build_cache.SharedStore(tmp_path / "shared", multiprocessing.get_context("spawn").Lock())
    x = torch.arange(3.0)
    with build_cache.shared_within_build(store):  # one process: computes and writes
        first = drain_all(doubled(x))[0]
    with build_cache.shared_within_build(store):  # another (its memory empty): reads
        second, records = drain_all(doubled(x))
    assert calls == [1] and records == [] and torch.equal(first, second)
    with build_cache.shared_within_build(store):  # another input: computed
        drain_all(doubled(x + 1))
    assert calls == [1, 1]
