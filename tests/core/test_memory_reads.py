"""The memory check's reads of the kernel's files (core.engine.memory): what is left under a
container's limit, from cgroup v2 or v1 files, and MemAvailable from /proc/meminfo."""

from __future__ import annotations

import sys

import pytest

from core.engine import memory

V2 = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")
V1 = ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")


def _serve(monkeypatch, files: dict[str, str]) -> list[str]:
    """Answer memory's reads from ``files`` (a missing one raises as the kernel's would) and
    return the list of the paths read."""
    read: list[str] = []

    def fake(path: str, size: int = 4096) -> str:
        read.append(path)
        if path not in files:
            raise FileNotFoundError(path)
        return files[path][:size]

    monkeypatch.setattr(memory, "_read_head", fake)
    return read


def test_the_headroom_under_a_cgroup_v2_limit(monkeypatch):
    _serve(monkeypatch, {V2[0]: "1073741824\n", V2[1]: "268435456\n"})
    assert memory._cgroup_headroom() == 1073741824 - 268435456


def test_a_cgroup_v1_limit_when_there_is_no_v2(monkeypatch):
    _serve(monkeypatch, {V1[0]: "2000000\n", V1[1]: "2500000\n"})
    assert memory._cgroup_headroom() == 0  # over the limit: nothing left, never negative


@pytest.mark.parametrize("limit", ["max\n", f"{(1 << 63) - 4096}\n"])
def test_no_limit_is_no_headroom_and_its_usage_is_not_read(monkeypatch, limit):
    """v2's "max" and v1's near-2^63 both mean no limit: the usage file is then not read."""
    read = _serve(monkeypatch, {V2[0]: limit, V2[1]: "100\n", V1[0]: limit, V1[1]: "100\n"})
    assert memory._cgroup_headroom() is None
    assert V2[1] not in read


def test_available_bytes_is_the_smaller_of_meminfo_and_the_cgroup(monkeypatch):
    meminfo = "MemTotal:       24684092 kB\nMemFree:        10669076 kB\nMemAvailable:   12873044 kB\n"
    _serve(monkeypatch, {"/proc/meminfo": meminfo, V2[0]: "4096000000\n", V2[1]: "96000000\n"})
    assert memory.available_bytes() == 4_000_000_000
    _serve(monkeypatch, {"/proc/meminfo": meminfo})
    assert memory.available_bytes() == 12873044 * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/meminfo")
def test_the_head_read_is_the_file_read_whole(tmp_path):
    """One system call's head is the file's text where the file is shorter (as the kernel's
    files the check reads are), and its first ``size`` bytes where it is longer."""
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 1 kB\nMemAvailable: 2 kB\n")
    assert memory._read_head(str(path)) == path.read_text()
    assert memory._read_head(str(path), 9) == "MemTotal:"
    with open("/proc/meminfo") as whole:
        assert memory._read_head("/proc/meminfo", 512).splitlines()[0] == whole.readline().rstrip("\n")
