"""A grey model of any side: ``train --image-size 8`` on a grey folder saves a posterior that
``info``, ``evaluate`` and ``predict`` use on its own folder (the loader refused every grey model
that was not 28×28, "every image here is 28×28", even for that folder), and the one rule of what a
model reads (:mod:`core.engine.model_inputs`) says that such a model judges photos, never digits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.commands.main import main
from core.engine.data.idx import write_idx
from core.engine.inference.base import SampledPosterior
from core.engine.model_inputs import IMAGE_SIZE, reads_digits, reads_photos, why_not_a_digit
from core.engine.models import ArchSpec, build_model
from core.engine.store import load_posterior, save_posterior
from core.engine.store_records import read_records
from tests.conftest import grey_shapes, train_at_eight

CLASSES = ("bar", "column", "square")


@pytest.fixture(scope="module")
def grey_eight(tmp_path_factory) -> tuple[Path, Path]:
    """(folder, posterior): a MAP softmax regression trained by the CLI on grey images read at 8×8."""
    folder = grey_shapes(tmp_path_factory.mktemp("grey") / "shapes", CLASSES)
    return folder, train_at_eight(folder)


def test_train_info_evaluate_predict_round_trip_at_eight_pixels(grey_eight, tmp_path, capsys):
    folder, path = grey_eight
    posterior = load_posterior(path)  # refused before: "every image here is 28×28 (MNIST's size)"
    assert posterior.arch.image_size == 8 and posterior.arch.channels == 1
    capsys.readouterr()

    assert main(["info", str(path), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert records["architecture"]["image_size"] == 8 and records["class_names"] == list(CLASSES)

    out = tmp_path / "evaluation"
    assert main(["evaluate", "--posterior", str(path), "--dataset", str(folder), "--samples", "1",
                 "--out", str(out)]) == 0
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["data"]["image_size"] == 8 and evaluation["data"]["channels"] == 1  # read at its side
    (row,) = evaluation["summary"]
    assert row["examples"] == evaluation["data"]["images"] > 0
    # the shapes differ by a bright stripe or square, visible at 8×8: the model tells them all apart
    assert row["accuracy"] >= 0.9, row
    capsys.readouterr()

    column = folder / "column" / "3.png"
    assert main(["predict", str(column), "--posterior", str(path), "--json"]) == 0
    prediction = json.loads(capsys.readouterr().out)
    assert prediction["classes"][prediction["predicted_class"]]["class"] == "column"


def test_a_grey_model_of_another_side_judges_photos_and_says_why_not_a_digit(grey_eight):
    _, path = grey_eight
    arch = load_posterior(path).arch
    assert reads_photos(arch) and not reads_digits(arch)
    assert reads_photos(read_records(path).arch)  # the window's records, before the engine loads, agree
    sentence = why_not_a_digit(arch)
    assert sentence.startswith("This posterior was trained on your own grey 8×8 images")
    assert f"a drawn or picked digit is {IMAGE_SIZE}×{IMAGE_SIZE} (MNIST's size)" in sentence
    assert "Image tab" in sentence and "/" not in sentence and "Error" not in sentence


@pytest.mark.parametrize(("arch", "photos"), [
    (ArchSpec("lenet"), False),  # MNIST's digits, used as they are
    (ArchSpec("softmax", image_size=28, mean=(0.3,), std=(0.2,)), True),  # a grey folder at 28, standardised
    (ArchSpec("lenet", image_size=20), True),  # grey of another side, even unstandardised (an import)
    (ArchSpec("resnet", image_size=32, channels=3), True),
    (ArchSpec("softmax", input_dim=128), False),  # a face descriptor: neither
])
def test_what_a_model_reads_is_decided_by_one_rule(arch, photos, tmp_path):
    assert reads_photos(arch) is photos
    assert reads_digits(arch) is (not photos and not arch.input_dim)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    path = save_posterior(SampledPosterior("map", arch, {}, 0, "x-train", samples, {}), tmp_path / "p.pt")
    assert reads_photos(read_records(path).arch) is photos  # the same answer from the file's records
    assert load_posterior(path).arch == arch  # every side loads


def test_an_unstandardised_grey_model_of_another_side_reads_photos_and_refuses_digit_sets(tmp_path, capsys):
    """A grey LeNet at 20×20 without a standardisation of its own (an imported network) was refused on
    loading; it now reads a photo at 20×20, and a set of 28×28 digits is refused in one line."""
    arch = ArchSpec("lenet", image_size=20)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    path = save_posterior(SampledPosterior("map", arch, {}, 0, "x-train", samples, {}), tmp_path / "p.pt")
    image = tmp_path / "stroke.png"
    Image.fromarray(np.pad(np.full((16, 4), 255, np.uint8), 6)).save(image)
    assert main(["predict", str(image), "--posterior", str(path), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["classes"]) == 10
    digits = tmp_path / "digits"
    digits.mkdir()
    rng = np.random.default_rng(0)
    for prefix in ("train", "t10k"):
        write_idx(digits / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 255, (20, 28, 28)).astype(np.uint8))
        write_idx(digits / f"{prefix}-labels-idx1-ubyte.gz", (np.arange(20) % 10).astype(np.uint8))
    assert main(["evaluate", "--posterior", str(path), "--dataset", str(digits), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "(1, 28, 28)" in err and "(1, 20, 20)" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
