"""Variational methods end to end: fit, progress records, prediction, save/load, CLI, memory."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from core.engine.inference import get_method
from core.engine.inference.base import Dataset, accuracy
from core.engine.inference.local_reparam import LocalReparameterisation
from core.engine.inference.param_layout import ParamLayout
from core.engine.inference.variational import VariationalPosterior
from core.engine.models import ArchSpec, build_model, num_parameters
from core.engine.runner import drain
from core.engine.store import load_posterior, save_posterior

MNIST = Path("/work/shared/data/mnist")


def _blobs(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.rand(n, 1, 28, 28, generator=g) * 0.3
    x[y == 0, :, :, :14] += 0.6
    x[y == 1, :, :, 14:] += 0.6
    return Dataset(x, y, "blobs")


CASES = [
    ("mfvi", {}),
    ("mfvi", {"local_reparam": False, "sampling": "naive", "prior": "student_t"}),
    ("mfvi", {"prior": "student_t", "prior_df": 4.0}),
    ("snvi", {"rank": 3, "sampling": "unscented"}),
    ("sgmmvi", {"components": 2, "rank": 1}),
    ("vdropout", {"alpha": "per_unit"}),
]


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_variational_method_learns_reports_and_round_trips(name, overrides, tmp_path):
    torch.manual_seed(0)
    data = _blobs()
    arch = ArchSpec("mlp", num_classes=2, hidden=16)
    method = get_method(name)
    config = method.make_config(epochs=3, batch_size=50, lr=1e-2, predict_samples=8, **overrides)
    records = []
    posterior = drain(method.fit(config, arch, data, seed=1), records.append)
    assert isinstance(posterior, VariationalPosterior)
    last = records[-1].values
    for key in ("elbo", "expected_log_likelihood", "kl", "loss"):
        assert math.isfinite(last[key])
    assert last["elbo"] == pytest.approx(last["expected_log_likelihood"] - last["kl"], abs=1e-9)
    assert last["kl"] > 0
    assert accuracy(posterior, data, num_samples=8) > 0.95
    # the ELBO curve, one whole-epoch mean per epoch: it shows whether training had stopped improving
    # (records hold means over the steps since the previous record; a record closes each epoch)
    curve = posterior.info["elbo_per_epoch"]
    per_epoch = len(data) // 50
    means, previous = [0.0] * 3, 0
    for r in records:
        means[(r.step - 1) // per_epoch] += r.values["elbo"] * (r.step - previous) / per_epoch
        previous = r.step
    assert curve == pytest.approx(means, abs=1e-6) and len(curve) == 3
    assert curve[-1] > curve[0]

    probs = posterior.predict_proba(data.x[:5], generator=torch.Generator().manual_seed(3))
    assert probs.shape == (8, 5, 2)
    torch.testing.assert_close(probs.sum(-1), torch.ones(8, 5))
    path = save_posterior(posterior, tmp_path / f"{name}.pt")
    loaded = load_posterior(path, expect_method=name)
    again = loaded.predict_proba(data.x[:5], generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(again, probs)
    assert loaded.config == posterior.config
    # float16 storage (the bundled network tier's mixture) predicts every draw as float32 does, to 1e-3
    half = load_posterior(save_posterior(posterior, tmp_path / f"{name}-half.pt", storage="float16"))
    torch.testing.assert_close(half.predict_proba(data.x[:5], generator=torch.Generator().manual_seed(3)), probs,
                               atol=1e-3, rtol=0)


def test_prediction_draws_differ_between_samples_but_repeat_with_the_seed():
    arch = ArchSpec("mlp", hidden=8)
    p = num_parameters(build_model(arch))
    tensors = {
        "mean": torch.zeros(1, p),
        "diag_std": torch.full((1, p), 0.3),
        "factors": torch.randn(1, p, 2) * 0.1,
        "log_weights": torch.zeros(1),
    }
    post = VariationalPosterior("snvi", arch, {}, 0, "x", tensors)
    x = torch.rand(4, 1, 28, 28)
    a = post.predict_proba(x, 6, torch.Generator().manual_seed(0))
    b = post.predict_proba(x, 6, torch.Generator().manual_seed(0))
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a[0], a[1])
    # one generator object keeps its draws across calls (batches of one data set) ...
    g = torch.Generator().manual_seed(1)
    first = post.predict_proba(x[:2], 6, g)
    torch.testing.assert_close(post.predict_proba(x[2:], 6, g), post.predict_proba(x, 6, g)[:, 2:])
    torch.testing.assert_close(post.predict_proba(x[:2], 6, g), first)
    assert not torch.allclose(first, a[:, :2])  # ... and another one draws anew
    # without a generator, a bank seeded by the posterior's seed is reused
    torch.testing.assert_close(post.predict_proba(x, 6), post.predict_proba(x, 4 + 2))
    assert post.predict_proba(x, 3).shape == (3, 4, 10)
    with pytest.raises(ValueError, match="parameters"):
        VariationalPosterior("snvi", ArchSpec("lenet"), {}, 0, "x", tensors)


def test_local_reparameterisation_gives_the_exact_pre_activation_moments():
    layer = nn.Linear(6, 3)
    model = nn.Sequential(layer)
    hooks = LocalReparameterisation(model)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(1, 6, generator=g).expand(20000, 6)
    w_var = torch.rand(3, 6, generator=g) * 0.2
    b_var = torch.rand(3, generator=g) * 0.1
    hooks.variances = {"0.weight": w_var, "0.bias": b_var}
    hooks.generator = g
    with torch.no_grad():
        out = model(x)
    mean = x[0] @ layer.weight.detach().T + layer.bias.detach()
    var = x[0] ** 2 @ w_var.T + b_var
    torch.testing.assert_close(out.mean(0), mean, atol=0.02, rtol=0)
    torch.testing.assert_close(out.var(0), var, atol=0, rtol=0.05)
    hooks.variances = None
    with torch.no_grad():
        torch.testing.assert_close(model(x[:2]), layer(x[:2]))
    hooks.remove()


def test_conv_noise_is_one_whole_kernel_draw_per_example_as_in_prediction():
    # The audit's mismatch: independent noise at every position trains another model than the
    # whole-weight draws predicted with. On a constant image every interior position sees the
    # same patch, so under one kernel draw they must all agree; their common spread is x² σ².
    layer = nn.Conv2d(2, 3, 3)
    model = nn.Sequential(layer)
    hooks = LocalReparameterisation(model)
    g = torch.Generator().manual_seed(1)
    x = torch.full((20000, 2, 6, 6), 0.7)
    w_var = torch.rand(3, 2, 3, 3, generator=g) * 0.2
    b_var = torch.rand(3, generator=g) * 0.1
    hooks.variances = {"0.weight": w_var, "0.bias": b_var}
    hooks.generator = g
    with torch.no_grad():
        out = model(x)
    hooks.remove()
    with torch.no_grad():
        plain = layer(x[:1])
    assert out.shape == (20000, 3, 4, 4)
    torch.testing.assert_close(out, out[:, :, :1, :1].expand_as(out), atol=1e-5, rtol=0)
    assert out[:2, 0, 0, 0].unique().numel() == 2  # each example draws its own kernel
    var = (0.7**2) * w_var.sum((1, 2, 3)) + b_var
    torch.testing.assert_close(out[:, :, 0, 0].mean(0), plain[0, :, 0, 0], atol=0.02, rtol=0)
    torch.testing.assert_close(out[:, :, 0, 0].var(0), var, atol=0, rtol=0.05)


def test_variational_dropout_shares_alpha_per_input_unit_or_per_weight():
    from core.engine.inference import vdropout

    arch = ArchSpec("lenet")
    for sharing, first_fc in (("per_unit", (1, 800)), ("per_weight", (500, 800))):
        config = vdropout.VdropoutConfig(alpha=sharing)
        state = vdropout.init(config, arch, num_train=10, seed=0)
        shapes = {k: tuple(v.shape) for k, v in state.variational.log_alpha.items()}
        assert shapes["classifier__1__weight"] == first_fc
        assert "features__0__bias" not in shapes  # biases are deterministic
        state.local.remove()


def test_variational_dropout_posterior_scale_is_sqrt_alpha_times_mean():
    data = _blobs(100)
    method = get_method("vdropout")
    config = method.make_config(epochs=1, batch_size=50, init_alpha=0.25, alpha_lr=1e-9, lr=1e-9)
    post = drain(method.fit(config, ArchSpec("mlp", num_classes=2, hidden=8), data, 0))
    weights = post.layout.unflatten(post.diag_std[0])
    means = post.layout.unflatten(post.mean[0])
    torch.testing.assert_close(
        weights["net.1.weight"], 0.5 * means["net.1.weight"].abs(), rtol=1e-5, atol=1e-7
    )
    assert (weights["net.1.bias"] == 0).all()


class _MaxNumel(TorchDispatchMode):
    """Records the largest tensor any op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_snvi_on_lenet_never_creates_a_p_by_p_tensor():
    """One sN-VI training step and a log-density on LeNet (P ≈ 431k) stay O(P K)."""
    from core.engine.inference import snvi

    torch.set_num_threads(1)
    arch = ArchSpec("lenet")
    config = snvi.SnviConfig(rank=8, num_samples=2, batch_size=4, epochs=1)
    state = snvi.init(config, arch, num_train=100, seed=0)
    p = state.layout.size
    assert p == ParamLayout.of(build_model(arch)).size > 400_000
    batch = (torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3]))
    with _MaxNumel() as probe:
        _, info = snvi.step(state, batch, torch.Generator().manual_seed(0), config)
        state.variational.log_prob(torch.zeros(1, p))
    assert math.isfinite(info["elbo"])
    # the largest tensor is U (P × K) or a few stacked draws, far from P² ≈ 1.9e11
    assert probe.largest <= p * config.rank
    assert probe.largest < p**2 / 10_000


