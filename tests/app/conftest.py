from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QThreadPool


@pytest.fixture(autouse=True)
def no_worker_outlives_its_test():
    """Workers finish (and are let go) within their test, and garbage is collected in the GUI thread only.

    As in the app (``app.workers.collect_garbage_in_gui_thread``), automatic collection is
    off while a test runs: a collection triggered in a worker thread that frees an earlier
    test's widget deadlocks PySide (it hung CI in an export and a training estimate).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    pool = QThreadPool.globalInstance()
    assert pool.waitForDone(30_000), "a worker thread outlived its test"
    from app.workers import running_workers

    deadline = time.monotonic() + 30
    while running_workers() and time.monotonic() < deadline and QCoreApplication.instance() is not None:
        QCoreApplication.processEvents()  # a finished worker is let go by the GUI thread's event loop
        time.sleep(0.01)
    assert not running_workers(), "a worker (a plain Python thread) outlived its test"
    gc.collect()
    if was_enabled:
        gc.enable()


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path, monkeypatch):
    """Keep the user's data and cache folders out of the tests."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path):
    """QSettings written by a test land in its own folder, never in the user's."""
    from PySide6.QtCore import QSettings

    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(tmp_path / "settings"))
    yield


@pytest.fixture
def window(qtbot, monkeypatch, shared_data):
    """The main window as a first launch opens it (its default columns), data from ../shared/data.
    Modules that need another window define their own ``window``."""
    from app.main import MainWindow

    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_interpreter(tmp_path) -> Callable[..., str]:
    """Run a script in a fresh Python (as a person's launch is: nothing imported yet), off screen,
    with this checkout's code and its own settings, state and cache folders; assert it exited
    with 0 and return the last line it printed."""

    def run(script: str, *args: str, timeout: float = 180) -> str:
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "config"),
               "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
               "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env,
                             timeout=timeout, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.strip().splitlines()[-1]

    return run
