"""Do the features tier's SG samplers converge on a 512-feature head, and at what CPU cost? (issue 45)

The features of ``benchmarks/measure_hmc_feature_head.py`` (``bench_feature_tier.py``'s synthetic
folder in memory: 8,026 training images, the first 1,000 of the rest as the probe), and SGLD, SGHMC
or D-SGHMC as the tier runs it (``fit`` with :data:`core.engine.inference.recipes.FEATURES_SGLD`,
``FEATURES_SGHMC`` or ``FEATURES_DSGHMC`` changed by ``--set NAME=VALUE``). The mode and curvature
are computed first and timed apart (a tier computes them once for its four samplers). Prints the
CPU time of the sampling and of the probe pass (:func:`core.analysis.diagnostics.diagnose`, as the
tier measures: predictions of every measured draw, R̂, ESS and the shuffled baseline), the largest
bulk and tail R̂ apart, the smallest bulk and tail ESS, and the same R̂ on the first half of the
draws and on every 2nd / 4th draw (what a shorter run or more thinning would have read).
``--after-training``: instead, what ``train`` does once the chains have run (save the file, the test
accuracy, the probe pass, keep 25 draws a chain and save again, the stored draws' figures), timed part
by part on this run's posterior (:func:`after_training`).

Run: ``OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/measure_sg_feature_head.py sghmc
[--features 512] [--seed 0 --seed 1] [--set num_chains=8 --set epochs=1450 ...] [--whiten [--noise]] [--stein] [--predictive FILE.npy] [--reference HMC.npy]
[--after-training] [--json FILE]``
(the seeds run one after the other, sharing one mode and curvature). Compare
CPU times, not wall clock, and note the load average printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.measure_hmc_feature_head import feature_sets, next_value, recipe_config, whitened  # noqa: E402

RECIPES = {"sgld": "FEATURES_SGLD", "sghmc": "FEATURES_SGHMC", "dsghmc": "FEATURES_DSGHMC"}


def predicted(eta: float, friction: float | None, s: float = 1.0) -> tuple[float, float, float]:
    """On a Gaussian of standard deviation ``s`` in the metric's units (1: the curvature at the mode
    is exact), SGHMC (``friction``) or SGLD (None) is a linear recursion with Gaussian noise: its
    stationary spread relative to ``s`` (a discrete Lyapunov equation, as ``tests/core/test_stein.py``
    solves it) and the integrated autocorrelation times, in steps, of x and of x² (for a Gaussian
    process the autocorrelation of x² is that of x squared; the folded "tail" quantity behaves so)."""
    import numpy as np
    import scipy.linalg

    w2 = eta / s**2
    if friction is None:
        a, q = np.array([[1 - w2 / 2]]), np.array([[eta]])
    else:
        a = np.array([[1 - w2, 1 - friction], [-w2, 1 - friction]])
        q = 2 * friction * eta * np.ones((2, 2))
    cov = scipy.linalg.solve_discrete_lyapunov(a, q)
    lagged, rho = cov.copy(), []
    for _ in range(5000):
        rho.append(lagged[0, 0] / cov[0, 0])
        lagged = a @ lagged
    r = np.array(rho[1:])
    return float(np.sqrt(cov[0, 0]) / s), float(1 + 2 * r.sum()), float(1 + 2 * (r**2).sum())


def figures(probs) -> dict:
    """Largest bulk and tail R̂ and smallest bulk and tail ESS over the probabilities that vary."""
    import numpy as np

    from core.analysis.diagnostics import MIN_SPREAD
    from core.engine import convergence

    varies = convergence.spread(probs) > MIN_SPREAD
    x = probs[:, :, varies]
    bulk, tail = convergence.rhat_bulk(x), convergence.rhat_tail(x)
    return {"draws": list(x.shape[:2]), "rhat_bulk": round(float(np.nanmax(bulk)), 4),
            "rhat_tail": round(float(np.nanmax(tail)), 4),
            "ess_bulk": round(float(np.nanmin(convergence.ess_bulk(x))), 1),
            "ess_tail": round(float(np.nanmin(convergence.ess_tail(x))), 1)}


def gradient_noise(weight, bias, f, y, metric, *, drop_rate: float, batch_size: int, samples: int = 64,
                   seed: int = 0) -> dict:
    """The variance, per coordinate whitened by the metric, of D-SGHMC's gradient estimate.

    At one weight set (``weight`` (K, D), ``bias`` (K,)), ``samples`` estimates of the likelihood's
    gradient (N/B) Σ_B ∇log p(y|x̃, θ), from three sources apart: mini-batches of ``batch_size``
    clean images, the full batch masked (x̃ = x ⊙ z / (1 − r)), and both (what D-SGHMC takes).
    Returns per source the variance V (P,) of ξ = L⁻¹ĝ over the estimates."""
    import torch

    from core.engine.inference.dsghmc import input_dropout
    from core.engine.inference.softmax_target import log_likelihood_and_grad

    generator = torch.Generator().manual_seed(seed)
    n = len(y)
    out = {}
    for source, batch, rate in (("mini-batches", batch_size, 0.0), ("masks", n, drop_rate),
                                ("both", batch_size, drop_rate)):
        grads_w, grads_b = [], []
        for _ in range(samples):
            rows = torch.randperm(n, generator=generator)[:batch] if batch < n else torch.arange(n)
            x = input_dropout(f[rows], rate, generator) if rate > 0 else f[rows]
            _, gw, gb = log_likelihood_and_grad(weight, bias, x, y[rows])
            grads_w.append(gw * (n / batch))
            grads_b.append(gb * (n / batch))
        xi = metric.flatten(metric.whiten({"linear.weight": torch.stack(grads_w), "linear.bias": torch.stack(grads_b)}))
        out[source] = xi.double().var(0)
    return out


def noise_figures(posterior, config, data, metric) -> dict:
    """:func:`gradient_noise` at the mode and averaged over the last draws of four of the run's
    chains, and the whitened variance it predicts. Whitened, the chain moves by
    w ← (1 − α)w + η(−z + ξ) + N(0, 2αη) where the posterior is the Gaussian the metric says, so
    the noise adds η²V to the injected 2αη and a coordinate's stationary variance is SGHMC's
    (:func:`predicted`) times 1 + ηV/(2α): the recursion is linear and the same in every direction.
    (Where the masked likelihood's own curvature differs from the clean one's, or the draws sit far
    from the mode, this is a first-order account, not the sampler's law.)"""
    import torch

    eta, friction = config.step_size, config.friction
    base = predicted(eta, friction)[0] ** 2
    quantiles = torch.tensor([0.25, 0.5, 0.75])
    w, b = posterior.samples["linear.weight"].float(), posterior.samples["linear.bias"].float()
    points = {"at the mode": [(metric.mode["linear.weight"][0].float(), metric.mode["linear.bias"][0].float())],
              "at 4 chains' last draws": [(w[c, -1], b[c, -1]) for c in range(min(4, w.shape[0]))]}
    rate = getattr(config, "drop_rate", 0.0)
    out = {}
    for name, thetas in points.items():
        noise = [gradient_noise(*theta, data.x, data.y, metric, drop_rate=rate, batch_size=1000, seed=i)
                 for i, theta in enumerate(thetas)]
        out[name] = {}
        for source in noise[0]:
            v = torch.stack([n[source] for n in noise]).mean(0).float()
            out[name][source] = {
                "V (25/50/75 %)": [round(float(q), 2) for q in torch.quantile(v, quantiles)],
                "predicted variance (25/50/75 %)": [round(float(q), 2) for q in
                                                    torch.quantile(base * (1 + eta * v / (2 * friction)), quantiles)]}
    return out


def stein_temperature(posterior, data, prior_std: float, drop_rate: float, draws: int = 100, masks: int = 4,
                      seed: int = 0) -> dict:
    """How hot the draws are against a target, by Stein's identity (``tests/core/test_stein.py``).

    Under a target p, E[(θ − c)ᵀ∇log p(θ)] = −d for any constant c; for draws of a Gaussian target
    heated to temperature T (covariance T times the target's) the mean reads −T·d, so
    T = −mean / d says how much wider the draws are than the target, in every direction at once
    and without a metric. Two targets: the clean posterior, and D-SGHMC's own, the posterior its
    masks make, exp(E_z log p(D | x̃, θ)) p(θ), whose gradient is the mean of masked full-batch
    gradients (``masks`` of them per draw, an unbiased estimate). ``draws`` evenly spaced of the
    pooled draws; c is their mean. Returns T for each target (the masked one only with a drop
    rate) with its Monte Carlo standard error (the draws taken as independent)."""
    import torch

    from core.engine.inference.dsghmc import input_dropout
    from core.engine.inference.softmax_target import log_likelihood_and_grad

    w = posterior.samples["linear.weight"].double().flatten(0, 1)
    b = posterior.samples["linear.bias"].double().flatten(0, 1)
    pick = torch.linspace(0, len(w) - 1, min(draws, len(w))).round().long()
    w, b = w[pick], b[pick]
    cw, cb = w.mean(0), b.mean(0)
    f, y = data.x.double(), data.y
    generator = torch.Generator().manual_seed(seed)
    targets = {"clean posterior": 0.0, **({"masked posterior (D-SGHMC's target)": drop_rate} if drop_rate else {})}
    d = w[0].numel() + b[0].numel()
    out = {}
    for name, rate in targets.items():
        terms = []
        for i in range(len(w)):
            gw, gb = torch.zeros_like(w[i]), torch.zeros_like(b[i])
            for _ in range(masks if rate else 1):
                x = input_dropout(f, rate, generator) if rate else f
                _, one_w, one_b = log_likelihood_and_grad(w[i], b[i], x, y)
                gw += one_w
                gb += one_b
            n = masks if rate else 1
            gw, gb = gw / n - w[i] / prior_std**2, gb / n - b[i] / prior_std**2
            terms.append(float(((w[i] - cw) * gw).sum() + ((b[i] - cb) * gb).sum()))
        t = -torch.tensor(terms, dtype=torch.float64) / d
        out[name] = {"T": round(float(t.mean()), 3), "mcse": round(float(t.std() / len(t) ** 0.5), 3)}
    return {"draws": len(w), "masks per draw": masks, **out}


def after_training(posterior, test, seed: int, keep_draws: int = 25, storage: str = "float16") -> dict:
    """CPU seconds of what ``train`` does after the chains have run (as a tier's worker does it, the
    features tier's files in float16), part by part: the first save, then
    :func:`core.commands.train.measure_and_save` under cProfile, read by the cumulative time of its
    parts (the profiler's own cost included in the total)."""
    import contextlib
    import cProfile
    import io
    import pstats
    import tempfile

    from core.commands import train
    from core.engine.store import save_posterior

    out: dict = {}
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        path = Path(folder) / "posterior.pt"
        started = time.process_time()
        save_posterior(posterior, path, storage=storage)
        out["first save"] = round(time.process_time() - started, 2)
        profile = cProfile.Profile(time.process_time)
        started = time.process_time()
        profile.runcall(train.measure_and_save, posterior, path, test, seed, 30, keep_draws, storage)
        out["measure_and_save"] = round(time.process_time() - started, 2)
        out["file MB"] = round(path.stat().st_size / 1e6, 1)
    stats = pstats.Stats(profile).stats
    parts = {"accuracy_progress": "test accuracy (30 draws)", "diagnose_progress": "probe passes (all draws, then the kept ones)",
             "save_posterior": "saves", "stored_draw_figures": "stored draws' figures"}
    for (_, _, name), (_, _, _, cumulative, _) in stats.items():
        if name in parts:
            out[parts[name]] = round(out.get(parts[name], 0.0) + cumulative, 2)
    return out


def run(method: str, sets: list[str], seed: int, arch, data, probe_set, metric=None, *, noise: bool = False,
        stein: bool = False, predictive: str | None = None, reference: str | None = None, probe: bool = True,
        after: bool = False) -> dict:
    """One fit of ``method`` and its figures; ``metric``: also the draws whitened by it (and with
    ``noise`` the gradient noise that spreads them); ``predictive``: save the probe's mean
    predictive there; ``reference``: its distance to the one saved there (HMC's); ``probe`` False:
    no probe pass (no R̂, ESS or predictive: the draws' spread alone, from a shorter run)."""
    import numpy as np
    import torch

    from core.analysis.diagnostics import diagnose, probe_draws_progress
    from core.analysis.fidelity import predictive_fidelity
    from core.engine.inference import dsghmc, sghmc, sgld

    fit = {"sgld": sgld.fit, "sghmc": sghmc.fit, "dsghmc": dsghmc.fit}[method]
    config = recipe_config(sets, method, RECIPES[method])
    load_before = os.getloadavg()
    started = time.process_time()
    posterior = next_value(fit(config, arch, data, seed))
    cpu = time.process_time() - started
    out = {"method": method, "seed": seed, "settings": sets, "chains": config.num_chains,
           "num_steps": posterior.info["num_steps"], "thin": posterior.info["thin"], "cpu_sampling_s": round(cpu, 1)}
    if after:
        out["after training, CPU s"] = after_training(posterior, probe_set, seed)
        probe = False
    if probe:
        started = time.process_time()
        record = diagnose(posterior, probe_set, seed=0)
        probe_cpu = time.process_time() - started
        probs = next_value(probe_draws_progress(posterior, probe_set.x, 0))
        out.update({"cpu_probe_s": round(probe_cpu, 1), "rhat": round(record["rhat_max"], 4),
                    "rhat_shuffled": round(record["rhat_max_shuffled"], 4), **figures(probs),
                    "first half": figures(probs[:, : probs.shape[1] // 2]),
                    "every 2nd": figures(probs[:, ::2]), "every 4th": figures(probs[:, ::4]),
                    "accuracy": float((probs.mean((0, 1)).argmax(-1) == probe_set.y.numpy()).mean())})
    if metric is not None:
        flat = torch.cat([posterior.samples["linear.weight"].float().flatten(2),
                          posterior.samples["linear.bias"].float()], 2)  # (chains, draws, P)
        out["whitened by the mode's curvature"] = whitened(flat, metric.chol)
        if noise:
            out["gradient noise"] = noise_figures(posterior, config, data, metric)
    if stein:
        out["Stein temperature"] = stein_temperature(posterior, data, config.prior_std, getattr(config, "drop_rate", 0.0))
    if probe and predictive:
        np.save(predictive, probs.mean((0, 1)))
    if probe and reference:
        out["distance to the reference (kl, total_variation, agreement)"] = {
            k: round(v, 5) for k, v in predictive_fidelity(np.load(reference), probs.mean((0, 1))).record().items()}
    return {**out, "load_before": [round(v, 1) for v in load_before],
            "load_after": [round(v, 1) for v in os.getloadavg()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", choices=sorted(RECIPES))
    parser.add_argument("--predict", action="store_true",
                        help="print the linear-Gaussian prediction (spread, autocorrelation times) of SGLD's steps and "
                             "SGHMC's steps and frictions at posterior spreads 0.9, 1 and 1.16, and run nothing")
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--seed", type=int, action="append", help="a seed (repeat for several runs; default 0)")
    parser.add_argument("--json", help="append the figures to this file")
    parser.add_argument("--whiten", action="store_true",
                        help="also the variances of the draws whitened by the mode's curvature (1 for the exact posterior "
                             "where it is Gaussian; an SG sampler's discretisation widens them)")
    parser.add_argument("--noise", action="store_true",
                        help="with --whiten: the gradient's noise (mini-batches, masks, both) whitened by the metric at "
                             "the mode and at four draws, and the spread it predicts (gradient_noise)")
    parser.add_argument("--stein", action="store_true",
                        help="the draws' temperature against the clean posterior and (D-SGHMC) the masked one, by "
                             "Stein's identity (stein_temperature)")
    parser.add_argument("--predictive", metavar="FILE.npy",
                        help="save the probe's mean predictive (one seed: the last run's)")
    parser.add_argument("--no-probe", action="store_true",
                        help="skip the probe pass (R̂, ESS, predictive): the draws' spread alone (--whiten, --stein)")
    parser.add_argument("--reference", metavar="FILE.npy",
                        help="the distance of the mean predictive to this one (HMC's, saved by "
                             "measure_hmc_feature_head.py --predictive): KL(reference ‖ it), total variation, agreement")
    parser.add_argument("--after-training", action="store_true",
                        help="time what train does after the chains have run (saves, test accuracy, probe pass, "
                             "the stored draws' figures) instead of the probe pass alone (after_training)")
    args = parser.parse_args()
    if args.predict:
        for eta, friction in [(e, None) for e in (0.2, 0.4)] + [(e, a) for e in (0.1, 0.15, 0.2)
                                                                  for a in (0.15, 0.25, 0.3, 0.4, 0.6, 1.0)]:
            cells = "   ".join("{:.3f} {:5.1f} {:5.1f}".format(*predicted(eta, friction, s)) for s in (0.9, 1.0, 1.16))
            print(f"{'SGLD' if friction is None else 'SGHMC'} η {eta:<5} friction {friction or '-':<5} "
                  f"spread, τ(x), τ(x²) at s = 0.9 / 1 / 1.16:   {cells}")
        return 0

    from core.engine.inference.base import Dataset
    from core.engine.inference.build_cache import shared_within_build
    from core.engine.inference.curvature import mode_and_curvature
    from core.engine.models import ArchSpec

    f, y, probe, probe_y = feature_sets(args.features, False)
    data = Dataset(f, y, name="synthetic features")
    probe_set = Dataset(probe, probe_y, name="synthetic probe")
    arch = ArchSpec("softmax", num_classes=10, input_dim=args.features)
    with shared_within_build():  # one mode and curvature for every run, as in a tier's build
        started = time.process_time()
        _, _, metric = next_value(mode_and_curvature(arch, data, recipe_config(args.set, args.method, RECIPES[args.method]).prior_std))
        curvature_cpu = time.process_time() - started
        for seed in args.seed or [0]:
            out = run(args.method, args.set, seed, arch, data, probe_set, metric if args.whiten else None,
                      noise=args.noise, stein=args.stein, predictive=args.predictive, reference=args.reference,
                      probe=not args.no_probe, after=args.after_training)
            out = {**out, "features": args.features, "cpu_curvature_s": round(curvature_cpu, 1)}
            print(json.dumps(out), flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
