"""Saving and loading posteriors, atomically, with their provenance checked on load.

A posterior file is a ``torch.save`` archive (loaded with ``weights_only=True``) holding::

    {"format": "bayescope-posterior", "format_version": 1, "code_version": "0.1.0",
     "kind": "sampled" | "dropout" | ..., "method": "mc_dropout", "config": {...},
     "seed": 0, "arch": {...}, "dataset": "mnist", "info": {...}, "tensors": {...}}

It is written to a temporary file in the same folder and renamed over the target, so a
crash or a full disk never leaves a half-written posterior (nor destroys an older one).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from core.inference.base import POSTERIOR_KINDS, Posterior
from core.models import ArchSpec

FORMAT = "bayescope-posterior"
FORMAT_VERSION = 1


class PosteriorFileError(ValueError):
    """A posterior file that cannot be used, with the reason in words."""


def code_version() -> str:
    try:
        from importlib.metadata import version

        return version("bayescope")
    except Exception:  # not installed (running from a source tree)
        return "unknown"


def atomic_write(path: str | os.PathLike, write: Any) -> Path:
    """Call ``write(file_object)`` on a temporary file beside ``path``, then rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16}


def save_posterior(posterior: Posterior, path: str | os.PathLike, storage: str = "float32") -> Path:
    """Write ``posterior`` to ``path`` atomically and return the path.

    ``storage="float16"`` halves the file (bundled posteriors); tensors are computed with
    in float32 again after loading.
    """
    if storage not in STORAGE_DTYPES:
        raise ValueError(f"storage must be one of {sorted(STORAGE_DTYPES)}, got {storage!r}")
    dtype = STORAGE_DTYPES[storage]

    def stored(t: torch.Tensor) -> torch.Tensor:
        t = t.detach().cpu().contiguous()
        return t.to(dtype) if t.is_floating_point() else t

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
        "tensors": {k: stored(v) for k, v in posterior.state_tensors().items()},
    }
    return atomic_write(path, lambda fh: torch.save(payload, fh))


def load_posterior(
    path: str | os.PathLike,
    expect_arch: ArchSpec | None = None,
    expect_method: str | None = None,
) -> Posterior:
    """Load a posterior, checking format, version, kind, architecture and weights.

    Raises
    ------
    PosteriorFileError
        With a one-line reason: missing file, not a posterior, newer format, unknown kind,
        a different architecture or method than expected, or weights that do not fit.
    """
    path = Path(path)
    if not path.is_file():
        raise PosteriorFileError(f"{path}: no such posterior file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise PosteriorFileError(f"{path}: not a readable posterior file ({exc.__class__.__name__})") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise PosteriorFileError(f"{path}: not a bayescope posterior file")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise PosteriorFileError(
            f"{path}: posterior format version {version} (written by bayescope "
            f"{payload.get('code_version', '?')}); this bayescope reads version {FORMAT_VERSION}"
        )
    kind = payload.get("kind")
    if kind not in POSTERIOR_KINDS:
        raise PosteriorFileError(f"{path}: unknown posterior kind {kind!r}")
    try:
        arch = ArchSpec.from_dict(payload["arch"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PosteriorFileError(f"{path}: invalid architecture record ({exc})") from exc
    if expect_arch is not None and arch != expect_arch:
        raise PosteriorFileError(f"{path}: architecture {arch} differs from the expected {expect_arch}")
    method = payload.get("method")
    if expect_method is not None and method != expect_method:
        raise PosteriorFileError(f"{path}: method {method!r}, expected {expect_method!r}")
    tensors = payload.get("tensors")
    if not isinstance(tensors, dict):
        raise PosteriorFileError(f"{path}: the file holds no weights")
    tensors = {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}
    try:
        return POSTERIOR_KINDS[kind].from_state(
            method,
            arch,
            payload["config"],
            payload["seed"],
            payload["dataset"],
            payload.get("info", {}),
            tensors,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PosteriorFileError(f"{path}: {exc}") from exc
