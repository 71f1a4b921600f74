"""The D-SGHMC MNIST reproduction's experiment (:mod:`core.commands.reproduce.dhmc` runs it): the
softmax-regression target, MNIST as centred arrays, the authors' and the tuned protocols' runs
(:func:`paper_specs`, :func:`tuned_specs`), every chain of a group run in one vectorised loop with
per-chain input masks (:class:`ChainMasks`, which ``dhmc-faces`` uses too) and each chain's scores."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from core.engine.inference import dsghmc, sghmc, sgld
from core.engine.inference.chains import Params
from core.engine.inference.dsghmc import InputDropoutPosterior
from core.engine.inference.sampling import gaussian_log_prior
from core.engine.models import ArchSpec

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
