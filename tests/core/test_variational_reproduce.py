"""Le Folgoc et al. sanity checks, CI-sized: Gaussian fit ordering and the RBF regression."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from core.commands.reproduce import load_all
from core.commands.reproduce.lefolgoc import (
    D,
    dropout_support,
    gaussian_experiment,
    gaussian_kl,
    mc_dropout_optimum,
    rbf_experiment,
    rbf_problem,
)


def test_closed_form_gaussian_kl_matches_torch():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 4, generator=g, dtype=D), torch.randn(4, 4, generator=g, dtype=D)
    ma, mb = torch.randn(4, generator=g, dtype=D), torch.randn(4, generator=g, dtype=D)
    ca, cb = a @ a.T + 0.1 * torch.eye(4, dtype=D), b @ b.T + 0.1 * torch.eye(4, dtype=D)
    ref = kl_divergence(MultivariateNormal(ma, ca), MultivariateNormal(mb, cb))
    assert gaussian_kl(ma, ca, mb, cb) == pytest.approx(float(ref), rel=1e-10)


def test_gaussian_fit_kl_falls_with_rank_and_vanishes_at_full_rank():
    torch.set_num_threads(1)
    rows = gaussian_experiment(0, ranks=(2, 8), steps=700, lr=0.05, num_samples=8)
    kl = {r["method"]: r["kl_p_q"] for r in rows}
    assert kl["MAP"] == math.inf
    assert kl["MF-VI"] > kl["sN-VI rank 2"] > kl["sN-VI rank 8"]
    assert kl["sN-VI rank 8"] < 0.1


def test_mc_dropout_optimum_minimises_the_enumerated_dropout_objective():
    """The closed-form ridge solution zeroes the gradient of the exact average over all 1024 masks."""
    pb = rbf_problem(0)
    keep = 0.5
    theta = mc_dropout_optimum(pb, keep).clone().requires_grad_(True)
    masks = dropout_support(torch.ones(10, dtype=D), keep) * keep  # the 0/1 masks
    preds = (masks * theta / keep) @ pb["phi"].T  # (1024, N)
    objective = (pb["y"] - preds).pow(2).sum(-1).mean() / (2 * pb["noise"] ** 2)
    objective = objective + keep / 2 * theta.pow(2).sum()
    (grad,) = torch.autograd.grad(objective, theta)
    assert grad.abs().max() < 1e-8
    assert dropout_support(theta.detach()).shape == (1024, 10)


def test_rbf_full_rank_fit_recovers_the_exact_posterior_and_mf_its_closed_form_optimum():
    torch.set_num_threads(1)
    rows, _ = rbf_experiment(1, ranks=(10,), steps=1200, lr=0.05, num_samples=8)
    by = {r["method"]: r for r in rows}
    assert by["MAP"]["log_q_theta_star"] == -math.inf
    assert by["MC dropout (p=0.5)"]["kl_p_q"] == math.inf
    assert by["sN-VI rank 10"]["kl_p_q"] < 0.5
    assert by["MF-VI"]["kl_p_q"] == pytest.approx(
        by["MF-VI closed-form optimum"]["kl_p_q"], rel=0.1
    )
    assert by["MF-VI"]["kl_p_q"] > 10 * by["sN-VI rank 10"]["kl_p_q"]


@pytest.mark.parametrize("target", ["lefolgoc-gaussian", "lefolgoc-rbf"])
def test_reproduce_commands_write_tables_and_figures(target, tmp_path):
    from core.commands.main import main

    assert target in load_all()
    stem = target.replace("-", "_")
    code = main(["reproduce", target, "--out", str(tmp_path), "--seeds", "1", "--steps", "20"])
    assert code == 0
    for ext in ("csv", "md", "png"):
        assert (tmp_path / f"{stem}.{ext}").stat().st_size > 100
    assert "MF-VI" in (tmp_path / f"{stem}.md").read_text()


@pytest.mark.parametrize("target", ["lefolgoc-gaussian", "lefolgoc-rbf"])
def test_reproductions_say_what_they_do_before_the_first_step(target, tmp_path, monkeypatch, capsys):
    """The first line (what is fitted, how many fits of how many steps, about how long) is on
    the terminal before any fit takes a step, and the bar counts every fit."""
    import core.commands.reproduce.lefolgoc as lefolgoc
    from core.commands.main import main

    said_first: list[str] = []
    fit = lefolgoc.fit_density

    def first_step_after_the_line(*args, **kwargs):
        said_first.append(capsys.readouterr().err)
        return fit(*args, **kwargs)

    monkeypatch.setattr(lefolgoc, "fit_density", first_step_after_the_line)
    assert main(["reproduce", target, "--out", str(tmp_path), "--seeds", "2", "--steps", "20"]) == 0
    first = said_first[0]
    assert "Le Folgoc" in first and "2 seeds, 10 fits of 20 Adam steps" in first and "on 2 cores" in first
    err = "".join(said_first) + capsys.readouterr().err
    assert "10/10" in err and "10 fits in" in err and len(said_first) == 10
