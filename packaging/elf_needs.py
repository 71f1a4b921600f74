"""What the app folder needs from the system's C and C++ runtimes: the oldest glibc it runs on.

Every ELF file in the folder (the program itself, the bundled libraries, the extension
modules, torch's helper programs) names the symbol versions it needs from each library it
loads (``objdump -p``, *Version References*); the dynamic loader refuses to start a program
when the system's library lacks one of them. Versions needed from a library the folder
bundles itself are left out; the rest, by family (``GLIBC_``, ``GLIBCXX_``, ``CXXABI_``,
``GCC_``), give the minimum: the highest ``GLIBC_`` version is the oldest glibc that runs the
app. Earlier builds looked at ``*.so*`` files only and missed the program and helper programs.

    python packaging/elf_needs.py APP            # a table: family, minimum, the file that needs it
    python packaging/elf_needs.py APP --glibc    # the glibc minimum only, e.g. 2.36
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

#: Version families and the Debian package that provides each from the system.
FAMILIES = {"GLIBC": "libc6", "GLIBCXX": "libstdc++6", "CXXABI": "libstdc++6", "GCC": "libgcc-s1"}

_REQUIRED = re.compile(r"^\s+required from (\S+):$")
_VERSION = re.compile(r"^\s+0x[0-9a-f]+ 0x[0-9a-f]+ \d+ ([A-Z_]+)_([0-9][0-9.]*)$")


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def version_references(path: Path) -> dict[str, set[tuple[str, str]]]:
    """``{library: {(family, version), ...}}`` that ``path`` needs, from ``objdump -p``."""
    text = subprocess.run(["objdump", "-p", str(path)], capture_output=True, text=True, check=True).stdout
    needs: dict[str, set[tuple[str, str]]] = {}
    library = None
    for line in text.splitlines():
        match = _REQUIRED.match(line)
        if match:
            library = match.group(1)
            needs.setdefault(library, set())
            continue
        match = _VERSION.match(line)
        if match and library is not None:
            needs[library].add((match.group(1), match.group(2)))
        elif not line.startswith(" "):
            library = None
    return needs


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def minimum_versions(app: Path) -> dict[str, tuple[str, str]]:
    """``{family: (highest version needed, the file that needs it)}`` for the libraries the
    folder does not bundle (every regular ELF file, whatever its name)."""
    files = [Path(root) / name for root, _dirs, names in os.walk(app) for name in names]
    files = [p for p in files if p.is_file() and not p.is_symlink()]
    bundled = {p.name for p in files}
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(files):
        if not is_elf(path):
            continue
        for library, versions in version_references(path).items():
            if os.path.basename(library) in bundled:
                continue
            for family, version in versions:
                if family in FAMILIES and (family not in found or _key(version) > _key(found[family][0])):
                    found[family] = (version, str(path.relative_to(app)))
    return found


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    found = minimum_versions(Path(argv[0]))
    if "--glibc" in argv[1:]:
        if "GLIBC" not in found:
            print(f"no ELF file in {argv[0]} needs a glibc version", file=sys.stderr)
            return 1
        print(found["GLIBC"][0])
        return 0
    for family, (version, path) in sorted(found.items()):
        print(f"{family}\t{version}\t{FAMILIES[family]}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
