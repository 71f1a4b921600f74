"""Several posteriors judged on one input, side by side: ``bayescope-cli compare`` and the
GUI's "Export comparison".

:func:`compare` predicts the input once per posterior exactly as ``bayescope-cli predict``
does (same preprocessing, a generator seeded with ``seed`` per posterior), so each column's
numbers equal ``predict --json`` run with the same ``--samples``, ``--seed`` and ``--level``.
:func:`comparison_table` is every number shown (one row per posterior and class);
:func:`write_comparison` writes one self-describing folder: the input, every per-input view
of every column as figures with their numbers (:mod:`core.input_figures`), the whole table,
each posterior's provenance and a self-contained ``index.html`` report.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.data.preprocess import image_to_input
from core.inference.base import Posterior
from core.input_figures import (
    FIGURE_FORMATS,
    INPUT_VIEWS,
    input_view_figure,
    input_view_table,
    save_figure_atomic,
    writing_into,
)
from core.io import atomic_write, replacing_folder
from core.io import check_output_folder as io_check_output_folder
from core.naming import METHOD_DESCRIPTIONS, method_label, plural, posterior_title, samples_used
from core.predictive import Prediction, predict_image
from core.uncertainty import UNCERTAIN_THRESHOLD

#: File that marks a folder as a comparison export, so a later export may replace it.
MARKER = ".bayescope-comparison"

#: The input is shown this many times its 28×28 size (nearest neighbour: pixels stay pixels).
INPUT_SCALE = 10

#: In provenance, lists of more values than this (per-step training traces) are left out.
MAX_LIST = 32


@dataclass(frozen=True)
class ComparisonColumn:
    """One posterior's judgement of the input.

    ``title`` is the header a person reads ("SGHMC, LeNet, 8 draws"); ``source`` is the
    posterior file's path as text, for provenance only.
    """

    title: str
    posterior: Posterior
    prediction: Prediction
    source: str | None = None


@dataclass(frozen=True)
class Comparison:
    """Every column's prediction for one input (``image``: the 28×28 model input in [0, 1]).

    ``num_samples`` and ``seed`` record what was asked for (a sampled posterior may hold
    fewer draws than asked; each column's summary says how many it used).
    """

    image: np.ndarray
    columns: tuple[ComparisonColumn, ...]
    level: float
    class_names: tuple[str, ...]
    num_samples: int | None = None
    seed: int | None = None


def _model_input(image: np.ndarray | torch.Tensor) -> np.ndarray:
    """A 28×28 float32 model input from a 28×28 input, a (1, 1, 28, 28) tensor or a raw drawing."""
    array = np.asarray(image.detach().cpu() if isinstance(image, torch.Tensor) else image, np.float32)
    if array.ndim > 2:
        if any(d != 1 for d in array.shape[:-2]):
            raise ValueError(f"expected one grey image, got an array of shape {array.shape}")
        array = array.reshape(array.shape[-2:])
    return image_to_input(array)[0, 0].numpy()


def default_class_names(posterior: Posterior) -> tuple[str, ...]:
    """The class names of the data set the posterior was trained on, else "0", "1", ..."""
    from core.data.datasets import KNOWN

    info = KNOWN.get(posterior.dataset.split("-")[0])
    if info is not None and len(info.class_names) == posterior.num_classes:
        return info.class_names
    return tuple(str(k) for k in range(posterior.num_classes))


def _identity(posterior: Posterior, source: str | None) -> tuple[str, Any]:
    if source:
        return ("file", Path(source).expanduser().resolve())
    return ("object", id(posterior))


def compare(
    posteriors: Sequence[tuple[Posterior, str | None]],
    image: np.ndarray,
    num_samples: int = 100,
    level: float = 0.9,
    seed: int | None = 0,
    class_names: Sequence[str] | None = None,
) -> Comparison:
    """Predict ``image`` with every posterior; one column each, in the order given.

    Parameters
    ----------
    posteriors
        ``(posterior, source)`` pairs; ``source`` is its file path (or None). A file given
        twice, or the same object twice, gives one column.
    image
        A 28×28 model input in [0, 1], or a raw drawing (light ink on dark) that is
        preprocessed as MNIST was.
    num_samples, level, seed
        As ``bayescope-cli predict --samples --level --seed``. ``seed=None`` lets each
        posterior use its own randomness (the GUI's stroke-by-stroke mode).

    Raises
    ------
    ValueError
        With no posterior, posteriors that disagree on the classes or the image size, class
        names that do not fit, or settings out of range.
    """
    if num_samples < 1:
        raise ValueError("the number of samples must be at least 1")
    if not 0 < level < 1:
        raise ValueError("the credible level must lie strictly between 0 and 1 (e.g. 0.9)")
    unique: dict[tuple[str, Any], tuple[Posterior, str | None]] = {}
    for posterior, source in posteriors:
        unique.setdefault(_identity(posterior, source), (posterior, None if source is None else str(source)))
    if not unique:
        raise ValueError("no posterior to compare: give at least one")
    chosen = list(unique.values())
    shapes = {(p.num_classes, p.arch.image_size) for p, _ in chosen}
    if len(shapes) > 1:
        listing = "; ".join(
            f"{posterior_title(p, samples_used(p, num_samples))}: {p.num_classes} classes, "
            f"{p.arch.image_size}×{p.arch.image_size} images"
            for p, _ in chosen
        )
        raise ValueError(f"these posteriors cannot judge the same input: {listing}")
    names = tuple(str(c) for c in class_names) if class_names is not None else default_class_names(chosen[0][0])
    if len(names) != chosen[0][0].num_classes:
        raise ValueError(f"{len(names)} class names given for {chosen[0][0].num_classes} classes")
    x = _model_input(image)
    columns: list[ComparisonColumn] = []
    seen: dict[str, int] = {}
    for posterior, source in chosen:
        prediction = predict_image(posterior, x, num_samples, seed=seed, level=level)
        title = posterior_title(posterior, samples_used(posterior, num_samples))
        # Two different files of the same method and model would share a header.
        seen[title] = seen.get(title, 0) + 1
        if seen[title] > 1:
            title = f"{title} ({seen[title]})"
        columns.append(ComparisonColumn(title, posterior, prediction, source))
    return Comparison(x, tuple(columns), level, names, num_samples, seed)


# ----------------------------------------------------------------------------- tables


def comparison_table(comparison: Comparison) -> list[dict[str, Any]]:
    """Every number shown: one row per posterior and class.

    Per class: mean, credible ``lower``/``upper``, and the variance split (total =
    aleatoric + epistemic); per posterior, repeated on its rows: the entropy split in nats,
    the top-two overlap (Bhattacharyya coefficient), the "uncertain" flag, the number of
    draws and the credible level.
    """
    rows = []
    for column in comparison.columns:
        s = column.prediction.summary
        for k, name in enumerate(comparison.class_names):
            rows.append({
                "posterior": column.title,
                "method": method_label(column.posterior.method),
                "source": column.source,
                "class": name,
                "predicted": k == s.predicted_class,
                "mean": float(s.mean[k]),
                "lower": float(s.lower[k]),
                "upper": float(s.upper[k]),
                "total_variance": float(s.total_variance[k]),
                "aleatoric_variance": float(s.aleatoric_variance[k]),
                "epistemic_variance": float(s.epistemic_variance[k]),
                "total_entropy": float(s.total),
                "aleatoric_entropy": float(s.aleatoric),
                "epistemic_entropy": float(s.epistemic),
                "overlap": float(s.overlap),
                "uncertain": bool(s.uncertain),
                "num_samples": int(s.num_samples),
                "level": float(comparison.level),
            })
    return rows


def _count(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_count(v) for v in value)
    return 1


def _compact(value: Any) -> Any:
    """JSON-friendly copy with long (nested) lists, such as training traces, replaced by a note."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): _compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        n = _count(value)
        return f"{n} values (left out)" if n > MAX_LIST else [_compact(v) for v in value]
    if isinstance(value, (np.generic,)):
        return value.item()
    return value


def provenance(posterior: Posterior, source: str | None) -> dict[str, Any]:
    """Where a posterior comes from: method (name and in words), settings, architecture,
    training data set, seed, training info (long traces left out) and its file."""
    return {
        "method": posterior.method,
        "method_label": method_label(posterior.method),
        "method_in_words": METHOD_DESCRIPTIONS.get(posterior.method, posterior.method),
        "config": _compact(posterior.config),
        "arch": posterior.arch.to_dict(),
        "dataset": posterior.dataset,
        "seed": posterior.seed,
        "info": _compact(posterior.info),
        "source": source,
    }


# ----------------------------------------------------------------------------- writing


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
    """The input as a PNG: a grey [0, 1] image enlarged, or a uint8 RGB face crop as it is."""
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
    """Write the comparison into the folder ``out_dir``; return the paths written.

    The folder holds ``input.png`` (the model input, enlarged), per column every view of
    :data:`core.input_figures.INPUT_VIEWS` in each of ``figure_formats`` with its numbers
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
    from core.evaluate import write_table

    formats = tuple(dict.fromkeys(f.lower().lstrip(".") for f in figure_formats))
    unknown = [f for f in formats if f not in FIGURE_FORMATS]
    if unknown or not formats:
        raise ValueError(f"figure formats must be among {', '.join(FIGURE_FORMATS)}; got {', '.join(unknown)}")
    out = Path(out_dir).expanduser().absolute()
    names = list(comparison.class_names)
    written: list[Path] = []
    with replacing_folder(out, _is_comparison_export, "the comparison") as tmp, writing_into(out, stand_in=tmp):
        _write_bytes(tmp / MARKER, json.dumps({"format": "bayescope-comparison", "version": 1}).encode())
        input_png = _input_png(comparison.image)
        written.append(_write_bytes(tmp / "input.png", input_png))
        embedded: list[list[tuple[str, bytes]]] = []
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
            embedded.append(pictures)
        table = comparison_table(comparison)
        written += write_table(table, tmp, "numbers")
        origins = provenance_record(comparison)
        written.append(_write_bytes(tmp / "provenance.json",
                                    json.dumps(origins, indent=2, default=str).encode()))
        page = _report_html(comparison, input_png, embedded, table, origins)
        written.append(_write_bytes(tmp / "index.html", page.encode("utf-8")))
    return [out / p.relative_to(tmp) for p in written]


def provenance_record(comparison: Comparison) -> dict[str, Any]:
    """``provenance.json``: the settings of the comparison and every column's provenance."""
    return {
        "settings": {"num_samples": comparison.num_samples, "seed": comparison.seed,
                     "level": comparison.level, "class_names": list(comparison.class_names)},
        "columns": [
            {"title": c.title, "num_samples_used": c.prediction.summary.num_samples,
             **provenance(c.posterior, c.source)}
            for c in comparison.columns
        ],
    }


# ----------------------------------------------------------------------------- report page

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 75em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; } h3 { font-size: 1.05em; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figure img { max-width: 36em; border: 1px solid #ddd; }
img.input { image-rendering: pixelated; width: 168px; height: 168px; border: 1px solid #999; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f3f3f3; } td.text { text-align: left; }
tr.predicted td { font-weight: bold; }
.flag { color: #a33; font-weight: bold; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
"""


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
        return "<td></td>"
    return f'<td class="text">{html.escape(str(value))}</td>'


def _headline(column: ComparisonColumn, names: Sequence[str]) -> str:
    s = column.prediction.summary
    first, second = s.top_two
    text = (f"Predicted class <b>{html.escape(names[first])}</b> with mean probability "
            f"{float(s.mean[first]):.3f}; next {html.escape(names[second])} at {float(s.mean[second]):.3f}. "
            f"Uncertainty {s.total:.3f} nats = aleatoric {s.aleatoric:.3f} + epistemic {s.epistemic:.3f}.")
    if s.uncertain:
        text += (f' <span class="flag">Uncertain input:</span> the draws of the top two classes overlap '
                 f"(Bhattacharyya coefficient {s.overlap:.2f} &gt; {UNCERTAIN_THRESHOLD:g}).")
    return f"<p>{text}</p>"


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
        "<figure>" + _img(input_png, "the input as the models see it", "input")
        + "<figcaption>The input as the models see it (28 × 28 pixels)</figcaption></figure>",
        "<h2>At a glance</h2>",
        "<table><tr><th>posterior</th><th>predicted class</th><th>mean probability</th>"
        "<th>total (nats)</th><th>aleatoric</th><th>epistemic</th><th>top-two overlap</th>"
        "<th>uncertain</th></tr>",
    ]
    for column in comparison.columns:
        s = column.prediction.summary
        k = s.predicted_class
        parts.append("<tr>" + "".join([
            _cell(column.title), _cell(names[k]), _cell(float(s.mean[k])), _cell(s.total),
            _cell(s.aleatoric), _cell(s.epistemic), _cell(s.overlap), _cell(s.uncertain),
        ]) + "</tr>")
    parts.append("</table>")
    for i, (column, figures) in enumerate(zip(comparison.columns, pictures, strict=True), start=1):
        parts.append(f'<section id="posterior-{i}"><h2>{html.escape(column.title)}</h2>')
        parts.append(f"<p>{html.escape(METHOD_DESCRIPTIONS.get(column.posterior.method, ''))}</p>")
        parts.append(_headline(column, names))
        for view, png in figures:
            parts.append("<figure>" + _img(png, f"{INPUT_VIEWS[view]}, {column.title}")
                         + f"<figcaption>{html.escape(INPUT_VIEWS[view])}</figcaption></figure>")
        parts.append("</section>")
    parts.append("<h2>Numbers</h2>")
    if table:
        columns = list(table[0])
        parts.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in columns) + "</tr>")
        for row in table:
            css = ' class="predicted"' if row.get("predicted") else ""
            parts.append(f"<tr{css}>" + "".join(_cell(row[c]) for c in columns) + "</tr>")
        parts.append("</table>")
    parts.append("<h2>Provenance</h2>")
    for record in origins["columns"]:
        parts.append(f"<h3>{html.escape(record['title'])}</h3>")
        parts.append(f"<pre>{html.escape(json.dumps(record, indent=2, default=str))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


# ----------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bayescope-cli compare``."""
    parser.add_argument("image", help="PNG/JPEG of a digit, or SET:INDEX of a test image (e.g. mnist-test:0)")
    parser.add_argument("--posterior", nargs="+", metavar="P",
                        help="posterior file(s), one column each (default: the bundled MC-dropout LeNet)")
    parser.add_argument("--samples", type=int, default=100, help="posterior samples S per column")
    parser.add_argument("--level", type=float, default=0.9, help="credible interval level")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", help="folder holding the data set named in SET:INDEX")
    parser.add_argument("--format", nargs="+", default=["png", "svg"], choices=FIGURE_FORMATS,
                        help="figure formats (default: png svg)")
    parser.add_argument("--out", required=True, help="output folder (a previous comparison there is replaced)")


def run(args: argparse.Namespace) -> int:
    """Carry out ``bayescope-cli compare``: print one line per column; return the exit code."""
    from core.evaluate import resolve_image
    from core.io import load_posterior
    from core.resources import default_posterior_path

    if args.samples < 1:
        raise ValueError("--samples must be at least 1")
    if not 0 < args.level < 1:
        raise ValueError("--level must lie strictly between 0 and 1 (e.g. 0.9)")
    check_output_folder(args.out)  # before any work: a refused folder should fail fast
    paths = args.posterior or [str(default_posterior_path())]
    loaded = [(load_posterior(path), str(path)) for path in paths]
    _, image = resolve_image(args.image, args.data_dir)
    comparison = compare(loaded, image, num_samples=args.samples, level=args.level, seed=args.seed)
    written = write_comparison(comparison, args.out, args.format)
    width = max(len(c.title) for c in comparison.columns)
    for column in comparison.columns:
        s = column.prediction.summary
        k = s.predicted_class
        flag = "  uncertain (top two overlap)" if s.uncertain else ""
        print(f"{column.title:{width}s}  class {comparison.class_names[k]}  mean {float(s.mean[k]):.3f}{flag}")
    print(f"wrote {len(written)} files to {args.out} (open index.html)")
    return 0
