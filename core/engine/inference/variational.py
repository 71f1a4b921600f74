"""A generic variational engine over any torch model (Le Folgoc et al., "Is MC Dropout Bayesian?").

The weights of an arbitrary ``nn.Module`` are flattened into one vector θ ∈ ℝᴾ (a
:class:`ParamLayout`); a variational family q(θ) draws stacked θ's and the model is
evaluated on all of them at once (:func:`core.engine.models.stacked_forward`).

Families (all one class, :class:`LowRankMixture`, with C components and rank K):

- **MF-VI** (C = 1, K = 0): q = N(μ, diag(σ²)), σ = softplus(ρ) (Blundell et al. 2015).
- **sN-VI** (C = 1, K ≥ 1): q = N(μ, Σ), Σ = diag(σ²) + U Uᵀ with U ∈ ℝᴾˣᴷ, one U over
  *all* parameters jointly. A draw is θ = μ + σ ⊙ ε + U η, ε ~ N(0, I_P), η ~ N(0, I_K).
  The density uses the Woodbury identity and the matrix-determinant lemma with
  D = diag(σ²) and the K×K capacitance M = I_K + Uᵀ D⁻¹ U::

      Σ⁻¹ = D⁻¹ − D⁻¹ U M⁻¹ Uᵀ D⁻¹,      log|Σ| = Σᵢ log σᵢ² + log|M|,

  so log q costs O(P K²) and memory O(P K); the P×P matrix is never formed.
- **sGMM-VI** (C > 1): q = Σ_c w_c N(μ_c, Σ_c), w = softmax(logits). The ELBO is
  stratified over components, ELBO = Σ_c w_c E_{q_c}[log p(D, θ) − log q(θ)], so the
  weights get exact gradients and each component is reparameterised.

Sampling modes for the Monte-Carlo ELBO (:data:`SamplingMode`):

- ``naive``: independent draws.
- ``paired``: antithetic twins μ ± δ; every pair averages to μ exactly.
- ``unscented``: groups of 2K draws. A random orthogonal R ∈ O(K) gives the K coupled
  low-rank noises η_k = √K · R e_k and their mirrors −η_k, so the group's low-rank part has
  mean 0 and covariance exactly I_K (Σ_k η_k η_kᵀ / K = R Rᵀ = I); the diagonal noise is
  drawn per pair and mirrored with it.

The ELBO uses log q(θ) at the drawn samples (not a closed-form entropy), as in the paper:
ELBO ≈ Σ_s [log p(D | θ_s) + log p(θ_s) − log q(θ_s)] / S.

Local reparameterisation (Kingma, Salimans & Welling 2015) is available for diagonal
families: for ``nn.Linear`` layers the pre-activation b = x Wᵀ + c with independent Gaussian
weights is itself Gaussian, b ~ N(x μ_Wᵀ + μ_c, x² (σ_W²)ᵀ + σ_c²), and is sampled directly,
one independent draw per example; ``nn.Conv2d`` layers draw one whole kernel per example, since
a feature map's positions share it (:class:`LocalReparameterisation`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from core.engine.device import seeded_generator
from core.engine.inference.base import (
    Dataset,
    Posterior,
    ProgressRecord,
    check_param_shapes,
    minibatches,
    register_posterior_kind,
    sample_count_setting,
)
from core.engine.models import (
    ArchSpec,
    build_model,
    first_layer_matrix,
    first_linear_name,
    stacked_forward,
)

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


# ----------------------------------------------------------------------------- layout


class ParamLayout:
    """The named parameters of a model as slices of one flat vector θ ∈ ℝᴾ."""

    def __init__(self, named_shapes: list[tuple[str, torch.Size]]) -> None:
        self.names = [n for n, _ in named_shapes]
        self.shapes = {n: torch.Size(s) for n, s in named_shapes}
        self.offsets: dict[str, tuple[int, int]] = {}
        start = 0
        for name, shape in named_shapes:
            size = math.prod(shape)
            self.offsets[name] = (start, start + size)
            start += size
        self.size = start

    @classmethod
    def of(cls, model: nn.Module) -> ParamLayout:
        return cls([(n, p.shape) for n, p in model.named_parameters()])

    def flatten(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """Concatenate ``params`` (no leading dims) into a vector of length P."""
        return torch.cat([params[n].reshape(-1) for n in self.names])

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of ``theta`` (..., P) as named tensors (..., *shape)."""
        lead = theta.shape[:-1]
        return {
            n: theta[..., a:b].reshape(*lead, *self.shapes[n]) for n, (a, b) in self.offsets.items()
        }


