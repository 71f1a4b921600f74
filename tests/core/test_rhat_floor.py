"""R̂ that can be checked: its floor at the number of draws and quantities measured, and the R̂ of
the draws a file stores, which ``bayescope-cli diagnose FILE`` reproduces from the file alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.analysis.diagnostics import shuffled_baseline
from core.commands.main import main
from core.engine import convergence
from core.engine.naming import convergence_warning, rhat_with_floor, stored_rhat_line
from core.engine.store import file_records


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_perfectly_mixed_chains_at_4_by_25_draws_read_a_floor_well_above_one(seed):
    """iid draws are perfectly mixed chains: over 9,000 quantities (900 images × 10 classes) the
    largest of their R̂ values lies far above 1.0 at 4 × 25 draws (the audit read 1.14–1.15 at 4 ×
    25 of ~9,000), and it sits at the floor their own shuffles give."""
    rng = np.random.default_rng(seed)
    draws = rng.normal(size=(4, 25, 900, 10))
    floor, _ = shuffled_baseline(draws, np.ones((900, 10), bool), seed)
    assert floor > 1.1
    rhat = float(convergence.rhat(draws).max())
    # at the floor: the largest of 9,000 R̂ values is itself random (these three seeds read 0.80–1.27
    # of the floor's distance from 1), far from where chains that disagree read (below)
    assert 0.6 <= (rhat - 1) / (floor - 1) <= 1.5
    # a negative control: chains offset by half a spread from one another are far above their floor
    apart = draws + 0.5 * np.arange(4)[:, None, None, None]
    assert (float(convergence.rhat(apart).max()) - 1) / (floor - 1) > 2


def test_an_rhat_is_shown_with_its_floor_and_the_stored_draws_beside_the_runs():
    run = {"status": "measured", "chains": 4, "draws": 250, "kept_draws": 25, "rhat_max": 1.313,
           "rhat_max_shuffled": 1.0175, "rhat_above_1_01": 0.96, "rhat_above_1_01_shuffled": 0.003,
           "stored": {"chains": 4, "draws": 25, "rhat_max": 1.364, "rhat_max_shuffled": 1.19}}
    assert rhat_with_floor(run) == "1.31 (floor at these draws 1.018)"
    assert rhat_with_floor(run["stored"]) == "1.36 (floor at these draws 1.19)"
    assert convergence_warning({"diagnostics": run}) == (
        "The chains disagree: this posterior may not have converged (R̂ 1.31 (floor at these draws 1.018)).")
    assert stored_rhat_line(run).startswith("On the 4 × 25 draws the file stores, largest R̂ 1.36 (floor at these "
                                            "draws 1.19)")
    assert stored_rhat_line({k: v for k, v in run.items() if k != "stored"}) is None
    assert rhat_with_floor({"rhat_max": 1.2}) == "1.20"  # an older record without a floor


def test_diagnose_reproduces_the_stored_draws_figure_a_training_recorded(tiny_mnist, tmp_path, capsys):
    """``train --keep-draws`` records R̂ on the run's draws and on the draws the file keeps;
    ``diagnose FILE`` measures the file alone and reads the same stored figure, and leaves the
    run's (whose draws are gone) as it was."""
    path = tmp_path / "sgld.pt"
    argv = ["train", "--data-dir", str(tiny_mnist), "--model", "softmax", "--method", "sgld", "--set",
            "num_chains=2", "--set", "epochs=8", "--set", "burn_in_epochs=2", "--set", "thin=1", "--seed", "1",
            "--eval-samples", "4", "--keep-draws", "6", "--out", str(path), "--storage", "float16"]
    code = main(argv)
    assert code == 0, capsys.readouterr().err
    record = file_records(path)["info"]["diagnostics"]
    assert record["status"] == "measured" and record["kept_draws"] == 6 and record["draws"] > 6
    stored = record["stored"]
    assert stored["chains"] == 2 and stored["draws"] == 6 and stored["rhat_max_shuffled"] is not None
    capsys.readouterr()
    assert main(["diagnose", str(path), "--data", str(tiny_mnist)]) == 0
    again = file_records(path)["info"]["diagnostics"]
    assert again["stored"]["rhat_max"] == pytest.approx(stored["rhat_max"], rel=1e-9)
    assert again["stored"]["rhat_max_shuffled"] == pytest.approx(stored["rhat_max_shuffled"], rel=1e-9)
    assert {k: v for k, v in again.items() if k != "stored"} == {k: v for k, v in record.items() if k != "stored"}
    said = capsys.readouterr().out
    assert "on the 2 × 6 draws it stores" in said and "floor at these draws" in said
    assert main(["info", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["convergence"]["stored"]["rhat_max"] == pytest.approx(stored["rhat_max"])


def test_every_bundled_file_that_keeps_fewer_draws_records_the_r_hat_of_those_it_keeps():
    """The figure a person can check from the file: an independent audit (its own code, ArviZ)
    read the network tier's stored draws at SGLD 1.36 and SGHMC 1.34."""
    from core.engine.resources import resources_dir

    files = sorted((resources_dir() / "models").glob("*.pt"))
    records = {f.stem: file_records(f)["info"].get("diagnostics") or {} for f in files}
    kept = {name: r for name, r in records.items() if r.get("kept_draws")}
    if not kept:
        pytest.skip("no bundled file keeps fewer draws than its run")
    for name, record in kept.items():
        stored = record.get("stored")
        assert stored and stored["draws"] == record["kept_draws"] and stored["chains"] == record["chains"], name
        assert stored["rhat_max_shuffled"] > record["rhat_max_shuffled"], name  # fewer draws, a higher floor
    if "network_lenet5_sgld" in kept:
        assert kept["network_lenet5_sgld"]["stored"]["rhat_max"] == pytest.approx(1.36, abs=0.01)
        assert kept["network_lenet5_sghmc"]["stored"]["rhat_max"] == pytest.approx(1.34, abs=0.01)
