"""The posterior interface every inference method implements.

A method is a module with a config dataclass and a ``fit`` generator::

    fit(config, arch, data, seed) -> Generator[ProgressRecord, None, Posterior]

``fit`` yields small progress records (plain floats, safe to send to another thread) and
returns the fitted :class:`Posterior`. Cancellation is cooperative: the consumer stops
iterating (``generator.close()``), which raises ``GeneratorExit`` at the current ``yield``.

A :class:`Posterior` turns a batch of N images into S×N×K class probabilities in one
vectorised call, and saves/loads itself through :mod:`core.engine.store`.

Randomness at prediction (one rule for every posterior)
-------------------------------------------------------
``predict_proba(x, num_samples, generator)``:

- with a ``generator``, every random choice (dropout masks, input masks, weight draws) comes
  from it, so a seeded generator reproduces a result and successive calls with the same
  generator object get fresh masks;
- with ``generator=None`` (the interactive path), a posterior uses its *own fixed bank*:
  masks or draws from a generator seeded by the posterior's seed
  (:func:`interactive_generator`), the same on every call. A drawing shown twice gets the
  same verdict, and a stroke changes the verdict only through the image. Torch's global
  generator is never used, so nothing else running in the process changes a prediction.

Training masks follow the same rule: dropout layers draw from the fit's own generator
(:func:`core.engine.models.dropout.dropout_generator`), so every fit is reproducible from its seed.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from core.engine.device import current_device, generator_on, on_device, seeded_generator, to_host
from core.engine.memory import check_fits
from core.engine.models import ArchSpec, build_model, image_features
from core.engine.models.stacked import first_layer_matrix, first_linear_name, stacked_forward

#: Offset between a posterior's seed and the seed of its fixed bank of prediction masks
#: (the same offset :class:`~core.engine.inference.variational.VariationalPosterior` uses).
INTERACTIVE_SEED_OFFSET = 104729


def interactive_generator(seed: int) -> torch.Generator:
    """The generator behind a posterior's fixed bank of masks/draws (``generator=None``), on
    the device the work runs on (:func:`core.engine.device.current_device`)."""
    return seeded_generator(int(seed) + INTERACTIVE_SEED_OFFSET)


@dataclass(frozen=True)
class ProgressRecord:
    """One progress report from a long-running loop.

    Attributes
    ----------
    step, total
        Steps done and planned (``total`` may be 0 when unknown).
    values
        What a person watches: ``loss``, ``log_posterior``, ``accuracy``, ``acceptance``,
        ``step_size``, ``grad_norm`` ... (plain floats).
    phase
        ``"train"``, ``"warmup"``, ``"sampling"``, ``"eval"`` or similar.
    """

    step: int
    total: int
    values: dict[str, float] = field(default_factory=dict)
    phase: str = "train"

    @property
    def fraction(self) -> float:
        return self.step / self.total if self.total else 0.0


@dataclass
class Dataset:
    """Images ``x`` (N, 1, H, W) float32 in [0, 1], or feature vectors ``x`` (N, D) (face
    descriptors), and integer labels ``y`` (N,).

    ``source`` records what was actually read (name, split, folder, files with their
    SHA-256, counts, and any limit applied); it goes into evaluation reports and into the
    provenance of posteriors trained on the data.
    """

    x: torch.Tensor
    y: torch.Tensor
    name: str = "data"
    class_names: tuple[str, ...] = ()
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.x.ndim not in (2, 4):
            raise ValueError(
                f"inputs must be images of shape (N, C, H, W) or feature vectors of shape (N, D), "
                f"got {tuple(self.x.shape)}"
            )
        if len(self.x) != len(self.y):
            raise ValueError(f"{len(self.x)} images but {len(self.y)} labels")

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index: torch.Tensor | slice) -> Dataset:
        # images streamed from disk (core.engine.data.images.StreamedImages) stay there
        x = self.x.subset(index) if hasattr(self.x, "subset") else self.x[index]
        return Dataset(x, self.y[index], self.name, self.class_names, dict(self.source))

    def to(self, device: torch.device | str) -> Dataset:
        """The same examples with their images and labels on ``device`` (where a fit there reads them)."""
        return Dataset(self.x.to(device), self.y.to(device), self.name, self.class_names, dict(self.source))

    def first(self, limit: int | None) -> Dataset:
        """The first ``limit`` examples (all when ``limit`` is None), the limit recorded."""
        if limit is None or limit >= len(self):
            return self
        if limit < 1:
            raise ValueError(f"a limit must be at least 1 image, got {limit}")
        out = self.subset(slice(0, limit))
        out.source["used"] = limit
        return out



def why_empty(data: Dataset) -> str:
    """Why a test side holds no image, when it is because every image drawn to it was a byte copy
    (the split leaves copies out so that no photo is on both sides), else nothing."""
    copies = data.source.get("copies") or {}
    left = int(copies.get("left_out_as_training_photos", 0)) + int(copies.get("left_out_as_repeated_photos", 0))
    if not left or data.source.get("split") != "test":
        return ""
    return (f": every one of the {left} images drawn to test is a byte-for-byte copy of a training image or of "
            "another test image, and copies are left out so that no photo is on both sides; add images that "
            "are not copies")

def check_data_fits(
    arch: ArchSpec, data: Dataset, role: str = "the data set", model: str = "the model", labels: bool = True
) -> None:
    """Refuse, with one ``ValueError`` sentence, data that ``arch`` cannot read.

    The one check where data meets a model (training in :func:`core.engine.runner.fit_posterior`,
    evaluation in :mod:`core.analysis.evaluation`): images of the model's size or feature
    vectors of its length, at least one example, and (with ``labels``) every label one of the
    model's classes, which would otherwise fail deep inside the loss as an index error.
    """
    if arch.features and data.x.ndim == 2:  # a head on a network's features, given the features themselves
        if data.x.shape[1] != arch.features:
            raise ValueError(f"{role} {data.name} has features of {data.x.shape[1]} numbers; {model} reads "
                             f"{arch.features}, the features of the network it sits on")
    elif arch.input_dim:
        if data.x.ndim != 2:
            raise ValueError(f"{role} {data.name} holds images; {model} reads "
                             f"{arch.input_dim}-number face descriptors")
        if data.x.shape[1] != arch.input_dim:
            raise ValueError(f"{role} {data.name} has vectors of {data.x.shape[1]} numbers; "
                             f"{model} reads {arch.input_dim}")
    else:
        side = arch.image_size
        if data.x.ndim == 2:
            raise ValueError(f"{role} {data.name} holds face descriptors; {model} reads {side}×{side} images")
        if tuple(data.x.shape[1:]) != arch.input_shape:
            raise ValueError(f"{role} {data.name} has images of shape {tuple(data.x.shape[1:])}; "
                             f"{model} reads {arch.input_shape}")
    if len(data) == 0:
        raise ValueError(f"{role} {data.name} is empty" + why_empty(data))
    if labels:
        low, high = int(data.y.min()), int(data.y.max())
        if low < 0 or high >= arch.num_classes:
            raise ValueError(
                f"{role} {data.name} has labels from {low} to {high}, but {model} has only "
                f"{arch.num_classes} classes (labels 0 to {arch.num_classes - 1})"
            )


FitGenerator = Generator[ProgressRecord, None, "Posterior"]


class Posterior(ABC):
    """A distribution over the weights of one architecture, able to predict.

    Subclasses set :attr:`kind` (how the tensors are interpreted, used by :mod:`core.engine.store`)
    and implement :meth:`predict_proba`, :meth:`state_tensors` and :meth:`from_state`.

    Attributes
    ----------
    method
        The inference method that produced it (``"map"``, ``"mc_dropout"``, ``"sghmc"`` ...).
    arch
        The architecture the weights belong to.
    config
        The method's hyperparameters (a plain dict, as saved).
    seed
        The seed the fit started from.
    dataset
        Name of the training data set.
    info
        Free-form facts about the fit (plain numbers/strings): accuracy, wall time ...
    """

    kind: ClassVar[str]
    default_num_samples: int = 100

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "predict_proba" in cls.__dict__:
            cls.predict_proba = _predicts_on_own_device(cls.__dict__["predict_proba"])

    def __init__(
        self,
        method: str,
        arch: ArchSpec,
        config: dict[str, Any],
        seed: int,
        dataset: str,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.method = method
        self.arch = arch
        self.config = dict(config)
        self.seed = int(seed)
        self.dataset = dataset
        self.info = dict(info or {})
        #: Where its tensors live and its predictions run: the device it was built on
        #: (:func:`core.engine.device.on_device`; the CPU unless moved with :meth:`to`).
        self.device = current_device()

    def to(self, device: torch.device | str) -> Posterior:
        """This posterior with its tensors on ``device`` (itself when already there).

        It is rebuilt from :meth:`state_tensors` inside :func:`~core.engine.device.on_device`,
        as a file is loaded, so every tensor it makes for itself lands there too.
        """
        device = torch.device(device)
        if device == self.device or (device.type == self.device.type == "cpu"):
            return self
        with on_device(device):
            tensors = {k: v.to(device) for k, v in self.state_tensors().items()}
            moved = type(self).from_state(self.method, self.arch, self.config, self.seed, self.dataset,
                                          self.info, tensors)
        if hasattr(self, "chunk_size"):  # the one setting a caller may change after construction
            moved.chunk_size = self.chunk_size
        return moved

    @property
    def num_classes(self) -> int:
        return self.arch.num_classes

    @abstractmethod
    def predict_proba(
        self,
        x: torch.Tensor,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Class probabilities of S posterior samples for a batch: shape (S, N, K)."""

    @abstractmethod
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors that, with the metadata, rebuild this posterior."""

    @classmethod
    @abstractmethod
    def from_state(
        cls,
        method: str,
        arch: ArchSpec,
        config: dict[str, Any],
        seed: int,
        dataset: str,
        info: dict[str, Any],
        tensors: dict[str, torch.Tensor],
    ) -> Posterior:
        """Rebuild from what :meth:`state_tensors` returned; raise ``ValueError`` on mismatch."""

    def describe(self) -> str:
        return f"{self.method} · {self.arch.name} · {self.dataset}"

    @property
    def fixed_num_samples(self) -> int | None:
        """How many draws it holds when it cannot draw more (stored samples, a deterministic
        predictive), else None."""
        return None

    def effective_num_samples(self, num_samples: int | None) -> int:
        """How many samples a prediction with ``num_samples`` (None: the default) draws."""
        return self.default_num_samples if num_samples is None else int(num_samples)

    def prediction_bytes(self, num_samples: int | None, batch_size: int) -> float:
        """Estimated peak bytes of one ``predict_proba`` call on ``batch_size`` images.

        S weight sets (drawn or thinned copies) plus S·N forward passes, in float32.
        Posteriors that hold no per-sample weights override this.
        """
        s = self.effective_num_samples(num_samples)
        return 4.0 * s * (self.arch.parameter_count() + batch_size * self.arch.activations_per_image())

    def check_prediction(self, num_samples: int | None, batch_size: int = 1) -> int:
        """Validate a user-chosen sample count; return the effective S.

        Raises ``ValueError`` for S < 1 and :class:`~core.engine.memory.MemoryEstimateError` (with
        the estimate) when the prediction cannot fit in memory.
        """
        if num_samples is not None and (isinstance(num_samples, bool) or int(num_samples) != num_samples):
            raise ValueError(f"the number of samples must be a whole number, got {num_samples!r}")
        if num_samples is not None and num_samples < 1:
            raise ValueError(f"the number of samples must be at least 1, got {num_samples}")
        s = self.effective_num_samples(num_samples)
        check_fits(
            self.prediction_bytes(s, batch_size),
            f"{s} samples of this {self.method} posterior for {batch_size} image(s)",
            "use fewer samples",
            self.device,
        )
        return s


def _predicts_on_own_device(predict: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``predict_proba`` run where the posterior lives: on the CPU as written; on a GPU with
    the inputs moved there, a generator that draws there (:func:`~core.engine.device.generator_on`),
    inside :func:`~core.engine.device.on_device`, and the probabilities brought back to the CPU,
    where every caller prints, draws, compares and writes them."""
    if getattr(predict, "on_own_device", False):
        return predict

    @functools.wraps(predict)
    def predict_proba(self: Posterior, x: torch.Tensor, num_samples: int | None = None,
                      generator: torch.Generator | None = None) -> torch.Tensor:
        device = self.device
        x = image_features(self.arch, x)  # a head on a network's features: images through the network first
        if device.type == "cpu":
            return predict(self, x, num_samples, generator)
        with on_device(device):
            out = predict(self, x.to(device), num_samples, generator_on(generator, device))
        return to_host(out)

    predict_proba.on_own_device = True  # type: ignore[attr-defined]
    return predict_proba


