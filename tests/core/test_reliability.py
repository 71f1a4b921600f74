"""Issue 12, hardening: one test (or a few) per failure found, grouped as in the issue.

1. silent wrong answers: data-set identity and provenance, posterior integrity and
   validation, dropout randomness, image decoding;
2. lost work: save first, full disk, signals, downloads, atomic reports;
3. bad input: output paths that are not files, user-controlled sizes with memory estimates.

HMC's per-chain variance is in ``test_reliability_hmc.py``; the property-based (Hypothesis)
suite for the image and posterior loaders in ``test_reliability_properties.py``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import core.engine.memory
from core.analysis.evaluation import resolve_dataset
from core.commands.main import main
from core.engine.data.datasets import (
    DatasetContentError,
    DatasetDownloadError,
    DatasetNotFoundError,
    download,
    load_split,
)
from core.engine.data.idx import write_idx
from core.engine.data.preprocess import (
    EmptyDrawingError,
    ImageLoadError,
    image_to_input,
    load_image,
)
from core.engine.files import NotSavedError, atomic_write
from core.engine.inference import get_method
from core.engine.inference.base import Dataset, SampledPosterior
from core.engine.inference.dsghmc import InputDropoutPosterior
from core.engine.inference.mc_dropout import DropoutPosterior
from core.engine.models import ArchSpec
from core.engine.resources import bundled_posteriors
from core.engine.runner import drain
from core.engine.store import (
    PosteriorFileError,
    load_posterior,
    payload_checksum,
    save_posterior,
    upgrade_posterior_file,
)

ROOT = Path(__file__).resolve().parents[2]
MAP_FILE = ROOT / "resources" / "models" / "paper_softmax_map.pt"
GB = 1_000_000_000


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    assert lines, "expected an error message"
    line = lines[-1]
    assert line.startswith("error: "), err
    assert "Traceback" not in err and "Error:" not in line.removeprefix("error: "), err
    return line


@pytest.fixture
def memory_8gb(monkeypatch):
    """A machine with 8 GB available, whatever this one has: estimates become deterministic."""
    monkeypatch.setattr(core.engine.memory, "available_bytes", lambda: 8 * GB)


def _write_split(folder: Path, split: str, images: np.ndarray, labels: np.ndarray) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    prefix = {"train": "train", "test": "t10k"}[split]
    write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", images)
    write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", labels)


@pytest.fixture
def tiny_digits(tmp_path) -> Path:
    """A two-class MNIST-layout folder (not the official files): left or right half lit."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "digits"
    for split, n in (("train", 200), ("test", 80)):
        y = rng.integers(0, 2, n).astype(np.uint8)
        x = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        x[y == 0, :, :14] += 150
        x[y == 1, :, 14:] += 150
        _write_split(folder, split, x, y)
    return folder


def _toy_posterior(num_classes: int = 2) -> SampledPosterior:
    arch = ArchSpec("softmax", num_classes=num_classes, image_size=28)  # the loader reads 28×28 only
    g = torch.Generator().manual_seed(0)
    samples = {"linear.weight": torch.randn(2, 3, num_classes, 784, generator=g),
               "linear.bias": torch.randn(2, 3, num_classes, generator=g)}
    return SampledPosterior("sghmc", arch, {"step_size": 0.1}, 7, "toy-train", samples, {"note": "toy"})


def _reseal(path: Path, **changes) -> None:
    """Change records and write a valid checksum, as a careful forger would."""
    payload = torch.load(path, weights_only=True)
    payload.update(changes)
    payload["checksum"] = payload_checksum(payload)
    torch.save(payload, path)


# ============================================================== 1. silent wrong answers
# ---------------------------------------------------------------- data sets


def test_known_name_never_falls_back_on_another_folder(tiny_digits, tmp_path):
    # --data-dir holds test files but no notmnist/ folder: the name must not resolve there.
    with pytest.raises(DatasetNotFoundError, match=r"notMNIST letters.*not found.*Looked in: .*notmnist"):
        resolve_dataset("notmnist", tiny_digits)
    # its own sub-folder, or a folder named after it, is read
    shutil.copytree(tiny_digits, tmp_path / "data" / "notMNIST")
    data = resolve_dataset("notmnist", tmp_path / "data" / "notMNIST")
    assert data.name == "notmnist-test" and data.class_names[:2] == ("A", "B")


