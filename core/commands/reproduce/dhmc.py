"""Hernández et al., D-SGHMC: softmax regression on MNIST (Table 2, the p sweep, Figs. 4–5).

``bayescope-cli reproduce dhmc-mnist --out DIR`` runs SGLD, SGHMC and D-SGHMC (at the paper's
p ∈ {0.1, 0.5, 0.9}) on softmax regression, p(y | x, W, b) = softmax(Wx + b), with N(0, 1)
priors on W and b, mini-batches of 100, 100 epochs, 5 independent chains and 30 predictive
draws per chain, under two protocols:

``paper``
    What the authors' code (Edward 1.3 ``sgld.py`` / ``sghmc.py``) ran: the first 55,000
    training images (TensorFlow's split), inputs centred by the per-pixel training mean,
    batches taken in file order every epoch, the batch likelihood scaled by the number of
    batches (550), N(0, 1) starting values; one update per batch (100 × 550 = 55,000; their
    ``n_iter = n_samples + 500`` only sizes the progress bar). SGLD:
    θ ← θ + ½ηₜ ĝ + N(0, ηₜ), ηₜ = 10⁻⁴/(t + 1)^0.55; SGHMC (Edward's ``step_size`` 10⁻⁴ ×
    0.01 = η = 10⁻⁶, friction 1): v ← ½v + η ĝ + N(0, η), θ ← θ + v; D-SGHMC the same on
    inputs masked with keep probability p (kept values scaled by 1/p), masks also on the
    test images at prediction. 30 draws are taken uniformly, with replacement, from all
    55,000 iterates (no burn-in, Edward's ``Empirical.sample``); the accuracy is that of the
    mean predictive.
``tuned``
    The same model, data and priors with sampler settings one would choose: random per-chain
    batch order, constant step sizes, half the run as burn-in, 30 draws evenly thinned from
    the rest. D-SGHMC is reported with and without masks at prediction. The step sizes
    (:data:`TUNED`) were chosen by :func:`tune_step_sizes` on a validation split, the training
    images after the first 55,000, never on test images; ``--tune`` chooses them again.

The paper's p is the keep probability of its Algorithm 1 and code, so drop rate = 1 − p.
Outputs in DIR: ``table_<protocol>.csv`` (mean ± s.d. of the accuracy over chains),
``sensitivity.csv/png`` (accuracy versus p), ``per_class_error_<protocol>.csv/png`` (box
plots over chains), ``probability_matrix_<protocol>.csv/png`` (mean predicted probability
per true class), ``summary.md``.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.commands.console import add_device_argument, chosen_device, say_where
from core.commands.reproduce import Reproduction, register
from core.engine.device import on_device, seeded_generator
from core.engine.inference import dsghmc, sghmc, sgld
from core.engine.inference.dsghmc import InputDropoutPosterior
from core.engine.inference.sampling import Params, gaussian_log_prior
from core.engine.models import ArchSpec

PAPER_TABLE2 = {"SGLD": (88.06, 0.18), "SGHMC": (90.94, 0.28), "D-SGHMC p=0.5": (91.72, 0.11)}
KEEP_PROBS = (0.1, 0.5, 0.9)
ARCH = ArchSpec("softmax", num_classes=10)
PIXELS = 28 * 28


# ------------------------------------------------------------------------------ the target


class SoftmaxRegressionTarget:
    """log p(W, b | batch) = s Σᵢ log softmax(W xᵢ + b)_{yᵢ} − ½(‖W‖² + ‖b‖²)/σ², batched.

    Parameters are chain-stacked with the names of :class:`core.engine.models.SoftmaxRegression`
    (``linear.weight`` (C, K, D), ``linear.bias`` (C, K)); the gradient is the closed form
    s Σᵢ (onehot(yᵢ) − pᵢ) xᵢᵀ − W/σ², one batched matmul for all chains.
    """

    def __init__(self, scale: float | None, num_data: int, prior_std: float = 1.0) -> None:
        self.scale = scale
        self.num_data = num_data
        self.prior_std = prior_std

    def log_prob_and_grad(
        self, params: Params, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, Params]:
        x, y = batch  # (C, B, D), (C, B)
        w, b = params["linear.weight"], params["linear.bias"]
        scale = self.scale if self.scale is not None else self.num_data / y.shape[1]
        logits = torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))
        logp = torch.log_softmax(logits, dim=-1)
        ll = logp.gather(-1, y.unsqueeze(-1)).squeeze(-1).sum(1)
        residual = -logp.exp()
        residual.scatter_add_(-1, y.unsqueeze(-1), torch.ones_like(y, dtype=x.dtype).unsqueeze(-1))
        residual *= scale
        var = self.prior_std**2
        grad = {
            "linear.weight": torch.bmm(residual.transpose(1, 2), x) - w / var,
            "linear.bias": residual.sum(1) - b / var,
        }
        return scale * ll + gaussian_log_prior(params, self.prior_std), grad


# ----------------------------------------------------------------------------------- data


@dataclass
class MnistArrays:
    x_train: torch.Tensor  # (N, D), centred
    y_train: torch.Tensor
    x_test: torch.Tensor  # (M, D), centred by the training mean
    y_test: torch.Tensor


def load_mnist(root: str | None, num_train: int, limit_test: int | None = None) -> MnistArrays:
    from core.engine.data.datasets import load_split

    train = load_split("mnist", "train", root=root)
    test = load_split("mnist", "test", root=root)
    x = train.x[:num_train].reshape(-1, PIXELS)
    mean = x.mean(0)
    xt = test.x.reshape(-1, PIXELS)
    yt = test.y
    if limit_test:
        xt, yt = xt[:limit_test], yt[:limit_test]
    return MnistArrays(x - mean, train.y[:num_train], xt - mean, yt)


def validation_ranges(num_images: int, num_train: int, num_validation: int) -> tuple[range, range]:
    """Rows of the training file to train on and to validate on: 0..N and N..N+V (fewer if
    the file ends first), disjoint by construction."""
    if num_train >= num_images:
        raise ValueError(f"--train-size {num_train} leaves none of the {num_images} training images "
                         "for validation; lower it to tune on a held-out tail of the training set")
    return range(num_train), range(num_train, min(num_train + num_validation, num_images))


def load_mnist_validation(root: str | None, num_train: int, num_validation: int) -> MnistArrays:
    """The first ``num_train`` training images and, in the slot of the test images, the next
    ``num_validation`` ones (:func:`validation_ranges`), both centred by the training mean.

    Reads only the training file: tuning on it never sees a test image.
    """
    from core.engine.data.datasets import load_split

    train = load_split("mnist", "train", root=root)
    fit, held_out = validation_ranges(len(train.y), num_train, num_validation)
    x = train.x.reshape(-1, PIXELS)
    mean = x[fit.start : fit.stop].mean(0)
    return MnistArrays(x[fit.start : fit.stop] - mean, train.y[fit.start : fit.stop],
                       x[held_out.start : held_out.stop] - mean, train.y[held_out.start : held_out.stop])


def file_order_batches(
    data: MnistArrays, chains: int, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The authors' ``next_batch``: consecutive batches in file order, every epoch the same."""
    n = len(data.y_train)
    while True:
        for start in range(0, n - batch_size + 1, batch_size):
            x = data.x_train[start : start + batch_size]
            y = data.y_train[start : start + batch_size]
            yield x.expand(chains, *x.shape), y.expand(chains, *y.shape)


