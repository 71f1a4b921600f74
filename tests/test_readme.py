"""Every command in the README works as written: its code blocks are read, and each command line
is run (the CLI in-process, through the same ``main`` as ``bayescope-cli``), on fewer images and
steps where the real one takes minutes. A command that is not run says why in :data:`NOT_RUN`."""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest

from core.commands.main import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLI = "bash scripts/cli.sh"

#: Commands the test does not run, and why.
NOT_RUN = {
    "bash scripts/run.sh": "opens the window (tests/app drive the window offscreen instead)",
    "bash scripts/test.sh": "runs this whole suite, this test included",
}

#: Options that make a command small enough for a test: the same code path on fewer images,
#: steps and draws (replacing the README's value where it names one).
FAST = {
    "train": {"--limit": "300", "--eval-samples": "2"},
    "evaluate": {"--limit": "40", "--samples": "3", "--angle-step": "90"},
    "dhmc-mnist": {"--epochs": "1", "--chains": "1", "--draws": "2", "--train-size": "300",
                   "--test-limit": "100", "--methods": "SGLD"},
    "lefolgoc-gaussian": {"--seeds": "1", "--steps": "20"},
    "lefolgoc-rbf": {"--seeds": "1", "--steps": "20"},
    "predict": {"--samples": "20"},
}
#: Commands that take more than a few seconds as the README writes them: each states its time.
SLOW = {"train", "evaluate", "dhmc-mnist", "lefolgoc-gaussian", "lefolgoc-rbf"}
#: Commands whose full run takes an hour or more: each has a quick variant beside it.
SLOW_HOURS = {"train", "evaluate", "dhmc-mnist"}
#: Method settings (``--set NAME=VALUE``) replaced the same way.
FAST_SETTINGS = {"train": {"epochs": "1"}}


def readme_commands(text: str) -> list[str]:
    """The command lines of the README's ``sh`` blocks: continuations joined, comments dropped."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def _name(argv: list[str]) -> str:
    return argv[1] if argv[0] == "reproduce" else argv[0]


def fast_variant(argv: list[str]) -> list[str]:
    """``argv`` with the options of :data:`FAST` and settings of :data:`FAST_SETTINGS` for its command."""
    options = FAST.get(_name(argv), {})
    settings = FAST_SETTINGS.get(_name(argv), {})
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in options:
            out += [arg, options[arg]]
            i += 2
        elif arg == "--set" and argv[i + 1].split("=")[0] in settings:
            key = argv[i + 1].split("=")[0]
            out += [arg, f"{key}={settings[key]}"]
            i += 2
        else:
            out.append(arg)
            i += 1
    for key, value in options.items():
        if key not in out:
            out += [key, value]
    return out


def test_every_long_command_in_the_readme_states_its_time():
    """A command that takes minutes says how long beside it (``# … min`` or ``… h``), and a
    command that takes an hour or more has a quick variant (a ``quick`` comment) beside it."""
    text = README.read_text(encoding="utf-8")
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if not line.strip().startswith(CLI):
                continue
            name = _name(shlex.split(line.split("#")[0])[len(shlex.split(CLI)):])
            if name in SLOW:
                assert re.search(r"#.*\d+(\.\d+)?\s*(s|min|h)\b", line), f"{line.strip()}: no time stated beside it"
    for name in SLOW_HOURS:
        lines = [line for line in re.sub(r"\\\n\s*", " ", text).splitlines()
                 if line.strip().startswith(CLI) and f" {name} " in f"{line} "]
        assert any("quick" in line for line in lines), f"{name}: no quick variant beside the long run"


def test_the_readme_lists_the_commands_this_test_runs():
    commands = readme_commands(README.read_text(encoding="utf-8"))
    names = [c for c in commands if not c.startswith(CLI)]
    assert sorted(names) == sorted(NOT_RUN), "a README command is neither run here nor listed with a reason"
    run = [shlex.split(c)[len(shlex.split(CLI)):] for c in commands if c.startswith(CLI)]
    assert {_name(a) for a in run} >= {"train", "predict", "methods", "evaluate", "dhmc-mnist"}


def test_every_cli_command_in_the_readme_runs(shared_data, tmp_path, monkeypatch, capsys):
    """In README order (predict reads the posterior that train wrote), from a copy of the checkout's
    layout: ``resources`` and ``../shared/data`` are where the README's relative paths say."""
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "resources").symlink_to(ROOT / "resources")
    (tmp_path / "shared").symlink_to(shared_data.parent)
    monkeypatch.chdir(work)
    commands = [c for c in readme_commands(README.read_text(encoding="utf-8")) if c.startswith(CLI)]
    done: set[tuple[str, ...]] = set()
    for command in commands:
        argv = shlex.split(command)[len(shlex.split(CLI)):]
        expanded = [m for a in argv for m in (sorted(glob.glob(a)) if "*" in a else [a])]  # as the shell does
        if "*" in command:
            assert len(expanded) > len(argv), f"{command}: the pattern matched nothing"
        fast = fast_variant(expanded)
        if tuple(sorted(fast)) in done:  # a quick variant beside its full run: the same small run
            continue
        done.add(tuple(sorted(fast)))
        code = main(fast)
        captured = capsys.readouterr()
        assert code == 0, f"{command}\n{captured.err[-2000:]}"
    assert (work / "lenet.pt").is_file() and any((work / "eval").iterdir())
    assert any((work / "results" / "dhmc").iterdir()) and any((work / "results" / "lefolgoc").iterdir())


@pytest.mark.parametrize("argv, fast", [
    (["train", "--set", "epochs=15", "--set", "lr=2e-3", "--out", "x.pt"],
     ["train", "--set", "epochs=1", "--set", "lr=2e-3", "--out", "x.pt", "--limit", "300", "--eval-samples", "2"]),
    (["evaluate", "--limit", "9000", "--out", "e"], ["evaluate", "--limit", "40", "--out", "e", "--samples", "3",
                                                     "--angle-step", "90"]),
    (["methods"], ["methods"]),
])
def test_fast_variant_replaces_only_the_slow_options(argv, fast):
    assert fast_variant(argv) == fast
