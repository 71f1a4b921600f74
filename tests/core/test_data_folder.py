"""The one data folder: find_dataset finds MNIST, notMNIST and UTKFace, or says what, where and what to do."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from core.analysis.evaluation import resolve_dataset
from core.commands.main import main
from core.engine.data import datasets
from core.engine.data.idx import write_idx
from core.engine.data.locate import (
    DOWNLOAD_ON_COMMAND_LINE,
    DatasetMissingError,
    find_dataset,
    search_places,
)
from core.engine.faces.testset import utkface_location

BUNDLED_MAP = Path(__file__).resolve().parents[2] / "resources" / "models" / "paper_softmax_map.pt"


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch) -> Path:
    """The user cache is a fresh folder: nothing found there unless a test puts it there."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "bayescope" / "data"


def _write_test_split(folder: Path, n: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    write_idx(folder / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8))
    return folder


@pytest.fixture
def data_folder(tmp_path) -> Path:
    """A data folder as /work/shared/data is laid out (notMNIST spelt as its authors do)."""
    root = tmp_path / "data"
    _write_test_split(root / "mnist")
    _write_test_split(root / "notMNIST")
    (root / "utkface").mkdir()
    (root / "utkface" / "UTKFace.tar.gz").write_bytes(b"")
    return root


def test_each_set_is_found_in_its_sub_folder(data_folder):
    assert find_dataset("mnist", data_folder) == data_folder / "mnist"
    assert find_dataset("notmnist", data_folder) == data_folder / "notMNIST"
    assert find_dataset("utkface", data_folder) == data_folder / "utkface"
    assert utkface_location(data_folder) == data_folder / "utkface"


def test_a_sets_own_folder_is_accepted_when_named_after_it_or_self_identifying(data_folder, tmp_path):
    assert find_dataset("mnist", data_folder / "mnist") == data_folder / "mnist"
    assert find_dataset("notmnist", data_folder / "notMNIST") == data_folder / "notMNIST"
    # MNIST's files are checked against the official checksums when read, so any folder will do
    _write_test_split(tmp_path / "digits")
    assert find_dataset("mnist", tmp_path / "digits") == tmp_path / "digits"
    assert resolve_dataset("mnist-test", tmp_path / "digits").name.startswith("digits@")
    # a folder of test files named otherwise is not taken for notMNIST: it may hold digits
    _write_test_split(tmp_path / "letters")
    with pytest.raises(DatasetMissingError):
        find_dataset("notmnist", tmp_path / "letters")


def test_the_user_cache_is_looked_in_last(tmp_path, empty_cache):
    _write_test_split(empty_cache / "mnist")
    assert find_dataset("mnist", tmp_path / "empty") == empty_cache / "mnist"
    assert find_dataset("mnist", None) == empty_cache / "mnist"
    empty = tmp_path / "empty"
    assert search_places("mnist", empty) == [empty / "mnist", empty, empty_cache / "mnist"]
    assert search_places("notmnist", empty) == [empty / "notmnist", empty_cache / "notmnist"]


def test_the_training_split_must_be_there_for_training(data_folder):
    with pytest.raises(DatasetMissingError, match="MNIST training digits were not found"):
        find_dataset("mnist", data_folder, "train")


@pytest.mark.parametrize("name", ["mnist", "notmnist", "utkface"])
def test_a_missing_set_is_named_with_every_place_looked_in(name, tmp_path, empty_cache):
    folder = tmp_path / "my data"
    folder.mkdir()
    with pytest.raises(DatasetMissingError) as caught:
        find_dataset(name, folder, download_hint=DOWNLOAD_ON_COMMAND_LINE)
    text = str(caught.value)
    title = {"mnist": "The MNIST test digits", "notmnist": "The notMNIST letters", "utkface": "The UTKFace face photos"}
    assert text.startswith(f"{title[name]} (A–J) were not found" if name == "notmnist" else f"{title[name]} were not found")
    assert f"Looked in: {folder / name}; " in text and str(empty_cache / name) in text
    assert (f"; {folder}; " in text) == (name != "notmnist")  # the folder itself, where files self-identify
    assert f"in {folder / name}." in text  # where to put the files
    assert caught.value.searched[0] == folder / name and caught.value.name == name
    if name == "mnist":
        assert caught.value.downloadable
        assert "can download them (about 2 MB)" in text and "--download" in text
    else:
        assert not caught.value.downloadable
        assert "cannot be downloaded" in text and "by hand from http" in text and "--download" not in text


def test_evaluate_names_resolve_through_the_data_folder(data_folder, tmp_path):
    letters = resolve_dataset("notmnist", data_folder)
    assert letters.name == "notmnist-test" and letters.source["folder"] == str((data_folder / "notMNIST").resolve())
    with pytest.raises(DatasetMissingError, match=r"MNIST test digits.*Looked in: .*empty.*--download"):
        resolve_dataset("mnist-test", tmp_path / "empty")


def test_download_fetches_mnist_into_the_cache(shared_data, tmp_path, empty_cache, monkeypatch):
    # the shared copy of the official test files serves as the mirror: the checksums are checked
    mirror = dataclasses.replace(datasets.KNOWN["mnist"], mirrors=((shared_data / "mnist").as_uri(),))
    monkeypatch.setitem(datasets.KNOWN, "mnist", mirror)
    data = resolve_dataset("mnist-test", tmp_path / "empty", download=True)
    assert data.name == "mnist-test" and len(data) == 10_000
    assert (empty_cache / "mnist" / "t10k-images-idx3-ubyte.gz").is_file()


def test_cli_names_the_missing_set_and_places(data_folder, tmp_path, capsys):
    only_digits = tmp_path / "only-digits"
    _write_test_split(only_digits / "mnist")
    rc = main(["evaluate", "--posterior", str(BUNDLED_MAP), "--dataset", "mnist-test", "--ood", "notmnist",
               "--data-dir", str(only_digits), "--limit", "5", "--out", str(tmp_path / "eval")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "notMNIST letters" in err and str(only_digits / "notmnist") in err and "by hand" in err
