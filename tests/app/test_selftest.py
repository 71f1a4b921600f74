"""``bayescope --self-test``: its window leaves the person's settings alone, and it starts
worker processes the way the Dataset tab's face extraction does (a packaged build whose
workers cannot start fails it)."""

from __future__ import annotations

import importlib.util
import multiprocessing.spawn
import stat
import sys
from pathlib import Path

import pytest

from app import selftest

ROOT = Path(__file__).resolve().parents[2]


def _descriptor_available() -> bool:
    try:
        from core.engine.faces import get_descriptor

        get_descriptor()
    except Exception:  # noqa: BLE001 — dlib or its models missing
        return False
    return True


needs_descriptor = pytest.mark.skipif(not _descriptor_available(),
                                      reason="the face descriptor (bayescope[faces]) is not installed")


def test_the_self_test_window_leaves_the_persons_settings_alone(qtbot, tmp_path, capsys):
    from app import settings as app_settings

    mine = app_settings.settings()
    mine.setValue("window/geometry", b"my window")
    mine.setValue("workspace/columns", ["/home/me/my-own.pt", "bundled:network_lenet5_sghmc.pt"])
    mine.setValue("sampling/samples", 40)
    mine.sync()
    path = Path(mine.fileName())
    before = path.read_bytes()
    del mine
    results: list[bool] = []
    selftest.check_window(results)
    assert results == [True], capsys.readouterr().out
    assert path.read_bytes() == before
    assert app_settings.settings().fileName() == str(path)  # the user's settings are back in use


@needs_descriptor
def test_the_self_test_extracts_descriptors_in_two_worker_processes(capsys):
    results: list[bool] = []
    selftest.check_face_workers(results)
    out = capsys.readouterr().out
    assert results == [True], out
    assert "ok   extract face descriptors in worker processes (2 worker processes, 2 pictures" in out


@needs_descriptor
def test_the_self_test_fails_when_worker_processes_cannot_start(tmp_path, monkeypatch, capsys):
    """As in a frozen build without ``freeze_support()``: the worker is the app itself, whose
    argument parser refuses multiprocessing's arguments and exits."""
    app_itself = tmp_path / "bayescope"
    app_itself.write_text("#!/bin/sh\necho 'bayescope: error: unrecognized arguments' >&2\nexit 2\n")
    app_itself.chmod(app_itself.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(multiprocessing.spawn, "_python_exe", str(app_itself))
    results: list[bool] = []
    selftest.check_face_workers(results)
    out = capsys.readouterr().out
    assert results == [False]
    assert out.startswith("FAIL extract face descriptors in worker processes:")


def test_the_packaged_launcher_lets_a_worker_process_run_before_anything_else(monkeypatch):
    """``multiprocessing.freeze_support()`` runs first: a worker started with the app's
    executable and multiprocessing's arguments never reaches the app's argument parser."""
    spec = importlib.util.spec_from_file_location("bayescope_launch_freeze", ROOT / "packaging" / "launch.py")
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)
    calls = []

    class WorkerDone(Exception):
        pass

    def freeze_support() -> None:  # what it does in a worker: run it, then exit
        calls.append(list(sys.argv))
        raise WorkerDone

    monkeypatch.setattr(launch.multiprocessing, "freeze_support", freeze_support)
    monkeypatch.setattr(sys, "argv", ["/opt/bayescope/bayescope", "--multiprocessing-fork", "tracker_fd=5", "pipe_handle=7"])
    with pytest.raises(WorkerDone):
        launch.main()
    assert calls == [sys.argv]
