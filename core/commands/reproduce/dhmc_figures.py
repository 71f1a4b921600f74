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


def plot_sensitivity(path: Path, results: dict[str, dict[str, ChainScores]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_class_errors(path: Path, scores: dict[str, ChainScores], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("SGLD", "SGHMC", "D-SGHMC p=0.5") if n in scores]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, names, strict=True):
        ax.boxplot(scores[name].class_error, positions=range(10))
        ax.set_title(name)
        ax.set_xlabel("class")
    axes[0].set_ylabel("test error per class over chains (%)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_probability_matrix(path: Path, scores: dict[str, ChainScores], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("SGLD", "SGHMC", "D-SGHMC p=0.5") if n in scores]
    fig, axes = plt.subplots(1, len(names), figsize=(4.0 * len(names), 3.8))
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, names, strict=True):
        im = ax.imshow(scores[name].probability_matrix, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(name)
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class")
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="mean predicted probability")
    fig.suptitle(title)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
