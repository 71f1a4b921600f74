"""core.analysis.dataset and core.outputs.evaluation_cache: the cached, cancellable evaluation behind the Dataset tab, the images
behind a cell or a bin, per-view export and the HTML report (also from the CLI)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch

from core.analysis.dataset import (
    DATASET_VIEWS,
    SOFT_CELL_MIN,
    EvaluationItem,
    confusion_cell_images,
    histogram_bin_images,
    histogram_bin_indices,
)
from core.analysis.evaluation import evaluate
from core.analysis.evaluation_results import evaluation_tables
from core.analysis.metrics import score_histograms
from core.commands.main import main
from core.engine.data.idx import write_idx
from core.engine.inference.base import Dataset, SampledPosterior
from core.engine.inference.mc_dropout import DropoutPosterior
from core.engine.models import ArchSpec
from core.engine.runner import drain
from core.engine.store import load_posterior, save_posterior
from core.outputs.evaluation_cache import clear_cache, evaluate_dataset
from core.outputs.report import export_dataset_view, report_html, write_html_report

K = 3


def _images(n: int, rng: np.random.Generator, labels: np.ndarray | None) -> np.ndarray:
    """Digits light row band k (class k); 'letters' (labels None) light a column band."""
    images = rng.integers(0, 40, size=(n, 28, 28)).astype(np.uint8)
    for i in range(n):
        if labels is None:
            images[i, :, 10:18] = 230
        else:
            images[i, 9 * labels[i] : 9 * labels[i] + 9, :] = 120 + 20 * (i % 6)
    return images


@pytest.fixture
def sets(tmp_path: Path) -> dict:
    rng = np.random.default_rng(0)
    labels = np.arange(90) % K
    digits = _images(90, rng, labels)
    # a few digits with two bands: the posteriors must hesitate and make mistakes
    for i in range(0, 90, 9):
        digits[i, 9 * ((labels[i] + 1) % K) : 9 * ((labels[i] + 1) % K) + 9, :] = 200
    letters = _images(40, rng, None)
    data = Dataset(torch.from_numpy(digits[:, None] / 255.0).float(), torch.from_numpy(labels),
                   "digits", ("a", "b", "c"))
    ood = Dataset(torch.from_numpy(letters[:, None] / 255.0).float(), torch.zeros(40, dtype=torch.long), "letters")
    band = torch.zeros(K, 28, 28)
    for y in range(K):
        band[y, 9 * y : 9 * y + 9, :] = 1.0
    weight = (band.reshape(K, 784) * 0.04).expand(3, 2, K, 784).clone()
    weight += 0.01 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(1))
    bias = torch.zeros(3, 2, K)
    sampled = SampledPosterior("sghmc", ArchSpec("softmax", num_classes=K), {}, 0, "tiny",
                               {"linear.weight": weight, "linear.bias": bias})
    dropout = DropoutPosterior("mc_dropout", ArchSpec("softmax", num_classes=K, drop_rate=0.5), {}, 0, "tiny",
                               {"linear.weight": weight[0, 0], "linear.bias": bias[0, 0]})
    files = {"sampled": save_posterior(sampled, tmp_path / "sampled.pt"),
             "dropout": save_posterior(dropout, tmp_path / "dropout.pt")}
    posteriors = {name: load_posterior(path) for name, path in files.items()}
    items = [EvaluationItem(name, posteriors[name], files[name]) for name in ("dropout", "sampled")]
    return {"data": data, "ood": ood, "items": items, "posteriors": posteriors, "files": files,
            "cache": tmp_path / "cache", "root": tmp_path, "digits": digits, "letters": letters, "labels": labels}


def _run(sets, records=None, **kwargs):
    kwargs.setdefault("num_samples", 12)
    kwargs.setdefault("seed", 3)
    return drain(evaluate_dataset(sets["items"], sets["data"], sets["ood"], folder=sets["cache"], **kwargs),
                 None if records is None else records.append)


def _assert_tables_equal(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key in a:
        assert a[key] == b[key], key


def test_numbers_equal_the_cli_evaluation(sets):
    views = _run(sets)
    # the CLI's evaluate() on the same posteriors, sets, draws and seed
    reference = drain(evaluate({it.name: it.posterior for it in sets["items"]}, sets["data"], sets["ood"],
                               num_samples=12, seed=3))
    expected = evaluation_tables(reference)
    expected.pop("scores")
    _assert_tables_equal(views.tables, expected)
    assert views.evaluation.data_source == reference.data_source
    assert views.evaluation.ood_source == reference.ood_source
    settings = {k: v for k, v in views.evaluation.settings.items() if k != "posterior_files"}
    assert settings == reference.settings
    # the columns hold the same numbers as the tables
    for column in views.columns:
        rows = [r for r in views.tables["confusion_hard"] if r["posterior"] == column.name]
        assert [r["count"] for r in rows] == column.hard_confusion.ravel().tolist()
        assert column.summary["accuracy"] == pytest.approx(np.trace(column.hard_confusion) / 90)
        assert np.allclose(column.hard_confusion_rows.sum(1), 1.0)
    assert views.column("sampled").num_chains == 3 and views.column("dropout").num_chains == 1
    # the synthetic sets are hard enough to matter: mistakes, and letters more uncertain than digits
    assert 0.5 < views.column("dropout").summary["accuracy"] < 1.0
    assert views.column("dropout").ood["total"]["auroc"] > 0.5


def test_progress_counts_images_per_posterior(sets):
    records = []
    _run(sets, records)
    per_posterior = 90 + 40
    assert records[-1].step == records[-1].total == 2 * per_posterior
    steps = [r.step for r in records]
    assert steps == sorted(steps)
    for index, name in enumerate(("dropout", "sampled")):
        own = [r for r in records if r.phase == name]
        done = [r.values["images_done"] for r in own]
        assert done == sorted(done) and done[-1] == per_posterior
        assert all(r.values["images_total"] == per_posterior and r.values["index"] == index for r in own)
        # the batches are the CLI's (4096 // S images), so the dropout column moves in a few steps
        assert len(own) >= 2


def test_second_run_comes_from_the_cache_without_predicting(sets, monkeypatch):
    first = _run(sets)
    assert not any(c.cached for c in first.columns)
    assert len(list(sets["cache"].glob("*.npz"))) == 2

    def refuse(*args, **kwargs):
        raise AssertionError("a cached evaluation must not predict")

    for item in sets["items"]:
        monkeypatch.setattr(item.posterior, "predict_proba", refuse)
    records = []
    second = _run(sets, records)
    assert all(c.cached for c in second.columns)
    assert all(r.values["cached"] == 1.0 for r in records[1:])
    _assert_tables_equal(second.tables, first.tables)


@pytest.mark.parametrize("change", ["samples", "seed", "images", "ood"])
def test_anything_that_changes_the_numbers_misses_the_cache(sets, change):
    _run(sets)
    kwargs = {"samples": {"num_samples": 7}, "seed": {"seed": 4}}.get(change, {})
    if change == "images":
        sets["data"] = sets["data"].first(60)
    if change == "ood":
        sets["ood"] = sets["ood"].first(30)
    again = _run(sets, **kwargs)
    assert not any(c.cached for c in again.columns)
    assert len(list(sets["cache"].glob("*.npz"))) == 4


def test_cache_only_computes_nothing_when_an_entry_is_missing(sets, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("cache_only must not predict")

    monkeypatch.setattr(sets["items"][0].posterior, "predict_proba", refuse)
    assert _run(sets, cache_only=True) is None


def test_a_damaged_entry_is_recomputed(sets):
    first = _run(sets)
    for entry in sets["cache"].glob("*.npz"):
        entry.write_bytes(b"\x00not an archive")
    again = _run(sets)
    assert not any(c.cached for c in again.columns)
    _assert_tables_equal(again.tables, first.tables)
    assert _run(sets).columns[0].cached


def test_cancelling_keeps_nothing_of_the_unfinished_posterior(sets):
    run = evaluate_dataset(sets["items"], sets["data"], sets["ood"], num_samples=12, seed=3, folder=sets["cache"])
    for record in run:
        if record.phase == "sampled":  # the first posterior is done, the second started
            break
    run.close()
    assert len(list(sets["cache"].glob("*.npz"))) == 1
    assert not list(sets["cache"].glob(".*"))  # no temporary file left either
    assert clear_cache(sets["cache"]) == 1
    assert not list(sets["cache"].glob("*.npz"))


def test_confusion_cell_lists_exactly_its_images(sets):
    views = _run(sets)
    for name in ("dropout", "sampled"):
        preds = views.evaluation.results[name].data
        predicted = preds.mean_proba.argmax(1)
        seen = 0
        for i in range(K):
            for j in range(K):
                cell = confusion_cell_images(views, name, i, j)
                brute = [n for n in range(90) if sets["labels"][n] == i and predicted[n] == j]
                assert sorted(cell.indices.tolist()) == brute
                seen += len(cell.indices)
                # the most confident first
                p = preds.mean_proba[cell.indices, j]
                assert np.all(np.diff(p) <= 0)
                soft = confusion_cell_images(views, name, i, j, soft=True)
                assert all(sets["labels"][n] == i and preds.mean_proba[n, j] >= SOFT_CELL_MIN for n in soft.indices)
        assert seen == 90
    mistakes = confusion_cell_images(views, "dropout", 0, 1)
    assert mistakes.description == "true class “a” predicted as “b”"  # names quoted; digits read "7s predicted as 1"


def test_histogram_bins_match_numpy_counts():
    rng = np.random.default_rng(5)
    values = np.r_[rng.uniform(-0.2, 1.3, 500), 0.0, 1.0, 0.5, 0.25]
    edges = np.linspace(0, 1, 9)
    counts, _ = np.histogram(np.clip(values, 0, 1), bins=edges)
    got = [len(histogram_bin_indices(values, edges, b)) for b in range(8)]
    assert got == counts.tolist()
    together = np.sort(np.concatenate([histogram_bin_indices(values, edges, b) for b in range(8)]))
    assert together.tolist() == list(range(len(values)))


def test_histogram_bin_images_agree_with_the_drawn_fractions(sets):
    views = _run(sets)
    column = views.column("sampled")
    for ood, preds, n in ((False, views.evaluation.results["sampled"].data, 90),
                          (True, views.evaluation.results["sampled"].ood, 40)):
        pair = column.histograms["epistemic"]
        fractions = pair.ood_fraction if ood else pair.in_fraction
        expected, _ = score_histograms(preds.scores["epistemic"], "epistemic", K, edges=pair.edges)
        assert np.allclose(fractions, expected)
        for b in range(len(fractions)):
            chosen = histogram_bin_images(views, "sampled", "epistemic", b, ood=ood)
            assert len(chosen.indices) == round(fractions[b] * n)
            assert chosen.set_name == ("letters" if ood else "digits")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.ids: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.ids += [v for k, v in attrs if k == "id"]

    def handle_data(self, data):
        self.text.append(data)


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


def test_html_report_is_self_contained_and_parses(sets):
    views = _run(sets)
    path = write_html_report(views.evaluation, sets["root"] / "report.html", views.tables)
    text = path.read_text(encoding="utf-8")
    page = _parse(text)
    # six figures (reliability, two confusions, per-class error, rejection, OOD), inline SVG
    assert page.tags.get("svg") == 6
    assert page.tags.get("table", 0) >= 4
    assert "img" not in page.tags  # nothing to fetch: figures inline, their pictures as data
    assert not re.search(r'(src|href)="(https?:|file:|/)', text)
    assert len(page.ids) == len(set(page.ids)), "ids must be unique across the embedded figures"
    body = " ".join(page.text)
    assert "2 posteriors on the digits, against the letters" in body
    accuracy = views.column("dropout").summary["accuracy"] * 100
    assert f"{accuracy:.4f}" in body
    sha = views.evaluation.settings["posterior_files"]["sampled"]["file_sha256"]
    assert sha in body
    assert report_html(views.evaluation, views.tables) == text


def test_export_writes_figure_and_numbers_or_refuses_clearly(sets):
    views = _run(sets)
    out = sets["root"] / "exports"
    written = export_dataset_view(views, "reliability", out / "reliability.svg")
    assert {p.name for p in written} == {"reliability.svg", "reliability.csv", "reliability.json"}
    data = json.loads((out / "reliability.json").read_text())
    assert data["data"] == [[row[c] for c in data["columns"]] for row in views.tables["reliability"]]
    assert "<svg" in (out / "reliability.svg").read_text()
    assert [p.name for p in export_dataset_view(views, "summary", out / "metrics.csv")] == ["metrics.csv"]
    with pytest.raises(ValueError, match="table"):
        export_dataset_view(views, "summary", out / "metrics.png")
    assert set(DATASET_VIEWS) <= set(views.tables)


def _write_set(folder: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_idx(folder / "t10k-images-idx3-ubyte.gz", images.astype(np.uint8))
    write_idx(folder / "t10k-labels-idx1-ubyte.gz", labels.astype(np.uint8))
    return folder


def test_cli_report_is_the_same_page(sets, capsys):
    digits = _write_set(sets["root"] / "digits", sets["digits"], sets["labels"])
    letters = _write_set(sets["root"] / "letters", sets["letters"], np.zeros(40))
    report = sets["root"] / "cli.html"
    code = main(["evaluate", "--posterior", str(sets["files"]["dropout"]), str(sets["files"]["sampled"]),
                 "--dataset", str(digits), "--ood", str(letters), "--samples", "12", "--seed", "3",
                 "--report", str(report), "--device", "cpu"])  # where the page below computes (a GPU draws other numbers)
    assert code == 0, capsys.readouterr().err
    assert "wrote the report" in capsys.readouterr().out
    cli = _parse(report.read_text(encoding="utf-8"))
    assert cli.tags.get("svg") == 6
    # the app's page for the same files, images, draws and seed: the same numbers
    from core.analysis.dataset import load_sets

    data, ood = load_sets(str(digits), str(letters))
    items = [EvaluationItem(Path(p).stem, load_posterior(p), p)
             for p in (sets["files"]["dropout"], sets["files"]["sampled"])]
    views = drain(evaluate_dataset(items, data, ood, num_samples=12, seed=3, folder=sets["cache"]))
    app_page = report_html(views.evaluation, views.tables)
    assert report.read_text(encoding="utf-8") == app_page


def test_cli_needs_an_output(sets, capsys):
    code = main(["evaluate", "--posterior", str(sets["files"]["dropout"]), "--dataset", "mnist-test"])
    assert code == 2
    assert "--report" in capsys.readouterr().err