def sample_count_setting(config: dict[str, Any], key: str, default: int) -> int:
    """The number of prediction samples a posterior's ``config[key]`` records (``default``
    when absent), or a ``ValueError`` sentence: it must be a whole number of at least 1,
    because it is what a prediction without an explicit count draws."""
    if key not in config:
        return default
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"its {key} setting is {value!r}, but a prediction needs a whole number of samples of at least 1"
        )
    return value


def check_param_shapes(arch: ArchSpec, params: dict[str, torch.Tensor], lead: int) -> None:
    """Raise ``ValueError`` unless ``params`` fit ``arch`` after ``lead`` leading dimensions."""
    reference = dict(build_model(arch).named_parameters())
    if set(reference) != set(params):
        missing = sorted(set(reference) - set(params))
        extra = sorted(set(params) - set(reference))
        raise ValueError(
            f"weights do not match architecture {arch.name!r}: missing {missing}, unexpected {extra}"
        )
    for name, ref in reference.items():
        if tuple(params[name].shape[lead:]) != tuple(ref.shape):
            raise ValueError(
                f"weight {name!r} has shape {tuple(params[name].shape[lead:])}, "
                f"architecture {arch.name!r} expects {tuple(ref.shape)}"
            )


def _logits_to_proba(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.float(), dim=-1)


