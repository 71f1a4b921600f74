"""S weight sets of one model in one pass: :func:`stacked_forward` gives the logits (S, N, K) of the
stacked draws a sampled or variational posterior holds, written out for softmax regression, the MLP
and LeNet (the shared input meets every draw's first layer in one product) and through
``vmap(functional_call)`` for the other models."""

from __future__ import annotations

import torch
from torch import nn

from core.engine.models import MLP, FeatureHead, LeNet, SoftmaxRegression, image_features


def first_layer_matrix(weight: torch.Tensor) -> torch.Tensor:
    """S stacked weights (S, out, in) of a first linear layer as one (in, S·out) matrix: the
    shared input meets all S in one product (:func:`stacked_forward`). A copy of every weight,
    so a posterior that predicts from the same draws again keeps it (``first_matrix``)."""
    return weight.permute(2, 0, 1).reshape(weight.shape[2], -1)


def first_linear_name(model: nn.Module) -> str | None:
    """The name of the first linear layer :func:`stacked_forward` multiplies the shared input
    with as one matrix (softmax regression, MLP), else None."""
    if isinstance(model, SoftmaxRegression):
        return "linear"
    return "net.1" if isinstance(model, MLP) else None


def stacked_forward(
    model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, chunk_size: int | None = None,
    first_matrix: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits (S, N, K) of ``model`` at S weight sets ``params`` (leading dim S), dropout off.

    The same as ``vmap(functional_call(model, p, (x,)))(params)`` (equal to float rounding),
    written out for the three architectures here because on one input the vmap machinery
    costs more than the arithmetic: LeNet at 16 weight sets took 4.8 ms through vmap and
    2.3–2.7 ms written out (one 28×28 input, timed in a script; the posteriors' whole
    predictions in benchmarks/bench_interactive.py). The input is shared by all S, so a
    model's first layer is one ordinary convolution or matrix product over the stacked
    weights; later layers are grouped convolutions and batched matrix products. Other
    modules (and a model in training mode, whose dropout would be on) go through vmap.
    ``chunk_size`` bounds how many weight sets are evaluated at once (memory). ``first_matrix``
    is :func:`first_layer_matrix` of the first linear layer's weights, made earlier (softmax
    regression and MLP; ignored when chunked): the same product, without copying the weights.
    """
    s = next(iter(params.values())).shape[0]
    if chunk_size is not None and chunk_size < s:
        return torch.cat([
            stacked_forward(model, {k: v[i : i + chunk_size] for k, v in params.items()}, x)
            for i in range(0, s, chunk_size)
        ])
    if isinstance(model, FeatureHead):  # images through the network once, outside the draws
        x = image_features(model.spec, x)
    if model.training or not isinstance(model, (LeNet, MLP, SoftmaxRegression)):
        from torch.func import functional_call, vmap

        return vmap(lambda p: functional_call(model, p, (x,)))(params)
    x = model.standardise(x)
    n = x.shape[0]

    def linear(h: torch.Tensor, name: str) -> torch.Tensor:  # (S, N, in) → (S, N, out)
        return torch.baddbmm(params[f"{name}.bias"].unsqueeze(1), h, params[f"{name}.weight"].transpose(1, 2))

    def first_linear(name: str) -> torch.Tensor:  # the shared input (N, in) → (S, N, out)
        # one (N, in) × (in, S·out) product: broadcasting the input over S instead costs 4× on a
        # full MNIST batch (0.85 s against 0.19 s for the gradient at 4 weight sets, 2 cores)
        w = params[f"{name}.weight"]  # (S, out, in)
        out = x.flatten(1) @ (first_layer_matrix(w) if first_matrix is None else first_matrix)
        return out.view(n, s, w.shape[1]).transpose(0, 1) + params[f"{name}.bias"].unsqueeze(1)

    if isinstance(model, SoftmaxRegression):
        return first_linear(first_linear_name(model))
    if isinstance(model, MLP):
        h = first_linear(first_linear_name(model)).relu_()
        return linear(linear(h, "net.4").relu_(), "net.7")
    w1, w2 = params["features.0.weight"], params["features.4.weight"]
    h = nn.functional.conv2d(x, w1.reshape(-1, *w1.shape[2:]), params["features.0.bias"].reshape(-1))
    h = nn.functional.max_pool2d(h.relu_(), 2)  # (N, S·20, side, side)
    h = nn.functional.conv2d(h, w2.reshape(-1, *w2.shape[2:]), params["features.4.bias"].reshape(-1), groups=s)
    h = nn.functional.max_pool2d(h.relu_(), 2)  # (N, S·50, side, side)
    h = h.reshape(n, s, -1).transpose(0, 1)  # each weight set's features, flattened as nn.Flatten does
    return linear(linear(h, "classifier.1").relu_(), "classifier.4")
