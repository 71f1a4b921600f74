#!/usr/bin/env bash
# Make (or reuse) the project's virtual environment and print its path.
#
# The environment lives outside the checkout, under ${BAYESCOPE_VENV_ROOT:-~/.cache/bayescope-ci},
# keyed on the dependencies in pyproject.toml and the install commands below, so a fresh clone
# reuses it and a change of dependencies builds a new one. The project itself is re-installed
# (editable, no deps) on every call so the environment always points at the checkout it was
# called from. While building, each step and the time so far go to stderr (stdout is the path).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The key is what gets installed (the dependency lists and the install commands of this
# script), not the rest of pyproject.toml or the words printed: a new lint rule, contract or
# message must not rebuild the environment.
deps=$(python3 - "$root/pyproject.toml" <<'PY' 2>/dev/null || cat "$root/pyproject.toml"
import json, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(json.dumps([project["dependencies"], project.get("optional-dependencies", {})], sort_keys=True))
PY
)
key=$( { echo "$deps"; grep -E '^ *(quiet|python3 -m venv|\|\|)' "$root/scripts/venv.sh"; } | sha256sum | cut -c1-16)
base=${BAYESCOPE_VENV_ROOT:-$HOME/.cache/bayescope-ci}
venv=$base/venv-$key
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2) >/dev/null; }
started=$SECONDS
say() { echo "[bayescope setup, $((SECONDS - started)) s] $*" >&2; }
mkdir -p "$base"
# One build at a time: a second caller waits for the first instead of building over it.
exec 9>"$base/.lock"
if ! flock -n 9; then
  say "another setup is building the environment; waiting for it to finish..."
  flock 9
fi
if [[ ! -f $venv/.complete ]]; then
  say "first run: building the environment in $venv (about 3 minutes in all; later runs reuse it)"
  rm -rf "$venv"
  mkdir -p "$base"
  say "1/4 creating the virtual environment (a few seconds)..."
  python3 -m venv "$venv"
  say "2/4 updating pip's build tools (about 10 seconds)..."
  quiet "$venv/bin/pip" install --upgrade "setuptools>=68" wheel
  # The CPU build of torch: the packaged app ships it, and it needs no GPU.
  say "3/4 installing torch, the CPU build (about 1 minute, a 200 MB download)..."
  quiet "$venv/bin/pip" install "torch==2.13.0" \
    || quiet "$venv/bin/pip" install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
  say "4/4 installing PySide6, pyqtgraph, matplotlib, dlib (faces), Ray (cluster) and the test tools (about 2 minutes)..."
  quiet "$venv/bin/pip" install -e "$root[dev,faces,cluster]"
  # The 'laplace' extra (curvlinops) without the torchvision that BackPACK lists for its examples
  # only: torchvision would replace the app's CPU torch 2.13 by another torch build.
  quiet "$venv/bin/pip" install --no-deps curvlinops-for-pytorch backpack-for-pytorch einconv unfoldNd linear_operator
  quiet "$venv/bin/pip" install einops opt-einsum
  touch "$venv/.complete"
  say "done: the environment is ready"
fi
quiet "$venv/bin/pip" install --no-deps --no-build-isolation -e "$root"
echo "$venv"
