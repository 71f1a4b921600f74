"""Run the independent parts of a run (chains, ensemble members, slices of a data set) as
tasks on a Ray cluster: ``bayescope-cli train|evaluate|reproduce ... --cluster ADDRESS``.

This is the only module of ``core`` that imports Ray, and only inside its functions: Ray is
the optional ``cluster`` extra, used by the command line and never by the window or the
installer. ``ADDRESS`` is

- ``local``: a private Ray instance started on this machine for the run (loopback only),
  stopped at its end;
- ``auto``: the cluster that ``RAY_ADDRESS`` names, or the head started on this machine by
  ``ray start --head`` (Ray's own convention, ``ray.init(address="auto")``);
- ``ray://HOST:PORT``: a cluster's Ray Client server (``ray start --head`` opens it on 10001).

What a task does is a generator of progress records (:class:`core.engine.runner.RemoteTask`):
a worker drives it and reports its progress to a small actor on the driver's node, which the
driver polls for the progress bar. A task whose worker or node dies is run again
(``max_retries``); closing :meth:`RayCluster.run` (Ctrl-C) cancels every task still running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Generator, Iterator, Sequence
from typing import Any

from core.engine.inference.base import ProgressRecord
from core.engine.runner import RemoteTask

#: The sentence for ``--cluster`` without Ray installed.
RAY_MISSING = "Running on a cluster needs Ray: pip install 'bayescope[cluster]'"

#: How often a lost task (its worker or node died) is run again before the run stops.
MAX_RETRIES = 3
#: Tries at a ``ray://`` address whose head answers but whose client server fails to start.
CONNECT_ATTEMPTS = 3

#: Seconds between two progress reports of one task, and between two polls of the driver.
REPORT_INTERVAL = 0.25


class RayMissingError(RuntimeError):
    """``--cluster`` was asked for, but Ray is not installed."""

    def __init__(self) -> None:
        super().__init__(RAY_MISSING)


class ClusterError(RuntimeError):
    """The cluster could not be reached, or a task was lost more often than it is retried."""


def require_ray() -> None:
    """Raise :class:`RayMissingError` unless Ray can be imported (without importing it)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as none
        found = False
    if not found:
        raise RayMissingError()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissingError() from None
    return ray


# ----------------------------------------------------------------------------- on a worker


class ProgressBoard:
    """The latest progress of every task (a Ray actor on the driver's node)."""

    def __init__(self, count: int) -> None:
        self.steps = [0] * count
        self.totals = [0] * count

    def report(self, index: int, step: int, total: int) -> None:
        self.steps[index], self.totals[index] = step, total

    def snapshot(self) -> tuple[list[int], list[int]]:
        return self.steps, self.totals


def run_task(board: Any, index: int, function: Any, *args: Any, **kwargs: Any) -> Any:
    """On a worker: drive ``function(*args, **kwargs)`` to its end, reporting progress to
    ``board`` at most every :data:`REPORT_INTERVAL` seconds; return its value."""
    generator = function(*args, **kwargs)
    last = 0.0
    try:
        while True:
            record = next(generator)
            now = time.monotonic()
            if now - last >= REPORT_INTERVAL:
                board.report.remote(index, record.step, record.total)  # fire and forget
                last = now
    except StopIteration as stop:
        return stop.value
    finally:
        generator.close()


# ------------------------------------------------------------------------------ the driver


