"""The bundled sample sets: every tab and ``evaluate`` work offline before a data folder is chosen,
and say so; a data folder beside the program is found by itself; a chosen folder is never replaced."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from core.analysis.evaluation import resolve_dataset
from core.commands.main import main
from core.engine.data import locate
from core.engine.data.datasets import sample_folder
from core.engine.data.idx import read_idx, write_idx
from core.engine.data.locate import DatasetMissingError, find_dataset, sample_notice
from core.engine.resources import resources_dir

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
BUNDLED_MAP = ROOT / "resources" / "models" / "paper_softmax_map.pt"


@pytest.fixture(autouse=True)
def nowhere(tmp_path, monkeypatch) -> Path:
    """A first launch: an empty home and user cache, and no data folder near the program."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(locate, "program_folder", lambda: tmp_path / "apps" / "bayescope")
    return tmp_path


@pytest.mark.parametrize("name", ["mnist", "notmnist"])
def test_each_sample_holds_1000_images_of_every_class(name):
    images = read_idx(sample_folder(name) / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(sample_folder(name) / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (1000, 28, 28) and images.dtype == np.uint8 and labels.shape == (1000,)
    assert set(np.unique(labels)) == set(range(10))
    assert np.bincount(labels).min() >= 70  # no class missing or nearly so in 1,000 draws


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs the development data beside the checkout")
@pytest.mark.parametrize("name", ["mnist", "notmnist"])
def test_a_sample_is_the_first_1000_test_images_unchanged(name):
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        full = read_idx(SHARED / name / f"{stem}.gz")
        assert np.array_equal(read_idx(sample_folder(name) / f"{stem}.gz"), full[:1000])


def test_samples_are_small_reproducible_and_their_licences_stated():
    files = sorted((resources_dir() / "samples").rglob("*.gz"))
    assert len(files) == 4 and sum(f.stat().st_size for f in files) < 1_000_000
    assert all(gzip.decompress(f.read_bytes())[:2] == b"\0\0" for f in files)  # IDX headers
    assert all(f.read_bytes()[4:8] == b"\0\0\0\0" for f in files)  # gzip time stamp 0: same bytes each build
    text = (resources_dir() / "samples" / "LICENSE.md").read_text()
    assert "CC BY-SA 3.0" in text and "LeCun" in text and "Bulatov" in text and "MIT" in text
    assert "make_samples.py" in text


def test_with_nothing_chosen_or_found_the_test_sets_are_the_samples():
    assert find_dataset("mnist", None) == sample_folder("mnist")
    assert find_dataset("notmnist", None) == sample_folder("notmnist")
    data = resolve_dataset("mnist-test")
    assert data.name == "mnist-sample-test" and len(data) == 1000 and data.source["sample"] is True
    letters = resolve_dataset("notmnist")
    assert letters.name == "notmnist-sample-test" and letters.class_names[0] == "A"
    line = sample_notice(data.source, letters.source, where="command line")
    assert line.count("\n") == 0 and "1,000 MNIST test digits and 1,000 notMNIST letters" in line
    assert "--data-dir" in line
    assert "File → Choose data folder" in sample_notice(data.source)


def test_no_sample_for_training_nor_in_place_of_a_chosen_folder(tmp_path):
    with pytest.raises(DatasetMissingError):
        find_dataset("mnist", None, "train")  # training on 1,000 test digits would be wrong
    with pytest.raises(DatasetMissingError) as missing:
        find_dataset("notmnist", tmp_path / "chosen")
    assert str(tmp_path / "chosen" / "notmnist") in str(missing.value)
    chosen = resolve_dataset("mnist-test", resources_dir() / "samples")  # chosen by hand, still named a sample
    assert chosen.name == "mnist-sample-test" and chosen.source["sample"] is True


def _write_test_split(folder: Path, n: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    write_idx(folder / "t10k-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8))
    return folder


@pytest.mark.parametrize("where", ["data", "../shared/data"])
def test_a_data_folder_beside_the_program_is_found_by_itself(nowhere, where):
    program = nowhere / "apps" / "bayescope"
    folder = _write_test_split((program / where).resolve() / "notMNIST")
    assert find_dataset("notmnist", None) == folder
    assert resolve_dataset("notmnist").source["sample"] is False


def test_evaluate_with_no_data_folder_anywhere_runs_on_the_samples_and_says_so(nowhere, capsys):
    rc = main(["evaluate", "--posterior", str(BUNDLED_MAP), "--dataset", "mnist-test", "--ood", "notmnist",
               "--limit", "20", "--samples", "4", "--out", str(nowhere / "eval")])
    out = capsys.readouterr().out
    assert rc == 0
    notices = [line for line in out.splitlines() if "bundled samples" in line]
    assert len(notices) == 1 and "--data-dir" in notices[0]
    assert "mnist-sample-test: 20 images; OOD notmnist-sample-test: 20 images" in out
