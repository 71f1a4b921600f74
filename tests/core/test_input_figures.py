"""Export of the per-input views and the rotation sweep: figures, numbers, few-draw honesty."""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import torch

from core.analysis.metrics import rotation_sweep
from core.analysis.predictive import predict_image
from core.engine.data.preprocess import to_mnist
from core.engine.resources import resources_dir
from core.engine.store import load_posterior
from core.outputs.input_figures import (
    INPUT_VIEWS,
    STRIP_MAX_DRAWS,
    export_input_view,
    export_sweep,
    input_view_figure,
    input_view_table,
    sweep_table,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Words, not digits: digits also appear as tick labels, so they would prove nothing.
NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def stroke_digit() -> np.ndarray:
    """A 4 with a nearly closed top (a 4/9 look-alike), drawn as thick strokes, in MNIST form."""
    canvas = np.zeros((120, 120), np.float32)
    canvas[15:70, 30:40] = 1.0  # left stroke
    canvas[60:70, 30:95] = 1.0  # bar
    canvas[10:115, 80:90] = 1.0  # right stroke
    canvas[10:20, 40:80] = 1.0  # top, closing the 4 towards a 9
    return to_mnist(canvas)


def _model(name: str):
    return load_posterior(resources_dir() / "models" / name)


@pytest.fixture(scope="module")
def predictions() -> dict[str, object]:
    image = stroke_digit()
    return {
        name: predict_image(_model(f"paper_softmax_{method}.pt"), image, 100, seed=0, level=0.9)
        for name, method in (("few", "ensemble"), ("softmax_map", "map"))  # 5 draws, and 1
    }


def _svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    return ["".join(el.itertext()) for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "text"]


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _read_json(path: Path) -> list[dict[str, object]]:
    payload = json.loads(path.read_text())
    return [dict(zip(payload["columns"], row, strict=True)) for row in payload["data"]]


def _expected_rows(view: str, samples: np.ndarray, level: float) -> list[dict[str, float]]:
    """Each view's numbers computed here from the draws with plain numpy."""
    s, k = samples.shape
    mean = samples.mean(0)
    if view == "histograms":
        rows = []
        for j in range(k):
            counts, _ = np.histogram(samples[:, j], bins=20, range=(0, 1))
            row = {"mean": mean[j], **{f"share_{b / 20:.2f}_{(b + 1) / 20:.2f}": c / s for b, c in enumerate(counts)}}
            row.update({f"draw_{i + 1}": samples[i, j] for i in range(s)})
            rows.append(row)
        return rows
    if view == "interval":
        # the m-th smallest and largest draws, m the most with (S + 1 − 2m)/(S + 1) ≥ level
        m = max(1, int((1 - level) * (s + 1) / 2 + 1e-9))
        ordered = np.sort(samples, axis=0)
        lower, upper = ordered[m - 1], ordered[s - m]
        return [{"mean": mean[j], "lower": lower[j], "upper": upper[j]} for j in range(k)]
    if view == "entropy":
        def h(p: np.ndarray) -> np.ndarray:
            return -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0)).sum(-1)

        total, aleatoric = h(mean), h(samples).mean()
        return [{"nats": total, "maximum_nats": math.log(k)}, {"nats": aleatoric},
                {"nats": max(total - aleatoric, 0.0)}]
    if view == "variance":
        return [{"total_variance": mean[j] * (1 - mean[j]),
                 "aleatoric_variance": (samples[:, j] * (1 - samples[:, j])).mean(),
                 "epistemic_variance": samples[:, j].var()} for j in range(k)]
    sd = samples.std(0)
    varying = sd > 1e-3  # correlations of classes that barely move are numerically fragile
    corr = np.corrcoef(samples[:, varying].T) if varying.sum() > 1 else np.ones((1, 1))
    index = np.flatnonzero(varying)
    rows = []
    for a in range(k):
        for b in range(k):
            row: dict[str, float] = {}
            if a == b:
                row["correlation"] = 1.0
            elif varying[a] and varying[b]:
                row["correlation"] = corr[np.searchsorted(index, a), np.searchsorted(index, b)]
            rows.append(row)
    return rows


@pytest.mark.parametrize("view", list(INPUT_VIEWS))
def test_each_view_exports_png_svg_and_its_numbers(view, predictions, tmp_path):
    pred = predictions["few"]
    summary, samples = pred.summary, pred.samples
    title = "Deep ensemble, softmax regression, 5 draws"
    written = export_input_view(view, title, summary, NAMES, tmp_path / f"{view}.png",
                                samples=samples, level=0.9)
    assert sorted(p.name for p in written) == sorted([f"{view}.png", f"{view}.csv", f"{view}.json"])
    assert (tmp_path / f"{view}.png").read_bytes()[:8] == PNG_SIGNATURE

    svg_written = export_input_view(view, title, summary, NAMES, tmp_path / "svg" / f"{view}.svg",
                                    samples=samples, level=0.9)
    assert {p.suffix for p in svg_written} == {".svg", ".csv", ".json"}
    texts = " ".join(_svg_texts(tmp_path / "svg" / f"{view}.svg"))
    assert INPUT_VIEWS[view] in texts and "5 draws" in texts
    if view == "entropy":
        assert "ln 10" in texts and "nats" in texts
    else:
        assert all(name in texts for name in NAMES)

    csv_rows = _read_csv(tmp_path / f"{view}.csv")
    json_rows = _read_json(tmp_path / f"{view}.json")
    expected = _expected_rows(view, samples.double().numpy(), 0.9)
    assert len(csv_rows) == len(json_rows) == len(expected)
    for got_csv, got_json, want in zip(csv_rows, json_rows, expected, strict=True):
        for key, value in want.items():
            assert float(got_csv[key]) == pytest.approx(float(value), abs=2e-5), (key, got_csv)
            assert float(got_json[key]) == pytest.approx(float(value), abs=2e-5), (key, got_json)


