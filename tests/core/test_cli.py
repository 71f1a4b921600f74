"""bayescope-cli train / predict, end to end on small data, and its error messages."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from core.commands.main import main
from core.engine.resources import default_posterior_path
from core.engine.store import load_posterior


@pytest.fixture
def digit_png(tmp_path):
    arr = np.zeros((60, 60), np.uint8)
    arr[10:50, 27:33] = 255  # a "1", light on dark
    path = tmp_path / "one.png"
    Image.fromarray(arr).save(path)
    return path


def test_train_then_predict_json(tiny_mnist, tmp_path, digit_png, capsys):
    out = tmp_path / "p.pt"
    rc = main(["train", "--data-dir", str(tiny_mnist), "--model", "mlp", "--method", "mc_dropout",
               "--drop-rate", "0.2", "--set", "epochs=3", "--set", "lr=3e-3", "--seed", "4", "--out", str(out),
               "--name", "short run"])
    assert rc == 0
    assert "test accuracy" in capsys.readouterr().out
    post = load_posterior(out)
    assert post.seed == 4 and post.config["epochs"] == 3 and post.info["test_accuracy"] > 0.9
    assert post.info["name"] == "short run"  # the name heads its column (core.engine.naming.posterior_title)
    rc = main(["predict", str(digit_png), "--posterior", str(out), "--samples", "20", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0 and result["num_samples"] == 20
    assert len(result["classes"]) == 10
    assert sum(c["mean"] for c in result["classes"]) == pytest.approx(1.0, abs=1e-5)
    u = result["uncertainty"]
    assert u["total"] == pytest.approx(u["aleatoric"] + u["epistemic"], abs=1e-6)
    assert all(c["lower"] <= c["mean"] + 1e-6 and c["mean"] <= c["upper"] + 1e-6 for c in result["classes"])


def test_predict_with_bundled_default(digit_png, capsys):
    assert default_posterior_path().is_file()
    assert main(["predict", str(digit_png)]) == 0
    text = capsys.readouterr().out
    assert "predicted class: 1" in text and "epistemic" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["predict", "/no/such/image.png"], "no such file"),
        (["train", "--data-dir", "/no/such/folder", "--out", "x.pt"], "train-images-idx3-ubyte"),
        (["train", "--method", "map", "--set", "learning_rate=1", "--out", "x.pt"], "no setting"),
        (["train", "--method", "map", "--set", "epochs", "--out", "x.pt"], "NAME=VALUE"),
    ],
)
def test_user_errors_are_one_line_with_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_predict_rejects_bad_posterior_and_empty_image(tmp_path, digit_png, capsys):
    (tmp_path / "bad.pt").write_bytes(b"junk")
    assert main(["predict", str(digit_png), "--posterior", str(tmp_path / "bad.pt")]) == 2
    assert "not a readable posterior" in capsys.readouterr().err
    Image.fromarray(np.zeros((30, 30), np.uint8)).save(tmp_path / "blank.png")
    assert main(["predict", str(tmp_path / "blank.png")]) == 2
    assert "empty" in capsys.readouterr().err


def test_ctrl_c_writes_nothing(tiny_mnist, tmp_path, monkeypatch, capsys):
    import core.commands.train

    def interrupted(generator, on_progress=None):
        next(generator)
        generator.close()
        raise KeyboardInterrupt

    monkeypatch.setattr(core.commands.train, "drain", interrupted)
    out = tmp_path / "never.pt"
    assert main(["train", "--data-dir", str(tiny_mnist), "--model", "softmax", "--method", "map", "--out", str(out)]) == 130
    assert not out.exists() and "cancelled" in capsys.readouterr().err


def test_a_one_draw_posterior_reports_its_epistemic_uncertainty_as_not_available(capsys):
    from core.engine.resources import resources_dir

    image, posterior = resources_dir() / "examples" / "digit-7.png", resources_dir() / "models" / "paper_softmax_map.pt"
    assert main(["predict", str(image), "--posterior", str(posterior)]) == 0
    assert "epistemic n/a (one draw)" in capsys.readouterr().out
    assert main(["predict", str(image), "--posterior", str(posterior), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["num_samples"] == 1 and record["uncertainty"]["epistemic"] is None