def test_official_files_of_one_set_are_refused_under_another_name(shared_data, tmp_path):
    fake = tmp_path / "notmnist"
    fake.mkdir()
    for f in (shared_data / "mnist").glob("t10k-*"):
        (fake / f.name).symlink_to(f)
    with pytest.raises(DatasetContentError, match="official mnist test files, not notmnist"):
        load_split("notmnist", "test", root=fake)


def test_other_files_are_never_called_mnist(shared_data, tmp_path):
    # notMNIST letters placed in an MNIST folder (the case)
    folder = tmp_path / "mnist"
    folder.mkdir()
    for f in (shared_data / "notmnist").glob("t10k-*"):
        (folder / f.name).symlink_to(f)
    letters = load_split("mnist", "test", root=tmp_path)
    assert letters.name.startswith("mnist@") and letters.name.endswith("-test")
    assert letters.source["official"] is False
    real = load_split("mnist", "test", root=shared_data)
    assert real.name == "mnist-test" and real.source["official"] is True
    # the recorded checksums are those of the files on disk, computed here independently
    for name, record in real.source["files"].items():
        assert record["sha256"] == _sha256(shared_data / "mnist" / name)


@pytest.mark.parametrize(
    ("images", "labels", "message"),
    [
        (np.zeros((5, 32, 32), np.uint8), np.zeros(5, np.uint8), "32×32 pixels"),
        (np.zeros((5, 28, 28), np.float32), np.zeros(5, np.uint8), "stored as float32"),
        (np.zeros((5, 28, 28), np.uint8), np.array([0, 1, 2, 3, 12], np.uint8), "outside 0..9"),
        (np.zeros((5, 28, 28), np.uint8), np.array([0, 1, 2, 3, -1], np.int8), "range from -1"),
        (np.zeros((0, 28, 28), np.uint8), np.zeros(0, np.uint8), "no images"),
        (np.zeros((5, 28, 28), np.uint8), np.zeros(4, np.uint8), "do not match 5 images"),
    ],
)
def test_a_folder_is_checked_for_what_it_holds(tmp_path, images, labels, message):
    folder = tmp_path / "notmnist"
    _write_split(folder, "test", images, labels)
    with pytest.raises(ValueError, match=message):
        load_split("notmnist", "test", root=folder)


@pytest.fixture
def ten_classes(tmp_path) -> Path:
    """Every digit class present (class k lights row band k), as the 10-class models expect."""
    rng = np.random.default_rng(1)
    folder = tmp_path / "ten"
    for split, n in (("train", 200), ("test", 80)):
        y = (np.arange(n) % 10).astype(np.uint8)
        x = rng.integers(0, 40, (n, 28, 28)).astype(np.uint8)
        for i, k in enumerate(y):
            x[i, 2 + 2 * k : 4 + 2 * k] = 220
        _write_split(folder, split, x, y)
    return folder


def test_trained_posterior_and_report_record_what_was_read(ten_classes, tmp_path, capsys):
    tiny_digits = ten_classes
    out = tmp_path / "p.pt"
    assert main(["train", "--dataset", str(tiny_digits), "--model", "softmax", "--method", "map",
                 "--set", "epochs=2", "--limit", "150", "--eval-samples", "1", "--out", str(out)]) == 0
    post = load_posterior(out)
    trained = post.info["training_data"]
    assert trained["name"] == "ten-train" and trained["images"] == 150 and trained["used"] == 150
    assert trained["folder"] == str(tiny_digits.resolve())
    for name, record in trained["files"].items():
        assert record["sha256"] == _sha256(tiny_digits / name)
    assert post.info["test_data"]["images"] == 80  # --limit 150 > 80 test images: all used
    report = tmp_path / "report"
    assert main(["evaluate", "--posterior", str(out), "--dataset", str(tiny_digits),
                 "--samples", "2", "--out", str(report)]) == 0
    meta = json.loads((report / "evaluation.json").read_text())
    assert meta["format"] == "bayescope-evaluation"
    assert meta["data"]["name"] == "ten-test" and meta["data"]["images"] == 80
    assert meta["data"]["files"]["t10k-labels-idx1-ubyte.gz"]["sha256"] == _sha256(
        tiny_digits / "t10k-labels-idx1-ubyte.gz")
    assert meta["posteriors"]["p"]["file_sha256"] == _sha256(out)
    assert meta["posteriors"]["p"]["training_data"]["images"] == 150


