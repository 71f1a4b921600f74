"""Where the work runs: ``--device`` and :mod:`core.engine.device`.

There is no GPU on the machines these tests are written on: a CUDA GPU or Apple's MPS is
*pretended* here by patching torch's availability checks, which tests the choosing and the
refusals, never a computation on a GPU. The ``meta`` device (shapes only, no numbers) stands
in for a GPU where a test checks that every tensor of a prediction is made on the
posterior's device. On a GPU machine ``pytest -k device`` runs the tests marked for one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from core.commands.main import main
from core.engine.device import (
    DeviceUnavailableError,
    describe_device,
    device_choices,
    on_device,
    resolve_device,
    seeded_generator,
)
from core.engine.memory import MemoryEstimateError, check_fits
from core.engine.store import load_posterior, save_posterior
from tests.conftest import pretend_cuda

HAS_CUDA = torch.cuda.is_available()


def _no_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


# ----------------------------------------------------------------------------- choosing


def test_auto_is_the_cpu_without_a_gpu(monkeypatch):
    _no_gpu(monkeypatch)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a CUDA GPU")
def test_auto_is_the_cpu_here():
    assert not torch.cuda.is_available()
    if not torch.backends.mps.is_available():
        assert resolve_device("auto").type == "cpu"


def test_auto_prefers_cuda_then_mps(monkeypatch):
    pretend_cuda(monkeypatch, 1)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("mps")


def test_cuda_index_is_checked_against_the_gpus_found(monkeypatch):
    pretend_cuda(monkeypatch, 1)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("CUDA:0") == torch.device("cuda", 0)
    with pytest.raises(DeviceUnavailableError) as caught:
        resolve_device("cuda:7")
    text = str(caught.value)
    assert "number 7" in text and "finds 1 GPU (only cuda:0)" in text and "\n" not in text


def test_each_missing_device_is_named(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    with pytest.raises(DeviceUnavailableError, match="this torch build is CPU-only"):
        resolve_device("cuda")
    pretend_cuda(monkeypatch, 0)  # a CUDA build on a computer without a GPU or driver
    with pytest.raises(DeviceUnavailableError, match="no GPU or no working driver"):
        resolve_device("cuda:0")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailableError, match="no Apple GPU"):
        resolve_device("mps")
    for bad in ("gpu", "cuda:x", "cuda:-1", ""):
        with pytest.raises(ValueError):
            resolve_device(bad)


def test_where_work_runs_in_words(monkeypatch):
    import core.engine.device as device_module

    before = torch.get_num_threads()
    monkeypatch.setattr(device_module, "cpu_cores", lambda: 2)
    try:
        torch.set_num_threads(2)  # every core: as a lone run uses them
        assert describe_device(torch.device("cpu")) == "the CPU (2 cores)"
        torch.set_num_threads(1)  # a zoo --jobs worker, or OMP_NUM_THREADS=1: one thread, said so
        assert describe_device(torch.device("cpu")) == "the CPU (1 thread of its 2 cores)"
        monkeypatch.setattr(device_module, "cpu_cores", lambda: 1)
        assert describe_device(torch.device("cpu")) == "the CPU (1 core)"
    finally:
        torch.set_num_threads(before)
    pretend_cuda(monkeypatch, 2)
    assert describe_device(torch.device("cuda", 1)) == "NVIDIA Test GPU (cuda:1)"
    assert describe_device("mps") == "the Apple GPU (mps)"


def test_choices_offer_each_gpu_and_only_cpu_without_one(monkeypatch):
    _no_gpu(monkeypatch)
    assert [value for value, _ in device_choices()] == ["auto", "cpu"]
    pretend_cuda(monkeypatch, 2)
    choices = dict(device_choices())
    assert list(choices) == ["auto", "cpu", "cuda:0", "cuda:1"]
    assert choices["cuda:1"] == "NVIDIA Test GPU (cuda:1)"
    assert choices["auto"] == "Automatic (NVIDIA Test GPU (cuda:0))"


def test_a_gpu_memory_check_uses_its_free_memory(monkeypatch):
    pretend_cuda(monkeypatch, 1)
    asked = []

    def mem_get_info(device=None):
        asked.append(device)
        return 1_000_000_000, 80_000_000_000  # 1 GB free of 80

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    gpu = torch.device("cuda", 0)
    check_fits(700e6, "a small request", "use fewer samples", gpu)  # under 80% of 1 GB
    with pytest.raises(MemoryEstimateError) as caught:
        check_fits(900e6, "900 samples of this posterior", "use fewer samples", gpu)
    assert asked == [gpu, gpu]
    assert str(caught.value) == (
        "900 samples of this posterior would need about 900.0 MB of memory on NVIDIA Test GPU (cuda:0), "
        "but only 800.0 MB is free there; use fewer samples, or use --device cpu"
    )
    check_fits(900e6, "the same request on the CPU", "use fewer samples", torch.device("cpu"))


def test_generators_follow_the_device():
    assert seeded_generator(3).device.type == "cpu"
    with on_device("meta"):
        assert torch.zeros(2).device.type == "meta"
        with on_device("cpu"):  # a CPU block inside another device's block is on the CPU
            assert torch.zeros(2).device.type == "cpu"
        assert torch.zeros(2).device.type == "meta"
    assert torch.zeros(2).device.type == "cpu"
    a = torch.rand(5, generator=seeded_generator(3))
    assert torch.equal(a, torch.rand(5, generator=torch.Generator().manual_seed(3)))


# ----------------------------------------------------------------------------- the command line


@pytest.fixture
def digit_png(tmp_path):
    arr = np.zeros((60, 60), np.uint8)
    arr[10:50, 27:33] = 255
    path = tmp_path / "one.png"
    Image.fromarray(arr).save(path)
    return path


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("command", ["train", "predict", "evaluate", "compare", "dhmc-mnist", "dhmc-faces"])
def test_a_missing_gpu_is_one_line_and_exit_2(command, tiny_mnist, tmp_path, digit_png, capsys):
    posterior = tmp_path / "missing.pt"  # never read: the device is refused first
    argv = {
        "train": ["train", "--data-dir", str(tiny_mnist), "--out", str(tmp_path / "p.pt")],
        "predict": ["predict", str(digit_png)],
        "evaluate": ["evaluate", "--posterior", str(posterior), "--out", str(tmp_path / "ev")],
        "compare": ["compare", str(digit_png), "--out", str(tmp_path / "cmp")],
        "dhmc-mnist": ["reproduce", "dhmc-mnist", "--data-dir", str(tiny_mnist), "--out", str(tmp_path / "r")],
        "dhmc-faces": ["reproduce", "dhmc-faces", "--out", str(tmp_path / "r")],
    }[command]
    assert main([*argv, "--device", "cuda"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines == ["error: this computer has no CUDA GPU that torch can use (this torch build is CPU-only); "
                     "use --device cpu or auto"]
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (tmp_path / "p.pt").exists() and not (tmp_path / "r").exists()


def test_an_absent_gpu_index_names_it_on_the_command_line(monkeypatch, digit_png, capsys):
    pretend_cuda(monkeypatch, 1)
    assert main(["predict", str(digit_png), "--device", "cuda:7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU number 7" in err[0] and "only cuda:0" in err[0]


def test_device_cpu_is_the_default_run_here(tiny_mnist, tmp_path, digit_png, capsys, monkeypatch):
    """Here auto is the CPU, so ``--device cpu`` must give bit for bit the run without it."""
    _no_gpu(monkeypatch)
    common = ["train", "--data-dir", str(tiny_mnist), "--model", "mlp", "--method", "mc_dropout",
              "--drop-rate", "0.2", "--set", "epochs=2", "--seed", "5", "--eval-samples", "5"]
    assert main([*common, "--out", str(tmp_path / "default.pt")]) == 0
    err = capsys.readouterr().err
    cores = describe_device(torch.device("cpu"))
    assert f"Training on {cores}." in err
    assert main([*common, "--out", str(tmp_path / "cpu.pt"), "--device", "cpu"]) == 0
    capsys.readouterr()
    default, cpu = load_posterior(tmp_path / "default.pt"), load_posterior(tmp_path / "cpu.pt")
    assert default.info["test_accuracy"] == cpu.info["test_accuracy"]
    for name, tensor in default.state_tensors().items():
        assert torch.equal(tensor, cpu.state_tensors()[name])
    outputs = []
    for extra in ([], ["--device", "cpu"]):
        assert main(["predict", str(digit_png), "--posterior", str(tmp_path / "cpu.pt"), "--json", *extra]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]


def test_a_saved_file_holds_cpu_tensors(two_halves, tmp_path):
    from core.engine.inference import get_method
    from core.engine.models import ArchSpec
    from core.engine.runner import drain, fit_posterior

    method = get_method("map")
    arch = ArchSpec("softmax", num_classes=2)
    posterior = drain(fit_posterior(method, method.parse_settings({"epochs": "1"}), arch, two_halves, 0,
                                    device=torch.device("cpu")))
    path = save_posterior(posterior, tmp_path / "p.pt")
    payload = torch.load(path, weights_only=True)  # no map_location: tensors come back where saved
    assert payload["tensors"] and all(t.device.type == "cpu" for t in payload["tensors"].values())
    assert load_posterior(path, device="cpu").device.type == "cpu"


# ----------------------------------------------------------------------------- one device throughout


@pytest.mark.parametrize("method_name, settings", [
    ("map", {"epochs": "1"}),
    ("mc_dropout", {"epochs": "1", "num_samples": "4"}),
    ("dsghmc", {"epochs": "2", "burn_in_epochs": "1", "num_chains": "2", "thin": "1"}),
    ("sgld", {"epochs": "2", "burn_in_epochs": "1", "num_chains": "2", "thin": "1"}),
])
def test_a_moved_posterior_predicts_on_its_device(method_name, settings, two_halves, monkeypatch):
    """Every tensor a prediction makes is made on the posterior's device: on ``meta`` (which
    refuses to mix with the CPU) a stray CPU tensor would raise instead of giving shapes.

    Only the kinds that can be built on ``meta``: the variational, Laplace and SWAG
    posteriors check their numbers (finite, positive) when built, which shapes alone cannot
    answer; their device path is tested on a GPU only.
    """
    from core.engine.inference import base, get_method
    from core.engine.models import ArchSpec
    from core.engine.runner import drain, fit_posterior

    method = get_method(method_name)
    arch = ArchSpec("mlp", num_classes=2, hidden=8, drop_rate=0.2 if method_name == "mc_dropout" else 0.0)
    posterior = drain(fit_posterior(method, method.parse_settings(settings), arch, two_halves, 0))
    moved = posterior.to("meta")
    assert moved.device.type == "meta" and posterior.device.type == "cpu"
    assert all(t.device.type == "meta" for t in moved.state_tensors().values())
    monkeypatch.setattr(base, "to_host", lambda t: t)  # meta holds no numbers to bring back
    x = two_halves.x[:3]
    for generator in (None, torch.Generator().manual_seed(1)):
        out = moved.predict_proba(x, num_samples=4, generator=generator)
        assert out.device.type == "meta" and out.shape[1:] == (3, 2)
    assert posterior.predict_proba(x, num_samples=4).device.type == "cpu"  # the original is untouched


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_device_cuda_trains_and_predicts(tiny_mnist, tmp_path, digit_png, capsys):  # pragma: no cover - GPU only
    out = tmp_path / "gpu.pt"
    assert main(["train", "--data-dir", str(tiny_mnist), "--model", "mlp", "--method", "mc_dropout",
                 "--drop-rate", "0.2", "--set", "epochs=3", "--set", "lr=3e-3", "--out", str(out),
                 "--device", "cuda"]) == 0
    assert "Training on " in capsys.readouterr().err
    assert load_posterior(out).info["test_accuracy"] > 0.9
    assert main(["predict", str(digit_png), "--posterior", str(out), "--json", "--device", "cuda"]) == 0
    assert json.loads(capsys.readouterr().out)["num_samples"] == 100



def test_gpu_evaluations_are_cached_apart_from_the_cpus():
    """One seed draws other numbers on a GPU, so its cached evaluation must not stand in for the CPU's."""
    from core.outputs.evaluation_cache import cache_key

    args = ("posterior-sha", "data-sha", None, 30, 0, 256)
    assert cache_key(*args) == cache_key(*args, "cpu")
    assert cache_key(*args, "cuda") != cache_key(*args, "cpu")
    assert cache_key(*args, "cuda") != cache_key(*args, "mps")


