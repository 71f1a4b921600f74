"""How far the network tier's samplers are from R̂ 1.1, and how long a run would reach it (docs/zoo.md).

For each bundled LeNet-5 sampler (SGLD, SGHMC, Dropout-SGHMC) every stored draw predicts the
probe the file's record was measured on (the first 1,000 MNIST test images; labels unread), and
this prints the rank-normalised split-R̂ of the 10,000 class probabilities as quantiles, not
only the largest the file records: whether a few ambiguous images or all of them disagree. A
file that keeps fewer draws than its run measured (``--keep-draws``) gets its record instead:
its kept draws would tell less.

It then extrapolates the run a converged file would take. For stationary chains R̂² − 1 falls
as one over each chain's effective draws, so over a sampling phase that many times longer,

    factor = (R̂² − 1) / (1.1² − 1),

with the largest R̂ (the file's measure) and, for comparison, the median. The hours are the
file's own training time per epoch (4 chains together, this machine's two cores) times the
burn-in plus the longer sampling phase. A lower bound: it assumes the chains are already
stationary (the weights' norm's split-R̂, in the file, says whether they are) and that they move
at one pace.

Last, whether more of the same would get there: from each file's stored draws, how much the
chains' offsets from one another persist between the first and second half of the run (the
correlation, over the four chains, of each chain's mean minus the mean of all, half against
half), for the median probability and for the worst 1 % by the first half's R̂ (chosen on one
half, so that choosing does not itself pick offsets that agree), and the correlation of successive
stored draws. Offsets that persist while successive draws are unrelated mean a fast part of the
motion that the run resolves and a slow part many times longer than the run: the factor above,
which assumes one pace, then understates the run a converged file would take.

With ``--stationary``, instead, what R̂ would read for chains that all move at one pace: 4 chains
of 250 draws (the files' measure) of 10,000 independent AR(1) series each, at several effective
sample sizes, the median, the share above 1.01 and 1.1 and the largest. A file's share above 1.01
read against that table gives the effective draws its chains would have if they moved at one pace,
and what a longer run of them should then read.

With ``--pair A.pt B.pt``, two runs of the same chains (the same seed: the same starts and random
streams, parted by float rounding or by length): the correlation, over the probe's probabilities,
of chain c's offset from the mean of all in A with chain c's in B, against that with the other
chains'. Runs that stay coupled chain by chain correlate with themselves more than with the
others; a shared start and shared noise can each couple them, and this does not tell which.

Run: ``python benchmarks/measure_network_mixing.py --data-dir ../shared/data`` (about 2 min a file;
``--stationary``: a few seconds, no data; ``--pair``: about 2 min).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages

from core.analysis.diagnostics import MIN_SPREAD, PROBE_SIZE, probe_draws_progress  # noqa: E402
from core.analysis.evaluation import resolve_dataset  # noqa: E402
from core.engine import convergence  # noqa: E402
from core.engine.resources import resources_dir  # noqa: E402
from core.engine.runner import drain  # noqa: E402
from core.engine.store import load_posterior  # noqa: E402

TARGET = 1.1
SAMPLERS = ("sgld", "sghmc", "dsghmc")


def factor(rhat: float, target: float = TARGET) -> float:
    """How many times longer a stationary chain's sampling phase must be to bring ``rhat`` to ``target``."""
    return (rhat**2 - 1) / (target**2 - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--stationary", action="store_true", help="R̂ of chains that move at one pace, then stop")
    parser.add_argument("--pair", nargs=2, metavar="FILE", help="two runs of the same chains, compared chain by chain")
    args = parser.parse_args()
    if args.stationary:
        stationary()
        return
    if not args.data_dir:
        parser.error("--data-dir is needed to measure the files")
    probe = resolve_dataset("mnist-test", args.data_dir).x[:PROBE_SIZE]
    if args.pair:
        same_chains(*(drain(probe_draws_progress(load_posterior(f), probe)) for f in args.pair))
        return
    print("file | chains × draws | R̂ median / 90% / 99% / max | share > 1.1 | epochs (burn-in + sampling) "
          "| s per epoch | ×, by max (median) | hours to 1.1, by max (median)")
    for method in SAMPLERS:
        name = f"network_lenet5_{method}.pt"
        posterior = load_posterior(resources_dir() / "models" / name)
        info = posterior.info
        per_epoch = info["num_steps"] / posterior.config["epochs"]  # steps per epoch
        burn_in = info["burn_in_steps"] / per_epoch
        sampling = posterior.config["epochs"] - burn_in
        seconds = info["train_seconds"] / posterior.config["epochs"]
        run = f"{burn_in:.0f} + {sampling:.0f} | {seconds:.1f}"

        def hours(rhat: float, burn_in: float = burn_in, sampling: float = sampling, seconds: float = seconds) -> float:
            return (burn_in + factor(rhat) * sampling) * seconds / 3600

        record = info.get("diagnostics", {})
        if record.get("kept_draws"):  # measured on every draw of the run; the file keeps fewer
            top = record["rhat_max"]
            print(f"{name} | {record['chains']} × {record['draws']} measured, {record['kept_draws']} of each kept | "
                  f"largest {top:.2f} (the file's record) | {record['rhat_above_1_1']:.0%} | {run} | "
                  f"{factor(top):.1f} | {hours(top):.1f}", flush=True)
            continue
        probs = drain(probe_draws_progress(posterior, probe))
        varies = convergence.spread(probs) > MIN_SPREAD
        rhat = convergence.rhat(probs)[varies]
        q50, q90, q99, top = np.quantile(rhat, [0.5, 0.9, 0.99, 1.0])
        print(f"{name} | {posterior.num_chains} × {posterior.num_draws} | {q50:.2f} / {q90:.2f} / {q99:.2f} / "
              f"{top:.2f} | {np.mean(rhat > TARGET):.0%} | {run} | "
              f"{factor(top):.1f} ({factor(q50):.1f}) | {hours(top):.1f} ({hours(q50):.1f})", flush=True)
    print("\nfile | chains' offsets, half against half: median (worst 1 % by the first half's R̂) | "
          "successive stored draws")
    for method in SAMPLERS:
        name = f"network_lenet5_{method}.pt"
        probs = drain(probe_draws_progress(load_posterior(resources_dir() / "models" / name), probe))
        persist, successive = persistence(probs.reshape(*probs.shape[:2], -1))
        print(f"{name} | {np.median(persist):.2f} ({np.median(persist[-len(persist) // 100:]):.2f}) | "
              f"{np.median(successive):.2f}", flush=True)


def stationary(chains: int = 4, draws: int = 250, quantities: int = 10_000, seed: int = 0) -> None:
    """Print R̂ of AR(1) chains at several effective sample sizes (of all chains' draws together)."""
    rng = np.random.default_rng(seed)
    print("ESS of 1,000 draws | R̂ median | share > 1.01 | share > 1.1 | largest of 10,000")
    for ess in (50, 100, 150, 200, 300, 400):
        e = ess / (chains * draws)  # effective draws per draw: (1 − ρ) / (1 + ρ)
        rho, x = (1 - e) / (1 + e), np.empty((chains, draws, quantities))
        x[:, 0] = rng.standard_normal((chains, quantities))
        for t in range(1, draws):
            x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal((chains, quantities))
        r = convergence.rhat(x)
        print(f"{ess} | {np.median(r):.3f} | {np.mean(r > 1.01):.2f} | {np.mean(r > TARGET):.4f} | {r.max():.3f}",
              flush=True)


def same_chains(a: np.ndarray, b: np.ndarray) -> None:
    """Print how chain c's offsets in run ``a`` correlate with chain c's, and with the others', in ``b``."""
    a, b = (p.reshape(*p.shape[:2], -1) for p in (a, b))
    varies = (convergence.spread(a) > MIN_SPREAD) & (convergence.spread(b) > MIN_SPREAD)
    offsets = [p[:, :, varies].mean(1) - p[:, :, varies].mean((0, 1)) for p in (a, b)]  # (chains, quantities)
    chains = range(len(offsets[0]))
    same = [np.corrcoef(offsets[0][c], offsets[1][c])[0, 1] for c in chains]
    other = [np.corrcoef(offsets[0][c], offsets[1][d])[0, 1] for c in chains for d in chains if c != d]
    print(f"{int(varies.sum())} probabilities: chain c against chain c, median {np.median(same):.2f} "
          f"({', '.join(f'{v:.2f}' for v in same)}); against another chain, median {np.median(other):.2f}")


def persistence(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For draws (chains, draws, quantities): per varying quantity, ordered by the R̂ of the first
    half of the draws (worst last), the correlation over chains of each chain's offset (its mean
    minus the mean of all) in the first half of its draws against the second; and the lag-1
    correlation of its draws within chains."""
    probs = probs[:, :, convergence.spread(probs) > MIN_SPREAD]
    half = probs.shape[1] // 2
    probs = probs[:, :, np.argsort(convergence.rhat(probs[:, :half]))]
    offsets = [part.mean(1) - part.mean((0, 1)) for part in (probs[:, :half], probs[:, half:])]
    persist = (offsets[0] * offsets[1]).sum(0) / np.sqrt((offsets[0] ** 2).sum(0) * (offsets[1] ** 2).sum(0))
    centred = probs - probs.mean(1, keepdims=True)
    successive = (centred[:, 1:] * centred[:, :-1]).mean((0, 1)) / (centred**2).mean((0, 1))
    return persist, successive


if __name__ == "__main__":
    main()
