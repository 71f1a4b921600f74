"""Hernández et al., D-SGHMC, section 5.2: age groups from face descriptors, on UTKFace.

``bayescope-cli reproduce dhmc-faces --data-dir ../shared/data/utkface --out DIR`` puts the
paper's Bayesian softmax regression, p(y | d, W, b) = softmax(W d + b) with N(0, 1) priors
on W and b, on a pretrained face descriptor d and classifies the eight age groups. The
paper used ADIENCE and VGG-Face (512 features); ADIENCE cannot be obtained here, so this
runs on UTKFace's faces (ages mapped to eight contiguous groups,
:mod:`core.engine.faces.age_groups`) with dlib's 128-d ResNet descriptor, computed once and cached
(:func:`core.engine.data.utkface.load_utkface`), split 80/20 per group with a fixed seed (the
class counts are written as the paper's Table 3). Descriptors are used as they come, with
no centring or scaling, so the heads here are the heads ``train --dataset utkface`` makes.

Every method runs ``--runs`` times (5, as the paper's "5 runs"): SG-MCMC and HMC as that
many independent chains, the optimisation-based methods with that many seeds. Each run's
prediction is the mean predictive over its draws; a table gives mean ± s.d. over runs of
the test accuracy and of the within-one-group accuracy (the prediction is the true group or
a neighbour), as the paper's Table 4 reports accuracy. Two protocols:

``paper``
    The setting of the paper's code, as for its MNIST experiment (:mod:`core.commands.reproduce.dhmc`):
    SGLD (η = 10⁻⁴/(t + 1)^0.55), SGHMC and D-SGHMC (Edward's η = 10⁻⁶, friction 0.5) with
    N(0, 1) starting values, mini-batches of 100 taken in one fixed order every epoch (the
    faces are shuffled once with the seed: UTKFace's file order is sorted by age), the batch
    likelihood scaled by the number of batches, 30 draws per chain taken uniformly from all
    iterates; D-SGHMC keeps its input masks on at prediction, with the paper's keep
    probabilities p ∈ {0.1, 0.5, 0.9}, i.e. drop rates 0.9, 0.5, 0.1.
``tuned``
    Every method through its ordinary ``fit`` (what ``bayescope-cli train`` runs), with
    settings chosen for this problem (:data:`TUNED`): SGLD, SGHMC and D-SGHMC at drop rates
    0.1, 0.5 and 0.9 with shuffled batches, burn-in and evenly thinned draws; full-batch
    HMC; MC dropout (dropout on the descriptor) and mean-field VI, each from ``--runs`` seeds.

Outputs in DIR: ``class_counts.csv`` (Table 3), ``table_<protocol>.csv`` (Table 4),
``per_class_accuracy_<protocol>.csv/png`` (Fig. 11: box plots over runs),
``soft_confusion_<protocol>.csv/png`` (Fig. 10: mean predicted probability of each group
per true group, with the share of mass on or next to the diagonal),
``drop_rate_<protocol>.csv/png`` (Fig. 9: accuracy against the drop rate),
``summary.md`` and ``provenance.json``. The folder is replaced as a whole, atomically.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.analysis.metrics import soft_confusion_matrix
from core.commands.console import (
    CLUSTER_HELP,
    add_device_argument,
    check_cluster,
    chosen_device,
    cluster_for,
    say_where,
)
from core.commands.reproduce import Reproduction, register
from core.commands.reproduce.dhmc_chains import ChainMasks, SoftmaxRegressionTarget
from core.engine.device import on_device, seeded_generator, steps_on
from core.engine.faces.age_groups import ADIENCE_GROUP_NAMES, AGE_GROUP_NAMES
from core.engine.faces.descriptor import DescriptorInfo
from core.engine.faces.heads import face_arch
from core.engine.files import strict_json
from core.engine.inference import get_method, hmc, mc_dropout, mfvi, sghmc, sgld
from core.engine.inference.base import Dataset, Posterior, ProgressRecord
from core.engine.inference.dsghmc import DsghmcConfig, InputDropoutPosterior
from core.engine.inference.sampling import Params
from core.engine.runner import Executor

K = len(AGE_GROUP_NAMES)
#: The paper's keep probabilities p of D-SGHMC; the drop rate is 1 − p.
KEEP_PROBS = (0.1, 0.5, 0.9)
DROP_RATES = tuple(round(1 - p, 6) for p in KEEP_PROBS)
DRAWS = 30
#: The paper's Table 4 (ADIENCE, VGG-Face descriptors), mean ± s.d. test accuracy in %, by
#: method label. Left empty: the table could not be read from here. The stored copies of
#: arXiv 1805.04756 (ar5iv) and of its earlier version (groundai) answer searches with their
#: opening passages only; no search reached the results section (docs/reproduction.md), and
#: no number is typed from memory. The authors' own analysis script holds five-run ADIENCE
#: accuracies that may be those behind Table 4 and Fig. 9; as that cannot be checked here,
#: they are quoted with their source in docs/reproduction.md, not put in this table. Fill it
#: from the paper to have its numbers printed beside ours.
PAPER_TABLE4: dict[str, tuple[float, float]] = {}

#: Settings of the tuned protocol, chosen on this split (see docs/reproduction.md).
TUNED: dict[str, Any] = {
    "sgld_step": 2e-4,
    "sghmc_step": 5e-5,
    "friction": 0.1,
    "hmc_warmup": 200,
    "hmc_samples": 100,
    "hmc_leapfrog": 25,
    "dropout_rate": 0.1,
    "dropout_epochs": 50,
    "dropout_lr": 0.01,
    "mfvi_epochs": 50,
    "mfvi_lr": 0.01,
}


@dataclass(frozen=True)
class FaceRun:
    """One method of a protocol: its label in the tables, method name, config and rates."""

    label: str
    method: str
    config: Any
    drop_rate: float = 0.0  # D-SGHMC's input drop rate, or MC dropout's


def paper_runs(epochs: int, runs: int) -> list[FaceRun]:
    """SGLD, SGHMC and D-SGHMC with the settings of the paper's code (see module docstring)."""
    common = {"batch_size": 100, "prior_std": 1.0, "init": "prior", "burn_in_epochs": 0,
              "thin": 1, "epochs": epochs, "num_chains": runs}
    out = [
        FaceRun("SGLD", "sgld", sgld.SgldConfig(
            **common, step_size=1e-4, schedule="polynomial", decay_offset=1.0, decay_power=0.55)),
        FaceRun("SGHMC", "sghmc", sghmc.SghmcConfig(**common, step_size=1e-6, friction=0.5)),
    ]
    for p in KEEP_PROBS:
        drop = round(1 - p, 6)
        out.append(FaceRun(f"D-SGHMC drop {drop:g}", "dsghmc", DsghmcConfig(
            **common, step_size=1e-6, friction=0.5, drop_rate=drop, mask_at_prediction=True), drop))
    return out


