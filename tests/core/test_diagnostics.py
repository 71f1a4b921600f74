"""Convergence on a probe set: the record training writes, `diagnose` adds and `info` reads."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.analysis.diagnostics import PROBE_SIZE, diagnose, probe_draws_progress
from core.commands.main import main
from core.engine.inference.base import SampledPosterior
from core.engine.models import ArchSpec, build_model
from core.engine.naming import (
    convergence_lines,
    convergence_verdict,
    convergence_warning,
    mixed_as_shuffled,
)
from core.engine.resources import resources_dir
from core.engine.runner import drain
from core.engine.store import load_posterior, save_posterior

SOFTMAX = ArchSpec("softmax", num_classes=10)


def _softmax_posterior(chains: int, draws: int, offsets: list[float], seed: int = 0) -> SampledPosterior:
    """Weights drawn independently around ``offsets[c]`` for chain c (the bias of class 0)."""
    g = torch.Generator().manual_seed(seed)
    shapes = {k: v.shape for k, v in build_model(SOFTMAX).named_parameters()}
    samples = {k: 0.05 * torch.randn((chains, draws, *shape), generator=g) for k, shape in shapes.items()}
    samples["linear.bias"][:, :, 0] += torch.tensor(offsets)[:, None]
    return SampledPosterior("sghmc", SOFTMAX, {}, seed, "mnist-train", samples)


def test_probe_draws_keep_each_chain_apart(two_halves) -> None:
    post = _softmax_posterior(2, 4, [0.0, 0.0])
    post.samples = {k: v.clone() for k, v in post.samples.items()}
    for v in post.samples.values():
        v[0] = 0.0  # chain 0: all weights zero, so every class has probability 1/10
    probs = drain(probe_draws_progress(post, two_halves.x[:7]))
    assert probs.shape == (2, 4, 7, 10)
    np.testing.assert_allclose(probs[0], 0.1, rtol=1e-6)
    assert np.abs(probs[1] - 0.1).max() > 1e-3


def test_chains_that_agree_and_chains_that_do_not(two_halves) -> None:
    agree = diagnose(_softmax_posterior(2, 200, [0.0, 0.0]), two_halves)
    assert agree["status"] == "measured" and agree["chains"] == 2 and agree["draws"] == 200
    assert agree["rhat_max"] < 1.05
    assert agree["ess_bulk_min"] > 100
    apart = diagnose(_softmax_posterior(2, 200, [0.0, 1.0]), two_halves)
    assert apart["rhat_max"] > 1.1
    assert len(apart["rhat_per_class"]) == 10 and max(apart["rhat_per_class"]) == apart["rhat_max"]
    assert f"{min(len(two_halves), PROBE_SIZE)} images of two-halves" in apart["probe"]
    warning = convergence_warning({"diagnostics": apart})
    assert warning.startswith("The chains disagree: this posterior may not have converged (R̂ ")
    assert convergence_warning({"diagnostics": agree}) is None


@pytest.mark.parametrize(("record", "words"), [
    # the paper tier's SGLD after 600 epochs: 4 × 30 draws, as far apart as its draws shuffled
    ({"rhat_max": 1.182, "rhat_max_shuffled": 1.167, "rhat_above_1_01": 0.393, "rhat_above_1_01_shuffled": 0.516},
     "Too few draws to tell whether the chains agree"),
    # its SGHMC after 50 epochs: the share test passes by chance, the largest R̂ does not
    ({"rhat_max": 1.255, "rhat_max_shuffled": 1.135, "rhat_above_1_01": 0.435, "rhat_above_1_01_shuffled": 0.442},
     "The chains disagree"),
    # the network tier's SGHMC: chains far apart by both measures
    ({"rhat_max": 2.16, "rhat_max_shuffled": 1.21, "rhat_above_1_01": 0.996, "rhat_above_1_01_shuffled": 0.565},
     "The chains disagree"),
])
def test_a_warning_tells_chains_that_disagree_from_draws_too_few_to_tell(record, words) -> None:
    record = {"status": "measured", "chains": 4, "draws": 30, **record}
    warning = convergence_warning({"diagnostics": record})
    assert warning.startswith(words) and "this posterior may not have converged" in warning
    assert (convergence_verdict(record) == "too few draws to tell whether the chains agree") == words.startswith("Too")
    assert not mixed_as_shuffled(record)  # never called converged above R̂ 1.05
    lines = convergence_lines(SimpleNamespace(info={"diagnostics": record}, num_chains=4, num_draws=30))
    assert ("above 1.1 the chains disagree" in lines[1]) == words.startswith("The")  # no scale that contradicts it
    few = {**record, "draws": 8}  # the shuffles of 8 draws reach any R̂: no benefit of the doubt
    assert convergence_warning({"diagnostics": few}).startswith("The chains disagree")


@pytest.mark.parametrize(("chains", "draws", "words"), [(1, 50, "one chain"), (3, 2, "2 draws per chain")])
def test_too_few_chains_or_draws_is_na_with_the_reason(two_halves, chains, draws, words) -> None:
    record = diagnose(_softmax_posterior(chains, draws, [0.0] * chains), two_halves)
    assert record["status"] == "n/a" and words in record["reason"]


def test_train_records_convergence_and_info_reads_it(tiny_mnist, tmp_path, capsys) -> None:
    out = tmp_path / "s.pt"
    rc = main(["train", "--data-dir", str(tiny_mnist), "--model", "softmax", "--method", "sghmc",
               "--set", "num_chains=2", "--set", "epochs=8", "--set", "burn_in_epochs=2", "--set", "thin=1",
               "--seed", "1", "--out", str(out), "--eval-samples", "4"])
    assert rc == 0
    assert "convergence:" in capsys.readouterr().out
    record = load_posterior(out).info["diagnostics"]
    assert record["status"] == "measured" and record["chains"] == 2 and record["draws"] == 18
    assert record["probe"].startswith("the first 100 images of")
    assert rc == main(["info", str(out), "--json"])
    facts = json.loads(capsys.readouterr().out)
    assert facts["method"] == "sghmc" and facts["chains"] == 2 and facts["draws"] == 18
    assert facts["convergence"]["rhat_max"] == pytest.approx(record["rhat_max"])
    assert facts["seed"] == 1 and facts["training_data"]["images"] == 300
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 chains × 18 draws" in text and "largest R̂" in text and "seed          1" in text
    assert "trained on    mnist@" in text  # a folder's data set by its name
    assert main(["info", str(resources_dir() / "models" / "paper_softmax_hmc.pt")]) == 0
    assert "trained on    MNIST training digits (mnist-train)\n" in capsys.readouterr().out


def test_keep_draws_measures_the_whole_run_and_keeps_fewer_draws(tmp_path, tiny_mnist, capsys) -> None:
    """--keep-draws: R̂ and ESS come from every draw of the run; the file holds N evenly spaced
    draws of each chain (the first and the last among them), its record and its lines say both,
    and diagnose does not replace that record by one of the kept draws."""
    out = tmp_path / "kept.pt"
    argv = ["train", "--data-dir", str(tiny_mnist), "--model", "softmax", "--method", "sgld", "--set",
            "num_chains=2", "--set", "epochs=8", "--set", "burn_in_epochs=2", "--set", "thin=1", "--seed", "1",
            "--eval-samples", "4"]
    assert main([*argv, "--out", str(tmp_path / "all.pt")]) == 0
    assert main([*argv, "--out", str(out), "--keep-draws", "5"]) == 0
    full, kept = load_posterior(tmp_path / "all.pt"), load_posterior(out)
    assert full.num_draws == 18 and kept.num_draws == 5
    for name, tensor in kept.samples.items():
        assert torch.equal(tensor, full.samples[name][:, [0, 4, 8, 13, 17]])
    record = kept.info["diagnostics"]
    # measured on all 18 of each chain, with the 5 kept measured beside them
    assert {k: v for k, v in record.items() if k != "stored"} == {**full.info["diagnostics"], "kept_draws": 5}
    assert record["stored"]["chains"] == 2 and record["stored"]["draws"] == 5
    lines = convergence_lines(kept)
    assert lines[0] == "2 chains × 5 draws."
    assert any(line.endswith("over all 2 × 18 draws of the run; the file keeps 5 of each chain's, evenly spaced.") for line in lines)
    capsys.readouterr()
    assert main(["info", "--json", str(out)]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["chains"], facts["draws"], facts["measured_draws"]) == (2, 5, 18)
    assert main(["info", str(out)]) == 0
    assert "2 chains × 5 draws (of 18 a chain in the run, all measured for convergence)" in capsys.readouterr().out
    assert main(["diagnose", str(out), "--data", str(tiny_mnist)]) == 0
    assert "on the 2 × 5 draws it stores" in capsys.readouterr().out
    assert load_posterior(out).info["diagnostics"] == record  # the run's figures kept, the stored ones reproduced
    map_argv = ["train", "--data-dir", str(tiny_mnist), "--model", "softmax", "--method", "map"]
    for command, words in (([*argv, "--keep-draws", "2"], "at least 4 draws"),
                           ([*map_argv, "--keep-draws", "5"], "MAP has none")):
        assert main([*command, "--out", str(tmp_path / "no.pt")]) == 2
        assert words in capsys.readouterr().err and not (tmp_path / "no.pt").exists()


def test_diagnose_adds_the_record_and_keeps_the_file_valid(tmp_path, two_halves, tiny_mnist, capsys) -> None:
    post = _softmax_posterior(2, 8, [0.0, 2.0])
    path = save_posterior(post, tmp_path / "apart.pt", storage="float16")
    before = load_posterior(path)
    assert "diagnostics" not in before.info
    assert any("not measured" in line for line in convergence_lines(before))
    assert main(["diagnose", str(path), "--data", str(tiny_mnist)]) == 0
    assert "the chains disagree" in capsys.readouterr().out
    after = load_posterior(path)  # the checksum still holds
    assert after.info["diagnostics"]["rhat_max"] > 1.1
    for name, tensor in before.samples.items():
        assert torch.equal(tensor, after.samples[name])  # weights bit for bit
    lines = convergence_lines(after)
    assert lines[0] == "2 chains × 8 draws." and "the chains disagree" in lines[1]
    assert any("too few draws per chain (8) to estimate" in line for line in lines)  # ESS needs 10 per chain


def test_info_on_the_bundled_files(tmp_path, capsys) -> None:
    models = resources_dir() / "models"
    assert main(["info", str(models / "network_lenet5_sghmc.pt")]) == 0
    text = capsys.readouterr().out
    assert "SGHMC" in text and "LeNet-5" in text and "4 chains × 25 draws" in text
    assert main(["info", "--json", str(models / "network_lenet5_mc_dropout.pt")]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["convergence"]["status"] == "n/a" and "no chains" in facts["convergence"]["reason"]
    copy = tmp_path / "map.pt"
    shutil.copy(models / "paper_softmax_map.pt", copy)
    assert main(["diagnose", str(copy)]) == 0
    assert "one chain" in load_posterior(copy).info["diagnostics"]["reason"]


def test_hmc_acceptance_is_kept_and_said(two_halves) -> None:
    post = _softmax_posterior(2, 10, [0.0, 0.0])
    post.method = "hmc"
    post.info["acceptance_rate"] = 0.81
    record = diagnose(post, two_halves)
    assert record["acceptance"] == pytest.approx(0.81)
    post.info["diagnostics"] = record
    assert "HMC accepted 81% of its proposals." in convergence_lines(post)


def _probe_like(rng, chains: int, draws: int, shift: float = 0.0) -> np.ndarray:
    """(chains, draws, images, classes) of 2-class probabilities from independent draws, the last
    chain's logits moved by ``shift`` (a chain that has not reached the others)."""
    logits = rng.normal(size=(chains, draws, 300, 1)) * 0.3 + rng.normal(size=(1, 1, 300, 1))
    logits[-1] += shift
    p = 1 / (1 + np.exp(-logits))
    return np.concatenate([p, 1 - p], axis=-1)