# ---------------------------------------------------------------- posterior files


def test_a_flipped_bit_in_the_weights_is_reported_as_damage(tmp_path):
    path = save_posterior(_toy_posterior(), tmp_path / "p.pt")
    raw = bytearray(path.read_bytes())
    # the last float of the stored weights: find its bytes in the archive and flip one bit
    payload = torch.load(path, weights_only=True)
    needle = payload["tensors"]["linear.weight"].reshape(-1)[-4:].numpy().tobytes()
    at = bytes(raw).index(needle) + len(needle) - 1
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
    changed = torch.load(path, weights_only=True)["tensors"]["linear.weight"]
    assert not torch.equal(changed, payload["tensors"]["linear.weight"])  # torch itself loads it
    with pytest.raises(PosteriorFileError, match="damaged"):
        load_posterior(path)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_the_finite_check_of_weights_agrees_with_isfinite_number_by_number(dtype):
    """``all_finite`` (a sum first) against ``torch.isfinite`` on every number, its definition: one
    NaN or infinity anywhere among 100,000 finite numbers, both infinities at once (their sum is
    NaN), and finite numbers whose sum overflows the dtype and float32 (not refused)."""
    from core.engine.store import all_finite

    rng = torch.Generator().manual_seed(0)
    for bad in (float("nan"), float("inf"), float("-inf"), None):
        for _ in range(5):
            t = torch.randn(100_000, generator=rng).to(dtype)
            at = torch.randint(0, t.numel(), (2,), generator=rng)
            if bad is None:
                t[at[0]], t[at[1]] = float("inf"), float("-inf")
            else:
                t[at[0]] = bad
            assert not bool(torch.isfinite(t).all()) and not all_finite(t)
    big = torch.finfo(dtype).max
    overflowing = torch.full((1_000,), big, dtype=dtype)
    assert torch.isinf(overflowing.sum(dtype=torch.float32)) or dtype == torch.float16
    assert bool(torch.isfinite(overflowing).all()) and all_finite(overflowing)
    assert all_finite(torch.randn(3, 4, generator=rng).to(dtype)) and all_finite(torch.zeros(0, dtype=dtype))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.pop("arch"), "lacks its 'arch' record"),
        (lambda p: p.pop("tensors"), "lacks its 'tensors' record"),
        (lambda p: p.update(seed="zero"), "'seed' record is invalid"),
        (lambda p: p["tensors"].update({"linear.bias": [0.0, 1.0]}), "other than tensors"),
        (lambda p: p["tensors"].update({"linear.bias": torch.zeros(2, 3, 2, dtype=torch.int64)}),
         "stored as int64"),
        (lambda p: p["tensors"]["linear.weight"].view(-1).__setitem__(3, float("nan")), "NaN or infinite"),
        (lambda p: p["tensors"]["linear.bias"].view(-1).__setitem__(0, float("inf")), "NaN or infinite"),
        (lambda p: p.update(method="telepathy"), "unknown inference method 'telepathy'"),
        (lambda p: p.update(kind="telepathy"), "unknown posterior kind"),
        (lambda p: p["arch"].update(hidden=-3), "hidden width"),
        (lambda p: p["arch"].update(num_classes=2.5), "invalid value"),
        (lambda p: p.update(storage="int4"), "unknown weight storage"),
    ],
)
def test_invalid_records_are_refused_with_a_sentence(tmp_path, change, message):
    path = save_posterior(_toy_posterior(), tmp_path / "p.pt")
    payload = torch.load(path, weights_only=True)
    change(payload)
    payload["checksum"] = payload_checksum(payload) if "tensors" in payload and all(
        isinstance(t, torch.Tensor) for t in payload["tensors"].values()) else "sha256:0"
    torch.save(payload, path)
    with pytest.raises(PosteriorFileError, match=message):
        load_posterior(path)


