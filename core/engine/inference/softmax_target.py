"""The log posterior of a softmax-regression head and its gradient in closed form.

For a softmax regression p(y | x, W, b) = softmax(W f(x) + b)_y (f the model's fixed input map:
the standardised, flattened image, or the features a person's own network hands its last
layer), with per-example residual r_i = e_{y_i} − softmax(W f_i + b), the mini-batch target
of :class:`~core.engine.inference.sampling.ModelTarget` and its gradient are

    log p(θ | D) ≈ (N/B) Σ_{i∈B} log softmax(W f_i + b)_{y_i} − ‖θ‖² / (2σ²),
    ∇_W = (N/B) Σ_i r_i f_iᵀ − W/σ²,   ∇_b = (N/B) Σ_i r_i − b/σ²,

two matrix products a chain and no autograd graph. The samplers of a feature tier (and the
paper tier's softmax regression) spend their steps here: under ``vmap`` and autograd the face
tier's SGHMC step (4 chains × 4,000 faces × 128 features × 8 classes) took about 26 ms of CPU,
of which the products are a few; ``tests/core/test_softmax_target.py`` checks this against
autograd and a sampler's whole trajectory against the autograd path's.

On a batch every chain sees (a full batch) the chains' products are one product each, in the
run's chain slots (:mod:`~core.engine.inference.slots`): the logits of all slots as one
(B, slots·K) product and the gradient as one (slots·K, D) product, so the inputs are read once,
not once per chain, and a chain does the same arithmetic alone as beside others, bit for bit, as
the chains' split runs need (:mod:`~core.engine.inference.sampling`, "Per-chain random streams").
Per-chain batches (mini-batches drawn per chain, D-SGHMC's masked inputs) are taken chain by
chain.
"""

from __future__ import annotations

import torch
from torch import nn

from core.engine.inference.slots import ChainSlots, chain_slots
from core.engine.models import FeatureHead, SoftmaxRegression, image_features

WEIGHT, BIAS = "linear.weight", "linear.bias"


def has_closed_form(model: nn.Module) -> bool:
    """Whether ``model`` is a softmax regression (or a features head) whose target this module
    computes: its weights are exactly ``linear.weight`` and ``linear.bias``."""
    return isinstance(model, SoftmaxRegression) and {k for k, _ in model.named_parameters()} == {WEIGHT, BIAS}


def head_inputs(model: SoftmaxRegression, x: torch.Tensor, leading: int) -> torch.Tensor:
    """f(x) for every example: (..., D) with the first ``leading`` dims of ``x`` kept (0 for one
    shared batch, 1 for per-chain batches). Dropout is left out: the target runs the model in
    eval mode, where it is off."""
    lead = x.shape[:leading]
    flat = x.reshape(-1, *x.shape[leading + 1:]) if leading else x  # examples (n, ...)
    if isinstance(model, FeatureHead):
        f = image_features(model.spec, flat)
    else:
        f = model.standardise(flat).flatten(1)
    return f.reshape(*lead, -1, f.shape[-1]) if leading else f


def log_likelihood_and_grad(
    weight: torch.Tensor, bias: torch.Tensor, f: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chain's Σ_i log softmax(W f_i + b)_{y_i} and its gradients in W (K, D) and b (K,),
    for inputs ``f`` (B, D) and labels ``y`` (B,)."""
    logits = torch.addmm(bias, f, weight.T)
    log_p = torch.log_softmax(logits, dim=1)
    picked = log_p.gather(1, y[:, None])
    residual = log_p.exp_().neg_()  # r = e_y − softmax, built in place of log_p
    residual.scatter_add_(1, y[:, None], torch.ones_like(picked))
    return picked.sum(), residual.T @ f, residual.sum(0)


def slotted_log_likelihood_and_grad(
    weight: torch.Tensor, bias: torch.Tensor, f: torch.Tensor, y: torch.Tensor, slots: ChainSlots,
    scale: float, precision: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every chain's Σ_i log softmax(W_c f_i + b_c)_{y_i} (C,) on one shared batch ``f`` (B, D),
    ``y`` (B,), and the gradients of ``scale`` times it minus ``precision``·‖θ‖²/2 in W (C, K, D)
    and b (C, K): the chains' weights laid out in ``slots``, one product for the logits of all
    slots and one for their gradients, and every elementwise step on the slots' layout too (a
    vectorised kernel may treat an element at the end of a tensor otherwise than one inside it,
    so each chain's elements keep their place whichever chains run)."""
    w, b = slots.place(weight), slots.place(bias)  # (S, K, D), (S, K)
    count, classes, dim = w.shape
    logits = torch.addmm(b.reshape(-1), f, w.reshape(-1, dim).T)  # (B, S·K)
    log_p = torch.log_softmax(logits.view(-1, count, classes), dim=2)
    index = y.reshape(-1, 1, 1).expand(-1, count, 1)
    picked = log_p.gather(2, index)  # (B, S, 1)
    residual = log_p.exp_().neg_()  # r = e_y − softmax, built in place of log_p
    residual.scatter_add_(2, index, torch.ones_like(picked))
    grad_w = (residual.view(-1, count * classes).T @ f).view(count, classes, dim)
    grad_w = torch.add(scale * grad_w, w, alpha=-precision)
    grad_b = torch.add(scale * residual.sum(0), b, alpha=-precision)
    return slots.take(picked.sum(0)[:, 0]), slots.take(grad_w), slots.take(grad_b)


def log_prob_and_grad(
    model: SoftmaxRegression,
    params: dict[str, torch.Tensor],
    batch: tuple[torch.Tensor, torch.Tensor],
    num_data: int,
    prior_std: float,
    shared: bool,
    slots: ChainSlots | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Log posterior (C,) of every chain and its gradient, as
    :class:`~core.engine.inference.sampling.ModelTarget` defines them, in closed form.

    ``batch`` is one ``(x, y)`` every chain sees (``shared``) or per-chain ``(x, y)`` of shapes
    (C, B, ...) and (C, B). ``slots``: where the C chains sit among the run's chains (None: they
    are all of them), for one product over the chains on a shared batch.
    """
    x, y = batch
    if not shared and x.stride(0) == 0 and y.stride(0) == 0:  # one batch expanded over the chains
        x, y, shared = x[0], y[0], True
    weight, bias = params[WEIGHT].detach(), params[BIAS].detach()
    chains = weight.shape[0]
    f = head_inputs(model, x, 0 if shared else 1)
    scale = num_data / y.shape[-1]
    precision = 1.0 / prior_std**2
    if shared:
        lik, grad_w, grad_b = slotted_log_likelihood_and_grad(weight, bias, f, y, chain_slots(slots, chains),
                                                              scale, precision)
    else:
        values, grad_w, grad_b = [], torch.empty_like(weight), torch.empty_like(bias)
        for c in range(chains):
            one, gw, gb = log_likelihood_and_grad(weight[c], bias[c], f[c], y[c])
            values.append(one)
            torch.add(scale * gw, weight[c], alpha=-precision, out=grad_w[c])
            torch.add(scale * gb, bias[c], alpha=-precision, out=grad_b[c])
        lik = torch.stack(values)
    prior = -0.5 * (weight.flatten(1).pow(2).sum(1) + bias.pow(2).sum(1)) / prior_std**2
    return scale * lik + prior, {WEIGHT: grad_w, BIAS: grad_b}
