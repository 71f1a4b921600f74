"""The report's figures fit the page: no title clipped or run into its neighbour, and the
confusion matrices' numbers and class ticks readable at the page's width (issue 47, item 13)."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.metrics import reliability_diagram
from core.outputs.figures import confusion_figure, reliability_figure

METHODS = ("HMC", "SGHMC", "MC dropout", "Mean-field VI", "SGLD", "D-SGHMC", "Laplace", "SWAG")
TITLES = [f"{m}, softmax regression, 100 draws" for m in METHODS[:4]]
DIGITS = [str(k) for k in range(10)]
PAGE_PX = 80 * 16  # the report's body: max-width 80em


def _texts(fig):
    """Every visible, non-empty text of ``fig`` (in a visible axes, if any) with its extent in pixels."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    shown = [t for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_window_extent"))
             if t.get_visible() and str(t.get_text()).strip() and (t.axes is None or t.axes.get_visible())]
    return [(t, t.get_window_extent(renderer)) for t in shown]


def _displayed_px(fig, points: float) -> float:
    """How tall ``points`` of text show on the page: the SVG is scaled down to the page's width."""
    width_px = fig.get_figwidth() * 96
    return points * 96 / 72 * min(1.0, PAGE_PX / width_px)


@pytest.mark.parametrize("count", [4, 8])  # 8: a tier's methods, where the page shrank them unreadable
def test_reliability_titles_are_whole_apart_and_readable(count):
    rng = np.random.default_rng(0)
    diagrams = {}
    for t in [f"{m}, softmax regression, 100 draws" for m in METHODS[:count]]:
        proba = rng.dirichlet(np.ones(10) * 0.3, size=200)
        diagrams[t] = reliability_diagram(proba, rng.integers(0, 10, 200))
    fig = reliability_figure(diagrams)
    box = fig.bbox
    titles = [(t, e) for t, e in _texts(fig) if t.axes is not None and t is t.axes.title]
    assert len(titles) == count
    for _, extent in titles:
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1  # not clipped by the figure
    for (a, ea), (b, eb) in zip(titles, titles[1:], strict=False):
        if abs(ea.y0 - eb.y0) < 1:  # on one row
            assert not ea.overlaps(eb), (a.get_text(), b.get_text())
    assert all(_displayed_px(fig, t.get_fontsize()) >= 9.5 for t, _ in titles)  # readable on the page


def test_confusion_numbers_and_ticks_are_readable_and_apart():
    rng = np.random.default_rng(1)
    matrices = {t: rng.dirichlet(np.ones(10), size=10) for t in TITLES}
    fig = confusion_figure(matrices, DIGITS, "Soft confusion")
    numbers = [t for t, _ in _texts(fig) if t.axes is not None and t.get_text().startswith(".")]
    assert numbers and min(_displayed_px(fig, t.get_fontsize()) for t in numbers) >= 9.5
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:4]:
        ticks = [lab.get_window_extent(renderer) for lab in ax.get_xticklabels() if lab.get_text()]
        assert len(ticks) == 10
        assert all(a.x1 + 1 < b.x0 for a, b in zip(ticks, ticks[1:], strict=False))  # 0–9 never touch
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)  # a colour scale


def test_the_html_report_says_how_far_it_got_and_stops_when_closed(tmp_path):
    """Export report (38 s in the window) yields a record per figure; closing the generator
    (the window's Cancel) writes nothing."""
    from core.analysis.evaluation import evaluate, load_posteriors, resolve_dataset
    from core.engine.resources import resources_dir
    from core.engine.runner import drain
    from core.outputs.report import figure_makers, html_report_progress

    posteriors = load_posteriors([resources_dir() / "models" / "paper_softmax_map.pt"])
    data = resolve_dataset("mnist-test", resources_dir() / "samples").first(40)
    ev = drain(evaluate(posteriors, data, None, None, num_samples=1, seed=0))
    total = len(figure_makers(ev))
    records = []
    path = drain(html_report_progress(ev, tmp_path / "report.html"), records.append)
    assert [r.step for r in records] == list(range(total + 1)) and {r.total for r in records} == {total}
    assert path.read_text(encoding="utf-8").count("<figure") == total

    stopped = html_report_progress(ev, tmp_path / "cancelled.html")
    next(stopped), next(stopped)  # one figure made
    stopped.close()
    assert not (tmp_path / "cancelled.html").exists()
