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
(``python -m core.io upgrade FILE``), which re-saves their tensors bit for bit.

Loading is one validation layer: file → archive → records → checksum → weights (floating
point, finite) → kind, method and architecture (bounded, and estimated against the free
memory before anything is built) → the posterior. Every failure is a
:class:`PosteriorFileError` with one sentence.

Every file is written through :func:`atomic_write`: serialised in memory, checked against
the free disk space, written to a temporary file beside the target and renamed over it, so
a crash, a signal or a full disk never leaves a half-written file (nor destroys an older
one). Temporary files carry the writer's process id; those of dead processes are swept by
the next save in the same folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import stat
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import torch

from core.inference.base import POSTERIOR_KINDS, Posterior
from core.memory import MemoryEstimateError, check_fits, format_bytes
from core.models import ArchSpec, check_model_fits
from core.runner import signals_raise

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


class NotSavedError(OSError):
    """A file could not be written (full disk, read-only folder ...); nothing was changed."""


def code_version() -> str:
    try:
        from importlib.metadata import version

        return version("bayescope")
    except Exception:  # not installed (running from a source tree)
        return "unknown"


# ----------------------------------------------------------------------------- writing

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}(?P<suffix>\.tmp|\.part|\.partial)$")
#: Temporary files of bayescope 0.1 (``tempfile.mkstemp``: no process id in the name).
_LEGACY_TEMP = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}(?P<suffix>\.tmp)$")
#: A legacy temporary file older than this cannot belong to a save still running.
LEGACY_TEMP_AGE_S = 3600.0
_NO_SPACE = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _temp_name(target: str) -> str:
    return f".{target}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _process_alive(pid: int) -> bool:
    if sys.platform == "win32":  # os.kill(pid, 0) would send Ctrl-C there: assume alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def sweep_stale_temp_files(
    folder: str | os.PathLike, name: str | None = None, suffix: str = ".tmp"
) -> list[Path]:
    """Delete temporary files that our saves (or downloads) left behind when killed.

    A file is ours when its name is ``.<target>.<pid>.<8 hex><suffix>`` (or the older
    ``.<target>.<8 chars>.tmp``, only when over an hour old) and stale when its process is
    gone. ``name`` limits the sweep to one target's files; ``suffix`` is ``.tmp`` for saves,
    ``.part`` for downloads and ``.partial`` for report folders. Returns what was removed.
    """
    removed = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = _TEMP.match(entry.name)
        if match:
            pid = int(match["pid"])
            stale = pid != os.getpid() and not _process_alive(pid)
        else:
            match = _LEGACY_TEMP.match(entry.name)
            if not match:
                continue
            try:
                stale = now - entry.lstat().st_mtime > LEGACY_TEMP_AGE_S
            except OSError:
                continue
        if not stale or match["suffix"] != suffix or (name is not None and match["name"] != name):
            continue
        try:
            mode = entry.lstat().st_mode
            if stat.S_ISREG(mode):
                entry.unlink()
                removed.append(entry)
            elif stat.S_ISDIR(mode) and suffix == ".partial":
                shutil.rmtree(entry)
                removed.append(entry)
        except OSError:
            pass
    return removed


def check_output_file(path: str | os.PathLike, what: str = "the output") -> Path:
    """Refuse, before any work, an output path that cannot take a regular file.

    An existing target must be a regular file (not a folder, device, FIFO or socket, nor a
    link to one); its folder must exist or be creatable, and be writable.
    """
    path = Path(path)
    if path.exists() or path.is_symlink():
        try:
            mode = path.stat().st_mode
        except OSError:
            raise NotSavedError(f"{path} is a broken link; choose another name for {what}") from None
        if stat.S_ISDIR(mode):
            raise NotSavedError(f"{path} is a folder; give a file name for {what}")
        if not stat.S_ISREG(mode):
            raise NotSavedError(
                f"{path} exists and is not a regular file (a device, pipe or socket); "
                f"choose another name for {what}"
            )
    folder = path.parent
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise NotSavedError(f"{existing} is not a folder, so {path} cannot be written")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise NotSavedError(f"cannot write into {existing} (no permission); choose another folder for {what}")
    return path


def atomic_write(
    path: str | os.PathLike, write: Callable[[BinaryIO], Any], what: str | None = None
) -> Path:
    """Write ``path`` atomically: ``write(buffer)`` fills memory, then temp file + rename.

    Serialising first means the size is known (and checked against the free space) before
    the disk is touched, and a writer's own failure can never leave a partial file. A full
    disk raises :class:`NotSavedError` saying how much space was needed; Ctrl-C or SIGTERM
    (in the main thread) leave no temporary file behind.
    """
    path = Path(path)
    what = what or path.name
    check_output_file(path, what)
    buffer = io.BytesIO()
    write(buffer)
    data = buffer.getbuffer()
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NotSavedError(f"cannot create the folder {folder}: {exc.strerror or exc}") from None
    sweep_stale_temp_files(folder, path.name)
    needed = len(data)

    def no_space() -> NotSavedError:
        return NotSavedError(f"no space left on {folder}: {what} was not saved (needs {format_bytes(needed)})")

    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = None  # unknown: the write itself will tell
    if free is not None and free < needed:
        raise no_space()
    tmp = folder / _temp_name(path.name)
    with signals_raise():
        try:
            # O_EXCL: never write through a file (or link) someone else put there; the mode
            # 0o666 is reduced by the umask, as for any ordinary new file.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
                raise no_space() from None
            if isinstance(exc, OSError) and not isinstance(exc, NotSavedError):
                reason = exc.strerror or str(exc)
                raise NotSavedError(f"could not write {path}: {reason}; {what} was not saved") from None
            raise
    _fsync_folder(folder)
    return path


