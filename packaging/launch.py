"""Entry point of the packaged programs: the window (``bayescope``) and the command line
(``bayescope-cli``), chosen by the name the program was started under.

On Linux there is one executable and ``bayescope-cli`` is a link to it; on Windows and
macOS the spec builds two executables from this script (the window one without a console).
Both accept ``--self-test``: on Windows and macOS the window program cannot print, so the
release workflow reads the self-test's lines from ``bayescope-cli --self-test``.

Worker processes (the face-descriptor extraction's, started with "spawn") run this same
executable with multiprocessing's own arguments: ``multiprocessing.freeze_support()`` must see
them first, or the child parses them as the app's and dies, and every extraction fails.
"""

import multiprocessing
import os
import sys


class ImportProfile:
    """``BAYESCOPE_IMPORTTIME=SECONDS``: what ``python -X importtime`` tells, for the frozen app
    (which ignores Python's own environment variables). Times every module's first import in
    every thread (the bootstrap's ``_find_and_load``) and, SECONDS after launch, prints per
    top-level package the time spent importing its own modules (nested imports of other
    packages not counted), then lets the program run on."""

    def __init__(self, seconds: float) -> None:
        import importlib._bootstrap as bootstrap
        import threading
        import time

        clock = time.perf_counter
        self.start = clock()
        self.own: dict[str, float] = {}
        local = threading.local()  # per thread: time spent in nested imports, per open import
        original = bootstrap._find_and_load

        def find_and_load(name, import_):
            stack = local.__dict__.setdefault("stack", [])
            started = clock()
            stack.append(0.0)
            try:
                return original(name, import_)
            finally:
                nested = stack.pop()
                total = clock() - started
                top = name.split(".", 1)[0]
                self.own[top] = self.own.get(top, 0.0) + total - nested
                if stack:
                    stack[-1] += total

        bootstrap._find_and_load = find_and_load
        timer = threading.Timer(seconds, self.report, args=(seconds,))
        timer.daemon = True
        timer.start()

    def report(self, seconds: float) -> None:
        own = dict(self.own)
        print(f"import profile: {sum(own.values()):.2f} s importing modules (all threads) in the first {seconds:g} s",
              file=sys.stderr, flush=True)
        for top, spent in sorted(own.items(), key=lambda kv: -kv[1])[:20]:
            print(f"  {spent:6.2f} s  {top}", file=sys.stderr, flush=True)


def main() -> int:
    # First of all: in a worker process this runs the worker and exits (PyInstaller makes it
    # work on every platform; unfrozen it does nothing).
    multiprocessing.freeze_support()
    program = os.path.basename(sys.argv[0]).lower()
    if os.environ.get("BAYESCOPE_IMPORTTIME"):
        ImportProfile(float(os.environ["BAYESCOPE_IMPORTTIME"]))
    if sys.argv[1:] == ["--self-test"]:
        from app.selftest import run_self_test

        return run_self_test()
    if program.startswith("bayescope-cli"):
        from core.commands.main import main as cli_main

        return cli_main()
    from app.__main__ import main as gui_main

    return gui_main()


if __name__ == "__main__":
    sys.exit(main())
