#!/usr/bin/env bash
# Set up (or reuse) the environment, then lint and run the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(bash "$root/scripts/venv.sh")
cd "$root"
"$venv/bin/ruff" check core app tests benchmarks
"$venv/bin/lint-imports" --no-cache  # the layers of docs/architecture.md (pyproject.toml)
# Two workers (CI has two cores), one torch thread each (tests/conftest.py); each file on one
# worker, so a module's fixtures (a trained model, a window) are built once.
QT_QPA_PLATFORM=offscreen "$venv/bin/python" -m pytest -n 2 --dist loadfile "$@"
