"""Every file bayescope writes goes through here: atomically, with the disk's space checked.

:func:`atomic_write` serialises in memory, checks the free disk space, writes a temporary file
beside the target and renames it over the target, so a crash, a signal or a full disk never
leaves a half-written file (nor destroys an older one). Temporary files carry the writer's
process id; those of dead processes are swept by the next save in the same folder.
:func:`replacing_folder` does the same for a whole folder of results.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import re
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from core.engine.memory import format_bytes
from core.engine.runner import signals_raise


class NotSavedError(OSError):
    """A file could not be written (full disk, read-only folder ...); nothing was changed."""


def code_version() -> str:
    try:
        from importlib.metadata import version

        return version("bayescope")
    except Exception:  # not installed (running from a source tree)
        return "unknown"


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
    (in the main thread) leave no temporary file behind. A ``path`` that is a symbolic link
    is written through: its target gets the new content, the link stays a link.
    """
    given = path = Path(path)
    what = what or path.name
    check_output_file(path, what)
    if path.is_symlink():
        # write through the link: renaming over it would replace the link with a file and
        # leave its target (the file the person meant) as it was
        path = Path(os.path.realpath(path))
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
    return given


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
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, NotSavedError) and str(tmp) in str(exc):
            # the person chose `out`, never the hidden stand-in: name the folder they know
            raise NotSavedError(str(exc).replace(str(tmp), str(out))) from None
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


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _plain(value: Any) -> Any:
    """``value`` as plain JSON types: non-finite floats → None, numpy/torch values → numbers
    and lists, mapping keys → text, anything else (a path) → its text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy scalars and arrays, tensors
        return _plain(value.tolist())
    return str(value)


def strict_json(value: Any, indent: int | None = None) -> str:
    """The one JSON writer: text any strict parser reads.

    JSON has no NaN or infinity (``json.dumps`` would write bare ``NaN``, which browsers,
    ``jq`` and most languages refuse), so they become ``null``; numpy and torch values become
    plain numbers and lists, and anything else (a path) its text.
    """
    return json.dumps(_plain(value), indent=indent, allow_nan=False)
