"""A posterior's conformal calibration, kept in a sidecar file beside it.

``paper_softmax_hmc.pt`` → ``paper_softmax_hmc.conformal.json``. A sidecar, not a field of the
posterior file, because a calibration is made after training, from images training never saw,
and can be remade (another split, more draws) without touching the posterior, whose own
SHA-256 the sidecar records: a sidecar whose posterior has changed is refused on reading.

It records what a person needs to trust the guarantee: the data set's files (SHA-256), the
rule that chose the calibration images among them and the images' identities (48-bit
fingerprints of their pixels, :func:`core.engine.data.split.pack_fingerprints`), the check that
none of them is a training image, the draws and seed of the predictive, and the sorted
calibration scores of each nonconformity score, from which the quantile q̂ of any level follows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import platformdirs

from core.engine.files import atomic_write, file_sha256, strict_json

#: What the sidecar says it is.
FORMAT = "bayescope conformal calibration"
#: Its format version.
VERSION = 1
#: The sidecar's suffix, in place of the posterior's ``.pt``.
SUFFIX = ".conformal.json"


class CalibrationFileError(ValueError):
    """A sidecar that cannot be used (another posterior's, another version, unreadable): one sentence."""


def sidecar_path(posterior_path: str | os.PathLike) -> Path:
    """Where the calibration of the posterior at ``posterior_path`` lives."""
    path = Path(posterior_path)
    return path.with_name(path.stem + SUFFIX)


def user_sidecar_path(posterior_path: str | os.PathLike, sha256: str) -> Path:
    """Where the calibration lives when the posterior's own folder cannot take it (the bundled
    posteriors of an installed app, a read-only share): the user's data folder, named by the
    file's name and the start of its SHA-256, so that two files of one name never share it."""
    path = Path(posterior_path)
    return Path(platformdirs.user_data_dir("bayescope")) / "calibrations" / f"{path.stem}-{sha256[:16]}{SUFFIX}"


def _folder_writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK)


def write_calibration(posterior_path: str | os.PathLike, record: dict[str, Any],
                      target: str | os.PathLike | None = None) -> Path:
    """Write ``record`` (scores, identity) as the sidecar of ``posterior_path`` (or at ``target``),
    atomically, stamped with the format, version and the posterior file's SHA-256: beside the
    posterior, or in the user's data folder (:func:`user_sidecar_path`) when its folder cannot
    be written. Returns the file written."""
    sha256 = file_sha256(posterior_path)
    full = {"format": FORMAT, "version": VERSION, "posterior_file": Path(posterior_path).name,
            "posterior_file_sha256": sha256, **record}
    text = strict_json(full, indent=1).encode("utf-8")
    if target is None:
        beside = sidecar_path(posterior_path)
        target = beside if _folder_writable(beside.parent) else user_sidecar_path(posterior_path, sha256)
    return atomic_write(target, lambda fh: fh.write(text), "the conformal calibration")


def read_calibration(posterior_path: str | os.PathLike, sha256: str | None = None) -> dict[str, Any] | None:
    """The sidecar of ``posterior_path``, beside it or else in the user's data folder
    (:func:`user_sidecar_path`); None when there is none.

    Raises :class:`CalibrationFileError` when it is unreadable, of another format or version, or
    made for another posterior file (its SHA-256, ``sha256`` when already known, differs).
    """
    path = sidecar_path(posterior_path)
    if not path.is_file():
        sha256 = sha256 or file_sha256(posterior_path)
        path = user_sidecar_path(posterior_path, sha256)
        if not path.is_file():
            return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CalibrationFileError(f"the conformal calibration of {Path(posterior_path).name} cannot be "
                                   f"read ({exc}); {AGAIN}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CalibrationFileError(f"{path.name} is not a conformal calibration")
    if record.get("version") != VERSION:
        raise CalibrationFileError(f"{path.name} was written in format {record.get('version')}, this version "
                                   f"reads {VERSION}; {AGAIN}")
    own = sha256 or file_sha256(posterior_path)
    if record.get("posterior_file_sha256") != own:
        raise CalibrationFileError(f"{path.name} calibrates another version of {Path(posterior_path).name} "
                                   f"(the posterior file has changed since); {AGAIN}")
    return record


#: The remedy every refused calibration names: the window's column menu and the command line
#: both call it "calibrate".
AGAIN = "calibrate it again"


def how_to_calibrate(posterior_path: str | os.PathLike, test_set: str | None = None) -> str:
    """One line saying how to get a calibration for a posterior that has none (``test_set``: the
    ``--dataset`` to name when it is not MNIST's test set)."""
    extra = f" --dataset {test_set}" if test_set else ""
    return f"No conformal set yet: run bayescope-cli calibrate --posterior {Path(posterior_path).name}{extra}"


__all__ = ["AGAIN", "FORMAT", "SUFFIX", "VERSION", "CalibrationFileError", "how_to_calibrate", "read_calibration",
           "sidecar_path", "user_sidecar_path", "write_calibration"]
