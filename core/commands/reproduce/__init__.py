"""Paper reproductions run by ``bayescope-cli reproduce NAME``.

Each reproduction registers a :class:`Reproduction`: a name, a one-line summary, a function
adding its options to an argparse parser and a ``run(args) -> int`` returning the exit code.
Modules are imported lazily by :func:`load_all` so the CLI starts fast.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Reproduction:
    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


REPRODUCTIONS: dict[str, Reproduction] = {}

# Modules that define reproductions; each calls register() at import.
MODULES: tuple[str, ...] = ("core.commands.reproduce.lefolgoc", "core.commands.reproduce.dhmc", "core.commands.reproduce.dhmc_faces")


def register(reproduction: Reproduction) -> Reproduction:
    REPRODUCTIONS[reproduction.name] = reproduction
    return reproduction


def load_all() -> dict[str, Reproduction]:
    for module in MODULES:
        importlib.import_module(module)
    return REPRODUCTIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One sub-command per reproduction, each with its own options."""
    targets = parser.add_subparsers(dest="target", required=True)
    for name, reproduction in load_all().items():
        reproduction.add_arguments(targets.add_parser(name, help=reproduction.summary))


def run(args: argparse.Namespace) -> int:
    return load_all()[args.target].run(args)
