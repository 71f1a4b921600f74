"""The corruption evaluation's outputs: its table, its figure (accuracy and OOD AUROC against
severity, one line per posterior), its printed summary and its folder.

The folder is written as the evaluation report is (:func:`core.outputs.report.write_report`):
into a temporary folder that replaces ``--out`` in one rename, with an ``evaluation.json`` that
records what was read and how, so a later run may replace it and nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from core.analysis.corruption import (
    SHOWN_SCORES,
    CorruptionEvaluation,
    corruption_table,
    severity_lines,
)
from core.analysis.metrics import RotationSweep
from core.engine.data.corruptions import CORRUPTIONS
from core.engine.files import NotSavedError, atomic_write, replacing_folder, strict_json
from core.outputs.export import save_figure_atomic, slug, write_table
from core.outputs.figures import legend_above
from core.outputs.input_figures import sweep_figure, sweep_table
from core.outputs.report import REPORT_FORMAT, check_report_folder, is_report_folder

__all__ = ["SHOWN_SCORES", "corruption_figure", "corruption_lines", "write_corruption"]


def corruption_figure(result: CorruptionEvaluation) -> Figure:
    """Accuracy, and OOD AUROC by total and epistemic uncertainty, against severity per posterior."""
    corruption = CORRUPTIONS[result.corruption]
    panels = [("accuracy", "accuracy")]
    if result.ood_dataset:
        panels += [(f"auroc_{score}", f"OOD AUROC\nby {words}") for score, words in SHOWN_SCORES]
    fig = Figure(figsize=(4.2 * len(panels), 3.6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    for i, (key, label) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for name, values in severity_lines(result, key).items():
            ax.plot(result.severities, [np.nan if v is None else v for v in values], marker="o", label=name)
        ax.set_xlabel(f"severity ({corruption.scale})", fontsize=8)
        ax.set_ylabel(label, fontsize=9)
        ax.set_ylim(0, 1.02)
        if key.startswith("auroc"):
            ax.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")  # chance
        ax.grid(alpha=0.3)
        if i == 0:
            legend_above(fig, *ax.get_legend_handles_labels(), below=True, fontsize=7)  # the title is on top
    what = f"{result.dataset} ({result.images:,} images)"
    if result.ood_dataset:
        what += f", OOD {result.ood_dataset} ({result.ood_images:,} images)"
    fig.suptitle(f"{corruption.label} at severities {', '.join(f'{s:g}' for s in result.severities)}: {what}",
                 fontsize=10)
    return fig


def corruption_lines(result: CorruptionEvaluation) -> list[str]:
    """The printed summary: accuracy (%) and OOD AUROC against severity, one line per posterior."""
    accuracy = severity_lines(result, "accuracy")
    names = list(accuracy)
    width = max(len("posterior"), *(len(n) for n in names))
    head = f"{'severity':{width}s} " + " ".join(f"{s:>7g}" for s in result.severities)
    corruption = CORRUPTIONS[result.corruption]
    lines = [f"{corruption.label} ({corruption.scale}) on {result.dataset}, {result.images:,} images"
             + (f"; OOD {result.ood_dataset}, {result.ood_images:,} images, corrupted alike" if result.ood_dataset
                else ""),
             "accuracy %", head]
    lines += [f"{n:{width}s} " + " ".join("    n/a" if v is None else f"{100 * v:7.2f}" for v in values)
              for n, values in accuracy.items()]
    if result.ood_dataset:
        for score, words in SHOWN_SCORES:
            lines += [f"OOD AUROC by {words}", head]
            for n, values in severity_lines(result, f"auroc_{score}").items():
                lines.append(f"{n:{width}s} " + " ".join("    n/a" if v is None else f"{v:7.4f}" for v in values))
    return lines


def write_corruption(
    result: CorruptionEvaluation,
    out_dir: str | os.PathLike,
    figure_format: str = "png",
    meta: Mapping[str, Any] | None = None,
    sweeps: Mapping[str, RotationSweep] | None = None,
    class_names: Sequence[str] = (),
) -> list[Path]:
    """Write ``corruption.csv``/``.json``, its figure, each image sweep (figure and table) and
    ``evaluation.json`` into ``out_dir`` (new, empty, or an earlier report); return the paths."""
    final = check_report_folder(out_dir)
    written: list[str] = []
    try:
        with replacing_folder(final, is_report_folder, "the evaluation report") as tmp:
            written += [p.name for p in write_table(corruption_table(result), tmp, "corruption")]
            written.append(save_figure_atomic(corruption_figure(result), tmp / f"corruption.{figure_format}").name)
            for name, sweep in (sweeps or {}).items():
                stem = f"{slug(name)}-{slug(sweep.swept)}-sweep"
                written += [p.name for p in write_table(sweep_table(sweep, class_names), tmp, stem)]
                fig = sweep_figure(name, sweep, class_names)
                written.append(save_figure_atomic(fig, tmp / f"{stem}.{figure_format}").name)
            record = {"format": REPORT_FORMAT, "corruption": result.corruption,
                      "severities": list(result.severities), "dataset": result.dataset,
                      "ood_dataset": result.ood_dataset, **(meta or {})}
            atomic_write(tmp / "evaluation.json", lambda fh: fh.write(strict_json(record, indent=2).encode()))
            written.append("evaluation.json")
    except NotSavedError:
        raise
    except OSError as exc:
        reason = exc.strerror or "the system refused the write"
        raise NotSavedError(f"could not write the corruption evaluation into {final}: "
                            f"{reason[0].lower()}{reason[1:]}; nothing was changed there") from None
    return [final / name for name in written]