def test_absurd_architecture_is_refused_before_any_allocation(tmp_path, monkeypatch, memory_8gb):
    path = save_posterior(_toy_posterior(), tmp_path / "p.pt")
    built = []
    monkeypatch.setattr("core.engine.models._CLASSES", {k: lambda spec: built.append(spec) for k in ("softmax", "mlp", "lenet")})
    _reseal(path, arch={"name": "softmax", "num_classes": 10**8, "drop_rate": 0.0, "hidden": 100, "image_size": 4})
    with pytest.raises(PosteriorFileError, match="between 2 and 100000 classes"):
        load_posterior(path)
    # within the bounds but beyond memory: refused with the estimate, still nothing built
    _reseal(path, arch={"name": "mlp", "num_classes": 10, "drop_rate": 0.0, "hidden": 900_000, "image_size": 28})
    with pytest.raises(PosteriorFileError, match=r"would need about 6\.\d TB of memory"):
        load_posterior(path)
    assert built == []


def test_format_1_is_refused_and_upgraded_bit_for_bit(tmp_path):
    path = save_posterior(_toy_posterior(), tmp_path / "old.pt")
    payload = torch.load(path, weights_only=True)
    del payload["checksum"]
    payload["format_version"] = 1
    torch.save(payload, path)
    with pytest.raises(PosteriorFileError, match=r"older bayescope.*bayescope-cli upgrade"):
        load_posterior(path)
    upgrade_posterior_file(path)
    after = torch.load(path, weights_only=True)
    for name, t in payload["tensors"].items():
        assert after["tensors"][name].dtype == t.dtype
        assert after["tensors"][name].numpy().tobytes() == t.numpy().tobytes()
    assert load_posterior(path).config == {"step_size": 0.1}


def test_bundled_posteriors_carry_a_checksum_and_load():
    paths = bundled_posteriors()
    assert paths
    for path in paths:
        payload = torch.load(path, weights_only=True)
        assert payload["format_version"] == 2 and payload["checksum"] == payload_checksum(payload)
        load_posterior(path)


# ---------------------------------------------------------------- randomness


def _dropout_posterior() -> DropoutPosterior:
    arch = ArchSpec("mlp", num_classes=3, hidden=16, drop_rate=0.5)
    m = get_method("mc_dropout")
    data = Dataset(torch.rand(60, 1, 28, 28), torch.arange(60) % 3, "toy")
    return drain(m.fit(m.make_config(epochs=1, batch_size=20), arch, data, 5))


def test_mc_dropout_masks_follow_the_documented_rule():
    post = _dropout_posterior()
    x = torch.rand(2, 1, 28, 28)
    state = torch.random.get_rng_state()
    first = post.predict_proba(x, 50)
    torch.rand(1000)  # other work on the global generator must not change the verdict
    again = post.predict_proba(x, 50)
    assert torch.equal(first, again)  # generator=None: the posterior's fixed bank
    assert not torch.equal(first[0], first[1])  # ... of S different masks
    g = torch.Generator().manual_seed(3)
    a, b = post.predict_proba(x, 50, g), post.predict_proba(x, 50, g)
    assert not torch.equal(a, b)  # a generator: fresh masks on every call
    assert torch.equal(a, post.predict_proba(x, 50, torch.Generator().manual_seed(3)))
    torch.random.set_rng_state(state)
    assert torch.equal(post.predict_proba(x, 50), first)


