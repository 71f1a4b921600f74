"""Figures and numbers tables of the per-input views, for export (PNG, SVG, CSV, JSON).

One posterior's :class:`core.analysis.uncertainty.Summary` of one input gives five views
(:data:`INPUT_VIEWS`); each has a matplotlib figure (:func:`input_view_figure`) and the
numbers behind it (:func:`input_view_table`), written together by :func:`export_input_view`.
The rotation sweep has the same trio (:func:`sweep_figure`, :func:`sweep_table`,
:func:`export_sweep`). The GUI's "Export" and ``bayescope-cli compare`` both write through
here, so a file saved from the window is the file a script writes.

Posteriors with few draws (8 for the bundled SGHMC, 1 for MAP) are drawn as they are: the
histogram view then shows every draw as a dot instead of a 20-bin histogram of 8 values,
and every figure states how many draws it shows. matplotlib is imported only when a figure
is made (the app's cold start matters).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from core.analysis.metrics import RotationSweep
from core.analysis.uncertainty import Summary
from core.engine.naming import FADE_SD, plural
from core.outputs.export import export_view
from core.outputs.palette import (
    BAR,
    BAR_TOP,
    DIVERGING,
    MEAN,
    UNCERTAINTY,
    mpl,
    mpl_colour_map,
    sweep_probability_words,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


#: View key → the title a person reads.
INPUT_VIEWS: dict[str, str] = {
    "histograms": "Per-class sample histograms",
    "interval": "Mean probability and credible interval",
    "entropy": "Uncertainty split (entropy)",
    "variance": "Uncertainty split per class (variance)",
    "correlation": "Class correlation across draws",
}

#: At or below this many draws the histogram view shows each draw as a dot: a 20-bin
#: histogram of a handful of values is mostly empty bins and says less than the values.
STRIP_MAX_DRAWS = 30

_PROBABILITY_TICKS = ([0.0, 0.5, 1.0], ["0", ".5", "1"])

#: The window's colours (:mod:`core.outputs.palette`): epistemic purple, never class 3's red.
_ALEATORIC_COLOUR = mpl(UNCERTAINTY["aleatoric"])

_EPISTEMIC_COLOUR = mpl(UNCERTAINTY["epistemic"])


def _draws_in(title: str, num_samples: int) -> str:
    """``title``, with the number of draws added unless it already says it."""
    if re.search(rf"\b{num_samples} draws?\b", title):
        return title
    return f"{title} · {plural(num_samples, 'draw')}" if title else plural(num_samples, "draw")


def _heading(view: str, title: str, num_samples: int) -> str:
    return f"{INPUT_VIEWS[view]}\n{_draws_in(title, num_samples)}"


def _numpy(values: torch.Tensor | np.ndarray | None) -> np.ndarray:
    if values is None:
        raise ValueError("this summary lacks the variance and correlation parts; summarise again")
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def _check(view: str, summary: Summary, class_names: Sequence[str]) -> list[str]:
    if view not in INPUT_VIEWS:
        raise ValueError(f"unknown view {view!r}; the views are {', '.join(INPUT_VIEWS)}")
    names = [str(c) for c in class_names]
    if len(names) != len(summary.mean):
        raise ValueError(f"{len(names)} class names given for {len(summary.mean)} classes")
    return names


def _draw_values(summary: Summary, samples: torch.Tensor | np.ndarray | None) -> np.ndarray:
    """Each draw's class probabilities (S, K): exact when ``samples`` is given, else the
    centre of the summary's histogram bin that held it (resolution 1/bins)."""
    if samples is not None:
        values = _numpy(samples)
        if values.shape != (summary.num_samples, len(summary.mean)):
            raise ValueError(
                f"samples of shape {values.shape} do not match the summary "
                f"({summary.num_samples} draws, {len(summary.mean)} classes)"
            )
        return values
    edges = _numpy(summary.bin_edges)
    centres = (edges[:-1] + edges[1:]) / 2
    counts = np.rint(_numpy(summary.histograms) * summary.num_samples).astype(int)
    columns = [np.repeat(centres, row)[: summary.num_samples] for row in counts]
    return np.stack(columns, axis=1)


def _stack_heights(values: np.ndarray, bins: int) -> np.ndarray:
    """Height of each dot in a dot plot: draws falling in the same bin pile up 1, 2, 3, ..."""
    index = np.minimum((np.clip(values, 0, 1) * bins).astype(int), bins - 1)
    heights = np.zeros(len(values), dtype=np.int64)
    seen: dict[int, int] = {}
    for i in np.argsort(values, kind="stable"):
        seen[index[i]] = seen.get(index[i], 0) + 1
        heights[i] = seen[index[i]]
    return heights


