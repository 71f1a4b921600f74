"""Where the work runs: the CPU, a CUDA GPU or Apple's MPS, chosen once per run.

A device is named as a person types it (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``) and
resolved by :func:`resolve_device`, which refuses a device this computer does not have with
one sentence (:class:`DeviceUnavailableError`). ``auto`` picks a CUDA GPU, then MPS, then
the CPU.

Work runs on a device inside :func:`on_device`: on a GPU it makes every tensor the code
creates without naming a device land there (torch's device context), and it records the
device for this thread, so that :func:`seeded_generator` makes generators that can draw
there. On the CPU it does nothing, so a CPU run is exactly the run it always was.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Generator, Iterator
from typing import TypeVar

import torch

#: What ``--device`` accepts, in words (the CLI's help and the app's menu say the same).
DEVICE_SPECS = ("auto", "cpu", "cuda", "cuda:N", "mps")

CPU = torch.device("cpu")

T = TypeVar("T")


class DeviceUnavailableError(ValueError):
    """A device was asked for that this computer (or this build of torch) does not have."""


def _cuda_built() -> bool:
    return torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def cuda_count() -> int:
    """How many CUDA GPUs torch can use here (0 on a CPU-only build or without a GPU)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(spec: str) -> torch.device:
    """The device ``spec`` names (``auto|cpu|cuda|cuda:N|mps``), checked to exist here.

    Raises :class:`DeviceUnavailableError` (one sentence naming the case: a CPU-only build
    of torch, no GPU found, an index beyond the GPUs found, no MPS) or ``ValueError`` for a
    name that is not a device.
    """
    text = str(spec).strip().lower()
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if _mps_available():
            return torch.device("mps")
        return CPU
    if text == "cpu":
        return CPU
    if text == "mps":
        if not _mps_available():
            raise DeviceUnavailableError(
                "this computer has no Apple GPU that torch can use (MPS needs a Mac with Apple "
                "silicon and a torch built for it); use --device cpu or auto"
            )
        return torch.device("mps")
    if text == "cuda" or text.startswith("cuda:"):
        index_text = text.partition(":")[2]
        if text.startswith("cuda:") and not index_text.isdigit():
            raise ValueError(f"a CUDA device is named cuda or cuda:N with N a GPU's number from 0, got {spec!r}")
        if not _cuda_built():
            raise DeviceUnavailableError(
                "this computer has no CUDA GPU that torch can use (this torch build is CPU-only); "
                "use --device cpu or auto"
            )
        count = cuda_count()
        if count == 0:
            raise DeviceUnavailableError(
                "this computer has no CUDA GPU that torch can use (no GPU or no working driver "
                "was found); use --device cpu or auto"
            )
        index = int(index_text) if index_text else torch.cuda.current_device()
        if index >= count:
            found = "only cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
            raise DeviceUnavailableError(
                f"there is no CUDA GPU number {index} on this computer: torch finds {count} "
                f"GPU{'s' if count != 1 else ''} ({found}); use one of those, cpu or auto"
            )
        return torch.device("cuda", index)
    raise ValueError(f"--device must be one of auto, cpu, cuda, cuda:N or mps, got {spec!r}")


def cpu_cores() -> int:
    """The CPU cores this process may use (its affinity where the system says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def describe_device(device: torch.device | str) -> str:
    """Where work runs, in words for a status line: ``the CPU (2 cores)``,
    ``NVIDIA H100 (cuda:0)``, ``the Apple GPU (mps)``. On the CPU it names the threads torch
    computes with when they are fewer than the cores (``the CPU (1 thread of its 2 cores)``): a
    process of ``zoo --jobs``, or one started with ``OMP_NUM_THREADS=1``, uses no more."""
    device = torch.device(device)
    if device.type == "cpu":
        cores, threads = cpu_cores(), torch.get_num_threads()
        if threads < cores:
            return f"the CPU ({threads} thread{'s' if threads != 1 else ''} of its {cores} cores)"
        return f"the CPU ({cores} core{'s' if cores != 1 else ''})"
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"{torch.cuda.get_device_name(index)} (cuda:{index})"
    if device.type == "mps":
        return "the Apple GPU (mps)"
    return str(device)


def device_choices() -> list[tuple[str, str]]:
    """The devices a person can pick here, as (setting value, words): Auto, the CPU, each
    CUDA GPU torch finds, and MPS where it works. Only Auto and CPU on a CPU-only torch."""
    auto = describe_device(resolve_device("auto"))
    choices = [("auto", f"Automatic ({auto})"), ("cpu", "CPU")]
    for index in range(cuda_count()):
        choices.append((f"cuda:{index}", describe_device(torch.device("cuda", index))))
    if _mps_available():
        choices.append(("mps", "Apple GPU (MPS)"))
    return choices


def free_device_bytes(device: torch.device) -> int | None:
    """Memory free on a GPU (``torch.cuda.mem_get_info``), or None for the CPU and MPS,
    whose tensors live in the computer's own memory."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return None


# ----------------------------------------------------------------------------- running there

_here = threading.local()


def current_device() -> torch.device:
    """The device this thread's work runs on (the CPU outside :func:`on_device`)."""
    return getattr(_here, "device", CPU)


@contextlib.contextmanager
def on_device(device: torch.device | str | None) -> Iterator[None]:
    """Inside the block, this thread's work runs on ``device`` (None: the CPU).

    Tensors created without a device land on it (torch's device context) and
    :func:`seeded_generator` makes generators there. For the CPU, outside any GPU block,
    nothing is changed.
    """
    device = CPU if device is None else torch.device(device)
    previous = current_device()
    _here.device = device
    try:
        if device.type == "cpu" and previous.type == "cpu":
            yield
        else:
            with device:
                yield
    finally:
        _here.device = previous


def seeded_generator(seed: int, device: torch.device | None = None) -> torch.Generator:
    """A generator seeded with ``seed`` on ``device`` (default: :func:`current_device`).

    A seed reproduces a run on the same device; CPU and CUDA generators produce different
    streams from one seed, so runs on the two agree in distribution, not bit for bit.
    """
    device = current_device() if device is None else torch.device(device)
    if device.type in ("cpu", "meta"):  # meta computes shapes only and draws nothing
        return torch.Generator().manual_seed(int(seed))
    return torch.Generator(device=device).manual_seed(int(seed))


def generator_on(generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """``generator`` if it draws on ``device``; else a generator there seeded by one draw
    from it, so that successive calls with one generator still get fresh randomness."""
    if generator is None or generator.device.type == torch.device(device).type or torch.device(device).type == "meta":
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    return seeded_generator(seed, device)


def steps_on(device: torch.device | str | None, steps: Generator[object, None, T]) -> Generator[object, None, T]:
    """Run a progress generator (a fit) on ``device``: each of its steps inside :func:`on_device`,
    the consumer's code between them outside it."""
    if device is None or torch.device(device).type == "cpu":
        return (yield from steps)
    try:
        while True:
            with on_device(device):
                try:
                    record = next(steps)
                except StopIteration as stop:
                    return stop.value
            yield record
    finally:
        with on_device(device):
            steps.close()


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the CPU, where results are printed, drawn and written."""
    return tensor if tensor.device.type == "cpu" else tensor.cpu()
