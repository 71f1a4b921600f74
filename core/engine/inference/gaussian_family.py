"""The Gaussian families of the variational engine (Le Folgoc et al., "Is MC Dropout Bayesian?"):
their densities, draws and priors, as :mod:`core.engine.inference.variational` uses them.

Families (all one class, :class:`LowRankMixture`, with C components and rank K):

- **MF-VI** (C = 1, K = 0): q = N(μ, diag(σ²)), σ = softplus(ρ) (Blundell et al. 2015).
- **sN-VI** (C = 1, K ≥ 1): q = N(μ, Σ), Σ = diag(σ²) + U Uᵀ with U ∈ ℝᴾˣᴷ, one U over
  *all* parameters jointly. A draw is θ = μ + σ ⊙ ε + U η, ε ~ N(0, I_P), η ~ N(0, I_K).
  The density uses the Woodbury identity and the matrix-determinant lemma with
  D = diag(σ²) and the K×K capacitance M = I_K + Uᵀ D⁻¹ U::

      Σ⁻¹ = D⁻¹ − D⁻¹ U M⁻¹ Uᵀ D⁻¹,      log|Σ| = Σᵢ log σᵢ² + log|M|,

  so log q costs O(P K²) and memory O(P K); the P×P matrix is never formed.
- **sGMM-VI** (C > 1): q = Σ_c w_c N(μ_c, Σ_c), w = softmax(logits).

Sampling modes for the Monte-Carlo ELBO (:data:`SamplingMode`):

- ``naive``: independent draws.
- ``paired``: antithetic twins μ ± δ; every pair averages to μ exactly.
- ``unscented``: groups of 2K draws. A random orthogonal R ∈ O(K) gives the K coupled
  low-rank noises η_k = √K · R e_k and their mirrors −η_k, so the group's low-rank part has
  mean 0 and covariance exactly I_K (Σ_k η_k η_kᵀ / K = R Rᵀ = I); the diagonal noise is
  drawn per pair and mirrored with it.

The priors over the weights (:class:`Prior`): Gaussian (l2) or a scaled Student-t, factorised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

SamplingMode = Literal["naive", "paired", "unscented"]
"""How the S draws of one ELBO estimate are coupled: ``naive`` independent draws,
``paired`` antithetic twins around the mean, ``unscented`` 2K coupled draws along random
orthogonal combinations of the low-rank directions plus their mirrors."""

SAMPLING_MODES: tuple[str, ...] = ("naive", "paired", "unscented")

PriorName = Literal["gaussian", "student_t"]
"""``gaussian``: θᵢ ~ N(0, s²) (l2); ``student_t``: θᵢ ~ s · t_ν (heavier tails)."""

_LOG_2PI = math.log(2.0 * math.pi)


def inverse_softplus(x: float) -> float:
    """ρ with softplus(ρ) = x."""
    return x + math.log(-math.expm1(-x))


# ----------------------------------------------------------------------------- priors


@dataclass(frozen=True)
class Prior:
    """Factorised prior over all parameters: Gaussian (l2) or scaled Student-t.

    log N(θ; 0, s²) = −θ²/(2s²) − log s − ½ log 2π;
    log t_ν(θ/s)/s = log Γ((ν+1)/2) − log Γ(ν/2) − ½ log(νπ) − log s − (ν+1)/2 · log(1 + θ²/(ν s²)).
    """

    name: PriorName = "gaussian"
    scale: float = 1.0
    df: float = 3.0

    def __post_init__(self) -> None:
        if self.name not in ("gaussian", "student_t"):
            raise ValueError(f"unknown prior {self.name!r}; choose 'gaussian' or 'student_t'")
        if self.scale <= 0 or self.df <= 0:
            raise ValueError("the prior scale and degrees of freedom must be positive")

    def log_prob(self, theta: torch.Tensor) -> torch.Tensor:
        """Sum over the last dimension of the elementwise log-density."""
        p = theta.shape[-1]
        s = self.scale
        if self.name == "gaussian":
            return -0.5 * theta.pow(2).sum(-1) / s**2 - p * (math.log(s) + 0.5 * _LOG_2PI)
        nu = self.df
        const = (
            math.lgamma((nu + 1) / 2)
            - math.lgamma(nu / 2)
            - 0.5 * math.log(nu * math.pi)
            - math.log(s)
        )
        return p * const - (nu + 1) / 2 * torch.log1p(theta.pow(2) / (nu * s**2)).sum(-1)


def gaussian_kl_to_prior(mean: torch.Tensor, std: torch.Tensor, prior_std: float) -> torch.Tensor:
    """KL[N(μ, diag σ²) ‖ N(0, s² I)] = Σ log(s/σ) + (σ² + μ²)/(2s²) − ½."""
    return (
        math.log(prior_std) - std.log() + (std.pow(2) + mean.pow(2)) / (2 * prior_std**2) - 0.5
    ).sum()


# ----------------------------------------------------------------------------- low-rank Gaussian


def lowrank_log_prob(
    theta: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, factors: torch.Tensor
) -> torch.Tensor:
    """log N(θ; μ, diag(σ²) + U Uᵀ) for θ (S, P), by Woodbury and the determinant lemma.

    Parameters
    ----------
    theta
        Points (S, P).
    mean, std
        μ and σ, shape (P,).
    factors
        U, shape (P, K); K = 0 gives the diagonal Gaussian.
    """
    p = mean.shape[-1]
    d = theta - mean
    inv_var = std.pow(-2)
    z = d * inv_var  # D⁻¹ (θ − μ)
    quad = (d * z).sum(-1)
    logdet = 2.0 * std.log().sum()
    if factors.shape[-1] > 0:
        chol = _capacitance_cholesky(std, factors)
        v = z @ factors  # (S, K) = Uᵀ D⁻¹ (θ − μ)
        w = torch.linalg.solve_triangular(chol, v.to(chol.dtype).unsqueeze(-1), upper=False)
        quad = quad - w.squeeze(-1).pow(2).sum(-1).to(quad.dtype)
        logdet = logdet + 2.0 * chol.diagonal().log().sum().to(logdet.dtype)
    return -0.5 * (p * _LOG_2PI + logdet + quad)


def _capacitance_cholesky(std: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """Cholesky factor of M = I_K + Uᵀ D⁻¹ U, computed in float64 (K×K, cheap)."""
    scaled = factors / std.unsqueeze(-1)  # D^{-1/2} U, (P, K)
    cap = scaled.transpose(-1, -2) @ scaled
    eye = torch.eye(factors.shape[-1], dtype=torch.float64)
    return torch.linalg.cholesky(eye + cap.double())


def lowrank_logdet(std: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """log |diag(σ²) + U Uᵀ| by the matrix-determinant lemma."""
    logdet = 2.0 * std.log().sum()
    if factors.shape[-1] > 0:
        chol = _capacitance_cholesky(std, factors)
        logdet = logdet + 2.0 * chol.diagonal().log().sum().to(logdet.dtype)
    return logdet


def lowrank_entropy(std: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """H[N(μ, diag(σ²) + U Uᵀ)] = ½ (P (1 + log 2π) + log |Σ|)."""
    p = std.shape[-1]
    return 0.5 * (p * (1.0 + _LOG_2PI) + lowrank_logdet(std, factors))


def random_orthogonal(
    k: int, generator: torch.Generator | None, dtype: torch.dtype, batch: int = 1
) -> torch.Tensor:
    """``batch`` Haar-distributed orthogonal K×K matrices (QR of Gaussians, sign-fixed)."""
    a = torch.randn(batch, k, k, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    return (q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)).to(dtype)


def group_size(mode: SamplingMode, rank: int) -> int:
    """Number of draws that are coupled together by ``mode``."""
    if mode == "naive":
        return 1
    if mode == "paired":
        return 2
    if mode == "unscented":
        if rank < 1:
            raise ValueError("unscented sampling needs a low-rank part (rank ≥ 1); use 'paired'")
        return 2 * rank
    raise ValueError(f"unknown sampling mode {mode!r}; choose from {SAMPLING_MODES}")


def standard_noise(
    num: int,
    dim: int,
    rank: int,
    mode: SamplingMode,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Standard normal noises (ε (num, P), η (num, K)) coupled as ``mode`` says.

    ``num`` must be a multiple of :func:`group_size`. Every draw is marginally N(0, I).
    """
    g = group_size(mode, rank)
    if num % g:
        raise ValueError(f"{mode} sampling draws groups of {g}; got {num} samples")
    if mode == "naive":
        return (
            torch.randn(num, dim, generator=generator, dtype=dtype),
            torch.randn(num, rank, generator=generator, dtype=dtype),
        )
    half = num // 2
    eps = torch.randn(half, dim, generator=generator, dtype=dtype)
    if mode == "paired":
        eta = torch.randn(half, rank, generator=generator, dtype=dtype)
    else:
        # each group of K rows: √K R e_k, k = 1..K, for a fresh random rotation R
        rotations = random_orthogonal(rank, generator, dtype, batch=num // g)
        eta = math.sqrt(rank) * rotations.transpose(-1, -2).reshape(-1, rank)
    # mirrors follow their twins: rows [0, half) and [half, num) are ± the same noise
    return torch.cat([eps, -eps], 0), torch.cat([eta, -eta], 0)


# ----------------------------------------------------------------------------- the mixture family


class LowRankMixture(nn.Module):
    """q(θ) = Σ_c w_c N(μ_c, diag(σ_c²) + U_c U_cᵀ): MF-VI, sN-VI and sGMM-VI in one class.

    Parameters are μ (C, P), ρ (C, P) with σ = softplus(ρ), U (C, P, K) and mixture logits
    (C,). C = 1 and K = 0 is the mean-field Gaussian.
    """

    def __init__(
        self,
        mean: torch.Tensor,
        std: torch.Tensor | float,
        rank: int = 0,
        components: int = 1,
        factor_std: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        mean = mean.detach()
        if mean.ndim == 1:
            mean = mean.unsqueeze(0).repeat(components, 1)
        c, p = mean.shape
        std_t = torch.as_tensor(std, dtype=mean.dtype).expand(c, p)
        self.mean = nn.Parameter(mean.clone())
        self.rho = nn.Parameter(std_t + torch.log(-torch.expm1(-std_t)))  # softplus⁻¹
        factors = factor_std * torch.randn(c, p, rank, generator=generator, dtype=mean.dtype)
        self.factors = nn.Parameter(factors)
        self.logits = nn.Parameter(torch.zeros(c, dtype=mean.dtype), requires_grad=c > 1)

    @property
    def num_components(self) -> int:
        return self.mean.shape[0]

    @property
    def rank(self) -> int:
        return self.factors.shape[-1]

    @property
    def dim(self) -> int:
        return self.mean.shape[-1]

    def std(self) -> torch.Tensor:
        return F.softplus(self.rho)

    def log_weights(self) -> torch.Tensor:
        return torch.log_softmax(self.logits, 0)

    def log_prob(self, theta: torch.Tensor) -> torch.Tensor:
        """log q(θ) for θ (S, P): logsumexp over components of log w_c + log N_c(θ)."""
        return mixture_log_prob(theta, self.mean, self.std(), self.factors, self.log_weights())

    def component_draws(
        self, c: int, num: int, mode: SamplingMode, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``num`` reparameterised draws (num, P) from component c, coupled by ``mode``."""
        eps, eta = standard_noise(num, self.dim, self.rank, mode, generator, self.mean.dtype)
        theta = self.mean[c] + eps * self.std()[c]
        if self.rank:
            theta = theta + eta @ self.factors[c].T
        return theta

    def draws_per_component(self, num: int, mode: SamplingMode) -> int:
        """``num`` rounded up to a whole number of coupled groups."""
        g = group_size(mode, self.rank)
        return g * max(1, math.ceil(num / g))

    def state(self) -> dict[str, torch.Tensor]:
        """Detached tensors for :class:`~core.engine.inference.variational.VariationalPosterior`."""
        return {
            "mean": self.mean.detach().clone(),
            "diag_std": self.std().detach().clone(),
            "factors": self.factors.detach().clone(),
            "log_weights": self.log_weights().detach().clone(),
        }


def mixture_log_prob(
    theta: torch.Tensor,
    means: torch.Tensor,
    stds: torch.Tensor,
    factors: torch.Tensor,
    log_weights: torch.Tensor,
) -> torch.Tensor:
    """log Σ_c w_c N(θ; μ_c, diag(σ_c²) + U_c U_cᵀ) for θ (S, P)."""
    per = torch.stack(
        [
            lowrank_log_prob(theta, means[c], stds[c], factors[c]) + log_weights[c]
            for c in range(means.shape[0])
        ],
        0,
    )
    return torch.logsumexp(per, 0)


def mixture_sample(
    num: int,
    means: torch.Tensor,
    stds: torch.Tensor,
    factors: torch.Tensor,
    log_weights: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``num`` independent draws (num, P) from the mixture (ancestral sampling)."""
    c, p = means.shape
    k = factors.shape[-1]
    if c == 1:  # fast path: no component bookkeeping, in-place arithmetic
        theta = torch.randn(num, p, generator=generator, dtype=means.dtype)
        theta.mul_(stds[0]).add_(means[0])
        if k:
            eta = torch.randn(num, k, generator=generator, dtype=means.dtype)
            theta.addmm_(eta, factors[0].T)
        return theta
    comp = torch.multinomial(log_weights.exp().float(), num, replacement=True, generator=generator)
    eps = torch.randn(num, p, generator=generator, dtype=means.dtype)
    eta = torch.randn(num, k, generator=generator, dtype=means.dtype)
    theta = torch.empty(num, p, dtype=means.dtype)
    for j in range(c):  # per component, so no (S, P, K) tensor is ever gathered
        rows = (comp == j).nonzero().squeeze(-1)
        if len(rows) == 0:
            continue
        part = means[j] + eps[rows] * stds[j]
        if k:
            part = part + eta[rows] @ factors[j].T
        theta[rows] = part
    return theta