class RayCluster:
    """A connection to a Ray cluster that runs :class:`RemoteTask` s (an ``Executor``).

    Use :func:`connect`; ``device`` is where each task computes (``"cpu"``, ``"cuda"``,
    ``"cuda:1"``): a CUDA task asks Ray for one GPU.
    """

    def __init__(self, ray: Any, address: str, device: str = "cpu", max_retries: int = MAX_RETRIES) -> None:
        self._ray = ray
        self.address = address
        self.device = device
        self.max_retries = max_retries
        self._task = ray.remote(run_task)
        self._board = ray.remote(ProgressBoard)
        #: Ray's authentication variables as they were before :func:`connect` set them, put back on close.
        self.restore: dict[str, str | None] = {}

    @property
    def parallelism(self) -> int:
        """Tasks that run at once: the cluster's GPUs for a CUDA device, else its CPUs."""
        resources = self._ray.cluster_resources()
        key = "GPU" if self.device.startswith("cuda") else "CPU"
        return max(1, int(resources.get(key, 1)))

    @property
    def gpus_per_task(self) -> float:
        return 1.0 if self.device.startswith("cuda") else 0.0

    def share(self, value: Any) -> Any:
        """``value`` copied once into the cluster's object store; pass the handle to tasks."""
        return self._ray.put(value)

    def run(self, tasks: Sequence[RemoteTask], phase: str) -> Generator[ProgressRecord, None, list[Any]]:
        """Run every task; yield the progress of them all; return their results in order.

        A task's own error (a bad setting, a diverged chain) is raised here as itself; a
        task lost more than ``max_retries`` times raises :class:`ClusterError`. Closing the
        generator, or any error, cancels every task still running.
        """
        ray = self._ray
        if not tasks:
            return []
        board = self._board.options(scheduling_strategy=self._on_this_node(), max_restarts=-1).remote(len(tasks))
        refs = [
            self._task.options(num_cpus=1, num_gpus=task.gpus, max_retries=self.max_retries,
                               retry_exceptions=False, name=task.label or f"task {i + 1}")
            .remote(board, i, task.function, *task.args, **task.kwargs)
            for i, task in enumerate(tasks)
        ]
        where = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(tasks)
        finished = [False] * len(tasks)
        steps, totals = [0] * len(tasks), [0] * len(tasks)
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=len(pending), timeout=REPORT_INTERVAL)
                for ref in ready:
                    i = where[ref]
                    results[i], finished[i] = self._result(ref, tasks[i]), True
                steps, totals = self._poll(board, steps, totals)
                yield _overall(steps, totals, finished, phase)
            return results
        finally:
            for ref in pending:  # Ctrl-C, a failed task: nothing keeps computing for nothing
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            with contextlib.suppress(Exception):
                ray.kill(board)

    def _on_this_node(self) -> Any:
        """Keep the progress board on the driver's node, so that losing a worker's node loses
        no progress reports (soft: anywhere if that node cannot host it)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = self._ray.get_runtime_context().get_node_id()
        return NodeAffinitySchedulingStrategy(node_id=node, soft=True)

    def _poll(self, board: Any, steps: list[int], totals: list[int]) -> tuple[list[int], list[int]]:
        """The board's latest numbers, or the previous ones while it is restarting."""
        try:
            return self._ray.get(board.snapshot.remote(), timeout=5 * REPORT_INTERVAL)
        except Exception:  # a lost or slow board costs the bar an update, never the run
            return steps, totals

    def _result(self, ref: Any, task: RemoteTask) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None  # the task's own one-sentence error
            raise ClusterError(f"{task.label or 'a task'} failed on the cluster: {exc}") from None
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError, ray.exceptions.RayActorError) as exc:
            raise ClusterError(
                f"{task.label or 'a task'} was lost with its worker or node {self.max_retries + 1} times "
                f"({type(exc).__name__}); the run stopped and nothing was written"
            ) from None

    def close(self) -> None:
        """Disconnect (and stop a ``local`` instance)."""
        self._ray.shutdown()
        _restore_environment(self._ray, self.restore)


def _overall(steps: list[int], totals: list[int], finished: list[bool], phase: str) -> ProgressRecord:
    """One record for all tasks; a task that has not reported yet counts as long as the
    average of those that have."""
    known = [t for t in totals if t > 0]
    average = sum(known) / len(known) if known else 1
    total = done = 0.0
    for step, size, over in zip(steps, totals, finished, strict=True):
        size = size if size > 0 else average
        total += size
        done += size if over else min(step, size)
    count = sum(finished)
    return ProgressRecord(int(done), int(round(total)), {"tasks_done": float(count), "tasks": float(len(steps))},
                          phase)


@contextlib.contextmanager
def _loopback_only(ray: Any) -> Iterator[None]:
    """A private instance listens on 127.0.0.1 only (as Ray does on macOS and Windows),
    not on the machine's network address; its own processes inherit the setting."""
    from ray._private import ray_constants

    previous = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = previous


#: Ray's switch for token authentication (``token`` or ``disabled``), and its token in the environment.
AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"
AUTH_TOKEN_VARIABLE = "RAY_AUTH_TOKEN"
#: The sentence when a cluster is running but refuses this driver for want of its token.
AUTHENTICATION_ADVICE = (
    "set RAY_AUTH_MODE=token here as on every node, with the cluster's token in ~/.ray/auth_token (or "
    "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH); docs/scale.md shows the recipe")


def _has_token(ray: Any) -> bool:
    """Whether Ray finds an authentication token here (its environment variables or ~/.ray/auth_token)."""
    try:
        from ray._raylet import AuthenticationTokenLoader

        return bool(AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True))
    except Exception:  # an older or newer Ray without token authentication
        return False


