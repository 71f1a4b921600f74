"""One update's timeline, from the mouse event to the last paint, on both threads.

``bench_gui.py`` times an update by the wall clock; ``bench_gui_parts.py`` adds up each part's
processor time on the window's thread. Neither says where the wall clock goes that no part of
the window's own work accounts for: the time queued before the engine starts (the input's tick,
a worker's start), the engine (on the window's thread or a worker's), the hand-back to the
window's thread (a queued signal), the columns fed, the paints (Qt posts ``update()`` as one
later repaint of the window) and what the benchmark counts as done. This drives the window with
``bench_gui.time_strokes`` (the same strokes, the same end condition) and records, for every
update, when each step started and ended (``time.perf_counter``), on which thread and with how much
processor time, and the window thread's scheduler counters (Linux's ``schedstat``: time on a core,
time ready but waiting for one). It prints the median timeline of each kind of update (the engine
on the window's thread or in a worker apart) and the window thread's wall time split into running,
waiting for a core, and asleep (its event loop idle, or waiting for the interpreter lock).

Run: ``python benchmarks/bench_gui_timeline.py [--strokes 20]`` (``OMP_NUM_THREADS=1`` on a
shared machine, as for every torch process there).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The steps traced, as (label, module, owner, attribute), in the order an update meets them.
STEPS = (
    ("mouse event on the canvas", "app.views.canvas", "DrawingCanvas", "mouseMoveEvent"),
    ("mouse event on the canvas", "app.views.canvas", "DrawingCanvas", "mouseReleaseEvent"),
    ("drawing read as the model input", "app.views.modes", "DrawPanel", "current_input"),
    ("request made", "app.controllers.inference", "InferenceController", "request"),
    ("worker started", "app.controllers.inference", "InferenceController", "_start"),
    ("engine", "app.controllers.inference", None, "timed_predict_columns"),
    ("result handed back (columns fed inside)", "app.controllers.inference", "InferenceController",
     "_on_worker_returned"),
    ("columns fed", "app.views.columns", "ColumnsPanel", "show_prediction"),
    ("worker's end handled", "app.controllers.inference", "InferenceController", "_on_worker_finished"),
    ("paint: plots", "app.plots.input_plot", "InputPlot", "paintEvent"),
    ("paint: verdicts", "app.views.rich_lines", "RichLines", "paintEvent"),
    ("paint: canvas", "app.views.canvas", "DrawingCanvas", "paintEvent"),
    ("paint: what the model sees", "app.views.preview", "PreviewView", "paintEvent"),
)

#: Every traced call: (label, on the window's thread, wall start, wall end, thread processor time).
Event = tuple[str, bool, float, float, float]


def instrument(events: list[Event]) -> None:
    """Wrap every step so that each call is recorded (before the window is built: Qt finds a
    widget's Python overrides once)."""
    window_thread = threading.get_ident()
    for label, module, owner, name in STEPS:
        holder = importlib.import_module(module)
        holder = getattr(holder, owner) if owner else holder
        if hasattr(holder, name):  # a step an older checkout lacks is left out
            setattr(holder, name, _traced(getattr(holder, name), label, events, window_thread))


def _traced(function, label: str, events: list[Event], window_thread: int):
    def traced(*args, **kwargs):
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            events.append((label, threading.get_ident() == window_thread, start, time.perf_counter(),
                           time.thread_time() - cpu))
    return traced


def schedstat() -> tuple[float, float]:
    """The calling thread's seconds on a core and seconds ready but waiting for one (Linux's
    ``/proc/thread-self/schedstat``; NaN elsewhere)."""
    try:
        run, queued, _ = Path("/proc/thread-self/schedstat").read_text().split()
    except (OSError, ValueError):
        return float("nan"), float("nan")
    return int(run) * 1e-9, int(queued) * 1e-9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strokes", type=int, default=20)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()

    from PySide6.QtCore import QEvent, QObject, QSettings
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope, tempfile.mkdtemp())
    events: list[Event] = []
    instrument(events)
    from bench_gui import time_strokes

    from app.main import MainWindow

    window = MainWindow()
    window.resize(1400, 860)
    window.show()
    window.samples.setValue(args.samples)
    app.processEvents()

    class RepaintWatch(QObject):
        """When Qt's posted repaint of the window (``UpdateRequest``) arrives."""

        def eventFilter(self, obj, event):  # noqa: N802 (Qt override)
            if event.type() == QEvent.Type.UpdateRequest:
                events.append(("window repaint requested (UpdateRequest)", True, time.perf_counter(),
                               time.perf_counter(), 0.0))
            return False

    watch = RepaintWatch()
    window.installEventFilter(watch)
    marks: dict[float, tuple[float, float]] = {}  # perf_counter → the window thread's schedstat

    class Timed(list):
        """``updates`` that also notes the window thread's scheduler counters when an update is done."""

        def append(self, update) -> None:
            marks[update[2]] = schedstat()
            super().append(update)

    timed = Timed()

    class Phase(dict):
        """Notes the window thread's scheduler counters whenever an update starts."""

        def update(self, *a, **k) -> None:
            super().update(*a, **k)
            if "start" in k:
                marks[k["start"]] = schedstat()

    state = Phase(phase="warm-up")
    time_strokes(app, window, args.strokes, args.samples, state, timed)
    updates = list(timed)
    window.close()

    print(f"{args.strokes} strokes, {len(window.workspace.columns)} columns, load average "
          f"{os.getloadavg()[0]:.1f}; times in ms from the mouse event, medians over the updates "
          f"[90th percentile]")
    traced = []  # (kind, start, done, {step: [first start, last end, processor time]})
    for what, start, done in updates:
        seen: dict[str, list[float]] = {}
        for label, on_window, a, b, cpu in events:
            if start <= a <= done:
                where = "" if on_window else " [worker]"
                first, last, total = seen.get(label + where, [a, b, 0.0])
                seen[label + where] = [min(first, a), max(last, b), total + cpu]
        where = "in a worker" if "engine [worker]" in seen else "on the window's thread"
        traced.append((f"{what}, the engine {where}", start, done, seen))
    for kind in dict.fromkeys(sorted(t[0] for t in traced)):
        rows: dict[str, list[tuple[float, float, float]]] = {}
        split: list[tuple[float, float, float]] = []
        for what, start, done, seen in traced:
            if what != kind:
                continue
            for label, (a, b, cpu) in seen.items():
                rows.setdefault(label, []).append(((a - start) * 1e3, (b - start) * 1e3, cpu * 1e3))
            (run0, queued0), (run1, queued1) = marks[start], marks[done]
            split.append(((done - start) * 1e3, (run1 - run0) * 1e3, (queued1 - queued0) * 1e3))
        order = list(dict.fromkeys([label for label, *_ in STEPS]))
        order.insert(order.index("paint: plots"), "window repaint requested (UpdateRequest)")
        print(f"{kind} ({len(split)} updates)")
        print(f"  {'step':48s} {'starts':>14s} {'ends':>14s} {'processor':>10s}")
        labels = sorted(rows, key=lambda lab: (np.median([r[0] for r in rows[lab]]),
                                               order.index(lab.removesuffix(' [worker]'))))
        for label in labels:
            r = np.asarray(rows[label])
            print(f"  {label:48s} {np.median(r[:, 0]):6.1f} [{np.percentile(r[:, 0], 90):5.1f}]"
                  f" {np.median(r[:, 1]):6.1f} [{np.percentile(r[:, 1], 90):5.1f}] {np.median(r[:, 2]):8.2f}"
                  f"   (in {len(r)} of {len(split)})")
        s = np.asarray(split)
        print(f"  done (the benchmark's end)                      {np.median(s[:, 0]):6.1f} "
              f"[{np.percentile(s[:, 0], 10):5.1f}–{np.percentile(s[:, 0], 90):5.1f}]")
        print(f"  the window's thread: running {np.median(s[:, 1]):.1f} ms, ready but waiting for a core "
              f"{np.median(s[:, 2]):.1f} ms, asleep (its event loop idle, or waiting for the interpreter lock) "
              f"{np.median(s[:, 0] - s[:, 1] - s[:, 2]):.1f} ms (medians)")


if __name__ == "__main__":
    main()
