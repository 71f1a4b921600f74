#!/usr/bin/env bash
# Set up (or reuse) the environment, then lint and run the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(bash "$root/scripts/venv.sh")
cd "$root"
"$venv/bin/ruff" check core app tests benchmarks
"$venv/bin/lint-imports" --no-cache  # the layers of docs/architecture.md (pyproject.toml)
QT_QPA_PLATFORM=offscreen "$venv/bin/python" -m pytest "$@"