@pytest.mark.skipif(not (MNIST / "t10k-images-idx3-ubyte.gz").exists(), reason="needs MNIST")
def test_cli_trains_an_snvi_mlp_and_saves_it(tmp_path, capsys):
    from core.commands.main import main

    out = tmp_path / "snvi.pt"
    code = main(
        [
            "train", "--method", "snvi", "--model", "mlp", "--hidden", "16",
            "--data-dir", str(MNIST), "--limit", "300", "--eval-samples", "2",
            "--set", "epochs=1", "--set", "rank=2", "--set", "sampling=unscented",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    assert "test accuracy" in capsys.readouterr().out
    post = load_posterior(out, expect_method="snvi")
    # learning itself is checked on the blobs above; here the CLI path and the record matter
    assert post.rank == 2 and post.config["sampling"] == "unscented"
    assert 0.0 <= post.info["test_accuracy"] <= 1.0 and post.info["num_parameters"] > 12_000


def test_mixture_weights_are_projected_onto_the_floor():
    from core.engine.inference.sgmmvi import floor_weights

    for weights, floor in (([0.964, 0.027, 0.009], 1 / 6), ([0.5, 0.3, 0.2], 1 / 6), ([0.9, 0.05, 0.03, 0.02], 0.125),
                           ([0.98, 0.01, 0.01], 1 / 3)):
        w = torch.tensor(weights, dtype=torch.float64)
        logits = w.log().clone()
        floor_weights(logits, floor)
        out = torch.softmax(logits, 0)
        assert float(out.sum()) == pytest.approx(1.0, abs=1e-12)
        assert bool((out >= floor - 1e-12).all())
        if bool((w >= floor).all()):
            torch.testing.assert_close(out, w)  # already a mixture: left as it is
        else:
            # those raised sit at the floor; the others keep their proportions
            kept = w >= floor
            assert [abs(float(v) - floor) < 1e-9 for v in out[~kept]] == [True] * int((~kept).sum())
            torch.testing.assert_close(out[kept] / out[kept].sum(), w[kept] / w[kept].sum())
    equal = torch.zeros(3, dtype=torch.float64)
    floor_weights(equal, 1 / 3)  # the floor at an equal share: the only mixture left
    torch.testing.assert_close(torch.softmax(equal, 0), torch.full((3,), 1 / 3, dtype=torch.float64))


def test_a_mixture_fit_keeps_every_component_above_its_floor():
    data = _blobs()
    method = get_method("sgmmvi")
    arch = ArchSpec("mlp", num_classes=2, hidden=16)
    config = method.make_config(epochs=3, batch_size=50, lr=5e-2, components=3, rank=1, min_share=0.6)
    posterior = drain(method.fit(config, arch, data, seed=1))
    weights = posterior.log_weights.exp()
    assert float(weights.min()) >= 0.6 / 3 - 1e-6 and float(weights.sum()) == pytest.approx(1.0, abs=1e-6)
    assert posterior.info["weight_floor"] == pytest.approx(0.2)
    assert posterior.info["weights"] == [round(float(w), 4) for w in weights]
    with pytest.raises(ValueError, match="min_share"):
        method.make_config(min_share=1.5)


def test_variational_dropout_records_the_share_of_weights_at_its_alpha_limit():
    from core.engine.inference.vdropout import AT_LIMIT, share_at_limit

    data = _blobs(100)
    method = get_method("vdropout")
    config = method.make_config(epochs=2, batch_size=50, init_alpha=0.8, alpha_lr=0.1)
    post = drain(method.fit(config, ArchSpec("mlp", num_classes=2, hidden=8), data, 0))
    mean, std = post.mean[0], post.diag_std[0]
    noisy = std > 0
    alpha = (std[noisy] / mean[noisy].abs()) ** 2
    assert post.info["alpha_at_limit"] == pytest.approx(float((alpha >= AT_LIMIT).float().mean()), abs=1e-4)
    assert 0 < post.info["alpha_at_limit"] <= 1  # the KL pushes every α up: most reach the limit fast
    assert share_at_limit(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 0.5, 0.0])) == 0.5  # the bias left out
