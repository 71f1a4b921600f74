"""Maximum a posteriori estimate: the point-mass limit every posterior is compared with, and
the mode that Laplace, SWAG, the deep ensemble's members and the curvature metric start from.

With a Gaussian prior θ ~ N(0, σ²I) and N training examples, the MAP estimate maximises

    log p(θ | D) = Σᵢ log p(yᵢ | xᵢ, θ) − ‖θ‖² / (2σ²)        (up to a constant),

the per-example objective L(θ) = −(1/N) log p(θ | D) of the training loops. How (``optimiser``):

- ``newton``: for a model whose only weights are its final linear layer (softmax regression,
  whose log posterior is strictly concave, so the mode is unique), full-batch Newton steps in
  float64: each solves H d = −∇ by conjugate gradients with exact Hessian-vector products
  (H = Σₙ Λₙ ⊗ φₙφₙᵀ + I/σ², Λₙ = diag(pₙ) − pₙpₙᵀ), preconditioned by its Kronecker-factored
  approximation (Σ Λₙ / N) ⊗ Σ φₙφₙᵀ + I/σ², then a backtracking line search; it stops when
  ‖∇ log p(θ | D)‖₂ ≤ ``grad_tol``. Converges quadratically near the mode, in about ten steps.
- ``lbfgs``: full-batch L-BFGS with a strong-Wolfe line search (float64, any model) to the same
  gradient norm, or ``max_iter`` iterations.
- ``adam``: mini-batch Adam with a cosine-annealed learning rate for ``epochs`` passes (a
  network's MAP, LeNet-5's: not convex, too large for full-batch second-order steps; it stops
  where the epochs end, not at a stated gradient norm).
- ``auto``: ``newton`` for a model linear in its weights, ``adam`` otherwise.

Every fit records in ``info["map"]`` the optimiser, iterations, final gradient norm (of the
float64 optimum, and at the float32 weights as stored) and log posterior, so a reader can see
how close to the mode it is. The result is a :class:`SampledPosterior` with one chain and one
draw, so it predicts through the same vectorised path as the samplers.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from core.engine.device import seeded_generator
from core.engine.inference.base import Dataset, FitGenerator, ProgressRecord, SampledPosterior
from core.engine.inference.optimisation import optimise
from core.engine.models import ArchSpec, build_model

OPTIMISERS = ("auto", "newton", "lbfgs", "adam")
#: The gradient norm ‖∇θ log p(θ | D)‖₂ (summed over the training set, float64) at which the
#: second-order optimisers stop. On the paper tier (log posterior about −13,936, curvature 1 …
#: 62,057) it leaves the log posterior within ½ gᵀH⁻¹g ≤ 5·10⁻⁷ nats of the mode's.
GRAD_TOL = 1e-3


@dataclass(frozen=True)
class MapConfig:
    """Hyperparameters of MAP training.

    Attributes
    ----------
    prior_std
        σ of the isotropic Gaussian prior on all weights and biases.
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate (``optimiser=adam``, or ``auto`` on a network).
    optimiser
        ``auto``, ``newton``, ``lbfgs`` or ``adam`` (the module's docstring).
    grad_tol, max_iter
        Where ``newton`` and ``lbfgs`` stop: ‖∇ log p(θ | D)‖₂ ≤ ``grad_tol``, or after ``max_iter``
        iterations (then ``info["map"]["converged"]`` is false).
    """

    prior_std: float = 1.0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    optimiser: str = "auto"
    grad_tol: float = GRAD_TOL
    max_iter: int = 500

    def __post_init__(self) -> None:
        if self.prior_std <= 0:
            raise ValueError("prior_std must be positive")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs, batch_size and lr must be positive")
        check_mode_settings(self.optimiser, self.grad_tol, self.max_iter)


def check_mode_settings(optimiser: str, grad_tol: float, max_iter: int) -> None:
    """Refuse an unknown optimiser or a non-positive tolerance or iteration count, in words."""
    if optimiser not in OPTIMISERS:
        raise ValueError(f"optimiser must be one of {', '.join(OPTIMISERS)}, got {optimiser!r}")
    if not grad_tol > 0 or max_iter < 1:
        raise ValueError("grad_tol and max_iter must be positive")


def linear_layer(model: nn.Module) -> nn.Linear | None:
    """The model's one ``nn.Linear`` when it holds every weight of the model (softmax
    regression: its log-likelihood is concave in them), else None."""
    params = dict(model.named_parameters())
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if len(linears) != 1:
        return None
    own = {id(p) for p in linears[0].parameters()}
    return linears[0] if own == {id(p) for p in params.values()} else None


def resolve_optimiser(optimiser: str, model: nn.Module) -> str:
    """``auto`` made concrete for ``model``; ``newton`` refused in words for a network."""
    linear = linear_layer(model) is not None
    if optimiser == "auto":
        return "newton" if linear else "adam"
    if optimiser == "newton" and not linear:
        raise ValueError("optimiser=newton needs a model linear in its weights (softmax regression); "
                         "use optimiser=lbfgs or optimiser=adam for a network")
    return optimiser


def log_posterior_and_grad(model: nn.Module, data: Dataset, prior_std: float,
                           chunk: int = 8192) -> tuple[float, float]:
    """log p(θ | D) (up to a constant) and ‖∇θ log p(θ | D)‖₂ of ``model``'s weights as they are,
    in float64 over all of ``data``."""
    params = {k: v.detach().double().requires_grad_(True) for k, v in model.named_parameters()}
    buffers = {k: v.double() for k, v in model.named_buffers()}
    total = torch.zeros((), dtype=torch.float64)
    grads = {k: torch.zeros_like(v) for k, v in params.items()}
    was_training = model.training
    model.eval()
    try:
        for i in range(0, len(data), chunk):
            logits = functional_call(model, (params, buffers), (data.x[i : i + chunk].double(),))
            nll = nn.functional.cross_entropy(logits, data.y[i : i + chunk], reduction="sum")
            for k, g in zip(params, torch.autograd.grad(nll, list(params.values())), strict=True):
                grads[k] += g
            total += nll.detach()
    finally:
        model.train(was_training)
    sq = sum(float(p.detach().square().sum()) for p in params.values())
    g2 = sum(float((g + p.detach() / prior_std**2).square().sum()) for g, p in zip(grads.values(), params.values(),
                                                                                   strict=True))
    return -float(total) - 0.5 * sq / prior_std**2, math.sqrt(g2)


def converge(model: nn.Module, data: Dataset, prior_std: float, optimiser: str, grad_tol: float = GRAD_TOL,
             max_iter: int = 500, label: str = "MAP") -> Generator[ProgressRecord, None, dict[str, Any]]:
    """Move ``model``'s weights (in place) to the mode of log p(θ | D) by ``newton`` or
    ``lbfgs``; returns what ``info["map"]`` records."""
    run = _newton if optimiser == "newton" else _lbfgs
    theta, iterations = yield from run(model, data, prior_std, grad_tol, max_iter, label)
    log_post, grad_norm = theta
    stored_log_post, stored_grad = log_posterior_and_grad(model, data, prior_std)  # the float32 weights as stored
    return {"optimiser": optimiser, "iterations": iterations, "grad_tol": grad_tol,
            "grad_norm": float(f"{grad_norm:.3g}"), "converged": bool(grad_norm <= grad_tol),
            "log_posterior": round(log_post, 3), "grad_norm_stored": float(f"{stored_grad:.3g}"),
            "log_posterior_stored": round(stored_log_post, 3),
            "weight_norm": round(math.sqrt(sum(float(p.detach().double().square().sum())
                                               for p in model.parameters())), 3)}


def _features(model: nn.Module, layer: nn.Linear, data: Dataset, chunk: int = 8192) -> torch.Tensor:
    """[φ(xₙ), 1] (N, D + 1) in float64: the linear layer's inputs, with a column for the bias."""
    seen: list[torch.Tensor] = []
    handle = layer.register_forward_hook(lambda _m, args, _out: seen.append(args[0].detach().flatten(1)))
    model.eval()
    try:
        with torch.no_grad():
            for i in range(0, len(data), chunk):
                model(data.x[i : i + chunk])
    finally:
        handle.remove()
    phi = torch.cat(seen).double()
    ones = torch.ones(len(phi), 1, dtype=torch.float64)
    return torch.cat([phi, ones], dim=1) if layer.bias is not None else phi


