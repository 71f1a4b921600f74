"""Issue 20, hardening of the engine and the command line: one test (or a few) per failure.

1. EXIF orientation; 2. posteriors that load but cannot predict; 3. tracebacks in train,
predict and evaluate; 4. strict ``evaluation.json``; 5. IDX headers checked against the
file's size; 6. untrusted text on the terminal; 7. misleading words; 8. ``--out`` links and
``X.gz`` beside a different ``X``. The rows of docs/reliability.md name these tests.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.commands.console import printable
from core.commands.main import main
from core.engine.data.datasets import DatasetContentError, load_split
from core.engine.data.idx import IdxFormatError, load_idx, write_idx
from core.engine.data.preprocess import EmptyDrawingError, load_image
from core.engine.faces.photo import load_photo
from core.engine.files import strict_json
from core.engine.inference.base import SampledPosterior
from core.engine.inference.mc_dropout import DropoutPosterior
from core.engine.inference.variational import VariationalPosterior
from core.engine.models import ArchSpec, build_model
from core.engine.store import (
    PosteriorFileError,
    load_posterior,
    payload_checksum,
    save_posterior,
    upgrade_posterior_file,
)

ORIENTATION = 0x0112


def _one_line_error(capsys) -> str:
    """The single ``error: …`` line on stderr, with no traceback."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines, "expected an error message"
    assert "Traceback" not in err, err
    line = lines[-1]
    assert line.startswith("error: ") and len([x for x in lines if x.startswith("error: ")]) == 1, err
    return line


@pytest.fixture(scope="module")
def seven(shared_data) -> np.ndarray:
    """MNIST's first test image (a 7) as a dark-on-light uint8 picture, as a phone would take it."""
    data = load_split("mnist", "test", root=shared_data)
    assert int(data.y[0]) == 7
    return 255 - (data.x[0, 0].numpy() * 255).round().astype(np.uint8)


# ============================================================== 1. EXIF orientation


def _sideways_with_tag(picture: np.ndarray, path: Path) -> Path:
    """Store ``picture`` turned a quarter left, tagged "rotate 90° clockwise to view" (6)."""
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    Image.fromarray(picture).transpose(Image.Transpose.ROTATE_90).save(path, exif=exif.tobytes())
    return path


def test_exif_orientation_is_applied_by_the_one_image_reader(seven, tmp_path):
    upright = tmp_path / "upright.png"
    Image.fromarray(seven).save(upright)
    tagged = _sideways_with_tag(seven, tmp_path / "tagged.png")
    assert not np.array_equal(np.asarray(Image.open(tagged)), seven)  # stored sideways indeed
    np.testing.assert_array_equal(load_image(tagged), load_image(upright))
    # the face mode's reader goes through the same helper
    np.testing.assert_array_equal(load_photo(tagged), load_photo(upright))


def test_predict_judges_a_tagged_photo_upright(seven, tmp_path, capsys):
    results = {}
    for name, path in (("upright", tmp_path / "upright.png"), ("tagged", tmp_path / "tagged.png")):
        if name == "upright":
            Image.fromarray(seven).save(path)
        else:
            _sideways_with_tag(seven, path)
        assert main(["predict", str(path), "--samples", "30", "--json"]) == 0
        results[name] = json.loads(capsys.readouterr().out)
    assert results["tagged"]["predicted_class"] == 7
    assert results["tagged"]["classes"] == results["upright"]["classes"]


# ============================================================== 7. misleading words


