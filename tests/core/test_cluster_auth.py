"""docs/scale.md's cluster recipe works from any prior state of the machine (issue 44, item 19).

Ray's own ``ray.init()`` of a private instance (``--cluster local``) wrote ``~/.ray/auth_token``;
``ray start --head`` then turned token authentication on, the second node could not join, and
``--cluster auto`` said "no running Ray cluster was found" beside a running head. Here every Ray
runs with a home folder of its own (``HOME`` in tmp), so the machine's ``~/.ray`` is never read or
written, and the cluster is a head and a second node on 127.0.0.1 only (test_cluster.py's
:class:`LoopbackCluster`, stopped by the ids of its own processes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cluster import HAS_RAY, LOOPBACK_RAY, SGLD, LoopbackCluster

pytestmark = pytest.mark.usefixtures("one_ray_at_a_time")  # tests/conftest.py

needs_ray = pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (pip install 'bayescope[cluster]')")

ROOT = Path(__file__).resolve().parents[2]


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment with a home of its own and no authentication setting of Ray's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return {**env, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT), **extra}


def _train(tiny_mnist: Path, out: Path, cluster: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.commands.main", "train", "--data-dir", str(tiny_mnist), *SGLD,
                           "--set", "epochs=2", "--set", "batch_size=50", "--out", str(out), "--cluster", cluster],
                          env=env, capture_output=True, text=True, timeout=300)


@needs_ray
def test_a_local_run_leaves_no_token_behind(tiny_mnist, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    done = _train(tiny_mnist, tmp_path / "p.pt", "local", _env(home))
    assert done.returncode == 0, done.stderr[-800:]
    assert not (home / ".ray" / "auth_token").exists()  # Ray's ray.init() writes it; the run kept its own


@needs_ray
def test_the_documented_recipe_works_after_a_local_run_left_a_token(tiny_mnist, tmp_path):
    """A token is in ~/.ray (as a local run by an older bayescope, or Ray itself, leaves): with the
    recipe's RAY_AUTH_MODE=token on every node the second node joins; a driver that forgot the
    export still connects (it tries again with the token it has); one without the token is told
    "authentication", not that no cluster runs."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("a" * 64)
    cluster = LoopbackCluster(Path(sys.executable))
    cluster.env = _env(home, RAY_AUTH_MODE="token")  # the recipe: one setting on every node
    try:
        cluster.start()  # asserts that the second node joined
        loopback = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ADDRESS": cluster.address}
        done = _train(tiny_mnist, tmp_path / "a.pt", "auto", _env(home, RAY_AUTH_MODE="token", **loopback))
        assert done.returncode == 0, done.stderr[-800:]
        done = _train(tiny_mnist, tmp_path / "b.pt", "auto", _env(home, **loopback))  # no RAY_AUTH_MODE
        assert done.returncode == 0, done.stderr[-800:]
        stranger = tmp_path / "stranger"
        stranger.mkdir()
        done = _train(tiny_mnist, tmp_path / "c.pt", "auto", _env(stranger, **loopback))
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert last.startswith("error: ") and "token authentication" in last and "no running" not in last
        assert not (tmp_path / "c.pt").exists()
    finally:
        cluster.stop()


def test_loopback_ray_is_the_one_test_cluster_command():
    assert "resolve_ip_for_localhost" in LOOPBACK_RAY  # the helper this module relies on stays loopback-only
