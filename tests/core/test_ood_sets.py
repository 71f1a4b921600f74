"""Several out-of-distribution sets in one evaluation (issue 46, item 4): per-set AUROCs equal a
direct computation, the built-in inverted digits, a folder of the wrong kind, the command's
table and the report's."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.analysis.evaluation import evaluate, load_posteriors, resolve_dataset
from core.analysis.evaluation_results import evaluation_tables
from core.analysis.ood_sets import ood_set_rows, ranking_changes
from core.analysis.scoring import SCORES
from core.commands.evaluate import ood_specs
from core.commands.main import main
from core.engine.data.datasets import load_split
from core.engine.data.idx import write_idx
from core.engine.data.ood import OOD_SETS, ood_set
from core.engine.naming import dataset_words
from core.engine.runner import drain

MODELS = Path(__file__).resolve().parents[2] / "resources" / "models"
#: Three columns of the paper tier: one draw (MAP), a dropout net, a sampler.
COLUMNS = [MODELS / f"paper_softmax_{m}.pt" for m in ("map", "mc_dropout", "sgld")]
N = 120


def direct_auroc(negatives: np.ndarray, positives: np.ndarray) -> float:
    """P(positive > negative) + ½ P(tie), over every pair: the definition, not a rank formula."""
    pos, neg = positives[:, None], negatives[None, :]
    return float(np.mean((pos > neg) + 0.5 * (pos == neg)))


def _image_folder(root: Path, count: int = 40) -> Path:
    """A folder of a person's images (no class folders): bright squares of every size, in colour."""
    rng = np.random.default_rng(5)
    root.mkdir(parents=True)
    for i in range(count):
        image = np.zeros((36, 36, 3), np.uint8)
        a, b = sorted(rng.integers(2, 34, 2))
        b = max(b, a + 1)  # never an empty square: two black images would be one photo, counted once
        image[a:b, a:b] = rng.integers(120, 255, 3)
        Image.fromarray(image).save(root / f"square_{i:02d}.png")
    return root


@pytest.fixture(scope="module")
def three_sets(shared_data, tmp_path_factory):
    folder = _image_folder(tmp_path_factory.mktemp("ood") / "squares")
    posteriors = load_posteriors(COLUMNS)
    data = resolve_dataset("mnist-test", shared_data).first(N)
    oods = [resolve_dataset(spec, shared_data, image_size=28, channels=1).first(N)
            for spec in ("notmnist", "mnist-inverted", str(folder))]
    ev = drain(evaluate(posteriors, data, oods, num_samples=8, seed=3))
    return {"posteriors": posteriors, "data": data, "oods": oods, "ev": ev, "folder": folder}


def test_each_set_gives_the_auroc_of_a_direct_computation(three_sets):
    ev = three_sets["ev"]
    assert ev.ood_names() == ("notmnist-test", "mnist-inverted", "squares-test")
    rows = evaluation_tables(ev)["ood_sets"]
    assert {row["set"] for row in rows} == set(ev.ood_names())
    checked = 0
    for row in rows:
        inside = ev.results[row["posterior"]].data.scores[row["score"]]
        outside = ev.results[row["posterior"]].ood_sets[row["set"]].scores[row["score"]]
        if np.ptp(np.concatenate([inside, outside])) == 0:
            assert row["auroc"] is None and row["rank"] is None  # MAP's mutual information: 0 everywhere
            continue
        assert row["auroc"] == pytest.approx(direct_auroc(inside, outside), abs=1e-12)
        checked += 1
    assert checked >= 3 * 3 * (len(SCORES) - 2)
    # the rank is the place among the columns on that set and score; "best" is first place
    for set_name in ev.ood_names():
        for score in SCORES:
            these = [r for r in rows if r["set"] == set_name and r["score"] == score and r["auroc"] is not None]
            top = max(r["auroc"] for r in these)
            assert {r["posterior"] for r in these if r["best"]} == {r["posterior"] for r in these if r["auroc"] == top}
            assert all(r["rank"] == 1 + sum(o["auroc"] > r["auroc"] for o in these) for r in these)