def shuffled_batches(
    data: MnistArrays, chains: int, batch_size: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    n = len(data.y_train)
    while True:
        orders = torch.stack([torch.randperm(n, generator=generator) for _ in range(chains)])
        for idx in orders.split(batch_size, dim=1):
            if idx.shape[1] == batch_size:
                yield data.x_train[idx], data.y_train[idx]


# ------------------------------------------------------------------------------------ runs


@dataclass(frozen=True)
class RunSpec:
    label: str
    method: str  # "sgld" | "sghmc" | "dsghmc"
    config: Any
    keep_prob: float | None = None  # the paper's p, for D-SGHMC


def paper_specs(epochs: int = 100) -> list[RunSpec]:
    common = {"batch_size": 100, "prior_std": 1.0, "init": "prior", "burn_in_epochs": 0,
              "thin": 1, "epochs": epochs, "num_chains": 5}
    specs = [
        RunSpec("SGLD", "sgld", sgld.SgldConfig(
            **common, step_size=1e-4, schedule="polynomial", decay_offset=1.0, decay_power=0.55)),
        RunSpec("SGHMC", "sghmc", sghmc.SghmcConfig(**common, step_size=1e-6, friction=0.5)),
    ]
    for p in KEEP_PROBS:
        specs.append(RunSpec(f"D-SGHMC p={p:g}", "dsghmc", dsghmc.DsghmcConfig(
            **common, step_size=1e-6, friction=0.5, drop_rate=round(1 - p, 6),
            mask_at_prediction=True), p))
    return specs


def tuned_specs(epochs: int = 100, values: dict[str, float] | None = None) -> list[RunSpec]:
    """The tuned protocol's runs with the step sizes and friction of ``values`` (default
    :data:`TUNED`)."""
    tuned = TUNED if values is None else {**TUNED, **values}
    common = {"batch_size": 100, "prior_std": 1.0, "init": "prior", "burn_in_epochs": epochs // 2,
              "thin": 1, "epochs": epochs, "num_chains": 5}
    specs = [
        RunSpec("SGLD", "sgld", sgld.SgldConfig(**common, step_size=tuned["sgld_step"])),
        RunSpec("SGHMC", "sghmc", sghmc.SghmcConfig(
            **common, step_size=tuned["sghmc_step"], friction=tuned["friction"])),
    ]
    for p in KEEP_PROBS:
        specs.append(RunSpec(f"D-SGHMC p={p:g}", "dsghmc", dsghmc.DsghmcConfig(
            **common, step_size=tuned["sghmc_step"], friction=tuned["friction"],
            drop_rate=round(1 - p, 6), mask_at_prediction=True), p))
    return specs


#: The tuned protocol's settings. The step sizes are what :func:`tune_step_sizes` chose with its
#: defaults (10 epochs, 5 chains, seed 0, validation NLL on training images 55,000..60,000);
#: until then they were 1e-4 and 1.6e-5, picked by hand from the same grids on test images.
#: The friction is fixed, not tuned.
TUNED = {"sgld_step": 2e-4, "sghmc_step": 4e-6, "friction": 0.1}

MODULES = {"sgld": sgld, "sghmc": sghmc, "dsghmc": dsghmc}


class ChainMasks:
    """Input dropout for many chains at once, each with its own drop rate.

    Equivalent to :func:`core.engine.inference.dsghmc.input_dropout` per chain, made fast for the
    2-core budget: 16 random bits per value (so a keep probability is exact to 2⁻¹⁶), four
    values per 64-bit draw, into preallocated buffers. The masked chains must come last.
    """

    def __init__(self, drop_rates: torch.Tensor, batch_shape: tuple[int, ...]) -> None:
        masked = torch.nonzero(drop_rates > 0).flatten()
        self.first = int(masked[0]) if len(masked) else len(drop_rates)
        if not torch.equal(masked, torch.arange(self.first, len(drop_rates))):
            raise ValueError("chains with input dropout must come after those without")
        keep = 1.0 - drop_rates[self.first :]
        lead = (-1, *([1] * len(batch_shape)))
        self.threshold = (torch.round(keep * 65536) - 32768).clamp(max=32767).to(torch.int16).reshape(lead)
        self.scale = (1.0 / keep).reshape(lead)
        self.shape = (len(keep), *batch_shape)
        numel = math.prod(self.shape)
        self.bits = torch.empty(math.ceil(numel / 4), dtype=torch.int64)
        self.kept = torch.empty(self.shape, dtype=torch.bool)
        self.out = torch.empty((len(drop_rates), *batch_shape))

    def apply(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if self.first == len(self.out):
            return x
        self.bits.random_(-(2**63), None, generator=generator)
        words = self.bits.view(torch.int16)[: math.prod(self.shape)].view(self.shape)
        torch.lt(words, self.threshold, out=self.kept)  # P(kept) = keep
        out = self.out
        out[: self.first] = x[: self.first]
        torch.mul(x[self.first :], self.kept, out=out[self.first :])
        out[self.first :].mul_(self.scale)
        return out


def run_group(
    specs: list[RunSpec],
    data: MnistArrays,
    *,
    protocol: str,
    chains: int,
    epochs: int,
    draws: int,
    generator: torch.Generator,
    progress: Any,
) -> list[Params]:
    """Run ``chains`` chains of every spec in one vectorised loop; ``draws`` draws per chain.

    The specs must share one update rule: SGLD alone, or SGHMC together with D-SGHMC (which
    is SGHMC on masked inputs, :func:`core.engine.inference.dsghmc.step`), each chain with its own
    drop rate. Returns the draws of each spec, leading dims (chain, draw).
    """
    config = specs[0].config
    module = sgld if specs[0].method == "sgld" else sghmc
    for spec in specs:
        same = (spec.config.step_size, getattr(spec.config, "friction", None))
        if same != (config.step_size, getattr(config, "friction", None)):
            raise ValueError("runs vectorised together must share step size and friction")
    total = chains * len(specs)
    drop = torch.tensor([getattr(s.config, "drop_rate", 0.0) for s in specs for _ in range(chains)])
    n = len(data.y_train)
    steps_per_epoch = n // config.batch_size
    num_steps = epochs * steps_per_epoch
    params = {
        "linear.weight": config.prior_std * torch.randn(total, 10, PIXELS, generator=generator),
        "linear.bias": config.prior_std * torch.randn(total, 10, generator=generator),
    }
    if protocol == "paper":
        target = SoftmaxRegressionTarget(float(steps_per_epoch), n, config.prior_std)
        batches = file_order_batches(data, total, config.batch_size)
        # Edward's Empirical.sample: uniform over all stored iterates, with replacement
        chosen = torch.randint(0, num_steps, (total, draws), generator=generator)
    else:
        target = SoftmaxRegressionTarget(None, n, config.prior_std)
        batches = shuffled_batches(data, total, config.batch_size, generator)
        burn = min(config.burn_in_epochs * steps_per_epoch, num_steps - draws)
        chosen = torch.linspace(burn, num_steps - 1, draws).round().long().expand(total, draws)
    masks = ChainMasks(drop, (config.batch_size, PIXELS))
    out = {k: torch.empty(total, draws, *v.shape[1:]) for k, v in params.items()}
    wanted: dict[int, list[tuple[int, int]]] = {}
    for c in range(total):
        for d in range(draws):
            wanted.setdefault(int(chosen[c, d]), []).append((c, d))
    state = module.init(params, config=config, generator=generator)
    labels = "+".join(s.label for s in specs)
    for t in range(num_steps):
        x, y = next(batches)
        batch = (masks.apply(x, generator), y)
        state, info = module.step(state, batch, generator, config=config, target=target)
        for c, d in wanted.get(t, ()):
            for k, v in state.params.items():
                out[k][c, d] = v[c]
        if (t + 1) % 500 == 0 or t + 1 == num_steps:
            logp = info["log_posterior"]
            if not bool(torch.isfinite(logp).all()):
                raise FloatingPointError(f"{labels}: the log posterior diverged at step {t + 1}")
            progress.update(len(specs) * (500 if (t + 1) % 500 == 0 else (t + 1) % 500))
            progress.set_postfix_str(f"{protocol} {labels}", refresh=False)
    return [{k: v[i * chains : (i + 1) * chains] for k, v in out.items()} for i in range(len(specs))]


@dataclass
class ChainScores:
    accuracy: np.ndarray  # (C,)
    class_error: np.ndarray  # (C, K)
    probability_matrix: np.ndarray  # (K, K): mean predicted probability per true class
    nll: np.ndarray | None = None  # (C,): mean −log p(y | x) of each chain's mean predictive


def evaluate(
    spec: RunSpec,
    samples: Params,
    data: MnistArrays,
    *,
    mask_at_prediction: bool,
    generator: torch.Generator,
    batch_size: int = 1000,
    device: torch.device | None = None,
) -> ChainScores:
    """Accuracy and NLL of each chain's mean predictive, its per-class errors and probability
    matrix, on ``data.x_test`` (the test images, or the validation images when tuning).

    Predictions go through :class:`InputDropoutPosterior` (one per chain), so a draw with a
    mask sees a fresh mask on every test image, as in the authors' code; they run on
    ``device`` (None: the CPU), the scores on the CPU.
    """
    chains = next(iter(samples.values())).shape[0]
    config = asdict(spec.config) if spec.method == "dsghmc" else {"drop_rate": 0.0}
    config = {**config, "mask_at_prediction": mask_at_prediction}
    k = ARCH.num_classes
    accs, errors, nlls = [], [], []
    matrix = torch.zeros(k, k, dtype=torch.float64)
    y = data.y_test
    for c in range(chains):
        post = InputDropoutPosterior(
            spec.method, ARCH, config, 0, "mnist", {n: v[c : c + 1].cpu() for n, v in samples.items()}
        )
        post = post.to(device) if device is not None else post
        mean = torch.cat([
            post.predict_proba(
                data.x_test[i : i + batch_size].reshape(-1, 1, 28, 28), generator=generator
            ).mean(0)
            for i in range(0, len(y), batch_size)
        ])
        pred = mean.argmax(-1)
        accs.append(float((pred == y).float().mean()) * 100)
        picked = mean.double().gather(-1, y.unsqueeze(-1)).squeeze(-1)
        nlls.append(float(-picked.clamp_min(1e-300).log().mean()))
        errors.append([float((pred[y == j] != j).float().mean()) * 100 for j in range(k)])
        matrix += torch.stack([mean[y == j].double().mean(0) for j in range(k)])
    return ChainScores(np.array(accs), np.array(errors), (matrix / chains).numpy(), np.array(nlls))


# ------------------------------------------------------------------------ step-size choice

#: The grids of the tuned protocol's step sizes; SGHMC's choice is also D-SGHMC's.
TUNING_GRID = {"sgld_step": (1e-5, 4e-5, 1e-4, 2e-4), "sghmc_step": (1e-6, 4e-6, 1.6e-5, 4e-5)}


@dataclass
class TrialRow:
    key: str  # "sgld_step" | "sghmc_step"
    step_size: float
    nll: float  # mean over chains of the validation NLL of each chain's mean predictive
    accuracy: float  # % on the validation images, mean over chains
    seconds: float
    nll_sd: float = 0.0  # s.d. of the NLL over chains


class _Quiet:
    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, s: str, refresh: bool = False) -> None:
        pass


def tune_step_sizes(
    root: str | None,
    *,
    num_train: int = 55_000,
    num_validation: int = 5_000,
    epochs: int = 10,
    chains: int = 5,
    draws: int = 30,
    seed: int = 0,
    grid: dict[str, tuple[float, ...]] | None = None,
    device: torch.device | None = None,
    report: Any = None,
) -> tuple[dict[str, float], list[TrialRow]]:
    """Choose the tuned protocol's constant step sizes on a validation split of the training file.

    Every value of ``grid`` (default :data:`TUNING_GRID`) is run as the tuned protocol would
    run it (:func:`tuned_specs` with ``epochs``: random batch order, half the epochs burn-in,
    ``draws`` draws thinned from the rest, friction as in :data:`TUNED`) on the first
    ``num_train`` training images, all values from the same seed, and scored on the next
    ``num_validation`` training images (:func:`load_mnist_validation`; the test file is never
    read) by the NLL of each chain's mean predictive, averaged over ``chains`` chains. NLL
    rather than accuracy: it is the proper score of the whole predictive, and accuracy moves in
    steps of 1/V and ties between neighbouring step sizes. A run that diverges scores +∞.
    The smallest NLL wins per sampler; D-SGHMC shares SGHMC's step size. ``report`` (if given)
    is called with each :class:`TrialRow` as it is measured. Returns the chosen values (as in
    :data:`TUNED`) and the table of the trial.
    """
    grid = TUNING_GRID if grid is None else grid
    data = load_mnist_validation(root, num_train, num_validation)
    train_data = data if device is None else MnistArrays(
        data.x_train.to(device), data.y_train.to(device), data.x_test, data.y_test)
    labels = {"sgld_step": "SGLD", "sghmc_step": "SGHMC"}
    rows: list[TrialRow] = []
    chosen: dict[str, float] = {}
    for key, values in grid.items():
        for value in values:
            spec = next(s for s in tuned_specs(epochs, {key: value}) if s.label == labels[key])
            generator = seeded_generator(seed, device)
            t0 = time.perf_counter()
            try:
                with on_device(device):
                    samples = run_group([spec], train_data, protocol="tuned", chains=chains,
                                        epochs=epochs, draws=draws, generator=generator,
                                        progress=_Quiet())[0]
                scores = evaluate(spec, samples, data, mask_at_prediction=False,
                                  generator=torch.Generator().manual_seed(seed), device=device)
                nll, acc = float(np.mean(scores.nll)), float(scores.accuracy.mean())
                sd = float(np.std(scores.nll, ddof=1)) if chains > 1 else 0.0
            except FloatingPointError:
                nll, acc, sd = math.inf, math.nan, math.nan
            row = TrialRow(key, value, nll, acc, time.perf_counter() - t0, sd)
            rows.append(row)
            if report is not None:
                report(row)
        mine = [r for r in rows if r.key == key]
        chosen[key] = min(mine, key=lambda r: r.nll).step_size
    return {**chosen, "friction": TUNED["friction"]}, rows



# --------------------------------------------------------------------------------- outputs


def _fmt(scores: np.ndarray) -> str:
    sd = scores.std(ddof=1) if len(scores) > 1 else 0.0
    return f"{scores.mean():.2f} ± {sd:.2f}"


def write_table(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot_sensitivity(path: Path, results: dict[str, dict[str, ChainScores]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    colours = {"paper": "tab:red", "tuned": "tab:blue"}
    for protocol, scores in results.items():
        ps = [p for p in KEEP_PROBS if f"D-SGHMC p={p:g}" in scores]
        accs = [scores[f"D-SGHMC p={p:g}"].accuracy for p in ps]
        ax.errorbar(ps, [a.mean() for a in accs], yerr=[a.std(ddof=1) if len(a) > 1 else 0 for a in accs],
                    marker="o", capsize=3, color=colours.get(protocol), label=f"D-SGHMC ({protocol})")
        for name, style in (("SGHMC", "--"), ("SGLD", ":")):
            if name in scores:
                ax.axhline(scores[name].accuracy.mean(), ls=style, color=colours.get(protocol),
                           lw=1, label=f"{name} ({protocol})")
    ax.set_xlabel("paper's p (keep probability of input pixels)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("D-SGHMC on MNIST: sensitivity to p")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_class_errors(path: Path, scores: dict[str, ChainScores], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("SGLD", "SGHMC", "D-SGHMC p=0.5") if n in scores]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, names, strict=True):
        ax.boxplot(scores[name].class_error, positions=range(10))
        ax.set_title(name)
        ax.set_xlabel("class")
    axes[0].set_ylabel("test error per class over chains (%)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_probability_matrix(path: Path, scores: dict[str, ChainScores], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("SGLD", "SGHMC", "D-SGHMC p=0.5") if n in scores]
    fig, axes = plt.subplots(1, len(names), figsize=(4.0 * len(names), 3.8))
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, names, strict=True):
        im = ax.imshow(scores[name].probability_matrix, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(name)
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class")
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="mean predicted probability")
    fig.suptitle(title)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


# -------------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for the CSV, PNG and markdown files")
    parser.add_argument("--data-dir", help="folder holding the MNIST IDX files")
    parser.add_argument("--protocol", choices=("paper", "tuned", "both"), default="both")
    parser.add_argument("--epochs", type=int, default=100, help="passes over the 55,000 images")
    parser.add_argument("--chains", type=int, default=5, help="independent chains")
    parser.add_argument("--draws", type=int, default=30, help="predictive draws per chain")
    parser.add_argument("--train-size", type=int, default=55_000,
                        help="first N training images (TensorFlow's split: 55,000)")
    parser.add_argument("--test-limit", type=int, help="evaluate on the first N test images only")
    parser.add_argument("--tune", action="store_true",
                        help="choose the tuned protocol's step sizes first: a short trial of each "
                             "grid value scored by NLL on the validation images (the training "
                             "images after --train-size, never test images); without it the "
                             "recorded TUNED values, chosen so, are used")
    parser.add_argument("--tune-epochs", type=int, default=10, help="epochs of each trial run")
    parser.add_argument("--validation-size", type=int, default=5_000,
                        help="validation images for --tune: training images N..N+V after "
                             "--train-size N (default 5,000: the rest of MNIST's 60,000)")
    parser.add_argument("--methods", default="all",
                        help="comma-separated subset of SGLD,SGHMC,D-SGHMC (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    add_device_argument(parser)


def tune(args: argparse.Namespace, out: Path, device: torch.device) -> dict[str, float]:
    """``--tune``: :func:`tune_step_sizes` with the command's arguments; prints the trial
    table, writes it to ``out/tuning.csv`` and returns the chosen values."""
    num_validation = args.validation_size
    print(f"Tuning on training images {args.train_size:,}.. (up to {num_validation:,} of them), "
          f"{args.tune_epochs} epoch(s) and {args.chains} chain(s) per value, scored by validation NLL",
          file=sys.stderr)
    print(f"{'sampler':8s} {'step size':>10s} {'val NLL':>8s} {'s.d.':>7s} {'val acc %':>9s} {'s':>6s}")

    def report(row: TrialRow) -> None:
        print(f"{row.key.split('_')[0].upper():8s} {row.step_size:10.2g} {row.nll:8.4f} "
              f"{row.nll_sd:7.4f} {row.accuracy:9.2f} {row.seconds:6.1f}", flush=True)

    chosen, rows = tune_step_sizes(
        args.data_dir, num_train=args.train_size, num_validation=num_validation,
        epochs=args.tune_epochs, chains=args.chains, draws=args.draws, seed=args.seed,
        device=device, report=report)
    write_table(out / "tuning.csv", [asdict(r) for r in rows])
    print("Chosen: " + ", ".join(f"{k} = {v:g} (recorded {TUNED[k]:g})" for k, v in chosen.items()))
    return chosen


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    device = chosen_device(args)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    protocols = ("paper", "tuned") if args.protocol == "both" else (args.protocol,)
    wanted = None if args.methods == "all" else {m.strip() for m in args.methods.split(",")}
    tuned_values = dict(TUNED)
    if args.tune:
        if "tuned" not in protocols:
            raise ValueError("--tune chooses the tuned protocol's step sizes; use it with "
                             "--protocol tuned or both")
        tuned_values = tune(args, out, device)
    data = load_mnist(args.data_dir, args.train_size, args.test_limit)
    # the chains run where the training images are; the test images stay on the CPU for scoring
    train_data = MnistArrays(data.x_train.to(device), data.y_train.to(device), data.x_test, data.y_test)
    say_where("Running", device)
    steps_per_epoch = len(data.y_train) // 100
    plans = {}
    for protocol in protocols:
        specs = paper_specs(args.epochs) if protocol == "paper" else \
            tuned_specs(args.epochs, tuned_values)
        plans[protocol] = [s for s in specs if wanted is None or s.label.split(" p=")[0] in wanted]
    total = sum(len(v) for v in plans.values()) * args.epochs * steps_per_epoch
    start = time.perf_counter()
    results: dict[str, dict[str, ChainScores]] = {}
    rows: dict[str, list[dict]] = {}
    with tqdm(total=total, desc="dhmc-mnist", unit="step", file=sys.stderr,
              dynamic_ncols=True) as bar:
        for protocol, specs in plans.items():
            results[protocol], rows[protocol] = {}, []
            groups = [[s for s in specs if s.method == "sgld"],
                      [s for s in specs if s.method != "sgld"]]
            drawn: dict[str, tuple[Params, float]] = {}
            for i, group in enumerate(g for g in groups if g):
                generator = seeded_generator(args.seed * 1000 + i, device)
                t0 = time.perf_counter()
                with on_device(device):
                    group_draws = run_group(group, train_data, protocol=protocol, chains=args.chains,
                                            epochs=args.epochs, draws=args.draws,
                                            generator=generator, progress=bar)
                seconds = time.perf_counter() - t0
                for spec, samples in zip(group, group_draws, strict=True):
                    drawn[spec.label] = (samples, seconds)
            for spec in specs:
                samples, seconds = drawn[spec.label]
                generator = torch.Generator().manual_seed(args.seed * 1000 + 99)
                masked = spec.method == "dsghmc"
                scores = evaluate(spec, samples, data, mask_at_prediction=masked,
                                  generator=generator, device=device)
                results[protocol][spec.label] = scores
                row = {
                    "protocol": protocol, "method": spec.label,
                    "drop_rate": getattr(spec.config, "drop_rate", 0.0),
                    "step_size": spec.config.step_size,
                    "accuracy_mean": round(float(scores.accuracy.mean()), 3),
                    "accuracy_sd": round(float(scores.accuracy.std(ddof=1)), 3)
                    if args.chains > 1 else 0.0,
                    "per_chain": " ".join(f"{a:.2f}" for a in scores.accuracy),
                    "mask_at_prediction": masked,
                    "group_seconds": round(seconds, 1),
                }
                if masked:
                    clean = evaluate(spec, samples, data, mask_at_prediction=False,
                                     generator=generator, device=device)
                    row["accuracy_mask_off_mean"] = round(float(clean.accuracy.mean()), 3)
                    row["accuracy_mask_off_sd"] = round(float(clean.accuracy.std(ddof=1)), 3) \
                        if args.chains > 1 else 0.0
                else:
                    row["accuracy_mask_off_mean"] = row["accuracy_mean"]
                    row["accuracy_mask_off_sd"] = row["accuracy_sd"]
                rows[protocol].append(row)
                tqdm.write(f"{protocol:6s} {spec.label:15s} {_fmt(scores.accuracy)} %", file=sys.stderr)
            write_table(out / f"table_{protocol}.csv", rows[protocol])
            k = ARCH.num_classes
            with (out / f"per_class_error_{protocol}.csv").open("w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["method", "chain", *[f"class_{j}" for j in range(k)]])
                for label, sc in results[protocol].items():
                    for c, errs in enumerate(sc.class_error):
                        w.writerow([label, c, *[f"{e:.3f}" for e in errs]])
            with (out / f"probability_matrix_{protocol}.csv").open("w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["method", "true_class", *[f"p_{j}" for j in range(k)]])
                for label, sc in results[protocol].items():
                    for j, row_p in enumerate(sc.probability_matrix):
                        w.writerow([label, j, *[f"{v:.4f}" for v in row_p]])
            plot_class_errors(out / f"per_class_error_{protocol}.png", results[protocol],
                              f"Per-class test error over {args.chains} chains ({protocol})")
            plot_probability_matrix(out / f"probability_matrix_{protocol}.png",
                                    results[protocol], f"True vs predicted class ({protocol})")
    wall = time.perf_counter() - start
    with (out / "sensitivity.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["protocol", "keep_prob_p", "drop_rate", "accuracy_mean", "accuracy_sd"])
        for protocol, scores in results.items():
            for p in KEEP_PROBS:
                sc = scores.get(f"D-SGHMC p={p:g}")
                if sc is not None:
                    sd = sc.accuracy.std(ddof=1) if len(sc.accuracy) > 1 else 0.0
                    w.writerow([protocol, p, round(1 - p, 6), f"{sc.accuracy.mean():.3f}", f"{sd:.3f}"])
    plot_sensitivity(out / "sensitivity.png", results)
    lines = [f"# D-SGHMC on MNIST ({args.epochs} epochs, {args.chains} chains, "
             f"{args.draws} draws per chain)", ""]
    for protocol, prot_rows in rows.items():
        lines += [f"## {protocol}", "", "| method | accuracy % (mask on) | mask off | paper |",
                  "|---|---|---|---|"]
        for row in prot_rows:
            paper = PAPER_TABLE2.get(row["method"])
            ref = f"{paper[0]:.2f} ± {paper[1]:.2f}" if paper else ""
            on = f"{row['accuracy_mean']:.2f} ± {row['accuracy_sd']:.2f}"
            off = f"{row['accuracy_mask_off_mean']:.2f} ± {row['accuracy_mask_off_sd']:.2f}"
            lines.append(f"| {row['method']} | {on} | {off} | {ref} |")
        lines.append("")
    where = f"{torch.get_num_threads()} torch thread(s)" if device.type == "cpu" else str(device)
    lines.append(f"Wall time: {wall:.0f} s on {where}.")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


register(Reproduction("dhmc-mnist", "D-SGHMC paper: softmax regression on MNIST (Table 2, p sweep)",
                      add_arguments, run))

