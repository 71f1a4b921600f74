"""``bayescope-cli evaluate --corruption``: the data set at corruption severities, and one image's sweep."""

from __future__ import annotations

import csv
import json

import pytest

from core.commands.main import main
from core.engine.resources import resources_dir

MODELS = resources_dir() / "models"
FILES = [str(MODELS / f"{name}.pt") for name in ("paper_softmax_hmc", "paper_softmax_mc_dropout")]


def _common(shared_data, out, limit=150):
    return ["evaluate", "--posterior", *FILES, "--data-dir", str(shared_data), "--ood", "notmnist",
            "--limit", str(limit), "--samples", "20", "--seed", "5", "--out", str(out)]


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_severity_zero_matches_the_clean_evaluation_and_noise_lowers_accuracy(shared_data, tmp_path, capsys):
    assert main(_common(shared_data, tmp_path / "clean")) == 0
    capsys.readouterr()
    assert main([*_common(shared_data, tmp_path / "noise"), "--corruption", "noise", "--severities", "0,2,5",
                 "--sweep-image", "mnist-test:0"]) == 0
    printed = capsys.readouterr().out
    clean = json.loads((tmp_path / "clean" / "evaluation.json").read_text())
    rows = _rows(tmp_path / "noise" / "corruption.csv")
    for name in ("paper_softmax_hmc", "paper_softmax_mc_dropout"):
        mine = {float(r["severity"]): r for r in rows if r["posterior"] == name}
        assert sorted(mine) == [0.0, 2.0, 5.0]
        summary = next(s for s in clean["summary"] if s["posterior"] == name)
        for key in ("accuracy", "nll", "brier", "ece"):  # the same images, draws and seed: the same numbers
            assert float(mine[0.0][key]) == summary[key], key
        for ood in (o for o in clean["ood_detection"] if o["posterior"] == name):
            assert float(mine[0.0][f"auroc_{ood['score']}"]) == ood["auroc"]
        accuracy = [float(mine[s]["accuracy"]) for s in (0.0, 2.0, 5.0)]
        assert accuracy[0] >= accuracy[1] >= accuracy[2] and accuracy[2] < accuracy[0] - 0.3, accuracy
        # the printed table holds every column, its clean accuracy as the clean run printed it
        line = next(ln for ln in printed.splitlines() if ln.startswith(name + " ") and "%" not in ln)
        assert f"{100 * summary['accuracy']:.2f}" in line
    assert printed.count("paper_softmax_hmc ") == 3  # accuracy, AUROC by total and by epistemic
    written = {p.name for p in (tmp_path / "noise").iterdir()}
    assert {"corruption.csv", "corruption.json", "corruption.png", "evaluation.json",
            "paper-softmax-hmc-gaussian-noise-sweep.csv", "paper-softmax-hmc-gaussian-noise-sweep.png"} <= written
    sweep = _rows(tmp_path / "noise" / "paper-softmax-hmc-gaussian-noise-sweep.csv")
    assert sorted({float(r["severity"]) for r in sweep}) == [i / 2 for i in range(11)]


@pytest.mark.parametrize(("extra", "words"), [
    (["--corruption", "noise", "--severities", "0,7"], "--severities must be numbers from 0 to 5"),
    (["--corruption", "noise", "--severities", "a,b"], "--severities must be numbers from 0 to 5"),
    (["--sweep-image", "mnist-test:0"], "name it with --corruption"),
    (["--corruption", "occlusion", "--patch-severity", "0"], "--patch-severity must lie above 0"),
    (["--corruption", "noise", "--rotate", "mnist-test:0"], "--rotate and --corruption are separate runs"),
])
def test_meaningless_combinations_are_one_line_errors(shared_data, tmp_path, capsys, extra, words):
    assert main([*_common(shared_data, tmp_path / "out", limit=5), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and words in err[-1] and "Traceback" not in "".join(err)
    assert not (tmp_path / "out").exists()


def test_an_unknown_corruption_names_the_choices(shared_data, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*_common(shared_data, tmp_path / "out", limit=5), "--corruption", "fog"])
    assert stop.value.code == 2
    assert "noise" in capsys.readouterr().err