def _evenly_spaced(total: int, wanted: int | None) -> torch.Tensor | None:
    if wanted is None or wanted >= total:
        return None
    if wanted < 1:
        raise ValueError("num_samples must be at least 1")
    return torch.linspace(0, total - 1, wanted).round().long()


class SampledPosterior(Posterior):
    """A posterior represented by stacked weight samples with leading dims (chain, draw).

    MAP is the degenerate case of one chain with one draw; SG-MCMC, HMC and deep ensembles
    store many. Prediction evaluates all samples at once with
    :func:`core.engine.models.stacked.stacked_forward` (``chunk_size`` bounds memory), never a Python loop.
    """

    kind = "sampled"

    def __init__(
        self,
        method: str,
        arch: ArchSpec,
        config: dict[str, Any],
        seed: int,
        dataset: str,
        samples: dict[str, torch.Tensor],
        info: dict[str, Any] | None = None,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__(method, arch, config, seed, dataset, info)
        check_param_shapes(arch, samples, lead=2)
        shapes = {tuple(t.shape[:2]) for t in samples.values()}
        if len(shapes) != 1:
            raise ValueError(f"samples disagree on (chain, draw) dimensions: {sorted(shapes)}")
        (self.num_chains, self.num_draws), = shapes
        if self.num_chains < 1 or self.num_draws < 1:
            raise ValueError(
                f"the posterior holds {self.num_chains} chain(s) of {self.num_draws} draw(s); "
                "it needs at least one draw of one chain to predict"
            )
        self.samples = {k: v.detach().float().contiguous() for k, v in samples.items()}
        self.chunk_size = chunk_size
        self._model = build_model(arch)
        self.default_num_samples = self.num_chains * self.num_draws

    @property
    def fixed_num_samples(self) -> int | None:
        return self.num_samples

    @property
    def num_samples(self) -> int:
        return self.num_chains * self.num_draws

    def flat_samples(self, num_samples: int | None = None) -> dict[str, torch.Tensor]:
        """Samples with (chain, draw) merged into one leading dim S, optionally thinned."""
        flat = {k: v.reshape(self.num_samples, *v.shape[2:]) for k, v in self.samples.items()}
        index = _evenly_spaced(self.num_samples, num_samples)
        if index is not None:
            flat = {k: v[index] for k, v in flat.items()}
        return flat

    def effective_num_samples(self, num_samples: int | None) -> int:
        return self.num_samples if num_samples is None else min(int(num_samples), self.num_samples)

    def keeping(self, draws_per_chain: int) -> SampledPosterior:
        """The same posterior holding ``draws_per_chain`` evenly spaced draws of each chain (the
        first and the last among them), or itself when it holds no more than that."""
        if draws_per_chain < 1:
            raise ValueError(f"a chain must keep at least one draw, got {draws_per_chain}")
        index = _evenly_spaced(self.num_draws, draws_per_chain)
        if index is None:
            return self
        kept = {k: v[:, index] for k, v in self.samples.items()}
        return type(self).from_state(self.method, self.arch, self.config, self.seed, self.dataset, self.info, kept)

    def chain_ids(self, num_samples: int | None = None) -> torch.Tensor:
        """Chain of each sample that ``flat_samples(num_samples)`` (and prediction) returns."""
        ids = torch.arange(self.num_chains).repeat_interleave(self.num_draws)
        index = _evenly_spaced(self.num_samples, num_samples)
        return ids if index is None else ids[index]

    def predict_logits(self, x: torch.Tensor, num_samples: int | None = None) -> torch.Tensor:
        with torch.no_grad():
            params, first = self._prepared(num_samples)
            return stacked_forward(self._model, params, x, self.chunk_size, first)

    #: How many draw counts keep their prepared weights (the window's preview and full count).
    PREPARED_KEPT = 2

    def _prepared(self, num_samples: int | None) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """``flat_samples(num_samples)`` and its first linear layer as one matrix
        (:func:`~core.engine.models.stacked.first_layer_matrix`), made once per draw count and kept for
        the last :data:`PREPARED_KEPT` counts: a stroke on the window predicted from the same
        draws copied every weight twice (the thinned draws, then the stacked matrix; 3 MB a
        column at 100 of HMC's 800 draws) before its one product."""
        key = self.effective_num_samples(num_samples)
        cache = self.__dict__.get("_prepared_weights", {})  # replaced whole, never changed: threads share it
        prepared = cache.get(key)
        if prepared is None:
            params = self.flat_samples(num_samples)
            name = first_linear_name(self._model)
            first = None
            if self.chunk_size is None and name is not None:  # a chunked posterior is short of memory
                first = first_layer_matrix(params[f"{name}.weight"])
            prepared = (params, first)
            kept = list(cache.items())[len(cache) - self.PREPARED_KEPT + 1 :]
            self._prepared_weights = {**dict(kept), key: prepared}
        return prepared

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (sent to a cluster's workers) without the prepared weights, remade there."""
        return {k: v for k, v in self.__dict__.items() if k != "_prepared_weights"}

    def predict_proba(self, x, num_samples=None, generator=None):
        return _logits_to_proba(self.predict_logits(x, num_samples))

    def state_tensors(self):
        return dict(self.samples)

    @classmethod
    def from_state(cls, method, arch, config, seed, dataset, info, tensors):
        return cls(method, arch, config, seed, dataset, tensors, info)


POSTERIOR_KINDS: dict[str, type[Posterior]] = {
    SampledPosterior.kind: SampledPosterior,
}


def register_posterior_kind(cls: type[Posterior]) -> type[Posterior]:
    """Class decorator: make a new posterior kind loadable by :mod:`core.engine.store`."""
    POSTERIOR_KINDS[cls.kind] = cls
    return cls


# ------------------------------------------------------------------------- test accuracy


def accuracy_progress(
    posterior: Posterior,
    data: Dataset,
    num_samples: int | None = 1,
    generator: torch.Generator | None = None,
) -> Generator[ProgressRecord, None, float]:
    """Accuracy of the mean predictive over ``num_samples`` samples, yielding progress.

    Batches hold about 8192 sample-inputs (S·B), so memory stays bounded for any S; the
    sample count is checked (and its memory estimated) before the first batch.
    """
    s = posterior.check_prediction(num_samples, batch_size=1)
    if len(data) == 0:
        raise ValueError(f"{data.name} holds no images to measure the accuracy on" + why_empty(data))
    batch_size = max(1, 8192 // s)
    posterior.check_prediction(s, batch_size=min(batch_size, len(data)))
    total = math.ceil(len(data) / batch_size)
    correct = 0
    for i, start in enumerate(range(0, len(data), batch_size), start=1):
        x = data.x[start : start + batch_size]
        p = posterior.predict_proba(x, num_samples=s, generator=generator).mean(0)
        correct += int((p.argmax(-1) == data.y[start : start + batch_size]).sum())
        yield ProgressRecord(i, total, {"accuracy": correct / min(start + batch_size, len(data))}, "eval")
    return correct / len(data)


def accuracy(
    posterior: Posterior,
    data: Dataset,
    num_samples: int | None = 1,
    generator: torch.Generator | None = None,
) -> float:
    """:func:`accuracy_progress` run to its end."""
    run = accuracy_progress(posterior, data, num_samples, generator)
    while True:
        try:
            next(run)
        except StopIteration as stop:
            return stop.value