def input_view_figure(
    view: str,
    title: str,
    summary: Summary,
    class_names: Sequence[str],
    *,
    samples: torch.Tensor | np.ndarray | None = None,
    level: float | None = None,
) -> Figure:
    """The matplotlib figure of one per-input view (a key of :data:`INPUT_VIEWS`).

    Parameters
    ----------
    title
        The posterior's column header, e.g. ``"SGHMC, LeNet, 8 draws"``.
    samples
        The S×K draws behind ``summary``; with few draws the histogram view then places
        each dot at its exact probability (otherwise at its histogram bin's centre).
    level
        The credible level of ``summary.lower``/``upper``, for the interval view's legend.
    """
    names = _check(view, summary, class_names)
    draw = {
        "histograms": _histograms_figure,
        "interval": _interval_figure,
        "entropy": _entropy_figure,
        "variance": _variance_figure,
        "correlation": _correlation_figure,
    }[view]
    fig = draw(summary, names, samples=samples, level=level)
    fig.suptitle(_heading(view, title, summary.num_samples), fontsize=10)
    return fig


def _new_figure(width: float, height: float) -> Figure:
    from core.outputs.figures import _new_figure as new

    return new(width, height)


def _class_ticks(ax: Any, positions: Any, names: list[str], fontsize: float | None = None) -> None:
    from core.outputs.figures import class_ticks

    class_ticks(ax, positions, names, fontsize)


def _histograms_figure(summary: Summary, names: list[str], *, samples: Any, level: Any) -> Figure:
    s, k = summary.num_samples, len(names)
    strip = s <= STRIP_MAX_DRAWS
    fig = _new_figure(5.4, 0.62 * k + 1.4)
    axes = fig.subplots(k, 1, sharex=True, squeeze=False)[:, 0]
    mean = _numpy(summary.mean)
    edges = _numpy(summary.bin_edges)
    bins = len(edges) - 1
    if strip:
        values = _draw_values(summary, samples)
    hist = _numpy(summary.histograms)
    for j, ax in enumerate(axes):
        if strip:
            heights = _stack_heights(values[:, j], bins)
            ax.plot(values[:, j], heights, linestyle="none", marker="o", markersize=3.6,
                    color="tab:blue", markeredgecolor="navy", markeredgewidth=0.4,
                    label="one draw" if j == 0 else None)
            top = max(int(heights.max()), 1)
            ax.set_ylim(0, top + 0.9)
            if s > 1:
                ax.set_yticks([0, top], ["0", str(top)])
            else:  # one draw: the height carries no information
                ax.set_yticks([])
        else:
            ax.bar(edges[:-1], hist[j], width=np.diff(edges), align="edge", color="tab:blue",
                   alpha=0.8, label="share of draws in the bin" if j == 0 else None)
            if samples is not None:
                # a bin holding one draw in a hundred is a hairline bar; the rug still shows it
                ax.plot(_numpy(samples)[:, j], np.full(s, 0.06), linestyle="none", marker="|",
                        markersize=5, color="navy", alpha=0.5,
                        label="one draw" if j == 0 else None)
            ax.set_ylim(0, 1.05)
            ax.set_yticks([0, 1], ["0", "1"])
        if s > 1:  # with one draw the mean is the dot itself
            ax.axvline(mean[j], color="black", linewidth=1, label="mean over draws" if j == 0 else None)
        ax.set_ylabel(names[j], rotation=0, ha="right", va="center", fontsize=9, fontweight="bold",
                      labelpad=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
        if j == summary.predicted_class:
            ax.set_facecolor("#fff4d6")  # the predicted class stands out without a legend entry
    axes[-1].set_xlim(-0.02, 1.02)
    axes[-1].set_xticks(*_PROBABILITY_TICKS)
    axes[-1].set_xlabel("class probability in one draw")
    if strip and s > 1:
        fig.supylabel("class  ·  number of draws (dots pile up when close)", fontsize=8)
    elif strip:
        fig.supylabel("class  ·  the single draw's probability", fontsize=8)
    else:
        fig.supylabel(f"class  ·  share of the {s} draws in each of {bins} bins", fontsize=8)
    axes[0].legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False)
    return fig