def test_the_shuffled_baseline_passes_mixed_chains_and_fails_a_chain_left_behind() -> None:
    """Independent draws (a perfect sampler): their largest R̂ over 600 probabilities is above
    1.01 by chance, yet they agree as well as shuffled draws do. One chain shifted by half the
    draws' spread: the share above 1.01 is far above the shuffled draws'."""
    from core.analysis.diagnostics import RHAT_TIGHT, shuffled_baseline
    from core.engine import convergence
    from core.engine.naming import mixed_as_shuffled

    rng = np.random.default_rng(0)
    for shift, mixed in ((0.0, True), (0.15, False)):
        probs = _probe_like(rng, 4, 100, shift)
        flat = probs.reshape(4, 100, -1)
        rhat = convergence.rhat(flat)
        worst, baseline = shuffled_baseline(probs, np.ones(probs.shape[2:], dtype=bool), seed=0)
        record = {"status": "measured", "rhat_max": float(rhat.max()), "rhat_above_1_01": float((rhat > RHAT_TIGHT).mean()),
                  "rhat_max_shuffled": worst, "rhat_above_1_01_shuffled": baseline}
        assert worst > 1.0 and 0.0 < baseline < 0.5
        assert mixed_as_shuffled(record) is mixed, (shift, record)
        if mixed:
            assert record["rhat_max"] > RHAT_TIGHT  # the literal target fails on chance alone
    assert not mixed_as_shuffled({"status": "measured", "rhat_max": 1.2, "rhat_above_1_01": 0.0,
                                  "rhat_above_1_01_shuffled": 0.1})  # never above the cap
    assert not mixed_as_shuffled({"status": "measured", "rhat_max": 1.02})  # no baseline recorded


