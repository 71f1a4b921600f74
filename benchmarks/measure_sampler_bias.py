"""Where do the paper tier's samplers put their draws? Full-data log posterior of the draws.

R̂ says whether chains agree with one another, not whether they sample the posterior: chains can
agree on a wrong distribution. For softmax regression under the tier's N(0, 1) prior the exact
log posterior of a draw is cheap (:func:`core.analysis.fidelity.log_posterior_level`), so this
prints, for 40 draws spread over each bundled sampled file of the paper tier, the mean and spread
of log p(D | θ) + log p(θ) over the 60,000 training images (constants left out). HMC, which is
exact for this model (docs/zoo.md), shows where the posterior's draws lie; a stochastic-gradient
sampler far below it samples a wider distribution than the posterior. D-SGHMC drops input
pixels, so its draws belong to another model and are not comparable.

``--pilot SETTING ...`` instead runs short pilots of four chains from prior draws on the same
training images (never the test set) and prints the same level with R̂ on the first 1,000 test
images' class probabilities (labels not read); a setting is ``method:name=value,...`` (``train``
``--set`` values, plus ``epochs``, default 30, half of them burn-in), e.g. ``sgld:step_size=3e-5``.
The paper tier's steps are the pilots' whose draws came nearest to HMC's level (docs/zoo.md).

Run: ``python benchmarks/measure_sampler_bias.py --data-dir ../shared/data`` (seconds), or with
``--pilot`` (about 35 s per setting of 30 epochs on two CPU cores).
"""

from __future__ import annotations

import argparse
import math
import time

from core.analysis.diagnostics import MIN_SPREAD, probe_draws_progress
from core.analysis.fidelity import log_posterior_level
from core.engine import convergence
from core.engine.data.datasets import load_split
from core.engine.inference import get_method
from core.engine.models import ArchSpec
from core.engine.resources import resources_dir
from core.engine.runner import drain, fit_posterior
from core.engine.store import load_posterior

FILES = ("paper_softmax_hmc", "paper_softmax_sgld", "paper_softmax_sghmc", "paper_softmax_dsghmc")
PROBE = 1_000


def pilot(spec: str, train, probe, seed: int) -> str:
    """One pilot's row: its draws' level (first and second half of the kept draws), R̂, ESS."""
    name, _, values = spec.partition(":")
    settings = dict(item.split("=", 1) for item in values.split(",") if item)
    epochs = int(settings.setdefault("epochs", "30"))
    steps = math.ceil(len(train) / int(settings.get("batch_size", 100)))
    settings = {"num_chains": "4", "burn_in_epochs": str(epochs // 2), "init": "prior",
                "thin": str(max(1, (epochs - epochs // 2) * steps // 25)), **settings}
    method = get_method(name)
    began = time.perf_counter()
    posterior = drain(fit_posterior(method, method.parse_settings(settings), ArchSpec("softmax", num_classes=10),
                                    train, seed))
    seconds = time.perf_counter() - began
    level = drain(log_posterior_level(posterior, train, 1.0, num_draws=posterior.num_samples)).values
    level = level.reshape(posterior.num_chains, -1)
    half = level.shape[1] // 2
    summary = convergence.summarise(drain(probe_draws_progress(posterior, probe, seed)), MIN_SPREAD)
    return (f"{spec} | {level.mean():,.0f} ± {level.std():,.0f} | {level[:, :half].mean():,.0f} → "
            f"{level[:, half:].mean():,.0f} | {summary.rhat_max:.3f} | {summary.ess_bulk_min:.0f} | {seconds:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--pilot", nargs="+", metavar="SETTING", help="method:name=value,... (see above)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train = load_split("mnist", "train", root=args.data_dir)
    if args.pilot:
        probe = load_split("mnist", "test", root=args.data_dir).x[:PROBE]
        print("setting | log posterior, mean ± sd | first half → second half of the draws | R̂ (max) | "
              "bulk ESS (min) | s")
        for spec in args.pilot:
            print(pilot(spec, train, probe, args.seed), flush=True)
        return
    print("file | log posterior, mean ± sd over the draws")
    for name in FILES:
        posterior = load_posterior(resources_dir() / "models" / f"{name}.pt")
        record = drain(log_posterior_level(posterior, train, 1.0, num_draws=args.draws)).record()
        print(f"{name} | {record['mean']:,.0f} ± {record['sd']:,.0f}", flush=True)


if __name__ == "__main__":
    main()
