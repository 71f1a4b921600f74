"""The generalised Gauss-Newton matrix (GGN) H of a network's summed cross-entropy over a data set,
over a subset of its weights (the last linear layer, or all), in three structures: per layer the
Kronecker factors G ⊗ A of K-FAC and their eigendecompositions (curvlinops' type-2 K-FAC), the exact
diagonal (per-image Jacobians, torch.func), and the exact full block (closed form for softmax
regression, else column by column through curvlinops), with the memory each takes.

The Laplace approximation (:mod:`core.engine.inference.laplace`) is built on it, and so is the
samplers' curvature metric (:mod:`core.engine.inference.curvature`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import nn

from core.engine.inference.base import Dataset
from core.engine.inference.param_layout import ParamLayout

Subset = Literal["last_layer", "all"]
Structure = Literal["kron", "diag", "full"]


# ----------------------------------------------------------------------------- the subset


def last_linear(model: nn.Module) -> str:
    """The module name of the model's final ``nn.Linear`` (its output layer)."""
    names = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    if not names:
        raise ValueError("the network has no linear output layer for a last-layer Laplace")
    return names[-1]


def subset_names(model: nn.Module, subset: Subset) -> list[str]:
    """The parameter names of the subset, in the model's order."""
    if subset == "all":
        return [n for n, _ in model.named_parameters()]
    layer = last_linear(model)
    return [n for n, _ in model.named_parameters() if n.rpartition(".")[0] == layer]


def subset_index(layout: ParamLayout, names: list[str]) -> torch.Tensor:
    """Positions of the subset's weights in the flat θ, in the order of ``names``."""
    return torch.cat([torch.arange(*layout.offsets[n]) for n in names])


def kron_blocks(model: nn.Module, names: list[str]) -> list[tuple[str, str, str | None]]:
    """(module, weight name, bias name) of every layer whose weights are in ``names``."""
    blocks = []
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Linear | nn.Conv2d):
            weight = f"{module_name}.weight"
            if weight in names:
                bias = f"{module_name}.bias" if module.bias is not None else None
                blocks.append((module_name, weight, bias))
    return blocks


def curvature_bytes(model: nn.Module, names: list[str], structure: Structure) -> float:
    """Bytes (float64, with room for its eigendecomposition) the curvature needs."""
    params = dict(model.named_parameters())
    if structure == "diag":
        return 8.0 * 3 * sum(params[n].numel() for n in names)
    if structure == "full":
        p = sum(params[n].numel() for n in names)
        return 8.0 * 3 * p * p
    total = 0.0
    for _module_name, weight, bias in kron_blocks(model, names):
        out = params[weight].shape[0]
        inp = params[weight][0].numel() + (1 if bias else 0)
        total += 8.0 * 3 * (out * out + inp * inp)
    return total


# ----------------------------------------------------------------------------- curvature


def _batches(data: Dataset, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(data.x[i : i + batch_size], data.y[i : i + batch_size]) for i in range(0, len(data), batch_size)]


#: What needs curvlinops, in the words of its message when it is missing.
LAPLACE_PURPOSE = ("fitting a Laplace approximation", "predicting with a saved Laplace posterior")


def _curvlinops(purpose: tuple[str, str] = LAPLACE_PURPOSE) -> Any:
    try:
        import curvlinops
    except ImportError:
        raise ValueError(
            f"{purpose[0]} needs the curvature package curvlinops, which is not installed; install "
            f"it with: pip install 'bayescope[laplace]' ({purpose[1]} does not need it)"
        ) from None
    return curvlinops


def kron_factors(model: nn.Module, names: list[str], data: Dataset, batch_size: int,
                 purpose: tuple[str, str] = LAPLACE_PURPOSE) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(G, A) per layer of ``kron_blocks``: K-FAC of the summed loss, H ≈ G ⊗ A on [W b]
    (``purpose``: what is being fitted and what works without, for the message when curvlinops
    is missing)."""
    cl = _curvlinops(purpose)
    params = dict(model.named_parameters())
    blocks = kron_blocks(model, names)
    chosen = [params[n] for _, w, b in blocks for n in (w, b) if n]
    kfac = cl.KFACLinearOperator(
        model, nn.CrossEntropyLoss(reduction="sum"), chosen, _batches(data, batch_size),
        fisher_type="type-2", separate_weight_and_bias=False, check_deterministic=False,
        num_data=len(data),
    )
    kfac.compute_kronecker_factors()
    state = kfac.state_dict()
    factors = []
    for module_name, _, _bias in blocks:
        g = state["gradient_covariances"][module_name].double()
        a = state["input_covariances"].get(module_name)
        if a is None:  # a layer without bias whose inputs curvlinops did not record
            raise ValueError(f"no input factor was computed for layer {module_name!r}")
        factors.append((g, a.double()))
    return factors


def kron_eigen(model: nn.Module, names: list[str], data: Dataset, batch_size: int,
               purpose: tuple[str, str] = LAPLACE_PURPOSE) -> list[tuple[torch.Tensor, ...]]:
    """(Q_G, λ_G, Q_A, λ_A) per layer of ``kron_blocks``: the eigendecompositions of
    :func:`kron_factors`' G and A."""
    decomposed = []
    for g, a in kron_factors(model, names, data, batch_size, purpose):
        lg, qg = torch.linalg.eigh(g)
        la, qa = torch.linalg.eigh(a)
        decomposed.append((qg, lg, qa, la))
    return decomposed


