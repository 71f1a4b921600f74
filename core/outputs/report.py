"""Reports of a data-set evaluation: the CLI's report folder and the self-contained HTML page.

:func:`write_report` writes every table (CSV + JSON) and figure of an evaluation into a
folder; the folder is written beside ``--out`` and renamed into place at the end, so
``--out`` holds either the earlier report or the complete new one, and a folder holding
other files is refused before anything is computed. :func:`write_html_report` writes the
one-file HTML report that the GUI's "Export report" and ``bayescope-cli evaluate --report``
share; :func:`export_dataset_view` writes one view as the CLI writes it (figure + CSV + JSON).
"""

from __future__ import annotations

import html
import io
import math
import os
import re
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from core.analysis.comparison import provenance
from core.analysis.corruption import SHOWN_SCORES, CorruptionEvaluation, severity_lines
from core.analysis.dataset import DATASET_VIEWS, SCORE_WORDS, TABLE_VIEWS, DatasetViews
from core.analysis.evaluation_results import Evaluation, evaluation_tables
from core.analysis.metrics import (
    ECE_BINS,
    REJECTION_SCORES,
    confusion_matrix,
    ood_detection,
    oracle_rejection_curve,
    per_class_error,
    rejection_curve,
    reliability_diagram,
    soft_confusion_matrix,
)
from core.analysis.ood_sets import AUROC_WORDS, ranking_changes
from core.analysis.uncertainty import UNCERTAIN_THRESHOLD
from core.engine.files import (
    NotSavedError,
    atomic_write,
    check_output_file,
    check_output_folder,
    code_version,
    replacing_folder,
    strict_json,
)
from core.engine.inference.base import ProgressRecord
from core.engine.naming import (
    METHOD_DESCRIPTIONS,
    dataset_words,
    interval_mass_words,
    method_label,
    plural,
)
from core.outputs.export import write_table


def evaluation_figures(ev: Evaluation) -> dict[str, Any]:
    """Every figure of the report, by file stem (matplotlib Figures)."""
    return {key: make() for key, make in figure_makers(ev).items()}


def figure_makers(ev: Evaluation) -> dict[str, Callable[[], Any]]:
    """Every figure of the report, by file stem, each made only when called (so that the
    report's writing can say how far it got, and stop between two figures)."""
    from core.outputs import figures as fg

    res = ev.results
    k = len(ev.class_names)
    out: dict[str, Callable[[], Any]] = {
        "reliability": lambda: fg.reliability_figure(
            {n: reliability_diagram(r.data.mean_proba, r.data.labels) for n, r in res.items()}
        ),
        "confusion_soft": lambda: fg.confusion_figure(
            {n: soft_confusion_matrix(r.data.mean_proba, r.data.labels) for n, r in res.items()},
            ev.class_names, f"Soft confusion: mean p̄ per true class ({ev.dataset})",
            scale="mean probability p̄ given to the predicted class",
        ),
        "confusion_hard": lambda: fg.confusion_figure(
            {n: confusion_matrix(r.data.predictions, r.data.labels, k) for n, r in res.items()},
            ev.class_names, f"Confusion, fraction of each true class ({ev.dataset})", normalise_rows=True,
        ),
        "per_class_error": lambda: fg.per_class_error_figure(
            {n: per_class_error(r.data.chain_predictions, r.data.labels, k) for n, r in res.items()},
            ev.class_names,
        ),
    }

    def rejection() -> Any:
        curves, oracle = {}, {}
        for n, r in res.items():
            curves[n] = {s: rejection_curve(r.data.correct, r.data.scores[s]) for s in REJECTION_SCORES}
            rates, acc = curves[n]["total"]
            oracle[n] = (rates, oracle_rejection_curve(acc[0], rates))
        return fg.rejection_figure(curves, oracle)

    def ood_histograms() -> Any:
        aurocs = {
            n: {o.score: o.auroc for o in ood_detection(r.data.scores, r.ood.scores)}
            for n, r in res.items()
        }
        return fg.ood_histogram_figure(
            {n: r.data.scores for n, r in res.items()},
            {n: r.ood.scores for n, r in res.items()},
            aurocs, k, ev.dataset, ev.ood_dataset,
        )

    def rotation() -> Any:
        fig = fg.rotation_figure({n: r.rotation for n, r in res.items()}, ev.class_names, ev.rotation_images)
        fig.suptitle(f"Rotation sweep of {ev.rotation_label}", fontsize=10)
        return fig

    out["rejection"] = rejection
    if ev.ood_dataset:
        out["ood_histograms"] = ood_histograms
    if ev.rotation_label:
        out["rotation"] = rotation
    return out


