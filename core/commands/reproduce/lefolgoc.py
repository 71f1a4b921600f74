"""Le Folgoc et al., "Is MC Dropout Bayesian?": the two closed-form sanity checks.

``lefolgoc-gaussian``
    Fit a random d = 8 Gaussian p = N(m, Σ), Σ = A Aᵀ with A_ij ~ N(0, 1), by minimising
    KL[q ‖ p] (the ELBO of an unnormalised Gaussian) with MF-VI and sN-VI of ranks 1, 2, 4, 8,
    and report the forward KL[p ‖ q] in closed form,

        KL[p ‖ q] = ½ [tr(Σ_q⁻¹ Σ) + (μ_q − m)ᵀ Σ_q⁻¹ (μ_q − m) − d + log|Σ_q| − log|Σ|],

    which is +∞ for MAP (a point mass). It must fall as the rank grows and vanish at full
    rank (paper, one draw: 175.8, 38.0, 25.9, 0.88, 0.098).

``lefolgoc-rbf``
    Bayesian RBF regression: f(x) = Σ_j θ_j φ_j(x), φ_j(x) = exp(−(x − c_j)² / (2 ℓ²)), ten
    regularly spaced centres c_j on [−1, 1], ℓ their spacing, θ* ~ N(0, I), y = f(x) + ε,
    ε ~ N(0, σ² = 0.25²) known, prior θ ~ N(0, I). The exact posterior is
    N(μ*, Λ⁻¹), Λ = I + ΦᵀΦ/σ², μ* = Λ⁻¹ Φᵀ y / σ². We report log q(θ*) and KL[p* ‖ q] for MAP,
    MC dropout, MF-VI and sN-VI (ranks 1, 2, 4, 10). MC dropout with keep probability π on
    the basis functions is fitted at its exact optimum: for this linear model the dropout
    objective E_z[‖y − Φ (z ⊙ θ)/π‖²]/(2σ²) + (π/2)‖θ‖² (Gal's weight decay for the N(0, I)
    prior) equals ‖y − Φθ‖²/(2σ²) + (1−π)/(2πσ²) Σ_j θ_j² ‖φ_j‖² + (π/2)‖θ‖², a ridge
    regression. Its q puts all mass on the 2¹⁰ = 1024 points z ⊙ θ/π, so log q(θ*) = −∞ and
    KL[p* ‖ q] = +∞.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from core.commands.reproduce import Reproduction, register
from core.engine.inference.elbo import fit_density
from core.engine.inference.gaussian_family import LowRankMixture, SamplingMode

D = torch.float64
GAUSSIAN_RANKS = (1, 2, 4, 8)
RBF_RANKS = (1, 2, 4, 10)
PAPER_GAUSSIAN = {
    "MF-VI": 175.8,
    "sN-VI rank 1": 38.0,
    "sN-VI rank 2": 25.9,
    "sN-VI rank 4": 0.88,
    "sN-VI rank 8": 0.098,
}


# ----------------------------------------------------------------------------- closed forms


def gaussian_kl(
    mean_p: torch.Tensor, cov_p: torch.Tensor, mean_q: torch.Tensor, cov_q: torch.Tensor
) -> float:
    """KL[N(μ_p, Σ_p) ‖ N(μ_q, Σ_q)] with dense matrices (small d only)."""
    d = mean_p.shape[0]
    lq = torch.linalg.cholesky(cov_q)
    lp = torch.linalg.cholesky(cov_p)
    trace = torch.cholesky_solve(cov_p, lq).diagonal().sum()
    diff = (mean_q - mean_p).unsqueeze(-1)
    maha = (diff.T @ torch.cholesky_solve(diff, lq)).squeeze()
    logdet = 2 * (lq.diagonal().log().sum() - lp.diagonal().log().sum())
    return float(0.5 * (trace + maha - d + logdet))


def family_moments(family: LowRankMixture) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and dense covariance diag(σ²) + U Uᵀ of a one-component family."""
    std = family.std()[0].detach()
    u = family.factors[0].detach()
    return family.mean[0].detach().clone(), torch.diag(std**2) + u @ u.T