@pytest.mark.parametrize(("name", "draws"), [("softmax_map", "1 draw"), ("few", "5 draws")])
def test_every_view_states_the_number_of_draws(name, draws, predictions, tmp_path):
    summary = predictions[name].summary
    for view in INPUT_VIEWS:
        # the title lacks the count: the figure must add it
        path = tmp_path / f"{view}.svg"
        export_input_view(view, "Some posterior", summary, NAMES, path)
        texts = " ".join(_svg_texts(path))
        assert f"Some posterior · {draws}" in texts, view
        assert "1 draws" not in texts
    # a title that says it already is not repeated
    export_input_view("entropy", f"Some posterior, {draws}", summary, NAMES, path)
    texts = " ".join(_svg_texts(path))
    assert f"Some posterior, {draws}" in texts and f"· {draws}" not in texts


def test_few_draws_show_each_draw_not_a_histogram(predictions):
    """5 draws: a dot per draw at its probability; 100 draws: bars of the fixed bins."""
    pred = predictions["few"]
    fig = input_view_figure("histograms", "t", pred.summary, NAMES, samples=pred.samples)
    panels = fig.axes[: len(NAMES)]
    for j, ax in enumerate(panels):
        assert not ax.patches  # no bars
        dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
        assert len(dots) == 1
        np.testing.assert_allclose(np.asarray(dots[0].get_xdata()), pred.samples[:, j].numpy(), atol=1e-6)

    many = predict_image(_model("network_lenet5_mc_dropout.pt"), stroke_digit(), 100, seed=0)
    assert many.summary.num_samples > STRIP_MAX_DRAWS
    fig = input_view_figure("histograms", "t", many.summary, NAMES)
    heights = np.array([[bar.get_height() for bar in ax.patches] for ax in fig.axes[: len(NAMES)]])
    np.testing.assert_allclose(heights, many.summary.histograms.numpy(), atol=1e-6)


def test_table_formats_alone_and_unknown_suffix(predictions, tmp_path):
    summary = predictions["softmax_map"].summary
    assert [p.name for p in export_input_view("interval", "t", summary, NAMES, tmp_path / "a.csv")] == ["a.csv"]
    assert [p.name for p in export_input_view("interval", "t", summary, NAMES, tmp_path / "b.json")] == ["b.json"]
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "b.json"]
    with pytest.raises(ValueError, match=r"\.png or \.svg.*\.csv or \.json"):
        export_input_view("interval", "t", summary, NAMES, tmp_path / "c.jpg")
    with pytest.raises(ValueError, match="views are"):
        export_input_view("scatter", "t", summary, NAMES, tmp_path / "c.png")
    with pytest.raises(ValueError, match="class names"):
        input_view_table("interval", summary, NAMES[:3])


def test_disk_full_gives_a_readable_error_and_leaves_nothing(predictions, tmp_path, monkeypatch):
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as info:
        export_input_view("entropy", "t", predictions["softmax_map"].summary, NAMES, tmp_path / "e.png")
    message = str(info.value)
    assert str(tmp_path) in message and "no space left" in message.lower()
    assert "Errno" not in message and "OSError" not in message
    assert os.listdir(tmp_path) == []  # no temporary file left behind