def _set_environment(ray: Any, values: dict[str, str]) -> dict[str, str | None]:
    """Set Ray's authentication variables for this process (and the processes it starts); return
    what to restore."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    _reload_auth(ray)
    return previous


def _restore_environment(ray: Any, previous: dict[str, str | None]) -> None:
    if not previous:
        return
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _reload_auth(ray)


def _reload_auth(ray: Any) -> None:
    """Make Ray read its authentication settings again (it caches the mode and the token)."""
    with contextlib.suppress(Exception):
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _private_token(ray: Any) -> dict[str, str | None]:
    """For a ``local`` instance: unless the person chose a mode or holds a token, a random token
    kept in this process's environment for the run. Ray's own ``ray.init()`` would write one to
    ~/.ray/auth_token, after which ``ray start --head`` turns authentication on for every later
    cluster of this machine whose nodes lack it (issue 44: the documented recipe broke)."""
    if os.environ.get(AUTH_MODE_VARIABLE) is not None or _has_token(ray):
        return {}
    import secrets

    return _set_environment(ray, {AUTH_MODE_VARIABLE: "token", AUTH_TOKEN_VARIABLE: secrets.token_hex(32)})


def _answers(address: str) -> str | None:
    """``HOST:PORT`` of the cluster ``address`` names (``auto``: RAY_ADDRESS, else the head this
    machine started) when something listens there, else None."""
    import socket

    target = os.environ.get("RAY_ADDRESS") if address == "auto" else address
    if not target:
        try:
            from ray._private.services import find_bootstrap_address

            target = find_bootstrap_address(None)
        except Exception:
            return None
    if not target or target.startswith("ray://") or ":" not in target:
        return None
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return target
    except (OSError, ValueError):
        return None


def _authentication_error(ray: Any, exc: BaseException) -> bool:
    kind = getattr(getattr(ray, "exceptions", None), "AuthenticationError", None)
    return (kind is not None and isinstance(exc, kind)) or "authentication" in str(exc).lower()


def connect(address: str, device: str = "cpu", max_retries: int = MAX_RETRIES) -> RayCluster:
    """Connect to ``address`` (``local``, ``auto`` or ``ray://HOST:PORT``, checked by the
    command) and return the cluster; :meth:`RayCluster.close` it when done.

    Raises
    ------
    RayMissingError
        Ray is not installed.
    ClusterError
        No cluster answers at ``address``.
    """
    ray = _import_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address == "local":
        restore = _private_token(ray)
        try:
            with _loopback_only(ray):
                ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        except BaseException:
            ray.shutdown()
            _restore_environment(ray, restore)
            raise
        cluster = RayCluster(ray, address, device, max_retries)
        cluster.restore = restore
        return cluster
    try:
        return _connect_to(ray, address, device, max_retries)
    except ClusterError as first:
        # A cluster that asks for a token refuses a driver without token authentication in
        # words that only name the connection: with a token at hand, try once more with it.
        answering = _answers(address)
        if answering is None or os.environ.get(AUTH_MODE_VARIABLE) is not None or not _has_token(ray):
            if answering is not None:
                raise ClusterError(
                    f"a Ray cluster is running at {answering} but refused this connection; if it uses token "
                    f"authentication, {AUTHENTICATION_ADVICE}") from None
            raise first from None
        restore = _set_environment(ray, {AUTH_MODE_VARIABLE: "token"})
        try:
            cluster = _connect_to(ray, address, device, max_retries)
        except ClusterError:
            _restore_environment(ray, restore)
            raise ClusterError(
                f"the Ray cluster at {answering} refused this connection, with and without token authentication "
                f"(the token here is not the cluster's?); {AUTHENTICATION_ADVICE}") from None
        cluster.restore = restore
        return cluster


def _connect_to(ray: Any, address: str, device: str, max_retries: int) -> RayCluster:
    """:func:`connect` to a running cluster, as Ray's authentication settings stand now."""
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            ray.init(address=address, **quiet)
            return RayCluster(ray, address, device, max_retries)
        except Exception as exc:  # a ConnectionError, or Ray's AuthenticationError (a RayError)
            if not isinstance(exc, ConnectionError) and not _authentication_error(ray, exc):
                raise
            ray.shutdown()  # a failed ray:// connection leaves client state that breaks the next init
            if _authentication_error(ray, exc):
                raise ClusterError(f"the Ray cluster at {address} asks for authentication that this machine "
                                   f"does not give: {AUTHENTICATION_ADVICE}") from None
            if address == "auto":
                raise ClusterError("no running Ray cluster was found: set RAY_ADDRESS to its head, or start "
                                   "one on this machine with 'ray start --head'") from None
            if attempt == CONNECT_ATTEMPTS or not _server_flaked(exc):
                raise ClusterError(f"no Ray cluster answered at {address}: {_last_line(exc)}") from None
    raise AssertionError("unreachable")


def _server_flaked(exc: Exception) -> bool:
    """Whether the head answered but its per-client server did not start: a known race in Ray's
    client server (ray-project/ray#21625, #40676) that a second try gets past."""
    return "Initialization failure from server" in str(exc)


def _last_line(exc: Exception) -> str:
    """The sentence that says what went wrong, without the server's traceback."""
    lines = [line.strip() for line in str(exc).replace("\\n", "\n").splitlines() if line.strip()]
    return re.sub(r"^\w+(Error|Exception): ", "", lines[-1]) if lines else "the connection failed"


@contextlib.contextmanager
def connected(address: str, device: str = "cpu", max_retries: int = MAX_RETRIES) -> Iterator[RayCluster]:
    """:func:`connect` for the length of a ``with`` block."""
    cluster = connect(address, device, max_retries)
    try:
        yield cluster
    finally:
        cluster.close()
