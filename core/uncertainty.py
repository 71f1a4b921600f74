"""Uncertainty of a predictive given by S posterior samples of class probabilities.

For samples p_s (shape S×K, or S×N×K for a batch), with p̄ = mean_s p_s:

* total (predictive entropy)       H[p̄]
* aleatoric (expected entropy)     mean_s H[p_s]
* epistemic (mutual information)   H[p̄] − mean_s H[p_s]  (≥ 0 by Jensen; clamped at 0
  against rounding)

Entropies are in nats. Also per-class histograms on fixed bins (comparable across methods)
and per-class equal-tailed credible intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_BINS = 20


def entropy(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in nats, with 0·log 0 = 0."""
    p = p.clamp_min(0)
    return -(torch.special.xlogy(p, p)).sum(dim)


def predictive_mean(samples: torch.Tensor) -> torch.Tensor:
    """p̄ = mean over the sample dimension (the first)."""
    return samples.mean(0)


def predictive_entropy(samples: torch.Tensor) -> torch.Tensor:
    """Total uncertainty H[p̄]."""
    return entropy(predictive_mean(samples))


def expected_entropy(samples: torch.Tensor) -> torch.Tensor:
    """Aleatoric uncertainty mean_s H[p_s]."""
    return entropy(samples).mean(0)


def mutual_information(samples: torch.Tensor) -> torch.Tensor:
    """Epistemic uncertainty H[p̄] − mean_s H[p_s], clamped at 0."""
    return (predictive_entropy(samples) - expected_entropy(samples)).clamp_min(0)


def credible_interval(samples: torch.Tensor, level: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """Equal-tailed per-class interval holding ``level`` of the samples: (lower, upper)."""
    if not 0 < level < 1:
        raise ValueError("level must lie strictly between 0 and 1")
    tail = (1 - level) / 2
    q = torch.quantile(samples.double(), torch.tensor([tail, 1 - tail], dtype=torch.float64), dim=0)
    return q[0].to(samples.dtype), q[1].to(samples.dtype)


def class_histograms(samples: torch.Tensor, bins: int = DEFAULT_BINS) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class histograms of p_s,k over s on fixed bins spanning [0, 1].

    Returns ``(counts, edges)``: counts of shape (..., K, bins) as fractions of S (each row
    sums to 1), and the ``bins + 1`` edges. Fixed edges make methods comparable.
    """
    if bins < 1:
        raise ValueError("bins must be positive")
    s = samples.shape[0]
    idx = (samples.clamp(0, 1) * bins).long().clamp_max(bins - 1)  # p = 1 goes in the last bin
    counts = torch.zeros(*samples.shape[1:], bins, dtype=torch.float32)
    counts.scatter_add_(-1, idx.movedim(0, -1), torch.ones(idx.movedim(0, -1).shape))
    return counts / s, torch.linspace(0, 1, bins + 1)


@dataclass(frozen=True)
class Summary:
    """Everything the per-input views show for one input and one posterior (K classes)."""

    mean: torch.Tensor  # (K,)
    lower: torch.Tensor  # (K,)
    upper: torch.Tensor  # (K,)
    histograms: torch.Tensor  # (K, bins)
    bin_edges: torch.Tensor  # (bins + 1,)
    total: float
    aleatoric: float
    epistemic: float
    num_samples: int

    @property
    def predicted_class(self) -> int:
        return int(self.mean.argmax())


def summarise(samples: torch.Tensor, level: float = 0.9, bins: int = DEFAULT_BINS) -> Summary:
    """Summarise samples of shape (S, K) for one input."""
    if samples.ndim != 2:
        raise ValueError(f"expected samples of shape (S, K), got {tuple(samples.shape)}")
    samples = samples.double()
    lower, upper = credible_interval(samples, level)
    hist, edges = class_histograms(samples, bins)
    return Summary(
        mean=predictive_mean(samples).float(),
        lower=lower.float(),
        upper=upper.float(),
        histograms=hist,
        bin_edges=edges,
        total=float(predictive_entropy(samples)),
        aleatoric=float(expected_entropy(samples)),
        epistemic=float(mutual_information(samples)),
        num_samples=samples.shape[0],
    )