def _interval_figure(summary: Summary, names: list[str], *, samples: Any, level: float | None) -> Figure:
    s, k = summary.num_samples, len(names)
    fig = _new_figure(max(4.6, 0.42 * k + 1.6), 3.4)
    ax = fig.subplots()
    x = np.arange(k)
    lower, upper, mean = _numpy(summary.lower), _numpy(summary.upper), _numpy(summary.mean)
    # the level it really holds at this number of draws (e.g. "78% interval (90% asked)")
    band = (f"credible {summary.interval_label}" if s > 1 else "credible interval")
    # As the window draws it: a bar up to the mean (the predicted class's bar in its own colour)
    # and the interval as a whisker with beams, drawn on its own (with few or skewed draws the
    # mean can lie outside the equal-tailed interval, so it is not an error bar around the mean)
    top = x == int(summary.predicted_class)
    ax.bar(x[~top], mean[~top], width=0.7, color=mpl(BAR), label="mean")
    ax.bar(x[top], mean[top], width=0.7, color=mpl(BAR_TOP), label="predicted class (mean)")
    ax.vlines(x, lower, upper, color=mpl(MEAN), linewidth=1, label=band)
    ax.hlines(np.concatenate([lower, upper]), np.tile(x - 0.125, 2), np.tile(x + 0.125, 2),
              color=mpl(MEAN), linewidth=1)
    _class_ticks(ax, x, names)
    ax.set_xlabel("class")
    ax.set_ylim(-0.03, 1.03)
    ax.set_yticks(*_PROBABILITY_TICKS)
    ax.set_ylabel("class probability")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    if s == 1:
        ax.set_title("1 draw: each interval shrinks to a point", fontsize=8, color="0.3")
    elif summary.expected_coverage < summary.level:
        ax.set_title(f"from {s} draws: holds {100 * summary.expected_coverage:.0f}% on average, "
                     f"not {100 * summary.level:g}%", fontsize=8, color="0.3")
    else:
        ax.set_title(f"from {s} draws", fontsize=8, color="0.3")
    return fig


