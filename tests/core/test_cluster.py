"""``--cluster``: train and evaluate on a real Ray cluster started here, on loopback only.

The module starts a two-node cluster on this machine (a head and a second node, one CPU
each, both on 127.0.0.1) and checks what a person relies on: a run on the cluster gives the
samples and the numbers of the same run here (the expected values come from the local run,
not from the cluster code), Ctrl-C stops every task and writes nothing, and losing a node
mid-run costs a retry, not the run. The cluster is stopped at the end whatever happens, by
the ids of the processes it started (never ``ray stop``, which stops every Ray on the machine).

Ray answers ``ray start --node-ip-address 127.0.0.1`` with the machine's network address
unless its multi-node check is off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, Ray's switch for
macOS and Windows), which in turn refuses a second node; :data:`LOOPBACK_RAY` starts
``ray`` with 127.0.0.1 kept as given and the switch set for its children, so nothing
listens on or connects to any address but loopback.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from core.commands.main import main
from core.engine.cluster import RAY_MISSING
from core.engine.store import load_posterior

pytestmark = pytest.mark.usefixtures("one_ray_at_a_time")  # tests/conftest.py

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (pip install 'bayescope[cluster]')")

#: ``python -c`` that runs Ray's own ``ray`` command with loopback addresses kept as given.
LOOPBACK_RAY = """
import os, sys
import ray._private.ray_constants  # read with multi-node clusters allowed
import ray._private.services as services
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # its processes keep 127.0.0.1 too
services.resolve_ip_for_localhost = lambda host: host
from ray.scripts.scripts import main
sys.argv[0] = "ray"
main()
"""

#: A lost node is noticed within about 2 s instead of Ray's default of about 30 s.
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "1000",
                      "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0"}

#: Every process of the test cluster, and every driver: no usage reports, and no token
#: authentication (Ray turns it on when it finds ~/.ray/auth_token, which ``ray.init()`` of a
#: private instance writes; a second node then cannot join).
QUIET_RAY = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}

SGLD = ["--model", "softmax", "--method", "sgld", "--set", "num_chains=4", "--set", "burn_in_epochs=1",
        "--set", "thin=5", "--set", "step_size=1e-4", "--seed", "3", "--eval-samples", "4"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, command line) of every process, read from /proc."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(entry.name)] = (ppid, cmdline)
    return out


class LoopbackCluster:
    """A head and a second node on 127.0.0.1, and the processes they started."""

    def __init__(self, ray_bin: Path) -> None:
        self.python = str(ray_bin)
        self.temp = Path(tempfile.mkdtemp(prefix="bsray", dir="/tmp"))  # short: Ray's socket paths
        self.port, self.client_port, self.worker_port = _free_port(), _free_port(), _free_port()
        self.env = {**os.environ, **QUIET_RAY, **FAST_HEALTH_CHECKS}
        self.address = f"127.0.0.1:{self.port}"
        self.client = f"ray://127.0.0.1:{self.client_port}"

    def ray(self, *args: str) -> str:
        """Run ``ray ARGS``; return its error stream ('' when it succeeded)."""
        done = subprocess.run([self.python, "-c", LOOPBACK_RAY, *args], env=self.env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180)
        return "" if done.returncode == 0 else done.stderr or f"exit {done.returncode}"

    def start(self) -> None:
        failed = self.ray("start", "--head", "--port", str(self.port), "--num-cpus", "1",
                          "--node-ip-address", "127.0.0.1", "--ray-client-server-port", str(self.client_port),
                          "--include-dashboard=false", "--temp-dir", str(self.temp), "--disable-usage-stats")
        assert not failed, f"the head did not start: {failed[-2000:]}"
        for _ in range(3):  # a port picked here may be taken meanwhile by one of the head's own
            failed = self.ray("start", "--address", self.address, "--num-cpus", "1", "--node-ip-address",
                              "127.0.0.1", "--node-manager-port", str(self.worker_port), "--disable-usage-stats")
            if not failed:
                return
            self.worker_port = _free_port()
        raise AssertionError(f"the second node did not start: {failed[-2000:]}")

    def ours(self) -> list[int]:
        """Every process of this cluster: those naming its folder or port, and their children."""
        table = _processes()
        marks = (str(self.temp), f"127.0.0.1:{self.port}")
        found = {pid for pid, (_, cmd) in table.items() if any(m in cmd for m in marks)} - {os.getpid()}
        grew = True
        while grew:
            children = {pid for pid, (ppid, _) in table.items() if ppid in found} - found - {os.getpid()}
            grew, found = bool(children), found | children
        return sorted(found)

    def worker_raylet(self) -> int:
        (pid,) = [pid for pid, (_, cmd) in _processes().items()
                  if "raylet/raylet" in cmd and f"--node_manager_port={self.worker_port}" in cmd]
        return pid

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            pids = self.ours()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while pids and time.monotonic() < deadline and self.ours():
                time.sleep(0.2)
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    """The two-node cluster for this module; stopped at its end even when a test fails."""
    if not HAS_RAY:
        pytest.skip("Ray is not installed (pip install 'bayescope[cluster]')")
    started = LoopbackCluster(Path(sys.executable))
    try:
        started.start()
        yield started
    finally:
        started.stop()


@pytest.fixture
def driver_env(monkeypatch, cluster):
    """This process drives the cluster as the command line does, on loopback (see the docstring)."""
    from ray._private import ray_constants

    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    for name, value in QUIET_RAY.items():
        monkeypatch.setenv(name, value)
    return cluster


def _cli(*argv: str, env: dict[str, str]) -> subprocess.Popen:
    # Ctrl-C as a terminal delivers it, whatever the suite inherited: run as a background job of
    # a non-interactive shell, pytest starts with SIGINT ignored, and so would the command.
    return subprocess.Popen([sys.executable, "-m", "core.commands.main", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_progress(process: subprocess.Popen, timeout: float = 300.0) -> str:
    """Read the command's stderr until its bar shows work done by the tasks; return what was read
    (a wait, not a time limit: with the suite's other worker busy beside the cluster, its four
    tasks showed no step after 90 s once, at load 5-6)."""
    seen = ""
    deadline = time.monotonic() + timeout
    os.set_blocking(process.stderr.fileno(), False)
    while time.monotonic() < deadline:
        seen += (process.stderr.read() or b"").decode(errors="replace")
        if any(int(a) > 0 for a, _ in re.findall(r"(\d+)/(\d+) \[", seen)):
            return seen
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"no progress from the cluster's tasks: {seen[-500:]!r}")


def _samples_equal(a, b) -> None:
    assert a.samples.keys() == b.samples.keys()
    for key in a.samples:
        # the same chains, from the same streams, through the same code: the same numbers
        assert torch.equal(a.samples[key], b.samples[key]), key


# ------------------------------------------------------------------------- without Ray


def test_cluster_without_ray_is_one_sentence_and_exit_2(tiny_mnist, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    out = tmp_path / "p.pt"
    rc = main(["train", "--data-dir", str(tiny_mnist), *SGLD, "--out", str(out), "--cluster", "local"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"error: {RAY_MISSING}"]
    assert RAY_MISSING == "Running on a cluster needs Ray: pip install 'bayescope[cluster]'"
    assert not out.exists()


@pytest.mark.parametrize("address", ["ray://127.0.0.1", "127.0.0.1:6379", "ray://127.0.0.1:99999", "here"])
def test_a_cluster_address_is_local_auto_or_ray_host_port(address, tiny_mnist, tmp_path, capsys):
    rc = main(["train", "--data-dir", str(tiny_mnist), *SGLD, "--out", str(tmp_path / "p.pt"),
               "--cluster", address])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"error: --cluster must be local, auto or ray://HOST:PORT, got {address!r}"]


def test_the_command_line_imports_ray_only_when_asked():
    # core.engine.cluster imports Ray inside its functions: the window, the installer and
    # every command without --cluster run without it
    code = ("import sys, core.commands.main, core.engine.cluster, app.main; "
            "sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
                          timeout=120).returncode == 0


class _FlakyClientRay:
    """Ray's module as ``connect`` sees it, whose client server fails to start ``fails`` times."""

    SERVER_TRACE = ("Initialization failure from server:\\nTraceback (most recent call last):\\n  File "
                    "\"proxier.py\", line 772, in Datapath\\nRuntimeError: Starting Ray client server "
                    "failed. See ray_client_server_23000.err for detailed logs.\\n")

    def __init__(self, fails: int) -> None:
        self.fails, self.calls = fails, []

    def init(self, address, **kwargs):
        self.calls.append("init")
        if self.calls.count("init") <= self.fails:
            raise ConnectionAbortedError(self.SERVER_TRACE)

    def shutdown(self):
        self.calls.append("shutdown")

    def remote(self, function):
        return function