def test_dsghmc_masks_follow_the_same_rule():
    arch = ArchSpec("softmax", num_classes=3)
    g = torch.Generator().manual_seed(0)
    samples = {"linear.weight": torch.randn(1, 4, 3, 784, generator=g), "linear.bias": torch.zeros(1, 4, 3)}
    post = InputDropoutPosterior("dsghmc", arch, {"drop_rate": 0.5, "mask_at_prediction": True}, 1, "toy", samples)
    x = torch.rand(1, 1, 28, 28)
    assert torch.equal(post.predict_proba(x), post.predict_proba(x))
    g = torch.Generator().manual_seed(9)
    assert not torch.equal(post.predict_proba(x, generator=g), post.predict_proba(x, generator=g))


@pytest.mark.parametrize("method", ["ensemble", "mc_dropout"])
def test_fits_with_dropout_are_reproducible_from_their_seed(method):
    m = get_method(method)
    arch = ArchSpec("mlp", num_classes=3, hidden=16, drop_rate=0.5)
    data = Dataset(torch.rand(60, 1, 28, 28), torch.arange(60) % 3, "toy")
    settings = {"epochs": 1, "batch_size": 20} | ({"num_members": 2} if method == "ensemble" else {})
    weights = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)  # the global generator differs between the two fits
        post = drain(m.fit(m.make_config(**settings), arch, data, 11))
        weights.append(post.state_tensors())
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


# ---------------------------------------------------------------- images


def _save(array: np.ndarray, path: Path, mode: str | None = None) -> Path:
    (Image.fromarray(array, mode) if mode else Image.fromarray(array)).save(path)
    return path


def _stroke(size: int = 40) -> np.ndarray:
    mask = np.zeros((size, size), bool)
    mask[8:32, 18:23] = True
    return mask


