"""A tier's methods trained side by side (``bayescope-cli zoo --jobs N``): N processes of their own.

The methods of a tier are independent runs of ``bayescope-cli train`` (the same arguments, the
same seed, the same file), so on a machine of several cores they can run at once. Each worker is
a fresh Python process (``spawn``: safe beside the window's threads and on every OS, and the
packaged app's launcher answers it with ``multiprocessing.freeze_support``) that keeps running
methods until none is left; it uses its share of the cores (torch's threads divided by N), since a
sampler's memory-bound products gain little from a second thread while a second method gains a
whole core.

The methods are handed out longest first (:attr:`Job.cost`; a longest-processing-time schedule,
within 4/3 of the best one), each as soon as a worker is free and the files it starts from
(:attr:`Job.after`: Laplace and SWAG start from the tier's MAP) are made. What the samplers
compute alike (the mode and the curvature there, :mod:`~core.engine.inference.build_cache`) is
computed by the first worker that needs it and read by the others from a folder of the build.

Each worker's lines and progress come back to the parent, which prints them (one bar a worker,
named after the method it trains) or hands them to its observer (the window), and which alone
writes the tier's records into each finished file. Ctrl-C (or closing an observed build) stops
the workers: a method that finished keeps its file, one that was running leaves none, and the
same command again goes on from there.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seconds between two progress records a worker sends (the rest are dropped: a bar needs no more).
RECORD_EVERY = 0.25
#: Seconds a stopped worker gets to unwind (its temporary files removed) before it is killed.
STOP_WAIT = 10.0


@dataclass(frozen=True)
class Job:
    """One method's ``train`` run within a tier's build."""

    method: str
    argv: tuple[str, ...]  # ``train``'s arguments, its name first
    #: Methods of the same build whose files this one starts from (it waits for them).
    after: tuple[str, ...] = ()
    #: Expected seconds (any unit shared by the build's jobs): the longest are handed out first.
    cost: float = 0.0


@dataclass
class JobCallbacks:
    """What the parent does as the workers report (each called in the parent's thread)."""

    started: Callable[[Job], None]
    record: Callable[[Job, Any], None]
    line: Callable[[Job, str, bool], None]  # (job, text, on stderr)
    #: A job ended with ``code`` (0: its file is made), for a failure words saying why, and the CPU
    #: seconds its worker spent on it.
    finished: Callable[[Job, int, str, float], None]


def train_command(argv: list[str] | tuple[str, ...]) -> int:
    """``bayescope-cli train`` with ``argv`` (its name first), in this process."""
    import argparse

    from core.commands import train

    parser = argparse.ArgumentParser(prog="bayescope-cli train")
    train.add_arguments(parser)
    return train.run(parser.parse_args(list(argv[1:])))


def schedule(jobs: list[Job]) -> list[Job]:
    """``jobs`` longest first (ties in their given order)."""
    return sorted(jobs, key=lambda j: -j.cost)


def run_side_by_side(jobs: list[Job], workers: int, threads: int, store: Path, callbacks: JobCallbacks) -> int:
    """Train ``jobs`` in ``workers`` processes of ``threads`` torch threads each; return 0, or the
    exit code of the first job that failed (the jobs then running are let finish, and no other
    starts). ``store``: a folder for what the jobs share (removed at the end)."""
    from core.engine.inference.build_cache import SharedStore

    context = multiprocessing.get_context("spawn")
    events: Any = context.Queue()
    shared = SharedStore(store, context.Lock())
    waiting = schedule(jobs)
    done: set[str] = set()
    running: dict[int, Job] = {}
    processes: list[Any] = []
    tasks: list[Any] = []
    failure = 0
    try:
        while waiting or running:
            if not failure:
                for slot in range(workers):
                    if slot in running:
                        continue
                    ready = next((j for j in waiting if all(a in done for a in j.after)), None)
                    if ready is None:
                        break
                    if slot >= len(processes):  # started when first needed: a short build spawns fewer
                        tasks.append(context.SimpleQueue())
                        processes.append(context.Process(target=_work, name=f"bayescope-zoo-{slot}",
                                                         args=(slot, tasks[slot], events, threads, shared),
                                                         daemon=True))
                        processes[slot].start()
                    waiting.remove(ready)
                    running[slot] = ready
                    tasks[slot].put((ready.method, ready.argv))
                    callbacks.started(ready)
            if not running:
                if failure or waiting:  # a failure, or jobs waiting for a file that was not made
                    break
                continue
            try:
                kind, slot, *rest = events.get(timeout=0.5)
            except queue.Empty:
                for slot, job in list(running.items()):
                    if not processes[slot].is_alive():  # killed from outside (out of memory, a signal)
                        del running[slot]
                        failure = failure or 1
                        callbacks.finished(job, 1, f"the process training {job.method} stopped "
                                                   f"(exit code {processes[slot].exitcode})", 0.0)
                continue
            job = running.get(slot)
            if job is None:
                continue
            if kind == "record":
                callbacks.record(job, rest[0])
            elif kind == "line":
                callbacks.line(job, rest[0], rest[1])
            elif kind == "finished":
                code, words, cpu = rest
                del running[slot]
                if code == 0:
                    done.add(job.method)
                else:
                    failure = failure or code
                callbacks.finished(job, code, words, cpu)
    except BaseException:
        _stop(processes)
        raise
    finally:
        for q in tasks:
            with contextlib.suppress(OSError, ValueError):
                q.put(None)
        for p in processes:
            p.join(STOP_WAIT)
        _stop(processes)
        events.close()
        shutil.rmtree(store, ignore_errors=True)
    return failure


def _stop(processes: list[Any]) -> None:
    """End the workers still running: SIGTERM first (a worker unwinds as on Ctrl-C, its temporary
    files removed), then, after :data:`STOP_WAIT` seconds, kill."""
    alive = [p for p in processes if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + STOP_WAIT
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


# ------------------------------------------------------------------ the worker (a process of its own)


class _Lines:
    """A text stream that sends each complete line to the parent as an event."""

    def __init__(self, events: Any, slot: int, error: bool) -> None:
        self.events, self.slot, self.error, self.pending = events, slot, error, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if line.strip():
                self.events.put(("line", self.slot, line, self.error))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@dataclass
class _Forwarder:
    """The worker's observer (:func:`core.engine.runner.report`): progress records to the parent,
    at most one every :data:`RECORD_EVERY` seconds (and every last one of a phase)."""

    events: Any
    slot: int
    last: float = field(default=0.0)

    def __call__(self, item: Any) -> None:
        from core.engine.inference.base import ProgressRecord

        if not isinstance(item, ProgressRecord):
            return
        now = time.monotonic()
        if now - self.last >= RECORD_EVERY or item.step == item.total:
            self.last = now
            self.events.put(("record", self.slot, item))


def _work(slot: int, tasks: Any, events: Any, threads: int, shared: Any) -> None:
    """A worker: run the methods the parent hands it until it hands None."""
    # The terminal's Ctrl-C reaches every process of its group: the parent alone answers it and
    # stops the workers with SIGTERM, which unwinds a run as Ctrl-C would (runner.signals_raise).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Lines(events, slot, False), _Lines(events, slot, True)
    try:
        _work_on(slot, tasks, events, threads, shared)
    except KeyboardInterrupt:  # stopped by the parent (Terminated): the run has unwound
        pass
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _work_on(slot: int, tasks: Any, events: Any, threads: int, shared: Any) -> None:
    import torch

    from core.commands.console import USER_ERRORS, describe_error
    from core.engine import runner
    from core.engine.inference.build_cache import shared_within_build

    torch.set_num_threads(threads)
    runner._observing.observer = _Forwarder(events, slot)  # its bars silent, its progress sent on
    with runner.signals_raise(), shared_within_build(shared):
        while (task := tasks.get()) is not None:
            method, argv = task
            cpu = time.process_time()
            try:
                code, words = train_command(argv), ""
            except (*USER_ERRORS, MemoryError) as exc:
                code, words = 2, describe_error(exc)
            events.put(("finished", slot, code, words, time.process_time() - cpu))


def worker_threads(workers: int) -> int:
    """torch threads for each of ``workers`` processes: this process's share, at least one."""
    import torch

    return max(1, torch.get_num_threads() // workers)


def default_workers(methods: int) -> int:
    """Methods trained at a time when ``--jobs`` is not given: two on a machine of two or more cores
    (one core each), one on a single core; never more than the methods."""
    return max(1, min(2, os.cpu_count() or 1, methods))
