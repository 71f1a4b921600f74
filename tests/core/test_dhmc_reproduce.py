"""The D-SGHMC MNIST reproduction: its fast target and masks, its protocol, a tiny run."""

from __future__ import annotations

import csv

import pytest
import torch

from core.commands.main import main
from core.commands.reproduce import dhmc_chains
from core.engine.inference.sampling import FunctionTarget


def test_softmax_target_gradient_matches_autograd():
    g = torch.Generator().manual_seed(0)
    params = {"linear.weight": 0.1 * torch.randn(3, 10, 784, generator=g),
              "linear.bias": torch.randn(3, 10, generator=g)}
    x = torch.randn(3, 20, 784, generator=g)
    y = torch.randint(0, 10, (3, 20), generator=g)

    def log_prob(p, batch):
        xb, yb = batch
        logits = torch.einsum("cbd,ckd->cbk", xb, p["linear.weight"]) + p["linear.bias"][:, None]
        ll = torch.log_softmax(logits, -1).gather(-1, yb[..., None]).squeeze(-1).sum(1)
        prior = p["linear.weight"].pow(2).sum((1, 2)) + p["linear.bias"].pow(2).sum(1)
        return 7.0 * ll - 0.5 * prior

    expected_value, expected_grad = FunctionTarget(log_prob).log_prob_and_grad(params, (x, y))
    value, grad = dhmc_chains.SoftmaxRegressionTarget(7.0, 140).log_prob_and_grad(params, (x, y))
    assert torch.allclose(value, expected_value, rtol=1e-5)
    for k in grad:
        assert torch.allclose(grad[k], expected_grad[k], rtol=1e-4, atol=1e-4)


def test_chain_masks_drop_at_each_chains_rate_and_keep_the_mean():
    drop = torch.tensor([0.0, 0.0, 0.9, 0.5, 0.1])
    masks = dhmc_chains.ChainMasks(drop, (200, 784))
    x = torch.full((5, 200, 784), 3.0)
    out = masks.apply(x, torch.Generator().manual_seed(0))
    assert torch.equal(out[:2], x[:2])
    for c in range(2, 5):
        zeros = (out[c] == 0).float().mean()
        assert zeros == pytest.approx(float(drop[c]), abs=0.005)
        assert out[c].mean() == pytest.approx(3.0, rel=0.02)
    with pytest.raises(ValueError, match="must come after"):
        dhmc_chains.ChainMasks(torch.tensor([0.5, 0.0]), (2,))


def test_paper_protocol_is_the_authors_edward_settings():
    specs = {s.label: s for s in dhmc_chains.paper_specs()}
    # the paper's p is the keep probability: drop rate 1 − p
    assert [round(specs[f"D-SGHMC p={p:g}"].config.drop_rate, 6) for p in (0.1, 0.5, 0.9)] == [
        0.9, 0.5, 0.1]
    sghmc = specs["SGHMC"].config
    # Edward: v ← (1 − ½·1.0) v + 1e-6 ĝ + N(0, 1e-6 · 1.0)
    assert 1 - sghmc.friction == 0.5 and sghmc.step_size == 1e-6
    assert 2 * (sghmc.friction - sghmc.noise_estimate) * sghmc.step_size == pytest.approx(1e-6)
    sgld = specs["SGLD"].config
    from core.engine.inference.sgld import step_size_at

    assert step_size_at(sgld, 0) == pytest.approx(1e-4)
    assert step_size_at(sgld, 999) == pytest.approx(1e-4 / 1000**0.55)
    assert all(s.config.mask_at_prediction for s in specs.values() if s.method == "dsghmc")


def test_tiny_reproduction_writes_tables_and_plots(shared_data, tmp_path, capsys):
    out = tmp_path / "dhmc"
    code = main([
        "reproduce", "dhmc-mnist", "--out", str(out), "--data-dir", str(shared_data / "mnist"),
        "--epochs", "2", "--chains", "2", "--draws", "3", "--train-size", "1000",
        "--test-limit", "300",
    ])
    assert code == 0
    for name in ("table_paper.csv", "table_tuned.csv", "sensitivity.png", "sensitivity.csv",
                 "per_class_error_paper.png", "probability_matrix_tuned.png",
                 "per_class_error_tuned.csv", "summary.md"):
        assert (out / name).is_file(), name
    with (out / "table_tuned.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["method"] for r in rows] == ["SGLD", "SGHMC", "D-SGHMC p=0.1", "D-SGHMC p=0.5",
                                           "D-SGHMC p=0.9"]
    assert all(0.0 <= float(r["accuracy_mean"]) <= 100.0 for r in rows)
    assert "## paper" in capsys.readouterr().out
