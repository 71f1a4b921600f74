"""The worker wrappers: progress, cancel, error path, torch thread counts (the training dialog: test_training_dialog.py)."""

from __future__ import annotations

import gc
import threading

import pytest
from PySide6.QtWidgets import QWidget

from app.workers import (
    ComputationError,
    collect_garbage_in_gui_thread,
    function_worker,
    generator_worker,
    torch_threads,
)
from core.engine.inference.base import ProgressRecord


def counting(n, fail_at=None):
    for i in range(n):
        if i == fail_at:
            raise RuntimeError(f"boom at step {i}")
        yield ProgressRecord(i + 1, n, {"loss": 1.0 / (i + 1)})
    return "done"


def test_generator_worker_reports_progress_and_result(qtbot):
    worker = generator_worker(counting(5))
    seen = []
    worker.yielded.connect(lambda r: seen.append(r.step))
    with qtbot.waitSignal(worker.returned, timeout=5000) as result:
        worker.start()
    assert result.args == ["done"] and seen == [1, 2, 3, 4, 5]


def test_runtime_error_reaches_errored(qtbot):
    # superqt alone would turn a RuntimeError into a warning; the wrapper must not.
    worker = generator_worker(counting(5, fail_at=2))
    with qtbot.waitSignal(worker.errored, timeout=5000) as error:
        worker.start()
    assert isinstance(error.args[0], ComputationError) and "boom at step 2" in str(error.args[0])


def test_function_worker_error(qtbot):
    def fail():
        raise ValueError("bad input")

    worker = function_worker(fail)
    with qtbot.waitSignal(worker.errored, timeout=5000) as error:
        worker.start()
    assert isinstance(error.args[0], ValueError)


def test_cancel_stops_between_steps_and_closes_the_generator(qtbot):
    closed = []

    def endless():
        try:
            i = 0
            while True:
                i += 1
                yield ProgressRecord(i, 0)
        finally:
            closed.append(True)

    gen = endless()
    worker = generator_worker(gen)
    worker.yielded.connect(lambda r: r.step == 3 and worker.quit())
    with qtbot.waitSignals([worker.aborted, worker.finished], timeout=5000):
        worker.start()
    assert closed == [True]  # closed by the worker's thread, not left to whichever thread frees it


def test_garbage_holding_a_widget_is_collected_in_the_gui_thread(qtbot):
    """A widget kept alive only by a reference cycle is destroyed by the GUI thread's timer,
    never by an automatic collection in whichever worker thread allocates."""
    collector = collect_garbage_in_gui_thread()
    try:
        assert not gc.isenabled()
        destroyed_in: list[str] = []
        widget = QWidget()
        widget.cycle = widget
        widget.destroyed.connect(lambda: destroyed_in.append(threading.current_thread().name))
        del widget
        # Allocations that stay alive (freed ones lower the count again) trip every threshold.
        kept: list = []
        worker = function_worker(lambda: [[] for _ in range(50_000)])
        worker.returned.connect(kept.append)
        with qtbot.waitSignal(worker.finished, timeout=10_000):
            worker.start()
        assert destroyed_in == []  # the worker's allocations collected nothing
        qtbot.waitUntil(lambda: destroyed_in != [], timeout=5_000)
        assert destroyed_in == [threading.main_thread().name]
    finally:
        collector.timer.stop()


