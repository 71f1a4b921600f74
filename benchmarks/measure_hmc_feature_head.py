"""Does the features tier's HMC converge on a 512-feature head, and at what CPU cost? (issue 45)

Builds the features of ``benchmarks/bench_feature_tier.py``'s synthetic folder in memory (16×16
colour images of 10 classes, a pattern per class plus noise of 60 grey levels, through a random
linear map to ``--features`` numbers and a ReLU; ``--overlap`` draws the class patterns within
±3 grey levels of one grey, so that the classes overlap), splits them 8,026 for training and
the first 1,000 of the rest as the probe, and runs :func:`core.engine.inference.hmc.fit` with
the features tier's settings (:data:`core.engine.inference.recipes.FEATURES_HMC`) changed by
``--set NAME=VALUE``. Prints the process's CPU time (mode, curvature and sampling), the
acceptance and step size, and R̂ and bulk and tail ESS on the probe's 10,000 class
probabilities as the tier measures them (:func:`core.engine.convergence.summarise`, skipping
probabilities that move by less than 10⁻⁶).

``--whiten`` also asks whether the curvature at the mode is the posterior's covariance: with
M = L Lᵀ the metric, the draws z = Lᵀ(θ − θ̄) of a Gaussian posterior of precision M have unit
variance in every direction. It prints the quantiles of the coordinates' variances and the
largest eigenvalues of the draws' covariance, beside the edge (1 + √(P/n))² that n independent
draws of a unit Gaussian would reach in P dimensions (autocorrelated draws reach further).
``--averaged R`` does the same for the curvature averaged over a Gaussian around the mode,
found by R rounds of M ← E_{θ ~ N(θ*, M⁻¹)}[H(θ)] + I/σ² over 16 draws (the precision a
Gaussian with its mean held at the mode would take in variational inference).

``--breakdown`` also says what holds R̂ up: the largest bulk and folded (tail) R̂ apart, the
worst elements' bulk ESS and the ESS of their folded draws |x − median| (what the folded R̂ sees),
the median lag-1 autocorrelation of the probabilities and of their folds, R̂ of the first and the
second half of the sampling draws (is warm-up long enough?), R̂ of each chain's first ``--prefixes``
draws (what fewer sampling iterations would give, from one run) and of the same draws dealt out at
random (the floor for perfectly mixed draws of that count). With ``--whiten`` it prints the lag-1
autocorrelation of the whitened coordinates z and of z² as well.

Run: ``OMP_NUM_THREADS=1 python benchmarks/measure_hmc_feature_head.py [--features 512]
[--overlap] [--set num_leapfrog=16 --set num_samples=200 ...] [--whiten] [--averaged 2]
[--breakdown --prefixes 150,200]``. One
thread: on this shared machine two threads were slower (docs/performance.md). Compare CPU
times, not wall clock, and note the load average printed with them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIDE = 16
TRAIN = 8026  # what the features tier keeps for training of bench_feature_tier.py's 10,000 images
PROBE = 1000


def feature_sets(features: int, overlap: bool, images: int = 10_000, classes: int = 10, seed: int = 0):
    """(train features, labels, probe features, labels) of the benchmark's synthetic folder."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    if overlap:
        patterns = 128 + rng.normal(0, 3, (classes, SIDE, SIDE, 3))
    else:
        patterns = rng.integers(0, 256, (classes, SIDE, SIDE, 3))
    labels = np.arange(images) % classes
    pixels = np.empty((images, 3, SIDE, SIDE), np.float32)
    for i in range(images):
        image = np.clip(patterns[labels[i]] + rng.normal(0, 60, (SIDE, SIDE, 3)), 0, 255).astype(np.uint8)
        pixels[i] = image.transpose(2, 0, 1) / 255.0
    torch.manual_seed(0)
    body = torch.nn.Linear(3 * SIDE * SIDE, features)
    with torch.no_grad():
        f = torch.relu(body(((torch.from_numpy(pixels) - 0.5) / 0.25).flatten(1)))
    order = np.random.default_rng(seed + 1).permutation(images)
    train, rest = order[:TRAIN], order[TRAIN:TRAIN + PROBE]
    y = torch.from_numpy(labels)
    return f[train], y[train], f[rest], y[rest]


def recipe_config(sets: list[str], method: str = "hmc", recipe: str = "FEATURES_HMC"):
    """The features tier's settings of ``method`` (its recipe's ``--set`` and ``--drop-rate``) with
    ``sets`` applied, parsed as ``train --set`` parses them, as the method's config."""
    from core.commands.console import parse_settings
    from core.engine.inference import get_method, recipes

    args = getattr(recipes, recipe)
    pairs = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    pairs += [f"drop_rate={args[i + 1]}" for i, a in enumerate(args) if a == "--drop-rate"]
    return get_method(method).parse_settings(parse_settings([*pairs, *sets, "memory_budget_mb=4096"]))