def tuned_runs(epochs: int, runs: int, num_train: int) -> list[FaceRun]:
    """Every method through its own ``fit`` with :data:`TUNED` settings."""
    steps = epochs * math.ceil(num_train / 100)
    burn = epochs // 2
    thin = max(1, (steps - burn * math.ceil(num_train / 100)) // DRAWS)
    common = {"batch_size": 100, "prior_std": 1.0, "init": "prior", "burn_in_epochs": burn,
              "thin": thin, "epochs": epochs, "num_chains": runs}
    out = [
        FaceRun("SGLD", "sgld", sgld.SgldConfig(**common, step_size=TUNED["sgld_step"])),
        FaceRun("SGHMC", "sghmc", sghmc.SghmcConfig(
            **common, step_size=TUNED["sghmc_step"], friction=TUNED["friction"])),
    ]
    for drop in DROP_RATES[::-1]:
        out.append(FaceRun(f"D-SGHMC drop {drop:g}", "dsghmc", DsghmcConfig(
            **common, step_size=TUNED["sghmc_step"], friction=TUNED["friction"], drop_rate=drop,
            mask_at_prediction=True), drop))
    out += [
        FaceRun("HMC", "hmc", hmc.HmcConfig(
            num_chains=runs, num_warmup=TUNED["hmc_warmup"], num_samples=TUNED["hmc_samples"],
            thin=max(1, TUNED["hmc_samples"] // DRAWS), num_leapfrog=TUNED["hmc_leapfrog"],
            prior_std=1.0)),
        FaceRun("MC dropout", "mc_dropout", mc_dropout.McDropoutConfig(
            epochs=TUNED["dropout_epochs"], lr=TUNED["dropout_lr"], batch_size=100, num_samples=100),
            TUNED["dropout_rate"]),
        FaceRun("MF-VI", "mfvi", mfvi.MfviConfig(
            epochs=TUNED["mfvi_epochs"], lr=TUNED["mfvi_lr"], batch_size=100, predict_samples=100)),
    ]
    return out


# ------------------------------------------------------------------------------ scoring


@dataclass
class RunScores:
    """Scores of one method over its runs (R of them)."""

    accuracy: np.ndarray  # (R,) in %
    within_one: np.ndarray  # (R,) in %: predicted group is the true one or a neighbour
    nll: np.ndarray  # (R,) mean negative log-likelihood of the mean predictive
    class_accuracy: np.ndarray  # (R, K) in %, NaN for a group without test faces
    soft_confusion: np.ndarray  # (K, K) mean over runs
    seconds: float = 0.0
    draws_per_run: int = 0

    @property
    def diagonal_mass(self) -> float:
        """Mean over true groups of the predicted mass on the true group or a neighbour."""
        m = self.soft_confusion
        near = np.abs(np.subtract.outer(np.arange(len(m)), np.arange(len(m)))) <= 1
        return float(np.nanmean((m * near).sum(1)))


def score_runs(run_means: list[np.ndarray], labels: np.ndarray) -> RunScores:
    """Scores of each run's mean predictive (N, K) on the test labels (N,)."""
    labels = np.asarray(labels, dtype=np.int64)
    accs, within, nlls, per_class, soft = [], [], [], [], []
    counts = np.bincount(labels, minlength=K).astype(np.float64)
    for mean in run_means:
        pred = mean.argmax(1)
        accs.append(100.0 * float((pred == labels).mean()))
        within.append(100.0 * float((np.abs(pred - labels) <= 1).mean()))
        nlls.append(float(-np.log(np.clip(mean[np.arange(len(labels)), labels], 1e-12, None)).mean()))
        hits = np.bincount(labels, weights=(pred == labels).astype(np.float64), minlength=K)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_class.append(100.0 * hits / counts)
        soft.append(soft_confusion_matrix(mean, labels))
    return RunScores(np.array(accs), np.array(within), np.array(nlls), np.array(per_class),
                     np.mean(soft, axis=0))


def run_means(
    posterior: Posterior, x: torch.Tensor, generator: torch.Generator, batch: int = 2048
) -> list[np.ndarray]:
    """Mean predictive (N, K) of every run (chain) of a posterior; one run when it has none."""
    ids = posterior.chain_ids() if hasattr(posterior, "chain_ids") else None
    parts = []
    for start in range(0, len(x), batch):
        p = posterior.predict_proba(x[start : start + batch], generator=generator).double()
        if ids is None:
            parts.append(p.mean(0, keepdim=True))
        else:
            parts.append(torch.stack([p[ids == c].mean(0) for c in torch.unique(ids)]))
    means = torch.cat(parts, dim=1).numpy()
    return list(means)


# ------------------------------------------------------------------------------ paper protocol


def _fixed_order_batches(
    x: torch.Tensor, y: torch.Tensor, chains: int, batch_size: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive batches of one fixed shuffled order, the same every epoch, for all chains."""
    order = torch.randperm(len(y), generator=generator)
    x, y = x[order], y[order]
    while True:
        for start in range(0, len(y) - batch_size + 1, batch_size):
            xb, yb = x[start : start + batch_size], y[start : start + batch_size]
            yield xb.expand(chains, *xb.shape), yb.expand(chains, *yb.shape)


def run_paper_group(
    runs: list[FaceRun],
    train: Dataset,
    *,
    chains: int,
    draws: int,
    generator: torch.Generator,
) -> Generator[ProgressRecord, None, list[Params]]:
    """The paper's loop for runs sharing one update rule (SGLD alone, or SGHMC with D-SGHMC).

    All ``chains × len(runs)`` chains move together; D-SGHMC chains get their input masks
    (:class:`~core.commands.reproduce.dhmc_chains.ChainMasks`, one drop rate per chain). Returns each run's
    draws with leading dims (chain, draw).
    """
    config = runs[0].config
    module = sgld if runs[0].method == "sgld" else sghmc
    for run in runs:
        if (run.config.step_size, getattr(run.config, "friction", None)) != (
                config.step_size, getattr(config, "friction", None)):
            raise ValueError("runs vectorised together must share step size and friction")
    total = chains * len(runs)
    drop = torch.tensor([r.drop_rate for r in runs for _ in range(chains)])
    x, y = train.x.float(), train.y
    n, d = x.shape
    steps_per_epoch = n // config.batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"the paper protocol needs at least {config.batch_size} training faces, got {n}")
    num_steps = config.epochs * steps_per_epoch
    params = {
        "linear.weight": config.prior_std * torch.randn(total, K, d, generator=generator),
        "linear.bias": config.prior_std * torch.randn(total, K, generator=generator),
    }
    target = SoftmaxRegressionTarget(float(steps_per_epoch), n, config.prior_std)
    batches = _fixed_order_batches(x, y, total, config.batch_size, generator)
    chosen = torch.randint(0, num_steps, (total, draws), generator=generator)  # Edward's Empirical
    wanted: dict[int, list[tuple[int, int]]] = {}
    for c in range(total):
        for j in range(draws):
            wanted.setdefault(int(chosen[c, j]), []).append((c, j))
    masks = ChainMasks(drop, (config.batch_size, d))
    out = {k: torch.empty(total, draws, *v.shape[1:]) for k, v in params.items()}
    state = module.init(params, config=config, generator=generator)
    every = max(1, num_steps // 200)
    for t in range(num_steps):
        xb, yb = next(batches)
        state, info = module.step(state, (masks.apply(xb, generator), yb), generator, config=config, target=target)
        for c, j in wanted.get(t, ()):
            for k, v in state.params.items():
                out[k][c, j] = v[c]
        if (t + 1) % every == 0 or t + 1 == num_steps:
            logp = info["log_posterior"]
            if not bool(torch.isfinite(logp).all()):
                raise FloatingPointError(f"{runs[0].label}: the log posterior diverged at step {t + 1}")
            yield ProgressRecord(t + 1, num_steps, {"log_posterior": float(logp.mean())}, "sampling")
    return [{k: v[i * chains : (i + 1) * chains] for k, v in out.items()} for i in range(len(runs))]


# ------------------------------------------------------------------------------ protocols


@dataclass
class ProtocolResult:
    protocol: str
    scores: dict[str, RunScores] = field(default_factory=dict)
    runs: dict[str, FaceRun] = field(default_factory=dict)


def run_protocol(
    protocol: str,
    train: Dataset,
    test: Dataset,
    info: DescriptorInfo,
    *,
    runs: int = 5,
    epochs: int = 100,
    seed: int = 0,
    methods: set[str] | None = None,
    device: torch.device | None = None,
    executor: Executor | None = None,
) -> Generator[ProgressRecord, None, ProtocolResult]:
    """Fit and score every method of ``protocol`` ("paper" or "tuned"), yielding progress.

    ``methods`` keeps only the runs whose label starts with one of its entries. Fits and
    predictions run on ``device`` (None: the CPU); the scores are computed on the CPU. With an
    ``executor`` (``--cluster``), the tuned protocol's independent parts run as its tasks:
    each chain of a sampler, each seed of the other methods; the results are those of the
    run here. The paper protocol's groups share one generator and always run here.
    """
    from core.engine.runner import RemoteTask, fit_part, fit_posterior, fit_posterior_on

    arch = face_arch(info)
    where = str(device or "cpu")  # a task's device, by name
    plan = paper_runs(epochs, runs) if protocol == "paper" else tuned_runs(epochs, runs, len(train))
    if methods:
        plan = [r for r in plan if any(r.label.startswith(m) for m in methods)]
    result = ProtocolResult(protocol)
    labels = test.y.numpy()
    x_test = test.x.float()
    if protocol == "paper":
        groups = [[r for r in plan if r.method == "sgld"], [r for r in plan if r.method != "sgld"]]
        on = train if device is None else Dataset(train.x.to(device), train.y.to(device), train.name)
        for i, group in enumerate(g for g in groups if g):
            generator = seeded_generator(seed * 1000 + i, device)
            start = time.perf_counter()
            drawn = yield from _tagged(steps_on(device, run_paper_group(group, on, chains=runs, draws=DRAWS,
                                                                        generator=generator)),
                                       "+".join(r.label for r in group))
            seconds = time.perf_counter() - start
            for run, samples in zip(group, drawn, strict=True):
                config = {**asdict(run.config), "mask_at_prediction": run.method == "dsghmc"}
                with on_device(device):  # built where its draws are
                    posterior = InputDropoutPosterior(run.method, arch, config, seed, train.name, samples)
                generator = torch.Generator().manual_seed(seed * 1000 + 99)
                scores = score_runs(run_means(posterior, x_test, generator), labels)
                scores.seconds, scores.draws_per_run = seconds / len(group), DRAWS
                result.scores[run.label], result.runs[run.label] = scores, run
        return result
    for run in plan:
        method = get_method(run.method)
        start = time.perf_counter()
        if run.method in ("sgld", "sghmc", "dsghmc", "hmc"):  # `runs` chains in one fit
            fit = (fit_posterior(method, run.config, arch, train, seed, device=device) if executor is None
                   else fit_posterior_on(executor, method, run.config, arch, train, seed, device=where))
            posterior = yield from _tagged(fit, run.label)
            means = run_means(posterior, x_test, torch.Generator().manual_seed(seed * 1000 + 99))
            draws = posterior.num_draws
        else:  # one fit per run, seeds seed … seed + runs − 1
            run_arch = face_arch(info, drop_rate=run.drop_rate)
            if executor is None:
                posteriors = []
                for r in range(runs):
                    posteriors.append((yield from _tagged(
                        fit_posterior(method, run.config, run_arch, train, seed + r, device=device),
                        f"{run.label} run {r + 1}")))
            else:
                shared = executor.share(train)
                tasks = [RemoteTask(fit_part, (run.method, run.config, run_arch, shared, seed + r, None, None, None, where),
                                    f"{run.label} run {r + 1}", gpus=1.0 if where.startswith("cuda") else 0.0)
                         for r in range(runs)]
                posteriors = yield from _tagged(executor.run(tasks, run.label), f"{run.label}: {runs} runs")
            means = []
            for r, posterior in enumerate(posteriors):
                means += run_means(posterior, x_test, torch.Generator().manual_seed(seed * 1000 + 99 + r))
            draws = posterior.default_num_samples
        scores = score_runs(means, labels)
        scores.seconds, scores.draws_per_run = time.perf_counter() - start, draws
        result.scores[run.label], result.runs[run.label] = scores, run
    return result


def _tagged(run: Generator[ProgressRecord, None, Any], label: str) -> Generator[ProgressRecord, None, Any]:
    """Pass a fit's records on with the run's label as their phase."""
    try:
        while True:
            record = next(run)
            yield ProgressRecord(record.step, record.total, record.values, label)
    except StopIteration as stop:
        return stop.value
    finally:
        run.close()


# ------------------------------------------------------------------------------ outputs


def _fmt(values: np.ndarray) -> str:
    values = np.asarray(values, dtype=np.float64)
    sd = values.std(ddof=1) if len(values) > 1 else 0.0
    return f"{values.mean():.2f} ± {sd:.2f}"


def _sd(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def table_rows(result: ProtocolResult) -> list[dict[str, Any]]:
    rows = []
    for label, s in result.scores.items():
        run = result.runs[label]
        rows.append({
            "protocol": result.protocol, "method": label, "drop_rate": run.drop_rate,
            "runs": len(s.accuracy), "draws_per_run": s.draws_per_run,
            "accuracy_mean": round(float(s.accuracy.mean()), 3), "accuracy_sd": round(_sd(s.accuracy), 3),
            "within_one_mean": round(float(s.within_one.mean()), 3), "within_one_sd": round(_sd(s.within_one), 3),
            "nll_mean": round(float(s.nll.mean()), 4),
            "diagonal_mass": round(s.diagonal_mass, 4),
            "per_run_accuracy": " ".join(f"{a:.2f}" for a in s.accuracy),
            "seconds": round(s.seconds, 1),
        })
    return rows


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def per_class_accuracy_figure(result: ProtocolResult):
    """Fig. 11: each group's test accuracy over runs, a box per method and group."""
    from matplotlib import colormaps

    names = list(result.scores)
    fig = _figure(min(16.0, 1.6 + 0.25 * K * (len(names) + 1)), 4.0)
    ax = fig.subplots()
    width = 0.8 / max(len(names), 1)
    cmap = colormaps["tab10"]
    for i, name in enumerate(names):
        values = result.scores[name].class_accuracy
        positions = np.arange(K) + (i - (len(names) - 1) / 2) * width
        box = ax.boxplot([col[np.isfinite(col)] for col in values.T], positions=positions, widths=width * 0.85,
                         patch_artist=True, manage_ticks=False, showfliers=False, medianprops={"color": "black"})
        for patch in box["boxes"]:
            patch.set_facecolor(cmap(i % 10))
            patch.set_alpha(0.5)
        box["boxes"][0].set_label(name)
    ax.set_xticks(range(K), AGE_GROUP_NAMES)
    ax.set_xlabel("true age group (years)")
    ax.set_ylabel(f"test accuracy per group over {len(next(iter(result.scores.values())).accuracy)} runs (%)")
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=min(4, len(names)))
    ax.set_title(f"Per-group accuracy ({result.protocol} protocol)", fontsize=10)
    return fig


def soft_confusion_figure(result: ProtocolResult, names: list[str]):
    """Fig. 10: mean predicted probability of each group (columns) per true group (rows)."""
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = _figure(3.9 * cols + 0.8, 4.0 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax in axes[len(names):]:
        ax.set_visible(False)
    axes = axes[: len(names)]
    image = None
    for ax, name in zip(axes, names, strict=True):
        m = result.scores[name].soft_confusion
        image = ax.imshow(m, vmin=0, vmax=1, cmap="Blues")
        for i in range(K):
            for j in range(K):
                if np.isfinite(m[i, j]) and m[i, j] >= 0.005:
                    ax.text(j, i, f"{m[i, j]:.2f}"[1:] if m[i, j] < 1 else "1", ha="center", va="center",
                            fontsize=6, color="white" if m[i, j] > 0.6 else "black")
        ax.set_xticks(range(K), AGE_GROUP_NAMES, fontsize=7, rotation=45)
        ax.set_yticks(range(K), AGE_GROUP_NAMES, fontsize=7)
        ax.set_xlabel("predicted group")
        ax.set_ylabel("true group")
        ax.set_title(f"{name}\n{100 * result.scores[name].diagonal_mass:.0f}% of the mass within one group",
                     fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=list(axes), shrink=0.8, label="mean predicted probability")
    return fig


def drop_rate_figure(results: dict[str, ProtocolResult]):
    """Fig. 9: D-SGHMC's accuracy against the drop rate, SGHMC and SGLD as lines."""
    fig = _figure(5.6, 3.8)
    ax = fig.subplots()
    colours = {"paper": "tab:red", "tuned": "tab:blue"}
    for protocol, result in results.items():
        rates = [r for r in DROP_RATES if f"D-SGHMC drop {r:g}" in result.scores]
        if rates:
            accs = [result.scores[f"D-SGHMC drop {r:g}"].accuracy for r in rates]
            ax.errorbar(rates, [a.mean() for a in accs], yerr=[_sd(a) for a in accs], marker="o", capsize=3,
                        color=colours.get(protocol), label=f"D-SGHMC ({protocol})")
        for name, style in (("SGHMC", "--"), ("SGLD", ":")):
            if name in result.scores:
                ax.axhline(result.scores[name].accuracy.mean(), ls=style, lw=1, color=colours.get(protocol),
                           label=f"{name} ({protocol})")
    ax.set_xlabel("drop rate of the descriptor's values (paper's p = 1 − drop rate)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("D-SGHMC on UTKFace descriptors: sensitivity to the drop rate", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return fig


def write_outputs(
    out: Path, results: dict[str, ProtocolResult], train: Dataset, test: Dataset, facts: dict[str, Any]
) -> str:
    """Every table, figure and the summary into ``out``; returns the summary's text."""
    _write_csv(out / "class_counts.csv", ["group", "adience_group", "train", "test"],
               [[g, a, int((train.y == k).sum()), int((test.y == k).sum())]
                for k, (g, a) in enumerate(zip(AGE_GROUP_NAMES, ADIENCE_GROUP_NAMES, strict=True))])
    for protocol, result in results.items():
        rows = table_rows(result)
        _write_csv(out / f"table_{protocol}.csv", list(rows[0]), [list(r.values()) for r in rows])
        _write_csv(out / f"per_class_accuracy_{protocol}.csv", ["method", "run", *AGE_GROUP_NAMES],
                   [[name, r, *[f"{v:.3f}" for v in row]] for name, s in result.scores.items()
                    for r, row in enumerate(s.class_accuracy)])
        _write_csv(out / f"soft_confusion_{protocol}.csv", ["method", "true_group", *AGE_GROUP_NAMES],
                   [[name, AGE_GROUP_NAMES[i], *[f"{v:.4f}" for v in row]] for name, s in result.scores.items()
                    for i, row in enumerate(s.soft_confusion)])
        per_class_accuracy_figure(result).savefig(out / f"per_class_accuracy_{protocol}.png")
        shown = [n for n in ("SGLD", "SGHMC", "D-SGHMC drop 0.5", "HMC", "MC dropout", "MF-VI")
                 if n in result.scores]
        if shown:
            soft_confusion_figure(result, shown).savefig(out / f"soft_confusion_{protocol}.png", bbox_inches="tight")
        _write_csv(out / f"drop_rate_{protocol}.csv", ["drop_rate", "paper_keep_p", "accuracy_mean", "accuracy_sd"],
                   [[r, round(1 - r, 6), f"{result.scores[f'D-SGHMC drop {r:g}'].accuracy.mean():.3f}",
                     f"{_sd(result.scores[f'D-SGHMC drop {r:g}'].accuracy):.3f}"]
                    for r in DROP_RATES if f"D-SGHMC drop {r:g}" in result.scores])
    if any(any(n.startswith("D-SGHMC") for n in r.scores) for r in results.values()):
        drop_rate_figure(results).savefig(out / "drop_rate.png")
    lines = [f"# D-SGHMC, age groups from face descriptors (UTKFace, {facts['descriptor']})", "",
             f"{len(train)} training and {len(test)} test faces; {facts['runs']} runs per method; "
             f"wall time {facts['wall_seconds']:.0f} s.", ""]
    for protocol, result in results.items():
        lines += [f"## {protocol} protocol", "",
                  "| method | test accuracy % | within one group % | NLL | mass within one group | paper (ADIENCE) |",
                  "|---|---|---|---|---|---|"]
        for label, s in result.scores.items():
            paper = PAPER_TABLE4.get(label)
            ref = f"{paper[0]:.2f} ± {paper[1]:.2f}" if paper else "n/a"
            lines.append(f"| {label} | {_fmt(s.accuracy)} | {_fmt(s.within_one)} | {s.nll.mean():.3f} | "
                         f"{100 * s.diagonal_mass:.0f}% | {ref} |")
        lines.append("")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for the CSV, PNG and markdown files (replaced)")
    parser.add_argument("--data-dir", help="UTKFace's archive or folder (default: the user cache)")
    parser.add_argument("--protocol", choices=("paper", "tuned", "both"), default="both")
    parser.add_argument("--runs", type=int, default=5, help="runs (chains or seeds) per method")
    parser.add_argument("--epochs", type=int, default=100, help="passes over the training faces (SG-MCMC)")
    parser.add_argument("--methods", default="all",
                        help="comma-separated label prefixes, e.g. SGLD,SGHMC,D-SGHMC,HMC,MC dropout,MF-VI")
    parser.add_argument("--limit", type=int, help="use only N faces (a quick look; not the reproduction)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    add_device_argument(parser)
    parser.add_argument("--cluster", metavar="ADDRESS",
                        help=CLUSTER_HELP + " (the tuned protocol's chains and runs; the paper protocol runs here)")


def _is_ours(folder: Path) -> bool:
    try:
        return json.loads((folder / "provenance.json").read_text()).get("reproduction") == "dhmc-faces"
    except (OSError, ValueError, AttributeError):
        return False


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from core.engine.data.utkface import load_utkface
    from core.engine.files import check_output_folder, replacing_folder
    from core.engine.runner import drain

    if args.runs < 1 or args.epochs < 1:
        raise ValueError("--runs and --epochs must be at least 1")
    device = chosen_device(args)
    check_cluster(args.cluster)
    check_output_folder(args.out, _is_ours, "the reproduction")
    torch.set_num_threads(args.threads)
    methods = None if args.methods == "all" else {m.strip() for m in args.methods.split(",") if m.strip()}
    start = time.perf_counter()
    with tqdm(desc="face descriptors", unit="face", file=sys.stderr, dynamic_ncols=True) as bar:
        def show(record: ProgressRecord) -> None:
            bar.total, bar.n = record.total, record.step
            bar.refresh()

        split = drain(load_utkface(args.data_dir, limit=args.limit), show)
    info = split.table.info
    protocols = ("paper", "tuned") if args.protocol == "both" else (args.protocol,)
    results: dict[str, ProtocolResult] = {}
    say_where("Running", device)
    with tqdm(desc="dhmc-faces", unit="step", file=sys.stderr, dynamic_ncols=True) as bar:
        def progress(record: ProgressRecord) -> None:
            bar.total, bar.n = record.total, record.step
            bar.set_description_str(f"{record.phase[:40]}", refresh=False)
            bar.refresh()

        with cluster_for(args.cluster) as cluster:
            for protocol in protocols:
                results[protocol] = drain(run_protocol(protocol, split.train, split.test, info, runs=args.runs,
                                                       epochs=args.epochs, seed=args.seed, methods=methods,
                                                       device=device, executor=cluster), progress)
                for label, s in results[protocol].scores.items():
                    tqdm.write(f"{protocol:6s} {label:18s} accuracy {_fmt(s.accuracy)} %  within one "
                               f"{_fmt(s.within_one)} %  ({s.seconds:.0f} s)", file=sys.stderr)
    wall = time.perf_counter() - start
    facts = {"descriptor": info.describe(), "runs": args.runs, "wall_seconds": wall}
    with replacing_folder(args.out, _is_ours, "the reproduction") as tmp:
        summary = write_outputs(tmp, results, split.train, split.test, facts)
        (tmp / "summary.md").write_text(summary)
        provenance = {
            "reproduction": "dhmc-faces", "command": " ".join(sys.argv), "protocols": list(protocols),
            "runs": args.runs, "epochs": args.epochs, "seed": args.seed, "limit": args.limit,
            "tuned_settings": TUNED, "wall_seconds": round(wall, 1), "torch_threads": torch.get_num_threads(),
            "device": str(device),
            "train": {k: v for k, v in split.train.source.items()},
            "test_faces": len(split.test), "descriptor": info.to_dict(),
            "runs_config": {p: {label: {"method": run.method, **asdict(run.config)}
                                for label, run in r.runs.items()} for p, r in results.items()},
        }
        (tmp / "provenance.json").write_text(strict_json(provenance, indent=1))
    print(summary)
    return 0


register(Reproduction("dhmc-faces", "D-SGHMC paper: age groups from face descriptors (UTKFace; Table 4, Figs. 9-11)",
                      add_arguments, run))
