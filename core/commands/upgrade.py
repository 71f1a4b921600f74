"""``bayescope-cli upgrade FILE...``: upgrade posterior files written by an older bayescope, in place.

Format-1 files (without an integrity checksum) are refused by the loader with this command;
the upgrade runs every check of the loader except the checksum and re-saves the tensors bit
for bit with one.
"""

from __future__ import annotations

import argparse

from core.commands.console import say
from core.engine.store import FORMAT_VERSION, upgrade_posterior_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="posterior files (.pt) to upgrade in place")


def run(args: argparse.Namespace) -> int:
    for name in args.files:
        say(f"{upgrade_posterior_file(name)}: format {FORMAT_VERSION}")
    return 0