def _entropy_figure(summary: Summary, names: list[str], *, samples: Any, level: Any) -> Figure:
    k = len(names)
    maximum = math.log(k)
    fig = _new_figure(4.4, 4.4)
    ax = fig.subplots()
    ax.bar([0], [summary.total], width=0.6, color=mpl(UNCERTAINTY["total"]), label="total: entropy of the mean")
    ax.bar([1], [summary.aleatoric], width=0.6, color=_ALEATORIC_COLOUR,
           label="aleatoric: mean entropy of each draw")
    if summary.masks is None:
        ax.bar([1], [summary.epistemic], bottom=[summary.aleatoric], width=0.6, color=_EPISTEMIC_COLOUR,
               label="epistemic: disagreement between draws")
    else:  # D-SGHMC: the random input masks' part, then the weights' part
        m = summary.masks
        ax.bar([1], [m.input_masks], bottom=[summary.aleatoric], width=0.6, color=_EPISTEMIC_COLOUR,
               alpha=0.4, label=f"input masks: random pixels dropped at prediction ({m.masks_per_draw} per draw)")
        ax.bar([1], [m.weights], bottom=[summary.aleatoric + m.input_masks], width=0.6,
               color=_EPISTEMIC_COLOUR, label="weights: disagreement between the sampled models")
    for xpos, value in ((0, summary.total), (1, summary.aleatoric + summary.epistemic)):
        ax.text(xpos, value + maximum * 0.02, f"{value:.3f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(maximum, color="black", linestyle="--", linewidth=1)
    ax.text(1.45, maximum * 0.985, f"maximum ln {k} = {maximum:.2f} nats\n(every class equally likely)",
            ha="right", va="top", fontsize=7)
    ax.set_xticks([0, 1], ["total", "aleatoric + epistemic" if summary.masks is None
                           else "aleatoric + input masks + weights"])
    ax.set_xlim(-0.55, 1.55)
    ax.set_ylim(0, maximum * 1.12)
    ax.set_ylabel("uncertainty (nats)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    if summary.num_samples == 1:
        ax.set_title("1 draw: no disagreement between draws can be seen", fontsize=8, color="0.3")
    return fig


def _variance_figure(summary: Summary, names: list[str], *, samples: Any, level: Any) -> Figure:
    k = len(names)
    aleatoric = _numpy(summary.aleatoric_variance)
    epistemic = _numpy(summary.epistemic_variance)
    total = _numpy(summary.total_variance)
    fig = _new_figure(max(5.0, 0.42 * k + 2.6), 3.4)
    ax = fig.subplots()
    x = np.arange(k)
    ax.bar(x, aleatoric, width=0.7, color=_ALEATORIC_COLOUR, label="aleatoric  E[p(1 − p)]")
    ax.bar(x, epistemic, bottom=aleatoric, width=0.7, color=_EPISTEMIC_COLOUR,
           label="epistemic  Var[p] across draws")
    ax.plot(x, total, linestyle="none", marker="_", markersize=14, color="black",
            label="total  p̄(1 − p̄)")
    ax.axhline(0.25, color="black", linestyle="--", linewidth=1)
    ax.text(-0.5, 0.253, "maximum 0.25 (at p̄ = .5)", ha="left", va="bottom", fontsize=7)
    _class_ticks(ax, x, names)
    ax.set_xlabel("class")
    ax.set_xlim(-0.6, k - 0.4)
    ax.set_ylim(0, 0.28)
    ax.set_yticks([0, 0.125, 0.25], ["0", ".125", ".25"])
    ax.set_ylabel("variance of the class probability")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def _correlation_figure(summary: Summary, names: list[str], *, samples: Any, level: Any) -> Figure:
    k = len(names)
    corr = _numpy(summary.correlation)
    faded = np.sqrt(np.clip(_numpy(summary.epistemic_variance), 0, None)) < FADE_SD
    size = max(3.6, 0.36 * k + 1.6)
    fig = _new_figure(size + 1.2, size + 0.6)
    ax = fig.subplots()
    image = ax.imshow(corr, cmap=mpl_colour_map(DIVERGING, "bayescope_diverging"), vmin=-1, vmax=1)  # the window's
    veil = np.zeros((k, k, 4))
    veil[..., :3] = 1.0
    veil[..., 3] = np.where(faded[:, None] | faded[None, :], 0.8, 0.0)
    ax.imshow(veil)
    for i in range(k):
        for j in range(k):
            v = corr[i, j]
            if i != j and abs(v) >= 0.005 and not (faded[i] or faded[j]):
                text = f"{v:+.2f}".replace("0.", ".")
                ax.text(j, i, text, ha="center", va="center", fontsize=6 if k > 6 else 8,
                        color="white" if abs(v) > 0.6 else "black")
    _class_ticks(ax, range(k), names, fontsize=8)
    ax.set_yticks(range(k), names, fontsize=8)
    ax.set_xlabel("class")
    ax.set_ylabel("class")
    bar = fig.colorbar(image, ax=ax, shrink=0.8, ticks=[-1, -0.5, 0, 0.5, 1])
    bar.ax.set_yticklabels(["−1", "−.5", "0", ".5", "1"])
    bar.set_label("correlation across draws\n(−1: trade probability, +1: rise together)", fontsize=7)
    if summary.num_samples == 1:
        note = "1 draw: no correlation can be measured (shown as 0)"
    elif faded.any():
        note = f"faded: classes whose probability varies by less than {FADE_SD:g} across draws"
        if summary.num_samples == 2:
            note += "\n2 draws: every correlation is −1, 0 or +1"
    else:
        note = "2 draws: every correlation is −1, 0 or +1" if summary.num_samples == 2 else ""
    ax.set_title(note, fontsize=8, color="0.3")
    return fig


def input_view_table(
    view: str,
    summary: Summary,
    class_names: Sequence[str],
    *,
    samples: torch.Tensor | np.ndarray | None = None,
    level: float | None = None,
) -> list[dict[str, Any]]:
    """The numbers behind :func:`input_view_figure`: one row per class (per class pair for
    ``correlation``, per component for ``entropy``). ``samples`` adds each draw's value to
    the histogram table when the figure shows individual draws."""
    names = _check(view, summary, class_names)
    s = summary.num_samples
    if view == "histograms":
        edges = _numpy(summary.bin_edges)
        hist = _numpy(summary.histograms)
        rows = []
        draws = _numpy(samples) if samples is not None and s <= STRIP_MAX_DRAWS else None
        for j, name in enumerate(names):
            row: dict[str, Any] = {"class": name, "num_samples": s, "mean": float(summary.mean[j])}
            for b in range(len(edges) - 1):
                row[f"share_{edges[b]:.2f}_{edges[b + 1]:.2f}"] = float(hist[j, b])
            if draws is not None:
                for i in range(s):
                    row[f"draw_{i + 1}"] = float(draws[i, j])
            rows.append(row)
        return rows
    if view == "interval":
        lower, upper, mean = _numpy(summary.lower), _numpy(summary.upper), _numpy(summary.mean)
        return [
            {"class": name, "mean": float(mean[j]), "lower": float(lower[j]),
             "upper": float(upper[j]), "level": level,
             "expected_coverage": summary.expected_coverage, "num_samples": s}
            for j, name in enumerate(names)
        ]
    if view == "entropy":
        maximum = math.log(len(names))
        return [
            {"component": component, "nats": float(value), "maximum_nats": maximum, "num_samples": s}
            for component, value in (
                ("total", summary.total),
                ("aleatoric", summary.aleatoric),
                ("epistemic", summary.epistemic),
                *(() if summary.masks is None else (("epistemic: input masks", summary.masks.input_masks),
                                                    ("epistemic: weights", summary.masks.weights))),
            )
        ]
    if view == "variance":
        total = _numpy(summary.total_variance)
        aleatoric = _numpy(summary.aleatoric_variance)
        epistemic = _numpy(summary.epistemic_variance)
        return [
            {"class": name, "total_variance": float(total[j]),
             "aleatoric_variance": float(aleatoric[j]), "epistemic_variance": float(epistemic[j]),
             "num_samples": s}
            for j, name in enumerate(names)
        ]
    corr = _numpy(summary.correlation)
    sd = np.sqrt(np.clip(_numpy(summary.epistemic_variance), 0, None))
    return [
        {"row_class": a, "column_class": b, "correlation": float(corr[i, j]),
         "row_class_sd": float(sd[i]), "column_class_sd": float(sd[j]),
         "faded": bool(sd[i] < FADE_SD or sd[j] < FADE_SD), "num_samples": s}
        for i, a in enumerate(names)
        for j, b in enumerate(names)
    ]


def export_input_view(
    view: str,
    title: str,
    summary: Summary,
    class_names: Sequence[str],
    path: str | os.PathLike,
    *,
    samples: torch.Tensor | np.ndarray | None = None,
    level: float | None = None,
) -> list[Path]:
    """Write one view: ``.png``/``.svg`` → the figure plus ``<stem>.csv`` and ``<stem>.json``
    beside it; ``.csv``/``.json`` → only the numbers in that format. Returns the paths.

    Raises
    ------
    ValueError
        For another suffix (the message names the formats) or an unknown view.
    OSError
        When a write fails; the message names the folder and the reason.
    """
    rows = input_view_table(view, summary, class_names, samples=samples, level=level)
    return export_view(
        lambda: input_view_figure(view, title, summary, class_names, samples=samples, level=level),
        rows,
        path,
    )


def sweep_figure(
    title: str,
    sweep: RotationSweep,
    class_names: Sequence[str],
    *,
    images: np.ndarray | None = None,
) -> Figure:
    """Gal & Ghahramani's rotated-image plot for one posterior (:func:`core.outputs.figures.rotation_figure`).

    ``images`` (A, H, W), the rotated inputs, are shown as a strip on top when given.
    """
    from core.outputs.figures import rotation_figure

    fig = rotation_figure({title: sweep}, [str(c) for c in class_names], images)
    probability_axis = fig.axes[1 if images is not None and len(images) else 0]
    probability_axis.set_ylabel(sweep_probability_words(sweep)[1].replace(" (line), ", "\n(line), "), fontsize=8)
    what = "Rotation" if sweep.swept == "rotation" else sweep.swept[:1].upper() + sweep.swept[1:]
    fig.suptitle(f"{what} sweep\n{title}", fontsize=10)
    return fig


def sweep_table(sweep: RotationSweep, class_names: Sequence[str]) -> list[dict[str, Any]]:
    """One row per angle and class: median, lower, upper, mean (the line drawn), with the angle's total,
    aleatoric and epistemic entropies (nats) repeated on each of its rows."""
    names = [str(c) for c in class_names]
    if len(names) != sweep.mean.shape[1]:
        raise ValueError(f"{len(names)} class names given for {sweep.mean.shape[1]} classes")
    return [
        {sweep.parameter: float(angle), "class": name, "median": float(sweep.median[a, j]),
         "lower": float(sweep.lower[a, j]), "upper": float(sweep.upper[a, j]),
         "mean": float(sweep.mean[a, j]), "total": float(sweep.total[a]),
         "aleatoric": float(sweep.aleatoric[a]), "epistemic": float(sweep.epistemic[a]),
         "level": float(sweep.level), "expected_coverage": sweep.expected_coverage}
        for a, angle in enumerate(sweep.angles)
        for j, name in enumerate(names)
    ]


def export_sweep(
    title: str,
    sweep: RotationSweep,
    class_names: Sequence[str],
    path: str | os.PathLike,
    *,
    images: np.ndarray | None = None,
) -> list[Path]:
    """Write the sweep with the suffix rule of :func:`export_input_view`; return the paths."""
    rows = sweep_table(sweep, class_names)
    return export_view(lambda: sweep_figure(title, sweep, class_names, images=images), rows, path)