@pytest.mark.parametrize("fails", [1, 2])
def test_a_client_server_that_fails_to_start_is_tried_again(fails, monkeypatch):
    # Ray's client server sometimes loses the race to start its per-client server (a known
    # upstream flake): a second try gets past it, and each failed try is shut down first
    import core.engine.cluster as cluster

    ray = _FlakyClientRay(fails)
    monkeypatch.setattr(cluster, "_import_ray", lambda: ray)
    connected = cluster.connect("ray://127.0.0.1:10001")
    assert connected.address == "ray://127.0.0.1:10001"
    assert ray.calls == ["init", "shutdown"] * fails + ["init"]


def test_a_client_server_that_never_starts_is_one_sentence(monkeypatch):
    import core.engine.cluster as cluster

    ray = _FlakyClientRay(fails=99)
    monkeypatch.setattr(cluster, "_import_ray", lambda: ray)
    with pytest.raises(cluster.ClusterError) as raised:
        cluster.connect("ray://127.0.0.1:10001")
    assert str(raised.value) == ("no Ray cluster answered at ray://127.0.0.1:10001: Starting Ray client server "
                                 "failed. See ray_client_server_23000.err for detailed logs.")
    assert ray.calls == ["init", "shutdown"] * cluster.CONNECT_ATTEMPTS


