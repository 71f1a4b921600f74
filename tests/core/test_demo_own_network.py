"""``benchmarks/demo_own_network.py``: its options, and its whole path on a folder of two colours
(train a network, save it with its sidecar, build its features tier), checked against what the
images are, not against the script's own output."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def _demo():
    spec = importlib.util.spec_from_file_location("demo_own_network", ROOT / "benchmarks" / "demo_own_network.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo = _demo()


def test_quick_means_one_epoch_and_the_map_head_unless_methods_are_named():
    args = demo.parse_arguments(["--quick"])
    assert (args.epochs, args.methods) == (1, "map")
    assert demo.parse_arguments(["--quick", "--methods", "map,mfvi"]).methods == "map,mfvi"
    args = demo.parse_arguments([])
    assert (args.epochs, args.methods, args.ood, args.quick) == (6, None, 0, False)


@pytest.mark.parametrize("argv", [["--epochs", "0"], ["--ood", "-1"]])
def test_impossible_counts_are_refused_with_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        demo.parse_arguments(argv)
    assert stop.value.code == 2
    assert "must be" in capsys.readouterr().err


def _two_colours(folder: Path, per_class: dict[str, int], seed: int = 0) -> None:
    """Reddish and bluish 64 px photos with noise, under ``train/`` and ``test/``."""
    rng = np.random.default_rng(seed)
    for split, count in per_class.items():
        for name, colour in (("blue", (40, 60, 200)), ("red", (200, 50, 40))):
            (folder / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = np.clip(np.array(colour) + rng.normal(0, 30, (64, 64, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / split / name / f"{i}.png")


def test_a_folder_of_ones_own_trains_saves_and_builds_the_tier(tmp_path, monkeypatch, one_torch_thread):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the feature cache and kept networks
    photos = tmp_path / "photos"
    _two_colours(photos, {"train": 16, "test": 6})
    work = tmp_path / "work"
    reference = ["num_chains=2", "num_warmup=10", "num_samples=12", "num_leapfrog=3"]
    assert demo.main(["--folder", str(photos), "--work", str(work), "--epochs", "2", "--methods", "hmc,map",
                      *(a for s in reference for a in ("--reference-set", s))]) == 0

    sidecar = json.loads((work / "net.json").read_text())
    assert sidecar["image_size"] == 64 and sidecar["classes"] == ["blue", "red"]
    # the standardisation is the training images' own per-channel mean and spread, on [0, 1]
    train = np.stack([np.asarray(Image.open(p)) for p in sorted((photos / "train").rglob("*.png"))]) / 255.0
    assert sidecar["mean"] == pytest.approx(train.mean(axis=(0, 1, 2)), abs=1e-5)
    assert sidecar["std"] == pytest.approx(train.std(axis=(0, 1, 2), ddof=1), abs=1e-4)

    record = json.loads((work / "demo.json").read_text())
    assert record["training"]["test_images"] == 12
    # HMC alone with its own settings, then the MAP without them, then both measured together
    runs = [r["argv"] for r in record["tier"]["runs"]]
    assert [r[r.index("--methods") + 1] for r in runs] == ["hmc", "map", "hmc,map"]
    assert "num_samples=12" in runs[0] and "num_samples=12" not in runs[1] and "--evaluate-only" in runs[2]
    table = (work / "tier" / "zoo.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    # the tier reads the test photos through the imported network as the script's own forward pass
    # read them: the network's column has the accuracy the script measured on its decoded pixels
    mine = round(100 * record["training"]["accuracy"], 2)
    assert f"{mine:.2f} %" in rows["your network (net.pt)"]
    # two colours this far apart are told apart by a head on any network's features
    assert "100.00 %" in rows["MAP"]
    assert "| 2 × 12 |" in rows["HMC"]  # its draws: the reference's own settings were used
    cells = [c.strip() for c in rows["MAP"].split("|")]
    header = [c.strip() for c in table.splitlines()[0].split("|")]
    assert cells[header.index("KL(hmc ‖ ·)")] != "n/a"  # measured against the HMC built in the first run
