"""The engine on the window's thread, a git revision's code against this checkout's in one window:
the figure that ``bench_gui_parts.py`` run twice, once per checkout, cannot resolve on a shared
machine (its runs move by ±20 % with the load, the engine's change is a tenth of that).

``bench_gui_parts.py``'s window and strokes, with the request's engine (``predict_columns`` of
``app/controllers/inference.py`` and ``core/analysis``'s ``summary_arrays``, ``uncertainty`` and
``predictive``) taken from ``--against REF`` and from this checkout by turns, two requests each
(the press's and the move's preview, then the release's full count and the next press's preview):
both see the same window, load and caches. Prints ``bench_gui_parts.py``'s table, then the window
thread's processor time in ``predict_columns`` per version, preview (16 draws) and full count:
median [10th, 90th percentile] (the number of requests).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_engine_window.py --against REF [--strokes 60]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gui_parts  # noqa: E402

#: The modules whose revision's code takes turns with this checkout's (the request path imports
#: them when it runs, so the revision's are put in their place in ``sys.modules`` for its turns).
ENGINE = ("core.analysis.summary_arrays", "core.analysis.uncertainty", "core.analysis.predictive")


def module_at(ref: str, name: str) -> types.ModuleType:
    """Module ``name`` as it was at git revision ``ref``, importing what it imports from ``sys.modules``."""
    path = name.replace(".", "/") + ".py"
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module  # dataclasses look their module up; the next revision module imports it
    exec(compile(source, f"{ref}:{path}", "exec"), module.__dict__)  # noqa: S102
    return module


def main() -> None:
    if "--against" not in sys.argv:
        sys.exit(__doc__.strip().splitlines()[-1])
    at = sys.argv.index("--against")
    ref = sys.argv[at + 1]
    del sys.argv[at:at + 2]  # the rest is bench_gui_parts.py's
    import importlib

    import app.controllers.inference as current

    here = {name: importlib.import_module(name) for name in ENGINE}
    there = {name: module_at(ref, name) for name in ENGINE}
    sys.modules.update(here)
    there_inference = module_at(ref, "app.controllers.inference")
    sys.modules["app.controllers.inference"] = current
    versions = {"this checkout": (here, current.predict_columns), ref: (there, there_inference.predict_columns)}
    window, requests, spent = threading.get_ident(), [0], {}

    def by_turns(image, columns, level, threads=None):
        name = list(versions)[requests[0] // 2 % 2]
        requests[0] += 1
        modules, predict = versions[name]
        sys.modules.update(modules)
        start = time.thread_time()
        try:
            return predict(image, columns, level, threads)
        finally:
            took = time.thread_time() - start
            sys.modules.update(here)
            if threading.get_ident() == window:  # a worker's request (each kind's first) is not the window's
                spent.setdefault((name, columns[0].num_samples), []).append(took * 1e3)

    current.predict_columns = by_turns  # timed_predict_columns looks it up when it runs
    bench_gui_parts.main()
    print(f"\npredict_columns on the window's thread, {ref} and this checkout by turns, ms of processor time, "
          f"median [10th, 90th percentile] (requests), load average {os.getloadavg()[0]:.1f}")
    for (name, draws), ms in sorted(spent.items(), key=lambda item: (item[0][1], item[0][0])):
        print(f"  {draws:3d} draws, {name:14s} {np.median(ms):6.3f}  [{np.percentile(ms, 10):6.3f}]"
              f"  [{np.percentile(ms, 90):6.3f}]   ({len(ms)})")


if __name__ == "__main__":
    main()
