"""Distance of a predictive from a reference (Izmailov et al. 2021): hand-computed cases and
``bayescope-cli fidelity`` end to end with a small HMC reference fitted here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from core.analysis.fidelity import (
    PROBABILITY_FLOOR,
    log_posterior_level,
    predictive_fidelity,
    why_not_level,
)
from core.commands.main import main
from core.engine.inference import get_method
from core.engine.inference.base import Dataset, SampledPosterior
from core.engine.inference.mc_dropout import DropoutPosterior
from core.engine.models import ArchSpec
from core.engine.runner import drain, fit_posterior
from core.engine.store import save_posterior


def test_identical_predictives_are_at_distance_zero_and_agree():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    f = predictive_fidelity(p, p.copy())
    assert (f.kl, f.total_variation, f.agreement, f.num_inputs) == (0.0, 0.0, 1.0, 2)


def test_hand_computed_distances():
    reference = np.array([[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])
    method = np.array([[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]])
    f = predictive_fidelity(reference, method)
    # input 1: KL = 1·ln(1/0.25) = ln 4 (the reference's 0 adds 0·log 0 = 0); TV = ½(0.75 + 0.75)
    # input 2: identical → 0, 0; input 3: the method rules class 1 out, which counts as the
    # floor 1e-12: KL = ½ ln(½/1) + ½ ln(½/1e-12); TV = ½(½ + ½) = ½
    kl3 = 0.5 * math.log(0.5) + 0.5 * math.log(0.5 / PROBABILITY_FLOOR)
    assert f.per_input_kl.tolist() == pytest.approx([math.log(4), 0.0, kl3])
    assert f.kl == pytest.approx((math.log(4) + kl3) / 3)
    assert f.per_input_total_variation.tolist() == pytest.approx([0.75, 0.0, 0.5])
    assert f.total_variation == pytest.approx(1.25 / 3)
    # argmax: input 1 differs (0 vs 1); inputs 2 and 3 tie at 0 on the reference's side (lowest
    # index wins) and the method picks 0 in both
    assert f.per_input_agreement.tolist() == [False, True, True] and f.agreement == pytest.approx(2 / 3)


def test_kl_is_not_symmetric_and_tv_is():
    p, q = np.array([[0.9, 0.1]]), np.array([[0.5, 0.5]])
    forward, backward = predictive_fidelity(p, q), predictive_fidelity(q, p)
    assert forward.kl == pytest.approx(0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5))
    assert backward.kl == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1))
    assert forward.total_variation == backward.total_variation == pytest.approx(0.4)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="inputs, classes"):
        predictive_fidelity(np.ones((2, 3)) / 3, np.ones((2, 4)) / 4)


def _mean_predictive(posterior: SampledPosterior, x: torch.Tensor) -> np.ndarray:
    """The predictive computed here by hand: softmax(x·Wᵀ + b) per draw, averaged."""
    w = posterior.samples["linear.weight"].reshape(-1, *posterior.samples["linear.weight"].shape[2:]).double()
    b = posterior.samples["linear.bias"].reshape(-1, posterior.samples["linear.bias"].shape[-1]).double()
    logits = torch.einsum("nd,skd->snk", x.reshape(len(x), -1).double(), w) + b[:, None, :]
    return torch.softmax(logits, -1).mean(0).numpy()


def test_the_log_posterior_level_of_draws_is_the_exact_log_posterior_of_each_draw():
    """Against the log posterior written out by hand (numpy, float64) for 3 × 2 draws of a
    4-class softmax regression on 7 images: log-likelihood over every image (two batches, to
    cross :data:`LEVEL_BATCH`'s split) plus log N(θ; 0, σ²I) without its constant."""
    import core.analysis.fidelity as fidelity

    g = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(3, 2, 4, 784, generator=g) * 0.1, torch.randn(3, 2, 4, generator=g)
    x, y = torch.rand(7, 1, 28, 28, generator=g), torch.tensor([0, 1, 2, 3, 0, 1, 2])
    posterior = SampledPosterior("sgld", ArchSpec("softmax", num_classes=4), {}, 0, "tiny",
                                 {"linear.weight": weight, "linear.bias": bias})
    old, fidelity.LEVEL_BATCH = fidelity.LEVEL_BATCH, 4
    try:
        level = drain(log_posterior_level(posterior, Dataset(x, y), prior_std=0.5, num_draws=6))
    finally:
        fidelity.LEVEL_BATCH = old
    w, b = weight.double().numpy().reshape(6, 4, 784), bias.double().numpy().reshape(6, 4)
    logits = np.einsum("nd,skd->snk", x.double().numpy().reshape(7, 784), w) + b[:, None, :]
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = log_softmax[:, np.arange(7), y.numpy()].sum(1) - 0.5 * ((w ** 2).sum((1, 2)) + (b ** 2).sum(1)) / 0.25
    assert level.values == pytest.approx(expected, rel=1e-6)  # the network computes its logits in float32
    assert level.record() == pytest.approx({"mean": expected.mean(), "sd": expected.std(ddof=1), "draws": 6})


def test_draws_of_another_model_or_prior_are_not_scored_under_the_reference():
    softmax = ArchSpec("softmax", num_classes=4)
    samples = {"linear.weight": torch.zeros(1, 2, 4, 784), "linear.bias": torch.zeros(1, 2, 4)}
    reference = SampledPosterior("hmc", softmax, {"prior_std": 1.0}, 0, "tiny", samples)
    assert why_not_level(SampledPosterior("sgld", softmax, {"prior_std": 1.0}, 0, "tiny", samples), reference) is None
    for config in ({"prior_std": 0.2}, {}):  # another scale, or none stated
        assert why_not_level(SampledPosterior("sgld", softmax, config, 0, "tiny", samples),
                             reference) == "its prior differs from the reference's"
    dropped = ArchSpec("softmax", num_classes=4, drop_rate=0.5)  # D-SGHMC's input masks: another model
    assert why_not_level(SampledPosterior("dsghmc", dropped, {"prior_std": 1.0}, 0, "tiny", samples),
                         reference) == "its model differs from the reference's"
    single = {k: v[:, :1] for k, v in samples.items()}  # MAP: one set of weights, the peak itself
    assert why_not_level(SampledPosterior("map", softmax, {"prior_std": 1.0}, 0, "tiny", single),
                         reference) == "it holds one set of weights, not a spread"
    one = {k: v[0, 0] for k, v in samples.items()}
    assert why_not_level(DropoutPosterior("mc_dropout", dropped, {"prior_std": 1.0}, 0, "tiny", one),
                         reference) == "its model differs from the reference's"  # MC dropout's input masks


def test_a_gaussian_familys_level_is_that_of_the_weight_sets_it_predicts_with(tiny_mnist):
    """Mean-field VI fitted here: its level is the exact log posterior of the draws of its fixed
    bank (the weight sets its predictions use), by the same hand-written formula; a Student-t
    prior or variational dropout's log-uniform one is another posterior."""
    from core.engine.data.datasets import load_split

    data = load_split("mnist", "train", root=tiny_mnist).first(60)
    method = get_method("mfvi")
    posterior = drain(fit_posterior(method, method.make_config(epochs=1), ArchSpec("softmax", num_classes=10),
                                    data, 0))
    reference = SampledPosterior("hmc", posterior.arch, {"prior_std": 1.0}, 0, "tiny",
                                 {"linear.weight": torch.zeros(1, 2, 10, 784), "linear.bias": torch.zeros(1, 2, 10)})
    assert why_not_level(posterior, reference) is None
    level = drain(log_posterior_level(posterior, data, prior_std=1.0, num_draws=5))
    theta = posterior.fixed_draws(5).double()
    w, b = theta[:, : 7840].reshape(5, 10, 784).numpy(), theta[:, 7840:].numpy()
    logits = np.einsum("nd,skd->snk", data.x.double().numpy().reshape(len(data), 784), w) + b[:, None, :]
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = log_softmax[:, np.arange(len(data)), data.y.numpy()].sum(1) - 0.5 * (theta ** 2).sum(1).numpy()
    assert level.values == pytest.approx(expected, rel=1e-6)
    for prior in ({"prior": "student_t", "prior_std": 1.0}, {}):
        other = type(posterior)("mfvi", posterior.arch, prior, 0, "tiny", posterior.state_tensors(), {})
        assert why_not_level(other, reference) == "its prior differs from the reference's"


def test_fidelity_command_against_a_small_hmc_reference(tmp_path, tiny_mnist, capsys):
    from core.analysis.evaluation import resolve_dataset

    train = resolve_dataset(str(tiny_mnist), split="train")
    test = resolve_dataset(str(tiny_mnist)).first(60)
    arch = ArchSpec(name="softmax", num_classes=2, image_size=28)
    hmc = get_method("hmc")
    config = hmc.make_config(num_chains=2, num_warmup=30, num_samples=20, num_leapfrog=3)
    reference = drain(fit_posterior(hmc, config, arch, train, seed=0))
    ref_path = save_posterior(reference, tmp_path / "hmc.pt")
    # a "method" that sees the classes the other way round: the reference's weights swapped
    swapped = {k: v.flip(2) for k, v in reference.samples.items()}
    wrong = SampledPosterior("sghmc", arch, {}, 0, "tiny", swapped)
    wrong_path = save_posterior(wrong, tmp_path / "swapped.pt")
    # one draw only: the reference's first
    single = SampledPosterior("map", arch, {}, 0, "tiny", {k: v[:1, :1] for k, v in reference.samples.items()})
    single_path = save_posterior(single, tmp_path / "one-draw.pt")

    code = main(["fidelity", "--reference", str(ref_path), "--posterior", str(ref_path), str(wrong_path),
                 str(single_path), "--dataset", str(tiny_mnist), "--limit", "60", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["file"]: r for r in out["posteriors"]}
    assert out["num_inputs"] == 60 and out["reference"]["samples"] == 40
    # the reference against itself: the same draws, the same predictive
    same = rows[str(ref_path)]
    assert same["kl"] == pytest.approx(0.0, abs=1e-9) and same["total_variation"] == pytest.approx(0.0, abs=1e-6)
    assert same["agreement"] == 1.0
    # the others against a predictive computed here by hand from the weights
    x = test.x
    p_ref = _mean_predictive(reference, x)
    for path, posterior in ((wrong_path, wrong), (single_path, single)):
        q = _mean_predictive(posterior, x)
        kl = (p_ref * (np.log(p_ref) - np.log(np.maximum(q, PROBABILITY_FLOOR)))).sum(-1).mean()
        tv = 0.5 * np.abs(p_ref - q).sum(-1).mean()
        agree = (p_ref.argmax(-1) == q.argmax(-1)).mean()
        row = rows[str(path)]
        assert row["kl"] == pytest.approx(kl, rel=1e-4, abs=1e-6)
        assert row["total_variation"] == pytest.approx(tv, rel=1e-4, abs=1e-6)
        assert row["agreement"] == pytest.approx(agree)
    assert rows[str(wrong_path)]["agreement"] < 0.1  # it predicts the other class nearly always
    # the table in words
    assert main(["fidelity", "--reference", str(ref_path), "--posterior", str(wrong_path),
                 "--dataset", str(tiny_mnist), "--limit", "60"]) == 0
    text = capsys.readouterr().out
    assert "KL(ref‖it)" in text and "swapped" in text and "60 images" in text


def test_fidelity_refuses_posteriors_of_other_classes(tmp_path, tiny_mnist, capsys):
    two = SampledPosterior("map", ArchSpec(name="softmax", num_classes=2, image_size=28), {}, 0, "tiny",
                           {"linear.weight": torch.zeros(1, 1, 2, 784), "linear.bias": torch.zeros(1, 1, 2)})
    ten = SampledPosterior("map", ArchSpec(name="softmax", num_classes=10, image_size=28), {}, 0, "tiny",
                           {"linear.weight": torch.zeros(1, 1, 10, 784), "linear.bias": torch.zeros(1, 1, 10)})
    a, b = save_posterior(two, tmp_path / "two.pt"), save_posterior(ten, tmp_path / "ten.pt")
    assert main(["fidelity", "--reference", str(a), "--posterior", str(b), "--dataset", str(tiny_mnist)]) == 2
    assert "cannot be compared with the reference" in capsys.readouterr().err