def whitened(draws, chol) -> dict:
    """Variances of z = Lᵀ(θ − θ̄) over the (chains, draws, P) draws pooled: quantiles and top
    eigenvalues; and the median over coordinates of the lag-1 autocorrelation of z and of z²."""
    import torch

    chains = draws.double()
    x = chains.flatten(0, 1) - chains.flatten(0, 1).mean(0)
    z = x @ chol.double()
    n, p = z.shape
    var = z.var(0)
    top = torch.linalg.eigvalsh(z @ z.T / (n - 1))[-3:].flip(0)
    per_chain = z.reshape(*chains.shape[:2], p)
    lag1 = {name: round(float(lag_one(v).median()), 3)
            for name, v in (("z", per_chain), ("z²", per_chain ** 2))}
    return {"lag-1 autocorrelation (median over coordinates)": lag1,
            "variance quantiles 0/1/25/50/75/99/100 %": [
                round(float(q), 2) for q in torch.quantile(var.float(), torch.tensor([0, .01, .25, .5, .75, .99, 1.]))],
            "largest eigenvalues": [round(float(v), 1) for v in top],
            "edge for independent draws": round((1 + math.sqrt(p / n)) ** 2, 1)}


def lag_one(chains):
    """Lag-1 autocorrelation of (C, N, ...) chains per trailing element, pooled over chains
    (each chain centred on the pooled mean, so a chain that sits apart counts as correlated)."""
    centred = chains - chains.mean((0, 1))
    return (centred[:, 1:] * centred[:, :-1]).mean((0, 1)) / centred.pow(2).mean((0, 1))


