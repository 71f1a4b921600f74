"""The Laplace approximation around a MAP network (MacKay 1992; Ritter, Botev & Barber 2018;
Daxberger et al. 2021, "Laplace Redux"; Immer et al. 2021 for the prior precision).

With θ* the MAP weights (:mod:`core.engine.inference.map`), H the generalised Gauss-Newton
matrix of the summed negative log-likelihood at θ* over the N training images, and a prior
θ ~ N(0, δ⁻¹ I), the posterior over a subset S of the weights (the last layer, or all) is

    q(θ_S) = N(θ*_S, (H_SS + δ I)⁻¹),        the other weights fixed at θ*.

H_SS (:mod:`core.engine.inference.ggn`) comes from the curvature library curvlinops (no
torchvision needed, so the app's CPU-only torch can fit it), in one of three structures:

- ``kron``: per layer, the Kronecker factors G ⊗ A of K-FAC with the exact output Hessian
  (curvlinops' type-2 K-FAC); eigenvalues λ_G,i · λ_A,j;
- ``full``: the exact GGN block, for small subsets (its size is estimated first, and a
  matrix that cannot fit is refused with a sentence naming a cheaper structure). For softmax
  regression the GGN of the cross-entropy is its exact Hessian. With δ fixed (``prior``) the
  posterior keeps the Cholesky factor L of H + δI and draws ε = L⁻ᵀz; with ``marglik`` it keeps
  the eigendecomposition of H, which the evidence needs for every δ;
- ``diag``: the exact diagonal of the GGN, Σₙ Σ_k (∂ (L_nᵀ f_n)_k / ∂θ)² with
  L_n Lₙᵀ = diag(p_n) − p_n p_nᵀ, from per-image Jacobians (torch.func).

The prior precision δ either follows the MAP's prior (δ = 1/σ²) or maximises the Laplace
evidence (``marglik``), for fixed θ*:

    log Z(δ) = log p(D | θ*) − ½ δ ‖θ*_S‖² + ½ P_S log δ − ½ Σᵢ log(λᵢ + δ),

whose stationary point solves P_S/δ − Σᵢ 1/(λᵢ + δ) = ‖θ*_S‖² (MacKay's fixed point; a unique
root, found by bisection in log δ). Predictions either average ``predict_samples`` weight draws
(``sample``) or, for the last layer, use the probit approximation of the linearised
predictive, p ≈ softmax(μ_f / √(1 + π/8 · diag Σ_f)) with the logits' exact mean μ_f and
covariance Σ_f (``probit``: one deterministic predictive, no draws).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import nn

from core.engine.device import seeded_generator
from core.engine.inference.base import (
    Dataset,
    FitGenerator,
    Posterior,
    ProgressRecord,
    register_posterior_kind,
)
from core.engine.inference.ggn import (
    Structure,
    Subset,
    curvature_bytes,
    diag_ggn,
    full_ggn,
    kron_blocks,
    kron_eigen,
    last_linear,
    subset_index,
    subset_names,
    summed_nll,
)
from core.engine.inference.map import (
    GRAD_TOL,
    check_mode_settings,
    log_posterior_and_grad,
    train_to_mode,
)
from core.engine.inference.param_layout import ParamLayout, stacked_logits
from core.engine.memory import check_fits, format_bytes
from core.engine.models import ArchSpec, build_model


@dataclass(frozen=True)
class LaplaceConfig:
    """Hyperparameters of the Laplace approximation.

    Attributes
    ----------
    prior_std, epochs, batch_size, lr, optimiser, grad_tol, max_iter
        The MAP fit it starts from (as :class:`~core.engine.inference.map.MapConfig`: ``auto``
        runs Newton to the mode on softmax regression, Adam for ``epochs`` on a network);
        ``batch_size`` also batches the curvature's pass over the data.
    subset
        ``last_layer``: a Gaussian over the final layer only; ``all``: over every weight.
    structure
        ``kron`` (Kronecker-factored), ``diag`` (exact diagonal) or ``full`` (exact, small
        subsets only) curvature.
    prior_precision
        ``marglik``: δ maximises the Laplace evidence; ``prior``: δ = 1/prior_std².
    predictive
        ``sample``: average ``predict_samples`` weight draws; ``probit``: the probit
        approximation of the linearised predictive (last layer only).
    memory_budget_mb
        The most memory the curvature may take; a larger one is refused before it is built.
    """

    prior_std: float = 1.0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    subset: Subset = "last_layer"
    structure: Structure = "kron"
    prior_precision: Literal["marglik", "prior"] = "marglik"
    predictive: Literal["sample", "probit"] = "sample"
    predict_samples: int = 30
    memory_budget_mb: float = 2048.0
    optimiser: str = "auto"
    grad_tol: float = GRAD_TOL
    max_iter: int = 500

    def __post_init__(self) -> None:
        check_mode_settings(self.optimiser, self.grad_tol, self.max_iter)
        if self.prior_std <= 0 or self.lr <= 0 or self.memory_budget_mb <= 0:
            raise ValueError("prior_std, lr and memory_budget_mb must be positive")
        if self.epochs < 0 or self.batch_size < 1 or self.predict_samples < 1:
            raise ValueError("epochs must be ≥ 0, batch_size and predict_samples ≥ 1")
        for name, allowed in (("subset", ("last_layer", "all")), ("structure", ("kron", "diag", "full")),
                              ("prior_precision", ("marglik", "prior")), ("predictive", ("sample", "probit"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.predictive == "probit" and self.subset != "last_layer":
            raise ValueError("the probit predictive needs subset=last_layer (the logits are then "
                             "linear in the weights); use predictive=sample for all weights")


def check_curvature_fits(model: nn.Module, names: list[str], config: LaplaceConfig, arch: ArchSpec) -> None:
    """Refuse, before building it, a curvature larger than the budget or the free memory."""
    need = curvature_bytes(model, names, config.structure)
    count = sum(dict(model.named_parameters())[n].numel() for n in names)
    what = (f"the {config.structure} curvature of {count:,} weights "
            f"({'the last layer' if config.subset == 'last_layer' else 'all layers'} of {arch.name})")
    cheaper = {"full": "use structure=kron or structure=diag, or subset=last_layer",
               "kron": "use structure=diag or subset=last_layer", "diag": "use subset=last_layer"}[config.structure]
    if need > config.memory_budget_mb * 1e6:
        raise ValueError(f"{what} would need about {format_bytes(need)}, more than the "
                         f"{format_bytes(config.memory_budget_mb * 1e6)} allowed; {cheaper}")
    check_fits(need, what, cheaper, next(model.parameters()).device)


# ----------------------------------------------------------------------------- prior precision


def laplace_log_evidence(log_likelihood: float, theta_norm2: float, eigenvalues: torch.Tensor, delta: float) -> float:
    """log Z(δ) of the Laplace approximation (see the module's docstring)."""
    lam = eigenvalues.double()
    return float(log_likelihood - 0.5 * delta * theta_norm2 + 0.5 * lam.numel() * math.log(delta)
                 - 0.5 * torch.log(lam + delta).sum())


def optimise_prior_precision(eigenvalues: torch.Tensor, theta_norm2: float) -> float:
    """The δ > 0 that maximises :func:`laplace_log_evidence` for fixed θ* (bisection in log δ)."""
    lam = eigenvalues.double().clamp_min(0.0)
    p = lam.numel()
    if theta_norm2 <= 0:
        raise ValueError("the MAP weights are all zero: the evidence has no maximum in δ")

    def slope(log_delta: float) -> float:  # d log Z / d δ · 2, decreasing in δ
        d = math.exp(log_delta)
        return p / d - float((1.0 / (lam + d)).sum()) - theta_norm2

    lo, hi = -30.0, 30.0
    if slope(hi) > 0:
        return math.exp(hi)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if slope(mid) > 0 else (lo, mid)
    return math.exp((lo + hi) / 2)


# ----------------------------------------------------------------------------- the posterior


@register_posterior_kind
class LaplacePosterior(Posterior):
    """N(θ*_S, (H_SS + δ I)⁻¹) over a subset S of the weights, the rest at the MAP θ*.

    Tensors: ``mean`` (P,), ``prior_precision`` (1,), and by structure ``curvature`` (P_S,)
    for ``diag``; ``eigenvectors`` (P_S, P_S) and ``eigenvalues`` (P_S,) for ``full``;
    ``kron{i}_qg``, ``kron{i}_lg``, ``kron{i}_qa``, ``kron{i}_la`` per layer for ``kron``
    (eigendecompositions of G and A). Subset and structure are in the config.
    """

    kind = "laplace"
    default_num_samples = 30

    def __init__(self, method: str, arch: ArchSpec, config: dict[str, Any], seed: int, dataset: str,
                 tensors: dict[str, torch.Tensor], info: dict[str, Any] | None = None) -> None:
        super().__init__(method, arch, config, seed, dataset, info)
        self.settings = LaplaceConfig(**{k: v for k, v in config.items() if k in LaplaceConfig.__dataclass_fields__})
        self._model = build_model(arch).eval()
        self.layout = ParamLayout.of(self._model)
        self.names = subset_names(self._model, self.settings.subset)
        self.index = subset_index(self.layout, self.names)
        mean = tensors.get("mean")
        if mean is None or mean.shape != (self.layout.size,):
            raise ValueError(f"the Laplace mean must hold the {self.layout.size} weights of {arch.name}")
        self.mean = mean.float()
        self.tensors = {k: v.double() for k, v in tensors.items() if k != "mean"}
        delta = self.tensors.get("prior_precision")
        if delta is None or delta.numel() != 1 or not float(delta) > 0:
            raise ValueError("the Laplace posterior needs a positive prior precision")
        self.delta = float(delta)
        self._check_structure()
        self.default_num_samples = 1 if self.settings.predictive == "probit" else int(self.settings.predict_samples)
        self._model.load_state_dict({k: v for k, v in self.layout.unflatten(self.mean).items()})
        self._bank: tuple[int | None, torch.Generator | None, torch.Tensor] | None = None

    def _check_structure(self) -> None:
        size = self.index.numel()
        structure = self.settings.structure
        shapes: dict[str, tuple[int, ...]] = {}
        if structure == "diag":
            shapes = {"curvature": (size,)}
        elif structure == "full":
            shapes = ({"cholesky": (size, size)} if "cholesky" in self.tensors
                      else {"eigenvectors": (size, size), "eigenvalues": (size,)})
        else:
            params = dict(self._model.named_parameters())
            for i, (_, weight, bias) in enumerate(kron_blocks(self._model, self.names)):
                out, inp = params[weight].shape[0], params[weight][0].numel() + (1 if bias else 0)
                shapes.update({f"kron{i}_qg": (out, out), f"kron{i}_lg": (out,),
                               f"kron{i}_qa": (inp, inp), f"kron{i}_la": (inp,)})
        for name, shape in shapes.items():
            got = self.tensors.get(name)
            if got is None or tuple(got.shape) != shape:
                raise ValueError(f"the {structure} Laplace posterior's {name!r} should have shape {shape}, "
                                 f"it has {None if got is None else tuple(got.shape)}")

    @property
    def fixed_num_samples(self) -> int | None:
        return 1 if self.settings.predictive == "probit" else None

    # -- draws -------------------------------------------------------------------------
    def sample_subset(self, num_samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Deviations ε ~ N(0, (H + δI)⁻¹) of the subset, shape (S, P_S), in ``names`` order."""
        structure, d = self.settings.structure, self.delta
        size = self.index.numel()
        if structure == "diag":
            std = (self.tensors["curvature"].clamp_min(0) + d).rsqrt()
            return (torch.randn(num_samples, size, generator=generator, dtype=torch.float64) * std).float()
        if structure == "full":
            z = torch.randn(num_samples, size, generator=generator, dtype=torch.float64)
            if "cholesky" in self.tensors:  # ε = L⁻ᵀz: Cov ε = (L Lᵀ)⁻¹ = (H + δI)⁻¹
                chol = self.tensors["cholesky"]
                return torch.linalg.solve_triangular(chol.T, z.T, upper=True).T.float()
            q, lam = self.tensors["eigenvectors"], self.tensors["eigenvalues"].clamp_min(0)
            return ((z * (lam + d).rsqrt()) @ q.T).float()
        params = dict(self._model.named_parameters())
        parts: dict[str, torch.Tensor] = {}
        for i, (_, weight, bias) in enumerate(kron_blocks(self._model, self.names)):
            qg, lg = self.tensors[f"kron{i}_qg"], self.tensors[f"kron{i}_lg"].clamp_min(0)
            qa, la = self.tensors[f"kron{i}_qa"], self.tensors[f"kron{i}_la"].clamp_min(0)
            scale = (lg[:, None] * la[None, :] + d).rsqrt()
            z = torch.randn(num_samples, len(lg), len(la), generator=generator, dtype=torch.float64)
            e = qg @ (z * scale) @ qa.T  # (S, out, in [+1]) on [W b]
            w_shape = params[weight].shape
            if bias:
                parts[bias] = e[..., -1]
                e = e[..., :-1]
            parts[weight] = e.reshape(num_samples, *w_shape)
        return torch.cat([parts[n].reshape(num_samples, -1) for n in self.names], dim=1).float()

    def fixed_draws(self, num_samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Full weight sets θ = θ* + ε (S, P), drawn once per generator object and reused (as
        :meth:`VariationalPosterior.fixed_draws`, so strokes and batches share one set of S models)."""
        key = id(generator) if generator is not None else None
        if self._bank is None or self._bank[0] != key or self._bank[2].shape[0] < num_samples:
            g = generator or seeded_generator(self.seed + 104729)
            s = max(num_samples, self.default_num_samples)
            theta = self.mean.expand(s, -1).clone()
            theta[:, self.index] += self.sample_subset(s, g)
            self._bank = (key, generator, theta)
        return self._bank[2][:num_samples]

    # -- prediction ----------------------------------------------------------------------
    def _features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The MAP logits and the output layer's input [φ(x), 1] for a batch."""
        layer = dict(self._model.named_modules())[last_linear(self._model)]
        seen: list[torch.Tensor] = []
        handle = layer.register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
        try:
            logits = self._model(x)
        finally:
            handle.remove()
        phi = seen[0].flatten(1)
        return logits, torch.cat([phi, torch.ones(len(phi), 1, dtype=phi.dtype)], dim=1)

    def logit_covariance_diagonal(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The MAP logits μ_f (N, K) and diag Σ_f (N, K) of the last-layer Gaussian."""
        with torch.no_grad():
            mu, phi = self._features(x)
            phi = phi.double()
            d, structure = self.delta, self.settings.structure
            k = mu.shape[1]
            if structure == "kron":
                qg, lg = self.tensors["kron0_qg"], self.tensors["kron0_lg"].clamp_min(0)
                qa, la = self.tensors["kron0_qa"], self.tensors["kron0_la"].clamp_min(0)
                m2 = 1.0 / (lg[:, None] * la[None, :] + d)  # (K, in+1)
                proj = (phi @ qa).square()  # (N, in+1)
                var = (proj @ m2.T) @ qg.T.square()  # Σ_j M_ij² (Q_Aᵀφ)_j², through Q_G
                return mu, var.float()
            # [W row-major, b] order: J_n = [I_K ⊗ φᵀ, I_K]
            jac_index = torch.cat([torch.arange(k * (phi.shape[1] - 1)).reshape(k, -1),
                                   k * (phi.shape[1] - 1) + torch.arange(k)[:, None]], dim=1)  # (K, in+1)
            if structure == "diag":
                var_w = (self.tensors["curvature"].clamp_min(0) + d).reciprocal()[jac_index]  # (K, in+1)
                return mu, (phi.square() @ var_w.T).float()
            if "cholesky" in self.tensors:  # diag(J Σ Jᵀ) = ‖L⁻¹ J_nkᵀ‖² per image and class
                chol, n = self.tensors["cholesky"], len(phi)
                jt = torch.zeros(chol.shape[0], n * k, dtype=torch.float64)
                for c in range(k):
                    jt[jac_index[c], c::k] = phi.T
                solved = torch.linalg.solve_triangular(chol, jt, upper=False)
                return mu, solved.square().sum(0).reshape(n, k).float()
            q, lam = self.tensors["eigenvectors"], self.tensors["eigenvalues"].clamp_min(0)
            f = q * (lam + d).rsqrt()  # Σ = F Fᵀ
            jf = torch.einsum("nj,kjr->nkr", phi, f[jac_index])  # (N, K, P_S)
            return mu, jf.square().sum(-1).float()

    def predict_logits(self, x: torch.Tensor, num_samples: int | None = None,
                       generator: torch.Generator | None = None) -> torch.Tensor:
        s = num_samples or self.default_num_samples
        with torch.no_grad():
            theta = self.fixed_draws(s, generator)
            if self.settings.subset == "last_layer":  # the body is fixed: one pass, S output layers
                _, phi = self._features(x)
                sub = theta[:, self.index]
                k = self.arch.num_classes
                w = sub[:, : -k].reshape(s, k, -1)
                b = sub[:, -k:]
                return torch.einsum("nj,skj->snk", phi[:, :-1], w) + b[:, None, :]
            return stacked_logits(self._model, self.layout, theta, x)

    def predict_proba(self, x: torch.Tensor, num_samples: int | None = None,
                      generator: torch.Generator | None = None) -> torch.Tensor:
        if self.settings.predictive == "probit":
            mu, var = self.logit_covariance_diagonal(x)
            return torch.softmax(mu / (1.0 + math.pi / 8.0 * var).sqrt(), dim=-1).unsqueeze(0)
        return torch.softmax(self.predict_logits(x, num_samples, generator).float(), dim=-1)

    def prediction_bytes(self, num_samples: int | None, batch_size: int) -> float:
        """Peak bytes of one prediction. Sampled on the last layer: the bank of S weight sets
        and the copy of their last layer a call indexes out, one pass of the network per image
        with its last layer's input [φ, 1], and per draw and image the K logits three times
        (the product, the bias added, the softmax); they, not the network, are most of a
        softmax head's memory at S = 30. A full covariance stored as its Cholesky factor adds
        the factor's copy each draw of the bank makes."""
        if self.settings.predictive == "probit":
            return 4.0 * (self.arch.parameter_count() + batch_size * self.arch.activations_per_image())
        s = self.effective_num_samples(num_samples)
        if self.settings.subset != "last_layer":
            return 4.0 * s * (self.arch.parameter_count() + batch_size * self.arch.activations_per_image())
        k = self.arch.num_classes
        last = len(self.index)  # the last layer's (in + 1)·K weights
        per_image = self.arch.activations_per_image() + last // k + 3 * s * k
        # each generator draws its bank anew, and the triangular solve lays the (P_S, P_S)
        # Cholesky factor out anew in float64 (8.5 MB for the face head's 1,032 weights)
        solve = 8.0 * last * last if "cholesky" in self.tensors else 0.0
        # the deviations are drawn in float64: the normal draws, their scaling, the products
        # that make them and the result, each S·P_S values
        deviations = 32.0 * s * last
        return 4.0 * (s * (self.arch.parameter_count() + last) + batch_size * per_image) + solve + deviations

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, **{k: v.float() if k != "prior_precision" else v for k, v in self.tensors.items()}}

    @classmethod
    def from_state(cls, method, arch, config, seed, dataset, info, tensors):
        return cls(method, arch, config, seed, dataset, tensors, info)


# ----------------------------------------------------------------------------- fitting


def fit(config: LaplaceConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    """Find the MAP (to the mode on softmax regression, :mod:`~core.engine.inference.map`), then
    fit the Laplace approximation around it."""
    generator = seeded_generator(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(arch)
    names = subset_names(model, config.subset)
    check_curvature_fits(model, names, config, arch)  # before minutes of training
    mode = None
    if config.epochs or config.optimiser != "adam":
        mode = yield from train_to_mode(model, data, prior_std=config.prior_std, optimiser=config.optimiser,
                                        grad_tol=config.grad_tol, max_iter=config.max_iter, epochs=config.epochs,
                                        batch_size=config.batch_size, lr=config.lr, generator=generator)
    return (yield from fit_around(model, config, arch, data, seed, mode))


def fit_from(weights: dict[str, torch.Tensor], config: LaplaceConfig, arch: ArchSpec, data: Dataset,
             seed: int) -> FitGenerator:
    """Fit the Laplace approximation around given MAP weights (a saved MAP posterior's), with
    their log posterior and gradient norm measured and recorded (``info["map"]``)."""
    model = build_model(arch)
    model.load_state_dict(weights)
    log_post, grad_norm = log_posterior_and_grad(model, data, config.prior_std)
    mode = {"optimiser": "a saved MAP", "grad_norm": float(f"{grad_norm:.3g}"), "log_posterior": round(log_post, 3)}
    return (yield from fit_around(model, config, arch, data, seed, mode))


def fit_around(model: nn.Module, config: LaplaceConfig, arch: ArchSpec, data: Dataset, seed: int,
               mode: dict[str, Any] | None = None) -> FitGenerator:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(True)
    names = subset_names(model, config.subset)
    check_curvature_fits(model, names, config, arch)
    layout = ParamLayout.of(model)
    mean = layout.flatten({n: p.detach() for n, p in model.named_parameters()})
    theta_s = mean[subset_index(layout, names)].double()
    yield ProgressRecord(0, 1, {}, "curvature")
    tensors: dict[str, torch.Tensor] = {}
    if config.structure == "kron":
        eigenvalues = []
        for i, (qg, lg, qa, la) in enumerate(kron_eigen(model, names, data, config.batch_size)):
            tensors.update({f"kron{i}_qg": qg, f"kron{i}_lg": lg, f"kron{i}_qa": qa, f"kron{i}_la": la})
            eigenvalues.append((lg.clamp_min(0)[:, None] * la.clamp_min(0)[None, :]).reshape(-1))
        lam = torch.cat(eigenvalues)
    elif config.structure == "full" and config.prior_precision == "prior":
        # δ is known: one Cholesky factor of H + δI (a tenth of an eigendecomposition's time)
        h = full_ggn(model, names, data, config.batch_size).double()
        h.diagonal().add_(1.0 / config.prior_std**2)
        chol, failed = torch.linalg.cholesky_ex(h)
        if int(failed):
            raise ValueError("the full curvature plus the prior's precision is not positive definite; "
                             "use structure=kron")
        del h
        tensors["cholesky"] = chol
        lam = None
    elif config.structure == "full":
        lam, q = torch.linalg.eigh(full_ggn(model, names, data, config.batch_size))
        tensors.update({"eigenvectors": q, "eigenvalues": lam})
    else:
        run = diag_ggn(model, names, data, config.batch_size)
        done, total = 0, math.ceil(len(data) / max(1, min(config.batch_size, 16)))
        try:
            while True:
                next(run)
                done += 1
                if done % 20 == 0:
                    yield ProgressRecord(done, total, {}, "curvature")
        except StopIteration as stop:
            lam = stop.value
        tensors["curvature"] = lam
    nll = summed_nll(model, data, config.batch_size)
    norm2 = float(theta_s.square().sum())
    delta = (optimise_prior_precision(lam, norm2) if config.prior_precision == "marglik" and lam is not None
             else 1.0 / config.prior_std**2)
    tensors["prior_precision"] = torch.tensor([delta], dtype=torch.float64)
    if lam is None:  # log det (H + δI) = 2 Σ log Lᵢᵢ
        logdet = 2.0 * float(tensors["cholesky"].diagonal().log().sum())
        evidence = -nll - 0.5 * delta * norm2 + 0.5 * theta_s.numel() * math.log(delta) - 0.5 * logdet
    else:
        evidence = laplace_log_evidence(-nll, norm2, lam, delta)
    info = {
        "prior_precision": round(delta, 6),
        "log_evidence": round(evidence, 3),
        "subset_weights": int(theta_s.numel()),
        "structure": config.structure,
        "structure_words": {"kron": "Kronecker-factored (K-FAC) curvature", "diag": "diagonal curvature",
                            "full": "exact full curvature"}[config.structure],
    }
    if mode is not None:
        info["map"] = mode
    yield ProgressRecord(1, 1, {"prior_precision": delta}, "curvature")
    return LaplacePosterior("laplace", arch, asdict(config), seed, data.name, {"mean": mean, **tensors}, info)
