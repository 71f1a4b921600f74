#!/usr/bin/env bash
# Set up (or reuse) the environment, then launch the bayescope GUI on its bundled posteriors.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(bash "$root/scripts/venv.sh")
exec "$venv/bin/bayescope" "$@"
