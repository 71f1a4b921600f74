"""Background work: core generators and functions run in superqt worker threads.

superqt reports a ``RuntimeError`` raised in a worker only as a warning (it takes it for a
deleted Qt object), so errors are re-raised as :class:`ComputationError` to reach the
``errored`` signal and the dialog that shows them.

Every worker made here is kept alive by this module from ``start()`` until its thread is
done with it and its ``finished`` signal has reached the GUI thread (:func:`running_workers`).
A view may drop its reference at once when it cancels or replaces a run: the worker's
signal object is then freed by the GUI thread, never by the worker's own thread while
queued signals to it are still being delivered (that crashed the window in libQt6Core when
a long face evaluation was cancelled).
"""

from __future__ import annotations

import gc
import sys
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

import shiboken6
from PySide6.QtCore import QObject, QThreadPool, QTimer, Signal

if TYPE_CHECKING:  # imported when the first worker is made: see worker_classes
    from superqt.utils import FunctionWorker, GeneratorWorker

#: Workers started and not yet released (see the module's docstring).
_RUNNING: set[object] = set()
#: Milliseconds between looks at whether a finished worker's thread has let go of it.
RELEASE_RETRY_MS = 20


def collect_garbage_in_gui_thread() -> object:
    """Turn Python's automatic cyclic garbage collection off and run it on a timer in the
    GUI thread instead (pyqtgraph's ``GarbageCollector``); keep the returned object alive.

    Automatic collection runs in whichever thread happens to allocate when a threshold trips.
    When that is a worker thread and the garbage holds a widget (a closed dialog, an old
    column), the widget is destroyed in the worker and PySide blocks forever waiting for
    the interpreter lock: seen as a hung export, evaluation or training estimate. Call it
    once, after the ``QApplication`` exists.
    """
    from pyqtgraph.util.garbage_collector import GarbageCollector

    return GarbageCollector(interval=1.0)


_FROZEN = [False]


def freeze_long_lived() -> bool:
    """Put every object alive now out of the cyclic collector's sight, once per process (True
    the first time): call it when the window, the engine and the first posteriors are in.

    Those objects (torch, Qt's wrappers, the weights: about 220,000 tracked objects) live until
    the window closes, but every full collection walked them all: a generation-2 collection
    took 305 ms on the window's thread, a generation-1 one 6–8 ms (3 in 80 updates of
    ``bench_gui.py``'s strokes), each landing on whichever update allocated past the threshold.
    Frozen, the same collections took 0.9 ms. Objects made later are collected as before;
    garbage cycles among the frozen objects stay (they were made once, at start-up).
    """
    if _FROZEN[0]:
        return False
    gc.freeze()
    _FROZEN[0] = True
    return True


class ComputationError(Exception):
    """A RuntimeError (out of memory, shape mismatch ...) raised by engine code."""


@cache
def _default_threads() -> int:
    """torch's own intra-op thread count for this machine, read on the first call (the
    start-up load, before any count is changed)."""
    import torch

    return torch.get_num_threads()


@contextmanager
def torch_threads(count: int | None = None) -> Iterator[None]:
    """This thread's torch work on ``count`` intra-op threads (``None``: torch's default),
    and back on the default afterwards.

    ``torch.set_num_threads`` sets the calling thread's count and also the count that a
    thread reads when it first runs torch work. A pool thread that first ran torch work while
    a preview held 1 would keep 1 for its whole life, so every worker's function runs in
    here (``function_worker``, ``generator_worker``); asking for the count first makes the
    thread's first read happen before its count is set.
    """
    torch = sys.modules.get("torch")
    if torch is None:  # nothing of torch has run in this process: no count to keep
        yield
        return
    default = _default_threads()
    torch.get_num_threads()
    torch.set_num_threads(count or default)
    try:
        yield
    finally:
        torch.set_num_threads(default)


def _guarded(gen: Generator) -> Generator:
    try:
        with torch_threads():
            return (yield from gen)
    except RuntimeError as exc:
        raise ComputationError(str(exc)) from exc