REPORT_FORMAT = "bayescope-evaluation"

_REPORT_SUFFIXES = {".csv", ".json", ".png", ".svg", ".pdf"}


def is_report_folder(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier evaluation report (and nothing else)."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return False
    return (folder / "evaluation.json").is_file() and all(
        e.is_file() and not e.is_symlink() and e.suffix.lower() in _REPORT_SUFFIXES for e in entries
    )


def check_report_folder(out_dir: str | os.PathLike) -> Path:
    """Refuse, before evaluating, an ``--out`` that a report must not replace."""
    return check_output_folder(out_dir, is_report_folder, "the evaluation report")


def write_report(ev: Evaluation, out_dir: str | os.PathLike, figure_format: str = "png") -> list[Path]:
    """Write every table (CSV + JSON), every figure and ``evaluation.json``; return the paths.

    Everything goes into a temporary folder that replaces ``out_dir`` (new, empty, or an
    earlier report) in one rename at the end: a failure, a full disk or Ctrl-C leave
    ``out_dir`` as it was.
    """
    final = check_report_folder(out_dir)
    written: list[str] = []
    try:
        with replacing_folder(final, is_report_folder, "the evaluation report") as tmp:
            _write_report_files(ev, tmp, figure_format, written)
    except NotSavedError:
        raise
    except OSError as exc:
        # the temporary folder is gone: name the folder the person chose, not the stand-in
        reason = exc.strerror or "the system refused the write"
        raise NotSavedError(
            f"could not write the report into {final}: {reason[0].lower()}{reason[1:]}; "
            "nothing was changed there"
        ) from None
    return [final / name for name in written]


def _write_report_files(ev: Evaluation, tmp: Path, figure_format: str, written: list[str]) -> None:
    """Write the report's files into ``tmp``, appending each file name to ``written``."""
    from core.outputs.figures import save_figure

    tables = evaluation_tables(ev)
    for name, rows in tables.items():
        written += [p.name for p in write_table(rows, tmp, name)]
    for name, fig in evaluation_figures(ev).items():
        written.append(save_figure(fig, tmp / f"{name}.{figure_format}").name)
    meta = {
        "format": REPORT_FORMAT,
        "dataset": ev.dataset, "ood_dataset": ev.ood_dataset, "rotation": ev.rotation_label,
        "data": ev.data_source, "ood_data": ev.ood_source,
        "class_names": list(ev.class_names), "settings": ev.settings,
        "posteriors": {
            n: {"method": r.posterior.method, "arch": r.posterior.arch.to_dict(),
                "config": r.posterior.config, "seed": r.posterior.seed,
                "trained_on": r.posterior.dataset,
                "training_data": r.posterior.info.get("training_data"),
                # what was used, beside the settings recorded in the file
                "samples_used": r.data.num_samples, "chains": r.data.num_chains,
                **ev.settings.get("posterior_files", {}).get(n, {})}
            for n, r in ev.results.items()
        },
        "summary": tables["summary"],
        "ood_detection": tables.get("ood_detection", []),
        "ood_datasets": list(ev.ood_names()), "ood_sets_data": ev.ood_sources,
        "ood_sets": tables.get("ood_sets", []),
    }
    atomic_write(tmp / "evaluation.json", lambda fh: fh.write(strict_json(meta, indent=2).encode()))
    written.append("evaluation.json")


def export_dataset_view(views: DatasetViews, view: str, path: str | os.PathLike) -> list[Path]:
    """Write one view of every posterior side by side, as ``bayescope-cli evaluate`` does.

    ``.png``/``.svg`` → the figure plus ``<stem>.csv`` and ``<stem>.json`` beside it;
    ``.csv``/``.json`` → the numbers only. The metrics view has no figure (CSV or JSON only).
    """
    from core.outputs.export import export_view as export_view
    from core.outputs.export import writing_into

    if view not in DATASET_VIEWS:
        raise ValueError(f"unknown view {view!r}; choose from {', '.join(DATASET_VIEWS)}")
    rows = views.tables.get(view, [])
    if view == "ood_histograms":
        rows = views.tables.get("ood_histograms", [])
        if not rows:
            raise ValueError("no out-of-distribution set was evaluated, so there are no histograms to export")
    path = Path(path)
    if view == "ood_sets" and not rows:
        raise ValueError("no out-of-distribution set was evaluated, so there is no AUROC to export")
    if view in TABLE_VIEWS:
        if path.suffix.lower() not in (".csv", ".json"):
            what = "the metrics are" if view == "summary" else "the AUROC per set is"
            raise ValueError(f"{what} a table: export them as .csv or .json")
        from core.outputs.export import write_table

        with writing_into(path.parent):
            return write_table(rows, path.parent, path.stem, formats=(path.suffix.lower().lstrip("."),))

    def figure() -> Any:
        return figure_makers(views.evaluation)[view]()  # this view's figure only

    return export_view(figure, rows, path)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; } h3 { font-size: 1.05em; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; max-width: 60em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f3f3f3; } td.text { text-align: left; }
