"""The D-SGHMC MNIST tuned protocol's step sizes are chosen on a validation split of the
training images, never on test images."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch

from core.commands.main import main
from core.commands.reproduce import dhmc, dhmc_chains, dhmc_tuning
from core.engine.data import datasets

SMALL = {"epochs": 1, "chains": 1, "draws": 2}


@pytest.fixture
def no_test_images(monkeypatch):
    """Reading the MNIST test split fails the test; the training split reads as usual."""
    load = datasets.load_split

    def train_only(name="mnist", split="train", *args, **kwargs):
        if split != "train":
            raise AssertionError(f"the {split} split was read while tuning")
        return load(name, split, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_split", train_only)


def test_tuning_never_reads_a_test_image(tiny_mnist, no_test_images, one_torch_thread):
    with pytest.raises(AssertionError, match="test split was read"):  # the guard works
        dhmc_chains.load_mnist(str(tiny_mnist), 200)
    chosen, rows = dhmc_tuning.tune_step_sizes(str(tiny_mnist), num_train=200, num_validation=100,
                                        grid={"sgld_step": (1e-4, 2e-4), "sghmc_step": (1e-5,)},
                                        **SMALL)
    assert [(r.key, r.step_size) for r in rows] == [
        ("sgld_step", 1e-4), ("sgld_step", 2e-4), ("sghmc_step", 1e-5)]
    assert all(math.isfinite(r.nll) and 0 <= r.accuracy <= 100 for r in rows)
    assert chosen["sgld_step"] in (1e-4, 2e-4) and chosen["sghmc_step"] == 1e-5
    assert chosen["friction"] == dhmc_chains.TUNED["friction"]


def test_validation_images_are_the_training_tail_disjoint_from_training(tiny_mnist):
    fit, held_out = dhmc_tuning.validation_ranges(300, 200, 60)
    assert (fit, held_out) == (range(0, 200), range(200, 260))
    assert not set(fit) & set(held_out)
    assert dhmc_tuning.validation_ranges(300, 250, 5_000)[1] == range(250, 300)  # the file ends first
    with pytest.raises(ValueError, match="leaves none of the 300 training images"):
        dhmc_tuning.validation_ranges(300, 300, 100)

    data = dhmc_tuning.load_mnist_validation(str(tiny_mnist), 200, 60)
    raw = datasets.load_split(str(tiny_mnist), "train")
    x, y = raw.x.reshape(-1, dhmc_chains.PIXELS), raw.y
    mean = x[:200].mean(0)
    assert torch.equal(data.x_train, x[:200] - mean) and torch.equal(data.y_train, y[:200])
    assert torch.equal(data.x_test, x[200:260] - mean) and torch.equal(data.y_test, y[200:260])


def test_tuning_picks_the_value_with_the_best_validation_nll(tiny_mnist, monkeypatch):
    """With a scoring whose best step size is known, that value is chosen for each sampler,
    and the scoring is handed the validation images."""
    best = {"sgld": 4e-5, "sghmc": 1.6e-5}
    validation = dhmc_tuning.load_mnist_validation(str(tiny_mnist), 200, 100)
    seen = []

    def fake_evaluate(spec, samples, data, **kwargs):
        seen.append(data)
        step = spec.config.step_size
        nll = abs(math.log(step / best[spec.method]))
        acc = 100 - nll  # would favour the same value; the choice reads the NLL
        return dhmc_chains.ChainScores(np.array([acc]), np.zeros((1, 10)), np.zeros((10, 10)), np.array([nll]))

    monkeypatch.setattr(dhmc_tuning, "evaluate", fake_evaluate)
    chosen, rows = dhmc_tuning.tune_step_sizes(str(tiny_mnist), num_train=200, num_validation=100, **SMALL)
    assert chosen == {"sgld_step": 4e-5, "sghmc_step": 1.6e-5, "friction": dhmc_chains.TUNED["friction"]}
    assert len(rows) == sum(len(v) for v in dhmc_tuning.TUNING_GRID.values())
    assert all(torch.equal(d.x_test, validation.x_test) for d in seen)

    # a diverging run scores +inf and is never chosen
    def diverging_run(specs, *args, **kwargs):
        if specs[0].config.step_size == 4e-5:
            raise FloatingPointError("diverged")
        return real_run(specs, *args, **kwargs)

    real_run = dhmc_tuning.run_group
    monkeypatch.setattr(dhmc_tuning, "run_group", diverging_run)
    chosen, rows = dhmc_tuning.tune_step_sizes(str(tiny_mnist), num_train=200, num_validation=100,
                                        grid={"sgld_step": (4e-5, 1e-4)}, **SMALL)
    assert chosen["sgld_step"] == 1e-4 and rows[0].nll == math.inf


def test_cli_tune_uses_the_chosen_values(tiny_mnist, tmp_path, monkeypatch, capsys, one_torch_thread):
    def fixed_choice(root, **kwargs):
        assert kwargs["num_train"] == 200 and kwargs["num_validation"] == 100
        row = dhmc_tuning.TrialRow("sgld_step", 2e-4, 0.5, 90.0, 0.1)
        kwargs["report"](row)
        return {"sgld_step": 2e-4, "sghmc_step": 4e-6, "friction": 0.1}, [row]

    monkeypatch.setattr(dhmc, "tune_step_sizes", fixed_choice)
    out = tmp_path / "dhmc"
    code = main(["reproduce", "dhmc-mnist", "--out", str(out), "--data-dir", str(tiny_mnist),
                 "--protocol", "tuned", "--tune", "--train-size", "200", "--validation-size", "100",
                 "--epochs", "2", "--chains", "1", "--draws", "2", "--methods", "SGLD,SGHMC"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "SGLD" in printed and "Chosen: sgld_step = 0.0002" in printed
    with (out / "table_tuned.csv").open() as fh:
        steps = {r["method"]: float(r["step_size"]) for r in csv.DictReader(fh)}
    assert steps == {"SGLD": 2e-4, "SGHMC": 4e-6}
    assert (out / "tuning.csv").is_file()


def test_cli_refuses_to_tune_without_validation_images(tiny_mnist, tmp_path, capsys):
    code = main(["reproduce", "dhmc-mnist", "--out", str(tmp_path / "o"), "--data-dir",
                 str(tiny_mnist), "--protocol", "tuned", "--tune", "--train-size", "300"])
    assert code == 2
    err = capsys.readouterr().err
    assert "leaves none of the 300 training images for validation" in err
