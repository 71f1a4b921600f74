"""Interactive path: one stroke → preprocessing → prediction and summary for several posteriors.

PRODUCT.md's target is p95 ≤ 30 ms for 4 methods × 100 samples with every view redrawn;
this measures the engine's share (no drawing). Run: ``python benchmarks/bench_interactive.py``.

``--pause 0.2 --samples 16 --threads 1`` (then 2) times the first preview after a person pauses:
after an idle pause a 2-thread OpenMP team can wake late, which is why the window's previews
run on one thread (``app.main.PREVIEW_THREADS``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages

from core.analysis.predictive import predict_image  # noqa: E402
from core.engine.data.preprocess import to_mnist  # noqa: E402
from core.engine.resources import resources_dir  # noqa: E402
from core.engine.store import load_posterior  # noqa: E402

DEFAULT = ("network_lenet5_mc_dropout", "network_lenet5_sghmc", "network_lenet5_mfvi", "network_lenet5_snvi")


def drawing(rng: np.random.Generator) -> np.ndarray:
    """A 280×280 canvas with a few thick random strokes."""
    canvas = np.zeros((280, 280), np.float32)
    for _ in range(3):
        y, x = rng.integers(60, 220, 2)
        dy, dx = rng.integers(-80, 80, 2)
        for t in np.linspace(0, 1, 60):
            cy, cx = int(y + t * dy), int(x + t * dx)
            canvas[max(cy - 10, 0) : cy + 10, max(cx - 10, 0) : cx + 10] = 1.0
    return canvas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", nargs="+", default=list(DEFAULT))
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seeded", action="store_true",
                        help="a fresh seeded generator per stroke (as the CLI), not the GUI's path")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds of idle before each stroke (the first preview after a pause)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    posteriors = [load_posterior(resources_dir() / "models" / f"{name}.pt") for name in args.posteriors]
    rng = np.random.default_rng(0)
    seed = 0 if args.seeded else None
    canvases = [drawing(rng) for _ in range(args.repeats)]
    per_method = {p.method: [] for p in posteriors}
    totals = []
    for canvas in canvases[:3]:  # warm-up
        for p in posteriors:
            predict_image(p, to_mnist(canvas), args.samples, seed=seed)
    for canvas in canvases:
        time.sleep(args.pause)
        start = time.perf_counter()
        image = to_mnist(canvas)
        for p in posteriors:
            t0 = time.perf_counter()
            predict_image(p, image, args.samples, seed=seed)
            per_method[p.method].append(time.perf_counter() - t0)
        totals.append(time.perf_counter() - start)
    print(f"{args.repeats} strokes, {args.samples} samples requested, {args.threads} threads, "
          f"{args.pause:g} s idle before each")
    for name, times in per_method.items():
        ms = 1e3 * np.asarray(times)
        print(f"  {name:12s} p50 {np.percentile(ms, 50):7.1f} ms   p95 {np.percentile(ms, 95):7.1f} ms")
    ms = 1e3 * np.asarray(totals)
    print(f"  {'all':12s} p50 {np.percentile(ms, 50):7.1f} ms   p95 {np.percentile(ms, 95):7.1f} ms"
          f"   (target p95 ≤ 30 ms incl. drawing: ratio {np.percentile(ms, 95) / 30:.1f}×)")


if __name__ == "__main__":
    main()
