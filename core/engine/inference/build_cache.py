"""Work that several methods of one tier's build need alike, done once per build.

A tier trains its methods one after another in one process (``bayescope-cli zoo``), and the
samplers with the curvature metric (HMC, SGLD, SGHMC, D-SGHMC) each began by finding the same
mode θ* of the same training set and building the same P × P curvature there with its two
factorisations: at 8,026 images × 512 features × 10 classes that is 13.5 s of CPU, four times
over (docs/performance.md, "Building a feature tier"). Inside :func:`shared_within_build` a
function decorated with :func:`once_per_build` computes its result once for given inputs and
hands later callers the same result; outside such a block it computes every time, so a single
``train`` and the window keep nothing in memory after they are done.

Only the last result is kept (a new input replaces it), since the P × P matrices are large
(210 MB for 5,130 weights). A build whose methods train side by side in processes of their own
(``zoo --jobs``) shares them through a :class:`SharedStore`, a folder the first process to need
a result writes it into while the others wait on one lock, and they then read it from there. The inputs are identified by value, not by object: each method's
``train`` reads the training set afresh, so its tensors are hashed (about 0.05 s for 16 MB).
A cached result is the one a fresh computation in this process gives (same inputs, same
arithmetic), so a file built with it is the file built without it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: While a :func:`shared_within_build` block runs: {function name: (key, result)}; None outside.
_SHARED: dict[str, tuple[str, Any]] | None = None
#: The store the processes of one build share results through (None: this process alone).
_STORE: SharedStore | None = None
#: Seconds a process waits for another one's result before it computes its own (a peer that died
#: holding the lock must not stop the build; a second computation gives the same result).
LOCK_WAIT_SECONDS = 900.0


@dataclass(frozen=True)
class SharedStore:
    """Where the processes of one build keep what a :func:`once_per_build` function computed:
    ``folder`` holds one file per result, and ``lock`` (a ``multiprocessing`` lock every process
    was given; None: no peer) is held while one of them computes or reads it, so that a result is
    computed once and then read."""

    folder: Path
    lock: Any = None

    def path(self, name: str, key: str) -> Path:
        return self.folder / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.pt"

    @contextmanager
    def held(self) -> Iterator[None]:
        got = self.lock is not None and self.lock.acquire(timeout=LOCK_WAIT_SECONDS)
        try:
            yield
        finally:
            if got:
                self.lock.release()


@contextmanager
def shared_within_build(store: SharedStore | None = None) -> Iterator[None]:
    """Within the block, each :func:`once_per_build` function computes once per input (with
    ``store``, once per input among every process given the same store); the results are dropped
    when the outermost block ends (the store's files are its owner's to remove)."""
    global _SHARED, _STORE
    outer = _SHARED
    if outer is None:
        _SHARED, _STORE = {}, store
    try:
        yield
    finally:
        if outer is None:
            _SHARED, _STORE = None, None


def _stored(name: str, key: str, compute: Callable[[], Generator[Any, None, Any]]) -> Generator[Any, None, Any]:
    """``compute()``'s result for ``key``, read from the build's store when a process put it there,
    else computed and put there (under the store's lock, so the others wait and then read it)."""
    store = _STORE
    if store is None:
        return (yield from compute())
    path = store.path(name, key)
    with store.held():
        if path.is_file():
            # a file this build wrote a moment ago, in a folder of its own: its objects (a
            # DenseMetric with its factors) are the computation's, bit for bit
            return torch.load(path, weights_only=False)
        result = yield from compute()
        store.folder.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")  # renamed whole: a reader never sees half a file
        try:
            torch.save(result, part)
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)
        return result


def fingerprint(value: Any) -> Any:
    """A hashable stand-in for ``value`` that two equal inputs share: a tensor by its dtype,
    shape, device and the SHA-256 of its bytes; containers and dataclass-like objects by their
    parts; anything else by its ``repr``."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        data = t.cpu().contiguous().reshape(-1).view(torch.uint8)  # its bytes, hashed without a copy
        digest = hashlib.sha256(memoryview(data.numpy())).hexdigest()
        return ("tensor", str(t.dtype), tuple(t.shape), str(t.device), digest)
    if isinstance(value, (list, tuple)):
        return tuple(fingerprint(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), fingerprint(v)) for k, v in value.items()))
    if hasattr(value, "to_dict"):
        return json.dumps(value.to_dict(), sort_keys=True, default=repr)
    if hasattr(value, "x") and hasattr(value, "y"):  # a Dataset: what is computed from it reads x and y
        return ("data", fingerprint(value.x), fingerprint(value.y))
    return repr(value)


def once_per_build(
    inputs: Callable[..., Any], copy_result: Callable[[Any], Any],
) -> Callable[[Callable[..., Generator[Any, None, Any]]], Callable[..., Generator[Any, None, Any]]]:
    """Decorate a generator function (it yields progress, then returns its result) so that inside
    :func:`shared_within_build` it runs once per input: ``inputs(*args, **kwargs)`` names what the
    result depends on (not, say, the length a progress bar counts to). A repeated call yields
    nothing and returns ``copy_result(result)``, a copy its caller may change without changing
    the kept one."""

    def decorate(fn: Callable[..., Generator[Any, None, Any]]) -> Callable[..., Generator[Any, None, Any]]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Generator[Any, None, Any]:
            if _SHARED is None:
                return (yield from fn(*args, **kwargs))
            key = repr(fingerprint(inputs(*args, **kwargs)))
            kept = _SHARED.get(fn.__qualname__)
            if kept is not None and kept[0] == key:
                return copy_result(kept[1])
            _SHARED.pop(fn.__qualname__, None)  # the old result's memory goes before the new one is made
            result = yield from _stored(fn.__qualname__, key, lambda: fn(*args, **kwargs))
            if _SHARED is not None:
                _SHARED[fn.__qualname__] = (key, result)
            return copy_result(result)

        return wrapper

    return decorate
