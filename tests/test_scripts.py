"""scripts/venv.sh says what it is doing while it builds; scripts/cli.sh runs the environment's bayescope-cli.

Both run here on a stand-in ``python3`` whose ``-m venv`` makes a folder with a ``pip`` that
installs nothing, so nothing is downloaded and the shared environment is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STUB_PYTHON = f"""#!/bin/sh
# "python3 -m venv DIR" makes DIR/bin/pip (installs nothing) and DIR/bin/bayescope-cli (echoes);
# anything else is the real interpreter.
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/pip"
  printf '#!/bin/sh\\necho "bayescope-cli called with: $*"\\n' > "$3/bin/bayescope-cli"
  chmod +x "$3/bin/pip" "$3/bin/bayescope-cli"
  exit 0
fi
exec {sys.executable} "$@"
"""


@pytest.fixture
def checkout(tmp_path) -> tuple[Path, dict[str, str]]:
    """A copy of the scripts and pyproject.toml, and an environment with the stand-in python3."""
    if shutil.which("flock") is None or shutil.which("bash") is None:
        pytest.skip("needs bash and flock")
    work = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts", work / "scripts")
    shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "python3").write_text(STUB_PYTHON)
    (stubs / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "BAYESCOPE_VENV_ROOT": str(tmp_path / "venvs")}
    return work, env


def test_venv_says_each_step_and_its_time_then_prints_only_the_path(checkout):
    work, env = checkout
    first = subprocess.run(["bash", "scripts/venv.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    venv = Path(first.stdout.strip())
    assert venv.parent == Path(env["BAYESCOPE_VENV_ROOT"]) and (venv / ".complete").is_file()
    steps = [line for line in first.stderr.splitlines() if line.startswith("[bayescope setup, ")]
    assert any("installing torch" in s and "about 1 minute" in s for s in steps)
    assert [s.split("] ")[1][:3] for s in steps if "/4 " in s] == ["1/4", "2/4", "3/4", "4/4"]
    assert all(" s] " in s for s in steps) and "ready" in steps[-1]
    # a second call reuses the environment silently
    again = subprocess.run(["bash", "scripts/venv.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert again.stdout.strip() == str(venv) and "setup" not in again.stderr


def test_cli_runs_the_environments_bayescope_cli_with_the_arguments(checkout):
    work, env = checkout
    out = subprocess.run(["bash", "scripts/cli.sh", "predict", "a digit.png", "--json"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "bayescope-cli called with: predict a digit.png --json"
