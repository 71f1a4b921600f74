#!/usr/bin/env bash
# Make (or reuse) the project's virtual environment and print its path.
#
# The environment lives outside the checkout, under ${BAYESCOPE_VENV_ROOT:-~/.cache/bayescope-ci},
# keyed on the dependencies in pyproject.toml and this script, so a fresh clone reuses it and a change of
# dependencies builds a new one. The project itself is re-installed (editable, no deps) on
# every call so the environment always points at the checkout it was called from.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The key is what gets installed (the dependency lists and this script), not the rest of
# pyproject.toml: a new lint rule or contract must not rebuild the environment.
deps=$(python3 - "$root/pyproject.toml" <<'PY' 2>/dev/null || cat "$root/pyproject.toml"
import json, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(json.dumps([project["dependencies"], project.get("optional-dependencies", {})], sort_keys=True))
PY
)
key=$( { echo "$deps"; cat "$root/scripts/venv.sh"; } | sha256sum | cut -c1-16)
base=${BAYESCOPE_VENV_ROOT:-$HOME/.cache/bayescope-ci}
venv=$base/venv-$key
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2) >/dev/null; }
mkdir -p "$base"
# One build at a time: a second caller waits for the first instead of building over it.
exec 9>"$base/.lock"
flock 9
if [[ ! -f $venv/.complete ]]; then
  echo "setting up $venv (first run: a few minutes)" >&2
  rm -rf "$venv"
  mkdir -p "$base"
  python3 -m venv "$venv"
  quiet "$venv/bin/pip" install --upgrade "setuptools>=68" wheel
  # The CPU build of torch: the packaged app ships it, and it needs no GPU.
  quiet "$venv/bin/pip" install "torch==2.13.0" \
    || quiet "$venv/bin/pip" install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
  quiet "$venv/bin/pip" install -e "$root[dev,faces]"
  # The 'laplace' extra (curvlinops) without the torchvision that BackPACK lists for its examples
  # only: torchvision would replace the app's CPU torch 2.13 by another torch build.
  quiet "$venv/bin/pip" install --no-deps curvlinops-for-pytorch backpack-for-pytorch einconv unfoldNd linear_operator
  quiet "$venv/bin/pip" install einops opt-einsum
  touch "$venv/.complete"
fi
quiet "$venv/bin/pip" install --no-deps --no-build-isolation -e "$root"
echo "$venv"
