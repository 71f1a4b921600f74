"""A comparison written as one self-describing folder (``bayescope-cli compare``, the GUI's
"Export comparison").

:func:`write_comparison` writes the input, every per-input view of every column as figures
with their numbers (:mod:`core.outputs.input_figures`), the whole table, each posterior's
provenance and a self-contained ``index.html`` report.
"""

from __future__ import annotations

import base64
import html
import io
import os
import re
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.analysis.comparison import (
    Comparison,
    ComparisonColumn,
    comparison_table,
    provenance_record,
)
from core.analysis.uncertainty import UNCERTAIN_THRESHOLD, interval_note
from core.engine.files import atomic_write, replacing_folder, strict_json
from core.engine.files import check_output_folder as io_check_output_folder
from core.engine.inference.base import ProgressRecord
from core.engine.naming import (
    METHOD_DESCRIPTIONS,
    convergence_advice,
    convergence_warning,
    plural,
)
from core.outputs.export import FIGURE_FORMATS, save_figure_atomic, writing_into
from core.outputs.input_figures import INPUT_VIEWS, input_view_figure, input_view_table

#: File that marks a folder as a comparison export, so a later export may replace it.
MARKER = ".bayescope-comparison"

#: The input is shown this many times its 28×28 size (nearest neighbour: pixels stay pixels).
INPUT_SCALE = 10


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "posterior"


def _unique_slugs(titles: Sequence[str]) -> list[str]:
    out: list[str] = []
    for title in titles:
        base = slug = _slug(title)
        i = 2
        while slug in out:
            slug, i = f"{base}-{i}", i + 1
        out.append(slug)
    return out


