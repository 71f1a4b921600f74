"""Local reparameterisation (Kingma, Salimans & Welling 2015) for diagonal Gaussian weights.

For ``nn.Linear`` layers the pre-activation b = x Wᵀ + c with independent Gaussian weights is
itself Gaussian, b ~ N(x μ_Wᵀ + μ_c, x² (σ_W²)ᵀ + σ_c²), and is sampled directly, one
independent draw per example; ``nn.Conv2d`` layers draw one whole kernel per example, since a
feature map's positions share it (:class:`LocalReparameterisation`). MF-VI and variational
dropout train with it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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
