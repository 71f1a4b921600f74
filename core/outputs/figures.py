"""Static matplotlib figures of the data-set and sweep analytics, for headless export.

Every function takes results from :mod:`core.analysis.metrics` keyed by posterior name (one column
or colour per posterior, side by side) and returns a :class:`matplotlib.figure.Figure`
drawn with the Agg canvas; :func:`save_figure` writes it. No pyplot, so no global state and
no display are involved.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure

from core.analysis.metrics import (
    DropRateSensitivity,
    ReliabilityDiagram,
    RotationSweep,
    score_edges,
)
from core.outputs.palette import (
    SEQUENTIAL,
    SQRT_SCALE_TICKS,
    UNCERTAINTY,
    class_colour,
    mpl,
    mpl_colour_map,
    sweep_band_words,
)

SCORE_LABELS = {
    "total": "total H[p̄] (nats)",
    "aleatoric": "aleatoric E H[p] (nats)",
    "epistemic": "epistemic MI (nats)",
    "epistemic_variance": "epistemic Σ Var p",
    "one_minus_max_prob": "1 − max p̄",
    "top_two_overlap": "top-two overlap (BC)",
}


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def legend_above(fig: Figure, handles: Sequence[Any], labels: Sequence[str], below: bool = False,
                 **kwargs: Any) -> None:
    """The figure's legend in a row above its panels (``below``: under them, for a figure with a
    title of its own, which shares the top with it), constrained layout making room for it: never
    over the data, where a legend inside a panel hides the bars or curves beneath it (matplotlib's
    "best" place still lay on the histograms' tallest bars)."""
    kwargs.setdefault("fontsize", 8)
    fig.legend(handles, labels, loc=f"outside {'lower' if below else 'upper'} center", ncol=len(labels),
               frameon=False, **kwargs)


#: Class names longer than this are turned under the x axis (a digit's name is one character; the
#: plots give each class about 0.4 inch, which four characters of 8–10 point text fill).
TURN_NAMES_LONGER_THAN = 3


def class_ticks(ax: Any, positions: Sequence[float], names: Sequence[str], fontsize: float | None = None) -> None:
    """Class names under the x axis, turned by 45° when written level they would run into each other."""
    names = [str(n) for n in names]
    if max(map(len, names), default=0) > TURN_NAMES_LONGER_THAN:
        ax.set_xticks(positions, names, fontsize=fontsize, rotation=45, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticks(positions, names, fontsize=fontsize)


def _colours(n: int) -> list:
    """The window's class colours (:data:`core.outputs.palette.CLASS_COLOURS`), 0–1 RGB."""
    return [mpl(class_colour(i)) for i in range(n)]


def save_figure(fig: Figure, path: str | os.PathLike) -> Path:
    """Write ``fig`` (format from the suffix: .png, .svg, .pdf)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


#: Panels per row of the report's per-posterior figures: wider figures are shrunk by the page
#: (its width is 80em) until their numbers cannot be read.
RELIABILITY_PER_ROW = 3
CONFUSION_PER_ROW = 2
#: A panel title wraps at this many characters (a posterior's title is often 40).
TITLE_WIDTH = 28


def wrapped(title: str, width: int = TITLE_WIDTH) -> str:
    """``title`` on lines of at most ``width`` characters (whole words), so that it is never clipped."""
    import textwrap

    return "\n".join(textwrap.wrap(title, width, break_long_words=False)) or title


def _panels(fig: Figure, n: int, per_row: int, **kwargs: Any) -> list:
    """``n`` axes in rows of ``per_row``; the unused places of the last row are hidden."""
    rows, cols = -(-n // per_row), min(n, per_row)
    axes = list(fig.subplots(rows, cols, squeeze=False, **kwargs).ravel())
    for ax in axes[n:]:
        ax.set_visible(False)
    return axes[:n]


def reliability_figure(diagrams: Mapping[str, ReliabilityDiagram]) -> Figure:
    """Reliability diagram per posterior: accuracy per confidence bin against the diagonal."""
    n = len(diagrams)
    rows, cols = -(-n // RELIABILITY_PER_ROW), min(n, RELIABILITY_PER_ROW)
    fig = _new_figure(3.2 * cols + 0.4, 3.9 * rows)
    axes = _panels(fig, n, RELIABILITY_PER_ROW, sharey=True)
    for ax, (name, d) in zip(axes, diagrams.items(), strict=True):
        lo, hi = d.edges[:-1], d.edges[1:]
        filled = d.counts > 0
        width = hi - lo
        ax.bar(lo[filled], d.accuracy[filled], width=width[filled], align="edge",
               color="tab:blue", alpha=0.8, edgecolor="white", label="accuracy")
        gap_lo = np.minimum(d.accuracy, d.confidence)[filled]
        gap = np.abs(d.accuracy - d.confidence)[filled]
        ax.bar(lo[filled], gap, bottom=gap_lo, width=width[filled], align="edge",
               facecolor="none", edgecolor="tab:red", hatch="////", linewidth=0.8, label="gap to confidence")
        ax.plot([0, 1], [0, 1], color="0.3", linestyle="--", linewidth=1)
        share = d.counts / max(d.counts.sum(), 1)
        ax.step(np.r_[lo, 1.0], np.r_[share, share[-1]], where="post", color="0.4",
                linewidth=0.8, label="share of inputs")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_title(f"{wrapped(name)}\nECE {d.ece:.4f}", fontsize=9)
        ax.set_xlabel("confidence max p̄")
        ax.set_ylabel("accuracy")
    legend_above(fig, *axes[0].get_legend_handles_labels())
    return fig


def confusion_figure(
    matrices: Mapping[str, np.ndarray],
    class_names: Sequence[str],
    title: str,
    normalise_rows: bool = False,
    scale: str = "fraction of the true class's images",
) -> Figure:
    """Heat map per posterior (rows: true class, columns: predicted), values written in; the
    colour scale beside them is labelled ``scale``."""
    n = len(matrices)
    k = len(class_names)
    size = max(3.4, 0.45 * k + 1.2)  # a cell holds ".93" at 8 points
    rows, cols = -(-n // CONFUSION_PER_ROW), min(n, CONFUSION_PER_ROW)
    fig = _new_figure(size * cols + 0.9, (size + 0.3) * rows + 0.4)
    axes = _panels(fig, n, CONFUSION_PER_ROW)
    image = None
    for ax, (name, m) in zip(axes, matrices.items(), strict=True):
        values = np.asarray(m, dtype=np.float64)
        if normalise_rows:
            with np.errstate(invalid="ignore", divide="ignore"):
                values = values / values.sum(1, keepdims=True)
        # the window's colours: its white-to-blue map, by the value's square root (a few % show)
        image = ax.imshow(values, cmap=mpl_colour_map(SEQUENTIAL, "bayescope_sequential"),
                          norm=PowerNorm(0.5, vmin=0, vmax=1))
        for i in range(k):
            for j in range(k):
                v = values[i, j]
                if np.isfinite(v) and v >= 0.005:
                    ax.text(j, i, f"{v:.2f}"[1:] if v < 1 else "1", ha="center", va="center",
                            fontsize=7 if k > 12 else 8, color="white" if v > 0.36 else "black")
        class_ticks(ax, range(k), class_names, fontsize=8)
        ax.set_yticks(range(k), class_names, fontsize=8)
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class")
        ax.set_title(wrapped(name, 40), fontsize=9)
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes), shrink=0.8, label=f"{scale} (colour: square root)",
                           ticks=list(SQRT_SCALE_TICKS))
        bar.ax.set_yticklabels([f"{v:g}" for v in SQRT_SCALE_TICKS])
    fig.suptitle(title, fontsize=10)
    return fig


def per_class_error_figure(errors: Mapping[str, np.ndarray], class_names: Sequence[str]) -> Figure:
    """Box plots of each class's error rate over chains; posteriors side by side per class."""
    n = len(errors)
    k = len(class_names)
    fig = _new_figure(min(14.0, max(6.0, 0.4 * k * (n + 1) + 1.5)), 3.8)
    ax = fig.subplots()
    width = 0.8 / n
    handles = []
    for i, ((name, err), colour) in enumerate(zip(errors.items(), _colours(n), strict=True)):
        err = np.atleast_2d(np.asarray(err, dtype=np.float64)) * 100
        positions = np.arange(k) + (i - (n - 1) / 2) * width
        data = [col[np.isfinite(col)] for col in err.T]
        box = ax.boxplot(data, positions=positions, widths=width * 0.85, patch_artist=True,
                         manage_ticks=False, showfliers=False, medianprops={"color": "black"})
        for patch in box["boxes"]:
            patch.set_facecolor(colour)
            patch.set_alpha(0.45)
        # every chain as a dot: with few chains (or one) the box alone says little
        offsets = np.linspace(-0.25, 0.25, err.shape[0]) * width if err.shape[0] > 1 else [0.0]
        for c, row in enumerate(err):
            ax.plot(positions + offsets[c], row, linestyle="none", marker="o", markersize=3.5,
                    color=colour, markeredgecolor="black", markeredgewidth=0.4)
        handles.append((box["boxes"][0], f"{name} ({err.shape[0]} chain{'s' * (err.shape[0] != 1)})"))
    class_ticks(ax, range(k), class_names)
    ax.set_xlabel("true class")
    ax.set_ylabel("error rate (%)")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    legend_above(fig, [h for h, _ in handles], [label for _, label in handles])
    ax.set_title("Per-class error over chains", fontsize=10)
    return fig


def rejection_figure(
    curves: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    oracle: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> Figure:
    """Accuracy on kept inputs against the referred fraction; one panel per score."""
    scores = list(next(iter(curves.values())))
    fig = _new_figure(3.6 * len(scores) + 0.4, 3.6)
    axes = fig.subplots(1, len(scores), squeeze=False, sharey=True)[0]
    colours = _colours(len(curves))
    lowest = 1.0
    for ax, score in zip(axes, scores, strict=True):
        for (name, by_score), colour in zip(curves.items(), colours, strict=True):
            rates, acc = by_score[score]
            ax.plot(rates * 100, acc * 100, color=colour, label=name)
            lowest = min(lowest, float(np.nanmin(acc)))
            if oracle and name in oracle:
                ax.plot(oracle[name][0] * 100, oracle[name][1] * 100, color=colour,
                        linestyle=":", linewidth=1)
        ax.set_title(f"referred by {SCORE_LABELS.get(score, score)}", fontsize=9)
        ax.set_xlabel("inputs referred (%)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy on kept inputs (%)")
    axes[0].set_ylim(max(0.0, lowest * 100 - 1), 100.2)
    legend_above(fig, *axes[0].get_legend_handles_labels(), title="dotted: the best possible (oracle)",
                 title_fontsize=7)
    return fig


def ood_histogram_figure(
    in_scores: Mapping[str, Mapping[str, np.ndarray]],
    ood_scores: Mapping[str, Mapping[str, np.ndarray]],
    aurocs: Mapping[str, Mapping[str, float]],
    num_classes: int,
    in_name: str = "in-distribution",
    ood_name: str = "OOD",
    scores: Sequence[str] | None = None,
    bins: int = 30,
) -> Figure:
    """Histograms of each score on the in-distribution and OOD sets: rows = posteriors.

    All panels of one score share their bins (:func:`core.analysis.metrics.score_edges`).
    """
    names = list(in_scores)
    scores = list(scores or next(iter(in_scores.values())))
    fig = _new_figure(2.7 * len(scores) + 0.3, 2.2 * len(names) + 0.5)
    axes = fig.subplots(len(names), len(scores), squeeze=False)
    shared = {
        score: score_edges(score, num_classes, [s[n][score] for s in (in_scores, ood_scores) for n in names], bins)
        for score in scores
    }
    for r, name in enumerate(names):
        for c, score in enumerate(scores):
            ax = axes[r, c]
            edges = shared[score]
            lo, hi = edges[0], edges[-1]
            for values, colour, label in (
                (in_scores[name][score], "tab:blue", in_name),
                (ood_scores[name][score], "tab:orange", ood_name),
            ):
                weights = np.full(len(values), 1.0 / max(len(values), 1))
                ax.hist(np.clip(values, lo, hi), bins=edges, weights=weights, color=colour,
                        alpha=0.55, label=label)
            ax.set_yscale("log")
            ax.set_ylim(1e-4, 1.5)
            ax.set_xlim(lo, hi)
            ax.tick_params(labelsize=7)
            auc = aurocs.get(name, {}).get(score)
            ax.set_title(f"AUROC {auc:.3f}" if auc is not None else "AUROC n/a (the same for every image)", fontsize=8)
            if r == len(names) - 1:
                ax.set_xlabel(SCORE_LABELS.get(score, score), fontsize=8)
            if c == 0:
                ax.set_ylabel(f"{name}\nfraction", fontsize=8)
    legend_above(fig, *axes[0, 0].get_legend_handles_labels())
    return fig


def rotation_figure(
    sweeps: Mapping[str, RotationSweep],
    class_names: Sequence[str],
    images: np.ndarray | None = None,
    min_probability: float = 0.1,
) -> Figure:
    """Gal & Ghahramani's rotated-image plot: per posterior, class probabilities (the mean p̄ of
    the draws, as the window draws it, and the credible band) and the three uncertainties against the angle; the rotated images on top.

    Only classes whose band's upper edge reaches ``min_probability`` somewhere are drawn.
    """
    names = list(sweeps)
    first = sweeps[names[0]]
    strip = images is not None and len(images) > 0
    rows = len(names) + (1 if strip else 0)
    heights = ([0.55] if strip else []) + [2.4] * len(names)
    fig = _new_figure(10.0, sum(heights) + 0.6)
    grid = fig.add_gridspec(rows, 2, height_ratios=heights, width_ratios=[1.25, 1])
    if strip:
        ax = fig.add_subplot(grid[0, :])
        ax.imshow(np.concatenate(list(images), axis=1), cmap="gray", vmin=0, vmax=1)
        side = images.shape[-1]
        ax.set_xticks(side * np.arange(len(images)) + side / 2,
                      [f"{a:g}°" if first.swept == "rotation" else f"{a:g}" for a in first.angles], fontsize=7)
        ax.set_yticks([])
    cmap = _colours(len(class_names))
    for r, name in enumerate(names):
        sweep = sweeps[name]
        row = r + (1 if strip else 0)
        ax_p = fig.add_subplot(grid[row, 0])
        for k, label in enumerate(class_names):
            if sweep.upper[:, k].max() < min_probability:
                continue
            ax_p.fill_between(sweep.angles, sweep.lower[:, k], sweep.upper[:, k], color=cmap[k], alpha=0.2)
            ax_p.plot(sweep.angles, sweep.mean[:, k], color=cmap[k], label=str(label))
        ax_p.set_ylim(-0.02, 1.02)
        ax_p.set_xlim(sweep.angles[0], sweep.angles[-1])
        ax_p.set_ylabel(f"{name}\np̄ (mean, {sweep_band_words(sweep)})", fontsize=8)
        ax_p.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="class",
                    title_fontsize=7, frameon=False)
        ax_p.grid(alpha=0.3)
        ax_u = fig.add_subplot(grid[row, 1])
        ax_u.plot(sweep.angles, sweep.total, color=mpl(UNCERTAINTY["total"]), linestyle="--", label="total")
        ax_u.plot(sweep.angles, sweep.aleatoric, color=mpl(UNCERTAINTY["aleatoric"]), label="aleatoric")
        ax_u.plot(sweep.angles, sweep.epistemic, color=mpl(UNCERTAINTY["epistemic"]), label="epistemic")
        ax_u.set_ylim(0, np.log(len(class_names)) * 1.02)
        ax_u.set_xlim(sweep.angles[0], sweep.angles[-1])
        ax_u.set_ylabel("nats", fontsize=8)
        ax_u.legend(fontsize=7)
        ax_u.grid(alpha=0.3)
        if r == len(names) - 1:  # a corruption sweep's axis names its severity or the patch's place
            axis = "rotation (degrees)" if sweep.swept == "rotation" else sweep.axis
            ax_p.set_xlabel(axis)
            ax_u.set_xlabel(axis)
    return fig


def drop_rate_figure(result: DropRateSensitivity) -> Figure:
    """Accuracy over chains for each drop rate (box per rate, mean joined by a line)."""
    fig = _new_figure(5.5, 3.6)
    ax = fig.subplots()
    positions = np.arange(len(result.rates))
    ax.boxplot([a * 100 for a in result.accuracies], positions=positions, widths=0.5,
               manage_ticks=False, medianprops={"color": "black"})
    ax.plot(positions, result.mean * 100, marker="o", color="tab:blue", label="mean over chains")
    ax.set_xticks(positions, [f"{r:g}" for r in result.rates])
    ax.set_xlabel("drop rate")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return fig
