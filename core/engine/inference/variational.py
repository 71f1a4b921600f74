"""A generic variational engine over any torch model (Le Folgoc et al., "Is MC Dropout Bayesian?").

The weights of an arbitrary ``nn.Module`` are flattened into one vector θ ∈ ℝᴾ (a
:class:`~core.engine.inference.param_layout.ParamLayout`); a variational family q(θ) draws
stacked θ's and the model is evaluated on all of them at once
(:func:`core.engine.models.stacked.stacked_forward`). The families are one class, a mixture of C
Gaussians diag(σ²) + UUᵀ of rank K: MF-VI (C = 1, K = 0), sN-VI (C = 1, K ≥ 1) and sGMM-VI
(C > 1), drawn ``naive``, ``paired`` or ``unscented``.

The engine's parts, one module each:

- :mod:`~core.engine.inference.param_layout`: the flat weight vector, the model at many θ;
- :mod:`~core.engine.inference.gaussian_family`: the families (Woodbury densities, coupled draws,
  the mixture) and the priors;
- :mod:`~core.engine.inference.elbo`: the ELBO with log q(θ) at the drawn samples, as in the
  paper, ELBO ≈ Σ_s [log p(D | θ_s) + log p(θ_s) − log q(θ_s)] / S, stratified over a mixture's
  components, and the training loop the methods share;
- :mod:`~core.engine.inference.local_reparam`: the local reparameterisation (Kingma, Salimans &
  Welling 2015) of diagonal families;
- here: the fitted q(θ) as a posterior (:class:`VariationalPosterior`, the ``variational`` kind of
  posterior files) and :func:`run_fit`, every variational method's ``fit``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import asdict
from typing import Any

import torch

from core.engine.device import seeded_generator
from core.engine.inference.base import (
    Dataset,
    Posterior,
    ProgressRecord,
    check_param_shapes,
    register_posterior_kind,
    sample_count_setting,
)
from core.engine.inference.elbo import VariationalState, train_loop
from core.engine.inference.gaussian_family import mixture_log_prob, mixture_sample
from core.engine.inference.param_layout import ParamLayout
from core.engine.models import ArchSpec, build_model
from core.engine.models.stacked import first_layer_matrix, first_linear_name, stacked_forward

# ----------------------------------------------------------------------------- posterior


@register_posterior_kind
class VariationalPosterior(Posterior):
    """A fitted q(θ): a mixture of low-rank Gaussians over the flattened weights.

    Tensors: ``mean`` (C, P), ``diag_std`` (C, P), ``factors`` (C, P, K), ``log_weights``
    (C,). MF-VI has C = 1, K = 0; variational dropout stores σ = √α |μ| (0 for its
    deterministic biases). Prediction draws θ ~ q and evaluates all draws at once
    (:func:`core.engine.models.stacked.stacked_forward`).
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
        (:func:`~core.engine.models.stacked.first_layer_matrix`), made once per bank and draw count and
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


# ----------------------------------------------------------------------------- every method's fit


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
