"""The D-SGHMC MNIST reproduction's tables and figures: accuracy against the paper's p, per-class
errors over chains and the true-versus-predicted probability matrix (matplotlib, written as PNG)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from core.commands.reproduce.dhmc_chains import KEEP_PROBS, ChainScores


def write_table(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


#: The methods the per-method figures compare, in this order (those a run has).
COMPARED = ("SGLD", "SGHMC", "D-SGHMC p=0.5")


def _pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no window)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, title: str | None = None, *, tight_layout: bool = True, **options) -> None:
    """``fig`` titled, laid out and written to ``path`` as PNG (120 dpi), then closed."""
    if title is not None:
        fig.suptitle(title)
    if tight_layout:
        fig.tight_layout()
    fig.savefig(path, dpi=120, **options)
    _pyplot().close(fig)


def _method_panels(scores: dict[str, ChainScores], panel_width: float, height: float, **options):
    """A figure of one panel per method of :data:`COMPARED` in ``scores``, each titled with its
    name; returns the figure and its (axes, name) pairs."""
    names = [n for n in COMPARED if n in scores]
    fig, axes = _pyplot().subplots(1, len(names), figsize=(panel_width * len(names), height), **options)
    panels = list(zip(np.atleast_1d(axes), names, strict=True))
    for ax, name in panels:
        ax.set_title(name)
    return fig, panels


def plot_sensitivity(path: Path, results: dict[str, dict[str, ChainScores]]) -> None:
    fig, ax = _pyplot().subplots(figsize=(5.5, 3.8))
    colours = {"paper": "tab:red", "tuned": "tab:blue"}
    for protocol, scores in results.items():
        ps = [p for p in KEEP_PROBS if f"D-SGHMC p={p:g}" in scores]
        accs = [scores[f"D-SGHMC p={p:g}"].accuracy for p in ps]
        ax.errorbar(ps, [a.mean() for a in accs], yerr=[a.std(ddof=1) if len(a) > 1 else 0 for a in accs],
                    marker="o", capsize=3, color=colours.get(protocol), label=f"D-SGHMC ({protocol})")
        for name, style in (("SGHMC", "--"), ("SGLD", ":")):
            if name in scores:
                ax.axhline(scores[name].accuracy.mean(), ls=style, color=colours.get(protocol),
                           lw=1, label=f"{name} ({protocol})")
    ax.set_xlabel("paper's p (keep probability of input pixels)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("D-SGHMC on MNIST: sensitivity to p")
    ax.legend(fontsize=7, ncol=2)
    _save(fig, path)


def plot_class_errors(path: Path, scores: dict[str, ChainScores], title: str) -> None:
    fig, panels = _method_panels(scores, 4.2, 3.4, sharey=True)
    for ax, name in panels:
        ax.boxplot(scores[name].class_error, positions=range(10))
        ax.set_xlabel("class")
    panels[0][0].set_ylabel("test error per class over chains (%)")
    _save(fig, path, title)


def plot_probability_matrix(path: Path, scores: dict[str, ChainScores], title: str) -> None:
    fig, panels = _method_panels(scores, 4.0, 3.8)
    for ax, name in panels:
        im = ax.imshow(scores[name].probability_matrix, vmin=0, vmax=1, cmap="viridis")
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class")
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
    fig.colorbar(im, ax=[ax for ax, _ in panels], shrink=0.8, label="mean predicted probability")
    _save(fig, path, title, tight_layout=False, bbox_inches="tight")
