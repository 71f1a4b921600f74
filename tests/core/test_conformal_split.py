"""The calibration images are neither training images nor evaluated images, by identity; the
sidecar records them and is refused for another posterior file."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from core.analysis.conformal import calibration_mask, image_fingerprints
from core.analysis.conformal_run import attach_conformal, calibrate, calibration_of_record
from core.analysis.evaluation_results import Evaluation, PosteriorEvaluation
from core.analysis.streaming import DatasetPredictions
from core.engine.calibration_file import (
    CalibrationFileError,
    read_calibration,
    sidecar_path,
    write_calibration,
)
from core.engine.data.datasets import load_split
from core.engine.data.split import unpack
from core.engine.resources import resources_dir
from core.engine.runner import drain
from core.engine.store import load_posterior

HMC = resources_dir() / "models" / "paper_softmax_hmc.pt"


@pytest.fixture(scope="module")
def mnist(shared_data):
    return (load_split("mnist", "test", root=shared_data / "mnist"),
            load_split("mnist", "train", root=shared_data / "mnist"))


def test_the_bundled_calibration_is_disjoint_from_training_and_evaluated_images(mnist):
    test, train = mnist
    record = read_calibration(HMC)
    assert record is not None, "the bundled HMC posterior ships its calibration"
    identity = record["identity"]
    # file identity: the calibration images come from the test files, not the training files
    test_files = {e["content_sha256"] for e in test.source["files"].values()}
    train_files = {e["content_sha256"] for e in train.source["files"].values()}
    assert {e["content_sha256"] for e in identity["dataset_files"].values()} == test_files
    assert {e["content_sha256"] for e in identity["training_files"].values()} == train_files
    assert not test_files & train_files
    # image identity: the recorded images are the hash-chosen half of the test images it was
    # given (the first ``of_images``), none a training image, none an evaluated image
    prints = image_fingerprints(test.x[: identity["of_images"]].numpy())
    chosen = calibration_mask(prints)
    recorded = unpack(identity["fingerprints"])
    assert recorded == {p for p, c in zip(prints, chosen, strict=True) if c}
    assert identity["images"] == len(recorded) == int(chosen.sum())
    assert not recorded & set(image_fingerprints(train.x.numpy()))
    evaluated = {p for p, c in zip(image_fingerprints(test.x.numpy()), calibration_mask(image_fingerprints(
        test.x.numpy())), strict=True) if not c}
    assert not recorded & evaluated


def test_evaluation_leaves_the_calibration_images_out(mnist):
    test, _ = mnist
    posterior = load_posterior(HMC)
    k = 10
    proba = np.full((len(test), k), 1.0 / k)  # any predictive: only which images count is tested
    labels = test.y.numpy()
    preds = DatasetPredictions(proba, labels, {}, np.zeros((1, len(test)), np.int64), 1)
    ev = Evaluation(test.name, tuple("0123456789"), {"hmc": PosteriorEvaluation(posterior, preds)})
    attach_conformal(ev, test, {"hmc": HMC}, level=0.9)
    rows = ev.conformal["hmc"]["rows"]
    n_cal = read_calibration(HMC)["identity"]["images"]  # all of them among the test images
    for row in rows:
        assert row["left_out_calibration_images"] == n_cal
        assert row["evaluated_images"] == len(test) - n_cal
        assert row["exchangeable"] is True


def test_calibrate_leaves_out_a_training_image_and_records_what_it_used(mnist):
    test, train = mnist
    posterior = load_posterior(resources_dir() / "models" / "paper_softmax_map.pt")
    data = test.subset(torch.arange(200))
    chosen = np.flatnonzero(calibration_mask(image_fingerprints(data.x.numpy())))
    # a training set that holds one of the chosen test images: it must not calibrate
    leaked = train.subset(torch.arange(50))
    leaked.x[0] = data.x[chosen[0]]
    calibration, record = drain(calibrate(posterior, data, leaked, num_samples=1))
    assert record["identity"]["left_out_as_training_images"] == 1
    assert calibration.n == len(chosen) - 1
    assert image_fingerprints(data.x[chosen[:1]].numpy())[0] not in unpack(record["identity"]["fingerprints"])
    again = calibration_of_record(record)
    np.testing.assert_array_equal(again.scores["aps"], calibration.scores["aps"])


def test_a_sidecar_is_refused_for_a_changed_posterior(tmp_path):
    path = tmp_path / "paper_softmax_hmc.pt"
    shutil.copy(HMC, path)
    write_calibration(path, {"identity": {}, "aps_seed": 0, "scores": {"threshold": [0.1], "aps": [0.2]}})
    assert sidecar_path(path).name == "paper_softmax_hmc.conformal.json"
    assert read_calibration(path)["posterior_file"] == "paper_softmax_hmc.pt"
    with open(path, "ab") as fh:
        fh.write(b"\0")  # another file now
    with pytest.raises(CalibrationFileError, match="changed since"):
        read_calibration(path)


def test_a_posterior_whose_folder_cannot_be_written_keeps_its_calibration_in_the_user_data_folder(tmp_path, monkeypatch):
    """An installed app's bundled posteriors lie in a folder the person cannot write: the sidecar goes
    to the user's data folder, named by the file's SHA-256, and is read from there; another file of
    the same name finds none."""
    import core.engine.calibration_file as files

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    path = bundled / "paper_softmax_hmc.pt"
    shutil.copy(HMC, path)
    monkeypatch.setattr(files, "_folder_writable", lambda folder: folder != bundled)
    written = write_calibration(path, {"identity": {}, "aps_seed": 0, "scores": {"threshold": [0.1], "aps": [0.2]}})
    assert written.parent == tmp_path / "data-home" / "bayescope" / "calibrations"
    assert not sidecar_path(path).exists()
    assert read_calibration(path)["posterior_file"] == "paper_softmax_hmc.pt"
    other = tmp_path / "elsewhere" / "paper_softmax_hmc.pt"
    other.parent.mkdir()
    shutil.copy(HMC, other)
    with open(other, "ab") as fh:
        fh.write(b"\0")  # another file of the same name
    assert read_calibration(other) is None
