"""Where the window's time goes per update, in processor time: the figures a shared machine's
load does not swamp as it swamps ``bench_gui.py``'s wall clock.

The real window is driven as ``bench_gui.py`` drives it (a press; a move 100 ms later: the
16-draw preview; the release: the full count), and each update is timed from the mouse event
until every column is drawn and painted. For each update it prints the processor time of the
whole process and of the window's thread, and the window thread's share of each part: the
canvas event (with, inside it, the ink's segment drawn, the window's request path, the model
input made, the input and the predictions set in the workspace, the request and its result
handed on: the engine when it runs on the window's thread, with its input, forward passes and summaries;
the columns fed their prediction: headers, the plots' numbers, the verdict's words and layout,
the conformal sets), the plots' and the verdicts' painting, and the parts of those; and what the
canvas event's parts spend outside the parts they call (``OUTSIDE``: dispatch, signals,
bookkeeping). Medians, 10th and 90th percentiles over the
strokes. For the tail: how often each part ran (a second paint or layout would show), and, for
the slowest quarter of the updates against the rest, the garbage collector's passes, page faults
(an allocation burst) and the scheduler's switches of the window's thread; and for the slowest few
(``--slowest``), the parts that took longer than their median.
A part that the checkout it runs from lacks is left out (so an older checkout can be compared).

Run: ``python benchmarks/bench_gui_parts.py [--strokes 20]`` (``OMP_NUM_THREADS=1`` on a
shared machine, as for every torch process there).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages
#: getrusage of the calling thread alone (Linux); elsewhere the process's
RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)

#: The parts timed, as (label, module, owner, attribute). A part runs inside the one it is
#: indented under; the engine and the columns fed run inside the canvas event when the request is
#: computed on the window's thread, after it (the worker's result arriving) otherwise.
PARTS = (
    ("canvas event (ink, model input, request)", "app.views.canvas", "DrawingCanvas", "mouseMoveEvent"),
    ("canvas event (ink, model input, request)", "app.views.canvas", "DrawingCanvas", "mouseReleaseEvent"),
    ("  the ink's segment drawn (and what it sets off)", "app.views.canvas", "DrawingCanvas", "_draw_to"),
    ("  the window's request path (input read, judged, shown)", "app.main", "MainWindow", "_apply_input"),
    ("  drawing read as the model's 28×28 input", "app.views.modes", "DrawPanel", "current_input"),
    ("  input set in the workspace", "app.workspace", "Workspace", "set_input"),
    ("  request made (columns listed, timers)", "app.controllers.judging", "JudgingController",
     "request_predictions"),
    ("  result handed on (signals to the workspace)", "app.controllers.inference", "InferenceController",
     "_on_worker_returned"),
    ("  predictions set in the workspace", "app.workspace", "Workspace", "set_predictions"),
    ("  what the model sees shown", "app.views.input_side", "InputSide", "show_seen"),
    ("  worker started", "app.controllers.inference", "InferenceController", "_start"),
    ("engine on the window's thread", "app.controllers.inference", None, "timed_predict_columns"),
    ("  digit made the model's input (once a request)", "app.controllers.inference", None, "_digit_input"),
    ("  forward passes (predict_proba: sampled, dropout, variational)", "core.engine.inference.base", "SampledPosterior",
     "predict_proba"),
    ("  forward passes (predict_proba: sampled, dropout, variational)", "core.engine.inference.mc_dropout", "DropoutPosterior",
     "predict_proba"),
    ("  forward passes (predict_proba: sampled, dropout, variational)", "core.engine.inference.variational", "VariationalPosterior",
     "predict_proba"),
    ("  summaries and finite checks (one pass over the columns)", "core.analysis.predictive", None,
     "summarise_finite"),
    ("columns fed their prediction", "app.views.columns", "ColumnsPanel", "show_prediction"),
    ("  headers", "app.views.column", "ColumnView", "set_header"),
    ("  reference and its words found", "app.views.columns", "ColumnsPanel", "_reference_of"),
    ("  verdict in words", "app.views.column", None, "plain_verdict"),
    ("  verdict text laid out", "app.views.rich_lines", "RichLines", "set_paragraphs"),
    ("  conformal and credible sets", "app.views.column", None, "conformal_lines"),
    ("plots painted (20)", "app.plots.input_plot", "InputPlot", "paintEvent"),
    ("  plots' backdrops (axes, title)", "app.plots.input_plot", "InputPlot", "_backdrop"),
    ("verdicts painted", "app.views.rich_lines", "RichLines", "paintEvent"),
    ("canvas and preview painted", "app.views.canvas", "DrawingCanvas", "paintEvent"),
    ("canvas and preview painted", "app.views.preview", "PreviewView", "paintEvent"),
)

#: What a part spends outside the parts it calls, per update: (label, the part, the parts inside it).
OUTSIDE = (
    ("  the event outside the ink's segment (dispatch)", "canvas event (ink, model input, request)",
     ("  the ink's segment drawn (and what it sets off)",)),
    ("  the segment painted into the image, its signals", "  the ink's segment drawn (and what it sets off)",
     ("  the window's request path (input read, judged, shown)",)),
    ("  the request path outside its parts", "  the window's request path (input read, judged, shown)",
     ("  drawing read as the model's 28×28 input", "  input set in the workspace",
      "  request made (columns listed, timers)", "  what the model sees shown")),
    ("  the request outside the engine and the columns", "  request made (columns listed, timers)",
     ("engine on the window's thread", "columns fed their prediction", "  worker started")),
)


def instrument(spent: dict[str, float]) -> None:
    """Wrap every part so that the window thread's processor time in it adds to ``spent``
    (before the window is built: Qt finds a widget's Python overrides once)."""
    import importlib

    window_thread = threading.get_ident()
    for label, module, owner, name in PARTS:
        holder = importlib.import_module(module)
        holder = getattr(holder, owner) if owner else holder
        if not hasattr(holder, name):  # a part the code measured does not have (an older checkout)
            continue
        setattr(holder, name, _timed(getattr(holder, name), label, spent, window_thread))  # looked up where called
    # each plot's own paint_data (an override: a wrapper of the base's would never run)
    from app.plots.input_views import INPUT_PLOTS

    for cls in INPUT_PLOTS:
        cls.paint_data = _timed(_timed(cls.paint_data, f"    {cls.view_key} data", spent, window_thread),
                                "  plots' data", spent, window_thread)
        if "paint_overlay" in vars(cls):  # what a plot draws over its data (the entropy's labels)
            cls.paint_overlay = _timed(cls.paint_overlay, f"  {cls.view_key} overlay", spent, window_thread)
        shown = _timed(cls.show, f"    {cls.view_key} fed", spent, window_thread)
        cls.show = _timed(shown, "  plots fed their numbers", spent, window_thread)


#: How many times each part ran in the update being timed (a second paint of a plot shows here).
calls: dict[str, int] = {}


def _timed(function, label: str, spent: dict[str, float], window_thread: int):
    def timed(*args, **kwargs):
        if threading.get_ident() != window_thread:
            return function(*args, **kwargs)
        start = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.thread_time() - start
            calls[label] = calls.get(label, 0) + 1
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strokes", type=int, default=20)
    parser.add_argument("--slowest", type=int, default=3,
                        help="for this many of the slowest previews, the parts that took longer than their median")
    args = parser.parse_args()

    from PySide6.QtCore import QPoint, QSettings, Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope, tempfile.mkdtemp())
    spent: dict[str, float] = {}
    instrument(spent)
    from app.main import MainWindow

    window = MainWindow()
    window.resize(1400, 860)
    window.show()
    window.samples.setValue(100)
    app.processEvents()
    canvas, side, columns = window.canvas, window.canvas.width(), window.workspace.columns
    finished = [0]
    window.inference.request_finished.connect(lambda number: finished.__setitem__(0, number))

    def settle(before: int, full: bool) -> None:
        """Until the request after ``before`` is drawn (at the full count if ``full``) and painted."""
        deadline = time.perf_counter() + 10
        while time.perf_counter() < deadline:
            app.processEvents()
            if (finished[0] > before and not window.inference.busy and not window._throttle.isActive()
                    and not (full and window._refine.isActive())
                    and all(c.prediction is not None for c in columns)
                    and not (full and any(c.prediction.summary.num_samples < c.samples(100) for c in columns))):
                app.processEvents()
                return
            time.sleep(0.0003)
        sys.exit("an update never arrived")

    collected: list[float] = []  # the garbage collector's passes in the update: their thread time

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            collected.append(-time.thread_time())
        elif collected:
            collected[-1] += time.thread_time()

    gc.callbacks.append(on_gc)

    def update(event, full: bool) -> dict[str, float]:
        spent.clear()
        calls.clear()
        collected.clear()
        before = window.inference.last_request
        usage = resource.getrusage(RUSAGE_THREAD)
        thread, process = time.thread_time(), time.process_time()
        event()
        settle(before, full)
        after = resource.getrusage(RUSAGE_THREAD)
        return {"process (all threads)": (time.process_time() - process) * 1e3,
                "window's thread": (time.thread_time() - thread) * 1e3, **{k: v * 1e3 for k, v in spent.items()},
                **{f"calls: {k.strip()}": n for k, n in calls.items()},
                "events: garbage collections": len(collected), "events: their ms": sum(collected) * 1e3,
                "events: page faults (minor)": after.ru_minflt - usage.ru_minflt,
                "events: switched out by the scheduler": after.ru_nivcsw - usage.ru_nivcsw,
                "events: waits (voluntary switches)": after.ru_nvcsw - usage.ru_nvcsw}

    rng = np.random.default_rng(0)
    rows: dict[str, list[dict[str, float]]] = {"preview (16 draws)": [], "full count (100 draws)": []}
    for stroke in range(args.strokes + 5):  # the first five warm up (the worker measures each request kind once)
        x0, y0 = (int(v) for v in rng.integers(side // 5, 4 * side // 5, 2))
        start, end = QPoint(x0, y0), QPoint(x0 + 15, y0 + 25)
        update(partial(QTest.mousePress, canvas, Qt.MouseButton.LeftButton, pos=start), False)
        time.sleep(0.1)
        app.processEvents()
        for c in columns:
            c.prediction = None
        preview = update(partial(QTest.mouseMove, canvas, end), False)
        full = update(partial(QTest.mouseRelease, canvas, Qt.MouseButton.LeftButton, pos=end), True)
        if stroke >= 5:
            rows["preview (16 draws)"].append(preview)
            rows["full count (100 draws)"].append(full)
        time.sleep(0.05)
    window.close()
    print(f"{args.strokes} strokes, {len(columns)} columns, processor time per update in ms, median [10th percentile]"
          " [90th percentile], "
          f"load average {os.getloadavg()[0]:.1f}")
    labels = ["process (all threads)", "window's thread"] + list(dict.fromkeys(label for label, *_ in PARTS))
    from app.plots.input_views import INPUT_PLOTS

    labels[labels.index("  plots' backdrops (axes, title)"):labels.index("  plots' backdrops (axes, title)")] = [
        "  plots' data", *(f"    {cls.view_key} data" for cls in INPUT_PLOTS),
        *(f"  {cls.view_key} overlay" for cls in INPUT_PLOTS if "paint_overlay" in vars(cls))]

    labels[labels.index("  verdict in words"):labels.index("  verdict in words")] = [
        "  plots fed their numbers", *(f"    {cls.view_key} fed" for cls in INPUT_PLOTS)]
    for kind, updates in rows.items():
        print(kind)
        for u in updates:
            for label, part, inside in OUTSIDE:
                if part in u and any(k in u for k in inside):
                    u[label] = u[part] - sum(u.get(k, 0.0) for k in inside)
        for label in labels + [label for label, *_ in OUTSIDE]:
            values = [u.get(label, 0.0) for u in updates]
            if any(values):
                print(f"  {label:40s} {np.median(values):6.2f}  [{np.percentile(values, 10):6.2f}]"
                      f"  [{np.percentile(values, 90):6.2f}]   (in {sum(label in u for u in updates)} of {len(updates)})")
        counted = sorted(k for k in set().union(*updates) if k.startswith("calls: "))
        varied = [k for k in counted if len({u.get(k, 0) for u in updates}) > 1]
        print("  calls per update: " + ("each part as often in every update (no second paint or layout)" if not varied
                                        else "; ".join(f"{k[7:]} {min(u.get(k, 0) for u in updates)}–"
                                                       f"{max(u.get(k, 0) for u in updates)}" for k in varied)))
        events = sorted(k for k in set().union(*updates) if k.startswith("events: "))
        thread = "window's thread"
        slow = np.array([u[thread] for u in updates]) >= np.percentile([u[thread] for u in updates], 75)
        print("  per update, the slowest quarter / the rest (mean): " + "; ".join(
            f"{k[8:]} {np.mean([u.get(k, 0) for u, s in zip(updates, slow, strict=True) if s]):.2f} / "
            f"{np.mean([u.get(k, 0) for u, s in zip(updates, slow, strict=True) if not s]):.2f}" for k in events))
        for u in sorted(updates, key=lambda u: -u[thread])[: args.slowest]:
            over = sorted(((u.get(label, 0.0) - np.median([v.get(label, 0.0) for v in updates]), label.strip())
                           for label in labels[2:]), reverse=True)
            more = [f"{k[7:]} {u.get(k, 0)}" for k in counted if u.get(k, 0) != np.median([v.get(k, 0) for v in updates])]
            print(f"  a slow one, {u[thread]:.2f} ms (median {np.median([v[thread] for v in updates]):.2f}): over "
                  "their medians: " + ", ".join(f"{name} +{d:.2f}" for d, name in over[:4] if d > 0.05)
                  + (f"; calls {', '.join(more)}" if more else ""))


if __name__ == "__main__":
    main()