def stacked_logits(
    model: nn.Module,
    layout: ParamLayout,
    theta: torch.Tensor,
    x: torch.Tensor,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Logits (S, N, K) of the model at each row of ``theta`` (S, P) (see
    :func:`core.engine.models.stacked_forward`)."""
    return stacked_forward(model, layout.unflatten(theta), x, chunk_size)


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


# ----------------------------------------------------------------------------- families


@dataclass(frozen=True)
class GaussianVIConfig:
    """Settings every Gaussian variational family shares (MF-VI, sN-VI, sGMM-VI).

    Attributes
    ----------
    prior, prior_std, prior_df
        ``gaussian`` N(0, prior_std²) or ``student_t`` prior_std · t_{prior_df}, per weight.
    init_std
        Initial σ of every weight (μ starts at the architecture's initialisation).
    sampling, num_samples
        Coupling of the draws (``naive``, ``paired``, ``unscented``) and draws per step.
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate.
    predict_samples
        Default number of posterior draws at prediction.
    """

    prior: PriorName = "gaussian"
    prior_std: float = 1.0
    prior_df: float = 3.0
    init_std: float = 0.01
    sampling: SamplingMode = "paired"
    num_samples: int = 2
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    predict_samples: int = 100

    def __post_init__(self) -> None:
        Prior(self.prior, self.prior_std, self.prior_df)  # validates
        if self.init_std <= 0 or self.num_samples < 1 or self.predict_samples < 1:
            raise ValueError("init_std, num_samples and predict_samples must be positive")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs, batch_size and lr must be positive")


@dataclass(frozen=True)
class LowRankVIConfig(GaussianVIConfig):
    """:class:`GaussianVIConfig` plus the low-rank factors U of sN-VI and sGMM-VI.

    Attributes
    ----------
    rank
        K, the number of low-rank directions.
    init_factor_std
        Standard deviation of U's random initial entries.
    factor_lr
        Adam learning rate of U (smaller than ``lr``: see :func:`factor_groups`).
    """

    rank: int = 4
    init_factor_std: float = 1e-3
    factor_lr: float = 1e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rank < 0 or self.init_factor_std < 0 or self.factor_lr <= 0:
            raise ValueError("rank and init_factor_std must be ≥ 0 and factor_lr positive")
        group_size(self.sampling, self.rank)


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
        """Detached tensors for :class:`VariationalPosterior`."""
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


@dataclass
class ElboTerms:
    """Monte-Carlo ELBO terms (weighted over components), with gradients."""

    log_likelihood: torch.Tensor
    log_prior: torch.Tensor
    log_q: torch.Tensor
    draws: torch.Tensor
    weights: torch.Tensor

    @property
    def kl(self) -> torch.Tensor:
        return self.log_q - self.log_prior

    @property
    def elbo(self) -> torch.Tensor:
        return self.log_likelihood - self.kl


def elbo_terms(
    family: LowRankMixture,
    log_likelihood: Callable[[torch.Tensor], torch.Tensor],
    log_prior: Callable[[torch.Tensor], torch.Tensor],
    num_samples: int,
    mode: SamplingMode,
    generator: torch.Generator | None = None,
) -> ElboTerms:
    """Stratified ELBO: Σ_c w_c (1/S) Σ_s [log p(D|θ_cs) + log p(θ_cs) − log q(θ_cs)].

    ``log_likelihood`` and ``log_prior`` map draws (S, P) to (S,).
    """
    s = family.draws_per_component(num_samples, mode)
    draws = torch.cat(
        [family.component_draws(c, s, mode, generator) for c in range(family.num_components)], 0
    )
    weights = family.log_weights().exp().repeat_interleave(s) / s
    return ElboTerms(
        (weights * log_likelihood(draws)).sum(),
        (weights * log_prior(draws)).sum(),
        (weights * family.log_prob(draws)).sum(),
        draws,
        weights,
    )


def fit_density(
    family: LowRankMixture,
    log_target: Callable[[torch.Tensor], torch.Tensor],
    *,
    steps: int,
    lr: float,
    num_samples: int,
    mode: SamplingMode,
    generator: torch.Generator,
) -> list[float]:
    """Maximise E_q[log p̃(θ) − log q(θ)] for an unnormalised log-density; return the ELBO trace."""
    opt = torch.optim.Adam([p for p in family.parameters() if p.requires_grad], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    trace = []

    def flat(theta: torch.Tensor) -> torch.Tensor:
        return theta.new_zeros(theta.shape[0])

    for _ in range(steps):
        terms = elbo_terms(family, log_target, flat, num_samples, mode, generator)
        opt.zero_grad(set_to_none=True)
        (-terms.elbo).backward()
        opt.step()
        sched.step()
        trace.append(terms.elbo.item())
    return trace


# ----------------------------------------------------------------------------- local reparam


class LocalReparameterisation:
    """Forward hooks that add the weights' Gaussian noise to Linear / Conv2d outputs.

    The model is called with the *mean* weights; while :attr:`variances` is set (a dict from
    parameter name to its elementwise variance, missing names meaning "deterministic"), each
    hooked layer's output b = layer(x; μ) gets the noise of an independent weight draw per
    example, as prediction draws whole weights:

    - Linear: b + √(layer(x²; σ²)) ⊙ ξ, ξ ~ N(0, I), the local reparameterisation (Kingma et al.
      2015). Each output unit has its own row of weights, so this is the exact distribution of one
      example's outputs under a weight draw.
    - Conv2d: b + layer_b(x; σ ⊙ ε_b), one kernel ε_b ~ N(0, I) per example b. The positions of a
      feature map share their kernel, so their noise is correlated; independent noise at every
      position (the local reparameterisation) is a different model from the one predicted with.
    """

    def __init__(self, model: nn.Module) -> None:
        self.variances: dict[str, torch.Tensor] | None = None
        self.generator: torch.Generator | None = None
        self.layers: dict[str, nn.Module] = {}
        self._handles = []
        for prefix, module in model.named_modules():
            if isinstance(module, nn.Linear | nn.Conv2d):
                if isinstance(module, nn.Conv2d) and module.padding_mode != "zeros":
                    continue
                self.layers[prefix] = module
                self._handles.append(module.register_forward_hook(self._hook_for(prefix)))

    def covered(self) -> set[str]:
        """Parameter names whose noise the hooks take care of."""
        names = set()
        for prefix, module in self.layers.items():
            for pname, _ in module.named_parameters(recurse=False):
                names.add(f"{prefix}.{pname}" if prefix else pname)
        return names

    def _randn(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        return torch.randn(shape, generator=self.generator, dtype=like.dtype)

    def _conv_noise(self, module: nn.Conv2d, x: torch.Tensor, w_var, b_var, output: torch.Tensor) -> torch.Tensor:
        """One whole kernel (and bias) draw per example, applied as a grouped convolution."""
        n, out_channels = output.shape[0], output.shape[1]
        noise = torch.zeros_like(output)
        if w_var is not None:
            kernels = (w_var + 1e-16).sqrt() * self._randn((n, *w_var.shape), output)
            noise = F.conv2d(
                x.reshape(1, -1, *x.shape[2:]),
                kernels.reshape(-1, *w_var.shape[1:]),
                None,
                module.stride,
                module.padding,
                module.dilation,
                n * module.groups,
            ).view_as(output)
        if b_var is not None:
            bias = (b_var + 1e-16).sqrt() * self._randn((n, out_channels), output)
            noise = noise + bias[:, :, None, None]
        return noise

    def _hook_for(self, prefix: str):
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor):
            if self.variances is None:
                return None
            key = f"{prefix}." if prefix else ""
            w_var = self.variances.get(key + "weight")
            b_var = self.variances.get(key + "bias")
            if w_var is None and b_var is None:
                return None
            x = inputs[0]
            if isinstance(module, nn.Conv2d):
                return output + self._conv_noise(module, x, w_var, b_var, output)
            var = b_var.expand_as(output) if w_var is None else F.linear(x * x, w_var, b_var)
            return output + (var + 1e-16).sqrt() * self._randn(output.shape, output)

        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


# ----------------------------------------------------------------------------- posterior


@register_posterior_kind
class VariationalPosterior(Posterior):
    """A fitted q(θ): a mixture of low-rank Gaussians over the flattened weights.

    Tensors: ``mean`` (C, P), ``diag_std`` (C, P), ``factors`` (C, P, K), ``log_weights``
    (C,). MF-VI has C = 1, K = 0; variational dropout stores σ = √α |μ| (0 for its
    deterministic biases). Prediction draws θ ~ q and evaluates all draws at once
    (:func:`core.engine.models.stacked_forward`).
    """

    kind = "variational"
    default_num_samples = 100

    def __init__(
        self,
        method: str,
        arch: ArchSpec,
        config: dict[str, Any],
        seed: int,
        dataset: str,
        tensors: dict[str, torch.Tensor],
        info: dict[str, Any] | None = None,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__(method, arch, config, seed, dataset, info)
        missing = {"mean", "diag_std", "factors", "log_weights"} - set(tensors)
        if missing:
            raise ValueError(f"variational posterior lacks tensors {sorted(missing)}")
        self._model = build_model(arch)
        self.layout = ParamLayout.of(self._model)
        mean, std = tensors["mean"].float(), tensors["diag_std"].float()
        factors, logw = tensors["factors"].float(), tensors["log_weights"].float()
        if logw.ndim != 1 or len(logw) < 1 or factors.ndim != 3:
            raise ValueError(
                f"variational tensors have shapes log_weights {tuple(logw.shape)}, factors "
                f"{tuple(factors.shape)}; q(θ) needs at least one mixture component"
            )
        c = logw.shape[0]
        p = self.layout.size
        if mean.shape != (c, p) or std.shape != (c, p) or factors.shape[:2] != (c, p):
            raise ValueError(
                f"variational tensors have shapes mean {tuple(mean.shape)}, factors "
                f"{tuple(factors.shape)}; architecture {arch.name!r} has {p} parameters"
            )
        if (std < 0).any() or not torch.isfinite(mean).all():
            raise ValueError("variational posterior has negative scales or non-finite means")
        self.mean, self.diag_std, self.factors, self.log_weights = mean, std, factors, logw
        self.chunk_size = chunk_size
        self._bank: tuple[int | None, torch.Generator | None, torch.Tensor] | None = None
        self.default_num_samples = sample_count_setting(self.config, "predict_samples", self.default_num_samples)

    @property
    def rank(self) -> int:
        return self.factors.shape[-1]

    @property
    def num_components(self) -> int:
        return self.mean.shape[0]

    def sample_flat(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Independent draws θ ~ q, shape (S, P)."""
        return mixture_sample(
            num_samples, self.mean, self.diag_std, self.factors, self.log_weights, generator
        )

    def sample_params(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Draws as named weights with a leading dimension S."""
        return self.layout.unflatten(self.sample_flat(num_samples, generator))

    def log_prob(self, theta: torch.Tensor) -> torch.Tensor:
        """log q(θ) for flat θ (S, P); needs σ > 0 everywhere."""
        return mixture_log_prob(theta, self.mean, self.diag_std, self.factors, self.log_weights)

    def fixed_draws(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """S weight sets, drawn once per generator object and then reused.

        Without a generator the bank is seeded by the posterior's seed. Drawing S·P normals
        costs far more than evaluating the network, and a data set streamed in batches (or a
        drawing updated stroke by stroke) should be predicted by one consistent set of S
        models, as with a sampler's stored draws. A different generator object gives new
        draws; :meth:`sample_flat` always draws afresh.
        """
        key = id(generator) if generator is not None else None
        cached = self._bank
        if cached is None or cached[0] != key or cached[2].shape[0] < num_samples:
            g = generator or seeded_generator(self.seed + 104729)
            # the generator is kept referenced so that its id cannot be reused by another
            # At least the default count, so a smaller request (the window's preview while a
            # stroke moves) is the first rows of the bank the full request uses.
            self._bank = (key, generator, self.sample_flat(max(num_samples, self.default_num_samples), g))
        return self._bank[2][:num_samples]

    def predict_logits(
        self,
        x: torch.Tensor,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Logits (S, N, K) of the S weight sets of :meth:`fixed_draws` for ``generator``."""
        s = num_samples or self.default_num_samples
        with torch.no_grad():
            theta = self.fixed_draws(s, generator)
            params, first = self._prepared(theta)
            return stacked_forward(self._model, params, x, self.chunk_size, first)

    #: How many draw counts keep their prepared weights (the window's preview and full count).
    PREPARED_KEPT = 2

    def _prepared(self, theta: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """``theta``'s named weights and its first linear layer as one matrix
        (:func:`~core.engine.models.first_layer_matrix`), made once per bank and draw count and
        kept for the last :data:`PREPARED_KEPT` counts, as
        :meth:`~core.engine.inference.base.SampledPosterior._prepared` does for stored draws: a
        stroke judged from the bank's same rows copied every weight into that matrix first
        (0.3 MB a column at 16 MF-VI draws of softmax regression, 3 MB at 100). The same matrix
        as made afresh, so the logits are bit for bit the same."""
        bank = self._bank[2] if self._bank is not None else None
        cache = self.__dict__.get("_prepared_weights", {})  # replaced whole, never changed: threads share it
        key = (theta.shape[0], theta.data_ptr(), id(bank))
        found = cache.get(key)
        if found is not None and found[0] is bank:
            return found[1]
        params = self.layout.unflatten(theta)
        name = first_linear_name(self._model)
        first = None
        if self.chunk_size is None and name is not None:  # a chunked posterior is short of memory
            first = first_layer_matrix(params[f"{name}.weight"])
        prepared = (params, first)
        if bank is not None and theta.data_ptr() == bank.data_ptr():  # rows of the kept bank: worth keeping
            kept = list(cache.items())[len(cache) - self.PREPARED_KEPT + 1 :]
            self._prepared_weights = {**dict(kept), key: (bank, prepared)}
        return prepared

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the prepared weights, remade where it is unpickled."""
        return {k: v for k, v in self.__dict__.items() if k != "_prepared_weights"}

    def predict_proba(self, x, num_samples=None, generator=None):
        return torch.softmax(self.predict_logits(x, num_samples, generator).float(), dim=-1)

    def state_tensors(self):
        return {
            "mean": self.mean,
            "diag_std": self.diag_std,
            "factors": self.factors,
            "log_weights": self.log_weights,
        }

    @classmethod
    def from_state(cls, method, arch, config, seed, dataset, info, tensors):
        return cls(method, arch, config, seed, dataset, tensors, info)

    def mean_params(self, component: int = 0) -> dict[str, torch.Tensor]:
        """The mean weights of one component, by name (for a MAP-like single pass)."""
        params = self.layout.unflatten(self.mean[component])
        check_param_shapes(self.arch, params, lead=0)
        return params


# ----------------------------------------------------------------------------- training loop


@dataclass
class VariationalState:
    """What a variational fit carries from step to step.

    Attributes
    ----------
    model
        The architecture, evaluated functionally (its own parameters are never trained).
    layout
        Flat-vector layout of the model's parameters.
    variational
        Module holding the variational parameters (a :class:`LowRankMixture` or a method's own).
    optimiser, scheduler
        Adam with a cosine-annealed learning rate over the variational parameters.
    num_train
        N, the training-set size that scales the likelihood against the KL.
    step
        Steps taken so far.
    local
        Local-reparameterisation hooks on the model, when the method uses them.
    """

    model: nn.Module
    layout: ParamLayout
    variational: nn.Module
    optimiser: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    num_train: int
    step: int = 0
    local: LocalReparameterisation | None = None


def make_state(
    model: nn.Module,
    variational: nn.Module,
    num_train: int,
    lr: float,
    total_steps: int,
    param_groups: list[dict[str, Any]] | None = None,
) -> VariationalState:
    """Adam (cosine-annealed) over ``variational``'s parameters or the given groups."""
    groups = param_groups or [p for p in variational.parameters() if p.requires_grad]
    opt = torch.optim.Adam(groups, lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(total_steps, 1))
    return VariationalState(model, ParamLayout.of(model), variational, opt, sched, num_train)


def factor_groups(family: LowRankMixture, config: Any) -> list[dict[str, Any]]:
    """Adam groups: U at ``config.factor_lr``, everything else at ``config.lr``.

    Adam moves every coordinate by about its learning rate whatever the gradient's size, so
    with noisy ELBO gradients U would random-walk to a large norm (its entropy reward is
    tiny per coordinate); a smaller rate for U keeps that walk short.
    """
    rest = [p for n, p in family.named_parameters() if n != "factors" and p.requires_grad]
    return [
        {"params": rest, "lr": config.lr},
        {"params": [family.factors], "lr": config.factor_lr},
    ]


def batch_log_likelihood(
    state: VariationalState, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-draw mean log p(y | x, θ) over the batch (S,) and the logits (S, B, K)."""
    logits = stacked_logits(state.model, state.layout, theta, x)
    logp = torch.log_softmax(logits, -1).gather(-1, y.expand(logits.shape[0], -1).unsqueeze(-1))
    return logp.squeeze(-1).mean(-1), logits


def apply_gradients(state: VariationalState, loss: torch.Tensor) -> float:
    """One Adam step on ``loss``; returns the gradient norm."""
    state.optimiser.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for p in state.variational.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])) if params else 0.0
    state.optimiser.step()
    state.scheduler.step()
    state.step += 1
    if not math.isfinite(loss.item()):
        raise FloatingPointError(
            f"the negative ELBO became {loss.item()} at step {state.step}; lower the learning rate"
        )
    return float(norm)


def train_loop(
    state: VariationalState,
    data: Dataset,
    *,
    epochs: int,
    batch_size: int,
    step: Callable[
        [VariationalState, tuple[torch.Tensor, torch.Tensor], torch.Generator],
        tuple[VariationalState, dict[str, float]],
    ],
    generator: torch.Generator,
    report_every: int = 20,
) -> Generator[ProgressRecord, None, None]:
    """Run ``step`` over mini-batches, yielding the mean of its info over the steps since the
    previous report (every ``report_every`` steps and at each pass's end; the mean does not restart,
    and so does not drop, at a pass boundary).

    Each info holds ``elbo``, ``expected_log_likelihood`` and ``kl`` (all per training
    example: ELBO/N = E_q[log p(y|x,θ)]_batch-mean − KL/N) plus ``loss`` = −elbo.
    """
    steps_per_epoch = math.ceil(len(data) / batch_size)
    total = epochs * steps_per_epoch
    sums: dict[str, float] = {}
    steps_summed = 0
    for epoch in range(epochs):
        seen = 0
        for count, idx in enumerate(minibatches(len(data), batch_size, generator), start=1):
            state, info = step(state, (data.x[idx], data.y[idx]), generator)
            seen += len(idx)
            steps_summed += 1
            for k, v in info.items():
                sums[k] = sums.get(k, 0.0) + v
            if state.step % report_every == 0 or count == steps_per_epoch:
                values = {k: v / steps_summed for k, v in sums.items()}
                values["epoch"] = epoch + seen / len(data)
                values["lr"] = state.scheduler.get_last_lr()[0]
                yield ProgressRecord(state.step, total, values)
                sums, steps_summed = {}, 0


def info_from(
    ell: torch.Tensor,
    kl_per_example: torch.Tensor,
    logits: torch.Tensor,
    y: torch.Tensor,
    grad_norm: float,
) -> dict[str, float]:
    """Progress values of one step (floats, detached)."""
    ell_value, kl_value = ell.item(), kl_per_example.item()
    elbo = ell_value - kl_value
    probs = torch.softmax(logits.detach().reshape(-1, *logits.shape[-2:]), -1).mean(0)
    return {
        "elbo": elbo,
        "loss": -elbo,
        "expected_log_likelihood": ell_value,
        "kl": kl_value,
        "train_accuracy": float((probs.argmax(-1) == y).float().mean()),
        "grad_norm": grad_norm,
    }


def initial_mean(arch: ArchSpec, seed: int) -> tuple[nn.Module, torch.Tensor]:
    """The architecture's own initialisation (seeded) as the variational mean."""
    torch.manual_seed(seed)
    model = build_model(arch)
    for p in model.parameters():
        p.requires_grad_(False)
    return model, ParamLayout.of(model).flatten(dict(model.named_parameters())).detach().clone()


def mixture_step(
    state: VariationalState,
    batch: tuple[torch.Tensor, torch.Tensor],
    generator: torch.Generator,
    *,
    prior: Prior,
    num_samples: int,
    mode: SamplingMode,
) -> tuple[VariationalState, dict[str, float]]:
    """One stochastic ELBO step for a :class:`LowRankMixture` with draws of the full θ."""
    x, y = batch
    family: LowRankMixture = state.variational  # type: ignore[assignment]
    cache: dict[str, torch.Tensor] = {}

    def log_lik(theta: torch.Tensor) -> torch.Tensor:
        ll, cache["logits"] = batch_log_likelihood(state, theta, x, y)
        return ll

    terms = elbo_terms(family, log_lik, prior.log_prob, num_samples, mode, generator)
    kl = terms.kl / state.num_train
    norm = apply_gradients(state, -(terms.log_likelihood - kl))
    return state, info_from(terms.log_likelihood, kl, cache["logits"], y, norm)


def run_fit(
    method: str,
    config: Any,
    arch: ArchSpec,
    data: Dataset,
    seed: int,
    init: Callable[[Any, ArchSpec, int, int], VariationalState],
    step: Callable[..., tuple[VariationalState, dict[str, float]]],
    describe: Callable[[VariationalPosterior], dict[str, Any]],
) -> Generator[ProgressRecord, None, VariationalPosterior]:
    """Every variational method's ``fit``: ``init`` its state, run ``step(state, batch,
    generator, config)`` for ``config.epochs`` with a generator seeded by ``seed``, and wrap
    q(θ) as a posterior whose info ``describe`` completes (family, rank, components ...)."""
    generator = seeded_generator(seed)
    state = init(config, arch, len(data), seed)
    last: ProgressRecord | None = None
    keep = ("elbo", "kl", "expected_log_likelihood")
    # each epoch's whole mean, from its reports' means weighted by their steps (a report closes each
    # epoch, so no report's steps span two)
    epoch_sums: dict[int, dict[str, float]] = {}
    epoch_steps: dict[int, int] = {}
    try:
        for record in train_loop(
            state,
            data,
            epochs=config.epochs,
            batch_size=config.batch_size,
            step=lambda s, batch, g: step(s, batch, g, config),
            generator=generator,
        ):
            steps = record.step - (last.step if last is not None else 0)
            last = record
            epoch = math.ceil(record.values["epoch"] - 1e-9) - 1
            sums = epoch_sums.setdefault(epoch, dict.fromkeys(keep, 0.0))
            for k in keep:
                sums[k] += record.values[k] * steps
            epoch_steps[epoch] = epoch_steps.get(epoch, 0) + steps
            yield record
    finally:
        if state.local is not None:
            state.local.remove()
    info: dict[str, Any] = {"num_parameters": state.layout.size}
    if last is not None:
        means = {e: {k: v / epoch_steps[e] for k, v in epoch_sums[e].items()} for e in sorted(epoch_sums)}
        info.update({k: round(v, 6) for k, v in means[max(means)].items()})  # the last epoch's
        # the curve that shows whether the ELBO had stopped improving when training stopped
        info["elbo_per_epoch"] = [round(m["elbo"], 6) for m in means.values()]
    posterior = VariationalPosterior(
        method, arch, asdict(config), seed, data.name, state.variational.state(), info
    )
    posterior.info.update(describe(posterior))
    return posterior