td.best { font-weight: bold; background: #e8f3e8; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
"""

#: What each figure shows, for a person who never read the papers.
_CAPTIONS: dict[str, str] = {
    "reliability": "Reliability: for the inputs a posterior answers with a given confidence, how often it is "
                   "right. Bars on the dashed diagonal mean the confidence can be trusted; the hatched gaps "
                   "are the calibration error (ECE is their weighted mean).",
    "confusion_soft": "Soft confusion: for each true class (row), the mean probability given to each class "
                      "(column), as the D-SGHMC paper's correlation matrices. Mass off the diagonal shows which "
                      "classes a posterior hesitates between.",
    "confusion_hard": "Confusion: for each true class (row), the share of its images predicted as each class.",
    "per_class_error": "Error rate per true class; for posteriors with several chains, a box over the chains "
                       "and a dot per chain (the D-SGHMC paper's box plots).",
    "rejection": "Accuracy on the inputs kept when the most uncertain are referred to a person, by each "
                 "uncertainty score; the dotted line is the best possible (errors referred first).",
    "ood_histograms": "How uncertain each posterior is on the test set and on the out-of-distribution set, per "
                      "score (log scale). The further apart, the better the score tells unfamiliar inputs "
                      "apart (AUROC: 0.5 = chance, 1 = perfect).",
    "rotation": "One image rotated from 0° to 180°: class probabilities and uncertainty against the angle.",
}

_SVG_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.S)

_SVG_ID = re.compile(r'(\bid="|href="#|url\(#)')


def _inline_svg(fig: Any, prefix: str) -> str:
    """A figure as inline SVG (text kept as text), its ids prefixed so several can share a page."""
    import matplotlib

    buffer = io.StringIO()
    # a fixed salt and no date: the same evaluation gives the same page, from the app or the CLI
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "bayescope"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = _SVG_PROLOG.sub("", buffer.getvalue(), count=1)
    return _SVG_ID.sub(lambda m: m.group(1) + prefix, text)


def _cell(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, float):
        return f"<td>{value:.{digits}f}</td>" if math.isfinite(value) else "<td>–</td>"
    if isinstance(value, int):
        return f"<td>{value:,}</td>"
    if value is None:
        return "<td>–</td>"
    return f'<td class="text">{html.escape(str(value))}</td>'


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def report_provenance(ev: Evaluation) -> dict[str, Any]:
    """Where everything in the report comes from: settings, data sets and posteriors."""
    files = ev.settings.get("posterior_files", {})
    return {
        "bayescope": code_version(),
        "settings": {k: v for k, v in ev.settings.items() if k != "posterior_files"},
        "data": ev.data_source,
        "ood_data": ev.ood_source,
        "ood_sets_data": ev.ood_sources,
        "posteriors": {
            name: {**provenance(r.posterior, files.get(name, {}).get("file")),
                   "file_sha256": files.get(name, {}).get("file_sha256"),
                   "samples_used": r.data.num_samples, "chains": r.data.num_chains}
            for name, r in ev.results.items()
        },
    }


def report_html(ev: Evaluation, tables: dict[str, list[dict[str, Any]]] | None = None,
                corruption: CorruptionEvaluation | None = None) -> str:
    """The self-contained HTML report of an evaluation: figures as inline SVG, tables, provenance;
    with ``corruption``, a section on the same images corrupted at several severities."""
    from core.engine.runner import drain

    return drain(report_html_progress(ev, tables, corruption))


def report_html_progress(ev: Evaluation, tables: dict[str, list[dict[str, Any]]] | None = None,
                         corruption: CorruptionEvaluation | None = None,
                         ) -> Generator[ProgressRecord, None, str]:
    """:func:`report_html`, yielding a record after each figure (``step`` of ``total``)."""
    tables = tables if tables is not None else evaluation_tables(ev)
    n = len(ev.results)
    data_words = dataset_words(ev.dataset)
    images = ev.data_source.get("images")
    heading = f"{plural(n, 'posterior')} on the {data_words}"
    if ev.ood_dataset:
        heading += ", against the " + " and the ".join(dataset_words(set_name) for set_name in ev.ood_names())
    asked = ev.settings.get("num_samples")
    ood_images = [source.get("images") for source in ev.ood_sources or ([ev.ood_source] if ev.ood_source else [])]
    settings = [f"{images:,} test images" if isinstance(images, int) else "",
                " + ".join(f"{count:,}" for count in ood_images if isinstance(count, int)) + " out-of-distribution images"
                if any(isinstance(count, int) for count in ood_images) else "",
                f"up to {plural(asked, 'draw')} per posterior" if asked else "each posterior's own number of draws",
                f"seed {ev.settings.get('seed')}", f"{ev.settings.get('ece_bins', ECE_BINS)} calibration bins"]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>bayescope: {html.escape(heading)}</title>", f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(heading)}</h1>",
        f"<p>{html.escape('; '.join(s for s in settings if s))}.</p>",
        "<h2>At a glance</h2>",
    ]
    summary_rows = [
        [row["posterior"], method_label(row["method"]), row["samples"], row["chains"],
         None if row["accuracy"] is None else 100 * row["accuracy"], row["nll"], row["brier"], row["ece"],
         row["classwise_ece"], row.get("smooth_ece"),
         None if row["uncertain_fraction"] is None else 100 * row["uncertain_fraction"]]
        for row in tables["summary"]
    ]
    parts.append(_table(["posterior", "method", "draws", "chains", "accuracy %", "NLL (nats)", "Brier",
                         "ECE", "classwise ECE", "SmoothECE", "uncertain %"], summary_rows))
    parts.append("<p>NLL: mean −log of the probability given to the true class. Brier: mean squared distance "
                 "between the probabilities and the true class. ECE: mean gap between confidence and accuracy. "
                 "Classwise ECE: the mean over classes of each class's one-against-the-rest ECE. SmoothECE "
                 "(Błasiok &amp; Nakkiran 2023): the gap smoothed by a kernel whose width the data choose, "
                 "no bins. "
                 f"Uncertain: the top two classes' draws overlap (Bhattacharyya coefficient above "
                 f"{UNCERTAIN_THRESHOLD:g}).</p>")
    parts.extend(_interval_mass_part(ev))
    parts.extend(_conformal_part(ev, tables))
    if tables.get("ood_detection"):
        parts.append(f"<h2>Telling the {html.escape(dataset_words(ev.ood_dataset or ''))} apart</h2>")
        parts.append(_table(
            ["posterior", "score", "AUROC", "AUPR (out-of-distribution)", "AUPR (in-distribution)"],
            [[row["posterior"], SCORE_WORDS.get(row["score"], row["score"]),
              *(("n/a: the same for every image",) * 3 if row["auroc"] is None
                else (row["auroc"], row["aupr_out"], row["aupr_in"]))] for row in tables["ood_detection"]]))
    parts.extend(_ood_sets_part(ev, tables))
    parts.extend(corruption_part(corruption))
    parts.append("<h2>Figures</h2>")
    makers = figure_makers(ev)
    yield ProgressRecord(0, len(makers), phase="figures")
    for i, (key, make) in enumerate(makers.items()):
        title = DATASET_VIEWS.get(key, "Rotation sweep" if key == "rotation" else key)
        parts.append(f'<figure id="{key}"><h3>{html.escape(title)}</h3>{_inline_svg(make(), f"f{i}-")}'
                     f"<figcaption>{html.escape(_CAPTIONS.get(key, ''))}</figcaption></figure>")
        yield ProgressRecord(i + 1, len(makers), phase="figures")
    names = list(ev.class_names)
    parts.append("<h2>Per class</h2><h3>Classwise calibration error</h3>")
    parts.append(_table(["posterior", *names], [
        [name, *[row["ece"] for row in tables["classwise_ece"] if row["posterior"] == name]] for name in ev.results]))
    parts.append("<h3>Error rate per true class (%, median over chains)</h3>")
    parts.append(_table(["posterior", *names], [
        [name, *[None if row["median"] is None else 100 * row["median"]
                 for row in tables["per_class_error_box"] if row["posterior"] == name]] for name in ev.results]))
    record = report_provenance(ev)
    parts.append("<h2>Provenance</h2>")
    for name, info in record["posteriors"].items():
        words = METHOD_DESCRIPTIONS.get(info["method"], "")
        parts.append(f"<h3>{html.escape(name)}</h3><p>{html.escape(words)}</p>")
        parts.append(f"<pre>{html.escape(strict_json(info, indent=2))}</pre>")
    parts.append("<h3>Data and settings</h3>")
    rest = {k: v for k, v in record.items() if k != "posteriors"}
    parts.append(f"<pre>{html.escape(strict_json(rest, indent=2))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _ood_sets_part(ev: Evaluation, tables: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The AUROC of every score on every OOD set, one table per set, the best column of each score
    in bold; and which scores' best column changes with the set. Nothing without OOD sets."""
    rows = tables.get("ood_sets") or []
    if not rows:
        return []
    names = list(dict.fromkeys(row["posterior"] for row in rows))
    scores = list(dict.fromkeys(row["score"] for row in rows))
    images = {source.get("name"): source.get("images") for source in ev.ood_sources}
    mark = len(names) > 1
    parts = ["<h2>Telling each unfamiliar set apart, score by score</h2>",
             f"<p>{html.escape(AUROC_WORDS)}"
             + (" In bold: the best column for that score on that set." if mark else "") + "</p>"]
    for set_name in dict.fromkeys(row["set"] for row in rows):
        count = images.get(set_name)
        parts.append(f"<h3>{html.escape(dataset_words(set_name))}"
                     + (f" ({count:,} images)" if isinstance(count, int) else "") + "</h3>")
        head = "".join(f"<th>{html.escape(h)}</th>" for h in ["posterior", *(SCORE_WORDS.get(sc, sc) for sc in scores)])
        body = []
        for name in names:
            cells = {r["score"]: r for r in rows if r["set"] == set_name and r["posterior"] == name}
            tds = [_cell(name)]
            for score in scores:
                row = cells.get(score)
                if row is None or row["auroc"] is None:
                    tds.append("<td>n/a</td>")
                else:
                    best = ' class="best"' if mark and row["best"] else ""
                    tds.append(f"<td{best}>{row['auroc']:.4f}</td>")
            body.append("<tr>" + "".join(tds) + "</tr>")
        parts.append(f"<table><tr>{head}</tr>{''.join(body)}</table>")
    changes = ranking_changes(rows) if mark else {}
    if changes:
        parts.append("<p>The best column changes with the set for " + html.escape("; ".join(
            f"{SCORE_WORDS.get(score, score)}: " + ", ".join(
                f"{' and '.join(best) or 'none'} on the {dataset_words(set_name)}" for set_name, best in by_set.items())
            for score, by_set in changes.items())) + ". One unfamiliar set alone would not show it.</p>")
    return parts


def corruption_part(result: CorruptionEvaluation | None) -> list[str]:
    """Accuracy and OOD AUROC against severity, one row per posterior and one column per severity
    (the numbers the Dataset tab plots and ``evaluate --corruption`` prints); nothing without one."""
    if result is None or not result.rows:
        return []
    from core.engine.data.corruptions import CORRUPTIONS

    corruption = CORRUPTIONS[result.corruption]
    head = ["posterior", *(f"severity {s:g}" for s in result.severities)]
    what = f"{result.images:,} {dataset_words(result.dataset)}"
    if result.ood_dataset:
        what += f" and {result.ood_images:,} {dataset_words(result.ood_dataset)}, corrupted alike"
    parts = [f"<h2>When the images get worse: {html.escape(corruption.label.lower())}</h2>",
             f"<p>{html.escape(what)}; {html.escape(corruption.in_sentence)} at each severity "
             f"({html.escape(corruption.scale)}; 0 is the clean images). Each image is corrupted with a seed of "
             "its own, the same for every posterior.</p>",
             "<h3>Accuracy %</h3>",
             _table(head, [[name, *(None if v is None else 100 * v for v in values)]
                           for name, values in severity_lines(result, "accuracy").items()])]
    if result.ood_dataset:
        for score, words in SHOWN_SCORES:
            parts.append(f"<h3>OOD AUROC by {html.escape(words)}</h3>")
            parts.append(_table(head, [[name, *values]
                                       for name, values in severity_lines(result, f"auroc_{score}").items()]))
        parts.append(f"<p>{html.escape(AUROC_WORDS)}</p>")
    return parts


def _interval_mass_part(ev: Evaluation) -> list[str]:
    """The share of exact inference's belief each posterior's interval holds, as its file records it
    (``info["interval_mass"]``, :mod:`core.analysis.interval_mass`); nothing when none records it."""
    rows = [[name, f"{100 * r['stated_level']:.0f} %", r["mean"], r["p10"], interval_mass_words(result.posterior.info)]
            for name, result in ev.results.items()
            if isinstance(r := result.posterior.info.get("interval_mass"), dict) and r.get("status") == "measured"]
    if not rows:
        return []
    return ["<h2>How much of exact inference each interval holds</h2>",
            _table(["posterior", "interval", "share of exact inference inside (mean)", "10th percentile", "in words"],
                   rows),
            "<p>For each probe image and class where exact inference (HMC) gives more than 1 %, the share of its "
            "draws inside the posterior's interval; an interval as wide as the posterior's holds about its own "
            "level, a narrower one less. Measured once on the probe images and kept in each file.</p>"]


def write_html_report(ev: Evaluation, path: str | os.PathLike,
                      tables: dict[str, list[dict[str, Any]]] | None = None,
                      corruption: CorruptionEvaluation | None = None) -> Path:
    """Write :func:`report_html` to ``path`` atomically (a failure leaves no partial file)."""
    from core.engine.runner import drain

    return drain(html_report_progress(ev, path, tables, corruption))


def html_report_progress(ev: Evaluation, path: str | os.PathLike,
                         tables: dict[str, list[dict[str, Any]]] | None = None,
                         corruption: CorruptionEvaluation | None = None,
                         ) -> Generator[ProgressRecord, None, Path]:
    """:func:`write_html_report`, yielding a record after each figure; closing it (Cancel) stops
    between figures, before anything is written."""
    path = Path(path)
    check_output_file(path, "the report")
    page = (yield from report_html_progress(ev, tables, corruption)).encode("utf-8")
    return atomic_write(path, lambda fh: fh.write(page), "the report")


def _conformal_part(ev: Evaluation, tables: dict[str, Any]) -> list[str]:
    """The conformal sets' coverage and size per posterior, with the guarantee; a line for each
    posterior without a calibration."""
    from core.analysis.conformal import SCORE_WORDS as CONFORMAL_WORDS
    from core.analysis.conformal_run import guarantee_words

    rows = tables.get("conformal") or []
    missing = [(name, entry["missing"]) for name, entry in ev.conformal.items() if "missing" in entry]
    if not rows and not missing:
        return []
    parts = ["<h2>Conformal prediction sets</h2>"]
    if rows:
        level, n = rows[0]["level"], rows[0]["calibration_images"]
        parts.append(_table(
            ["posterior", "score", "q̂", "calibration images", "evaluated images", "coverage %", "guaranteed %",
             "mean set size"],
            [[row["posterior"], CONFORMAL_WORDS.get(row["score"], row["score"]), row["qhat"],
              row["calibration_images"], row["evaluated_images"],
              None if row["coverage"] is None else 100 * row["coverage"],
              f"{100 * row['guaranteed_lower']:.1f}–{100 * row['guaranteed_upper']:.2f}"
              + ("" if row["exchangeable"] else " (another data set: none)"),
              row["mean_set_size"]] for row in rows]))
        parts.append(f"<p>Sets at {level:.0%}, calibrated on a held-out half of the test set (chosen by a hash of "
                     "each image's pixels) and measured on the other half; "
                     f"{html.escape(guarantee_words(level, n))}.</p>")
    parts += [f"<p>{html.escape(name)}: {html.escape(words)}</p>" for name, words in missing]
    return parts
