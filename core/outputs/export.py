"""The one writer of figures and tables: PNG, SVG, CSV and JSON, atomically.

The GUI's "Export" and the command line both write through here, so a file saved from the
window is the file a script writes. The file-dialog filters and file-name slugs the window
offers live here too, beside the formats they name.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.engine.files import atomic_write, strict_json

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from core.analysis.evaluation_results import Table


def write_table(
    rows: Table, out_dir: str | os.PathLike, name: str, formats: Sequence[str] = ("csv", "json")
) -> list[Path]:
    """Write ``name.csv`` and ``name.json`` (``{"columns": [...], "data": [[...], ...]}``).

    ``formats`` picks which of the two to write (both by default).
    """
    out_dir = Path(out_dir)
    columns = list(rows[0]) if rows else []
    data = [[row.get(c) for c in columns] for row in rows]

    def write_csv(fh: Any) -> None:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        writer = csv.writer(text)
        writer.writerow(columns)
        writer.writerows([["" if v is None else v for v in r] for r in data])
        text.flush()
        text.detach()

    def write_json(fh: Any) -> None:
        fh.write(strict_json({"columns": columns, "data": data}).encode())

    writers = {"csv": write_csv, "json": write_json}
    return [atomic_write(out_dir / f"{name}.{fmt}", writers[fmt]) for fmt in formats]


FIGURE_FORMATS = ("png", "svg")

TABLE_FORMATS = ("csv", "json")


@contextlib.contextmanager
def writing_into(folder: str | os.PathLike, stand_in: str | os.PathLike | None = None) -> Iterator[None]:
    """Turn a failed write (disk full, permission denied) into an OSError saying where and why.

    An error that is already a sentence (core.engine.files' own, which carries no errno) keeps its
    words. ``stand_in`` is a temporary folder written in place of ``folder``: its name is
    replaced by ``folder`` in the message, since the person never chose it.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno is None and exc.strerror is None and str(exc):
            message, kind = str(exc), type(exc)
        else:
            reason = exc.strerror or str(exc) or "the system refused the write"
            message = f"could not write into the folder {folder}: {reason[0].lower()}{reason[1:]}"
            kind = OSError
        if stand_in is not None:
            message = message.replace(str(stand_in), str(folder))
        raise kind(message) from exc


def _format_of(path: Path) -> str:
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FIGURE_FORMATS + TABLE_FORMATS:
        raise ValueError(
            f"cannot export to {path.name!r}: the file name must end in .png or .svg (a figure, "
            "with its numbers beside it as .csv and .json) or in .csv or .json (the numbers only)"
        )
    return fmt


def save_figure_atomic(fig: Figure, path: str | os.PathLike) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) through a temporary file.

    SVG keeps its text as ``<text>`` elements (not glyph outlines), so it stays searchable
    and editable.
    """
    import matplotlib

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        return atomic_write(path, lambda fh: fig.savefig(fh, format=fmt))


def export_view(fig_maker: Any, rows: list[dict[str, Any]], path: str | os.PathLike) -> list[Path]:
    """The suffix rule shared by every export: figure + CSV + JSON, or one table format."""
    from core.outputs.export import write_table

    path = Path(path)
    fmt = _format_of(path)
    written: list[Path] = []
    with writing_into(path.parent):
        if fmt in FIGURE_FORMATS:
            written.append(save_figure_atomic(fig_maker(), path))
            written += write_table(rows, path.parent, path.stem)
        else:
            written += write_table(rows, path.parent, path.stem, formats=(fmt,))
    return written


#: The export formats a file dialog offers, by filter, with their extension.
PLOT_FILTERS = {
    "PNG image (*.png)": ".png",
    "SVG drawing (*.svg)": ".svg",
    "Numbers as CSV (*.csv)": ".csv",
    "Numbers as JSON (*.json)": ".json",
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "plot"


def with_suffix_from_filter(path: str, chosen_filter: str) -> Path:
    """Add the chosen format's extension unless the name already ends in a known one."""
    p = Path(path)
    known = set(PLOT_FILTERS.values())
    if p.suffix.lower() in known:
        return p
    return p.with_name(p.name + PLOT_FILTERS.get(chosen_filter, ".png"))