def _input_png(image: np.ndarray) -> bytes:
    """The input as a PNG: a grey [0, 1] digit, or a uint8 face crop or photo (grey or RGB); one
    smaller than 64 pixels is enlarged, pixels kept as pixels."""
    from PIL import Image

    if image.dtype == np.uint8:
        pixels = image
    else:
        pixels = (np.clip(image, 0, 1) * 255).round().astype(np.uint8)
    scale = INPUT_SCALE if pixels.shape[0] < 64 else 1
    big = Image.fromarray(pixels).resize((pixels.shape[1] * scale, pixels.shape[0] * scale), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    big.save(buffer, format="PNG")
    return buffer.getvalue()


def _png_bytes(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _write_bytes(path: Path, data: bytes) -> Path:
    return atomic_write(path, lambda fh: fh.write(data))


def _is_comparison_export(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def check_output_folder(out: str | os.PathLike) -> Path:
    """Refuse, before any work, a file or a non-empty folder that is not a comparison export."""
    return io_check_output_folder(out, _is_comparison_export, "the comparison")


def write_comparison(
    comparison: Comparison,
    out_dir: str | os.PathLike,
    figure_formats: Sequence[str] = ("png", "svg"),
) -> list[Path]:
    """Write the comparison into the folder ``out_dir``; return the paths written
    (:func:`comparison_progress` run to its end)."""
    from core.engine.runner import drain

    return drain(comparison_progress(comparison, out_dir, figure_formats))


def comparison_progress(
    comparison: Comparison,
    out_dir: str | os.PathLike,
    figure_formats: Sequence[str] = ("png", "svg"),
) -> Generator[ProgressRecord, None, list[Path]]:
    """Write the comparison into the folder ``out_dir``, yielding a record after each view's
    figure (``step`` of ``total``); returns the paths written. Closing the generator (the
    window's Cancel) stops between figures and leaves no folder and no half-written file.

    The folder holds ``input.png`` (the model input, enlarged), per column every view of
    :data:`core.outputs.input_figures.INPUT_VIEWS` in each of ``figure_formats`` with its numbers
    (``<title-slug>-<view>.csv``/``.json``), ``numbers.csv``/``.json``
    (:func:`comparison_table`), ``provenance.json`` and ``index.html``, a report that opens
    in a browser with no other file. Everything is written into a temporary sibling folder
    that is then renamed into place, so a failure leaves no half-written export.

    Raises
    ------
    ValueError
        When a figure format is not PNG or SVG.
    OSError
        When ``out_dir`` is a file, or a non-empty folder that is not a previous comparison
        export (which is replaced), or a write fails; the message names the folder and why.
    """
    from core.outputs.export import write_table

    formats = tuple(dict.fromkeys(f.lower().lstrip(".") for f in figure_formats))
    unknown = [f for f in formats if f not in FIGURE_FORMATS]
    if unknown or not formats:
        raise ValueError(f"figure formats must be among {', '.join(FIGURE_FORMATS)}; got {', '.join(unknown)}")
    out = Path(out_dir).expanduser().absolute()
    names = list(comparison.class_names)
    written: list[Path] = []
    with replacing_folder(out, _is_comparison_export, "the comparison") as tmp, writing_into(out, stand_in=tmp):
        _write_bytes(tmp / MARKER, strict_json({"format": "bayescope-comparison", "version": 1}).encode())
        input_png = _input_png(comparison.image)
        written.append(_write_bytes(tmp / "input.png", input_png))
        embedded: list[list[tuple[str, bytes]]] = []
        total, done = len(comparison.columns) * len(INPUT_VIEWS), 0  # the figures
        yield ProgressRecord(0, total, phase="figures")
        for column, slug in zip(comparison.columns, _unique_slugs([c.title for c in comparison.columns]),
                                strict=True):
            summary, samples = column.prediction.summary, column.prediction.samples
            pictures = []
            for view in INPUT_VIEWS:
                stem = f"{slug}-{view}"
                fig = input_view_figure(view, column.title, summary, names, samples=samples,
                                        level=comparison.level)
                for fmt in formats:
                    written.append(save_figure_atomic(fig, tmp / f"{stem}.{fmt}"))
                png = (tmp / f"{stem}.png").read_bytes() if "png" in formats else _png_bytes(fig)
                pictures.append((view, png))
                rows = input_view_table(view, summary, names, samples=samples, level=comparison.level)
                written += write_table(rows, tmp, stem)
                done += 1
                yield ProgressRecord(done, total, phase="figures")
            embedded.append(pictures)
        table = comparison_table(comparison)
        written += write_table(table, tmp, "numbers")
        origins = provenance_record(comparison)
        written.append(_write_bytes(tmp / "provenance.json",
                                    strict_json(origins, indent=2).encode()))
        page = _report_html(comparison, input_png, embedded, table, origins)
        written.append(_write_bytes(tmp / "index.html", page.encode("utf-8")))
        yield ProgressRecord(total, total, phase="page")
    return [out / p.relative_to(tmp) for p in written]


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 75em; padding: 0 1em; color: #222; }
.scroll { max-width: 100%; overflow-x: auto; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; } h3 { font-size: 1.05em; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figure img { max-width: min(36em, 100%); height: auto; border: 1px solid #ddd; }
img.input { image-rendering: pixelated; width: 168px; height: 168px; border: 1px solid #999; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f3f3f3; } td.text { text-align: left; }
tr.predicted td { font-weight: bold; }
.flag { color: #a33; font-weight: bold; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.8em; white-space: pre-wrap;
      overflow-wrap: anywhere; }
tr.posterior th { text-align: left; background: #e8eef7; }
"""


#: The numbers table's columns on the page, and their headings (the rest are in numbers.csv).
PAGE_NUMBERS: dict[str, str] = {
    "class": "class", "mean": "mean", "lower": "lower", "upper": "upper",
    "total_variance": "total variance", "aleatoric_variance": "aleatoric", "epistemic_variance": "epistemic",
}


def _img(png: bytes, alt: str, css_class: str | None = None) -> str:
    data = base64.b64encode(png).decode("ascii")
    cls = f' class="{css_class}"' if css_class else ""
    return f'<img{cls} src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, float):
        return f"<td>{value:.4g}</td>"
    if isinstance(value, int):
        return f"<td>{value}</td>"
    if value is None:
        return "<td>n/a</td>"
    return f'<td class="text">{html.escape(str(value))}</td>'


def _headline(column: ComparisonColumn, names: Sequence[str]) -> str:
    s = column.prediction.summary
    first, second = s.top_two
    text = (f"Predicted class <b>{html.escape(names[first])}</b> with mean probability "
            f"{float(s.mean[first]):.3f}; next {html.escape(names[second])} at {float(s.mean[second]):.3f}. "
            f"Uncertainty {s.total:.3f} nats = aleatoric {s.aleatoric:.3f} + "
            + (f"epistemic {s.epistemic:.3f}." if s.epistemic_defined else "epistemic n/a (one draw)."))
    if s.num_samples > 1 and s.expected_coverage < s.level:
        text += " " + html.escape(interval_note(s.num_samples, s.level))
    if s.uncertain:
        text += (f' <span class="flag">Uncertain input:</span> the draws of the top two classes overlap '
                 f"(Bhattacharyya coefficient {s.overlap:.2f} &gt; {UNCERTAIN_THRESHOLD:g}).")
    return f"<p>{text}</p>"


def _input_caption(comparison: Comparison) -> str:
    """What ``input.png`` shows, in words: its size as the models read it, or a face's crop."""
    arch = comparison.columns[0].posterior.arch
    if arch.input_dim:
        return f"The face the models judge, as found in the photo (they read {arch.input_dim} numbers that describe it)"
    side = comparison.image.shape
    words = f"The input as the models see it ({side[0]} × {side[1]} pixels{', colour' if len(side) == 3 else ''})"
    if len({(c.posterior.arch.image_size, c.posterior.arch.channels) for c in comparison.columns}) > 1:
        words += f"; as {comparison.columns[0].title} reads it: each posterior reads the photo at its own size"
    return words


def _report_html(
    comparison: Comparison,
    input_png: bytes,
    pictures: list[list[tuple[str, bytes]]],
    table: list[dict[str, Any]],
    origins: dict[str, Any],
) -> str:
    names = list(comparison.class_names)
    n = len(comparison.columns)
    asked = comparison.num_samples
    settings = [f"{comparison.level * 100:g}% credible intervals"]
    if asked is not None:
        settings.insert(0, f"up to {plural(asked, 'draw')} per posterior")
    if comparison.seed is not None:
        settings.append(f"seed {comparison.seed}")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>bayescope: {plural(n, 'posterior')} on one input</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{plural(n, 'posterior')} judging one input</h1>",
        f"<p>{html.escape('; '.join(settings))}.</p>",
        f"<p>Input: <b>{html.escape(comparison.input_label)}</b></p>" if comparison.input_label else "",
        "<figure>" + _img(input_png, "the input as the models see it", "input")
        + f"<figcaption>{html.escape(_input_caption(comparison))}</figcaption></figure>",
        "<h2>At a glance</h2>",
        '<div class="scroll"><table><tr><th>posterior</th><th>predicted class</th><th>mean probability</th>'
        "<th>total (nats)</th><th>aleatoric</th><th>epistemic</th><th>top-two overlap</th>"
        "<th>uncertain</th></tr>",
    ]
    for column in comparison.columns:
        s = column.prediction.summary
        k = s.predicted_class
        parts.append("<tr>" + "".join([
            _cell(column.title), _cell(names[k]), _cell(float(s.mean[k])), _cell(s.total),
            _cell(s.aleatoric), _cell(s.uncertainty_record()["epistemic"]), _cell(s.overlap), _cell(s.uncertain),
        ]) + "</tr>")
    parts.append("</table></div>")
    for i, (column, figures) in enumerate(zip(comparison.columns, pictures, strict=True), start=1):
        parts.append(f'<section id="posterior-{i}"><h2>{html.escape(column.title)}</h2>')
        parts.append(f"<p>{html.escape(METHOD_DESCRIPTIONS.get(column.posterior.method, ''))}</p>")
        parts.append(_headline(column, names))
        warning = convergence_warning(column.posterior.info)
        if warning:  # as the window's red line: what it records, then what that means and what to do
            advice = convergence_advice(column.posterior.info)
            parts.append(f'<p class="flag"><b>{html.escape(warning)}</b> {html.escape(advice or "")}</p>')
        for view, png in figures:
            parts.append("<figure>" + _img(png, f"{INPUT_VIEWS[view]}, {column.title}")
                         + f"<figcaption>{html.escape(INPUT_VIEWS[view])}</figcaption></figure>")
        parts.append("</section>")
    parts.append("<h2>Numbers</h2>")
    if table:
        # per class, grouped by posterior: what is the same on every row of a posterior (its file,
        # its entropy split, its flags) is in "At a glance" and numbers.csv, not repeated here
        columns = [c for c in table[0] if c in PAGE_NUMBERS]
        parts.append("<p>Per class; every number of every posterior (and its file) is in numbers.csv and "
                     "numbers.json beside this page.</p>")
        parts.append('<div class="scroll"><table><tr>' + "".join(f"<th>{html.escape(PAGE_NUMBERS[c])}</th>"
                                                                   for c in columns) + "</tr>")
        current = None
        for row in table:
            if row.get("posterior") != current:
                current = row.get("posterior")
                parts.append(f'<tr class="posterior"><th colspan="{len(columns)}">{html.escape(str(current))}</th></tr>')
            css = ' class="predicted"' if row.get("predicted") else ""
            parts.append(f"<tr{css}>" + "".join(_cell(row[c]) for c in columns) + "</tr>")
        parts.append("</table></div>")
    parts.append("<h2>Provenance</h2>")
    for record in origins["columns"]:
        parts.append(f"<h3>{html.escape(record['title'])}</h3>")
        parts.append(f"<pre>{html.escape(strict_json(record, indent=2))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)