def test_16_bit_dark_on_light_scan_is_scaled_not_clamped(tmp_path):
    ink = _stroke()
    scan16 = np.where(ink, 4000, 60000).astype(np.uint16)  # dark ink on light paper, 16 bits
    scan8 = np.where(ink, 4000 // 257, 60000 // 257).astype(np.uint8)
    grey16 = load_image(_save(scan16, tmp_path / "scan16.png"))
    grey8 = load_image(_save(scan8, tmp_path / "scan8.png"))
    assert grey16[ink].min() > 0.9 and grey16[~ink].max() < 0.01  # ink bright, ground 0
    np.testing.assert_allclose(grey16, grey8, atol=0.01)


@pytest.mark.parametrize("ink_value", [0, 255])
def test_transparent_background_keeps_the_digit(tmp_path, ink_value):
    ink = _stroke()
    rgba = np.zeros((40, 40, 4), np.uint8)  # transparent black ground (what editors write)
    rgba[ink] = (ink_value, ink_value, ink_value, 255)
    grey = load_image(_save(rgba, tmp_path / "t.png"))
    assert grey[ink].min() > 0.9 and grey[~ink].max() < 0.01


def test_emptiness_is_checked_for_every_size(tmp_path):
    for size in (28, 40):
        blank = load_image(_save(np.zeros((size, size), np.uint8), tmp_path / f"b{size}.png"))
        with pytest.raises(EmptyDrawingError):
            image_to_input(blank)
    grey = load_image(_save(np.full((28, 28), 128, np.uint8), tmp_path / "grey.png"))
    with pytest.raises(EmptyDrawingError):  # a uniform tone is no ink either
        image_to_input(grey)
    with pytest.raises(EmptyDrawingError):
        image_to_input(np.zeros((28, 28), np.float32))


def test_decompression_bomb_is_refused_from_the_header(tmp_path, monkeypatch):
    path = _save(np.zeros((60, 50), np.uint8), tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 3000 px: also above twice the limit
    with pytest.raises(ImageLoadError, match=r"too large \(more than 1,000 pixels\); scale it down"):
        load_image(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2000)  # between 1× and 2×: Pillow only warns
    with pytest.raises(ImageLoadError, match=r"too large \(more than 2,000 pixels\); scale it down"):
        load_image(path)


# ======================================================================== 2. lost work


def test_train_checks_every_argument_and_the_output_before_training(tiny_digits, tmp_path, monkeypatch, capsys):
    import core.commands.train

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(core.commands.train, "fit_posterior", no_training)
    base = ["train", "--dataset", str(tiny_digits), "--model", "mlp", "--method", "map"]
    cases = [
        (["--eval-samples", "0"], "--eval-samples must be at least 1"),
        (["--hidden", "0"], "--hidden must be at least 1"),
        (["--hidden", "-3"], "--hidden must be at least 1"),
        (["--limit", "-5"], "--limit must be at least 1"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--drop-rate", "1.5"], "--drop-rate must lie in"),
        (["--seed", "-1"], "--seed must be"),
        (["--set", "epochs=-1"], "positive"),
    ]
    for extra, message in cases:
        assert main([*base, *extra, "--out", str(tmp_path / "p.pt")]) == 2
        assert message in _one_line_error(capsys)
    assert main([*base, "--out", str(tmp_path)]) == 2
    assert "is a folder" in _one_line_error(capsys)


def test_train_saves_first_and_keeps_the_posterior_when_evaluation_fails(tiny_digits, tmp_path, monkeypatch, capsys):
    import core.commands.train

    def broken(*args, **kwargs):
        raise ValueError("the test set could not be read")
        yield

    monkeypatch.setattr(core.commands.train, "accuracy_progress", broken)
    out = tmp_path / "p.pt"
    args = ["train", "--dataset", str(tiny_digits), "--model", "softmax", "--method", "map",
            "--set", "epochs=1", "--out", str(out)]
    assert main(args) == 2
    line = _one_line_error(capsys)
    assert f"saved in {out}" in line and "could not be measured" in line
    assert load_posterior(out).method == "map"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
        yield

    out.unlink()
    monkeypatch.setattr(core.commands.train, "accuracy_progress", interrupted)
    assert main(args) == 130
    assert "saved in" in capsys.readouterr().err and load_posterior(out).method == "map"


def test_full_disk_says_where_and_how_much(tmp_path, monkeypatch, capsys, tiny_digits):
    # a writer that fails as a full disk does
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r": FullDisk(real_fdopen(fd, mode)))
    out = tmp_path / "models" / "p.pt"
    assert main(["train", "--dataset", str(tiny_digits), "--model", "softmax", "--method", "map",
                 "--set", "epochs=1", "--out", str(out)]) == 2
    line = _one_line_error(capsys)
    assert line.startswith(f"error: no space left on {out.parent}: the posterior was not saved (needs ")
    assert line.endswith(" kB)")
    assert list(out.parent.iterdir()) == []  # no temporary file, no partial posterior


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 kB tmpfs (needs root and mount); skipped where it cannot be made."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=False)


def test_a_real_full_disk_keeps_the_old_file(tiny_tmpfs):
    small = _toy_posterior()
    path = save_posterior(small, tiny_tmpfs / "p.pt")
    before = path.read_bytes()
    big = SampledPosterior("sghmc", ArchSpec("softmax", num_classes=10, image_size=28), {}, 0, "x",
                           {"linear.weight": torch.zeros(1, 4, 10, 784), "linear.bias": torch.zeros(1, 4, 10)})
    with pytest.raises(NotSavedError, match=f"no space left on {tiny_tmpfs}: the posterior was not saved"):
        save_posterior(big, path)
    assert path.read_bytes() == before and [p.name for p in tiny_tmpfs.iterdir()] == ["p.pt"]
    # past the free-space check (as when another program fills the disk meanwhile)
    import shutil as shutil_module

    real = shutil_module.disk_usage
    try:
        shutil_module.disk_usage = lambda p: real(p)._replace(free=10**12)
        with pytest.raises(NotSavedError, match="no space left on"):
            save_posterior(big, path)
    finally:
        shutil_module.disk_usage = real
    assert path.read_bytes() == before and [p.name for p in tiny_tmpfs.iterdir()] == ["p.pt"]


_SLOW_SAVE = textwrap.dedent("""
    import signal
    # Ctrl-C as a terminal delivers it, whatever this process inherited: a background job of
    # a non-interactive shell starts with SIGINT ignored, and so would every child it starts.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import os, sys, time, torch
    from core.engine.inference.base import SampledPosterior
    from core.engine.store import save_posterior
    from core.engine.models import ArchSpec
    post = SampledPosterior("map", ArchSpec("softmax", num_classes=2, image_size=4), {}, 0, "x",
                            {"linear.weight": torch.zeros(1, 1, 2, 16), "linear.bias": torch.zeros(1, 1, 2)})
    real_fsync = os.fsync
    def slow_fsync(fd):
        print("writing", flush=True)
        time.sleep(60)
    os.fsync = slow_fsync
    try:
        save_posterior(post, sys.argv[1])
    except KeyboardInterrupt as exc:
        print("unwound", type(exc).__name__, flush=True)
        sys.exit(3)
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_save_leaves_no_temporary_file(tmp_path, signum):
    target = tmp_path / "p.pt"
    with subprocess.Popen([sys.executable, "-c", _SLOW_SAVE, str(target)], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "writing"
            proc.send_signal(signum)
            out, _ = proc.communicate(timeout=30)
        finally:  # a child that outlived a failure is stopped and reaped here, not by a later test
            proc.kill()
            proc.wait()
    assert proc.returncode == 3 and "unwound" in out
    assert list(tmp_path.iterdir()) == []


def test_stale_temporary_files_of_dead_saves_are_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".p.pt.{int(dead.stdout)}.0123abcd.tmp"
    live = tmp_path / ".p.pt.1.0123abcd.tmp"  # pid 1 is alive: its save may be running
    other = tmp_path / f".q.pt.{int(dead.stdout)}.0123abcd.tmp"  # another target's
    for f in (stale, live, other):
        f.write_bytes(b"half")
    save_posterior(_toy_posterior(), tmp_path / "p.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["p.pt", live.name, other.name])


class _Trickle(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server API
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        try:
            for _ in range(100):
                self.wfile.write(b"\x1f")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_a_trickling_download_meets_its_deadline_and_leaves_nothing(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        with pytest.raises(DatasetDownloadError, match="too slow|in time|deadline"):
            download("digits", "test", tmp_path / "dest", mirrors=(f"http://127.0.0.1:{server.server_port}/",),
                     deadline_s=1.5)
        assert time.monotonic() - start < 10
    finally:
        server.shutdown()
        server.server_close()
    assert list((tmp_path / "dest").iterdir()) == []


def test_ctrl_c_during_a_download_leaves_no_part_file(tmp_path, monkeypatch):
    import core.engine.data.datasets as datasets

    def interrupted(url, out, deadline):
        out.write(b"partial bytes")
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets, "_fetch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        download("digits", "test", tmp_path / "dest", mirrors=("http://127.0.0.1:9/",))
    assert list((tmp_path / "dest").iterdir()) == []


def _report_args(tiny_digits: Path, posterior: Path, out: Path) -> list[str]:
    return ["evaluate", "--posterior", str(posterior), "--dataset", str(tiny_digits),
            "--samples", "2", "--out", str(out)]


@pytest.fixture
def digits_posterior(tmp_path) -> Path:
    arch = ArchSpec("softmax", num_classes=2)
    samples = {"linear.weight": torch.zeros(1, 1, 2, 784), "linear.bias": torch.zeros(1, 1, 2)}
    return save_posterior(SampledPosterior("map", arch, {}, 0, "x", samples), tmp_path / "p.pt")


def test_evaluate_replaces_a_report_whole_or_not_at_all(tiny_digits, digits_posterior, tmp_path, monkeypatch, capsys):
    out = tmp_path / "report"
    assert main(_report_args(tiny_digits, digits_posterior, out)) == 0
    (out / "leftover_from_an_older_run.csv").write_text("old")
    assert main(_report_args(tiny_digits, digits_posterior, out)) == 0
    assert not (out / "leftover_from_an_older_run.csv").exists()  # the old report went as a whole
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    import core.outputs.figures

    def disk_full(fig, path):
        Path(path).write_bytes(b"")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(core.outputs.figures, "save_figure", disk_full)
    assert main(_report_args(tiny_digits, digits_posterior, out)) == 2
    assert "no space left on device" in _one_line_error(capsys)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier report, intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits", "p.pt", "report"]  # no temp folder


def test_evaluate_refuses_a_folder_of_other_files_before_working(tiny_digits, digits_posterior, tmp_path, capsys):
    out = tmp_path / "documents"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    assert main(_report_args(tiny_digits, digits_posterior, out)) == 2
    assert "already holds other files" in _one_line_error(capsys)
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]


# ==================================================================== 3. bad input


def _special_file(kind: str, tmp_path: Path) -> Path:
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif kind == "socket":
        path = tmp_path / "sock"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "device":
        path = Path("/dev/null")
    else:
        path = tmp_path / "folder"
        path.mkdir()
    return path


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "directory"])
def test_out_that_is_not_a_regular_file_is_refused_before_training(kind, tiny_digits, tmp_path, monkeypatch, capsys):
    import core.commands.train

    if kind in ("fifo", "socket") and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs or UNIX sockets here")
    target = _special_file(kind, tmp_path)
    before = target.stat()
    monkeypatch.setattr(core.commands.train, "fit_posterior", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    assert main(["train", "--dataset", str(tiny_digits), "--method", "map", "--out", str(target)]) == 2
    line = _one_line_error(capsys)
    assert str(target) in line and ("not a regular file" in line or "is a folder" in line)
    assert target.stat().st_mode == before.st_mode and target.stat().st_ino == before.st_ino
    with pytest.raises(NotSavedError):
        atomic_write(target, lambda fh: fh.write(b"x"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--samples", "-5"], "--samples must be at least 1"),
        (["--samples", "0"], "--samples must be at least 1"),
        (["--level", "1.5"], "--level must lie strictly between 0 and 1"),
        (["--samples", "10000000"], "10000000 samples of this laplace posterior for 1 image(s) would need about"),
    ],
)
def test_predict_sizes(argv, message, tmp_path, capsys, memory_8gb):
    image = _save((_stroke() * 255).astype(np.uint8), tmp_path / "one.png")
    assert main(["predict", str(image), *argv]) == 2
    line = _one_line_error(capsys)
    assert message in line
    if "would need" in line:
        assert line.endswith("of memory, but only 6.4 GB is available; use fewer samples")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--samples", "0"], "--samples must be at least 1"),
        (["--limit", "-2"], "--limit must be at least 1"),
        (["--angle-step", "0"], "--angle-step must lie in (0, 180]"),
        (["--angle-step", "nan"], "--angle-step must lie in (0, 180]"),
        (["--level", "0"], "--level must lie strictly between 0 and 1"),
        (["--rotate", "x.png", "--angle-step", "1e-6"],
         "a rotation sweep of 180000001 angles with 100 samples of network_lenet5_mc_dropout would need about"),
        (["--samples", "10000000"], "10000000 samples of this mc_dropout posterior"),
    ],
)
def test_evaluate_sizes(argv, message, tmp_path, capsys, memory_8gb):
    dropout = str(ROOT / "resources" / "models" / "network_lenet5_mc_dropout.pt")
    code = main(["evaluate", "--posterior", dropout, "--dataset", str(tmp_path), *argv,
                 "--out", str(tmp_path / "report")])
    assert code == 2
    assert message in _one_line_error(capsys)
    assert not (tmp_path / "report").exists()


def test_memory_estimate_helper_names_sizes_in_words(memory_8gb):
    with pytest.raises(core.engine.memory.MemoryEstimateError,
                       match=r"^a test would need about 31\.4 GB of memory, but only 6\.4 GB is available; do less$"):
        core.engine.memory.check_fits(31.4 * GB, "a test", "do less")
    core.engine.memory.check_fits(6 * GB, "a test", "do less")  # fits: no error
