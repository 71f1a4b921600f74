"""``bayescope-cli zoo``: one model, every method, the same data; the table says how each did
and how far it lies from the reference; a rebuild keeps what it made. And the bundled tiers
hold what docs/zoo.md promises: one architecture and data set per tier, and sampled
posteriors thick and converged enough."""

from __future__ import annotations

import json

import pytest

from core.commands import zoo, zoo_build, zoo_tiers
from core.commands.main import main
from core.engine.resources import resources_dir
from core.engine.store import file_records

# a tier small enough for a test: the real one's methods with a handful of steps
TINY = zoo_tiers.Tier(
    "paper", ("--model", "softmax"), {
        "hmc": ("--method", "hmc", "--set", "num_chains=4", "--set", "num_warmup=6", "--set", "num_samples=8",
                "--set", "num_leapfrog=3", "--storage", "float16"),
        "map": ("--method", "map", "--set", "epochs=1"),
        "sgld": ("--method", "sgld", "--set", "num_chains=4", "--set", "epochs=2", "--set", "burn_in_epochs=1",
                 "--set", "thin=1", "--set", "batch_size=50", "--set", "step_size=1e-4"),
        "mfvi": ("--method", "mfvi", "--set", "epochs=1"),
    },
    reference="hmc", rhat_target=1.01, words="a test tier")

#: The tiers that ship with bayescope (a tier built on a person's own network ships with none).
BUNDLED_TIERS = [t for t in zoo_tiers.TIERS.values() if not t.own]


@pytest.fixture
def data_dir(tiny_mnist):
    """A data folder with mnist/ (two-halves digits) and notmnist/ (the same images flipped)."""
    import numpy as np

    from core.engine.data.idx import read_idx, write_idx

    root = tiny_mnist.parent
    (root / "notmnist").mkdir()
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        array = read_idx(tiny_mnist / f"{stem}.gz")
        write_idx(root / "notmnist" / f"{stem}.gz", np.ascontiguousarray(array[..., ::-1]) if array.ndim == 3 else array)
    return root