def test_the_first_set_draws_what_it_draws_alone(three_sets):
    """A second and third set leave the first set's numbers as one set gives them (its seeds are its own)."""
    alone = drain(evaluate(three_sets["posteriors"], three_sets["data"], three_sets["oods"][0], num_samples=8, seed=3))
    for name, r in alone.results.items():
        together = three_sets["ev"].results[name]
        for score in SCORES:
            np.testing.assert_array_equal(r.ood.scores[score], together.ood.scores[score])
            np.testing.assert_array_equal(r.ood.scores[score], together.ood_sets["notmnist-test"].scores[score])
    assert evaluation_tables(alone)["ood_detection"] == evaluation_tables(three_sets["ev"])["ood_detection"]


def test_the_inverted_digits_are_mnist_test_dark_on_white(shared_data):
    digits = load_split("mnist", "test", root=shared_data / "mnist")
    inverted = ood_set("mnist-inverted", shared_data)
    assert inverted.name == "mnist-inverted" and len(inverted) == len(digits) == 10_000
    np.testing.assert_allclose(inverted.x.numpy(), 1.0 - digits.x.numpy(), atol=0)
    assert inverted.source["derived"]["transform"] == OOD_SETS["mnist-inverted"].how
    assert inverted.source["files"] == digits.source["files"]  # what was read (with its SHA-256), unchanged
    assert dataset_words("mnist-inverted") == OOD_SETS["mnist-inverted"].words