def _guarded_call(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        with torch_threads():
            return func(*args, **kwargs)
    except RuntimeError as exc:
        raise ComputationError(str(exc)) from exc


def running_workers() -> list[object]:
    """The workers started here whose threads have not yet been released."""
    return list(_RUNNING)


def stop_workers(timeout_s: float = 10.0) -> bool:
    """Ask every running worker to stop and wait up to ``timeout_s`` for their threads; True
    when all have ended. Called when the app quits: a face description's worker processes
    would otherwise go on describing every face before the process could exit."""
    deadline = time.monotonic() + timeout_s
    running = list(_RUNNING)
    for worker in running:
        if hasattr(worker, "quit"):
            worker.quit()
    threads = [w._thread for w in running if isinstance(w, PythonThreadCall | PythonThreadGenerator)]
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    pool_done = QThreadPool.globalInstance().waitForDone(int(max(0.0, deadline - time.monotonic()) * 1000))
    return pool_done and not any(thread.is_alive() for thread in threads)


def _keep_until_released(worker: Any, thread_done: Callable[[Any], bool]) -> None:
    """Hold ``worker`` from now until its ``finished`` signal has reached the GUI thread and
    ``thread_done(worker)`` says its thread no longer touches it; the last reference then
    goes in the GUI thread, a turn of the event loop after its last signal was delivered."""
    _RUNNING.add(worker)
    ref = weakref.ref(worker)  # a strong one in the slot would keep the worker alive for ever

    def release() -> None:
        held = ref()
        if held is None:
            return
        if thread_done(held):
            _RUNNING.discard(held)
        else:
            QTimer.singleShot(RELEASE_RETRY_MS, release)

    worker.finished.connect(lambda: QTimer.singleShot(0, release))


def _pool_let_go(worker: Any) -> bool:
    # the pool deletes a finished runnable (autoDelete) in its own thread; only then is it done
    return not shiboken6.isValid(worker)


@cache
def worker_classes() -> tuple[type[GeneratorWorker], type[FunctionWorker]]:
    """superqt's generator and function workers as used here, made on first use: importing
    superqt imports every widget it has (through qtpy, QtOpenGL too), 0.13–0.2 s of processor
    time that the window need not wait for at launch (the launcher makes them once the engine
    is loaded, before the first prediction asks for a worker)."""
    from superqt.utils import FunctionWorker, GeneratorWorker

    class _GeneratorWorker(GeneratorWorker):
        """superqt's generator worker, closing the generator in its own thread when it stops
        (superqt leaves a cancelled one open, to be closed by whichever thread frees it)."""

        def work(self) -> Any:
            try:
                return super().work()
            finally:
                self._gen.close()

        def start(self) -> None:
            _keep_until_released(self, _pool_let_go)
            super().start()

    class _FunctionWorker(FunctionWorker):
        def start(self) -> None:
            _keep_until_released(self, _pool_let_go)
            super().start()

    return _GeneratorWorker, _FunctionWorker


def generator_worker(gen: Generator) -> GeneratorWorker:
    """A not-yet-started worker iterating ``gen``; ``quit()`` cancels between steps and closes
    ``gen`` in the worker's thread.

    Errors go to ``errored`` only: connect it (superqt would otherwise re-raise them).
    """
    return worker_classes()[0](_guarded, gen)


def function_worker(func: Callable[..., Any], *args: Any, **kwargs: Any) -> FunctionWorker:
    """A not-yet-started worker calling ``func(*args, **kwargs)`` once."""
    return worker_classes()[1](_guarded_call, func, *args, **kwargs)


def _thread_ended(worker: PythonThreadCall | PythonThreadGenerator) -> bool:
    return not worker._thread.is_alive()


class PythonThreadCall(QObject):
    """``func(*args)`` in a plain Python thread, reported through Qt signals (queued to the
    main thread), for code that must not run in a Qt pool thread.

    dlib's face descriptor network never returns when called from a ``QThreadPool`` thread
    (reproduced with a bare pool and no torch); from a ``threading.Thread`` it takes 0.1 s.

    Signals: ``returned(object)``, ``errored(object)``, ``finished()``.
    """

    returned = Signal(object)
    errored = Signal(object)
    finished = Signal()

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        super().__init__()
        self._thread = threading.Thread(target=self._run, args=(func, args), daemon=True)

    def _run(self, func: Callable[..., Any], args: tuple) -> None:
        try:
            self.returned.emit(_guarded_call(func, *args))
        except Exception as exc:  # noqa: BLE001 — every failure reaches the errored signal
            self.errored.emit(exc)
        finally:
            self.finished.emit()

    def start(self) -> None:
        _keep_until_released(self, _thread_ended)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


class PythonThreadGenerator(QObject):
    """A core generator iterated in a plain Python thread (see :class:`PythonThreadCall`), with
    superqt's worker signals; errors are converted as in :func:`generator_worker`.

    For work that may call dlib (the faces test split may have to describe faces first).
    ``quit()`` closes the generator at its next record.

    Signals: ``yielded(object)``, ``returned(object)``, ``errored(object)``, ``finished()``.
    """

    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(object)
    finished = Signal()

    def __init__(self, gen: Generator) -> None:
        super().__init__()
        self._gen = _guarded(gen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bayescope-generator", daemon=True)

    def start(self) -> None:
        _keep_until_released(self, _thread_ended)
        self._thread.start()

    def quit(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    record = next(self._gen)
                except StopIteration as stop:
                    self.returned.emit(stop.value)
                    return
                self.yielded.emit(record)
        except Exception as exc:  # noqa: BLE001 — every failure reaches the errored signal
            self.errored.emit(exc)
        finally:
            self._gen.close()  # closes the core generator too: a cancelled extraction stops its processes
            self.finished.emit()
