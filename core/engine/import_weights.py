"""A network trained elsewhere, as a MAP posterior: a known architecture and its ``state_dict``.

``bayescope-cli import`` reads a ``state_dict`` saved with ``torch.save(model.state_dict(), W)``
(loaded with ``weights_only=True``: a file of tensors cannot run code), checks it against a
built-in architecture (:data:`core.engine.models.ARCHITECTURES`) at the given classes, image
side and channels, and returns a one-draw :class:`SampledPosterior` with method ``map``:
what every view can show, and what Laplace and SWAG can start from (``train --start-from``).

torchvision's architectures (``resnet18`` ...) are not built in: their batch-norm statistics
live outside the weights that a posterior over weights holds, so they are refused with a
sentence, which also says when torchvision cannot be imported at all.
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
from core.engine.memory import MemoryEstimateError, check_fits
from core.engine.models import ARCHITECTURES, COLOUR_IMAGE_SIZE, IMAGE_SIZE, ArchSpec, build_model

#: torchvision classifiers a person may name; refused with a sentence (see the module docstring).
TORCHVISION_ARCHITECTURES = ("resnet18", "resnet34", "resnet50", "mobilenet_v2", "vgg11", "densenet121")


class NetworkImportError(ValueError):
    """A network that cannot be imported, with the reason in one sentence."""


def torchvision_available() -> tuple[bool, str]:
    """Whether torchvision imports beside this torch, and if not, why (one clause)."""
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # a missing package, or one built for another torch (RuntimeError, OSError)
        return False, (str(exc).splitlines() or ["it is not installed"])[0]
    return True, ""


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
    return {re.sub(r"^module\.", "", k): v for k, v in loaded.items()}


def _first_conv_channels(state: dict[str, torch.Tensor]) -> int | None:
    for tensor in state.values():
        if tensor.ndim == 4:
            return int(tensor.shape[1])
    return None


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
) -> SampledPosterior:
    """A MAP posterior of ``arch_name`` holding the weights in ``weights``.

    ``channels`` defaults to the first convolution's input channels (else 1), ``image_size``
    to 28 for grey and 32 for colour, ``hidden`` (the MLP's width) to the weights' own.
    ``mean``/``std`` are the per-channel standardisation the network was trained with.

    Raises
    ------
    NetworkImportError
        With one sentence: an unknown or unavailable architecture, an unreadable file, or
        weights that do not fit the architecture at these classes, side and channels.
    """
    if arch_name in TORCHVISION_ARCHITECTURES:
        available, why = torchvision_available()
        if not available:
            raise NetworkImportError(f"{arch_name} is a torchvision architecture, and torchvision cannot be imported "
                               f"here ({why}); import a built-in one: {', '.join(ARCHITECTURES)}")
        raise NetworkImportError(f"{arch_name} is not built in: its batch-norm statistics are not weights that a "
                           f"posterior can hold; import a built-in architecture: {', '.join(ARCHITECTURES)}")
    if arch_name not in ARCHITECTURES:
        raise NetworkImportError(f"unknown architecture {arch_name!r}; choose from {', '.join(ARCHITECTURES)}")
    state = read_state_dict(weights)
    channels = channels or _first_conv_channels(state) or 1
    if hidden is None:
        first = state.get("net.1.weight")
        hidden = int(first.shape[0]) if first is not None and first.ndim == 2 else 100
    try:
        arch = ArchSpec(arch_name, num_classes=len(class_names), drop_rate=drop_rate, hidden=hidden,
                        image_size=image_size or (IMAGE_SIZE if channels == 1 else COLOUR_IMAGE_SIZE),
                        channels=channels, mean=tuple(mean), std=tuple(std))
    except ValueError as exc:
        raise NetworkImportError(str(exc)) from None
    reference = dict(build_model(arch).named_parameters())
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
        if not got.is_floating_point() or not torch.isfinite(got).all():
            raise NetworkImportError(f"{Path(weights).name}: {name} holds values that are not finite numbers")
    samples = {name: state[name].detach().float().reshape(1, 1, *state[name].shape) for name in reference}
    info: dict[str, Any] = {
        "class_names": list(class_names),
        "imported": {"weights": str(Path(weights).absolute()), "weights_sha256": file_sha256(weights)},
    }
    return SampledPosterior("map", arch, {}, 0, f"imported-{Path(weights).stem}", samples, info)