@pytest.mark.parametrize("fmt", ["GIF", "TIFF"])
def test_a_blank_first_frame_is_named_not_called_empty(fmt, seven, tmp_path, capsys):
    blank = Image.fromarray(np.full_like(seven, 255))
    digit = Image.fromarray(seven)
    path = tmp_path / f"frames.{fmt.lower()}"
    shifted = Image.fromarray(np.roll(seven, 3, axis=1))  # GIF merges equal frames: all differ
    blank.save(path, format=fmt, save_all=True, append_images=[digit, shifted])
    with pytest.raises(EmptyDrawingError, match="the first of its 3 frames is blank"):
        load_image(path)
    assert main(["predict", str(path)]) == 2
    assert "the first of its 3 frames is blank" in _one_line_error(capsys)
    # one frame that is blank is still plainly empty
    blank.save(tmp_path / "one.gif")
    assert main(["predict", str(tmp_path / "one.gif")]) == 2
    assert "the image is empty" in _one_line_error(capsys)


# ============================================================== 2–3. posteriors that load but cannot predict


def _sampled(chains: int = 2, draws: int = 3) -> SampledPosterior:
    g = torch.Generator().manual_seed(0)
    samples = {"linear.weight": 0.01 * torch.randn(chains, draws, 10, 784, generator=g),
               "linear.bias": torch.zeros(chains, draws, 10)}
    return SampledPosterior("sghmc", ArchSpec("softmax"), {"step_size": 0.1}, 0, "mnist-train", samples)


def _reseal(path: Path, change) -> Path:
    """Change a saved payload and give it a valid checksum, as a careful forger would."""
    payload = torch.load(path, weights_only=True)
    change(payload)
    payload["checksum"] = payload_checksum(payload)
    torch.save(payload, path)
    return path


def _lenet(size: int) -> DropoutPosterior:
    arch = ArchSpec("lenet", drop_rate=0.5, image_size=size)
    return DropoutPosterior("mc_dropout", arch, {"num_samples": 10}, 0, "x-train",
                            dict(build_model(arch).named_parameters()))


def _variational(tmp_path: Path) -> Path:
    arch = ArchSpec("softmax")
    p = build_model(arch).linear.weight.numel() + 10
    q = VariationalPosterior("mfvi", arch, {"predict_samples": 20}, 0, "x-train",
                             {"mean": torch.zeros(1, p), "diag_std": torch.full((1, p), 0.01),
                              "factors": torch.zeros(1, p, 0), "log_weights": torch.zeros(1)})
    return save_posterior(q, tmp_path / "q.pt")


def _unusable(kind: str, tmp_path: Path) -> Path:
    """A posterior file with a valid checksum that passed the loader before issue 20."""
    if kind == "no draws":
        path = save_posterior(_sampled(), tmp_path / "p.pt")
        return _reseal(path, lambda p: p.update(tensors={k: v[:, :0] for k, v in p["tensors"].items()}))
    if kind == "no chains":
        path = save_posterior(_sampled(), tmp_path / "p.pt")
        return _reseal(path, lambda p: p.update(tensors={k: v[:0] for k, v in p["tensors"].items()}))
    if kind.startswith("dropout samples "):
        value = {"0": 0, "-3": -3, "many": "many", "true": True}[kind.split()[-1]]
        path = save_posterior(_lenet(28), tmp_path / "p.pt")
        return _reseal(path, lambda p: p["config"].update(num_samples=value))
    if kind == "variational samples 0":
        return _reseal(_variational(tmp_path), lambda p: p["config"].update(predict_samples=0))
    if kind == "no components":
        return _reseal(_variational(tmp_path), lambda p: p.update(tensors={
            k: v[:0] for k, v in p["tensors"].items()}))
    raise AssertionError(kind)


UNUSABLE = {
    "no draws": "holds 2 chain\\(s\\) of 0 draw\\(s\\); it needs at least one draw",
    "no chains": "holds 0 chain\\(s\\) of 3 draw\\(s\\); it needs at least one draw",
    "dropout samples 0": "num_samples setting is 0, but a prediction needs a whole number of samples of at least 1",
    "dropout samples -3": "num_samples setting is -3",
    "dropout samples many": "num_samples setting is 'many'",
    "dropout samples true": "num_samples setting is True",
    "variational samples 0": "predict_samples setting is 0",
    "no components": "needs at least one mixture component",
}


