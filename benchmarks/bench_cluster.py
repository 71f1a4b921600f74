"""Scaling of ``train --cluster``: one fixed job on a Ray cluster of one node, then of two.

The job: SGLD on a softmax regression of 28×28 two-class images, ``--chains`` chains (one
Ray task each) of ``--steps`` steps. A head with one CPU is started on this machine (loopback
only, as in tests/core/test_cluster.py), the job is timed, a second one-CPU node joins, and
the job is timed again; both runs must give the same samples. Prints the wall-clock seconds
of each run and the scaling efficiency T₁ / (2 T₂) (1.0: two nodes halve the time), plus the
same job run here, vectorised in one process, for reference. The cluster is stopped by the
ids of the processes it started.

Run: ``nice python benchmarks/bench_cluster.py [--chains 4] [--steps 600] [--repeats 2]``.
On a machine whose cores are busy with other work the figure says as much about that work
as about Ray: note the load average it prints.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Ray's ``ray`` command with 127.0.0.1 kept as given (see tests/core/test_cluster.py).
LOOPBACK_RAY = """
import os, sys
import ray._private.ray_constants
import ray._private.services as services
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
services.resolve_ip_for_localhost = lambda host: host
from ray.scripts.scripts import main
sys.argv[0] = "ray"
main()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}  # a 2nd node needs it on
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")  # see tests/core/test_cluster.py
    subprocess.run([sys.executable, "-c", LOOPBACK_RAY, *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180)


def _ours(temp: Path, port: int) -> set[int]:
    """This cluster's processes: those naming its folder or port, and their children."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                table[int(entry.name)] = (int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]), cmd)
    found = {p for p, (_, cmd) in table.items() if str(temp) in cmd or f"127.0.0.1:{port}" in cmd} - {os.getpid()}
    while True:
        children = {p for p, (pp, _) in table.items() if pp in found} - found - {os.getpid()}
        if not children:
            return found
        found |= children


def _stop(temp: Path, port: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _ours(temp, port):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(3)
    shutil.rmtree(temp, ignore_errors=True)


def _job(chains: int, steps: int):
    import numpy as np
    import torch

    from core.engine.inference import get_method
    from core.engine.inference.base import Dataset
    from core.engine.models import ArchSpec

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    x = rng.integers(0, 60, (500, 28, 28)).astype(np.float32)
    x[y == 0, :, :14] += 150
    x[y == 1, :, 14:] += 150
    data = Dataset(torch.from_numpy(x / 255).unsqueeze(1), torch.from_numpy(y).long(), "two-halves")
    method = get_method("sgld")
    batch = 10
    epochs = max(2, steps * batch // len(data))
    config = method.make_config(num_chains=chains, epochs=epochs, batch_size=batch, burn_in_epochs=1, thin=10,
                                step_size=1e-4)
    return method, config, ArchSpec("softmax", 10), data


def _timed(run, repeats: int):
    from core.engine.runner import drain

    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = drain(run())
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--steps", type=int, default=600, help="steps per chain (about)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting; the fastest counts")
    args = parser.parse_args()

    import torch
    from ray._private import ray_constants

    from core.engine.cluster import connected
    from core.engine.runner import fit_posterior, fit_posterior_on

    ray_constants.ENABLE_RAY_CLUSTER = False  # this driver, too, stays on loopback
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    method, config, arch, data = _job(args.chains, args.steps)
    torch.set_num_threads(1)  # as a one-CPU Ray task runs
    here, local = _timed(lambda: fit_posterior(method, config, arch, data, 0), args.repeats)
    temp = Path(tempfile.mkdtemp(prefix="bsbench", dir="/tmp"))
    port = _free_port()
    os.environ["RAY_ADDRESS"] = f"127.0.0.1:{port}"
    times = {}
    try:
        _ray("start", "--head", "--port", str(port), "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
             "--include-dashboard=false", "--temp-dir", str(temp), "--disable-usage-stats")
        for nodes in (1, 2):
            if nodes == 2:
                _ray("start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
                     "--disable-usage-stats")
            with connected("auto") as cluster:
                assert cluster.parallelism == nodes, cluster.parallelism
                times[nodes], remote = _timed(
                    lambda c=cluster: fit_posterior_on(c, method, config, arch, data, 0), args.repeats)
            for key in local.samples:
                assert torch.equal(local.samples[key], remote.samples[key]), key
    finally:
        _stop(temp, port)
    load = os.getloadavg()[0]
    steps = local.info["num_steps"]
    print(f"SGLD softmax, {args.chains} chains x {steps} steps, best of {args.repeats}; "
          f"{os.cpu_count()} cores, load average {load:.1f}")
    print("| where | wall s | speed-up vs 1 node |")
    print("| --- | --- | --- |")
    print(f"| here, {args.chains} chains vectorised, 1 thread | {here:.1f} | {times[1] / here:.2f} |")
    print(f"| Ray, 1 node (1 CPU) | {times[1]:.1f} | 1.00 |")
    print(f"| Ray, 2 nodes (1 CPU each) | {times[2]:.1f} | {times[1] / times[2]:.2f} |")
    print(f"scaling efficiency T1 / (2 T2) = {times[1] / (2 * times[2]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