def check_output_folder(
    out: str | os.PathLike, is_ours: Callable[[Path], bool], what: str = "the report"
) -> Path:
    """Refuse, before any work, an output folder that a new report must not replace.

    ``out`` may be new, an empty folder, or a folder ``is_ours`` recognises as an earlier
    output of the same kind (which is replaced as a whole, so no earlier file is left beside
    the new ones); anything else (a file, a folder of other files) is refused.
    """
    out = Path(out).expanduser().absolute()
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise NotSavedError(f"{out} exists and is not a folder; choose a folder for {what}")
    if out.is_dir() and any(out.iterdir()) and not is_ours(out):
        raise NotSavedError(
            f"the folder {out} already holds other files; choose an empty or new folder "
            f"for {what} (only an earlier one of its kind is replaced)"
        )
    existing = out.parent
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise NotSavedError(f"cannot write into {existing}; choose another folder for {what}")
    return out


@contextlib.contextmanager
def replacing_folder(
    out: str | os.PathLike, is_ours: Callable[[Path], bool], what: str = "the report"
) -> Iterator[Path]:
    """Yield a temporary sibling folder to write into; rename it to ``out`` at the end.

    On success an earlier ``out`` (checked by :func:`check_output_folder`) is replaced in
    one rename; on any failure or cancel the temporary folder is removed, so ``out`` holds
    either the old output or the complete new one, never a mixture or a half.
    """
    out = check_output_folder(out, is_ours, what)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NotSavedError(f"cannot create the folder {out.parent}: {exc.strerror or exc}") from None
    sweep_stale_temp_files(out.parent, out.name, suffix=".partial")
    tmp = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.partial"
    os.mkdir(tmp, 0o777)  # the umask applies, as for any ordinary folder
    try:
        with signals_raise():
            yield tmp
            if not out.exists():
                os.rename(tmp, out)
            else:
                old = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.partial"
                os.rename(out, old)
                try:
                    os.rename(tmp, out)
                except BaseException:
                    os.rename(old, out)
                    raise
                shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_folder(out.parent)


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX); best effort elsewhere."""
    if sys.platform == "win32":
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- checksum


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


# ----------------------------------------------------------------------------- save


def save_posterior(posterior: Posterior, path: str | os.PathLike, storage: str = "float32") -> Path:
    """Write ``posterior`` to ``path`` atomically, with its checksum, and return the path.

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


# ----------------------------------------------------------------------------- load


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
        if not torch.isfinite(t).all():
            raise PosteriorFileError(f"{path}: weight {name!r} holds NaN or infinite values; the file is not usable")


def _validated(path: Path, payload: dict[str, Any], need_checksum: bool) -> tuple[ArchSpec, str, str]:
    """Every check short of building the posterior; returns (arch, kind, method)."""
    from core.inference import METHODS  # registers every posterior kind too

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
    if kind not in POSTERIOR_KINDS:
        raise PosteriorFileError(f"{path}: unknown posterior kind {kind!r}")
    if method not in METHODS:
        raise PosteriorFileError(
            f"{path}: unknown inference method {method!r}; this bayescope knows {', '.join(sorted(METHODS))}"
        )
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
) -> Posterior:
    """Load a posterior, checking integrity, format, version, kind, architecture and weights.

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
            f"checksum); upgrade it once with: python -m core.io upgrade {path}"
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
        return POSTERIOR_KINDS[kind].from_state(
            method, arch, payload["config"], payload["seed"], payload["dataset"], payload["info"], tensors
        )
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
        raise PosteriorFileError(f"{path}: {exc}") from None


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


def _main(argv: list[str] | None = None) -> int:
    """``python -m core.io upgrade FILE...``: upgrade format-1 posterior files in place."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "upgrade":
        print("usage: python -m core.io upgrade FILE [FILE ...]", file=sys.stderr)
        return 2
    for name in args[1:]:
        try:
            print(f"{upgrade_posterior_file(name)}: format {FORMAT_VERSION}")
        except (PosteriorFileError, OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main())


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "NotSavedError",
    "PosteriorFileError",
    "atomic_write",
    "check_output_file",
    "check_output_folder",
    "load_posterior",
    "payload_checksum",
    "replacing_folder",
    "save_posterior",
    "sweep_stale_temp_files",
    "upgrade_posterior_file",
]