def summed_nll(model: nn.Module, data: Dataset, batch_size: int) -> float:
    """−Σₙ log p(yₙ | xₙ, θ) of ``model`` (in its current mode) over all of ``data``."""
    with torch.no_grad():
        return sum(float(nn.functional.cross_entropy(model(x), y, reduction="sum"))
                   for x, y in _batches(data, batch_size))


def linear_ggn(model: nn.Module, names: list[str], data: Dataset, batch_size: int) -> torch.Tensor | None:
    """The exact GGN of ``names`` when they are one ``nn.Linear`` layer's weight and bias and
    nothing before that layer has weights (softmax regression); None otherwise.

    With Φ the layer's inputs [φ(xₙ), 1] and Λₙ = diag(pₙ) − pₙpₙᵀ, the GGN of [W b] is
    Σₙ Λₙ ⊗ ΦₙΦₙᵀ: block (k, l) is Φᵀ diag(Λ_kl) Φ, K(K+1)/2 products of D × N by N × D
    (on the full MNIST set 40 s here, where building it column by column would take hours).
    """
    layer = last_linear(model)
    params = dict(model.named_parameters())
    if set(params) != set(names) or any(n.rpartition(".")[0] != layer for n in names):
        return None
    module = dict(model.named_modules())[layer]
    seen: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda _m, args, _out: seen.append(args[0].detach()))
    k = module.out_features
    d1 = module.in_features + (module.bias is not None)
    h = torch.zeros(k, k, d1, d1)
    try:
        with torch.no_grad():
            for x, _ in _batches(data, max(batch_size, 4096)):
                p = torch.softmax(model(x), -1)
                phi = seen.pop().flatten(1)
                if module.bias is not None:
                    phi = torch.cat([phi, torch.ones(len(phi), 1)], dim=1)
                lam = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (B, K, K)
                for a in range(k):
                    for b in range(a, k):
                        block = phi.T @ (phi * lam[:, a, b, None])
                        h[a, b] += block
                        if a != b:
                            h[b, a] += block
    finally:
        handle.remove()
    # from (class, input) pairs to the order of ``names``: weight row-major, then bias
    index = torch.arange(k * d1).reshape(k, d1)
    order = {module_name: ix for module_name, ix in (("weight", index[:, :-1] if module.bias is not None else index),
                                                     ("bias", index[:, -1]))}
    perm = torch.cat([order[n.rpartition(".")[2]].reshape(-1) for n in names])
    flat = h.permute(0, 2, 1, 3).reshape(k * d1, k * d1).double()
    flat = flat[perm][:, perm]
    return (flat + flat.T) / 2


def full_ggn(model: nn.Module, names: list[str], data: Dataset, batch_size: int) -> torch.Tensor:
    """The exact GGN block of ``names`` (P_S × P_S) of the summed loss."""
    fast = linear_ggn(model, names, data, batch_size)
    if fast is not None:
        return fast
    cl = _curvlinops()
    params = dict(model.named_parameters())
    chosen = [params[n] for n in names]
    ggn = cl.GGNLinearOperator(model, nn.CrossEntropyLoss(reduction="sum"), chosen,
                               _batches(data, batch_size), check_deterministic=False, num_data=len(data))
    size = sum(p.numel() for p in chosen)
    eye = torch.eye(size, dtype=chosen[0].dtype)
    columns = [ggn @ eye[:, i : i + 256] for i in range(0, size, 256)]
    h = torch.cat(columns, dim=1).double()
    return (h + h.T) / 2


def diag_ggn(model: nn.Module, names: list[str], data: Dataset, batch_size: int) -> Iterator[torch.Tensor]:
    """The exact GGN diagonal of ``names`` of the summed loss; yields after every batch, then
    returns it (a generator, so a long pass reports progress)."""
    fixed = {n: p.detach() for n, p in model.named_parameters() if n not in names}
    chosen = {n: p.detach() for n, p in model.named_parameters() if n in names}

    def logits_of(subset: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, {**fixed, **subset}, (x.unsqueeze(0),))[0]

    jacobian = torch.func.vmap(torch.func.jacrev(logits_of), in_dims=(None, 0))
    total = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in chosen.items()}
    small = max(1, min(batch_size, 16))
    for i in range(0, len(data), small):
        x = data.x[i : i + small]
        with torch.no_grad():
            p = torch.softmax(model(x), -1).double()
        root = torch.diag_embed(p.sqrt()) - p.unsqueeze(-1) * p.sqrt().unsqueeze(-2)  # L, (B, K, K)
        jac = jacobian(chosen, x)  # name → (B, K, *shape)
        for n, j in jac.items():
            flat = j.reshape(*j.shape[:2], -1).double()  # (B, K, m)
            # diag(Jᵀ L Lᵀ J) = Σ_k ((Lᵀ J)_k)², summed over the images
            total[n] += torch.einsum("blk,blm->bkm", root, flat).square().sum((0, 1)).reshape(total[n].shape)
        yield torch.empty(0)
    return torch.cat([total[n].reshape(-1) for n in names])
