"""Memory estimates in front of allocations a user controls (sample counts, widths, sweeps).

Every size a person types (``--samples``, ``--hidden``, ``--angle-step``, a posterior file's
architecture ...) passes through :func:`check_fits` with an estimate of the bytes it will
allocate, so that what cannot fit is refused with one sentence *before* the allocator is
asked, instead of a 30 GB request ending in a traceback or the out-of-memory killer.
"""

from __future__ import annotations

import os
import sys

#: Share of the available memory one request may use: the process, the GUI and the
#: intermediate copies that a single estimate does not count need the rest.
USABLE_FRACTION = 0.8


class MemoryEstimateError(ValueError):
    """A request would need more memory than this machine has available."""


def _read_head(path: str, size: int = 4096) -> str:
    """The first ``size`` bytes of a small kernel file as text, read with one system call:
    ``Path.read_text`` cost 30-40 µs a file here, and an evaluation of a cheap posterior
    (the face tier's MAP: a forward pass of 0.6-0.8 ms) reads four of them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, size).decode("ascii", "replace")
    finally:
        os.close(fd)


def _cgroup_headroom() -> int | None:
    """Bytes left under a cgroup v2/v1 memory limit (containers), or None without one."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit_text = _read_head(limit_file).strip()
            if limit_text == "max" or int(limit_text) >= 1 << 60:
                return None  # no limit: its usage need not be read
            usage = int(_read_head(usage_file).strip())
        except (OSError, ValueError):
            continue
        return max(int(limit_text) - usage, 0)
    return None


def available_bytes() -> int:
    """Memory this process can still obtain without swapping (best estimate per platform)."""
    found: list[int] = []
    try:
        for line in _read_head("/proc/meminfo", 512).splitlines():  # MemAvailable is its third line
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
                break
    except (OSError, ValueError, IndexError):
        pass
    headroom = _cgroup_headroom()
    if headroom is not None:
        found.append(headroom)
    if not found and sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import ctypes

        class _Status(ctypes.Structure):
            _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong),
                        ("total_phys", ctypes.c_ulonglong), ("avail_phys", ctypes.c_ulonglong),
                        ("total_page", ctypes.c_ulonglong), ("avail_page", ctypes.c_ulonglong),
                        ("total_virtual", ctypes.c_ulonglong), ("avail_virtual", ctypes.c_ulonglong),
                        ("avail_extended", ctypes.c_ulonglong)]

        status = _Status()
        status.length = ctypes.sizeof(_Status)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
            found.append(int(status.avail_phys))
    if not found:
        try:  # macOS and other Unix: total physical memory is the best cheap bound
            found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            found.append(8 << 30)
    return min(found)


def format_bytes(n: float) -> str:
    """``1536 → '1.5 kB'``, decimal units as file managers show them."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000.0
    raise AssertionError("unreachable")


def device_free_bytes(device: object) -> int | None:
    """Free memory of a CUDA GPU (``torch.cuda.mem_get_info``), or None for the CPU and
    MPS, whose tensors live in the computer's own memory. Imports torch only for a GPU."""
    if device is None or getattr(device, "type", str(device).partition(":")[0]) != "cuda":
        return None
    from core.engine.device import free_device_bytes

    return free_device_bytes(device)


def check_fits(nbytes: float, what: str, advice: str, device: object = None) -> None:
    """Raise :class:`MemoryEstimateError` unless ``nbytes`` fits in the usable memory.

    ``what`` names the request ("100000 samples of this posterior") and ``advice`` says what
    to change ("use fewer samples"); both end up in the one-line message. With a CUDA
    ``device`` the request is weighed against the GPU's free memory instead.
    """
    gpu_free = device_free_bytes(device)
    if gpu_free is not None:
        from core.engine.device import describe_device

        available = gpu_free * USABLE_FRACTION
        if nbytes > available:
            raise MemoryEstimateError(
                f"{what} would need about {format_bytes(nbytes)} of memory on {describe_device(device)}, "
                f"but only {format_bytes(available)} is free there; {advice}, or use --device cpu"
            )
        return
    available = available_bytes() * USABLE_FRACTION
    if nbytes > available:
        raise MemoryEstimateError(
            f"{what} would need about {format_bytes(nbytes)} of memory, but only "
            f"{format_bytes(available)} is available; {advice}"
        )