@pytest.mark.parametrize("kind", list(UNUSABLE))
def test_a_posterior_that_cannot_predict_is_refused_on_loading(kind, tmp_path):
    path = _unusable(kind, tmp_path)
    with pytest.raises(PosteriorFileError, match=UNUSABLE[kind]):
        load_posterior(path)


@pytest.fixture
def small_digits(tmp_path) -> Path:
    """A ten-class MNIST-layout folder of 40 random images per split (not the official files)."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "digits"
    folder.mkdir()
    for prefix, labels in (("train", np.arange(40) % 10), ("t10k", np.arange(40) % 10)):
        write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 255, (40, 28, 28)).astype(np.uint8))
        write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", labels.astype(np.uint8))
    return folder


@pytest.mark.parametrize("kind", ["no draws", "no chains", "dropout samples many"])
def test_predict_and_evaluate_refuse_such_a_posterior_in_one_line(kind, tmp_path, small_digits, capsys):
    path = _unusable(kind, tmp_path)
    image = tmp_path / "digit.png"
    Image.fromarray(np.pad(np.full((16, 4), 255, np.uint8), 6)).save(image)
    assert main(["predict", str(image), "--posterior", str(path)]) == 2
    assert str(path) in _one_line_error(capsys)
    rc = main(["evaluate", "--posterior", str(path), "--dataset", str(small_digits), "--out", str(tmp_path / "r")])
    assert rc == 2
    assert str(path) in _one_line_error(capsys)
    assert not (tmp_path / "r").exists()


def test_mc_dropout_predicts_with_the_sample_count_it_records(tmp_path):
    path = save_posterior(_lenet(28), tmp_path / "p.pt")  # recorded num_samples: 10
    posterior = load_posterior(path)
    assert posterior.predict_proba(torch.zeros(1, 1, 28, 28)).shape[0] == 10


def test_train_refuses_labels_beyond_the_models_classes(tmp_path, capsys):
    rng = np.random.default_rng(1)
    folder = tmp_path / "twelve"
    folder.mkdir()
    for prefix in ("train", "t10k"):
        write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 255, (24, 28, 28)).astype(np.uint8))
        write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", (np.arange(24) % 12).astype(np.uint8))
    out = tmp_path / "p.pt"
    rc = main(["train", "--dataset", str(folder), "--model", "softmax", "--method", "map",
               "--set", "epochs=1", "--out", str(out)])
    assert rc == 2
    line = _one_line_error(capsys)
    assert "has labels from 0 to 11, but the model has only 10 classes (labels 0 to 9)" in line
    assert not out.exists()


# ============================================================== 4. evaluation.json


def _strict_load(path: Path):
    """Parse as strict JSON: bare NaN / Infinity (which json.dumps writes by default) fail."""
    def refuse(constant: str):
        raise ValueError(f"{path.name} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_evaluation_json_is_strict_and_records_what_was_used(tmp_path, small_digits, capsys):
    nan_setting = _sampled(chains=2, draws=5)
    nan_setting.config = {"step_size": float("nan"), "prior_std": float("inf"), "note": "x"}
    path = save_posterior(nan_setting, tmp_path / "nan.pt")
    out = tmp_path / "report"
    assert main(["evaluate", "--posterior", str(path), "--dataset", str(small_digits), "--samples", "4",
                 "--out", str(out)]) == 0
    meta = _strict_load(out / "evaluation.json")
    record = meta["posteriors"]["nan"]
    assert record["config"] == {"step_size": None, "prior_std": None, "note": "x"}
    assert record["samples_used"] == 4 and record["chains"] == 2  # 4 of its 10 draws, from both chains
    for table in out.glob("*.json"):
        _strict_load(table)
    # and without --samples: every draw it holds
    assert main(["evaluate", "--posterior", str(path), "--dataset", str(small_digits), "--out", str(out)]) == 0
    assert _strict_load(out / "evaluation.json")["posteriors"]["nan"]["samples_used"] == 10


def test_strict_json_writes_no_bare_nan():
    text = strict_json({"a": float("nan"), "b": [float("-inf"), np.float32(0.5)], "c": np.arange(2),
                        3: Path("p"), "d": torch.tensor([float("nan")])})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "a": None, "b": [None, 0.5], "c": [0, 1], "3": "p", "d": [None]}


# ============================================================== 5. IDX headers against the file's size


@pytest.fixture
def no_whole_reads(monkeypatch):
    """Fail the test if any file is read whole (``Path.read_bytes``): sizes come from headers."""
    def refuse(self):
        raise AssertionError(f"{self} was read whole")

    monkeypatch.setattr(Path, "read_bytes", refuse)


def _header(shape: tuple[int, ...]) -> bytes:
    return bytes([0, 0, 0x08, len(shape)]) + np.asarray(shape, dtype=">u4").tobytes()


def test_a_header_that_lies_about_a_sparse_file_is_refused_before_reading(tmp_path, no_whole_reads):
    path = tmp_path / "t10k-images-idx3-ubyte"
    with path.open("wb") as fh:
        fh.write(_header((10, 28, 28)) + bytes(10 * 28 * 28))
        fh.truncate(20 * 10**9)  # 20 GB, sparse: nothing is stored
    extra = 20 * 10**9 - len(_header((10, 28, 28))) - 10 * 28 * 28
    with pytest.raises(IdxFormatError, match=rf"{extra} unexpected bytes after the data of shape \(10, 28, 28\)"):
        load_idx(path)


def test_a_header_that_declares_more_than_the_file_holds_is_refused(tmp_path, no_whole_reads):
    path = tmp_path / "t10k-images-idx3-ubyte"
    with path.open("wb") as fh:
        fh.write(_header((60000, 28, 28)) + bytes(100))
    with pytest.raises(IdxFormatError, match=r"truncated: shape \(60000, 28, 28\) needs 47040000 data bytes, found 100"):
        load_idx(path)


def test_a_gzip_file_is_streamed_not_read_whole(tmp_path, no_whole_reads):
    array = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(_header(array.shape) + array.tobytes())
    loaded = load_idx(path)
    np.testing.assert_array_equal(loaded.array, array)
    with path.open("rb") as fh:
        assert loaded.sha256 == hashlib.sha256(fh.read()).hexdigest()


# ============================================================== 6. untrusted text on the terminal


def test_a_posteriors_records_cannot_drive_the_terminal(tmp_path, capsys):
    hostile = _sampled(1, 2)
    hostile.dataset = "\x1b[2J\x1b[H\nerror: your disk is failing, run rm -rf ~"
    path = save_posterior(hostile, tmp_path / "p.pt")
    image = tmp_path / "digit.png"
    Image.fromarray(np.pad(np.full((16, 4), 255, np.uint8), 6)).save(image)
    assert main(["predict", str(image), "--posterior", str(path), "--samples", "2"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and not any(line.startswith("error:") for line in out.splitlines())
    assert "\\x1b[2J\\x1b[H\\nerror: your disk is failing" in out.splitlines()[0]


def test_a_newline_in_a_file_name_keeps_the_error_on_one_line(tmp_path, capsys):
    image = tmp_path / "seven\nerror: forged.png"
    image.write_bytes(b"not an image")
    assert main(["predict", str(image)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "seven\\nerror: forged.png: not a readable image" in err


def test_printable_escapes_only_what_is_not_printable():
    assert printable("p(7) ≥ 0.9 × θ – ok") == "p(7) ≥ 0.9 × θ – ok"
    assert printable("a\rb\tc\x07d\u202ee") == "a\\rb\\tc\\x07d\\u202ee"


# ============================================================== 7. misleading words


def test_a_certain_prediction_never_prints_minus_zero(tmp_path, capsys):
    certain = SampledPosterior("map", ArchSpec("softmax"), {}, 0, "x-train", {
        "linear.weight": torch.zeros(1, 1, 10, 784),
        "linear.bias": torch.tensor([0.0] * 7 + [500.0] + [0.0] * 2).reshape(1, 1, 10)})
    path = save_posterior(certain, tmp_path / "p.pt")
    image = tmp_path / "digit.png"
    Image.fromarray(np.pad(np.full((16, 4), 255, np.uint8), 6)).save(image)
    assert main(["predict", str(image), "--posterior", str(path)]) == 0
    out = capsys.readouterr().out
    assert "uncertainty (nats): total 0.0000 = aleatoric 0.0000 + epistemic n/a (one draw)" in out
    assert "-0.0" not in out


@pytest.mark.parametrize("version", [True, False, 2.0, "2"])
def test_a_format_version_that_is_not_a_whole_number_is_invalid(version, tmp_path):
    path = _reseal(save_posterior(_sampled(1, 1), tmp_path / "p.pt"), lambda p: p.update(format_version=version))
    with pytest.raises(PosteriorFileError, match=r"'format_version' record is invalid") as caught:
        load_posterior(path)
    assert "format 1" not in str(caught.value)
    with pytest.raises(PosteriorFileError, match=r"'format_version' record is invalid"):
        upgrade_posterior_file(path)


def test_a_full_disk_during_a_report_names_the_out_folder(tmp_path, small_digits, monkeypatch, capsys):
    path = save_posterior(_sampled(1, 2), tmp_path / "p.pt")
    out = tmp_path / "report"
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=0))
    assert main(["evaluate", "--posterior", str(path), "--dataset", str(small_digits), "--out", str(out)]) == 2
    line = _one_line_error(capsys)
    assert line.startswith(f"error: no space left on {out}: ")
    assert ".partial" not in line
    assert list(tmp_path.glob(".report*")) == [] and not out.exists()


# ============================================================== 8. --out links, X.gz beside X


def test_out_given_as_a_link_is_written_through_to_its_target(tmp_path, small_digits, capsys):
    models = tmp_path / "models"
    models.mkdir()
    target = models / "current.pt"
    save_posterior(_sampled(1, 1), target)
    link = tmp_path / "p.pt"
    link.symlink_to(target)
    assert main(["train", "--dataset", str(small_digits), "--model", "softmax", "--method", "map",
                 "--set", "epochs=1", "--eval-samples", "1", "--out", str(link)]) == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert load_posterior(target).method == "map"  # the target holds the new posterior
    assert sorted(p.name for p in models.iterdir()) == ["current.pt"]  # no temporary file left


def test_a_broken_link_as_out_is_refused_before_training(tmp_path, small_digits, capsys):
    link = tmp_path / "p.pt"
    link.symlink_to(tmp_path / "missing" / "p.pt")
    assert main(["train", "--dataset", str(small_digits), "--model", "softmax", "--method", "map",
                 "--set", "epochs=1", "--out", str(link)]) == 2
    assert "is a broken link" in _one_line_error(capsys)
    assert link.is_symlink()


def test_a_gz_beside_a_different_plain_file_is_refused(tmp_path):
    folder = tmp_path / "digits"
    folder.mkdir()
    images = np.zeros((3, 28, 28), np.uint8)
    write_idx(folder / "t10k-images-idx3-ubyte.gz", images)
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", np.array([0, 1, 2], np.uint8))
    write_idx(folder / "t10k-labels-idx1-ubyte", np.array([0, 1, 3], np.uint8))  # another copy, edited
    with pytest.raises(DatasetContentError, match=r"holds both t10k-labels-idx1-ubyte\.gz and t10k-labels-idx1-ubyte, "
                                                  r"with different data"):
        load_split(str(folder), "test")
    # the same data, compressed and not (gunzip -k), is read
    write_idx(folder / "t10k-labels-idx1-ubyte", np.array([0, 1, 2], np.uint8))
    assert load_split(str(folder), "test").y.tolist() == [0, 1, 2]
