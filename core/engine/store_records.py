"""A posterior file's records read without torch: what a column shows before its weights are in.

The window starts in about a second, ``import torch`` alone takes two more; the columns a person
saw last time should not wait for it. A posterior file (:mod:`core.engine.store`) is a zip
archive whose ``data.pkl`` holds every record (method, settings, architecture, ``info``) beside
references to the tensors' bytes. This module unpickles that one entry with every tensor replaced
by its shape, refusing any other object than the few a ``torch.save`` of plain records and
tensors holds (as ``weights_only=True`` does), and builds :class:`PosteriorRecords`: the facts
the column header reads (title, stored draws, chains, convergence records), nothing to predict
with. The weights are read, checked and built later by :func:`core.engine.store.load_posterior`,
which stays the one validation layer: these records are never trusted to predict, and a file
they cannot describe is simply read the slow way. ``tests/core/test_store_records.py`` checks
every bundled file's records and facts against the loaded posterior's.
"""

from __future__ import annotations

import pickle
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The posterior kinds whose drawn-count facts these records can state (see ``fixed_num_samples``).
KNOWN_KINDS = ("sampled", "input_dropout", "dropout", "variational", "laplace")
#: Archives larger than this are not unpickled here (a damaged or foreign file): the slow path says why.
MAX_PICKLE_BYTES = 8 * 2**20


class RecordsUnreadable(ValueError):
    """The file's records cannot be read without torch; :func:`~core.engine.store.load_posterior`
    reads it (and says what is wrong with it, if anything)."""


@dataclass(frozen=True)
class TensorShape:
    """A tensor of the file, its bytes left unread."""

    shape: tuple[int, ...]


@dataclass(frozen=True)
class ArchRecords:
    """The ``arch`` record: the attributes of :class:`~core.engine.models.ArchSpec` the words read."""

    fields: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None


class _Unpickler(pickle.Unpickler):
    """Only what ``torch.save`` writes for a dict of records and tensors; tensors become shapes."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name.endswith("Storage"):
            return name
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a posterior file")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise pickle.UnpicklingError("unknown reference in the archive")
        return None  # the storage's bytes are never read here


def _rebuild_tensor(storage: Any, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *rest: Any) -> TensorShape:
    return TensorShape(tuple(int(n) for n in size))


@dataclass(frozen=True)
class PosteriorRecords:
    """A posterior file's records: the attributes of a :class:`~core.engine.inference.base.Posterior`
    that its column's words read (``method``, ``arch``, ``config``, ``dataset``, ``info``, the
    draws it holds), and no weights. ``ready`` is False: it cannot predict."""

    kind: str
    method: str
    config: dict[str, Any]
    seed: int
    dataset: str
    info: dict[str, Any]
    arch: ArchRecords
    shapes: dict[str, tuple[int, ...]]

    ready = False

    @property
    def num_classes(self) -> int:
        return int(self.arch.num_classes)

    @property
    def _chains_draws(self) -> tuple[int, int] | None:
        if self.kind not in ("sampled", "input_dropout"):
            return None
        (lead,) = {shape[:2] for shape in self.shapes.values()}
        return lead

    def __getattr__(self, name: str) -> Any:
        # num_chains and num_draws exist only where the posterior has them (stored draws):
        # the words ask getattr(posterior, "num_chains", None)
        if name in ("num_chains", "num_draws"):
            lead = self._chains_draws
            if lead is not None:
                return lead[0] if name == "num_chains" else lead[1]
        raise AttributeError(name)

    @property
    def fixed_num_samples(self) -> int | None:
        """As the posterior's: its stored draws; one for a Laplace posterior predicting by the
        probit formula; None where it draws as many as asked."""
        lead = self._chains_draws
        if lead is not None:
            return lead[0] * lead[1]
        if self.kind == "laplace":
            return 1 if self.config["predictive"] == "probit" else None
        return None


def read_records(path: str | Path) -> PosteriorRecords:
    """The records of the posterior file at ``path``, read without torch and without its weights.

    Raises :class:`RecordsUnreadable` for a file whose records cannot be told this way (not a
    version-2 posterior archive, a kind whose draws these records cannot state, anything odd):
    the caller then reads it with :func:`~core.engine.store.load_posterior`.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            entries = [i for i in archive.infolist() if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
            if len(entries) != 1 or entries[0].file_size > MAX_PICKLE_BYTES:
                raise RecordsUnreadable(f"{path}: not a posterior archive")
            payload = _Unpickler(archive.open(entries[0])).load()
    except RecordsUnreadable:
        raise
    except Exception as exc:  # a damaged or foreign file: many kinds of error mean the same here
        raise RecordsUnreadable(f"{path}: {exc}") from None
    try:
        if payload.get("format") != "bayescope-posterior" or payload.get("format_version") != 2:
            raise RecordsUnreadable(f"{path}: not a version-2 posterior file")
        kind = payload["kind"]
        if kind not in KNOWN_KINDS or (kind == "laplace" and "predictive" not in payload["config"]):
            raise RecordsUnreadable(f"{path}: a {kind!r} posterior's draws are told by its weights")
        tensors = payload["tensors"]
        if not tensors or not all(isinstance(t, TensorShape) for t in tensors.values()):
            raise RecordsUnreadable(f"{path}: its weights record is not a set of tensors")
        records = PosteriorRecords(
            kind=kind, method=str(payload["method"]), config=dict(payload["config"]), seed=int(payload["seed"]),
            dataset=str(payload["dataset"]), info=dict(payload["info"]), arch=ArchRecords(dict(payload["arch"])),
            shapes={str(k): t.shape for k, t in tensors.items()})
        if kind in ("sampled", "input_dropout"):
            lead = {shape[:2] for shape in records.shapes.values()}
            if len(lead) != 1 or len(next(iter(lead))) != 2 or min(next(iter(lead))) < 1:
                raise RecordsUnreadable(f"{path}: its draws disagree on (chain, draw)")
        int(records.arch.num_classes)
        return records
    except RecordsUnreadable:
        raise
    except Exception as exc:  # a record of the wrong type: the slow path says which
        raise RecordsUnreadable(f"{path}: {exc}") from None
