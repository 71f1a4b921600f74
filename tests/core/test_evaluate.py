"""``bayescope-cli evaluate`` end to end on tiny IDX folders written here."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from core.analysis.evaluation import resolve_dataset
from core.commands.main import main
from core.engine.data.idx import write_idx
from core.engine.inference.base import SampledPosterior
from core.engine.inference.mc_dropout import DropoutPosterior
from core.engine.models import ArchSpec
from core.engine.store import save_posterior


def _write_set(folder: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_idx(folder / "t10k-images-idx3-ubyte.gz", images.astype(np.uint8))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", labels.astype(np.uint8))
    return folder


@pytest.fixture
def tiny(tmp_path: Path) -> dict[str, Path]:
    """Digits where class k lights row band k; 'letters' light columns instead (OOD)."""
    rng = np.random.default_rng(0)
    n, k = 60, 3
    labels = np.arange(n) % k
    images = rng.integers(0, 20, size=(n, 28, 28))
    for i, y in enumerate(labels):
        images[i, 9 * y : 9 * y + 9, :] = 230
    letters = rng.integers(0, 20, size=(25, 28, 28))
    letters[:, :, 10:18] = 230
    in_dir = _write_set(tmp_path / "digits", images, labels)
    ood_dir = _write_set(tmp_path / "letters", letters, np.zeros(25))
    # softmax regression that reads the three row bands: the right answer on the digits
    arch = ArchSpec("softmax", num_classes=k)
    band = torch.zeros(k, 28, 28)
    for y in range(k):
        band[y, 9 * y : 9 * y + 9, :] = 1.0
    weight = (band.reshape(k, 784) * 0.05).expand(3, 2, k, 784).clone()
    weight += 0.01 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(1))
    bias = torch.zeros(3, 2, k)
    sampled = SampledPosterior("sghmc", arch, {}, 0, "tiny", {"linear.weight": weight, "linear.bias": bias})
    drop_arch = ArchSpec("softmax", num_classes=k, drop_rate=0.5)
    dropout = DropoutPosterior("mc_dropout", drop_arch, {}, 0, "tiny",
                               {"linear.weight": weight[0, 0], "linear.bias": bias[0, 0]})
    return {
        "digits": in_dir,
        "letters": ood_dir,
        "sampled": save_posterior(sampled, tmp_path / "sampled.pt"),
        "dropout": save_posterior(dropout, tmp_path / "dropout.pt"),
        "out": tmp_path / "report",
        "root": tmp_path,
    }


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_evaluate_end_to_end(tiny, capsys):
    code = main([
        "evaluate", "--posterior", str(tiny["sampled"]), str(tiny["dropout"]),
        "--dataset", str(tiny["digits"]), "--ood", str(tiny["letters"]),
        "--rotate", f"{tiny['digits']}:0", "--angle-step", "45", "--samples", "20",
        "--out", str(tiny["out"]),
    ])
    assert code == 0
    out = tiny["out"]
    for stem in ("reliability", "confusion_soft", "confusion_hard", "per_class_error",
                 "rejection", "ood_histograms", "rotation"):
        png = out / f"{stem}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for stem in ("summary", "reliability", "confusion_soft", "confusion_hard", "per_class_error",
                 "per_class_error_box", "rejection", "scores", "ood_detection", "ood_histograms",
                 "rotation", "rotation_uncertainty", "classwise_ece"):
        assert (out / f"{stem}.csv").is_file() and (out / f"{stem}.json").is_file()
    summary = {row["posterior"]: row for row in _read_csv(out / "summary.csv")}
    assert set(summary) == {"sampled", "dropout"}
    # the band detector is right on every digit (the bright band dominates the noise)
    assert float(summary["sampled"]["accuracy"]) == 1.0
    assert summary["sampled"]["chains"] == "3" and summary["dropout"]["chains"] == "1"
    assert summary["sampled"]["samples"] == "6"  # 20 asked, all 3×2 samples used
    # soft confusion rows are mean probabilities: each sums to 1
    soft = _read_csv(out / "confusion_soft.csv")
    for name in summary:
        for true in "012":
            total = sum(float(r["mean_probability"]) for r in soft if r["posterior"] == name and r["true"] == true)
            assert total == pytest.approx(1.0, abs=1e-6)
    hard = _read_csv(out / "confusion_hard.csv")
    assert sum(int(r["count"]) for r in hard if r["posterior"] == "sampled") == 60
    errors = _read_csv(out / "per_class_error.csv")
    assert {r["chain"] for r in errors if r["posterior"] == "sampled"} == {"0", "1", "2"}
    data = json.loads((out / "rejection.json").read_text())
    assert data["columns"][:3] == ["posterior", "score", "rate"]
    ood = _read_csv(out / "ood_detection.csv")
    assert {r["score"] for r in ood} >= {"total", "aleatoric", "epistemic"}
    assert all(0.0 <= float(r["auroc"]) <= 1.0 for r in ood)
    rot = _read_csv(out / "rotation_uncertainty.csv")
    assert sorted({float(r["angle"]) for r in rot}) == [0.0, 45.0, 90.0, 135.0, 180.0]
    meta = json.loads((out / "evaluation.json").read_text())
    assert meta["posteriors"]["dropout"]["method"] == "mc_dropout"
    printed = capsys.readouterr().out
    assert "sampled" in printed and "OOD AUROC" in printed


def test_known_names_resolve_under_data_dir(tiny):
    (tiny["root"] / "data").mkdir()
    tiny["letters"].rename(tiny["root"] / "data" / "notmnist")
    data = resolve_dataset("notmnist", tiny["root"] / "data")
    assert len(data) == 25 and data.class_names[0] == "A"


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "expected an error message"
    return err[-1]


def test_missing_folder_is_a_one_line_error(tiny, capsys):
    code = main(["evaluate", "--posterior", str(tiny["sampled"]), "--dataset",
                 str(tiny["root"] / "nowhere"), "--out", str(tiny["out"])])
    assert code == 2
    line = _error_line(capsys)
    assert line.startswith("error: ") and "nowhere" in line


def test_unreadable_posterior_is_a_one_line_error(tiny, capsys):
    bad = tiny["root"] / "bad.pt"
    bad.write_bytes(b"not a posterior")
    code = main(["evaluate", "--posterior", str(bad), "--dataset", str(tiny["digits"]),
                 "--out", str(tiny["out"])])
    assert code == 2
    line = _error_line(capsys)
    assert line.startswith("error: ") and "bad.pt" in line
    assert not tiny["out"].exists()


def test_posteriors_with_different_class_counts_are_refused(tiny, capsys):
    arch = ArchSpec("softmax", num_classes=4)
    other = SampledPosterior("map", arch, {}, 0, "x", {
        "linear.weight": torch.zeros(1, 1, 4, 784), "linear.bias": torch.zeros(1, 1, 4)})
    path = save_posterior(other, tiny["root"] / "four.pt")
    code = main(["evaluate", "--posterior", str(tiny["sampled"]), str(path),
                 "--dataset", str(tiny["digits"]), "--out", str(tiny["out"])])
    assert code == 2
    line = _error_line(capsys)
    assert "classes" in line and line.startswith("error: ")


def test_drop_rate_figure_is_written(tmp_path):
    from core.analysis.metrics import drop_rate_sensitivity
    from core.outputs.figures import drop_rate_figure, save_figure

    result = drop_rate_sensitivity({0.1: [0.90, 0.91, 0.905], 0.5: [0.915, 0.92, 0.918], 0.9: [0.85, 0.86, 0.84]})
    path = save_figure(drop_rate_figure(result), tmp_path / "drop_rate.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_core_does_not_import_qt():
    import subprocess
    import sys

    code = ("import sys, core.commands.evaluate, core.outputs.report, core.outputs.evaluation_cache, core.outputs.figures, core.analysis.metrics, core.analysis.uncertainty; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'superqt', 'app')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_printed_table_shows_whole_posterior_names(tiny, capsys):
    """The table cut names to 20 characters: two long names could read the same."""
    import shutil

    long_names = [f"{tiny['sampled'].stem}-with-a-rather-long-name-{i}" for i in (1, 2)]
    paths = [tiny["sampled"].with_name(f"{name}{tiny['sampled'].suffix}") for name in long_names]
    for path in paths:
        shutil.copy(tiny["sampled"], path)
    code = main(["evaluate", "--posterior", *map(str, paths), "--dataset", str(tiny["digits"]),
                 "--ood", str(tiny["letters"]), "--samples", "4", "--out", str(tiny["out"])])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    for name in long_names:
        rows = [line for line in lines if line.startswith(name + " ")]
        assert len(rows) == 2  # the summary row and the AUROC row, each with the whole name
    header = next(line for line in lines if line.startswith("OOD AUROC"))
    row = next(line for line in lines if line.startswith(long_names[0]) and line.count(".") == 6)
    assert len(row.rstrip()) <= len(header.rstrip()) + 1  # each AUROC under its score's name
