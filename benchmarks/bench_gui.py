"""The interactive path as a person feels it: stroke event → every view of every column painted.

Three figures from one run, so their ratios are comparable (the machine is shared and noisy):

* **gui**: a mouse move on the canvas (a real Qt event, offscreen) until every column has its
  prediction for that input and every column widget has been repainted (``repaint()`` paints
  synchronously): the preview from a few draws while the stroke moves; and the release of the
  stroke until every column shows its full count. Includes the 16 ms stroke throttle,
  preprocessing, prediction, summaries and drawing.
* **engine**: preprocessing + prediction + summary for every column, no Qt.
* **floor**: a plain batched forward pass of each architecture over the same number of
  weight sets (or dropout masks), with the weights already in memory.

Also the cold start of the window with its default columns (a fresh process).

Run: ``python benchmarks/bench_gui.py [--strokes 40]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

COLD_START = """
import time, sys
t0 = time.perf_counter()
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv)
from app.main import MainWindow
w = MainWindow(); w.show()
app.processEvents()
print(time.perf_counter() - t0)
"""


def percentiles(ms: list[float]) -> str:
    a = np.asarray(ms)
    return f"p50 {np.percentile(a, 50):6.1f} ms   p95 {np.percentile(a, 95):6.1f} ms"


def floor_ms(posterior, samples: int, repeats: int = 20) -> float:
    """A batched forward pass over ``samples`` weight sets or masks, weights precomputed."""
    from torch.func import functional_call, vmap

    from core.inference.base import DropoutPosterior, SampledPosterior
    from core.models import build_model, mc_dropout

    x = torch.rand(1, 1, 28, 28)
    model = build_model(posterior.arch)
    if isinstance(posterior, DropoutPosterior):
        batch = x.expand(samples, 1, 28, 28)
        with torch.no_grad(), mc_dropout(posterior.model):
            run = lambda: posterior.model(batch)  # noqa: E731
            run()
            t = time.perf_counter()
            for _ in range(repeats):
                run()
            return (time.perf_counter() - t) / repeats * 1e3
    if isinstance(posterior, SampledPosterior):
        params = posterior.flat_samples(samples)
    else:  # variational: any S weight sets of the right shapes cost the same
        params = {k: v.unsqueeze(0).expand(samples, *v.shape).contiguous() for k, v in model.named_parameters()}
    s = next(iter(params.values())).shape[0]
    with torch.no_grad():
        run = lambda: vmap(lambda p: functional_call(model, p, (x,)))(params)  # noqa: E731
        run()
        t = time.perf_counter()
        for _ in range(repeats):
            run()
    return (time.perf_counter() - t) / repeats * 1e3 * samples / s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strokes", type=int, default=40)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()

    from PySide6.QtCore import QPoint, QSettings, Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    import tempfile

    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope, tempfile.mkdtemp())
    from app.main import PREVIEW_SAMPLES, MainWindow
    from core.data.preprocess import to_mnist
    from core.predictive import predict_image

    window = MainWindow()
    window.resize(1400, 860)
    window.show()
    window.samples.setValue(args.samples)
    app.processEvents()
    columns = window.workspace.columns
    canvas = window.canvas
    side = canvas.width()

    def idle() -> None:
        """Handle events, then sleep briefly: an event loop at rest releases the GIL, and a
        busy loop here would starve the prediction thread (not what the window does)."""
        app.processEvents()
        time.sleep(0.0005)

    def wait_all(request_before: int) -> None:
        while (window.inference.last_request <= request_before or window.inference.busy
               or window._throttle.isActive()):
            idle()
        while not all(c.prediction is not None for c in columns):
            idle()

    # a first stroke warms up every posterior (vmap tracing, allocator)
    QTest.mousePress(canvas, Qt.MouseButton.LeftButton, pos=QPoint(side // 3, side // 4))
    QTest.mouseMove(canvas, QPoint(side // 3, side // 2))
    QTest.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=QPoint(side // 3, side // 2))
    wait_all(0)

    gui, full = [], []
    rng = np.random.default_rng(0)
    for _ in range(args.strokes):
        x0, y0 = rng.integers(side // 5, 4 * side // 5, 2)
        QTest.mousePress(canvas, Qt.MouseButton.LeftButton, pos=QPoint(int(x0), int(y0)))
        before = window.inference.last_request
        for c in columns:
            c.prediction = None
        start = time.perf_counter()
        QTest.mouseMove(canvas, QPoint(int(x0) + 15, int(y0) + 25))
        wait_all(before)
        for view in window.column_views.values():
            view.repaint()
        gui.append((time.perf_counter() - start) * 1e3)
        # the stroke ends: the full count must arrive (PRODUCT: within 100 ms of the last stroke)
        before = window.inference.last_request
        start = time.perf_counter()
        QTest.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=QPoint(int(x0) + 15, int(y0) + 25))
        wait_all(before)
        while window._refine.isActive() or window.inference.busy or any(
                c.prediction.summary.num_samples < c.samples(args.samples) for c in columns):
            idle()
        for view in window.column_views.values():
            view.repaint()
        full.append((time.perf_counter() - start) * 1e3)

    drawing = canvas.to_array()
    engine = []
    per_column = {c.title(args.samples): [] for c in columns}
    for _ in range(args.strokes):
        start = time.perf_counter()
        image = to_mnist(drawing)
        for c in columns:
            t = time.perf_counter()
            predict_image(c.posterior, image, c.samples(args.samples), seed=None)
            per_column[c.title(args.samples)].append((time.perf_counter() - t) * 1e3)
        engine.append((time.perf_counter() - start) * 1e3)
    floors = {c.title(args.samples): floor_ms(c.posterior, c.samples(args.samples)) for c in columns}
    window.close()

    cold = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", COLD_START], capture_output=True, text=True,
                             env={**os.environ, "QT_QPA_PLATFORM": "offscreen"}, check=True)
        cold.append(float(out.stdout.strip().splitlines()[-1]) * 1e3)

    print(f"{args.strokes} strokes, {len(columns)} columns, {args.samples} samples asked, "
          f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    print(f"  gui, stroke moving → all painted ({PREVIEW_SAMPLES}-draw preview)  {percentiles(gui)}"
          f"   target p95 ≤ 30 ms: ratio {np.percentile(gui, 95) / 30:.1f}×")
    print(f"  gui, stroke ends → full count painted   {percentiles(full)}"
          f"   target ≤ 100 ms: ratio {np.percentile(full, 95) / 100:.1f}×")
    print(f"  engine (all columns)        {percentiles(engine)}")
    for title, ms in per_column.items():
        ratio = np.median(ms) / floors[title]
        print(f"    {title:34s} {percentiles(ms)}   floor {floors[title]:6.1f} ms   median/floor {ratio:4.1f}×")
    print(f"  cold start to a shown window   median {np.median(cold):6.0f} ms   (target ≤ 2000 ms)")


if __name__ == "__main__":
    main()
