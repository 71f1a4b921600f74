"""``bayescope-cli``: train posteriors, predict images, evaluate and reproduce, headless.

Every failure a user can cause (missing data, a bad image, a posterior from another
version, an out-of-range number, a full disk) ends with a one-line ``error: ...`` on stderr
and exit code 2. A cancelled run (Ctrl-C) exits with 130, SIGTERM with 143; both leave no
partial file and say what, if anything, was written.
"""

from __future__ import annotations

import argparse
import sys

from core.commands import (
    calibrate,
    compare,
    diagnose,
    evaluate,
    fidelity,
    import_,
    info,
    join,
    methods,
    predict,
    reproduce,
    train,
    upgrade,
    utkface_folders,
    zoo,
)
from core.commands.console import USER_ERRORS, cancel_code, describe_error, say
from core.engine.runner import Terminated, signals_raise

#: Every command: its module (``add_arguments(parser)`` and ``run(args)``) and its one-line help.
COMMANDS = {
    "train": (train, "fit a posterior on a data set and save it"),
    "join": (join, "join the parts of one run, trained with train --chains, into its posterior"),
    "predict": (predict, "classify an image with uncertainty"),
    "methods": (methods, "list inference methods and their settings"),
    "evaluate": (evaluate, "evaluate posteriors on a data set: metrics, OOD, sweep"),
    "calibrate": (calibrate, "calibrate posteriors' conformal prediction sets on held-out test images"),
    "compare": (compare, "judge one image with several posteriors; write a report folder"),
    "fidelity": (fidelity, "how far each posterior's predictive lies from a reference (HMC) on a data set"),
    "reproduce": (reproduce, "reproduce a paper's experiment"),
    "info": (info, "what a posterior file holds: method, draws, convergence, provenance"),
    "diagnose": (diagnose, "measure whether a sampled posterior's chains agree; record it in the file"),
    "import": (import_, "save a network trained elsewhere (architecture + state_dict) as a MAP posterior"),
    "utkface-folders": (utkface_folders, "lay UTKFace's faces out as eight age-group folders of images"),
    "zoo": (zoo, "rebuild one tier of posteriors (every method on one model) and measure them side by side"),
    "upgrade": (upgrade, "upgrade posterior files written by an older bayescope, in place"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bayescope-cli", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_) in COMMANDS.items():
        command = sub.add_parser(name, help=help_)
        module.add_arguments(command)
        command.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with signals_raise():  # SIGTERM unwinds like Ctrl-C: temporary files are removed
            return args.func(args)
    except KeyboardInterrupt as exc:
        stopped = "terminated" if isinstance(exc, Terminated) else "cancelled"
        say(f"{stopped}: nothing was written", sys.stderr)
        return cancel_code(exc)
    except (*USER_ERRORS, MemoryError) as exc:
        say(f"error: {describe_error(exc)}", sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
