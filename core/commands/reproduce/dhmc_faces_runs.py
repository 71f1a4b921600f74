"""The dhmc-faces reproduction's protocols, runs and scores (:mod:`core.commands.reproduce.dhmc_faces`):
each method's settings in the paper's and the tuned protocol, the paper protocol's chains on
batches in one fixed order, the tuned protocol through each method's own ``fit``, and each run's
mean predictive scored on the test faces (accuracy, within one group, NLL, per group, soft
confusion)."""

from __future__ import annotations

import math
import time
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from core.analysis.metrics import soft_confusion_matrix
from core.commands.reproduce.dhmc_chains import ChainMasks, SoftmaxRegressionTarget
from core.engine.device import on_device, seeded_generator, steps_on
from core.engine.faces.age_groups import AGE_GROUP_NAMES
from core.engine.faces.descriptor import DescriptorInfo
from core.engine.faces.heads import face_arch
from core.engine.inference import get_method, hmc, mc_dropout, mfvi, sghmc, sgld
from core.engine.inference.base import Dataset, Posterior, ProgressRecord
from core.engine.inference.chains import Params
from core.engine.inference.dsghmc import DsghmcConfig, InputDropoutPosterior
from core.engine.runner import Executor

K = len(AGE_GROUP_NAMES)
#: The paper's keep probabilities p of D-SGHMC; the drop rate is 1 − p.
KEEP_PROBS = (0.1, 0.5, 0.9)
DROP_RATES = tuple(round(1 - p, 6) for p in KEEP_PROBS)
DRAWS = 30

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
