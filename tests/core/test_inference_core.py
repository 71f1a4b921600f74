"""The posterior interface, MAP, MC dropout and save/load."""

from __future__ import annotations

import pytest
import torch

from core.engine.inference import get_method
from core.engine.inference.base import Dataset, SampledPosterior, accuracy
from core.engine.inference.mc_dropout import DropoutPosterior, model_precision, weight_decay
from core.engine.models import ArchSpec, build_model, num_parameters
from core.engine.models.dropout import mc_dropout
from core.engine.runner import drain
from core.engine.store import FORMAT_VERSION, PosteriorFileError, load_posterior, save_posterior


def _blobs(n=400, seed=0):
    """Two classes whose images differ in the mean of the left and right halves."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.rand(n, 1, 28, 28, generator=g) * 0.3
    x[y == 0, :, :, :14] += 0.6
    x[y == 1, :, :, 14:] += 0.6
    return Dataset(x, y, "blobs")


def test_lenet_and_mlp_shapes_and_sizes():
    x = torch.rand(3, 1, 28, 28)
    for name in ("softmax", "mlp", "lenet"):
        assert build_model(ArchSpec(name)).forward(x).shape == (3, 10)
    assert num_parameters(build_model(ArchSpec("softmax"))) == 784 * 10 + 10
    assert num_parameters(build_model(ArchSpec("mlp"))) == 784 * 100 + 100 + 100 * 100 + 100 + 1010
    # conv 1→20 (5×5), conv 20→50 (5×5), fc 800→500, fc 500→10
    assert num_parameters(build_model(ArchSpec("lenet"))) == 520 + 25050 + 400500 + 5010


def test_arch_spec_validation():
    with pytest.raises(ValueError, match="unknown architecture"):
        ArchSpec("vgg")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="drop_rate"):
        ArchSpec("mlp", drop_rate=1.0)


def test_mc_dropout_switches_only_dropout():
    model = build_model(ArchSpec("mlp", drop_rate=0.5))
    x = torch.rand(1, 1, 28, 28)
    assert torch.equal(model(x), model(x))  # eval: deterministic
    with mc_dropout(model):
        assert not torch.equal(model(x), model(x))
        assert not model.training  # the model itself stays in eval mode
    assert all(not m.training for m in model.modules())


def test_gal_weight_decay_link_round_trips():
    lam = weight_decay(drop_rate=0.5, length_scale=1e-2, tau=0.1, n=60000)
    assert lam == pytest.approx(0.5 * 1e-4 / (2 * 60000 * 0.1))
    assert model_precision(0.5, 1e-2, lam, 60000) == pytest.approx(0.1)


def test_map_softmax_learns_and_predicts_one_sample():
    data = _blobs()
    method = get_method("map")
    posterior = drain(method.fit(method.make_config(epochs=5, batch_size=50, lr=1e-2), ArchSpec("softmax", num_classes=2), data, 0))
    assert isinstance(posterior, SampledPosterior) and posterior.num_samples == 1
    assert accuracy(posterior, data) > 0.95
    assert posterior.predict_proba(data.x[:4]).shape == (1, 4, 2)


def test_map_penalty_is_the_gaussian_prior():
    """With no data signal (random labels), the MAP weights shrink more for a tighter prior."""
    g = torch.Generator().manual_seed(1)
    data = Dataset(torch.rand(200, 1, 28, 28, generator=g), torch.randint(0, 2, (200,), generator=g))
    norms = []
    for std in (0.01, 10.0):
        method = get_method("map")
        post = drain(method.fit(method.make_config(prior_std=std, epochs=30, lr=1e-2), ArchSpec("softmax", num_classes=2), data, 0))
        norms.append(sum(float(v.pow(2).sum()) for v in post.samples.values()))
    assert norms[0] < 0.1 * norms[1]


def test_mc_dropout_samples_differ_and_are_reproducible():
    data = _blobs()
    method = get_method("mc_dropout")
    posterior = drain(method.fit(method.make_config(epochs=2, num_samples=40), ArchSpec("mlp", num_classes=2, drop_rate=0.5), data, 0))
    assert isinstance(posterior, DropoutPosterior)
    p = posterior.predict_proba(data.x[:3])
    assert p.shape == (40, 3, 2)
    assert p.std(0).max() > 1e-3  # dropout is on at prediction
    torch.testing.assert_close(p.sum(-1), torch.ones(40, 3))
    a = posterior.predict_proba(data.x[:3], 8, torch.Generator().manual_seed(5))
    b = posterior.predict_proba(data.x[:3], 8, torch.Generator().manual_seed(5))
    torch.testing.assert_close(a, b)
    # Each of the S rows of the batch is one independent mask: the S passes for one input
    # equal S separate stochastic calls of the model, seeded identically.
    assert accuracy(posterior, data, num_samples=10) > 0.95


def test_mc_dropout_needs_dropout():
    method = get_method("mc_dropout")
    with pytest.raises(ValueError, match="drop rate"):
        drain(method.fit(method.make_config(), ArchSpec("mlp"), _blobs(), 0))


def test_vectorised_prediction_matches_a_loop():
    arch = ArchSpec("lenet")
    models = [build_model(arch) for _ in range(6)]
    stacked = {
        k: torch.stack([dict(m.named_parameters())[k].detach() for m in models]).reshape(2, 3, *v.shape)
        for k, v in models[0].named_parameters()
    }
    post = SampledPosterior("test", arch, {}, 0, "none", stacked)
    x = torch.rand(5, 1, 28, 28)
    with torch.no_grad():
        loop = torch.stack([torch.softmax(m(x), -1) for m in models])
    torch.testing.assert_close(post.predict_proba(x), loop, atol=1e-5, rtol=1e-4)
    # thinning keeps the first and the last sample
    torch.testing.assert_close(post.predict_proba(x, num_samples=2), loop[[0, 5]], atol=1e-5, rtol=1e-4)


def test_make_config_rejects_unknown_settings():
    with pytest.raises(ValueError, match="no setting"):
        get_method("map").make_config(learning_rate=1.0)
    with pytest.raises(ValueError, match="unknown method"):
        get_method("magic")


def test_diverging_training_stops_with_a_message():
    method = get_method("map")
    with pytest.raises(FloatingPointError, match="lower the learning rate"):
        drain(method.fit(method.make_config(lr=1e30, epochs=3), ArchSpec("mlp", num_classes=2), _blobs(), 0))


def test_closing_the_generator_cancels_cooperatively():
    method = get_method("map")
    gen = method.fit(method.make_config(epochs=50, optimiser="adam"), ArchSpec("softmax", num_classes=2), _blobs(), 0)
    record = next(gen)
    assert record.step == 20 and record.total == 50 * 4
    gen.close()  # no exception, nothing returned
    with pytest.raises(StopIteration):
        next(gen)


# -------------------------------------------------------------------- save / load


def _small_posteriors():
    data = _blobs(100)
    out = []
    for name, arch in (("map", ArchSpec("softmax", num_classes=2)), ("mc_dropout", ArchSpec("mlp", num_classes=2, drop_rate=0.3))):
        m = get_method(name)
        out.append(drain(m.fit(m.make_config(epochs=1), arch, data, 3)))
    return data, out


def test_round_trip_preserves_predictions_and_metadata(tmp_path):
    data, posteriors = _small_posteriors()
    for post in posteriors:
        path = save_posterior(post, tmp_path / f"{post.method}.pt")
        back = load_posterior(path)
        assert (back.method, back.arch, back.config, back.seed, back.dataset, back.kind) == (
            post.method, post.arch, post.config, post.seed, post.dataset, post.kind)
        g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
        torch.testing.assert_close(back.predict_proba(data.x[:5], 4, g1), post.predict_proba(data.x[:5], 4, g2))


def _rewrite(path, **changes):
    """Change records and re-seal the file (a valid checksum), to reach the later checks."""
    from core.engine.store import payload_checksum

    payload = torch.load(path, weights_only=True)
    payload.update(changes)
    payload["checksum"] = payload_checksum(payload)
    torch.save(payload, path)


def test_load_rejects_mismatches(tmp_path):
    _, (post, _) = _small_posteriors()
    path = save_posterior(post, tmp_path / "p.pt")
    with pytest.raises(PosteriorFileError, match="architecture"):
        load_posterior(path, expect_arch=ArchSpec("mlp", num_classes=2))
    with pytest.raises(PosteriorFileError, match="method 'map', expected 'sghmc'"):
        load_posterior(path, expect_method="sghmc")

    _rewrite(path, format_version=FORMAT_VERSION + 1)
    with pytest.raises(PosteriorFileError, match=f"format version {FORMAT_VERSION + 1}"):
        load_posterior(path)

    path = save_posterior(post, tmp_path / "p.pt")
    _rewrite(path, arch={**post.arch.to_dict(), "name": "lenet"})
    with pytest.raises(PosteriorFileError, match="missing"):
        load_posterior(path)

    path = save_posterior(post, tmp_path / "p.pt")
    _rewrite(path, arch={**post.arch.to_dict(), "num_classes": 3})
    with pytest.raises(PosteriorFileError, match=r"shape \(1, 1, 2, 784\)|expects"):
        load_posterior(path)

    path = save_posterior(post, tmp_path / "p.pt")
    _rewrite(path, kind="telepathy")
    with pytest.raises(PosteriorFileError, match="unknown posterior kind"):
        load_posterior(path)


def test_load_rejects_other_files(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"\x00" * 100)
    with pytest.raises(PosteriorFileError, match="not a readable posterior"):
        load_posterior(tmp_path / "junk.pt")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(PosteriorFileError, match="not a bayescope posterior"):
        load_posterior(tmp_path / "other.pt")
    with pytest.raises(PosteriorFileError, match="no such"):
        load_posterior(tmp_path / "absent.pt")


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    _, (post, _) = _small_posteriors()
    path = save_posterior(post, tmp_path / "p.pt")
    before = path.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        save_posterior(post, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.pt"]  # no temporary left behind


def test_core_never_imports_gui_libraries():
    """The one-way rule, checked on the source (imports anywhere in the file count)."""
    import ast
    from pathlib import Path

    import core

    forbidden = {"PySide6", "PyQt5", "PyQt6", "pyqtgraph", "superqt", "app", "shiboken6"}
    offenders = []
    for path in Path(core.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in forbidden]
    assert offenders == []


def test_importing_core_loads_no_qt():
    import subprocess
    import sys

    code = (
        "import sys, core.commands.main, core.engine.store, core.engine.inference, core.analysis.uncertainty, core.engine.data.datasets;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6','pyqtgraph','superqt','app')];"
        "print(bad); sys.exit(bool(bad))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0




def test_settings_parse_as_the_defaults_type():
    method = get_method("mc_dropout")
    config = method.parse_settings({"epochs": "4", "lr": "3e-4", "tau": "2"})
    assert (config.epochs, config.lr, config.tau) == (4, 3e-4, 2.0)
    assert isinstance(config.tau, float)
    with pytest.raises(ValueError, match=r"epochs='2\.5' is not a valid int"):
        method.parse_settings({"epochs": "2.5"})
    with pytest.raises(ValueError, match="no setting 'momentum'"):
        method.parse_settings({"momentum": "0.9"})


def test_float16_storage_halves_the_file_and_predicts_the_same(tmp_path):
    data, (_, post) = _small_posteriors()
    full = save_posterior(post, tmp_path / "full.pt")
    half = save_posterior(post, tmp_path / "half.pt", storage="float16")
    assert half.stat().st_size < 0.6 * full.stat().st_size
    back = load_posterior(half)
    assert all(t.dtype == torch.float32 for t in back.state_tensors().values())
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    torch.testing.assert_close(back.predict_proba(data.x[:5], 4, g1), post.predict_proba(data.x[:5], 4, g2), atol=2e-3, rtol=0)
    with pytest.raises(ValueError, match="storage"):
        save_posterior(post, tmp_path / "x.pt", storage="int8")