def fit_gaussian_family(
    log_target,
    dim: int,
    rank: int,
    *,
    steps: int,
    lr: float,
    num_samples: int,
    mode: SamplingMode,
    seed: int,
) -> LowRankMixture:
    """Fit N(μ, diag σ² + UUᵀ) (rank 0: mean-field) to an unnormalised log-density."""
    g = torch.Generator().manual_seed(seed)
    family = LowRankMixture(torch.zeros(dim, dtype=D), 1.0, rank=rank, factor_std=0.1, generator=g)
    if mode == "unscented" and rank == 0:
        mode = "paired"
    fit_density(
        family, log_target, steps=steps, lr=lr, num_samples=num_samples, mode=mode, generator=g
    )
    return family


def family_label(rank: int) -> str:
    return "MF-VI" if rank == 0 else f"sN-VI rank {rank}"


# ----------------------------------------------------------------------------- gaussian


def random_gaussian(dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """m ~ N(0, I), Σ = A Aᵀ with A_ij ~ N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(dim, generator=g, dtype=D)
    a = torch.randn(dim, dim, generator=g, dtype=D)
    return mean, a @ a.T


def gaussian_experiment(
    seed: int,
    *,
    dim: int = 8,
    ranks: tuple[int, ...] = GAUSSIAN_RANKS,
    steps: int = 4000,
    lr: float = 0.03,
    num_samples: int = 16,
    mode: SamplingMode = "paired",
    on_fit: Callable[[str], None] | None = None,
) -> list[dict]:
    """Rows (seed, method, rank, KL[p‖q], KL[q‖p]) for MAP, MF-VI and sN-VI of each rank;
    ``on_fit(label)`` is told of each fit before it starts."""
    mean, cov = random_gaussian(dim, seed)
    target = torch.distributions.MultivariateNormal(mean, cov)
    rows = [{"seed": seed, "method": "MAP", "rank": "", "kl_p_q": math.inf, "kl_q_p": math.inf}]
    for rank in (0, *ranks):
        if on_fit is not None:
            on_fit(family_label(rank))
        fam = fit_gaussian_family(
            target.log_prob,
            dim,
            rank,
            steps=steps,
            lr=lr,
            num_samples=num_samples,
            mode=mode,
            seed=seed,
        )
        mq, cq = family_moments(fam)
        rows.append(
            {
                "seed": seed,
                "method": family_label(rank),
                "rank": rank,
                "kl_p_q": gaussian_kl(mean, cov, mq, cq),
                "kl_q_p": gaussian_kl(mq, cq, mean, cov),
            }
        )
    return rows


# ----------------------------------------------------------------------------- rbf


def rbf_design(x: torch.Tensor, centres: torch.Tensor, width: float) -> torch.Tensor:
    return torch.exp(-((x[:, None] - centres[None, :]) ** 2) / (2 * width**2))


def rbf_problem(seed: int, num_points: int = 30, noise: float = 0.25, num_basis: int = 10) -> dict:
    """Data, true θ* and the exact posterior of the RBF regression."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.linspace(-1, 1, num_basis, dtype=D)
    width = float(centres[1] - centres[0])
    theta_star = torch.randn(num_basis, generator=g, dtype=D)
    x = torch.rand(num_points, generator=g, dtype=D) * 2 - 1
    phi = rbf_design(x, centres, width)
    y = phi @ theta_star + noise * torch.randn(num_points, generator=g, dtype=D)
    precision = torch.eye(num_basis, dtype=D) + phi.T @ phi / noise**2
    cov = torch.linalg.inv(precision)
    cov = (cov + cov.T) / 2
    mean = cov @ phi.T @ y / noise**2
    return {
        "centres": centres, "width": width, "theta_star": theta_star, "x": x, "y": y,
        "phi": phi, "noise": noise, "post_mean": mean, "post_cov": cov, "precision": precision,
    }  # fmt: skip


def mc_dropout_optimum(problem: dict, keep: float = 0.5) -> torch.Tensor:
    """Exact minimiser of the MC-dropout objective (a ridge regression, see module docstring)."""
    phi, y, s2 = problem["phi"], problem["y"], problem["noise"] ** 2
    a = phi.T @ phi / s2 + torch.diag((1 - keep) / keep * (phi**2).sum(0) / s2)
    a = a + keep * torch.eye(phi.shape[1], dtype=D)
    return torch.linalg.solve(a, phi.T @ y / s2)


def dropout_support(theta: torch.Tensor, keep: float = 0.5) -> torch.Tensor:
    """All 2^J points z ⊙ θ / π of the MC-dropout distribution (J = len(θ))."""
    masks = torch.tensor(list(itertools.product((0.0, 1.0), repeat=theta.shape[0])), dtype=D)
    return masks * theta / keep


def rbf_experiment(
    seed: int,
    *,
    ranks: tuple[int, ...] = RBF_RANKS,
    steps: int = 4000,
    lr: float = 0.03,
    num_samples: int = 16,
    mode: SamplingMode = "paired",
    on_fit: Callable[[str], None] | None = None,
) -> tuple[list[dict], dict]:
    """Rows (method, log q(θ*), KL[p*‖q]) and what the figure needs; ``on_fit(label)`` is
    told of each fit before it starts."""
    pb = rbf_problem(seed)
    phi, y, s2 = pb["phi"], pb["y"], pb["noise"] ** 2
    exact = torch.distributions.MultivariateNormal(pb["post_mean"], pb["post_cov"])
    theta_star = pb["theta_star"]
    dim = theta_star.shape[0]

    def log_joint(theta: torch.Tensor) -> torch.Tensor:
        resid = y - theta @ phi.T
        return -0.5 * resid.pow(2).sum(-1) / s2 - 0.5 * theta.pow(2).sum(-1)

    rows = [
        {"seed": seed, "method": "exact posterior", "rank": "", "log_q_theta_star": float(exact.log_prob(theta_star)), "kl_p_q": 0.0},
        {"seed": seed, "method": "MAP", "rank": "", "log_q_theta_star": -math.inf, "kl_p_q": math.inf},
        {"seed": seed, "method": "MC dropout (p=0.5)", "rank": "", "log_q_theta_star": -math.inf, "kl_p_q": math.inf},
    ]  # fmt: skip
    # the closed-form MF optimum of KL[q‖p] for a Gaussian p: N(μ*, diag(1/Λ_ii))
    mf_cov = torch.diag(1.0 / pb["precision"].diagonal())
    rows.append(
        {
            "seed": seed,
            "method": "MF-VI closed-form optimum",
            "rank": 0,
            "log_q_theta_star": float(
                torch.distributions.MultivariateNormal(pb["post_mean"], mf_cov).log_prob(theta_star)
            ),
            "kl_p_q": gaussian_kl(pb["post_mean"], pb["post_cov"], pb["post_mean"], mf_cov),
        }
    )
    bands = {"exact": (pb["post_mean"], pb["post_cov"])}
    for rank in (0, *ranks):
        if on_fit is not None:
            on_fit(family_label(rank))
        fam = fit_gaussian_family(
            log_joint, dim, rank, steps=steps, lr=lr, num_samples=num_samples, mode=mode, seed=seed
        )
        mq, cq = family_moments(fam)
        q = torch.distributions.MultivariateNormal(mq, cq)
        rows.append(
            {
                "seed": seed,
                "method": family_label(rank),
                "rank": rank,
                "log_q_theta_star": float(q.log_prob(theta_star)),
                "kl_p_q": gaussian_kl(pb["post_mean"], pb["post_cov"], mq, cq),
            }
        )
        bands[family_label(rank)] = (mq, cq)
    extra = {"problem": pb, "dropout_theta": mc_dropout_optimum(pb), "bands": bands}
    return rows, extra


# ----------------------------------------------------------------------------- output


def _fmt(v: float) -> str:
    if isinstance(v, str):
        return v
    if math.isinf(v):
        return "+∞" if v > 0 else "−∞"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.1f}"


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def summary_table(
    rows: list[dict], keys: tuple[str, ...], labels: tuple[str, ...], paper: dict | None = None
) -> str:
    """Markdown: per method, the mean over seeds and each seed's value for every key."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    head = (
        ["method"] + [f"{lab} (mean)" for lab in labels] + [f"{labels[0]} seed {s}" for s in seeds]
    )
    if paper:
        head.append("paper (one draw)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        cells = [m]
        for k in keys:
            vals = [r[k] for r in mine]
            cells.append(_fmt(sum(vals) / len(vals)))
        cells += [_fmt(next(r[keys[0]] for r in mine if r["seed"] == s)) for s in seeds]
        if paper:
            cells.append(_fmt(paper[m]) if m in paper else ("+∞" if m == "MAP" else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_gaussian(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for seed in sorted({r["seed"] for r in rows}):
        pts = [(r["rank"], r["kl_p_q"]) for r in rows if r["seed"] == seed and r["method"] != "MAP"]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"seed {seed}", alpha=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("rank K of the low-rank part (0 = MF-VI; 8 = full)")
    ax.set_ylabel("KL[p ‖ q] (nats)")
    ax.set_title("8-d Gaussian fitted by VI (MAP: KL = +∞)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_rbf(
    extra: dict, path: Path, band_families: tuple[str, ...] = ("MF-VI", "sN-VI rank 2")
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pb = extra["problem"]
    grid = torch.linspace(-1.3, 1.3, 300, dtype=D)
    phi = rbf_design(grid, pb["centres"], pb["width"])
    truth = phi @ pb["theta_star"]
    support = dropout_support(extra["dropout_theta"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    ax = axes[0]
    ax.plot(grid, (support @ phi.T).T, color="tab:orange", alpha=0.03, lw=0.8)
    ax.plot([], [], color="tab:orange", label="MC dropout: all 1024 'samples'")
    ax.plot(grid, truth, "k", lw=2, label="true function")
    ax.plot(pb["x"], pb["y"], "k.", label="data")
    ax.set_title("MC dropout (p = 0.5) on the 10 basis functions")
    ax.legend(fontsize=8, loc="lower left")
    ax = axes[1]
    colours = {"exact": "tab:blue", "MF-VI": "tab:red", "sN-VI rank 2": "tab:green"}
    for name in ("exact", *band_families):
        mean, cov = extra["bands"][name]
        mu = phi @ mean
        sd = ((phi @ cov) * phi).sum(-1).sqrt()
        c = colours.get(name)
        label = "exact posterior" if name == "exact" else name
        ax.fill_between(grid, mu - 2 * sd, mu + 2 * sd, alpha=0.2, color=c, label=f"{label} ±2 sd")
        ax.plot(grid, mu, color=c, lw=1)
    ax.plot(grid, truth, "k", lw=2, label="true function")
    ax.plot(pb["x"], pb["y"], "k.")
    ax.set_title("Gaussian posteriors: mean ± 2 sd of f(x)")
    ax.legend(fontsize=8, loc="lower left")
    for a in axes:
        a.set_xlabel("x")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for the CSV, markdown and PNG files")
    parser.add_argument(
        "--seeds", type=int, default=3, help="number of random problems (seeds 0..N-1)"
    )
    parser.add_argument("--steps", type=int, default=3000, help="Adam steps per fit")
    parser.add_argument("--samples", type=int, default=16, help="draws per ELBO estimate")
    parser.add_argument("--sampling", choices=("naive", "paired", "unscented"), default="paired")
    parser.add_argument("--lr", type=float, default=0.03)


#: Seconds per Adam step of one fit with 1 thread, measured on the shared 2-core development
#: machine (load 5-8, 2026-11-28: 1,000 steps in 9.1-10.2 s a fit, both experiments alike).
SECONDS_PER_STEP = {"gaussian": 0.0095, "rbf": 0.0095}


@contextmanager
def fits_progress(what: str, seeds: int, ranks: tuple[int, ...], steps: int, kind: str) -> Iterator[Callable[..., None]]:
    """Say at once what runs and about how long it takes, then show a bar over the fits;
    yields ``on_fit(label, seed=...)`` for the experiment to call before each fit."""
    from tqdm import tqdm

    fits = seeds * (1 + len(ranks))
    families = "MF-VI and sN-VI of rank " + ", ".join(map(str, ranks))
    minutes = fits * steps * SECONDS_PER_STEP[kind] / 60
    about = f"about {minutes:.0f} min" if minutes >= 1.5 else f"about {60 * minutes:.0f} s"
    print(f"{what}: {families}, {seeds} seed{'s' if seeds > 1 else ''}, {fits} fits of {steps:,} Adam steps "
          f"({about} on 2 cores)", file=sys.stderr, flush=True)
    bar = tqdm(total=fits, desc="fits", unit="fit", dynamic_ncols=True, file=sys.stderr, mininterval=0)
    seen = [0]

    def on_fit(label: str, seed: int = 0) -> None:
        if seen[0]:
            bar.update(1)
        seen[0] += 1
        bar.set_description(f"seed {seed} · {label}")

    started = time.perf_counter()
    try:
        yield on_fit
        bar.update(1)
    finally:
        bar.close()
    print(f"{fits} fits in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def run_gaussian(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with fits_progress("Fitting a random 8-d Gaussian (Le Folgoc et al.)", args.seeds, GAUSSIAN_RANKS,
                       args.steps, "gaussian") as on_fit:
        for seed in range(args.seeds):
            rows += gaussian_experiment(
                seed, steps=args.steps, lr=args.lr, num_samples=args.samples, mode=args.sampling,
                on_fit=lambda label, seed=seed: on_fit(label, seed=seed),
            )
    write_csv(rows, out / "lefolgoc_gaussian.csv")
    table = summary_table(rows, ("kl_p_q", "kl_q_p"), ("KL[p‖q]", "KL[q‖p]"), PAPER_GAUSSIAN)
    (out / "lefolgoc_gaussian.md").write_text(
        f"# 8-d Gaussian fit ({args.seeds} seeds, {args.steps} steps, {args.samples} "
        f"{args.sampling} draws)\n\n{table}"
    )
    plot_gaussian(rows, out / "lefolgoc_gaussian.png")
    print(table)
    return 0


def run_rbf(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    first = None
    with fits_progress("Fitting Bayesian RBF regression (Le Folgoc et al.)", args.seeds, RBF_RANKS,
                       args.steps, "rbf") as on_fit:
        for seed in range(args.seeds):
            r, extra = rbf_experiment(
                seed, steps=args.steps, lr=args.lr, num_samples=args.samples, mode=args.sampling,
                on_fit=lambda label, seed=seed: on_fit(label, seed=seed),
            )
            rows += r
            first = first or extra
    write_csv(rows, out / "lefolgoc_rbf.csv")
    table = summary_table(rows, ("kl_p_q", "log_q_theta_star"), ("KL[p*‖q]", "log q(θ*)"))
    (out / "lefolgoc_rbf.md").write_text(
        f"# RBF regression, 10 basis functions, σ = 0.25 ({args.seeds} seeds, {args.steps} steps)\n\n"
        f"{table}"
    )
    plot_rbf(first, out / "lefolgoc_rbf.png")
    print(table)
    return 0


register(
    Reproduction(
        "lefolgoc-gaussian",
        "Le Folgoc et al.: KL[p‖q] of MAP, MF-VI and sN-VI fits of a random 8-d Gaussian",
        _add_arguments,
        run_gaussian,
    )
)
register(
    Reproduction(
        "lefolgoc-rbf",
        "Le Folgoc et al.: RBF regression, log q(θ*) and KL to the exact posterior, MC dropout's 1024 points",
        _add_arguments,
        run_rbf,
    )
)
