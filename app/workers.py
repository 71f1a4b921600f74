"""Background work: core generators and functions run in superqt worker threads.

superqt reports a ``RuntimeError`` raised in a worker only as a warning (it takes it for a
deleted Qt object), so errors are re-raised as :class:`ComputationError` to reach the
``errored`` signal and the dialog that shows them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import Any

from PySide6.QtCore import QObject, Signal
from superqt.utils import FunctionWorker, GeneratorWorker, create_worker


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


class ComputationError(Exception):
    """A RuntimeError (out of memory, shape mismatch ...) raised by engine code."""


def _guarded(gen: Generator) -> Generator:
    try:
        return (yield from gen)
    except RuntimeError as exc:
        raise ComputationError(str(exc)) from exc


def _guarded_call(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except RuntimeError as exc:
        raise ComputationError(str(exc)) from exc


def generator_worker(gen: Generator) -> GeneratorWorker:
    """A not-yet-started worker iterating ``gen``; ``quit()`` cancels between steps.

    Errors go to ``errored`` only: connect it (superqt would otherwise re-raise them).
    """
    return create_worker(_guarded, gen, _start_thread=False, _ignore_errors=True)


def function_worker(func: Callable[..., Any], *args: Any, **kwargs: Any) -> FunctionWorker:
    """A not-yet-started worker calling ``func(*args, **kwargs)`` once."""
    return create_worker(_guarded_call, func, *args, _start_thread=False, _ignore_errors=True, **kwargs)


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
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
