"""What the samplers' probe pass costs, part by part, before and after it went by blocks (issue 45).

After each sampler trains, :func:`core.analysis.diagnostics.diagnose` predicts the probe with
every measured draw (chains × draws × 1,000 images × classes) and measures R̂, bulk and tail ESS
and the floor of the same draws shuffled (eight orders). This script times, in CPU seconds of the
process with the load average beside them:

- the forward pass of stored draws (:func:`~core.analysis.diagnostics.probe_draws_progress`) and
  of the same draws with D-SGHMC's input masks drawn at prediction (drop rate 0.5);
- the statistics as they were (``convergence.summarise_with_shuffles`` read from ``--before``, a
  commit of this repository) and as they are (``convergence_blocks.summarise_with_shuffles``),
  alternating ``--repeats`` times on the same probabilities, with the largest differences between
  their figures; ``--breakdown`` also times the old pass's parts and the new one's.

``--make DIR`` first builds the draws: the synthetic 512-feature head of
``benchmarks/measure_hmc_feature_head.py`` (8,026 training images, the first 1,000 of the rest as the
probe) and SGHMC with the features tier's settings shortened to 100 + 1,000 steps, every 2nd kept
(8 × 500 draws; about 2 minutes of CPU). Then ``--draws DIR`` measures them.

Run: ``OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/measure_probe_pass.py --make /tmp/probe
--draws /tmp/probe [--repeats 2] [--breakdown]``.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.measure_hmc_feature_head import feature_sets, next_value, recipe_config  # noqa: E402

#: The commit whose convergence module ranked the draws once but went by (draws, elements).
BEFORE = "2119ce1"


def load() -> str:
    return "load " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def make(folder: Path) -> None:
    import torch

    from core.engine.inference import sghmc
    from core.engine.inference.base import Dataset
    from core.engine.models import ArchSpec

    f, y, probe, _ = feature_sets(512, False)
    config = recipe_config(["epochs=1100", "burn_in_epochs=100", "thin=2"], "sghmc", "FEATURES_SGHMC")
    started = time.process_time()
    posterior = next_value(sghmc.fit(config, ArchSpec("softmax", num_classes=10, input_dim=512),
                                     Dataset(f, y, name="synthetic features"), 0))
    print(f"SGHMC {posterior.num_chains} × {posterior.num_draws}: {time.process_time() - started:.0f} s of CPU, {load()}")
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"samples": posterior.samples, "probe": probe}, folder / "posterior.pt")


def old_convergence(commit: str):
    """The convergence module as it was at ``commit`` (its own copy, beside today's)."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:core/engine/convergence.py"],
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "convergence_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("convergence_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def timed(label: str, run):
    started = time.process_time()
    out = run()
    print(f"  {label:58s} {time.process_time() - started:6.1f} s   {load()}", flush=True)
    return out


def forward(folder: Path):
    import numpy as np
    import torch

    from core.analysis.diagnostics import probe_draws_progress
    from core.engine.inference.base import SampledPosterior
    from core.engine.inference.dsghmc import InputDropoutPosterior
    from core.engine.models import ArchSpec

    saved = torch.load(folder / "posterior.pt", weights_only=False)
    arch = ArchSpec("softmax", num_classes=10, input_dim=512)
    stored = SampledPosterior("sghmc", arch, {}, 0, "synthetic", saved["samples"])
    masked = InputDropoutPosterior("dsghmc", arch, {"drop_rate": 0.5, "mask_at_prediction": True}, 0, "synthetic",
                                   saved["samples"])
    print("forward pass over the probe")
    probs = timed("stored draws", lambda: next_value(probe_draws_progress(stored, saved["probe"], 0)))
    timed("the same draws with D-SGHMC's input masks", lambda: next_value(probe_draws_progress(masked, saved["probe"], 0)))
    return np.asarray(probs)


def breakdown_before(cv, x, orders) -> None:
    import numpy as np

    from core.analysis.diagnostics import MIN_SPREAD

    c, n = x.shape[:2]
    print("the pass before, its parts")
    varies = timed("spread", lambda: cv.spread(x) > MIN_SPREAD)
    pooled = x.reshape(c * n, *x.shape[2:])
    bulk = timed("bulk ranks and z-scores (one argsort a column)", lambda: cv._pooled_scores(pooled, fold=False))
    tail = timed("median, folds, their ranks and z-scores", lambda: cv._pooled_scores(pooled, fold=True))
    split = cv.split_chains(bulk.reshape(x.shape))
    timed("R̂ bulk and tail", lambda: (cv._rhat_plain(split), cv._rhat_plain(cv.split_chains(tail.reshape(x.shape)))))
    timed("bulk ESS (an FFT and its inverse a chain)", lambda: cv._ess_of_scores(split))
    timed("tail ESS (quantiles, two indicators' ESS)", lambda: cv.ess_tail(x))
    bk, tk = bulk[:, varies], tail[:, varies]

    def shuffles():
        for order in orders:
            dealt = order.reshape(c, n)
            chains = np.concatenate([dealt[:, : n // 2], dealt[:, n // 2 :]])
            np.fmax(cv._rhat_plain(bk[chains]), cv._rhat_plain(tk[chains]))

    timed(f"{len(orders)} shuffles' R̂ (gathered, then R̂)", shuffles)


def breakdown_after(x, orders) -> None:
    import numpy as np

    from core.analysis.diagnostics import MIN_SPREAD
    from core.engine import convergence_blocks as cb

    spent: collections.Counter = collections.Counter()
    originals = {}

    def wrap(owner, name, label):
        function = getattr(owner, name)
        originals[(owner, name)] = function

        def measured(*args, **kwargs):
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - started
        setattr(owner, name, measured)

    wrap(cb, "_normal_scores", "ranks to z-scores (ties, the table, put back in place)")
    wrap(cb, "_ess_rows", "ESS: FFTs, one inverse an element, Geyer (bulk and two tails)")
    wrap(cb, "_shuffled_rhat", "shuffles: chain sums by one product, R̂")
    wrap(cb, "_rhat_rows", "R̂ bulk and tail")
    wrap(cb, "_block", "all blocks")
    wrap(np, "argsort", "argsorts (rows, then the folds' merge)")
    wrap(np, "take_along_axis", "sorted values and fold orders gathered")
    started = time.process_time()
    try:
        cb.summarise_with_shuffles(x, MIN_SPREAD, orders)
    finally:
        for (owner, name), function in originals.items():
            setattr(owner, name, function)
    print(f"the pass now, its parts ({time.process_time() - started:.1f} s in all, {load()})")
    for label, seconds in spent.most_common():
        print(f"  {label:58s} {seconds:6.1f} s")


def statistics(x, before: str, repeats: int, breakdown: bool) -> None:
    import numpy as np

    from core.analysis.diagnostics import MIN_SPREAD, shuffle_orders
    from core.engine import convergence_blocks as cb

    cv = old_convergence(before)
    orders = shuffle_orders(x, 0)
    varies = cv.spread(x) > MIN_SPREAD
    print(f"statistics of {x.shape[0]} × {x.shape[1]} draws of {x[0, 0].size} probabilities ({varies.sum()} vary)")
    for _ in range(repeats):
        old = timed(f"before ({before})", lambda: cv.summarise_with_shuffles(x, MIN_SPREAD, orders))
        new = timed("now (by blocks)", lambda: cb.summarise_with_shuffles(x, MIN_SPREAD, orders))
    for name in ("rhat_max", "ess_bulk_min", "ess_tail_min"):
        print(f"  {name}: {getattr(old[0], name)!r} before, {getattr(new[0], name)!r} now")
    print("  largest differences: R̂ per element", float(np.nanmax(np.abs(old[0].rhat - new[0].rhat))),
          "shuffled R̂", max(float(np.nanmax(np.abs(a - b))) for a, b in zip(old[1], new[1], strict=True)))
    if breakdown:
        breakdown_before(cv, x, orders)
        breakdown_after(x, orders)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make", type=Path, help="build the draws into this folder first")
    parser.add_argument("--draws", type=Path, help="the folder --make wrote: measure its probe pass")
    parser.add_argument("--before", default=BEFORE, help="the commit whose statistics are 'before'")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--breakdown", action="store_true")
    args = parser.parse_args()
    if args.make:
        make(args.make)
    if args.draws:
        statistics(forward(args.draws), args.before, args.repeats, args.breakdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