def breakdown(probs, prefixes: list[int], min_spread: float = 1e-6) -> dict:
    """What holds the probe's R̂ up (see the module's docstring); ``probs`` (C, N, B, K)."""
    import numpy as np
    import torch

    from core.engine import convergence

    c, n = probs.shape[:2]
    x = probs.reshape(c, n, -1).astype(np.float64)
    x = x[:, :, convergence.spread(x) > min_spread]
    bulk, tail = convergence.rhat_bulk(x), convergence.rhat_tail(x)
    folded = np.abs(x - np.median(x.reshape(c * n, -1), axis=0))
    ess_bulk, ess_folded, ess_tail = convergence.ess_bulk(x), convergence.ess_bulk(folded), convergence.ess_tail(x)
    worst = np.argsort(-np.fmax(bulk, tail))[:8]
    t = torch.from_numpy(x)
    out = {"elements": int(x.shape[2]),
           "rhat bulk max": round(float(np.nanmax(bulk)), 4), "rhat tail (folded) max": round(float(np.nanmax(tail)), 4),
           "elements over 1.01 (bulk, tail)": [int((bulk > 1.01).sum()), int((tail > 1.01).sum())],
           "ess min (bulk, folded, tail quantiles)": [round(float(np.nanmin(v)), 1) for v in (ess_bulk, ess_folded, ess_tail)],
           "ess median (bulk, folded, tail quantiles)": [round(float(np.nanmedian(v)), 1)
                                                         for v in (ess_bulk, ess_folded, ess_tail)],
           "lag-1 autocorrelation median (p, |p - median|)": [round(float(lag_one(v).median()), 3)
                                                              for v in (t, torch.from_numpy(folded))],
           "worst elements (bulk R̂, tail R̂, bulk ESS, folded ESS, tail ESS)": [
               [round(float(v[i]), 4 if j < 2 else 0) for j, v in enumerate((bulk, tail, ess_bulk, ess_folded, ess_tail))]
               for i in worst]}
    halves = {}
    for name, part in (("first", x[:, : n // 2]), ("second", x[:, n // 2:])):
        halves[name] = round(float(np.nanmax(convergence.rhat(part))), 4)
    out["rhat of the first and second half of the draws"] = halves
    rng = np.random.default_rng(0)
    rows = {}
    for m in sorted({*prefixes, n}):
        if m > n:
            continue
        part = np.ascontiguousarray(x[:, :m])
        measured = convergence.summarise(part)
        floor = convergence.rhat_of_shuffles(part, [rng.permutation(c * m) for _ in range(2)])
        rows[m] = {"rhat": round(measured.rhat_max, 4), "bulk": round(float(np.nanmax(convergence.rhat_bulk(part))), 4),
                   "ess bulk/tail": [round(measured.ess_bulk_min), round(measured.ess_tail_min)],
                   "floor (2 shuffles)": [round(float(np.nanmax(f)), 4) for f in floor]}
        if c >= 8:
            rows[f"{m}, first 4 chains"] = {"rhat": round(convergence.summarise(part[:4]).rhat_max, 4)}
    out["prefixes (draws a chain)"] = rows
    return out


def averaged_curvature(mode, metric, f, prior_std: float, rounds: int, draws: int = 16):
    """R rounds of M ← E_{N(θ*, M⁻¹)}[H] + I/σ² (see the module's docstring)."""
    import torch

    from core.engine.inference.curvature import DenseMetric

    phi = torch.cat([f, torch.ones(len(f), 1)], 1)
    generator = torch.Generator().manual_seed(0)
    w0, b0 = mode["linear.weight"][0], mode["linear.bias"][0]
    k, d1 = w0.shape[0], phi.shape[1]
    for _ in range(rounds):
        spread = metric.spread({name: torch.randn((draws, *s), generator=generator)
                                for name, s in metric.shapes.items()})
        lam = torch.zeros(len(f), k, k)
        for s in range(draws):
            p = torch.softmax(f @ (w0 + spread["linear.weight"][s]).T + b0 + spread["linear.bias"][s], -1)
            lam += torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
        lam /= draws
        h = torch.zeros(k, k, d1, d1)
        for a in range(k):
            for b in range(a, k):
                h[a, b] = h[b, a] = phi.T @ (phi * lam[:, a, b, None])
        index = torch.arange(k * d1).reshape(k, d1)
        perm = torch.cat([index[:, :-1].reshape(-1), index[:, -1]])  # weight row by row, then bias
        flat = h.permute(0, 2, 1, 3).reshape(k * d1, k * d1).double()[perm][:, perm]
        flat = (flat + flat.T) / 2
        flat.diagonal().add_(1.0 / prior_std**2)
        metric = DenseMetric(flat, metric.shapes)
    return metric


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--overlap", action="store_true", help="class patterns within ±3 grey levels")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--whiten", action="store_true")
    parser.add_argument("--averaged", type=int, default=0, metavar="ROUNDS")
    parser.add_argument("--breakdown", action="store_true", help="what holds R̂ up (module docstring)")
    parser.add_argument("--prefixes", default="", help="with --breakdown: comma-separated draws a chain")
    parser.add_argument("--json", help="append the figures to this file")
    parser.add_argument("--progress", metavar="FILE",
                        help="append each progress record with the process's CPU seconds so far (a run cut short "
                             "still tells its cost per iteration)")
    parser.add_argument("--predictive", metavar="FILE.npy",
                        help="save the probe's mean predictive (1,000 × 10), the reference for the SG samplers' "
                             "distance to HMC (measure_sg_feature_head.py --reference)")
    args = parser.parse_args()

    import numpy as np
    import torch

    from core.engine import convergence
    from core.engine.inference import hmc
    from core.engine.inference.base import Dataset
    from core.engine.inference.curvature import mode_and_curvature
    from core.engine.models import ArchSpec

    f, y, probe, probe_y = feature_sets(args.features, args.overlap)
    data = Dataset(f, y, name="synthetic features")
    arch = ArchSpec("softmax", num_classes=10, input_dim=args.features)
    config = recipe_config(args.set)
    load_before = os.getloadavg()
    started = time.process_time()
    posterior = next_value(hmc.fit(config, arch, data, args.seed), args.progress)
    cpu = time.process_time() - started
    w = posterior.samples["linear.weight"].float()
    b = posterior.samples["linear.bias"].float()
    probs = torch.softmax(torch.einsum("nd,cskd->csnk", probe, w) + b[:, :, None, :], -1).numpy()
    measured = convergence.summarise(probs, 1e-6)
    accuracy = float((probs.mean((0, 1)).argmax(-1) == probe_y.numpy()).mean())
    out = {"features": args.features, "overlap": args.overlap, "settings": args.set, "chains": config.num_chains,
           "draws": int(w.shape[0] * w.shape[1]), "cpu_s": round(cpu, 1), "rhat": round(measured.rhat_max, 4),
           "ess_bulk": round(measured.ess_bulk_min, 1), "ess_tail": round(measured.ess_tail_min, 1),
           "acceptance": round(posterior.info["acceptance_rate"], 3),
           "step_size": [round(s, 4) for s in posterior.info["step_size"]], "accuracy": accuracy,
           "steps": [min(config.num_leapfrog, math.ceil(config.trajectory_length / e)) if config.trajectory_length
                     else config.num_leapfrog for e in posterior.info["step_size"]],
           "load_before": load_before, "load_after": os.getloadavg()}
    if args.predictive:
        np.save(args.predictive, probs.mean((0, 1)))
    if args.breakdown:
        out["breakdown"] = breakdown(probs, [int(v) for v in args.prefixes.split(",") if v])
    if args.whiten or args.averaged:
        flat = torch.cat([w.flatten(2), b], 2)
        mode, _, metric = next_value(mode_and_curvature(arch, data, config.prior_std))
        out["whitened by the mode's curvature"] = whitened(flat, metric.chol)
        if args.averaged:
            averaged = averaged_curvature(mode, metric, f, config.prior_std, args.averaged)
            out[f"whitened by the averaged curvature ({args.averaged} rounds)"] = whitened(flat, averaged.chol)
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "a") as fh:
            fh.write(json.dumps(out) + "\n")
    return 0


def next_value(generator, progress: str | None = None):
    """The return value of a progress generator, its records dropped (or appended to ``progress``
    with the CPU seconds and load average at each)."""
    try:
        while True:
            record = next(generator)
            if progress:
                with open(progress, "a") as fh:
                    fh.write(json.dumps({"step": record.step, "total": record.total, "phase": record.phase,
                                         "cpu_s": round(time.process_time(), 2), "load": os.getloadavg()[0],
                                         **{k: round(v, 4) for k, v in record.values.items()}}) + "\n")
    except StopIteration as stop:
        return stop.value


if __name__ == "__main__":
    sys.exit(main())