def test_the_reference_is_called_exact_when_its_chains_mix_as_shuffled_draws_do() -> None:
    from core.engine.tiers import reference_words

    record = {"status": "measured", "chains": 4, "draws": 200, "rhat_max": 1.0204, "rhat_above_1_01": 0.0057,
              "rhat_max_shuffled": 1.0188, "rhat_above_1_01_shuffled": 0.0092}
    short, sentence = reference_words({"diagnostics": record})
    assert short == "Exact inference (HMC)"
    assert "1.020" in sentence and "0.6%" in sentence and "800 draws" in sentence and "0.9%" in sentence
    worse = {**record, "rhat_above_1_01": 0.05}
    assert reference_words({"diagnostics": worse})[0] == "HMC (not converged, R̂ 1.020)"


@pytest.mark.parametrize(("above", "words"), [(0.0011, "0.1%"), (0.0006, "under 0.1%"), (0.9, "90%")])
def test_a_small_share_above_1_1_is_not_rounded_to_nothing(above, words) -> None:
    record = {"status": "measured", "chains": 4, "draws": 30, "rhat_max": 1.18, "rhat_above_1_1": above}
    lines = convergence_lines(SimpleNamespace(info={"diagnostics": record}, num_chains=4, num_draws=30))
    assert f"R̂ is above 1.1 for {words} of the probe's class probabilities." in lines


