"""The kept draws' figures for an odd draw count: the block path against the reference functions.

After a sampler keeps ``--keep-draws`` draws a chain, ``train`` measures the file as saved
(:func:`core.commands.train.stored_draw_figures`, through :func:`core.analysis.diagnostics.diagnose`):
R̂, bulk and tail ESS of the probe's class probabilities and R̂ of the same draws shuffled eight times
(:func:`core.engine.convergence_blocks.summarise_with_shuffles`). The feature tiers keep 25 draws
of 8 chains, an odd count, which went to the reference functions (``convergence.summarise`` and
``convergence.rhat_of_shuffles``) until the block path took odd counts.

This times both on the same probabilities, alternating ``--repeats`` times in one process, in CPU
seconds (``time.process_time``) with the load average beside them, prints the ratio of their
medians and the largest differences between their figures. The probabilities are synthetic, as
the probe's: ``--chains`` × ``--draws`` draws of ``--images`` images × 10 classes, softmax of
autocorrelated logits rounded through float32 (many saturate: ties, elements left out).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_odd_kept_draws.py [--draws 25] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load() -> str:
    return "load " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def probabilities(chains: int, draws: int, images: int, seed: int = 0):
    """(chains, draws, images, 10) probabilities as a probe pass gives them (float32, rounded)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    base = rng.normal(size=(1, 1, images, 10)) * 4.0
    walk = np.cumsum(rng.normal(size=(chains, draws, images, 10)), axis=1) * 0.1
    logits = base + walk + rng.normal(size=(chains, draws, images, 10)) * 0.3
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)).astype(np.float32).astype(np.float64)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--draws", type=int, default=25)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(1)
    from core.analysis.diagnostics import MIN_SPREAD, shuffle_orders
    from core.engine import convergence, convergence_blocks

    x = probabilities(args.chains, args.draws, args.images)
    orders = shuffle_orders(x, 0)
    varies = convergence.spread(x) > MIN_SPREAD
    print(f"{args.chains} chains x {args.draws} draws of {args.images} images x 10 classes "
          f"({int(varies.sum())} elements vary), {len(orders)} shuffles")

    def reference():
        return convergence.summarise(x, MIN_SPREAD), convergence.rhat_of_shuffles(x[:, :, varies], orders)

    def blocks():
        return convergence_blocks.summarise_with_shuffles(x, MIN_SPREAD, orders)

    times: dict[str, list[float]] = {"reference": [], "blocks": []}
    results = {}
    for _ in range(args.repeats):
        for name, run in (("reference", reference), ("blocks", blocks)):
            started = time.process_time()
            results[name] = run()
            times[name].append(time.process_time() - started)
            print(f"  {name:9s} {times[name][-1]:6.2f} s CPU  ({load()})")
    (ref, ref_shuffled), (new, new_shuffled) = results["reference"], results["blocks"]
    differences = {name: abs(getattr(ref, name) - getattr(new, name))
                   for name in ("rhat_max", "ess_bulk_min", "ess_tail_min")}
    differences["rhat per element"] = float(np.nanmax(np.abs(ref.rhat - new.rhat)))
    differences["shuffled rhat"] = max(float(np.nanmax(np.abs(a - b))) for a, b in zip(ref_shuffled, new_shuffled,
                                                                                        strict=True))
    print("largest differences: " + ", ".join(f"{k} {v:.2e}" for k, v in differences.items()))
    ratio = statistics.median(times["blocks"]) / statistics.median(times["reference"])
    print(f"median CPU: reference {statistics.median(times['reference']):.2f} s, blocks "
          f"{statistics.median(times['blocks']):.2f} s; blocks / reference = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
