"""``bayescope-cli methods``: every inference method and its settings."""

from __future__ import annotations

import argparse
from dataclasses import fields

from core.engine.inference import METHODS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No arguments."""


def run(args: argparse.Namespace) -> int:
    for name, method in sorted(METHODS.items()):
        settings = ", ".join(f"{f.name}={f.default}" for f in fields(method.config_cls))
        print(f"{name:12s} {method.summary}\n{'':12s} settings: {settings}")
    return 0