# ---------------------------------------------------------------------------- with Ray


@needs_ray
@pytest.mark.usefixtures("one_torch_thread")  # as Ray's workers: a chain's matrix products add in the same order
def test_chains_on_the_cluster_are_the_chains_of_the_local_run(driver_env, tiny_mnist, tmp_path, capsys):
    local, remote = tmp_path / "local.pt", tmp_path / "remote.pt"
    common = ["train", "--data-dir", str(tiny_mnist), *SGLD, "--set", "epochs=2", "--set", "batch_size=50"]
    assert main([*common, "--out", str(local)]) == 0
    assert main([*common, "--out", str(remote), "--cluster", driver_env.client]) == 0
    capsys.readouterr()
    here, there = load_posterior(local), load_posterior(remote)
    assert there.num_chains == 4 and there.info["cluster"] == {"address": driver_env.client, "tasks": 4}
    _samples_equal(here, there)
    assert there.info["test_accuracy"] == here.info["test_accuracy"]


@needs_ray
@pytest.mark.usefixtures("one_torch_thread")  # as Ray's workers (one CPU each): the same sums in the same order
def test_an_evaluation_sharded_over_the_cluster_equals_the_local_one(driver_env, tiny_mnist, monkeypatch):
    from core.analysis.evaluation import evaluate, resolve_dataset
    from core.engine.cluster import connected
    from core.engine.inference import get_method
    from core.engine.inference.base import Dataset
    from core.engine.models import ArchSpec
    from core.engine.runner import drain, fit_posterior

    train = resolve_dataset(str(tiny_mnist), split="train")
    test = resolve_dataset(str(tiny_mnist))
    ood = Dataset(test.x[:60].flip(-1), test.y[:60], "swapped halves")  # another set than the test set
    method = get_method("mc_dropout")  # draws masks: the seeding of every batch matters
    dropout = drain(fit_posterior(method, method.make_config(epochs=1), ArchSpec("mlp", 10, 0.3, 16), train, 2))
    posteriors = {"dropout": dropout}
    here = drain(evaluate(posteriors, test, ood, num_samples=6, seed=5, batch_size=16))
    monkeypatch.setenv("RAY_ADDRESS", driver_env.address)  # --cluster auto: Ray's own convention
    records = []
    with connected("auto") as cluster:
        assert cluster.parallelism == 2
        there = drain(evaluate(posteriors, test, ood, num_samples=6, seed=5, batch_size=16, executor=cluster),
                      records.append)
    # 2 parts of the test set (7 batches of 16), 2 of the OOD set (4 batches): all done at the end
    assert records and records[-1].values["tasks"] == 4 and records[-1].values["tasks_done"] == 4
    for a, b in ((here.results["dropout"].data, there.results["dropout"].data),
                 (here.results["dropout"].ood, there.results["dropout"].ood)):
        np.testing.assert_array_equal(a.mean_proba, b.mean_proba)
        np.testing.assert_array_equal(a.chain_predictions, b.chain_predictions)
        for score in a.scores:
            np.testing.assert_array_equal(a.scores[score], b.scores[score])
    # and the masks really are drawn per batch: another seed gives other numbers
    other = drain(evaluate(posteriors, test, None, num_samples=6, seed=6, batch_size=16))
    assert not np.array_equal(other.results["dropout"].data.mean_proba, here.results["dropout"].data.mean_proba)


