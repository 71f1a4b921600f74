"""A network trained elsewhere, as a MAP posterior: a known architecture and its ``state_dict``.

``bayescope-cli import`` reads a ``state_dict`` saved with ``torch.save(model.state_dict(), W)``
(loaded with ``weights_only=True``: a file of tensors cannot run code), checks it against a
built-in architecture (:data:`core.engine.models.ARCHITECTURES`) at the given classes, image
side and channels, and returns a one-draw :class:`SampledPosterior` with method ``map``:
what every view can show, and what Laplace and SWAG can start from (``train --start-from``);
or, for a network trained with dropout, its MC dropout posterior (``--mc-dropout``).

A person's own classifier saved as TorchScript or as a ``torch.export`` program is read by
:func:`import_own_network`: split at its last linear layer (:mod:`core.engine.networks`), it is a
MAP posterior over that layer (the network itself, one column) and the start of a feature tier
(``bayescope-cli zoo --tier features``).

torchvision's ResNet-18 (``resnet18``) is read from its own ``state_dict``, and torchvision is
not needed to read or use it: every batch norm is folded into the convolution before it
(:func:`fold_batch_norm`), which in inference mode is the same function, so the posterior holds
weights only (a posterior over weights cannot hold running statistics, and Laplace and SWAG
then spread belief over weights alone). torchvision's other architectures are refused with a
sentence.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from core.engine.files import file_sha256
from core.engine.inference.base import SampledPosterior
from core.engine.inference.mc_dropout import DropoutPosterior
from core.engine.memory import MemoryEstimateError, check_fits
from core.engine.models import (
    ARCHITECTURES,
    CHANNELS,
    COLOUR_IMAGE_SIZE,
    FEATURES,
    IMAGE_SIZE,
    IMPORTED_ARCHITECTURES,
    ArchSpec,
    ChannelBias,
    build_model,
)
from core.engine.networks import SplitNetwork, keep_copy, network_input, open_network
from core.engine.store import OutputsNotFiniteError, check_outputs

#: torchvision classifiers a person may name that are not built in: refused with a sentence.
TORCHVISION_ARCHITECTURES = ("resnet34", "resnet50", "mobilenet_v2", "vgg11", "densenet121")
#: The side torchvision's ImageNet networks read, the default of an imported ResNet-18.
IMAGENET_SIZE = 224
#: torch's batch-norm epsilon (torchvision's default; a state_dict does not record it).
BATCH_NORM_EPS = 1e-5


class NetworkImportError(ValueError):
    """A network that cannot be imported, with the reason in one sentence."""


def read_class_names(path: str | os.PathLike) -> tuple[str, ...]:
    """One class name per non-empty line of a UTF-8 text file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise NetworkImportError(f"{path}: no such class-names file") from None
    except UnicodeDecodeError:
        raise NetworkImportError(f"{path}: not a UTF-8 text file of class names, one per line") from None
    names = tuple(line.strip() for line in text.splitlines() if line.strip())
    if len(names) < 2:
        raise NetworkImportError(f"{path} names {len(names)} class(es); a classifier needs at least two, one per line")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise NetworkImportError(f"{path} names a class more than once ({', '.join(twice[:3])})")
    return names


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a saved ``state_dict`` (``weights_only``), ``module.`` prefixes removed."""
    path = Path(path)
    if not path.is_file():
        raise NetworkImportError(f"{path}: no such weights file" if not path.exists() else f"{path} is not a file")
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
        check_fits(2.0 * unpacked, f"loading {path.name}", "the file is probably damaged")
    except (zipfile.BadZipFile, OSError, ValueError):
        pass  # the legacy (non-zip) format: torch.load says whether it can read it
    except MemoryEstimateError as exc:
        raise NetworkImportError(str(exc)) from None
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # torch raises many types for damaged files and for pickled code
        raise NetworkImportError(
            f"{path}: not a readable file of weights (save them with torch.save(model.state_dict(), "
            "path); a whole pickled model is not read, as loading it could run code)") from None
    if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
        loaded = loaded["state_dict"]  # a checkpoint that wraps its state_dict
    if not isinstance(loaded, dict) or not loaded or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in loaded.items()):
        raise NetworkImportError(f"{path}: holds no state_dict (a table of layer names to weight tensors)")
    return {re.sub(r"^module\.", "", k): _dense(k, v, path.name) for k, v in loaded.items()}


def _dense(name: str, tensor: torch.Tensor, weights: str) -> torch.Tensor:
    """A saved tensor as an ordinary (strided) one: a sparse tensor (a pruned network) made dense,
    its dense size estimated first; a quantized one dequantized; one without values refused."""
    if tensor.is_meta:
        raise NetworkImportError(f"{weights}: {name} holds no values (it was saved from a model on the meta device)")
    if tensor.is_quantized:
        return tensor.dequantize()
    if tensor.layout != torch.strided:
        try:
            check_fits(tensor.numel() * tensor.element_size(), f"making {name} of {weights} dense",
                       "the file is probably damaged")
        except MemoryEstimateError as exc:
            raise NetworkImportError(str(exc)) from None
        return tensor.to_dense()
    return tensor


def _first_convolution(arch_name: str, classes: int) -> str | None:
    """The name of ``arch_name``'s first convolution weight (None for a network without one),
    found on a model built on the meta device (no memory)."""
    with torch.device("meta"):
        model = build_model(ArchSpec(arch_name, num_classes=classes, image_size=32 if arch_name != "resnet18" else 224))
    return next((name for name, p in model.named_parameters() if p.ndim == 4), None)


def _first_conv_channels(state: dict[str, torch.Tensor], arch_name: str, classes: int, weights: str) -> int | None:
    """The input channels of the architecture's own first convolution in ``state``: the second
    dimension of its weight, refused in words unless it is 1 or 3 (never another layer's)."""
    name = _first_convolution(arch_name, classes)
    tensor = state.get(name) if name else None
    if tensor is None or tensor.ndim != 4:
        return None
    if int(tensor.shape[1]) not in CHANNELS:
        raise NetworkImportError(
            f"{weights}: {name}, the first convolution, has shape {tuple(tensor.shape)}, so it would read "
            f"{int(tensor.shape[1])} input channels; a {arch_name}'s first convolution reads 1 (grey) or 3 (colour): "
            "check that these are a " + arch_name + "'s weights, with (out channels, in channels, height, width)")
    return int(tensor.shape[1])


def _weight(name: str, got: torch.Tensor, weights: str) -> torch.Tensor:
    """One weight as a dense, compact float32 tensor of its own (never a view into a larger
    storage, which saving would write whole), or a sentence that says what it holds instead."""
    if got.is_complex():
        raise NetworkImportError(f"{weights}: {name} holds complex numbers; a network's weights are real numbers")
    if not got.is_floating_point():
        raise NetworkImportError(f"{weights}: {name} holds {str(got.dtype).removeprefix('torch.')} values, not "
                                 "floating-point weights")
    if not bool(torch.isfinite(got).all()):
        raise NetworkImportError(f"{weights}: {name} holds values that are not finite numbers (NaN or infinite)")
    return got.detach().to(torch.float32).clone(memory_format=torch.contiguous_format)


def fold_batch_norm(state: dict[str, torch.Tensor], model: torch.nn.Module,
                    eps: float = BATCH_NORM_EPS) -> dict[str, torch.Tensor]:
    """``state`` (a torchvision ResNet-18 ``state_dict``) with each batch norm ``B`` folded into the
    convolution ``C`` before it, as ``model`` (:class:`core.engine.models.ResNet18`) holds them:
    C.weight ← C.weight · s and B.bias ← β − μ · s per channel, with s = γ / √(σ² + ε). The
    running statistics and γ leave; the function in inference mode is unchanged."""
    out = dict(state)
    for name, module in model.named_modules():
        if not isinstance(module, ChannelBias):
            continue
        head, _, last = name.rpartition(".")  # bn1 → conv1, layer1.0.bn2 → layer1.0.conv2, downsample.1 → .0
        conv = f"{head}.0" if head.endswith("downsample") else ".".join(filter(None, (head, last.replace("bn", "conv"))))
        parts = {k: f"{name}.{k}" for k in ("weight", "bias", "running_mean", "running_var")}
        missing = [k for k in (*parts.values(), f"{conv}.weight") if k not in state]
        if missing:
            raise NetworkImportError(f"the weights lack {', '.join(missing[:3])}: not a torchvision resnet18 "
                                     "state_dict with its batch norms")
        gamma, beta, mu, var = (state[parts[k]].double() for k in ("weight", "bias", "running_mean", "running_var"))
        if not bool((var >= 0).all()):
            raise NetworkImportError(f"{name}.running_var holds negative variances: the weights are damaged")
        scale = gamma / (var + eps).sqrt()
        out[f"{conv}.weight"] = (state[f"{conv}.weight"].double() * scale.view(-1, 1, 1, 1)).float()
        out[f"{name}.bias"] = (beta - mu * scale).float()
        for key in ("weight", "running_mean", "running_var", "num_batches_tracked"):
            out.pop(f"{name}.{key}", None)
    return out


def import_network(
    arch_name: str,
    weights: str | os.PathLike,
    class_names: tuple[str, ...],
    *,
    image_size: int | None = None,
    channels: int | None = None,
    drop_rate: float = 0.0,
    hidden: int | None = None,
    mean: tuple[float, ...] = (),
    std: tuple[float, ...] = (),
    mc_dropout: bool = False,
) -> SampledPosterior | DropoutPosterior:
    """A MAP posterior of ``arch_name`` holding the weights in ``weights``; with ``mc_dropout``,
    the MC dropout posterior of a network trained with dropout (Gal & Ghahramani 2016: its
    dropout layers, at ``drop_rate``, kept on at prediction).

    ``channels`` defaults to the first convolution's input channels (else 1), ``image_size``
    to 28 for grey and 32 for colour, ``hidden`` (the MLP's width) to the weights' own.
    ``mean``/``std`` are the per-channel standardisation the network was trained with.

    Raises
    ------
    NetworkImportError
        With one sentence: an unknown or unavailable architecture, an unreadable file, or
        weights that do not fit the architecture at these classes, side and channels.
    """
    if mc_dropout and not drop_rate > 0:
        raise NetworkImportError("MC dropout keeps the network's dropout layers on at prediction: give the rate it "
                                 "was trained with (--drop-rate, e.g. 0.5)")
    known = ARCHITECTURES + IMPORTED_ARCHITECTURES
    if arch_name in TORCHVISION_ARCHITECTURES:
        raise NetworkImportError(f"{arch_name} is not built in; of torchvision's networks resnet18 is (its batch "
                                 f"norms folded into its convolutions), and so are {', '.join(ARCHITECTURES)}")
    if arch_name not in known:
        raise NetworkImportError(f"unknown architecture {arch_name!r}; choose from {', '.join(known)}")
    state = read_state_dict(weights)
    channels = channels or _first_conv_channels(state, arch_name, len(class_names), Path(weights).name) or 1
    if hidden is None:
        first = state.get("net.1.weight")
        hidden = int(first.shape[0]) if first is not None and first.ndim == 2 else 100
    default_size = IMAGENET_SIZE if arch_name == "resnet18" else IMAGE_SIZE if channels == 1 else COLOUR_IMAGE_SIZE
    try:
        arch = ArchSpec(arch_name, num_classes=len(class_names), drop_rate=drop_rate, hidden=hidden,
                        image_size=image_size or default_size, channels=channels, mean=tuple(mean), std=tuple(std))
    except ValueError as exc:
        raise NetworkImportError(str(exc)) from None
    model = build_model(arch)
    folded = 0
    if arch_name == "resnet18":
        folded = sum(isinstance(m, ChannelBias) for m in model.modules())
        state = fold_batch_norm(state, model)
    reference = dict(model.named_parameters())
    missing = sorted(set(reference) - set(state))
    extra = sorted(set(state) - set(reference))
    if missing or extra:
        parts = ([f"lacks {', '.join(missing[:4])}{' …' if len(missing) > 4 else ''}"] if missing else []) + (
            [f"has layers the {arch_name} has not ({', '.join(extra[:4])}{' …' if len(extra) > 4 else ''})"]
            if extra else [])
        raise NetworkImportError(f"{Path(weights).name} is not a {arch_name} state_dict: it {' and '.join(parts)}")
    for name, ref in reference.items():
        got = state[name]
        if tuple(got.shape) != tuple(ref.shape):
            raise NetworkImportError(
                f"{Path(weights).name}: {name} has shape {tuple(got.shape)}, but a {arch_name} with "
                f"{len(class_names)} classes, {channels} channel(s) and {arch.image_size}-pixel images "
                f"needs {tuple(ref.shape)}; check --classes, --channels and --image-size")
        state[name] = _weight(name, got, Path(weights).name)
    samples = {name: state[name].reshape(1, 1, *state[name].shape) for name in reference}
    info: dict[str, Any] = {
        "class_names": list(class_names),
        "imported": {"weights": str(Path(weights).absolute()), "weights_sha256": file_sha256(weights)},
    }
    if folded:
        info["imported"]["batch_norms_folded"] = folded
    if mc_dropout:
        params = {name: state[name] for name in reference}
        posterior: SampledPosterior | DropoutPosterior = DropoutPosterior(
            "mc_dropout", arch, {"num_samples": DropoutPosterior.default_num_samples}, 0,
            f"imported-{Path(weights).stem}", params, info)
    else:
        posterior = SampledPosterior("map", arch, {}, 0, f"imported-{Path(weights).stem}", samples, info)
    try:
        check_outputs(posterior, Path(weights).name)
    except OutputsNotFiniteError:
        raise NetworkImportError(
            f"{Path(weights).name}: its weights are finite, but the network's outputs on a plain grey image are not "
            "(they overflow: weights far too large for float32, or a --std that divides by almost zero), so it "
            "could never name a class; check the weights' scale and --mean/--std") from None
    return posterior


def import_own_network(
    network: str | os.PathLike,
    *,
    head: str | None = None,
    image_size: int | None = None,
    mean: tuple[float, ...] = (),
    std: tuple[float, ...] = (),
    class_names: tuple[str, ...] = (),
) -> tuple[SampledPosterior, SplitNetwork]:
    """A person's own classifier saved as TorchScript or torch.export (:mod:`core.engine.networks`)
    as a MAP posterior over its head: the network split at its last linear layer, that layer's
    weights the one draw, so that the posterior predicts on images exactly as the network does.
    What it reads (side, mean/std, class names) comes from the options or its sidecar JSON; the
    network is kept under its checksum in the user cache, where the posterior finds it.

    Raises
    ------
    NetworkError
        With one sentence: an unreadable file, something it reads left unsaid, or a network that
        cannot be split (with how to export it so that it can).
    """
    split = open_network(network, lambda shape: network_input(network, image_size=image_size, mean=mean, std=std,
                                                              class_names=class_names, program_shape=shape), head)
    keep_copy(network, split.sha256)
    return head_posterior(split, "map", split.weight, split.bias, f"imported-{Path(network).stem}"), split


def features_arch(split: SplitNetwork, num_classes: int, drop_rate: float = 0.0) -> ArchSpec:
    """The architecture of a softmax-regression head of ``num_classes`` on ``split``'s features."""
    wanted = split.input
    return ArchSpec(FEATURES, num_classes=num_classes, drop_rate=drop_rate, image_size=wanted.image_size,
                    channels=wanted.channels, mean=wanted.mean, std=wanted.std, features=split.feature_dim,
                    network=split.sha256, head=split.head)


def network_record(split: SplitNetwork) -> dict[str, Any]:
    """What a posterior over ``split``'s head records of the network (``info["network"]``)."""
    wanted = split.input
    return {"file": str(split.path.absolute()), "sha256": split.sha256, "format": split.format, "head": split.head,
            "features": split.feature_dim, "image_size": wanted.image_size, "channels": wanted.channels,
            "mean": list(wanted.mean), "std": list(wanted.std), "class_names": list(wanted.class_names)}


def head_posterior(split: SplitNetwork, method: str, weight: torch.Tensor, bias: torch.Tensor,
                   dataset: str) -> SampledPosterior:
    """A one-draw posterior of the head with these weights (the network's own: the imported column)."""
    arch = features_arch(split, int(weight.shape[0]))
    samples = {"linear.weight": weight.reshape(1, 1, *weight.shape).float().clone(),
               "linear.bias": bias.reshape(1, 1, -1).float().clone()}
    info: dict[str, Any] = {"class_names": list(split.input.class_names), "network": network_record(split),
                            "imported": {"weights": str(split.path.absolute()), "weights_sha256": split.sha256}}
    posterior = SampledPosterior(method, arch, {}, 0, dataset, samples, info)
    try:
        check_outputs(posterior, split.path.name)
    except OutputsNotFiniteError:
        raise NetworkImportError(f"{split.path.name}: its last layer's outputs are not finite numbers") from None
    return posterior
