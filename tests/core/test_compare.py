"""``bayescope-cli compare`` and core.analysis.comparison: numbers equal to ``predict --json``, one column per
posterior, a self-contained report, and safe writing."""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.analysis.comparison import compare, comparison_table
from core.commands.main import main
from core.engine.resources import resources_dir
from core.engine.store import load_posterior
from core.outputs.comparison import MARKER, write_comparison

MODELS = resources_dir() / "models"
SGHMC, MAP, DROPOUT = (str(MODELS / f"{n}.pt") for n in ("network_lenet5_sghmc", "paper_softmax_map",
                                                          "network_lenet5_mc_dropout"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def stroke_canvas() -> np.ndarray:
    """A 4 with a nearly closed top (a 4/9 look-alike) in thick strokes, light on dark."""
    canvas = np.zeros((120, 120), np.float32)
    canvas[15:70, 30:40] = 1.0
    canvas[60:70, 30:95] = 1.0
    canvas[10:115, 80:90] = 1.0
    canvas[10:20, 40:80] = 1.0
    return canvas


@pytest.fixture(scope="module")
def digit_png(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("input") / "four.png"
    Image.fromarray((stroke_canvas() * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory, digit_png) -> dict[str, object]:
    """One CLI run over three posteriors (20 of 100 draws, 1, and 20 drawn), PNG figures only to stay quick."""
    out = tmp_path_factory.mktemp("export") / "comparison"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = main(["compare", str(digit_png), "--posterior", SGHMC, MAP, DROPOUT, "--samples", "20",
                   "--level", "0.8", "--seed", "3", "--format", "png", "--out", str(out)])
    return {"rc": rc, "stdout": stdout.getvalue(), "out": out}


@pytest.fixture(scope="module")
def map_posterior():
    return load_posterior(MAP)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_cli_compare_prints_one_line_per_column(exported):
    assert exported["rc"] == 0
    lines = exported["stdout"].splitlines()
    # the sampled posterior gives 20 of its 100 draws, MAP its one, MC dropout draws the 20 asked for
    for title in ("SGHMC, LeNet-5, 20 draws", "MAP, softmax regression, 1 draw", "MC dropout, LeNet-5, 20 draws"):
        assert sum(line.startswith(title) and " class " in line and " mean " in line for line in lines) == 1
    assert [line for line in lines if "may not have converged" in line][0].startswith("SGHMC, LeNet-5")
    assert lines[-1].startswith("wrote ") and str(exported["out"]) in lines[-1]


def test_numbers_equal_predict_json_for_every_posterior(exported, digit_png, capsys):
    rows = _read_csv(exported["out"] / "numbers.csv")
    assert len(rows) == 3 * 10
    for path in (SGHMC, MAP, DROPOUT):
        assert main(["predict", str(digit_png), "--posterior", path, "--samples", "20", "--level", "0.8",
                     "--seed", "3", "--json"]) == 0
        expected = json.loads(capsys.readouterr().out)
        mine = [r for r in rows if r["source"] == path]
        assert [r["class"] for r in mine] == [c["class"] for c in expected["classes"]]
        for row, want in zip(mine, expected["classes"], strict=True):
            for key in ("mean", "lower", "upper"):
                assert float(row[key]) == pytest.approx(want[key], abs=1e-7), (path, key)
            assert int(row["num_samples"]) == expected["num_samples"]
            assert float(row["level"]) == expected["credible_level"]
            assert float(row["total_entropy"]) == pytest.approx(expected["uncertainty"]["total"], abs=1e-7)
            if expected["uncertainty"]["epistemic"] is None:  # one draw: n/a, an empty cell, in both
                assert expected["num_samples"] == 1
                assert row["epistemic_entropy"] == row["epistemic_variance"] == ""
                epistemic_variance = 0.0
            else:
                assert float(row["epistemic_entropy"]) == pytest.approx(expected["uncertainty"]["epistemic"],
                                                                        abs=1e-7)
                epistemic_variance = float(row["epistemic_variance"])
            # the variance split adds up class by class, and the total is p̄(1 − p̄)
            total = float(row["total_variance"])
            assert total == pytest.approx(float(row["aleatoric_variance"]) + epistemic_variance, abs=1e-6)
            assert total == pytest.approx(want["mean"] * (1 - want["mean"]), abs=1e-6)
        predicted = [r["class"] for r in mine if r["predicted"] == "True"]
        assert predicted == [str(expected["predicted_class"])]
        assert {r["method"] for r in mine} == {{SGHMC: "SGHMC", MAP: "MAP", DROPOUT: "MC dropout"}[path]}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.references: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.references += [value or "" for name, value in attrs if name in ("src", "href", "data", "srcset")]

    def handle_data(self, data):
        self.text.append(data)


def test_report_page_is_self_contained(exported):
    out = exported["out"]
    page = _Page()
    page.feed((out / "index.html").read_text(encoding="utf-8"))
    page.close()
    text = " ".join(page.text)
    for title in ("SGHMC, LeNet-5, 20 draws", "MAP, softmax regression, 1 draw", "MC dropout, LeNet-5, 20 draws"):
        assert title in text
    assert page.references and all(ref.startswith(("data:", "#")) for ref in page.references)
    # the input, then five views per column, all embedded
    assert sum(ref.startswith("data:image/png;base64,") for ref in page.references) == 1 + 3 * 5
    assert "link" not in page.tags and "iframe" not in page.tags
    # the unconverged sampler says so, as its column in the window does; the input's size is stated
    recorded = load_posterior(SGHMC).info["diagnostics"]["rhat_max"]  # the R̂ its file records
    assert text.count("may not have converged") == 1 and f"(R̂ {recorded:.2f} (floor at these draws" in text
    assert text.count("read its spread as a rough guess") == 1  # and what that means, as there
    assert "The input as the models see it (28 × 28 pixels)" in text

    assert (out / "input.png").read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(out / "input.png") as im:
        assert im.size == (280, 280)  # 28×28 enlarged, nearest neighbour
    names = {p.name for p in out.iterdir()}
    for slug in ("sghmc-lenet-5-20-draws", "map-softmax-regression-1-draw", "mc-dropout-lenet-5-20-draws"):
        for view in ("histograms", "interval", "entropy", "variance", "correlation"):
            assert {f"{slug}-{view}.png", f"{slug}-{view}.csv", f"{slug}-{view}.json"} <= names
    assert {"numbers.csv", "numbers.json", "provenance.json", "index.html", MARKER} <= names

    record = json.loads((out / "provenance.json").read_text())
    assert record["settings"] == {"num_samples": 20, "seed": 3, "level": 0.8,
                                  "class_names": [str(k) for k in range(10)]}
    columns = {c["source"]: c for c in record["columns"]}
    assert columns[SGHMC]["method"] == "sghmc" and columns[SGHMC]["num_samples_used"] == 20
    assert columns[SGHMC]["arch"]["name"] == "lenet5" and columns[SGHMC]["dataset"].startswith("mnist")
    # per-step training traces (thousands of numbers) are left out, scalars kept
    assert columns[SGHMC]["info"]["traces"]["log_posterior"].endswith("values (left out)")
    assert columns[SGHMC]["info"]["num_chains"] == 4
    assert columns[MAP]["method_in_words"].startswith("maximum a posteriori")


def test_same_posterior_twice_is_one_column(map_posterior, tmp_path):
    image = stroke_canvas()
    relative = os.path.relpath(MAP, Path.cwd())
    twice = compare([(map_posterior, MAP), (load_posterior(MAP), relative)], image)
    assert len(twice.columns) == 1 and twice.columns[0].source == MAP
    same_object = compare([(map_posterior, None), (map_posterior, None)], image)
    assert len(same_object.columns) == 1
    # two different posteriors with the same method and model keep apart by a number
    other = load_posterior(MAP)
    copy = tmp_path / "copy.pt"
    copy.write_bytes(Path(MAP).read_bytes())
    two = compare([(map_posterior, MAP), (other, str(copy))], image)
    assert [c.title for c in two.columns] == ["MAP, softmax regression, 1 draw", "MAP, softmax regression, 1 draw (2)"]
    assert [r["posterior"] for r in comparison_table(two)][::10] == [c.title for c in two.columns]
    with pytest.raises(ValueError, match="at least one"):
        compare([], image)


def test_foreign_folder_is_refused(map_posterior, tmp_path, digit_png, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    comparison = compare([(map_posterior, MAP)], stroke_canvas())
    with pytest.raises(OSError, match="already holds other files"):
        write_comparison(comparison, folder)
    assert main(["compare", str(digit_png), "--posterior", MAP, "--out", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the folder") and "Error" not in err[0]
    assert os.listdir(folder) == ["notes.txt"] and sorted(os.listdir(tmp_path)) == ["mine"]


def test_previous_export_is_replaced_and_a_failed_write_keeps_it(map_posterior, tmp_path, monkeypatch):
    out = tmp_path / "report"
    comparison = compare([(map_posterior, MAP)], stroke_canvas())
    first = write_comparison(comparison, out)  # PNG and SVG by default
    assert {p.suffix for p in first} >= {".png", ".svg", ".csv", ".json", ".html"}
    assert all(p.is_file() and p.parent == out for p in first)
    (out / "stale.txt").write_text("from an older export")
    page = (out / "index.html").read_bytes()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as info:
        write_comparison(comparison, out, ("png",))
    message = str(info.value)
    assert str(out) in message and "no space left" in message.lower()
    assert "Errno" not in message and ".partial" not in message  # names the folder asked for
    monkeypatch.undo()
    assert (out / "index.html").read_bytes() == page  # the earlier export is untouched
    assert os.listdir(tmp_path) == ["report"]  # and no temporary folder is left beside it

    second = write_comparison(comparison, out, ("png",))
    names = {p.name for p in out.iterdir()}
    assert "stale.txt" not in names and not any(n.endswith(".svg") for n in names)
    assert names == {p.name for p in second} | {MARKER}


def test_read_only_parent_gives_a_readable_error(map_posterior, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who may write into read-only folders (root)")
        comparison = compare([(map_posterior, MAP)], stroke_canvas())
        with pytest.raises(OSError, match=r"(?i)locked.*(permission|not allowed)"):
            write_comparison(comparison, locked / "out", ("png",))
    finally:
        locked.chmod(0o700)


def test_page_names_its_input_and_fits_its_numbers_to_the_page(exported, digit_png):
    """Issue 47 (13): the page and provenance.json name the input file; the numbers table on the
    page is per class (7 columns), grouped by posterior, with no file path repeated on its rows."""
    out = exported["out"]
    text = (out / "index.html").read_text(encoding="utf-8")
    assert f"Input: <b>{digit_png}</b>" in text
    assert json.loads((out / "provenance.json").read_text())["input"] == str(digit_png)
    numbers = text[text.index("<h2>Numbers</h2>"):text.index("<h2>Provenance</h2>")]
    rows = [row for row in numbers.split("<tr") if "<td" in row]
    assert len(rows) == 3 * 10 and all(row.count("<td") == 7 for row in rows)
    for path in (SGHMC, MAP, DROPOUT):
        assert str(Path(path).resolve()) not in numbers and Path(path).name not in numbers
    assert 'class="scroll"' in numbers  # a narrow window scrolls the table, never the page
    with open(out / "numbers.csv", newline="") as f:  # the file keeps every number, paths included
        assert "source" in next(csv.reader(f))