def test_read_only_folder_gives_a_readable_error(predictions, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who may write into read-only folders (root)")
        with pytest.raises(OSError, match=r"(?i)locked.*(permission|not allowed)"):
            export_input_view("variance", "t", predictions["softmax_map"].summary, NAMES, folder / "v.svg")
    finally:
        folder.chmod(0o700)


def test_sweep_exports_figure_and_numbers(tmp_path):
    posterior = _model("paper_softmax_map.pt")
    angles = np.array([0.0, 90.0, 180.0])
    sweep = rotation_sweep(posterior, torch.from_numpy(stroke_digit()), angles, level=0.8)
    rows = sweep_table(sweep, NAMES)
    assert len(rows) == len(angles) * len(NAMES)
    for row in rows:
        a, k = list(angles).index(row["angle"]), NAMES.index(row["class"])
        assert row["median"] == pytest.approx(sweep.median[a, k])
        assert row["lower"] <= row["median"] <= row["upper"]
        assert row["total"] == pytest.approx(sweep.total[a])
        assert row["total"] == pytest.approx(row["aleatoric"] + row["epistemic"], abs=1e-6)
    written = export_sweep("MAP, softmax regression, 1 draw", sweep, NAMES, tmp_path / "sweep.svg")
    assert {p.suffix for p in written} == {".svg", ".csv", ".json"}
    texts = " ".join(_svg_texts(tmp_path / "sweep.svg"))
    # one draw has no spread: no "80% band" is claimed for it
    assert "MAP, softmax regression, 1 draw" in texts and "no band from 1 draw" in texts
    assert "80% band" not in texts and all(row["expected_coverage"] == 0 for row in rows)
    assert len(_read_csv(tmp_path / "sweep.csv")) == len(rows)


@pytest.mark.parametrize("view", ["interval", "variance", "correlation"])
def test_long_class_names_are_turned_so_they_do_not_run_into_each_other(view, predictions):
    pred = predictions["few"]
    ages = ["00-02", "03-07", "08-14", "15-24", "25-37", "38-47", "48-59", "60+", "extra 1", "extra 2"]
    for names, angle in (([str(d) for d in range(10)], 0.0), (ages, 45.0)):
        fig = input_view_figure(view, "SGHMC", pred.summary, names, samples=pred.samples, level=0.9)
        ticks = fig.axes[0].get_xticklabels()
        assert [t.get_text() for t in ticks] == list(names)
        assert {t.get_rotation() for t in ticks} == {angle}
        fig.canvas.draw()
        spacing = np.diff(fig.axes[0].transData.transform([(0, 0), (1, 0)])[:, 0])[0]  # pixels per class
        if angle:  # level, the widest name would not fit its class's room; turned, lines stay apart
            renderer = fig.canvas.get_renderer()
            level = max(renderer.get_text_width_height_descent(n, ticks[0].get_fontproperties(), ismath=False)[0]
                        for n in names)
            height = ticks[0].get_fontsize() * fig.dpi / 72
            assert spacing * np.sin(np.radians(angle)) > height
            assert level > spacing or view == "correlation"  # whose wider cells would just hold them
        else:
            boxes = [t.get_window_extent() for t in ticks]
            assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))


def test_exports_use_the_windows_marks_and_colours():
    """The interval view is bars with whiskers, as in the window, and epistemic is the window's
    purple, never class 3's red (issue 47, item 12)."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Rectangle

    from core.outputs.palette import BAR, BAR_TOP, CLASS_COLOURS, UNCERTAINTY, mpl

    summary = predict_image(_model("paper_softmax_mc_dropout.pt"), torch.from_numpy(stroke_digit()),
                            num_samples=20).summary
    fig = input_view_figure("interval", "t", summary, NAMES)
    bars = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_height() > 0]
    assert len(bars) == len(NAMES)
    heights = {round(b.get_x() + b.get_width() / 2): b.get_height() for b in bars}
    assert [heights[k] for k in range(len(NAMES))] == pytest.approx(summary.mean.numpy().tolist(), abs=1e-6)
    colours = {round(b.get_x() + b.get_width() / 2): b.get_facecolor()[:3] for b in bars}
    assert colours[summary.predicted_class] == pytest.approx(mpl(BAR_TOP))
    assert all(colours[k] == pytest.approx(mpl(BAR)) for k in range(len(NAMES)) if k != summary.predicted_class)
    assert not [line for line in fig.axes[0].get_lines() if line.get_marker() == "o"]  # no dots
    for view in ("entropy", "variance"):
        fig = input_view_figure(view, "t", summary, NAMES)
        faces = {to_rgb(p.get_facecolor()) for p in fig.axes[0].patches}
        assert any(f == pytest.approx(mpl(UNCERTAINTY["epistemic"])) for f in faces)
        assert not any(f == pytest.approx(mpl(CLASS_COLOURS[3])) for f in faces)


def test_the_data_set_figures_legends_lie_above_their_panels():
    """A legend inside a panel (matplotlib's "best" place) lay on the histograms' tallest bars: the
    exported figures' legends sit above every panel."""
    from core.outputs import figures as fg

    rng = np.random.default_rng(0)
    scores = {n: {"total": rng.gamma(1.2 + k, 0.3, 400)} for k, n in enumerate(("HMC", "MC dropout"))}
    ood = {n: {"total": rng.gamma(6, 0.3, 400)} for n in scores}
    rates = np.linspace(0, 0.95, 20)
    curves = {n: {"total": (rates, 0.9 + 0.1 * rates)} for n in scores}
    figures = [fg.ood_histogram_figure(scores, ood, {n: {"total": 0.9} for n in scores}, 10, "digits", "letters"),
               fg.rejection_figure(curves, {n: (rates, np.minimum(1, 0.9 + rates)) for n in scores}),
               fg.per_class_error_figure({n: rng.random((3, 10)) for n in scores}, [str(i) for i in range(10)])]
    for fig in figures:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        assert [ax.get_legend() for ax in fig.axes] == [None] * len(fig.axes)
        (legend,) = fig.legends
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert box.y0 >= ax.get_window_extent(renderer).y1 - 0.5, fig
