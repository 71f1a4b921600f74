"""Strip the static symbol tables from the shared libraries of a built app folder, safely.

    python packaging/strip_libraries.py BUILT_APP_FOLDER TRIMS_JSON

Libraries keep their static symbol tables and debug sections (libtorch_cpu alone ~90 MB, the
Python runtime's libpython 17 MB); ``strip --strip-unneeded`` removes them and keeps the
dynamic symbols that loading needs, as Debian's dh_strip does. Left alone:

- the libraries auditwheel vendored (``*.libs`` folders): patchelf rewrote them, and strip
  can break such files;
- the programs (``bayescope``): PyInstaller appends the PYZ archive to the file.

Every stripped library that loaded (``dlopen``, in a child process) before stripping must
still load after; one that does not gets its original back. The saving is added to the trim
report, split into torch's libraries and the others.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TORCH = "symbol tables of torch libraries (strip)"
OTHER = "symbol tables of other libraries (strip: libpython, extension modules, Qt)"

_LOADS = r"""
import ctypes, os, sys
for line in sys.stdin:
    path = line.rstrip("\n")
    try:
        ctypes.CDLL(path, mode=os.RTLD_LAZY | os.RTLD_LOCAL)
        print("ok " + path, flush=True)
    except OSError:
        print("no " + path, flush=True)
"""


def is_shared_library(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and (path.suffix == ".so" or ".so." in path.name)


def has_symtab(path: Path) -> bool:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True).stdout
    return " .symtab " in out


def candidates(internal: Path) -> list[Path]:
    found = []
    for path in sorted(internal.rglob("*")):
        if not is_shared_library(path):
            continue
        if any(part.endswith(".libs") for part in path.relative_to(internal).parts):
            continue
        if has_symtab(path):
            found.append(path)
    return found


def loadable(paths: list[Path]) -> set[str]:
    """The paths that ``dlopen`` accepts, tried in a child process so that a broken library
    cannot take the build down."""
    if not paths:
        return set()
    out = subprocess.run([sys.executable, "-c", _LOADS], input="\n".join(map(str, paths)) + "\n",
                         capture_output=True, text=True).stdout
    return {line[3:] for line in out.splitlines() if line.startswith("ok ")}


def strip_folder(app: Path) -> tuple[dict[str, list[int]], list[str], int]:
    internal = app / "_internal"
    paths = candidates(internal)
    before = loadable(paths)
    saved = {TORCH: [0, 0], OTHER: [0, 0]}
    restored: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bayescope-unstripped-") as backup_dir:
        backup = Path(backup_dir)
        for path in paths:
            keep = backup / path.relative_to(internal)
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, keep)
            subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
        after = loadable(paths)
        for path in paths:
            relative = path.relative_to(internal).as_posix()
            keep = backup / relative
            if str(path) in before and str(path) not in after:
                shutil.copy2(keep, path)
                restored.append(relative)
                continue
            group = saved[TORCH if relative.startswith("torch/") else OTHER]
            group[0] += 1
            group[1] += keep.stat().st_size - path.stat().st_size
    return saved, restored, len(before)


def main(app: str, trims_json: str) -> None:
    saved, restored, loaded = strip_folder(Path(app))
    report_path = Path(trims_json)
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    report.update(saved)
    report_path.write_text(json.dumps(report, indent=1))
    files = sum(count for count, _ in saved.values())
    size = sum(size for _, size in saved.values())
    message = f"stripped {files} libraries, {size / 1e6:.1f} MB; {loaded} of them load on their own, before and after"
    if restored:
        message += f"; put back unstripped, as they no longer loaded: {', '.join(restored)}"
    print(message, file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:3])
