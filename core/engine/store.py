"""Saving and loading posteriors, atomically, with their integrity and provenance checked.

A posterior file is a ``torch.save`` archive (loaded with ``weights_only=True``) holding::

    {"format": "bayescope-posterior", "format_version": 2, "code_version": "0.1.0",
     "kind": "sampled" | "dropout" | ..., "method": "mc_dropout", "config": {...},
     "seed": 0, "arch": {...}, "dataset": "mnist-train", "info": {...},
     "storage": "float32" | "float16", "tensors": {...}, "checksum": "sha256:..."}

``checksum`` is the SHA-256 of every other record (as canonical JSON) and of every tensor's
name, dtype, shape and bytes, computed at save time and verified on load, so one flipped bit
anywhere is reported as a damaged file instead of silently changing a prediction. Version 1
files (no checksum) are refused with the command that upgrades them
(``python -m core.commands.upgrade FILE``), which re-saves their tensors bit for bit.

Loading is one validation layer: file → archive → records → checksum → weights (floating
point, finite) → kind, method and architecture (bounded, and estimated against the free
memory before anything is built; an image model of any side loads, and what it reads, a digit
or a photo, is :mod:`core.engine.model_inputs`' one rule) → the
posterior, whose constructor checks what prediction relies on (weight shapes against the
architecture, at least one chain, draw or mixture component, a prediction sample count of
at least 1). Every failure is a :class:`PosteriorFileError` with one sentence.

Files are written through :func:`core.engine.files.atomic_write`.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import torch

from core.engine.device import CPU, on_device
from core.engine.files import atomic_write, code_version
from core.engine.inference.base import POSTERIOR_KINDS, Posterior
from core.engine.memory import MemoryEstimateError, check_fits
from core.engine.models import ArchSpec, check_model_fits

FORMAT = "bayescope-posterior"

FORMAT_VERSION = 2

#: The records a version-2 file must hold, with the Python type each must have.
RECORDS: dict[str, type | tuple[type, ...]] = {
    "format_version": int,
    "kind": str,
    "method": str,
    "config": dict,
    "seed": int,
    "arch": dict,
    "dataset": str,
    "info": dict,
    "storage": str,
    "tensors": dict,
}

STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16}

#: Weights may be stored in these dtypes; anything else (integers, booleans, complex) is
#: not a set of network weights.
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class PosteriorFileError(ValueError):
    """A posterior file that cannot be used, with the reason in words."""


class OutputsNotFiniteError(PosteriorFileError):
    """Finite weights whose class probabilities are not finite numbers (they overflow)."""


#: Draws the output probe asks of a posterior: weights that overflow (scaled by 10³⁰, an input
#: standardisation by 10⁻⁴⁰) do so in every draw, and a few keep loading quick (a single draw
#: that overflows is caught when it predicts: :func:`core.analysis.uncertainty.summarise_finite`).
PROBE_SAMPLES = 8


def probe_inputs(arch: ArchSpec) -> torch.Tensor:
    """Two inputs every posterior must give finite probabilities for: a plain mid-grey image and
    seeded noise in [0, 1] (for a model of feature vectors: zeros and seeded unit-length noise)."""
    generator = torch.Generator().manual_seed(0)
    dim = arch.input_dim or arch.features  # a head on a network's features is probed on features
    if dim:
        noise = torch.randn(1, dim, generator=generator)
        return torch.cat([torch.zeros(1, dim), noise / noise.norm()])
    shape = (1, *arch.input_shape)
    return torch.cat([torch.full(shape, 0.5), torch.rand(shape, generator=generator)])


def check_outputs(posterior: Posterior, name: str) -> None:
    """Refuse, with :class:`OutputsNotFiniteError`, a posterior whose class probabilities on
    :func:`probe_inputs` are not finite numbers: finite weights can still overflow (a network
    scaled by 10³⁰, a standard deviation of 10⁻⁴⁰ in its input standardisation), and every view
    would then name a class from NaN. ``name`` is the file the sentence names."""
    s = min(posterior.effective_num_samples(None), PROBE_SAMPLES)
    try:
        posterior.check_prediction(s, batch_size=2)
    except MemoryEstimateError:
        s = 1  # as large as fits: a draw is better than no probe
    with torch.no_grad():
        probs = posterior.predict_proba(probe_inputs(posterior.arch).to(posterior.device), num_samples=s,
                                        generator=torch.Generator().manual_seed(0))
    if not bool(torch.isfinite(probs).all()):
        raise OutputsNotFiniteError(
            f"{name}: its weights are finite, but its class probabilities are not numbers on "
            f"{'a probe descriptor' if posterior.arch.input_dim else 'a plain grey image'} "
            "(its outputs overflow: weights far too large, or an input standardisation that divides by almost "
            "zero), so it cannot name a class; import or train it again")


def payload_checksum(payload: dict[str, Any]) -> str:
    """SHA-256 of a payload's records (canonical JSON) and tensors (name, dtype, shape, bytes).

    Raises ``TypeError``/``ValueError`` when a record cannot be written as JSON.
    """
    h = hashlib.sha256()
    meta = {k: v for k, v in payload.items() if k not in ("tensors", "checksum")}
    h.update(json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=True).encode())
    tensors = payload.get("tensors", {})
    for name in sorted(tensors):
        t = tensors[name]
        header = f"\0{name}\0{str(t.dtype).removeprefix('torch.')}\0{list(t.shape)}\0"
        h.update(header.encode())
        h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy())
    return "sha256:" + h.hexdigest()


def save_posterior(posterior: Posterior, path: str | os.PathLike, storage: str = "float32") -> Path:
    """Write ``posterior`` to ``path`` atomically, with its checksum, and return the path.

    Its tensors are written from CPU copies wherever it lives, so the file loads anywhere.

    ``storage="float16"`` halves the file (bundled posteriors); tensors are computed with
    in float32 again after loading. Weights that are not finite (a diverged fit), or that
    overflow float16, are refused: such a file could not be loaded again.
    """
    if storage not in STORAGE_DTYPES:
        raise ValueError(f"storage must be one of {sorted(STORAGE_DTYPES)}, got {storage!r}")
    dtype = STORAGE_DTYPES[storage]

    def stored(name: str, t: torch.Tensor) -> torch.Tensor:
        t = t.detach().cpu().contiguous()
        if not t.is_floating_point():
            raise ValueError(f"weight {name!r} is not floating point; the posterior cannot be saved")
        if not torch.isfinite(t).all():
            raise FloatingPointError(
                f"weight {name!r} holds NaN or infinite values (the fit diverged); "
                "the posterior was not saved: train again with a smaller step size or learning rate"
            )
        out = t.to(dtype)
        if not torch.isfinite(out).all():
            raise ValueError(f"weight {name!r} is too large for {storage} storage; save with float32 storage")
        if out.untyped_storage().nbytes() > out.numel() * out.element_size():
            out = out.clone()  # a view into a larger tensor: torch.save would write that whole storage
        return out

    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "code_version": code_version(),
        "kind": posterior.kind,
        "method": posterior.method,
        "config": posterior.config,
        "seed": posterior.seed,
        "arch": posterior.arch.to_dict(),
        "dataset": posterior.dataset,
        "info": posterior.info,
        "storage": storage,
        "tensors": {k: stored(k, v) for k, v in posterior.state_tensors().items()},
    }
    try:
        payload["checksum"] = payload_checksum(payload)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the posterior's settings or facts cannot be recorded ({exc})") from None
    return atomic_write(path, lambda fh: torch.save(payload, fh), "the posterior")


def _read_payload(path: Path) -> dict[str, Any]:
    """The unpickled payload of a posterior file (any version), or a PosteriorFileError."""
    if not path.exists():
        raise PosteriorFileError(f"{path}: no such posterior file")
    if path.is_dir():
        raise PosteriorFileError(f"{path} is a folder, not a posterior file")
    if not path.is_file():
        raise PosteriorFileError(f"{path} is not a regular file, so it cannot be a posterior")
    damaged = f"{path}: not a readable posterior file (it is damaged, incomplete or of another kind)"
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        raise PosteriorFileError(damaged) from None
    # float16 weights double when computed with in float32: estimate before unpacking.
    try:
        check_fits(2.0 * unpacked, f"loading {path.name}", "the file is probably damaged")
    except MemoryEstimateError as exc:
        raise PosteriorFileError(str(exc)) from None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # torch raises many types for a damaged archive: all mean the same here
        raise PosteriorFileError(damaged) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise PosteriorFileError(f"{path}: not a bayescope posterior file")
    version = payload.get("format_version")
    # a bool is an int to Python: True would pass for version 1 and be called "format 1"
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise PosteriorFileError(
            f"{path}: the 'format_version' record is invalid ({version!r} is not a version number); "
            "the file is damaged: use another copy or train the posterior again"
        )
    return payload


def _check_records(path: Path, payload: dict[str, Any], need_checksum: bool) -> None:
    wanted = dict(RECORDS, checksum=str) if need_checksum else RECORDS
    for key, kind in wanted.items():
        if key not in payload:
            raise PosteriorFileError(f"{path}: the file lacks its {key!r} record (it is damaged or incomplete)")
        value = payload[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise PosteriorFileError(f"{path}: the {key!r} record is invalid (the file is damaged)")
    for name, t in payload["tensors"].items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise PosteriorFileError(f"{path}: the weights record holds something other than tensors")


def _check_weights(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    if not tensors:
        raise PosteriorFileError(f"{path}: the file holds no weights")
    for name, t in tensors.items():
        if t.dtype not in WEIGHT_DTYPES:
            raise PosteriorFileError(
                f"{path}: weight {name!r} is stored as {str(t.dtype).removeprefix('torch.')}, "
                "not as floating-point numbers; the file is not a valid posterior"
            )
        if not all_finite(t):
            raise PosteriorFileError(f"{path}: weight {name!r} holds NaN or infinite values; the file is not usable")


def all_finite(t: torch.Tensor) -> bool:
    """Whether every number of ``t`` is finite: one float32 sum first, number by number only when
    the sum is not finite.

    A sum is finite only if every number is (a NaN or an infinity makes it NaN or infinite); one
    that is not (a bad number, or finite numbers whose sum overflows) is checked number by number.
    ``torch.isfinite`` on the 6.3 M float16 weights of the bundled HMC took 17 ms warm and 45 ms as
    the first file a launch reads, the sum 3 ms.
    """
    return bool(torch.isfinite(t.sum(dtype=torch.float32))) or bool(torch.isfinite(t).all())


def _validated(path: Path, payload: dict[str, Any], need_checksum: bool) -> tuple[ArchSpec, str, str]:
    """Every check short of building the posterior; returns (arch, kind, method)."""
    from core.engine.inference import METHODS, load_all_methods

    _check_records(path, payload, need_checksum)
    if need_checksum:
        try:
            ok = payload_checksum(payload) == payload["checksum"]
        except (TypeError, ValueError, RuntimeError):
            ok = False
        if not ok:
            raise PosteriorFileError(
                f"{path}: the file is damaged (its contents do not match the checksum written "
                "when it was saved); use another copy or train the posterior again"
            )
    _check_weights(path, payload["tensors"])
    kind, method = payload["kind"], payload["method"]
    if method not in METHODS:
        raise PosteriorFileError(
            f"{path}: unknown inference method {method!r}; this bayescope knows {', '.join(sorted(METHODS))}"
        )
    METHODS[method].load()  # its module registers the kinds it makes; only the methods read are imported
    if kind not in POSTERIOR_KINDS:
        load_all_methods()  # a kind another method's module defines
    if kind not in POSTERIOR_KINDS:
        raise PosteriorFileError(f"{path}: unknown posterior kind {kind!r}")
    if payload["storage"] not in STORAGE_DTYPES:
        raise PosteriorFileError(f"{path}: unknown weight storage {payload['storage']!r}")
    try:
        arch = ArchSpec.from_dict(payload["arch"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PosteriorFileError(f"{path}: invalid architecture record ({exc})") from None
    try:
        check_model_fits(arch, copies=2, what=f"the model of {path.name}")
    except MemoryEstimateError as exc:
        raise PosteriorFileError(str(exc)) from None
    return arch, kind, method


def load_posterior(
    path: str | os.PathLike,
    expect_arch: ArchSpec | None = None,
    expect_method: str | None = None,
    device: torch.device | str | None = None,
) -> Posterior:
    """Load a posterior, checking integrity, format, version, kind, architecture and weights.

    The file is read onto the CPU (``map_location="cpu"``) and built there, then moved to
    ``device`` (None: it stays on the CPU), so a file never depends on where it was saved.

    Raises
    ------
    PosteriorFileError
        With a one-line reason: missing file, not a posterior, damaged (checksum), older or
        newer format, unknown kind or method, weights that are not finite floating-point
        numbers, an architecture out of bounds or too large for memory, or one different
        from what was expected.
    """
    path = Path(path)
    payload = _read_payload(path)
    version = payload.get("format_version")
    if version == 1:
        raise PosteriorFileError(
            f"{path} was written by an older bayescope (format 1, without an integrity "
            f"checksum); upgrade it once with: bayescope-cli upgrade {path}"
        )
    if version != FORMAT_VERSION:
        raise PosteriorFileError(
            f"{path}: posterior format version {version!r} (written by bayescope "
            f"{payload.get('code_version', '?')}); this bayescope reads version {FORMAT_VERSION}"
        )
    arch, kind, method = _validated(path, payload, need_checksum=True)
    if expect_arch is not None and arch != expect_arch:
        raise PosteriorFileError(f"{path}: architecture {arch} differs from the expected {expect_arch}")
    if expect_method is not None and method != expect_method:
        raise PosteriorFileError(f"{path}: method {method!r}, expected {expect_method!r}")
    tensors = {k: v.float() for k, v in payload["tensors"].items()}
    try:
        with on_device(CPU):
            posterior = POSTERIOR_KINDS[kind].from_state(
                method, arch, payload["config"], payload["seed"], payload["dataset"], payload["info"], tensors
            )
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
        raise PosteriorFileError(f"{path}: {exc}") from None
    check_outputs(posterior, str(path))
    return posterior if device is None else posterior.to(device)


def upgrade_posterior_file(path: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Re-save a format-1 posterior file as format 2, its tensors unchanged bit for bit.

    Every check of :func:`load_posterior` except the checksum (version 1 had none) runs
    first, including building the posterior, so only a usable file is upgraded.
    """
    path = Path(path)
    payload = _read_payload(path)
    if payload.get("format_version") == FORMAT_VERSION:
        return path
    if payload.get("format_version") != 1:
        raise PosteriorFileError(f"{path}: format version {payload.get('format_version')!r} cannot be upgraded")
    if "storage" not in payload and isinstance(payload.get("tensors"), dict):
        # the earliest version-1 files predate the record: it is the weights' own dtype
        dtypes = {getattr(t, "dtype", None) for t in payload["tensors"].values()}
        payload["storage"] = "float16" if dtypes == {torch.float16} else "float32"
    arch, kind, method = _validated(path, payload, need_checksum=False)
    tensors = {k: v.float() for k, v in payload["tensors"].items()}
    try:
        POSTERIOR_KINDS[kind].from_state(
            method, arch, payload["config"], payload["seed"], payload["dataset"], payload["info"], tensors
        )
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
        raise PosteriorFileError(f"{path}: {exc}") from None
    payload["format_version"] = FORMAT_VERSION
    payload["upgraded_by"] = code_version()
    payload.pop("checksum", None)
    payload["checksum"] = payload_checksum(payload)
    return atomic_write(out or path, lambda fh: torch.save(payload, fh), "the upgraded posterior")


def add_to_info(path: str | os.PathLike, records: dict[str, Any]) -> Path:
    """Add ``records`` to a posterior file's ``info`` in place, atomically, its weights unchanged.

    Every check of :func:`load_posterior` runs first (only a usable file is touched); the
    file's other records stay as they were, and its checksum is computed anew so that the
    next load verifies the new ``info`` too.
    """
    path = Path(path)
    load_posterior(path)
    payload = _read_payload(path)
    payload["info"] = {**payload["info"], **records}
    payload.pop("checksum", None)
    try:
        payload["checksum"] = payload_checksum(payload)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the records cannot be written into the posterior file ({exc})") from None
    return atomic_write(path, lambda fh: torch.save(payload, fh), "the posterior")


def file_records(path: str | os.PathLike) -> dict[str, Any]:
    """A usable posterior file's records (format, code version, method, config, seed, ``info``
    ...), its weights left out: what ``bayescope-cli info`` reports. Checked as on load."""
    path = Path(path)
    load_posterior(path)
    payload = _read_payload(path)
    records = {k: v for k, v in payload.items() if k != "tensors"}
    records["weights"] = {k: list(v.shape) for k, v in payload["tensors"].items()}
    return records
