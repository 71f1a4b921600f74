"""Drive a ``fit`` generator to its end, headless (the GUI uses a worker thread instead);
record what a fit was trained on; turn termination signals into a clean unwinding.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # types only: the atomic writer leans on this module and stays free of torch
    from core.engine.inference.base import Dataset, Posterior, ProgressRecord
    from core.engine.models import ArchSpec

T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by a signal (SIGTERM, SIGHUP) other than Ctrl-C.

    A subclass of ``KeyboardInterrupt`` so that every ``finally`` and every handler that
    cleans up after a cancel (temporary files, partial downloads) runs for it too.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP raise :class:`Terminated` instead of killing.

    Python only lets the main thread install handlers; elsewhere (a GUI worker) this does
    nothing, and the stale temporary files of a killed save are swept by the next save.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {}
    for signum in wanted:
        try:
            previous[signum] = signal.signal(signum, _raise_terminated)
        except (ValueError, OSError):  # e.g. an embedded interpreter that forbids it
            continue
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def drain(
    generator: Generator[ProgressRecord, None, T],
    on_progress: Callable[[ProgressRecord], None] | None = None,
) -> T:
    """Run ``generator`` to completion, passing each record to ``on_progress``; return its value.

    If ``on_progress`` raises (for example ``KeyboardInterrupt``), the generator is closed so
    its cleanup runs, and the exception propagates.
    """
    try:
        while True:
            record = next(generator)
            if on_progress is not None:
                on_progress(record)
            report(record)
    except StopIteration as stop:
        return stop.value
    finally:
        generator.close()


#: The observer of the function :func:`observed` runs in this thread (none: a command line's own run).
_observing = threading.local()


def observing() -> bool:
    """Whether this thread's work is observed (:func:`observed`): its progress goes there, not to a
    progress bar on the terminal."""
    return getattr(_observing, "observer", None) is not None


def report(item: Any) -> None:
    """Hand ``item`` (a progress record, or a stage a command names) to the observer of this thread's
    work; nothing without one. The observer raises ``KeyboardInterrupt`` once its run is cancelled, so
    that a run stops here as it does on Ctrl-C, and keeps what Ctrl-C keeps."""
    observer = getattr(_observing, "observer", None)
    if observer is not None:
        observer(item)


def observed(func: Callable[..., T], *args: Any) -> Generator[Any, None, T]:
    """``func(*args)`` (a command's run, written for the terminal) as a generator of what it reports.

    ``func`` runs in a thread of its own; every record its :func:`drain` calls pass on and every
    :func:`report` it makes is yielded here, and its return value returned (its exception raised).
    Closing the generator cancels the run as Ctrl-C does: the next report in ``func``'s thread
    raises ``KeyboardInterrupt``, ``func`` unwinds through its own handlers (keeping the files it
    made, as the command line says), and the close waits for it.
    """
    import queue

    items: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
    cancelled = threading.Event()

    def observer(item: Any) -> None:
        if cancelled.is_set():
            raise KeyboardInterrupt
        items.put(("item", item))

    def run() -> None:
        _observing.observer = observer
        try:
            items.put(("returned", func(*args)))
        except BaseException as exc:  # noqa: BLE001 — handed to the generator's consumer, cancels included
            items.put(("raised", exc))
        finally:
            _observing.observer = None

    thread = threading.Thread(target=run, name="bayescope-observed", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "item":
                yield value
            elif kind == "returned":
                return value
            else:
                raise value
    finally:
        cancelled.set()
        thread.join()


@dataclass(frozen=True)
class RemoteTask:
    """One independent part of a run (a chain, an ensemble member, a slice of a data set) that
    an :class:`Executor` may run on another machine.

    ``function(*args)`` is a generator of progress records returning the part's result; it
    must be a module-level function (a worker imports it by name) and its arguments
    picklable, or handles from :meth:`Executor.share`.
    """

    function: Callable[..., Generator[ProgressRecord, None, Any]]
    args: tuple[Any, ...] = ()
    label: str = ""
    gpus: float = 0.0
    kwargs: dict[str, Any] = field(default_factory=dict)


class Executor(Protocol):
    """Runs :class:`RemoteTask` s elsewhere (:class:`core.engine.cluster.RayCluster`)."""

    @property
    def parallelism(self) -> int:
        """How many tasks it runs at once."""
        ...

    def share(self, value: Any) -> Any:
        """A handle to ``value`` copied once to the workers, to pass as a task argument."""
        ...

    def run(self, tasks: Sequence[RemoteTask], phase: str) -> Generator[ProgressRecord, None, list[Any]]:
        """Run every task; yield the progress of all; return their results in order.

        Closing the generator (Ctrl-C) cancels every task still running.
        """
        ...


def fit_posterior(
    method: Any, config: Any, arch: ArchSpec, data: Dataset, seed: int,
    start: Posterior | None = None, start_source: dict[str, Any] | None = None,
    device: Any = None, chains: Sequence[int] | None = None,
) -> Generator[ProgressRecord, None, Posterior]:
    """``method.fit`` (an entry of :data:`core.engine.inference.METHODS`) with its provenance recorded.

    The returned posterior's ``info`` gains ``training_data`` (what was actually read: name,
    folder, files and their SHA-256, the number of images used) and ``train_seconds``, so a
    saved posterior says what it was trained on. The CLI and the GUI both train through here.
    With ``start`` (a MAP posterior), methods that can start from given weights (Laplace, SWAG)
    skip their own MAP training; ``info["started_from"]`` records it and ``start_source``.

    With ``device`` (a ``torch.device``; None: the CPU) the data are moved there and every step
    of the fit runs there (:func:`core.engine.device.steps_on`): the model, its optimiser and
    its generators are made there, and so is the posterior it returns.

    With ``chains``, a method that runs independent chains or members (``method.runs_chains``)
    runs only those (numbers from 0), exactly as they are in the whole run; the parts are
    joined by :func:`core.engine.inference.chain_merge.merge_chains`.
    """
    from core.engine.device import steps_on  # torch: only when a fit runs
    from core.engine.inference.base import check_data_fits

    check_data_fits(arch, data, "the training set")  # before a label beyond the classes fails deep in the loss
    if chains is not None and not method.runs_chains:
        raise ValueError(f"{method.name} does not run independent chains, so it cannot run a subset of them")
    if chains is not None and start is not None:
        raise ValueError("a fit that starts from saved weights runs no chains to choose from")
    began = time.perf_counter()
    if device is not None and device.type != "cpu":
        from core.engine.memory import check_fits

        check_fits(float(data.x.numel() * data.x.element_size() + data.y.numel() * data.y.element_size()),
                   f"the {len(data):,} training examples", "use fewer (--limit)", device)
        data = data.to(device)
    if start is None:
        subset = {} if chains is None else {"chains": chains}
        posterior = yield from steps_on(device, method.fit(config, arch, data, seed, **subset))
    else:
        weights = start_weights(method, start)
        if device is not None:
            weights = {name: tensor.to(device) for name, tensor in weights.items()}
        posterior = yield from steps_on(device, method.fit_from(weights, config, arch, data, seed))
        posterior.info["started_from"] = {"method": start.method, **(start_source or {})}
    posterior.info["training_data"] = {"name": data.name, "images": len(data), **data.source}
    posterior.info["train_seconds"] = round(time.perf_counter() - began, 1)
    return posterior


def start_weights(method: Any, start: Posterior) -> dict[str, Any]:
    """The weights of a one-draw posterior (MAP) to start ``method`` from, checked."""
    if method.fit_from is None:
        raise ValueError(f"{method.name} cannot start from a saved posterior; only methods that "
                         "start from the best weights can (laplace, swag)")
    samples = getattr(start, "samples", None)
    if samples is None or start.fixed_num_samples != 1:
        raise ValueError(f"a {method.name} fit starts from one set of best weights (a MAP posterior); "
                         f"the file holds a {start.method} posterior")
    return {name: tensor[0, 0] for name, tensor in samples.items()}


def fit_part(
    method_name: str, config: Any, arch: ArchSpec, data: Dataset, seed: int,
    chains: Sequence[int] | None = None, start: Posterior | None = None,
    start_source: dict[str, Any] | None = None, device: str = "cpu",
) -> Generator[ProgressRecord, None, Posterior]:
    """One task of :func:`fit_posterior_on`: the chains ``chains`` of the fit (all of it when
    None), on whichever machine runs it, computed on ``device`` there and returned on the CPU."""
    import torch

    from core.engine.inference import get_method

    where = None if device == "cpu" else torch.device(device)
    posterior = yield from fit_posterior(get_method(method_name), config, arch, data, seed, start, start_source,
                                         device=where, chains=chains)
    return posterior if where is None else posterior.to(torch.device("cpu"))


def fit_posterior_on(
    executor: Executor, method: Any, config: Any, arch: ArchSpec, data: Dataset, seed: int,
    start: Posterior | None = None, start_source: dict[str, Any] | None = None, device: str = "cpu",
) -> Generator[ProgressRecord, None, Posterior]:
    """:func:`fit_posterior` with the work on ``executor`` (a Ray cluster).

    A method of independent chains or ensemble members (``method.runs_chains``) runs each
    chain as its own task, drawing from its own stream (``chain_seed(seed, c)``), and the
    parts are joined by :func:`~core.engine.inference.chain_merge.merge_chains`: the samples are
    those of the same fit run here. Any other fit runs whole, as one task. The training set
    is copied to the cluster once. ``device`` is where each task computes: a CUDA task asks
    for one GPU. ``info["cluster"]`` records the address and the number of tasks, and
    ``train_seconds`` the wall-clock time of the whole run.
    """
    from core.engine.inference.base import check_data_fits  # torch: only when a fit runs

    check_data_fits(arch, data, "the training set")
    began = time.perf_counter()
    shared = executor.share(data)
    gpus = 1.0 if str(device).startswith("cuda") else 0.0
    from core.engine.inference.chain_merge import chains_of_run, merge_chains

    count = chains_of_run(config) or 1
    if method.runs_chains and start is None and count > 1:
        word = "member" if hasattr(config, "num_members") else "chain"
        tasks = [RemoteTask(fit_part, (method.name, config, arch, shared, seed, (c,), None, None, str(device)),
                            f"{word} {c + 1}/{count}", gpus=gpus) for c in range(count)]
        parts = yield from executor.run(tasks, f"{method.name}: {count} {word}s on the cluster")
        posterior = merge_chains(parts)
    else:
        task = RemoteTask(fit_part, (method.name, config, arch, shared, seed, None, start, start_source, str(device)),
                          method.name, gpus=gpus)
        (posterior,) = yield from executor.run([task], f"{method.name} on the cluster")
    posterior.info["cluster"] = {"address": getattr(executor, "address", None), "tasks": count}
    posterior.info["train_seconds"] = round(time.perf_counter() - began, 1)
    return posterior

