"""Drive a ``fit`` generator to its end, headless (the GUI uses a worker thread instead)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TypeVar

from core.inference.base import ProgressRecord

T = TypeVar("T")


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
    except StopIteration as stop:
        return stop.value
    finally:
        generator.close()