def _newton(model: nn.Module, data: Dataset, prior_std: float, grad_tol: float, max_iter: int,
            label: str) -> Generator[ProgressRecord, None, tuple[tuple[float, float], int]]:
    """Preconditioned Newton-CG on Θ = [W b] (K × (D + 1)) of a linear model (the module's docstring)."""
    layer = linear_layer(model)
    if layer is None:
        raise ValueError("optimiser=newton needs a model linear in its weights")
    phi = _features(model, layer, data)
    y = nn.functional.one_hot(data.y, layer.out_features).double()
    n, delta = len(phi), 1.0 / prior_std**2
    theta = layer.weight.detach().double()
    if layer.bias is not None:
        theta = torch.cat([theta, layer.bias.detach().double()[:, None]], dim=1)
    phi32 = phi.float()
    la, qa = torch.linalg.eigh(phi.T @ phi)  # Σ φφᵀ, fixed: the preconditioner's input factor
    la = la.clamp_min(0)

    def value(t: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        logits = phi @ t.T
        nll = float((torch.logsumexp(logits, 1) - (logits * y).sum(1)).sum())
        p = torch.softmax(logits, 1)
        grad = (p - y).T @ phi + delta * t  # ∇ of −log p(θ | D)
        return nll + 0.5 * delta * float(t.square().sum()), grad, p

    f, grad, p = value(theta)
    it = 0
    yield ProgressRecord(0, 0, {"log_posterior": -f, "grad_norm": float(grad.norm())}, label)
    while float(grad.norm()) > grad_tol and it < max_iter:
        it += 1
        lg, qg = torch.linalg.eigh(torch.diag(p.mean(0)) - p.T @ p / n)
        scale = 1.0 / (lg.clamp_min(0)[:, None] * la[None, :] + delta)

        p32 = p.float()

        def hvp(v: torch.Tensor, p: torch.Tensor = p32) -> torch.Tensor:
            # in float32 (half the memory traffic): the step need not be exact, only the gradient
            z = phi32 @ v.float().T
            pz = p * z
            return ((pz - p * pz.sum(1, keepdim=True)).T @ phi32).double() + delta * v

        def precondition(r: torch.Tensor, qg: torch.Tensor = qg, scale: torch.Tensor = scale) -> torch.Tensor:
            return qg @ ((qg.T @ r @ qa) * scale) @ qa.T

        step = _pcg(hvp, precondition, -grad, tol=min(0.1, math.sqrt(float(grad.norm()))), max_iter=100)
        slope = float((grad * step).sum())
        t = 1.0
        while True:  # Armijo backtracking: a full Newton step is taken near the mode
            f_new, grad_new, p_new = value(theta + t * step)
            if f_new <= f + 1e-4 * t * slope or t < 1e-8:
                break
            t /= 2
        theta, f, grad, p = theta + t * step, f_new, grad_new, p_new
        yield ProgressRecord(it, 0, {"log_posterior": -f, "grad_norm": float(grad.norm())}, label)
    with torch.no_grad():
        if layer.bias is not None:
            layer.weight.copy_(theta[:, :-1].to(layer.weight.dtype))
            layer.bias.copy_(theta[:, -1].to(layer.bias.dtype))
        else:
            layer.weight.copy_(theta.to(layer.weight.dtype))
    return (-f, float(grad.norm())), it


def _pcg(hvp: Any, precondition: Any, b: torch.Tensor, tol: float, max_iter: int) -> torch.Tensor:
    """x ≈ H⁻¹b by preconditioned conjugate gradients, to ‖b − Hx‖ ≤ tol·‖b‖."""
    x = torch.zeros_like(b)
    r = b.clone()
    z = precondition(r)
    d = z.clone()
    rz = float((r * z).sum())
    target = tol * float(b.norm())
    for _ in range(max_iter):
        hd = hvp(d)
        alpha = rz / float((d * hd).sum())
        x += alpha * d
        r -= alpha * hd
        if float(r.norm()) <= target:
            break
        z = precondition(r)
        rz_new = float((r * z).sum())
        d = z + (rz_new / rz) * d
        rz = rz_new
    return x


def _lbfgs(model: nn.Module, data: Dataset, prior_std: float, grad_tol: float, max_iter: int,
           label: str) -> Generator[ProgressRecord, None, tuple[tuple[float, float], int]]:
    """Full-batch L-BFGS with a strong-Wolfe line search, in float64, on any model."""
    names = [k for k, _ in model.named_parameters()]
    flat = torch.cat([p.detach().double().reshape(-1) for p in model.parameters()]).requires_grad_(True)
    shapes = [p.shape for p in model.parameters()]
    sizes = [p.numel() for p in model.parameters()]
    buffers = {k: v.double() for k, v in model.named_buffers()}
    model.eval()

    def split(x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {k: v.reshape(s) for k, v, s in zip(names, x.split(sizes), shapes, strict=True)}

    def closure() -> torch.Tensor:
        opt.zero_grad()
        params = split(flat)
        loss = 0.5 * flat.square().sum() / prior_std**2
        for i in range(0, len(data), 8192):
            logits = functional_call(model, (params, buffers), (data.x[i : i + 8192].double(),))
            loss = loss + nn.functional.cross_entropy(logits, data.y[i : i + 8192], reduction="sum")
        loss.backward()
        return loss.detach()

    opt = torch.optim.LBFGS([flat], lr=1.0, max_iter=20, history_size=50, tolerance_grad=0.0,
                            tolerance_change=0.0, line_search_fn="strong_wolfe")
    it, f = 0, float(closure())
    grad_norm = float(flat.grad.norm())
    yield ProgressRecord(0, 0, {"log_posterior": -f, "grad_norm": grad_norm}, label)
    while grad_norm > grad_tol and it < max_iter:
        before = float(f)
        opt.step(closure)
        it = int(opt.state[flat]["n_iter"])
        f = float(closure())
        grad_norm = float(flat.grad.norm())
        yield ProgressRecord(it, 0, {"log_posterior": -f, "grad_norm": grad_norm}, label)
        if f >= before:  # the line search can make no more progress in float64
            break
    with torch.no_grad():
        for p, v in zip(model.parameters(), split(flat.detach()).values(), strict=True):
            p.copy_(v.to(p.dtype))
    return (-f, grad_norm), it


def train_to_mode(model: nn.Module, data: Dataset, *, prior_std: float, optimiser: str, grad_tol: float,
                  max_iter: int, epochs: int, batch_size: int, lr: float, generator: torch.Generator,
                  label: str = "MAP") -> Generator[ProgressRecord, None, dict[str, Any]]:
    """The MAP fit every mode-based method starts with: ``optimiser`` resolved for ``model``
    (:func:`resolve_optimiser`), run in place; returns ``info["map"]`` (for Adam too: its final
    gradient norm says how far from the mode it stopped)."""
    chosen = resolve_optimiser(optimiser, model)
    if chosen != "adam":
        return (yield from converge(model, data, prior_std, chosen, grad_tol, max_iter, label))
    for record in optimise(model, data, epochs=epochs, batch_size=batch_size, lr=lr,
                           penalty=1.0 / (2.0 * len(data) * prior_std**2), generator=generator):
        yield ProgressRecord(record.step, record.total, record.values, label)
    log_post, grad_norm = log_posterior_and_grad(model, data, prior_std)
    return {"optimiser": "adam", "epochs": epochs, "grad_norm": float(f"{grad_norm:.3g}"),
            "log_posterior": round(log_post, 3), "converged": False,
            "weight_norm": round(math.sqrt(sum(float(p.detach().double().square().sum())
                                               for p in model.parameters())), 3)}


def fit(config: MapConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    generator = seeded_generator(seed)
    torch.manual_seed(seed)
    model = build_model(arch)
    record = yield from train_to_mode(model, data, prior_std=config.prior_std, optimiser=config.optimiser,
                                      grad_tol=config.grad_tol, max_iter=config.max_iter, epochs=config.epochs,
                                      batch_size=config.batch_size, lr=config.lr, generator=generator)
    samples = {k: v.detach()[None, None] for k, v in model.named_parameters()}
    return SampledPosterior("map", arch, asdict(config), seed, data.name, samples, {"map": record})
