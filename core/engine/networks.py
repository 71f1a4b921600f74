"""A person's own image classifier, saved as TorchScript or as a ``torch.export`` program, split
at its last linear layer into a fixed feature extractor and a softmax-regression head.

bayescope reads two self-contained formats, neither of which needs the network's Python code
nor torchvision:

- **TorchScript** (``torch.jit.save(torch.jit.script(model), "net.pt")`` or a traced model);
- **torch.export** (``torch.export.save(torch.export.export(model, (x,)), "net.pt2")``).

The *head* is the network's last ``nn.Linear``, the one whose outputs are the network's outputs
(the logits): ``net(x) = W f(x) + b``. :func:`open_network` finds it (TorchScript: the module
tree's ``Linear`` modules; torch.export: the graph's ``linear``/``addmm`` nodes and the weight
each reads), ``head=NAME`` names it when several could be, and the split is checked on probe
images: the network's own outputs must equal the head applied to the features, or the network
is refused with a sentence saying how to export it so that it can be split.

The features f(x) come from the same program with the head's weight replaced by the identity
and its bias by zeros (the head then hands its input through), so no graph is rewritten and
the network runs exactly as saved. A network is known by the SHA-256 of its file; a copy is kept
in the user cache under it (:func:`network_copy`), so a posterior over its head finds it by that
checksum wherever the original file goes.

The input a network reads (side, channels, per-channel mean and standard deviation, class
names) is given as options or in a sidecar JSON beside it (``net.json``, :func:`read_sidecar`):
``{"image_size": 64, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25], "classes": ["a", "b"]}``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
import torch

#: The suffixes of the two formats.
TORCHSCRIPT_SUFFIX, EXPORT_SUFFIX = ".pt", ".pt2"
#: How to export a network so that it can be split: the sentence every refusal ends with.
HOW_TO_EXPORT = ("export it so that its last layer is an nn.Linear submodule whose outputs it returns as they "
                 "are (the logits, no softmax after it), e.g. self.fc = nn.Linear(features, classes) and "
                 "return self.fc(h), saved with torch.jit.save(torch.jit.script(model), 'net.pt') or "
                 "torch.export.save(torch.export.export(model, (example,)), 'net.pt2')")
#: Images per feature batch (an exported program with a fixed batch runs in batches of its own size).
FEATURE_BATCH = 64
#: How closely the head applied to the features must give the network's own outputs (float32 sums).
SPLIT_TOLERANCE = 1e-4


class NetworkError(ValueError):
    """A network that cannot be read or split, with the reason in one sentence."""


@dataclass(frozen=True)
class NetworkInput:
    """What a network reads: square images of ``image_size`` pixels and ``channels`` channels in
    [0, 1], standardised per channel as ``(x − mean) / std``, and the names of its outputs."""

    image_size: int
    channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    class_names: tuple[str, ...] = ()


@dataclass
class SplitNetwork:
    """A network split at its head: ``features(x)`` (images in [0, 1] → (N, D)) and the head's
    weight (K, D) and bias (K)."""

    path: Path
    sha256: str
    format: str  # "torchscript" or "export"
    head: str
    weight: torch.Tensor
    bias: torch.Tensor
    input: NetworkInput
    candidates: tuple[str, ...] = ()
    _program: Any = field(default=None, repr=False)
    _batch: int | None = None

    @property
    def feature_dim(self) -> int:
        return int(self.weight.shape[1])

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """(N, D) features of images (N, C, S, S) in [0, 1], in batches (padded to an exported
        program's fixed batch)."""
        if images.ndim != 4 or tuple(images.shape[1:]) != (self.input.channels, self.input.image_size,
                                                            self.input.image_size):
            raise ValueError(f"the network reads images of shape ({self.input.channels}, {self.input.image_size}, "
                             f"{self.input.image_size}), got {tuple(images.shape[1:])}")
        mean = torch.tensor(self.input.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(self.input.std, dtype=torch.float32).view(1, -1, 1, 1)
        step = self._batch or FEATURE_BATCH
        out = []
        with torch.no_grad():
            for i in range(0, len(images), step):
                x = (images[i : i + step].float().cpu() - mean) / std
                n = len(x)
                if self._batch and n < self._batch:  # a fixed-batch program: pad, then drop the padding
                    x = torch.cat([x, x.new_zeros(self._batch - n, *x.shape[1:])])
                out.append(_as_tensor(self._program(x))[:n].reshape(n, -1).float())
        return torch.cat(out) if out else images.new_zeros(0, self.feature_dim)


def _as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    raise NetworkError("the network returns no tensor of class scores; " + HOW_TO_EXPORT)


# ------------------------------------------------------------------------------ what it reads


def read_sidecar(network: str | os.PathLike) -> dict[str, Any]:
    """The sidecar JSON beside ``network`` (same name, ``.json``), or {} when there is none."""
    path = Path(network).with_suffix(".json")
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NetworkError(f"{path.name} is not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise NetworkError(f"{path.name} holds no table of fields (image_size, mean, std, classes)")
    unknown = sorted(set(data) - {"image_size", "channels", "mean", "std", "classes"})
    if unknown:
        raise NetworkError(f"{path.name} has fields bayescope does not know ({', '.join(unknown)}); it reads "
                           "image_size, channels, mean, std and classes")
    return data


def network_input(network: str | os.PathLike, *, image_size: int | None = None, mean: tuple[float, ...] = (),
                  std: tuple[float, ...] = (), class_names: tuple[str, ...] = (),
                  program_shape: tuple[int, ...] | None = None) -> NetworkInput:
    """What ``network`` reads, from the options given and its sidecar JSON (the options win);
    a missing piece is refused with a sentence naming the option and the sidecar field."""
    side = read_sidecar(network)
    where = f"--{{}} or \"{{}}\" in {Path(network).with_suffix('.json').name}"
    size = image_size or side.get("image_size")
    if size is None and program_shape is not None:
        size = program_shape[-1]
    mean = tuple(mean) or tuple(side.get("mean") or ())
    std = tuple(std) or tuple(side.get("std") or ())
    names = tuple(class_names) or tuple(side.get("classes") or ())
    missing = [where.format(o, f) for o, f, v in (("image-size", "image_size", size), ("mean", "mean", mean),
                                                  ("std", "std", std), ("classes", "classes", names)) if not v]
    if missing:
        raise NetworkError(f"{Path(network).name}: bayescope needs to know what the network reads; give "
                           + "; ".join(missing) + " (mean and std per channel, on images in [0, 1])")
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 4096:
        raise NetworkError(f"the image size must be a whole number of pixels from 1 to 4096, got {size!r}")
    for label, values in (("mean", mean), ("std", std)):
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise NetworkError(f"the {label} must be finite numbers, one per channel, got {list(values)}")
    if len(mean) != len(std) or len(mean) not in (1, 3):
        raise NetworkError(f"give one mean and one standard deviation per channel (1 grey or 3 colour), got "
                           f"{len(mean)} and {len(std)}")
    if min(std) <= 0:
        raise NetworkError(f"the standard deviations must be positive, got {list(std)}")
    channels = int(side.get("channels") or len(mean))
    if program_shape is not None and tuple(program_shape[1:]) != (channels, size, size):
        raise NetworkError(f"{Path(network).name} was exported for inputs of shape {tuple(program_shape[1:])}, "
                           f"but it is said to read {channels}×{size}×{size}")
    if not all(isinstance(n, str) and n.strip() for n in names) or len(set(names)) != len(names):
        raise NetworkError("the class names must be distinct, non-empty words")
    return NetworkInput(int(size), channels, tuple(float(v) for v in mean), tuple(float(v) for v in std),
                        tuple(n.strip() for n in names))


# ------------------------------------------------------------------------------ the two formats


def _load(path: Path) -> tuple[str, Any, tuple[int, ...] | None]:
    """(format, a callable program, the fixed input shape of an exported program or None)."""
    if not path.is_file():
        raise NetworkError(f"{path}: no such network file" if not path.exists() else f"{path} is not a file")
    if path.suffix.lower() == EXPORT_SUFFIX:
        try:
            program = torch.export.load(path)
        except Exception as exc:  # torch raises many types for a damaged or foreign archive
            raise NetworkError(f"{path.name}: not a torch.export program saved with torch.export.save "
                               f"({type(exc).__name__})") from None
        module = program.module()
        inputs = [n for n in module.graph.nodes if n.op == "placeholder"]
        if len(inputs) != 1:
            raise NetworkError(f"{path.name} takes {len(inputs)} inputs; bayescope gives a network one batch of images")
        value = inputs[0].meta.get("val")
        shape = tuple(int(s) for s in value.shape) if value is not None and all(
            isinstance(s, int) for s in value.shape) else None
        if value is not None and len(value.shape) != 4:
            raise NetworkError(f"{path.name} reads inputs of {len(value.shape)} dimensions, not a batch of images "
                               "(N, channels, height, width)")
        return "export", module, shape
    try:
        with warnings.catch_warnings():  # torch calls TorchScript deprecated; networks are still saved so
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise NetworkError(f"{path.name}: not a TorchScript network saved with torch.jit.save "
                           f"({type(exc).__name__}); a .pt2 file is read as torch.export") from None
    return "torchscript", module.eval(), None


def _torchscript_linears(module: Any) -> dict[str, Any]:
    """Every ``nn.Linear`` of a TorchScript module by its path, in the module tree's order."""
    return {name: m for name, m in module.named_modules()
            if name and getattr(m, "original_name", None) == "Linear" and hasattr(m, "weight")}


def _attr_source(node: Any) -> str | None:
    """The parameter a graph node reads, through transposes and views (None if it reads none)."""
    while node is not None and getattr(node, "op", None) == "call_function" and node.args:
        node = node.args[0]
    return node.target if getattr(node, "op", None) == "get_attr" else None


def _export_linears(module: Any) -> dict[str, tuple[str, str | None]]:
    """Every linear map of an exported graph (``linear``, ``addmm``) in the graph's order, by the
    name of its layer: (weight's parameter path, bias's or None)."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in module.graph.nodes:
        if node.op != "call_function":
            continue
        target = str(node.target)
        if target.startswith("aten.linear"):
            weight, bias = _attr_source(node.args[1]), _attr_source(node.args[2]) if len(node.args) > 2 else None
        elif target.startswith("aten.addmm"):
            weight, bias = _attr_source(node.args[2]), _attr_source(node.args[0])
        else:
            continue
        if weight is None or not weight.endswith("weight"):
            continue
        out[weight.rpartition(".")[0] or weight] = (weight, bias)
    return out


def _owner(module: Any, path: str) -> tuple[Any, str]:
    """The module holding the parameter at ``path`` (attribute by attribute: a ScriptModule has no
    ``get_submodule``), and the parameter's own name."""
    *owners, name = path.split(".")
    for part in owners:
        module = getattr(module, part)
    return module, name


def _parameter(module: Any, path: str) -> torch.Tensor:
    owner, name = _owner(module, path)
    return getattr(owner, name)


def _set_parameter(module: Any, path: str, value: torch.Tensor) -> None:
    owner, name = _owner(module, path)
    setattr(owner, name, torch.nn.Parameter(value, requires_grad=False))


def _head_tensors(fmt: str, module: Any, name: str, export_linears: dict) -> tuple[str, str | None]:
    """The parameter paths of the head ``name``'s weight and bias."""
    if fmt == "torchscript":
        bias = getattr(_torchscript_linears(module)[name], "bias", None)
        return f"{name}.weight", (f"{name}.bias" if bias is not None else None)
    return export_linears[name]


def sha256_of(path: str | os.PathLike) -> str:
    """The SHA-256 of the network file. (Not :func:`core.engine.files.file_sha256`: the models
    reach this module, and ``files`` reaches the runner and through it the models: a cycle.)"""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def linear_layers(path: str | os.PathLike) -> tuple[str, ...]:
    """The names of the linear layers of the network saved at ``path``, in its own order: the
    layers it may be split at (``head``), for a person to pick from rather than to type.

    Raises
    ------
    NetworkError
        A file that is not a TorchScript network or a torch.export program bayescope reads.
    """
    fmt, program, _ = _load(Path(path))
    return tuple(_torchscript_linears(program) if fmt == "torchscript" else _export_linears(program))


def open_network(path: str | os.PathLike, network_in: Callable[[tuple[int, ...] | None], NetworkInput],
                 head: str | None = None) -> SplitNetwork:
    """Load ``path`` and split it at its head (``head``, or the one linear layer whose outputs are
    the network's), checked on probe images. ``network_in(program_shape)`` says what it reads.

    Raises
    ------
    NetworkError
        An unreadable file, no linear layer, several candidates without ``head``, a ``head`` that
        is not a linear layer, or a split that does not give the network's own outputs.
    """
    path = Path(path)
    fmt, program, shape = _load(path)
    wanted = network_in(shape)
    batch = shape[0] if shape else None
    linears = _torchscript_linears(program) if fmt == "torchscript" else _export_linears(program)
    if not linears:
        raise NetworkError(f"{path.name} has no linear layer bayescope can find to split it at; " + HOW_TO_EXPORT)
    generator = torch.Generator().manual_seed(0)
    probe = torch.rand(batch or 4, wanted.channels, wanted.image_size, wanted.image_size, generator=generator)
    split = SplitNetwork(path, "", fmt, "", torch.zeros(0, 0), torch.zeros(0), wanted, tuple(linears), program,
                         batch)
    try:
        with torch.no_grad():
            mean = torch.tensor(wanted.mean).view(1, -1, 1, 1)
            std = torch.tensor(wanted.std).view(1, -1, 1, 1)
            outputs = _as_tensor(program((probe - mean) / std)).float()
    except NetworkError:
        raise
    except Exception as exc:  # the network's own error on an input of the stated shape
        raise NetworkError(f"{path.name} fails on {wanted.channels}×{wanted.image_size}×{wanted.image_size} images "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}); check "
                           "the image size and the number of channels (one mean per channel)") from None
    if outputs.ndim != 2:
        raise NetworkError(f"{path.name} returns outputs of shape {tuple(outputs.shape)}, not one score per class "
                           "(N, classes); " + HOW_TO_EXPORT)
    classes = int(outputs.shape[1])
    if wanted.class_names and len(wanted.class_names) != classes:
        raise NetworkError(f"{path.name} gives {classes} outputs, but {len(wanted.class_names)} class names were "
                           "given; give one name per output, in the order of its outputs")
    shapes = {n: tuple(_parameter(program, _head_tensors(fmt, program, n, linears)[0]).shape) for n in linears}
    if head is not None:
        if head not in linears:
            raise NetworkError(f"{path.name} has no linear layer named {head!r}; its linear layers are "
                               f"{', '.join(linears)}")
        chosen = head
    else:
        fitting = [n for n, s in shapes.items() if len(s) == 2 and s[0] == classes]
        if not fitting:
            raise NetworkError(f"none of {path.name}'s linear layers ({', '.join(linears)}) gives its {classes} "
                               "outputs; " + HOW_TO_EXPORT)
        if len(fitting) > 1:
            raise NetworkError(f"{path.name} has several linear layers that could be its last ({', '.join(fitting)}); "
                               "name the one whose outputs it returns with --head")
        chosen = fitting[0]
    weight_path, bias_path = _head_tensors(fmt, program, chosen, linears)
    weight = _parameter(program, weight_path).detach().float().clone()
    bias = (_parameter(program, bias_path).detach().float().clone() if bias_path
            else torch.zeros(weight.shape[0]))
    if weight.ndim != 2 or weight.shape[0] != classes:
        raise NetworkError(f"{chosen} of {path.name} gives {weight.shape[0] if weight.ndim else 0} outputs, not the "
                           f"network's {classes}: it is not its last layer; " + HOW_TO_EXPORT)
    width = int(weight.shape[1])
    _set_parameter(program, weight_path, torch.eye(width))  # the head now hands its input through
    if bias_path:
        _set_parameter(program, bias_path, torch.zeros(width))
    split.head, split.weight, split.bias = chosen, weight, bias
    try:
        features = split.features(probe)
    except NetworkError:
        raise
    except Exception:
        features = None
    if features is None or tuple(features.shape) != (len(probe), width) or not torch.allclose(
            features @ weight.T + bias, outputs, atol=SPLIT_TOLERANCE * max(1.0, float(outputs.abs().max()))):
        raise NetworkError(f"splitting {path.name} at {chosen} does not give the network's own outputs (something "
                           "follows that layer, or it is used more than once); " + HOW_TO_EXPORT)
    if not (bool(torch.isfinite(features).all()) and bool(torch.isfinite(outputs).all())):
        raise NetworkError(f"{path.name} gives values that are not finite numbers on probe images; check --mean and --std")
    split.sha256 = sha256_of(path)
    return split


# ------------------------------------------------------------------------------ the kept copy


def networks_folder() -> Path:
    """Where imported networks are kept, each under its checksum (the user cache)."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "networks"


def keep_copy(path: str | os.PathLike, sha256: str) -> Path:
    """A copy of the network file in :func:`networks_folder` under its checksum (made once)."""
    path = Path(path)
    target = networks_folder() / f"{sha256}{path.suffix.lower()}"
    if not target.is_file() or target.stat().st_size != path.stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_suffix(target.suffix + ".part")
        shutil.copyfile(path, temporary)
        os.replace(temporary, target)
    return target


def network_copy(sha256: str) -> Path:
    """The kept copy of the network with this checksum, or :class:`NetworkError` in words."""
    for suffix in (TORCHSCRIPT_SUFFIX, EXPORT_SUFFIX):
        candidate = networks_folder() / f"{sha256}{suffix}"
        if candidate.is_file():
            return candidate
    raise NetworkError(f"this posterior reads images through a network of your own (checksum {sha256[:12]}…) that "
                       "is not on this computer: import it again with bayescope-cli import --network FILE")


_OPEN: dict[tuple[str, str], SplitNetwork] = {}


def split_network_for(sha256: str, head: str, wanted: NetworkInput) -> SplitNetwork:
    """The kept network with this checksum split at ``head`` (opened once per process)."""
    key = (sha256, head)
    if key not in _OPEN:
        path = network_copy(sha256)
        _OPEN[key] = open_network(path, lambda shape: wanted, head)
    return _OPEN[key]
