"""How far each approximate posterior's predictive lies from a reference (HMC) on a test set.

Izmailov, Vikram, Hoffman & Wilson, "What Are Bayesian Neural Network Posteriors Really
Like?" (ICML 2021), §4, judge an approximation q by its predictive distribution against
HMC's, p̂ (the reference), on the test inputs x₁…x_N; p̂(·|xᵢ) and q(·|xᵢ) are each model's
mean over its own draws (the predictive, K class probabilities):

* **top-class agreement**  (1/N) Σᵢ 𝟙[argmax_k p̂(k|xᵢ) = argmax_k q(k|xᵢ)]: how often the two
  predict the same class (1 = always);
* **total variation**  (1/N) Σᵢ ½ Σ_k |p̂(k|xᵢ) − q(k|xᵢ)|: the most probability the two
  predictives can disagree on for any set of classes, averaged over inputs (0 = identical,
  1 = disjoint);
* **KL(reference ‖ method)**  (1/N) Σᵢ Σ_k p̂(k|xᵢ) log(p̂(k|xᵢ) / q(k|xᵢ)) in nats: the
  information lost when q stands in for the reference (0 = identical; large when q is sure
  of classes the reference finds possible). A class the reference gives no probability adds
  0 (0·log 0 = 0); probabilities of the method below :data:`PROBABILITY_FLOOR` count as that
  floor, so one class the method rules out entirely costs at most p̂·log(p̂/10⁻¹²) ≈ 27.6·p̂
  nats instead of an infinite mean.

Ties in argmax go to the lowest class index (torch's and numpy's rule) on both sides.

The predictive can sit close to the reference's while each draw does not: a sampler whose steps
are too large for the posterior's curvature samples a wider distribution, and its chains can
agree on it (R̂ cannot see this). :func:`log_posterior_level` checks the draws themselves: the
exact log posterior log p(D | θ) + log p(θ) over the training data of each weight set a posterior
predicts with (a sampler's stored draws, an ensemble's members, a Gaussian family's draws). Draws of
the posterior lie at a level set by the posterior (for d weights of a Gaussian posterior, about
d/2 below its peak, spread √(d/2)); draws far below that level come from a wider distribution,
far above it from one huddled at the peak. Lying at the level does not make a distribution the
posterior (mean-field VI of a Gaussian lies there exactly), so the check can fail a method, not
pass it.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from core.analysis.streaming import predict_dataset
from core.engine.inference.base import (
    Dataset,
    Posterior,
    ProgressRecord,
    SampledPosterior,
    check_data_fits,
)

#: Method probabilities below this count as this in KL(reference ‖ method).
PROBABILITY_FLOOR = 1e-12


@dataclass(frozen=True)
class Fidelity:
    """One method's distance from the reference: the means over inputs and each input's value."""

    kl: float
    total_variation: float
    agreement: float
    per_input_kl: np.ndarray = field(repr=False)  # (N,)
    per_input_total_variation: np.ndarray = field(repr=False)  # (N,)
    per_input_agreement: np.ndarray = field(repr=False)  # (N,) bool

    @property
    def num_inputs(self) -> int:
        return len(self.per_input_kl)

    def record(self) -> dict[str, float | int]:
        """The three means and the number of inputs, as written to JSON."""
        return {"kl": self.kl, "total_variation": self.total_variation, "agreement": self.agreement,
                "num_inputs": self.num_inputs}


def predictive_fidelity(reference: np.ndarray | torch.Tensor, method: np.ndarray | torch.Tensor) -> Fidelity:
    """:class:`Fidelity` of predictive probabilities ``method`` (N, K) against ``reference`` (N, K)."""
    p = np.asarray(reference, dtype=np.float64)
    q = np.asarray(method, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 2:
        raise ValueError(f"the predictives must both be (inputs, classes); got {p.shape} and {q.shape}")
    if len(p) == 0:
        raise ValueError("no input to compare the predictives on")
    q_floor = np.maximum(q, PROBABILITY_FLOOR)
    # 0·log 0 = 0: classes the reference gives no probability add nothing
    safe_p = np.where(p > 0, p, 1.0)
    kl = np.where(p > 0, p * (np.log(safe_p) - np.log(q_floor)), 0.0).sum(-1)
    kl = np.maximum(kl, 0.0)  # ≥ 0 (Gibbs); rounding and the floor can dip a hair below
    tv = 0.5 * np.abs(p - q).sum(-1)
    agree = p.argmax(-1) == q.argmax(-1)
    return Fidelity(kl=float(kl.mean()), total_variation=float(tv.mean()), agreement=float(agree.mean()),
                    per_input_kl=kl, per_input_total_variation=tv, per_input_agreement=agree)


@dataclass(frozen=True)
class FidelityReport:
    """Every method's :class:`Fidelity` against the reference on one data set."""

    reference: str
    dataset: str
    num_inputs: int
    results: dict[str, Fidelity]
    num_samples: dict[str, int]  # draws each posterior (reference included) predicted with
    accuracy: dict[str, float]  # each posterior's accuracy (reference included), for context

    def rows(self) -> list[dict[str, Any]]:
        """One row per method: its name, draws, accuracy and the three distances."""
        return [{"posterior": name, "samples": self.num_samples[name], "accuracy": self.accuracy[name],
                 **fidelity.record()} for name, fidelity in self.results.items()]


