"""Which prior scale suits the face tier's head? The exact Laplace evidence over a grid of σ.

The face tier's model is a softmax regression, p(y | d, W, b) = softmax(W d + b), on dlib's
128-number face descriptor d, eight age groups: 1,032 weights θ under N(0, σ² I). Its log
posterior is concave, so the mode θ*_σ is unique, and with 1,032 weights the Hessian is small
enough to form exactly. The Laplace (MacKay) evidence is then

    log p(D | σ) ≈ log p(D | θ*) + log N(θ*; 0, σ² I) + (d/2) log 2π − ½ log det A,
    A = H + I/σ²,  H = Σₙ (diag(pₙ) − pₙpₙᵀ) ⊗ x̃ₙx̃ₙᵀ  (x̃ = (d, 1)),

with the mode found by L-BFGS, computed in float64 over the training split only (never the test faces). For every σ of the grid
this prints the evidence, the training log likelihood at the mode, the weights' norm and MacKay's
number of well-determined weights γ = d − tr(A⁻¹)/σ², whose fixed point σ² = |θ*|²/γ is where
the evidence peaks; that fixed point is also iterated from the grid's best σ and printed.

Run: ``python benchmarks/measure_face_prior.py --data-dir ../shared/data/utkface`` (the
descriptors from the cache; about a minute on two cores), ``--limit N`` for a quick look.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages

from core.engine.data.utkface import load_utkface  # noqa: E402
from core.engine.runner import drain  # noqa: E402

GRID = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0)


def features(x: torch.Tensor) -> torch.Tensor:
    """The descriptor with a 1 appended (the bias), float64."""
    return torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64)], dim=1)


def log_likelihood(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Σₙ log softmax(x̃ₙ Θ)[yₙ], Θ of shape (D + 1, K)."""
    return torch.log_softmax(x @ theta, dim=1).gather(1, y[:, None]).sum()


def hessian(theta: torch.Tensor, x: torch.Tensor, chunk: int = 2000) -> torch.Tensor:
    """−∇² log likelihood at ``theta``, (d, d) with the weights ordered as ``theta.flatten()``;
    Σₙ (diag(pₙ) − pₙpₙᵀ) ⊗ x̃ₙx̃ₙᵀ summed over chunks of faces as one matrix product each."""
    dim, k = theta.shape
    h = torch.zeros(k, k, dim, dim, dtype=torch.float64)
    for start in range(0, len(x), chunk):
        xc = x[start:start + chunk]
        p = torch.softmax(xc @ theta, dim=1)
        cov = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # (n, K, K)
        z = (cov[:, :, :, None] * xc[:, None, None, :]).reshape(len(xc), -1)  # (n, K·K·D)
        h += (z.T @ xc).reshape(k, k, dim, dim)
    return h.permute(2, 0, 3, 1).reshape(dim * k, dim * k)  # [d, k, e, l]


def mode(x: torch.Tensor, y: torch.Tensor, sigma: float, start: torch.Tensor) -> torch.Tensor:
    """θ*: L-BFGS on the concave log posterior, from ``start``, to a gradient norm of 10⁻⁶."""
    theta = start.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([theta], max_iter=2000, history_size=50, tolerance_grad=1e-6,
                            tolerance_change=1e-15, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = -(log_likelihood(theta, x, y) - 0.5 * theta.pow(2).sum() / sigma**2)
        value.backward()
        return value

    opt.step(closure)
    return theta.detach()


def evidence(x: torch.Tensor, y: torch.Tensor, sigma: float, start: torch.Tensor) -> dict[str, float]:
    """The Laplace evidence and its parts at prior scale ``sigma``."""
    theta = mode(x, y, sigma, start)
    d = theta.numel()
    a = hessian(theta, x) + torch.eye(d, dtype=torch.float64) / sigma**2
    _, logdet = torch.linalg.slogdet(a)
    ll = float(log_likelihood(theta, x, y))
    norm2 = float(theta.pow(2).sum())
    log_prior = -0.5 * norm2 / sigma**2 - 0.5 * d * math.log(2 * math.pi * sigma**2)
    value = ll + log_prior + 0.5 * d * math.log(2 * math.pi) - 0.5 * float(logdet)
    gamma = d - float(torch.linalg.inv(a).diagonal().sum()) / sigma**2
    return {"sigma": sigma, "evidence": value, "log_likelihood": ll, "norm": math.sqrt(norm2),
            "gamma": gamma, "theta": theta}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="UTKFace's archive or its folder")
    parser.add_argument("--limit", type=int, help="the first N faces of the archive (a quick look)")
    args = parser.parse_args()
    split = drain(load_utkface(args.data_dir, limit=args.limit), lambda r: None)
    x, y = features(split.train.x), split.train.y.long()
    print(f"{len(x):,} training faces, {x.shape[1] - 1} descriptor values, {int(y.max()) + 1} groups, "
          f"{x.shape[1] * (int(y.max()) + 1):,} weights")
    start = torch.zeros(x.shape[1], int(y.max()) + 1, dtype=torch.float64)
    rows = []
    print(f"{'σ':>6s} {'log evidence':>13s} {'log lik.':>11s} {'|θ*|':>7s} {'γ':>7s} {'|θ*|²/γ → σ':>12s}")
    for sigma in GRID:
        row = evidence(x, y, sigma, start)
        start = row["theta"]
        rows.append(row)
        print(f"{sigma:6.2f} {row['evidence']:13.1f} {row['log_likelihood']:11.1f} {row['norm']:7.2f} "
              f"{row['gamma']:7.1f} {row['norm'] / math.sqrt(row['gamma']):12.2f}")
    best = max(rows, key=lambda r: r["evidence"])
    sigma, theta = best["sigma"], best["theta"]
    for _ in range(30):  # MacKay's fixed point σ² = |θ*|²/γ
        row = evidence(x, y, sigma, theta)
        new = row["norm"] / math.sqrt(row["gamma"])
        theta = row["theta"]
        if abs(new - sigma) < 1e-3 * sigma:
            sigma = new
            break
        sigma = new
    row = evidence(x, y, sigma, theta)
    print(f"grid's best σ {best['sigma']:g} (log evidence {best['evidence']:.1f}); MacKay's fixed point "
          f"σ = {sigma:.3f} (log evidence {row['evidence']:.1f}, γ {row['gamma']:.1f} of {theta.numel()})")


if __name__ == "__main__":
    main()