@pytest.mark.parametrize(("bulk", "tail", "words"), [(472.04, 354.2, "472 independent draws for the mean and 354"),
                                                      (1398.4, 5.83, "1,398 independent draws for the mean and 5.8")])
def test_effective_draws_and_the_probe_read_as_words(bulk, tail, words) -> None:
    """Whole draws from 10 up (a person counts draws), a decimal below; a known probe set by name."""
    record = {"status": "measured", "chains": 4, "draws": 200, "rhat_max": 1.004, "ess_bulk_min": bulk,
              "ess_tail_min": tail, "probe": "the first 1000 images of mnist-test (their labels are not read)"}
    lines = convergence_lines(SimpleNamespace(info={"diagnostics": record}, num_chains=4, num_draws=200))
    assert f"Worth about {words} for the 5%/95% tails (smallest ESS of 800 draws)." in lines
    assert "Measured on the first 1,000 MNIST test digits (their labels are not read)." in lines
    long_run = {**record, "draws": 840}
    lines = convergence_lines(SimpleNamespace(info={"diagnostics": long_run}, num_chains=4, num_draws=30))
    assert any(line.endswith("(smallest ESS of 3,360 draws).") for line in lines)
    folder = {**record, "probe": "the first 40 images of my-digits (their labels are not read)"}
    lines = convergence_lines(SimpleNamespace(info={"diagnostics": folder}, num_chains=4, num_draws=200))
    assert "Measured on the first 40 images of my-digits (their labels are not read)." in lines
