"""What every command shares on the terminal: the errors a person can cause, their one-line
message, exit codes, progress bars and checked arguments."""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

import torch

from core.engine.cluster import ClusterError, RayMissingError
from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.data.idx import IdxFormatError
from core.engine.data.preprocess import (
    EmptyDrawingError,
    ImageLoadError,
)
from core.engine.device import DeviceUnavailableError, describe_device, resolve_device
from core.engine.faces.descriptor import DescriptorUnavailableError
from core.engine.files import NotSavedError
from core.engine.inference.base import ProgressRecord
from core.engine.memory import MemoryEstimateError
from core.engine.runner import Terminated, observing
from core.engine.store import PosteriorFileError

if TYPE_CHECKING:
    from core.engine.cluster import RayCluster

USER_ERRORS = (
    DatasetNotFoundError,
    DatasetContentError,
    IdxFormatError,
    ImageLoadError,
    EmptyDrawingError,
    PosteriorFileError,
    MemoryEstimateError,
    NotSavedError,
    FloatingPointError,
    ValueError,
    FileNotFoundError,
    PermissionError,
    OSError,
    DescriptorUnavailableError,
    DeviceUnavailableError,
    RayMissingError,
    ClusterError,
)

#: Seeds index torch generators, which take 64-bit values.
MAX_SEED = 2**63 - 1


def printable(text: object) -> str:
    """``text`` safe for one terminal line: every character that is not printable (escape
    codes, newlines, carriage returns, invisible format characters) is written as Python
    writes it in a string literal (``\\x1b``, ``\\n``, ``\\u202e``).

    File names, folder names and a posterior's records are untrusted: raw, an escape code
    in them can clear the screen or forge an ``error:`` line, and a newline splits the
    one-line error a script reads.
    """
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def say(text: object = "", file: TextIO | None = None) -> None:
    """Print one line on the terminal (stdout, or ``file``), untrusted parts escaped."""
    print(printable(text), file=file)


def parse_settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"setting {pair!r} is not of the form NAME=VALUE")
        out[key] = value
    return out


def progress_bar(total_hint: int, desc: str):
    """A bar on the terminal; a silent one where the run is observed (the window shows its progress)."""
    from tqdm import tqdm

    return tqdm(total=total_hint or None, desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr,
                disable=observing())


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device``: where the work runs (every command that computes takes it)."""
    parser.add_argument("--device", default="auto", metavar="auto|cpu|cuda[:N]|mps",
                        help="where the work runs: auto (a CUDA GPU, else Apple's MPS, else the CPU; "
                             "the default), cpu, cuda (the first GPU), cuda:N or mps")


def chosen_device(args: argparse.Namespace) -> torch.device:
    """The device ``--device`` names, checked to exist here (one sentence if it does not)."""
    return resolve_device(getattr(args, "device", "auto"))


def say_where(action: str, device: torch.device) -> None:
    """``Training on the CPU (2 cores).``: where the work runs, on stderr beside the progress bars."""
    say(f"{action} on {describe_device(device)}.", sys.stderr)


def check_seed(seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"--seed must be a whole number from 0 to 2^63 - 1, got {seed}")


CLUSTER_HELP = ("run the independent parts (chains, ensemble members, slices of the data) as Ray tasks: "
                "'local' (a private Ray on this machine), 'auto' (the cluster RAY_ADDRESS names, or the "
                "head on this machine) or ray://HOST:PORT (a head's Ray Client port); needs "
                "pip install 'bayescope[cluster]'")

_RAY_CLIENT = re.compile(r"^ray://(?P<host>[^:/\s]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")


def check_cluster(address: str | None) -> None:
    """Refuse a ``--cluster`` value other than local, auto or ray://HOST:PORT, and refuse
    ``--cluster`` without Ray installed, before anything is loaded."""
    if address is None:
        return
    match = _RAY_CLIENT.match(address)
    if address not in ("local", "auto") and not (match and 0 < int(match["port"]) < 65536):
        raise ValueError(f"--cluster must be local, auto or ray://HOST:PORT, got {address!r}")
    from core.engine.cluster import require_ray

    require_ray()


@contextlib.contextmanager
def cluster_for(address: str | None, device: str = "cpu") -> Iterator[RayCluster | None]:
    """The cluster ``--cluster`` names, connected for the block (None without the option)."""
    if address is None:
        yield None
        return
    from core.engine.cluster import connected

    with connected(address, device) as cluster:
        yield cluster


def bar_callback(bar):
    def on_progress(record: ProgressRecord) -> None:
        bar.total = record.total
        bar.n = record.step
        bar.set_postfix({k: f"{v:.4g}" for k, v in record.values.items()}, refresh=False)
        bar.refresh()

    return on_progress


def cancel_code(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 128 + the signal's number for SIGTERM (143) or SIGHUP."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def describe_error(exc: BaseException) -> str:
    """One sentence for an error: its own words, or the system's reason and the file."""
    if isinstance(exc, MemoryError):
        return "the computer ran out of memory; use fewer samples or a smaller data set"
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, NotSavedError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror[0].lower()}{exc.strerror[1:]}"
    return str(exc) or "the operation failed"
