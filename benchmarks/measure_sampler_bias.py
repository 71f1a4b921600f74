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

``--predict SETTING ...`` predicts, without sampling, how far below HMC's level a setting's draws
settle. Near the mode the posterior is Gaussian with precision M = H + I (eigenvalues λᵢ, from
the curvature at the mode). A mini-batch of n of the N images estimates the gradient with
covariance about (N/n)(1 − n/N)·H (the per-image gradients' spread is the Fisher information,
H/N). Along each eigendirection, SGLD θ ← θ + ½η(−λθ + ξ) + √η z is then a linear recursion
whose stationary variance is sᵢ = (η + ¼η²σᵢ²) / (ηλᵢ − ¼η²λᵢ²), σᵢ² the gradient noise
(for SGHMC, the 2 × 2 recursion of (θ, v), solved exactly); the draws' log posterior sits
½ Σᵢ (λᵢ sᵢ − 1) below the posterior's own. With ``metric=curvature`` the same holds in the
coordinates M makes unit (λ → 1, σᵢ² → (N/n)(1 − n/N)(λᵢ − 1)/λᵢ). A setting whose step makes
ηλᵢ ≥ 4 along some direction has no stationary spread there (it diverges): said instead. The
mini-batches are taken as drawn independently; each chain reshuffles the images every epoch, so
its mini-batch gradients add up to the full one over an epoch, and along directions that take
longer than an epoch to forget much of the noise cancels: there the gap is an upper bound (the
curvature-moved SGLD at η 0.01 and SGHMC at η 10⁻⁴ on mini-batches of 2,000: 134 and 124
predicted, 4 and 7 measured; the plain samplers, whose stiff directions forget within a step or
two: 1,658 and 1,521 predicted, 1,747 and 1,655 measured). With exact gradients (``batch_size``
60000) only the step's own gap is left: SGLD, with no accept/reject test, settles at variance
1/(1 − η/4) in every direction, 7,850 · (η/4)/(2(1 − η/4)) below (50 at the bundled η 0.05,
measured 47 with mini-batches of 10,000).

Run: ``python benchmarks/measure_sampler_bias.py --data-dir ../shared/data`` (seconds), with
``--pilot`` (about 35 s per setting of 30 epochs on two CPU cores; minutes with
``metric=curvature``, whose M⁻¹ products cost about 0.1 s a step), or with ``--predict``
(about 2 minutes for the curvature, then instant).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages

from core.analysis.diagnostics import MIN_SPREAD, probe_draws_progress  # noqa: E402
from core.analysis.fidelity import log_posterior_level  # noqa: E402
from core.engine import convergence  # noqa: E402
from core.engine.data.datasets import load_split  # noqa: E402
from core.engine.inference import get_method  # noqa: E402
from core.engine.models import ArchSpec  # noqa: E402
from core.engine.resources import resources_dir  # noqa: E402
from core.engine.runner import drain, fit_posterior  # noqa: E402
from core.engine.store import load_posterior  # noqa: E402

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


def eigenvalues_at_the_mode(train) -> np.ndarray:
    """Eigenvalues of the paper tier's posterior precision M = H(θ*) + I at its mode θ*."""
    from core.engine.inference.curvature import find_mode
    from core.engine.inference.ggn import full_ggn
    from core.engine.inference.sampling import ModelTarget
    from core.engine.models import build_model

    arch = ArchSpec("softmax", num_classes=10)
    model = build_model(arch)
    zeros = {k: torch.zeros_like(v.detach()).unsqueeze(0) for k, v in model.named_parameters()}
    mode, _ = find_mode(ModelTarget(model, len(train), 1.0, shared_batch=True), zeros, (train.x, train.y))
    model.load_state_dict({k: v[0] for k, v in mode.items()})
    h = full_ggn(model, list(mode), train, batch_size=4096)
    return torch.linalg.eigvalsh(h.double()).numpy() + 1.0


def _recursion(eta: float, lam: float, friction: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The linear recursion x' = A x + b ξ of one eigendirection of precision ``lam`` (ξ the step's
    noise): SGLD's θ (``friction`` None), or SGHMC's (θ, v) with v' = (1 − α)v − ηλθ + ξ, θ' = θ + v'."""
    if friction is None:
        return np.array([[1 - 0.5 * eta * lam]]), np.array([1.0])
    return np.array([[1 - eta * lam, 1 - friction], [-eta * lam, 1 - friction]]), np.array([1.0, 1.0])


def predicted_gap(spec: str, lam: np.ndarray, num_train: int) -> str:
    """One ``--predict`` row: how far below the posterior's own level the setting's draws settle,
    and how many steps its slowest direction takes to forget where it was (1 / (1 − |A|))."""
    name, _, values = spec.partition(":")
    settings = dict(item.split("=", 1) for item in values.split(",") if item)
    eta, n = float(settings["step_size"]), int(settings.get("batch_size", 100))
    friction = float(settings.get("friction", 0.05)) if name == "sghmc" else None
    fraction = num_train / n * (num_train - n) / (num_train - 1)
    if settings.get("metric") == "curvature":
        scale, noise = np.ones_like(lam), fraction * (lam - 1) / lam
    else:
        scale, noise = lam, fraction * (lam - 1)
    # the variance a step adds: the injected η (SGLD) or 2αη (SGHMC), plus (η/2)² or η² times the gradient noise
    injected = eta if friction is None else 2 * friction * eta
    weight = 0.25 * eta**2 if friction is None else eta**2
    gap, slowest, unstable = 0.0, 0.0, 0
    for precision, q in zip(scale, injected + weight * noise, strict=True):
        a, b = _recursion(eta, precision, friction)
        radius = max(abs(np.linalg.eigvals(a)))
        if radius >= 1:
            unstable += 1
            continue
        k = len(b)
        var = np.linalg.solve(np.eye(k * k) - np.kron(a, a), q * np.outer(b, b).ravel())[0]
        gap += 0.5 * (precision * var - 1)
        slowest = max(slowest, 1 / (1 - radius))
    if unstable:
        return f"{spec} | diverges along {unstable} directions (its step is too large for their curvature)"
    return f"{spec} | {gap:,.0f} below | {slowest:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--pilot", nargs="+", metavar="SETTING", help="method:name=value,... (see above)")
    parser.add_argument("--predict", nargs="+", metavar="SETTING", help="method:name=value,... (see above)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train = load_split("mnist", "train", root=args.data_dir)
    if args.predict:
        lam = eigenvalues_at_the_mode(train)
        print(f"posterior precision at the mode: eigenvalues {lam.min():.3g} to {lam.max():,.0f}, "
              f"{int((lam > 2).sum()):,} of {len(lam):,} above 2 (held by the data more than by the prior)")
        print("setting | draws' log posterior against the posterior's own | steps for the slowest direction to forget")
        for spec in args.predict:
            print(predicted_gap(spec, lam, len(train)), flush=True)
        return
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