def fidelity_to_reference(
    reference: tuple[str, Posterior],
    posteriors: dict[str, Posterior],
    data: Dataset,
    *,
    num_samples: int | None = None,
    seed: int = 0,
) -> Generator[ProgressRecord, None, FidelityReport]:
    """Predict ``data`` with the reference and every posterior; return their distances.

    A generator (progress per batch, phase naming the posterior) as
    :func:`core.analysis.evaluation.evaluate`; each posterior draws from its own generator
    seeded with ``seed``. ``num_samples`` caps every posterior's draws (None: each its own).
    """
    ref_name, ref = reference
    if not posteriors:
        raise ValueError("no posterior to compare with the reference: give at least one")
    for name, posterior in posteriors.items():
        if (posterior.num_classes, posterior.arch.image_size, posterior.arch.input_dim) != (
                ref.num_classes, ref.arch.image_size, ref.arch.input_dim):
            raise ValueError(f"{name} cannot be compared with the reference {ref_name}: they disagree "
                             f"on the classes or the input ({posterior.num_classes} classes against "
                             f"{ref.num_classes})")
    check_data_fits(ref.arch, data, "the data set", "each posterior", labels=True)
    means: dict[str, np.ndarray] = {}
    draws: dict[str, int] = {}
    accuracy: dict[str, float] = {}
    for name, posterior in {ref_name: ref, **posteriors}.items():
        generator = torch.Generator().manual_seed(seed)
        predictions = yield from _named(predict_dataset(posterior, data, num_samples, generator), name)
        means[name] = predictions.mean_proba
        draws[name] = predictions.num_samples
        accuracy[name] = float((predictions.mean_proba.argmax(-1) == predictions.labels).mean())
    results = {name: predictive_fidelity(means[ref_name], means[name]) for name in posteriors}
    return FidelityReport(ref_name, data.name, len(data), results, draws, accuracy)


#: Weight sets (a sampler's stored draws, evenly spaced) whose exact log posterior
#: :func:`log_posterior_level` computes.
LEVEL_DRAWS = 40
#: Training images per forward pass of :func:`log_posterior_level`.
LEVEL_BATCH = 5_000


@dataclass(frozen=True)
class LogPosteriorLevel:
    """The exact log posterior of weight draws, log p(D | θ) + log N(θ; 0, σ²I) without constants."""

    values: np.ndarray  # (draws,)

    def record(self) -> dict[str, float | int]:
        """Mean, standard deviation and number of draws, as written to JSON."""
        return {"mean": float(self.values.mean()), "sd": float(self.values.std(ddof=1)) if len(self.values) > 1
                else 0.0, "draws": len(self.values)}


def why_not_level(posterior: Posterior, reference: Posterior) -> str | None:
    """Why ``posterior``'s draws cannot be scored under ``reference``'s posterior, or None: its
    weights must be those of the same model (input dropout makes another), more than one set,
    under the same Gaussian prior (variational dropout's log-uniform one is not)."""
    if posterior.arch != reference.arch:
        return "its model differs from the reference's"
    if isinstance(posterior, SampledPosterior):
        if posterior.num_samples < 2:
            return "it holds one set of weights, not a spread"
    elif not callable(getattr(posterior, "fixed_draws", None)):
        return "it draws no weight sets"
    config, ref_std = posterior.config, reference.config.get("prior_std", 1.0)
    if (config.get("prior", "gaussian") != "gaussian" or config.get("prior_precision", "prior") != "prior"
            or "prior_std" not in config or float(config["prior_std"]) != float(ref_std)):
        return "its prior differs from the reference's"
    return None


def _weight_draws(posterior: Posterior, num_draws: int) -> torch.Tensor:
    """The ``num_draws`` weight sets ``posterior.predict_logits(x, num_draws)`` predicts with, flat
    (S, P): a sampler's evenly spaced stored draws, or the fixed bank of a Gaussian family's."""
    if isinstance(posterior, SampledPosterior):
        return torch.cat([v.reshape(len(v), -1) for v in posterior.flat_samples(num_draws).values()], dim=1)
    return posterior.fixed_draws(num_draws)


def log_posterior_level(posterior: Posterior, data: Dataset, prior_std: float,
                        num_draws: int = LEVEL_DRAWS) -> Generator[ProgressRecord, None, LogPosteriorLevel]:
    """Exact log posterior of ``num_draws`` of ``posterior``'s weight sets (evenly spaced stored
    draws, or a Gaussian family's fixed draws: those it predicts with) over all of ``data`` (the
    training set) under the prior N(0, ``prior_std``² I); yields progress per batch."""
    check_data_fits(posterior.arch, data, "the training data", "the posterior", labels=True)
    total = -0.5 * _weight_draws(posterior, num_draws).double().pow(2).sum(1) / prior_std**2
    for start in range(0, len(data), LEVEL_BATCH):
        x, y = data.x[start:start + LEVEL_BATCH], data.y[start:start + LEVEL_BATCH]
        log_p = torch.log_softmax(posterior.predict_logits(x, num_draws).double(), -1)  # (S, B, K)
        total = total + log_p.gather(-1, y.long()[None, :, None].expand(len(log_p), -1, 1)).sum((1, 2))
        yield ProgressRecord(step=min(start + LEVEL_BATCH, len(data)), total=len(data), phase="log posterior")
    return LogPosteriorLevel(total.numpy())


def _named(loop: Generator[ProgressRecord, None, Any], name: str) -> Generator[ProgressRecord, None, Any]:
    """``loop``'s progress with its phase set to ``name``; returns what ``loop`` returns."""
    while True:
        try:
            record = next(loop)
        except StopIteration as done:
            return done.value
        yield replace(record, phase=name)