def test_a_tier_is_every_method_on_one_model_measured_against_the_reference(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(zoo_tiers.TIERS, "paper", TINY)
    out = tmp_path / "zoo"
    assert main(["zoo", "--tier", "paper", "--out", str(out), "--data-dir", str(data_dir)]) == 0
    files = sorted(out.glob("*.pt"))
    assert [f.name for f in files] == sorted(f"paper_softmax_{m}.pt" for m in TINY.methods)
    records = [file_records(f) for f in files]
    assert {r["arch"]["name"] for r in records} == {"softmax"}
    assert len({r["dataset"] for r in records}) == 1  # the same training set for every method
    assert all(r["info"]["zoo"]["tier"] == "paper" for r in records)
    table = json.loads((out / "zoo.json").read_text())
    rows = {r["method"]: r for r in table["rows"]}
    assert set(rows) == set(TINY.methods)
    assert "to_hmc_kl" not in rows["hmc"]  # the reference is not measured against itself
    for m in ("map", "sgld", "mfvi"):
        assert rows[m]["to_hmc_kl"] >= 0 and 0 <= rows[m]["to_hmc_total_variation"] <= 1
        assert rows[m]["command"].startswith("bayescope-cli train --model softmax --method " + m)
    assert rows["hmc"]["chains"] == 4 and rows["hmc"]["draws"] == 8 and rows["hmc"]["acceptance"] is not None
    assert rows["map"]["rhat"] is None and rows["map"]["ood_auroc_epistemic"] is None  # n/a, not 0.5
    # the sampled files' draws are scored under the exact posterior, the reference's own too
    level = file_records(out / "paper_softmax_sgld.pt")["info"]["log_posterior_level"]
    assert level["mean"] == pytest.approx(rows["sgld"]["log_posterior_mean"]) and level["draws"] == min(40, rows["sgld"]["chains"] * rows["sgld"]["draws"])
    assert level["reference"]["mean"] == pytest.approx(rows["hmc"]["log_posterior_mean"])
    assert rows["map"]["log_posterior_mean"] is None  # one set of weights: no spread to place
    assert file_records(out / "paper_softmax_mfvi.pt")["info"]["log_posterior_level"]["draws"] == 40
    # the share of HMC's draws inside each interval, kept in the file the window reads it from
    mass = file_records(out / "paper_softmax_sgld.pt")["info"]["interval_mass"]
    assert mass["mean"] == pytest.approx(rows["sgld"]["interval_mass"]) and 0 <= mass["p10"] <= mass["mean"] <= 1
    assert rows["map"]["interval_mass"] is None and "interval_mass" not in file_records(out / "paper_softmax_map.pt")["info"]
    capsys.readouterr()
    assert main(["info", "--json", str(out / "paper_softmax_map.pt")]) == 0
    assert json.loads(capsys.readouterr().out)["tier"] == "paper"
    md = (out / "zoo.md").read_text()
    assert md.startswith("| method | chains × draws | R̂ |") and md.count("\n") == 2 + len(TINY.methods)
    assert "| MAP | 1 × 1 | n/a | n/a |" in md and "hmc's mass in its 90 % interval (10th pct.)" in md


def test_a_rebuild_keeps_the_files_made_with_the_same_arguments(data_dir, tmp_path, monkeypatch, capsys):
    tier = zoo_tiers.Tier("paper", TINY.model, {m: TINY.methods[m] for m in ("map", "mfvi")}, None, 1.01, "test")
    monkeypatch.setitem(zoo_tiers.TIERS, "paper", tier)
    out = tmp_path / "zoo"
    argv = ["zoo", "--tier", "paper", "--out", str(out), "--data-dir", str(data_dir)]
    assert main(argv) == 0
    made = {f.name: f.stat().st_mtime_ns for f in out.glob("*.pt")}
    capsys.readouterr()
    changed = {**tier.methods, "mfvi": ("--method", "mfvi", "--set", "epochs=2")}
    monkeypatch.setitem(zoo_tiers.TIERS, "paper", zoo_tiers.Tier("paper", TINY.model, changed, None, 1.01, "test"))
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "map: kept paper_softmax_map.pt" in said and "mfvi: kept" not in said
    assert (out / "paper_softmax_map.pt").stat().st_mtime_ns == made["paper_softmax_map.pt"]
    assert (out / "paper_softmax_mfvi.pt").stat().st_mtime_ns != made["paper_softmax_mfvi.pt"]


def test_a_samplers_run_made_in_parts_is_the_run_made_at_once(data_dir, tmp_path, monkeypatch, capsys):
    """``zoo --chains`` runs some chains into DIR/parts and joins them once all have run: the
    file is the one-go run's, draws, accuracy, convergence and recorded command alike."""
    import torch

    from core.engine.store import load_posterior

    sgld = (*TINY.methods["sgld"], "--keep-draws", "4", "--storage", "float16")
    monkeypatch.setitem(zoo_tiers.TIERS, "paper", zoo_tiers.Tier("paper", TINY.model, {"sgld": sgld, "map": TINY.methods["map"]},
                                                     None, 1.01, "test"))
    whole, parted = tmp_path / "whole", tmp_path / "parted"
    name = "paper_softmax_sgld.pt"
    assert main(["zoo", "--tier", "paper", "--methods", "sgld", "--out", str(whole), "--data-dir", str(data_dir)]) == 0
    base = ["zoo", "--tier", "paper", "--methods", "sgld", "--out", str(parted), "--data-dir", str(data_dir)]
    capsys.readouterr()
    assert main([*base, "--chains", "2,0"]) == 0
    said = capsys.readouterr().out
    assert f"chains 0 and 2 of 4 have run; the rest: bayescope-cli zoo --tier paper --methods sgld --chains 1,3 --out {parted}" in said
    assert "not measured" in said and not (parted / name).exists() and not (parted / "zoo.json").exists()
    assert main([*base, "--chains", "1,3"]) == 0
    assert "every chain has run; bayescope-cli join" in capsys.readouterr().out
    one, joined = load_posterior(whole / name), load_posterior(parted / name)
    assert joined.num_chains == 4 and joined.num_draws == 4
    for key in one.samples:
        assert torch.equal(one.samples[key], joined.samples[key]), key
    a, b = file_records(whole / name)["info"], file_records(parted / name)["info"]
    assert b["test_accuracy"] == a["test_accuracy"] and b["zoo"]["arguments"] == a["zoo"]["arguments"]
    assert b["diagnostics"] == a["diagnostics"]  # R̂ and ESS of the same draws on the same probe images
    assert "part_of_run" not in b and main(["info", "--json", str(parted / name)]) == 0
    assert json.loads(capsys.readouterr().out)["part_of_run"] is None  # joined: a whole run
    assert b["zoo"]["joined_from"] == ["paper_softmax_sgld.chains-1-3.pt", "paper_softmax_sgld.chains-2-0.pt"]
    row = json.loads((parted / "zoo.json").read_text())["rows"][0]
    assert row == {**json.loads((whole / "zoo.json").read_text())["rows"][0], "file_mb": row["file_mb"],
                   "train_seconds": row["train_seconds"]}
    assert main(base) == 0 and "sgld: kept paper_softmax_sgld.pt" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "words"), [
    (["train", "--model", "softmax", "--method", "map", "--chains", "0"], "MAP has none"),
    (["train", "--model", "softmax", "--method", "sgld", "--chains", "1,4"], "among the run's 4, numbered 0 to 3"),
    (["train", "--model", "softmax", "--method", "sgld", "--chains", "1,1"], "among the run's 4, numbered 0 to 3"),
    (["train", "--model", "softmax", "--method", "sgld", "--chains", "first"], "chain numbers separated by commas"),
    (["train", "--model", "softmax", "--method", "sgld", "--chains", "0", "--keep-draws", "4"],
     "keep draws when joining the parts"),
    (["zoo", "--tier", "network", "--chains", "0"], "name them with --methods"),
    (["zoo", "--tier", "network", "--methods", "sgld,map", "--chains", "0"], "(map run no chains)"),
])
def test_a_part_of_a_run_that_cannot_be_is_refused_before_training(argv, words, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "out.pt")]) == 2
    assert words in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_join_names_the_chains_that_have_not_run(tiny_mnist, tmp_path, capsys):
    common = ["train", "--data-dir", str(tiny_mnist), *TINY.model, *TINY.methods["sgld"]]
    assert main([*common, "--chains", "0,2", "--out", str(tmp_path / "a.pt")]) == 0
    assert "not measured; when every chain has run, join the parts" in capsys.readouterr().out
    assert main(["info", "--json", str(tmp_path / "a.pt")]) == 0
    assert json.loads(capsys.readouterr().out)["part_of_run"] == {"chains": [0, 2], "of": 4}
    assert main(["info", str(tmp_path / "a.pt")]) == 0
    assert "part of a run chains 0 and 2 of 4 (train --chains): bayescope-cli join joins it" in capsys.readouterr().out
    assert main(["join", str(tmp_path / "a.pt"), "--out", str(tmp_path / "all.pt")]) == 2
    assert "the parts hold 2 chains of the run's 4: chains 1 and 3 have not run yet" in capsys.readouterr().err
    assert main([*common, "--seed", "1", "--chains", "1,3", "--out", str(tmp_path / "b.pt")]) == 0
    assert main(["join", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--out", str(tmp_path / "all.pt")]) == 2
    assert "differ in their seed" in capsys.readouterr().err
    assert main([*common[:-len(TINY.methods["sgld"])], "--method", "map", "--set", "epochs=1",
                 "--out", str(tmp_path / "map.pt")]) == 0
    capsys.readouterr()
    assert main(["join", str(tmp_path / "map.pt"), "--out", str(tmp_path / "all.pt")]) == 2
    assert "a map posterior runs no chains, so it has none to merge" in capsys.readouterr().err
    assert not (tmp_path / "all.pt").exists()


def test_an_unknown_method_of_a_tier_is_named(tmp_path, capsys):
    assert main(["zoo", "--tier", "paper", "--out", str(tmp_path), "--methods", "map,bogus"]) == 2
    err = capsys.readouterr().err
    assert "the paper tier has no method bogus; it has hmc, map" in err


def test_a_bad_cluster_address_is_refused_before_anything_is_trained(tmp_path, capsys):
    out = tmp_path / "paper"
    assert main(["zoo", "--tier", "paper", "--out", str(out), "--cluster", "nowhere:1"]) == 2
    assert "--cluster must be local, auto or ray://HOST:PORT, got 'nowhere:1'" in capsys.readouterr().err
    assert not out.exists()  # refused before the folder was made or the first method trained


def _bundled(tier: zoo_tiers.Tier) -> list[dict]:
    files = sorted((resources_dir() / "models").glob(f"{tier.name}_*.pt"))
    if not files:
        pytest.skip(f"no {tier.name}-tier posterior is bundled")
    return [file_records(f) for f in files]


def _sampled(records: list[dict]) -> list[dict]:
    """The samplers' files (chains of draws); a MAP (one draw) and an ensemble (members) are not."""
    return [r for r in records if r["kind"] == "sampled" and r["method"] not in ("ensemble", "map")]


@pytest.mark.parametrize("tier", BUNDLED_TIERS, ids=lambda t: t.name)
def test_every_bundled_file_of_a_tier_is_what_the_zoo_command_makes(tier):
    """A bundled file records the ``train`` arguments it was made with; they are the tier's own,
    so `zoo` keeps it, and docs/zoo.md's commands describe the file that ships."""
    from argparse import Namespace

    args = Namespace(seed=0, data_dir=None, limit=None)
    for r in _bundled(tier):
        expected = zoo_build.recorded_arguments(zoo_build.train_arguments(tier, r["method"], resources_dir(), args))
        assert r["info"]["zoo"]["arguments"] == expected, r["method"]


def test_a_tier_rebuilt_on_a_cluster_records_the_arguments_of_one_rebuilt_here(tmp_path):
    """``zoo --cluster`` hands the address to each ``train``; where the chains ran is not part of
    what makes a file, so a file built on a cluster is kept by a rebuild here, and the reverse."""
    from argparse import Namespace

    tier = zoo_tiers.TIERS["paper"]
    here = zoo_build.train_arguments(tier, "sghmc", tmp_path, Namespace(seed=0, data_dir="data", limit=None))
    there = zoo_build.train_arguments(tier, "sghmc", tmp_path, Namespace(seed=0, data_dir="data", limit=None,
                                                                   cluster="local"))
    assert "--cluster" not in here and there[there.index("--cluster") + 1] == "local"
    assert zoo_build.recorded_arguments(there) == zoo_build.recorded_arguments(here)
    assert "local" not in zoo_build.recorded_arguments(there) and "data" not in zoo_build.recorded_arguments(there)


#: A tier's methods not bundled yet, with the reason in docs/zoo.md (none: every tier bundles all its
#: methods); this test fails once one is bundled, so the set shrinks.
NOT_BUNDLED: dict[str, set[str]] = {}


@pytest.mark.parametrize("tier", BUNDLED_TIERS, ids=lambda t: t.name)
def test_every_bundled_file_of_a_tier_is_one_model_and_thick_enough(tier):
    bundled = _bundled(tier)
    assert len({(r["arch"]["name"], r["dataset"]) for r in bundled}) == 1
    assert {r["info"]["zoo"]["tier"] for r in bundled} == {tier.name}
    # every method of the tier, but those said not bundled yet
    assert {r["method"] for r in bundled} == set(tier.methods) - NOT_BUNDLED.get(tier.name, set())
    for r in _sampled(bundled):
        record = r["info"]["diagnostics"]
        assert record["status"] == "measured", r["method"]
        assert record["chains"] >= 4 and record["chains"] * record["draws"] >= 100, r["method"]


def test_the_bundled_reference_of_the_paper_tier_has_converged():
    """HMC with the curvature metric: ≥ 4 chains, ≥ 100 draws, bulk ESS ≥ 400 and R̂ ≤ 1.01 on
    every probe probability, measured on every iteration of the run (4 × 800 draws: over the 4 ×
    200 it keeps, the largest of 10,000 R̂ lies near 1.02 even for shuffled draws), so the window
    calls it exact inference."""
    from core.engine.tiers import reference_words

    tier = zoo_tiers.TIERS["paper"]
    (reference,) = [r for r in _bundled(tier) if r["method"] == tier.reference]
    record = reference["info"]["diagnostics"]
    assert record["chains"] >= 4 and record["chains"] * record["draws"] >= 100
    assert record["ess_bulk_min"] >= 400
    assert record["rhat_max"] <= tier.rhat_target and record["kept_draws"] < record["draws"]
    assert reference["info"]["metric"] == "curvature" and reference["info"]["divergences"] == 0
    assert reference_words(reference["info"])[0] == "Exact inference (HMC)"


def test_the_paper_tiers_sampled_files_place_their_draws_against_hmcs():
    """Every file whose weight draws share HMC's model and prior records how probable they are
    under the exact posterior, beside HMC's own level (``bayescope-cli zoo``); input dropout (MC
    dropout, D-SGHMC) makes another model, variational dropout has another prior, MAP holds one
    set of weights, and HMC is not placed against itself."""
    files = {r["method"]: r for r in _bundled(zoo_tiers.TIERS["paper"])}
    levels = {m: r["info"].get("log_posterior_level") for m, r in files.items()}
    assert {m for m, level in levels.items() if level} == {"sgld", "sghmc", "ensemble", "laplace", "swag", "mfvi",
                                                           "snvi", "sgmmvi"}
    # one reference: HMC's level, the same to float noise when files were placed in different runs
    references = [(level["reference"]["method"], level["reference"]["mean"]) for level in levels.values() if level]
    assert {method for method, _ in references} == {"hmc"}
    assert max(mean for _, mean in references) - min(mean for _, mean in references) < 1e-3
    assert all(level["data"] == "the 60,000 training images" for level in levels.values() if level)


def test_the_paper_tiers_samplers_draws_are_as_probable_as_exact_inferences():
    """SGLD and SGHMC, moving by the curvature on mini-batches of 2,000, sample the posterior HMC
    does: their draws' exact log posterior lies within three of HMC's spreads of HMC's own (at the
    plain steps of mini-batches of 100 they lay 1,700 below it)."""
    from core.engine.naming import LEVEL_SPREADS

    for r in _sampled(_bundled(zoo_tiers.TIERS["paper"])):
        level = r["info"].get("log_posterior_level")
        if level:  # D-SGHMC's input masks make another model
            ref = level["reference"]
            assert abs(level["mean"] - ref["mean"]) <= LEVEL_SPREADS * ref["sd"], (r["method"], level)


NOT_CONVERGED = {
    "network": "the network tier's stochastic-gradient samplers have not converged: moving by the curvature layer "
               "by layer over 120 epochs, SGLD and SGHMC reach R̂ 1.31 and 1.28 (bulk ESS 10 and 11 of 1,000) and "
               "D-SGHMC 1.102 (one probe probability of 10,000 above 1.1; bulk ESS 28; a run 1.43 times as long "
               "read 1.123; docs/zoo.md)",
}


@pytest.mark.parametrize("tier", [pytest.param(tier, marks=[pytest.mark.xfail(
    strict=True, reason=f"{NOT_CONVERGED[name]}: issue 23 stays open until every sampler meets its tier's target")]
    if name in NOT_CONVERGED else []) for name, tier in zoo_tiers.TIERS.items() if not tier.own],
    ids=[t.name for t in BUNDLED_TIERS])
def test_every_bundled_sampled_posterior_of_a_tier_is_converged(tier):
    for r in _sampled(_bundled(tier)):
        assert r["info"]["diagnostics"]["rhat_max"] <= tier.rhat_target, (r["method"], r["info"]["diagnostics"])


def test_the_network_tier_shares_one_prior_and_says_how_its_samplers_stepped():
    """Every method with a Gaussian prior has the tier's N(0, 0.2²) (MC dropout through its
    length-scale 1/σ); the samplers' preconditioner (SGLD, SGHMC: the K-FAC curvature; D-SGHMC:
    RMSprop's) was fixed before their first draw, and their columns say so."""
    from core.engine.naming import fit_lines

    bundled = {r["method"]: r for r in _bundled(zoo_tiers.TIERS["network"])}
    for method, r in bundled.items():
        if method == "mc_dropout":
            assert r["config"]["length_scale"] == pytest.approx(1 / zoo.NETWORK_PRIOR_STD)
        elif method != "vdropout":  # its log-uniform prior has no scale
            assert r["config"]["prior_std"] == zoo.NETWORK_PRIOR_STD, method
    for r in _sampled(list(bundled.values())):
        record = r["info"]["preconditioner"]
        assert record["fixed_before_draws"], r["method"]
        words = "layer by layer" if record.get("kind") == "kron" else "held fixed"
        assert words in fit_lines(r["method"], r["info"])[0], r["method"]
    assert all(bundled[m]["info"]["preconditioner"]["kind"] == "kron" for m in ("sgld", "sghmc", "dsghmc"))


def test_the_paper_tiers_variational_files_say_where_their_fit_ended():
    """The mixture keeps every component above its floor (a mixture shown is one in effect), and
    variational dropout records the share of its weights whose noise its α ≤ 1 limit decides."""
    from core.engine.naming import fit_lines

    files = {r["method"]: r for r in _bundled(zoo_tiers.TIERS["paper"])}
    mixture = files["sgmmvi"]["info"]
    assert mixture["weight_floor"] == pytest.approx(1 / 6) and len(mixture["weights"]) == 3
    assert min(mixture["weights"]) >= mixture["weight_floor"] - 1e-4
    assert sum(mixture["weights"]) == pytest.approx(1.0, abs=1e-3)
    assert "acts as one Gaussian" not in " ".join(fit_lines("sgmmvi", mixture))
    share = files["vdropout"]["info"]["alpha_at_limit"]
    assert 0 < share <= 1
    assert f"for {share:.0%} of the weights" in fit_lines("vdropout", files["vdropout"]["info"])[0]


def test_a_samplers_draws_are_placed_against_the_exact_posteriors_own():
    """Three spreads of the reference's draws (3) decide: far below its level is a wider
    distribution, far above one crowding the peak; the reference itself gets no line."""
    from core.engine.naming import fit_lines

    ref = {"method": "hmc", "mean": -17_941.0, "sd": 66.0, "draws": 40}

    def line(mean: float, method: str = "sgld") -> list[str]:
        return fit_lines(method, {"log_posterior_level": {"mean": mean, "sd": 500.0, "draws": 40, "reference": ref}})

    (wide,) = line(-33_862.0)
    assert "far less probable than HMC's" in wide and "spread too wide or off-centre" in wide
    assert "log posterior −33,862 on average, against −17,941 ± 66 for HMC's draws" in wide
    (narrow,) = line(-17_941.0 + 3.1 * 66)
    assert "far more probable" in narrow and "crowd nearer the posterior's peak" in narrow and "too narrow" in narrow
    (level,) = line(-17_941.0 - 2.9 * 66)
    assert "as probable as HMC's" in level
    assert line(-17_941.0, method="hmc") == [] and fit_lines("sgld", {"log_posterior_level": {"mean": 1}}) == []


def test_fit_lines_name_a_collapsed_mixture_and_noise_held_at_its_limit():
    from core.engine.naming import fit_lines

    (collapsed,) = fit_lines("sgmmvi", {"weights": [0.01, 0.027, 0.963]})
    assert "0.01 / 0.03 / 0.96" in collapsed and "acts as one Gaussian" in collapsed
    (floored,) = fit_lines("sgmmvi", {"weights": [0.1667, 0.1667, 0.6666], "weight_floor": 1 / 6})
    assert "2 components held at the floor of 0.17" in floored
    assert fit_lines("sgmmvi", {"weights": [0.4, 0.35, 0.25], "weight_floor": 1 / 6}) == [
        "Mixture weights 0.40 / 0.35 / 0.25."]
    (held,) = fit_lines("vdropout", {"alpha_at_limit": 0.7747})
    assert "for 77% of the weights" in held and "the limit, not the data, sets the spread" in held
    assert fit_lines("vdropout", {}) == fit_lines("mfvi", {"weights": [1.0]}) == []
