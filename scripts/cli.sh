#!/usr/bin/env bash
# Set up (or reuse) the environment, then run the command line, bayescope-cli, with the arguments given:
#   bash scripts/cli.sh methods
#   bash scripts/cli.sh predict resources/examples/digit-7.png
# The environment's own copy is "$(bash scripts/venv.sh)/bin/bayescope-cli"; put that folder on PATH to
# type bayescope-cli directly.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(bash "$root/scripts/venv.sh")
exec "$venv/bin/bayescope-cli" "$@"