def test_a_worker_that_starts_during_a_one_thread_preview_keeps_the_default_thread_count(qtbot, monkeypatch,
                                                                                       request):
    """torch.set_num_threads also sets the count a thread reads when it first runs torch work:
    a pool thread starting then would have kept 1 thread for its life."""
    import torch

    # torch's default of a machine of two cores, whatever this process's is (one thread under
    # pytest-xdist's workers would leave nothing to keep apart)
    default, before = 2, torch.get_num_threads()
    monkeypatch.setattr("app.workers._default_threads", lambda: default)
    torch.set_num_threads(default)
    request.addfinalizer(lambda: torch.set_num_threads(before))
    preview_holds, worker_done = threading.Event(), threading.Event()
    seen = {}

    def preview():
        with torch_threads(1):
            seen["preview"] = torch.get_num_threads()
            preview_holds.set()
            worker_done.wait(10)
        seen["preview after"] = torch.get_num_threads()

    def fresh_thread_work():
        torch.ones(1 << 20).sum()  # the thread's first torch work, while the preview holds 1
        return torch.get_num_threads()

    held = threading.Thread(target=preview)
    held.start()
    assert preview_holds.wait(10)
    plain = threading.Thread(target=lambda: seen.__setitem__("unpinned", fresh_thread_work()))
    plain.start()
    plain.join()

    def pinned_work():
        with torch_threads():
            seen["pinned"] = fresh_thread_work()

    pinned = threading.Thread(target=pinned_work)
    pinned.start()
    pinned.join()
    worker = function_worker(fresh_thread_work)
    with qtbot.waitSignal(worker.returned, timeout=10_000) as result:
        worker.start()
    worker_done.set()
    held.join()
    assert seen["unpinned"] == 1  # the hazard is real: a bare thread would keep 1
    assert seen["pinned"] == default and result.args == [default]  # a worker pins torch's default
    assert seen["preview"] == 1 and seen["preview after"] == default


def endless_records():
    i = 0
    while True:
        i += 1
        yield ProgressRecord(i, 0)


@pytest.mark.parametrize("kind", ["generator", "function", "python generator", "python call"])
def test_a_worker_dropped_by_its_owner_is_freed_in_the_gui_thread(qtbot, kind):
    """A view drops its worker when it cancels or replaces a run. The worker's last reference
    must then go in the GUI thread: freed by its own thread while queued signals to it were
    being delivered, it crashed the window (segfault in libQt6Core) on a cancelled face evaluation."""
    import time
    import weakref

    from app import workers
    from app.workers import PythonThreadCall, PythonThreadGenerator

    freed_in: list[str] = []
    seen: list[int] = []

    def slow_call():
        time.sleep(0.2)
        return 1

    worker = {"generator": lambda: generator_worker(endless_records()),
              "function": lambda: function_worker(slow_call),
              "python generator": lambda: PythonThreadGenerator(endless_records()),
              "python call": lambda: PythonThreadCall(slow_call)}[kind]()
    weakref.finalize(worker, lambda: freed_in.append(threading.current_thread().name))
    if hasattr(worker, "yielded"):
        worker.yielded.connect(lambda record: seen.append(record.step))
    worker.start()
    if hasattr(worker, "yielded"):
        qtbot.waitUntil(lambda: len(seen) > 20, timeout=5000)
    if hasattr(worker, "quit"):
        worker.quit()
    del worker  # what the view does on Cancel
    gc.collect()
    qtbot.waitUntil(lambda: freed_in != [], timeout=10_000)
    assert freed_in == [threading.main_thread().name]
    assert workers.running_workers() == []


def test_a_cancelled_python_thread_generator_closes_its_generator_in_its_own_thread(qtbot):
    from app.workers import PythonThreadGenerator

    closed_in: list[str] = []

    def endless():
        try:
            yield from endless_records()
        finally:
            closed_in.append(threading.current_thread().name)

    worker = PythonThreadGenerator(endless())
    worker.yielded.connect(lambda record: record.step == 5 and worker.quit())
    with qtbot.waitSignal(worker.finished, timeout=5000):
        worker.start()
    assert closed_in == ["bayescope-generator"]


def test_stop_workers_at_quit_ends_every_running_worker_and_closes_its_generator(qtbot):
    from app.workers import PythonThreadGenerator, stop_workers

    closed: list[str] = []

    def endless(name):
        try:
            yield from endless_records()
        finally:
            closed.append(name)

    python_thread = PythonThreadGenerator(endless("python thread"))
    pool = generator_worker(endless("pool"))
    for worker in (python_thread, pool):
        worker.start()
    qtbot.waitUntil(lambda: pool.is_running, timeout=5000)
    assert stop_workers(timeout_s=10)
    assert sorted(closed) == ["pool", "python thread"]
