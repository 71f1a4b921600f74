"""MC dropout (Gal & Ghahramani 2016, "Dropout as a Bayesian Approximation").

Training a network with dropout (drop rate r, keep probability p = 1 − r) and weight decay
λ on the per-example objective

    L(θ) = -(1/N) Σᵢ log p(yᵢ | xᵢ, θ) + λ ‖θ‖²

is variational inference with a Bernoulli variational family when

    λ = p · l² / (2 N τ),

where l is the prior length-scale (prior θ ~ N(0, I / l²)) and τ the model precision.
Prediction keeps dropout on and averages T stochastic passes; for regression the predictive
variance is τ⁻¹ + the sample variance of the outputs (τ is kept in the config for that).
Here the knob is the **drop rate** of the architecture; p in the formula is the keep
probability, as in the paper's appendix (z ~ Bernoulli(p), z = 0 drops the unit).
The fitted network is a :class:`DropoutPosterior`, which an imported network with dropout
(:mod:`core.engine.import_weights`) is too.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from core.engine.device import seeded_generator
from core.engine.inference.base import (
    Dataset,
    FitGenerator,
    Posterior,
    _logits_to_proba,
    check_param_shapes,
    interactive_generator,
    register_posterior_kind,
    sample_count_setting,
)
from core.engine.inference.optimisation import optimise
from core.engine.models import FEATURES, ArchSpec, build_model
from core.engine.models.dropout import mc_dropout, split_before_dropout


def weight_decay(drop_rate: float, length_scale: float, tau: float, n: int) -> float:
    """λ = (1 − drop_rate) · l² / (2 N τ): the weight decay equivalent to the prior."""
    return (1.0 - drop_rate) * length_scale**2 / (2.0 * n * tau)


def model_precision(drop_rate: float, length_scale: float, weight_decay: float, n: int) -> float:
    """τ = (1 − drop_rate) · l² / (2 N λ): the inverse of :func:`weight_decay`."""
    return (1.0 - drop_rate) * length_scale**2 / (2.0 * n * weight_decay)


@dataclass(frozen=True)
class McDropoutConfig:
    """Hyperparameters of MC dropout.

    Attributes
    ----------
    length_scale
        Prior length-scale l: prior θ ~ N(0, I / l²).
    tau
        Model precision τ. With l they fix the weight decay λ = p l² / (2 N τ).
    epochs, batch_size, lr
        Adam with a cosine-annealed learning rate.
    num_samples
        T, the number of stochastic forward passes at prediction.
    """

    length_scale: float = 1.0
    tau: float = 1.0
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    num_samples: int = 100

    def __post_init__(self) -> None:
        if self.length_scale <= 0 or self.tau <= 0:
            raise ValueError("length_scale and tau must be positive")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or self.num_samples < 1:
            raise ValueError("epochs, batch_size, lr and num_samples must be positive")


def dropout_input_size(arch: ArchSpec) -> int:
    """Values one image hands the dropout layers of ``arch``'s model (the sum of their inputs'
    sizes), found once per architecture by one image's pass, with hooks on them, through a
    model of its own (a posterior's model may be predicting on another thread meanwhile)."""
    key = repr(arch)
    if key not in _DROPOUT_INPUTS:
        model = build_model(arch)
        sizes: list[int] = []
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.register_forward_hook(lambda _m, args, _out: sizes.append(args[0][0].numel()))
        # a features head reads the network's features (N, D), not images
        shape = (arch.features,) if arch.name == FEATURES else arch.input_shape
        with torch.no_grad():
            model(torch.zeros(1, *shape))
        _DROPOUT_INPUTS[key] = sum(sizes)
    return _DROPOUT_INPUTS[key]


_DROPOUT_INPUTS: dict[tuple, int] = {}


@register_posterior_kind
class DropoutPosterior(Posterior):
    """MC dropout (Gal & Ghahramani 2016): one weight set, dropout kept on at prediction.

    The S stochastic passes run as one batch of S·N inputs, so one call draws S independent
    dropout masks per input. Masks come from ``generator``, or, without one, from the
    posterior's fixed bank (:func:`interactive_generator`): the same S masks on every call.
    """

    kind = "dropout"
    default_num_samples = 100

    def __init__(self, method, arch, config, seed, dataset, params, info=None) -> None:
        super().__init__(method, arch, config, seed, dataset, info)
        if arch.drop_rate <= 0:
            raise ValueError("MC dropout needs an architecture with drop_rate > 0")
        check_param_shapes(arch, params, lead=0)
        # the count the fit chose (McDropoutConfig.num_samples) is the one a prediction uses
        self.default_num_samples = sample_count_setting(self.config, "num_samples", DropoutPosterior.default_num_samples)
        self.model = build_model(arch)
        self.model.load_state_dict(params, strict=False)
        self._split = split_before_dropout(self.model)
        self._masks: dict[tuple[int, ...], list[torch.Tensor]] = {}

    def prediction_bytes(self, num_samples: int | None, batch_size: int) -> float:
        """The weights once and, per draw and image, every layer's output and, at each dropout
        layer, its mask and the masked product before its division (``Dropout.forward``'s
        ``x * mask / keep``): on softmax regression the input's copies are most of a draw's
        memory, 4 of them where the layers' outputs count 2."""
        s = self.effective_num_samples(num_samples)
        per_draw = self.arch.activations_per_image() + 2 * dropout_input_size(self.arch)
        return 4.0 * (self.arch.parameter_count() + s * batch_size * per_draw)

    def predict_proba(self, x, num_samples=None, generator=None):
        s = self.effective_num_samples(num_samples)
        if s < 1:
            raise ValueError(f"the number of samples must be at least 1, got {s}")
        n = x.shape[0]
        shared, rest = self._split
        with torch.no_grad():
            h = shared(x)  # the same for every draw: computed once per input
            if generator is None and isinstance(rest, nn.Sequential) and s * n <= self.MASK_BANK_ROWS:
                rows = (s * n, *h.shape[1:])
                if n > 1 or not isinstance(rest[0], nn.Dropout):  # one input meets the S masks broadcast
                    h = h.unsqueeze(0).expand(s, *h.shape).reshape(rows)
                masks = iter(self._fixed_masks(rest, h, rows))
                for layer in rest:  # Dropout.forward's rule, with the bank's masks drawn once
                    if isinstance(layer, nn.Dropout):
                        mask, scaled = next(masks)
                        h = h * mask if scaled else h * mask / (1.0 - layer.p)
                    else:
                        h = layer(h)
                logits = h
            else:
                h = h.unsqueeze(0).expand(s, *h.shape).reshape(s * n, *h.shape[1:])
                g = generator if generator is not None else interactive_generator(self.seed)
                with mc_dropout(self.model, generator=g):
                    logits = rest(h)
        return _logits_to_proba(logits.reshape(s, n, -1))

    #: The fixed bank's masks are kept for batches of at most this many rows (S·N).
    MASK_BANK_ROWS = 1024

    def _fixed_masks(self, rest: nn.Sequential, h: torch.Tensor,
                     rows: tuple[int, ...]) -> list[tuple[torch.Tensor, bool]]:
        """The masks the fixed bank (:func:`interactive_generator`) draws for a batch of shape
        ``rows`` (``h``: that batch, or one row of it), drawn once and kept (for the last two
        shapes): bit for bit the masks a fresh generator gives each call, without drawing them
        on every stroke. Each comes as ``(mask, scaled)``: where the keep rate 1 − p is a power
        of two (p = 0.5), the mask is kept already divided by it (``scaled``), one product a
        stroke fewer; h·(m/q) is h·m/q bit for bit then, both being exact scalings by 1/q."""
        found = self._masks.get(rows)
        if found is None:
            g, found = interactive_generator(self.seed), []
            h = h.expand(rows)
            for layer in rest:  # the layers' order is the order the generator is used in
                if isinstance(layer, nn.Dropout):
                    keep = 1.0 - layer.p
                    mask = torch.empty_like(h).bernoulli_(keep, generator=g)
                    h = h * mask / keep
                    scaled = keep > 0 and math.frexp(keep)[0] == 0.5
                    found.append((mask / keep, True) if scaled else (mask, False))
                else:
                    h = layer(h)
            self._masks = {**dict(list(self._masks.items())[-1:]), rows: found}
        return found

    def state_tensors(self):
        return {k: v.detach().clone() for k, v in self.model.named_parameters()}

    @classmethod
    def from_state(cls, method, arch, config, seed, dataset, info, tensors):
        return cls(method, arch, config, seed, dataset, tensors, info)


def fit(config: McDropoutConfig, arch: ArchSpec, data: Dataset, seed: int) -> FitGenerator:
    if arch.drop_rate <= 0:
        raise ValueError("MC dropout needs a drop rate above 0 (set the architecture's drop_rate)")
    generator = seeded_generator(seed)
    # The initial weights come from torch's global generator (nn.init has no other); seed
    # it for this one build only, so the fit is reproducible and nothing else is disturbed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(arch)
    lam = weight_decay(arch.drop_rate, config.length_scale, config.tau, len(data))
    yield from optimise(
        model,
        data,
        epochs=config.epochs,
        batch_size=config.batch_size,
        lr=config.lr,
        penalty=lam,
        generator=generator,
    )
    params = {k: v.detach() for k, v in model.named_parameters()}
    posterior = DropoutPosterior(
        "mc_dropout", arch, asdict(config), seed, data.name, params, {"weight_decay": lam}
    )
    return posterior
