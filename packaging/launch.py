"""Entry point of the packaged programs: the window (``bayescope``) and the command line
(``bayescope-cli``), chosen by the name the program was started under.

On Linux there is one executable and ``bayescope-cli`` is a link to it; on Windows and
macOS the spec builds two executables from this script (the window one without a console).
Both accept ``--self-test``: on Windows and macOS the window program cannot print, so the
release workflow reads the self-test's lines from ``bayescope-cli --self-test``.
"""

import os
import sys
import warnings

# The package ships torch's modules compiled, without their sources (packaging/bundle.py,
# MODULE_COLLECTION_MODE); torch then warns, harmlessly, that it cannot read the source of
# its @torch.jit._overload functions.
warnings.filterwarnings("ignore", message="Unable to retrieve source for @torch.jit._overload")


def main() -> int:
    program = os.path.basename(sys.argv[0]).lower()
    if sys.argv[1:] == ["--self-test"]:
        from app.selftest import run_self_test

        return run_self_test()
    if program.startswith("bayescope-cli"):
        from core.cli import main as cli_main

        return cli_main()
    from app.__main__ import main as gui_main

    return gui_main()


if __name__ == "__main__":
    sys.exit(main())