def test_the_inverted_digits_come_from_the_bundled_samples_without_a_data_folder(monkeypatch, tmp_path):
    """A first launch (no data folder, an empty cache) still has a second OOD set."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr("core.engine.data.locate.program_folder", lambda: tmp_path / "apps" / "bayescope")
    inverted = resolve_dataset("mnist-inverted")
    assert len(inverted) == 1000 and inverted.source.get("sample")
    assert float(inverted.x.mean()) > 0.8  # mostly white


def test_rankings_that_change_between_sets_are_named():
    rng = np.random.default_rng(0)
    test = rng.random(200)
    shifted = test + 2.0
    sets = {"far": {"a": {"total": shifted}, "b": {"total": test}},  # a tells "far" apart, b cannot
            "near": {"a": {"total": test[::-1]}, "b": {"total": shifted}}}
    rows = ood_set_rows({"a": {"total": test}, "b": {"total": test}}, sets, scores=("total",))
    best = {(r["set"], r["posterior"]): (r["auroc"], r["rank"], r["best"]) for r in rows}
    assert best[("far", "a")] == (1.0, 1, True) and best[("far", "b")][1:] == (2, False)
    assert best[("near", "b")] == (1.0, 1, True) and best[("near", "a")][1:] == (2, False)
    assert ranking_changes(rows) == {"total": {"far": ("a",), "near": ("b",)}}
    same = ood_set_rows({"a": {"total": test}, "b": {"total": test}},
                        {"far": sets["far"], "again": sets["far"]}, scores=("total",))
    assert ranking_changes(same) == {}


def test_ood_specs_take_repeats_and_comma_lists(tmp_path):
    odd = tmp_path / "a,b"  # a folder whose name holds a comma is taken whole
    odd.mkdir()
    assert ood_specs(None) == []
    assert ood_specs(["notmnist"]) == ["notmnist"]
    assert ood_specs(["notmnist,mnist-inverted", "x", "notmnist"]) == ["notmnist", "mnist-inverted", "x"]
    assert ood_specs([str(odd)]) == [str(odd)]
    with pytest.raises(ValueError, match="empty set"):
        ood_specs(["notmnist,,x"])


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_command_prints_a_block_per_set_and_the_report_holds_them(three_sets, shared_data, tmp_path, capsys):
    out, page = tmp_path / "out", tmp_path / "report.html"
    code = main(["evaluate", "--posterior", *map(str, COLUMNS), "--dataset", "mnist-test",
                 "--data-dir", str(shared_data), "--ood", "notmnist,mnist-inverted", "--ood", str(three_sets["folder"]),
                 "--limit", "60", "--samples", "4", "--out", str(out), "--report", str(page)])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    blocks = [i for i, line in enumerate(lines) if line.startswith("OOD AUROC")]
    assert len(blocks) == 3
    titles = [lines[i - 1] for i in blocks]
    assert titles == ["notmnist-test (60 images):", "mnist-inverted (60 images):", "squares-test (40 images):"]
    rows = _read_csv(out / "ood_sets.csv")
    for i, set_name in zip(blocks, ("notmnist-test", "mnist-inverted", "squares-test"), strict=True):
        for j, name in enumerate(("paper_softmax_map", "paper_softmax_mc_dropout", "paper_softmax_sgld")):
            line = lines[i + 1 + j]
            assert line.startswith(name + " ")
            cells = line.split()[-len(SCORES):]  # the names hold no spaces
            for score, cell in zip(SCORES, cells, strict=True):
                row = next(r for r in rows if r["set"] == set_name and r["posterior"] == name and r["score"] == score)
                if row["auroc"] == "":
                    assert cell == "n/a"
                else:  # the printed number is the table's, a star on the best column of that score
                    assert cell.rstrip("*") == f"{float(row['auroc']):.4f}"
                    assert cell.endswith("*") == (row["best"] == "True")
    assert "AUROC: the chance that an image of the unfamiliar set" in "\n".join(lines)
    html = page.read_text()
    assert "Telling each unfamiliar set apart" in html
    for words in ("notMNIST letters", "MNIST test digits, inverted (dark on white)", "squares-test"):
        assert f"<h3>{words}" in html.replace("&#x27;", "'")
    assert html.count('class="best"') >= len(SCORES) - 1


def _idx_folder(folder: Path, side: int) -> Path:
    folder.mkdir(parents=True)
    write_idx(folder / "t10k-images-idx3-ubyte.gz", np.zeros((5, side, side), np.uint8))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", np.zeros(5, np.uint8))
    return folder


@pytest.mark.parametrize(("kind", "expected"), [
    ("idx32", "t10k-images-idx3-ubyte.gz: images are 32×32 pixels; bayescope reads 28×28 images"),
    ("empty", "holds no images (png, jpg, jpeg, bmp, webp, tif, tiff), CSV manifest or CIFAR files"),
    ("text", "holds no images (png, jpg, jpeg, bmp, webp, tif, tiff), CSV manifest or CIFAR files"),
])
def test_a_folder_of_the_wrong_kind_gets_its_sentence(kind, expected, shared_data, tmp_path, capsys):
    if kind == "idx32":
        folder = _idx_folder(tmp_path / "wide", 32)
    else:
        folder = tmp_path / kind
        folder.mkdir()
        if kind == "text":
            (folder / "notes.txt").write_text("not an image")
    code = main(["evaluate", "--posterior", str(COLUMNS[0]), "--dataset", "mnist-test", "--data-dir",
                 str(shared_data), "--ood", "notmnist", "--ood", str(folder), "--limit", "20", "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing half written


def test_the_dataset_tab_keeps_every_set_in_its_cache(three_sets, tmp_path):
    """The tab's evaluation (cached per posterior) holds each set's rows; a second run reads them back."""
    from core.analysis.dataset import EvaluationItem
    from core.outputs.evaluation_cache import evaluate_dataset

    items = [EvaluationItem(path.stem, three_sets["posteriors"][path.stem], path) for path in COLUMNS[:2]]
    data, oods = three_sets["data"].first(40), [o.first(30) for o in three_sets["oods"][:2]]
    first = drain(evaluate_dataset(items, data, oods, num_samples=4, seed=1, folder=tmp_path))
    again = drain(evaluate_dataset(items, data, oods, num_samples=4, seed=1, folder=tmp_path))
    assert not any(c.cached for c in first.columns) and all(c.cached for c in again.columns)
    assert [o.name for o in again.ood_sets] == ["notmnist-test", "mnist-inverted"]
    for a, b in zip(first.columns, again.columns, strict=True):
        assert list(b.ood_sets) == ["notmnist-test", "mnist-inverted"]
        assert set(b.ood_sets["mnist-inverted"]) == set(SCORES)
        assert b.ood_sets == a.ood_sets
        assert b.ood == {s: {k: r[k] for k in ("auroc", "aupr_in", "aupr_out")}
                         for s, r in b.ood_sets["notmnist-test"].items()}  # the first set's, as before
    # one set alone is another cache entry, and gives the first set's numbers
    alone = drain(evaluate_dataset(items, data, oods[0], num_samples=4, seed=1, folder=tmp_path))
    assert not any(c.cached for c in alone.columns)
    assert [c.ood for c in alone.columns] == [c.ood for c in first.columns]