@needs_ray
def test_a_reproductions_independent_runs_on_the_cluster_score_as_here(driver_env, monkeypatch):
    from core.commands.reproduce.dhmc_faces_runs import run_protocol
    from core.engine.cluster import connected
    from core.engine.faces.age_groups import AGE_GROUP_NAMES
    from core.engine.faces.descriptor import DescriptorInfo
    from core.engine.inference.base import Dataset
    from core.engine.runner import drain

    info = DescriptorInfo("test-descriptor", "1-abc", 16)
    g = torch.Generator().manual_seed(0)
    y = torch.arange(8).repeat_interleave(12)  # eight far-apart clusters of 16-d "descriptors"
    x = torch.eye(16)[:8][y] + 0.15 * torch.randn(len(y), 16, generator=g)
    train, test = Dataset(x[::2], y[::2], "train", AGE_GROUP_NAMES), Dataset(x[1::2], y[1::2], "test", AGE_GROUP_NAMES)
    # SGHMC: two chains of one fit; MC dropout: two fits with seeds 0 and 1
    kwargs = {"runs": 2, "epochs": 3, "methods": {"SGHMC", "MC dropout"}}
    here = drain(run_protocol("tuned", train, test, info, **kwargs))
    monkeypatch.setenv("RAY_ADDRESS", driver_env.address)
    with connected("auto") as cluster:
        there = drain(run_protocol("tuned", train, test, info, executor=cluster, **kwargs))
    assert list(there.scores) == list(here.scores) == ["SGHMC", "MC dropout"]
    for label in here.scores:
        a, b = here.scores[label], there.scores[label]
        np.testing.assert_array_equal(a.accuracy, b.accuracy)
        np.testing.assert_array_equal(a.nll, b.nll)
        np.testing.assert_array_equal(a.soft_confusion, b.soft_confusion)


@needs_ray
def test_ctrl_c_cancels_every_task_and_writes_nothing(driver_env, tiny_mnist, tmp_path):
    out = tmp_path / "p.pt"
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **QUIET_RAY, "RAY_ADDRESS": driver_env.address}
    with _cli("train", "--data-dir", str(tiny_mnist), *SGLD, "--set", "epochs=400", "--set", "batch_size=10",
              "--out", str(out), "--cluster", "auto", env=env) as process:
        try:
            _wait_for_progress(process)
            process.send_signal(signal.SIGINT)
            # 120 s: once (in a full run of the suite, never alone) it had not exited after 60 s;
            # what it printed by then is in the failure message below
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
        rest = (process.stderr.read() or b"").decode(errors="replace")
    assert process.returncode == 130, f"exit {process.returncode}: {rest[-1500:]}"
    assert "cancelled: nothing was written" in rest and not out.exists()
    assert not list(tmp_path.glob("*.tmp*")) and not list(tmp_path.glob(".*"))
    import ray

    ray.init(address=driver_env.address, log_to_driver=False, logging_level="ERROR")
    try:  # every task was cancelled: both CPUs come free at once, not when the chains would end
        deadline = time.monotonic() + 20
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.25)
        assert ray.available_resources().get("CPU", 0) == 2
    finally:
        ray.shutdown()


@needs_ray
def test_a_lost_node_costs_a_retry_not_the_run(driver_env, tiny_mnist, tmp_path, capsys):
    """Last in the module: it takes the second node away."""
    local, remote = tmp_path / "local.pt", tmp_path / "remote.pt"
    args = ["train", "--data-dir", str(tiny_mnist), *SGLD, "--set", "epochs=12", "--set", "batch_size=10"]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **QUIET_RAY, "RAY_ADDRESS": driver_env.address}
    with _cli(*args, "--out", str(remote), "--cluster", "auto", env=env) as process:
        try:
            _wait_for_progress(process)
            os.kill(driver_env.worker_raylet(), signal.SIGKILL)  # the second node is gone mid-run
            process.wait(timeout=150)
        finally:
            if process.poll() is None:
                process.kill()
        rest = (process.stderr.read() or b"").decode(errors="replace")
    assert process.returncode == 0, rest[-800:]
    import ray

    ray.init(address=driver_env.address, log_to_driver=False, logging_level="ERROR")
    try:  # the second node really is gone: the run finished on the head alone
        assert ray.cluster_resources().get("CPU", 0) == 1
    finally:
        ray.shutdown()
    assert main([*args, "--out", str(local)]) == 0  # the same run, here
    capsys.readouterr()
    _samples_equal(load_posterior(local), load_posterior(remote))