# ---------------------------------------------------------------- every method, on each device

#: A few steps of every method on the two-halves digits with a small MLP: enough to learn the
#: two classes. (LeNet-5's convolutions on a GPU, with their Kronecker factors, are what the
#: network tier's pilots run: ``benchmarks/measure_network_tuning.py --device cuda``.)
EVERY_METHOD = {
    "map": {"epochs": "3", "lr": "3e-3"},
    "mc_dropout": {"epochs": "3", "lr": "3e-3", "num_samples": "8"},
    "ensemble": {"num_members": "2", "epochs": "3", "lr": "3e-3"},
    "laplace": {"epochs": "3", "lr": "3e-3", "structure": "kron"},
    "swag": {"epochs": "2", "lr": "3e-3", "swa_epochs": "2", "snapshots_per_epoch": "4", "rank": "4"},
    "mfvi": {"epochs": "3", "lr": "3e-3"},
    "snvi": {"epochs": "3", "lr": "3e-3", "rank": "2"},
    "sgmmvi": {"epochs": "3", "lr": "3e-3", "rank": "2"},
    "vdropout": {"epochs": "3", "lr": "3e-3", "predict_samples": "8"},
    "hmc": {"num_chains": "2", "num_warmup": "20", "num_samples": "10", "num_leapfrog": "5", "prior_std": "0.2"},
    "sgld": {"num_chains": "2", "epochs": "4", "burn_in_epochs": "2", "thin": "4", "batch_size": "32",
             "step_size": "1e-3", "metric": "kron", "prior_std": "0.2"},
    "sghmc": {"num_chains": "2", "epochs": "4", "burn_in_epochs": "2", "thin": "4", "batch_size": "32",
              "step_size": "5e-5", "friction": "0.1", "metric": "kron", "prior_std": "0.2"},
    "dsghmc": {"num_chains": "2", "epochs": "4", "burn_in_epochs": "2", "thin": "4", "batch_size": "32",
               "step_size": "5e-5", "friction": "0.1", "precondition": "true", "rms_adapt_steps": "8"},
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAS_CUDA, reason="needs a CUDA GPU"))])
@pytest.mark.parametrize("method_name", sorted(EVERY_METHOD))
def test_every_method_learns_and_predicts_on_the_device(method_name, device, two_halves, tmp_path):
    """Each method trains on ``device`` (its posterior and every tensor of it there), learns the
    two classes, predicts valid probabilities, and its saved file reads back on the CPU."""
    from core.engine.inference import get_method
    from core.engine.models import ArchSpec
    from core.engine.runner import drain, fit_posterior

    method = get_method(method_name)
    drop = {"mc_dropout": 0.2, "dsghmc": 0.5}.get(method_name, 0.0)
    arch = ArchSpec("mlp", num_classes=2, hidden=32, drop_rate=drop)
    posterior = drain(fit_posterior(method, method.parse_settings(EVERY_METHOD[method_name]), arch, two_halves, 0,
                                    device=torch.device(device)))
    assert posterior.device.type == device
    assert {t.device.type for t in posterior.state_tensors().values()} == {device}
    probs = posterior.predict_proba(two_halves.x, num_samples=8, generator=torch.Generator().manual_seed(0))
    assert probs.device.type == "cpu" and probs.shape[1:] == (len(two_halves), 2)  # brought back to be drawn
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(()), atol=1e-5)
    accuracy = (probs.mean(0).argmax(-1) == two_halves.y).float().mean().item()
    assert accuracy > 0.9, f"{method_name} on {device}: {accuracy:.1%} of the two classes"
    back = load_posterior(save_posterior(posterior, tmp_path / "p.pt"), device="cpu")
    assert back.device.type == "cpu"
    again = back.predict_proba(two_halves.x[:16], num_samples=8, generator=torch.Generator().manual_seed(0))
    assert (again.mean(0).argmax(-1) == two_halves.y[:16]).float().mean().item() > 0.9
