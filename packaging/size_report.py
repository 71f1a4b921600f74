"""Tables of what takes the space in a built app folder, and of what each trim saved.

    python packaging/size_report.py BUILT_APP_FOLDER TRIMS_JSON > sizes.md

Sizes are of the files as installed (uncompressed), in MB of 10^6 bytes, like the .deb's
sizes. Each file is counted in the first group whose pattern matches its path inside the
app folder.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from pathlib import Path

#: (group, patterns relative to the app folder's _internal/ or top level), first match wins.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch: CPU kernels (libtorch_cpu)", ("torch/lib/libtorch_cpu*",)),
    ("torch: other native libraries", ("torch/lib/*", "torch/*.so", "torch/_C*")),
    ("torch: Python code", ("torch/*", "torchgen/*", "functorch/*")),
    ("sympy, mpmath, networkx (torch's symbolic tools)", ("sympy/*", "mpmath/*", "networkx/*")),
    ("Qt 6 libraries", ("PySide6/Qt/lib/*", "PySide6/Qt6*")),
    ("Qt plugins", ("PySide6/Qt/plugins/*", "PySide6/plugins/*")),
    ("PySide6 and shiboken6 bindings", ("PySide6/*", "shiboken6/*")),
    ("NumPy", ("numpy/*", "numpy.libs/*")),
    ("matplotlib, fontTools, kiwisolver", ("matplotlib/*", "fontTools/*", "kiwisolver/*", "matplotlib.libs/*")),
    ("Pillow", ("PIL/*", "pillow.libs/*")),
    ("pyqtgraph, superqt", ("pyqtgraph/*", "superqt/*")),
    ("bundled posteriors and examples", ("resources/*",)),
    ("programs and their Python modules (PYZ)", ("bayescope", "bayescope-cli", "bayescope.exe", "bayescope-cli.exe")),
    ("Python runtime and standard library", ("libpython*", "python3*", "base_library.zip", "lib-dynload/*")),
    ("system libraries (X11/xcb, fonts, GLib, D-Bus, OpenSSL, ICU …)", ("*.so*", "*.dll")),
)
OTHER = "everything else"


def group_of(relative: str) -> str:
    inside = relative.split("_internal/", 1)[-1]
    for name, patterns in GROUPS:
        if any(fnmatch.fnmatchcase(inside, p) or fnmatch.fnmatchcase(relative, p) for p in patterns):
            return name
    return OTHER


def folder_sizes(folder: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for dirpath, _dirs, files in os.walk(folder):
        for file in files:
            path = Path(dirpath) / file
            if path.is_symlink():
                continue
            relative = path.relative_to(folder).as_posix()
            sizes[group_of(relative)] = sizes.get(group_of(relative), 0) + path.stat().st_size
    return sizes


def main(folder: str, trims_json: str) -> None:
    sizes = folder_sizes(Path(folder))
    total = sum(sizes.values())
    print("## What takes the space (installed, uncompressed)\n")
    print("| part | MB | share |")
    print("| --- | ---: | ---: |")
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {size / 1e6:.1f} | {100 * size / total:.0f}% |")
    print(f"| **app folder** | **{total / 1e6:.1f}** | 100% |")
    trims = json.loads(Path(trims_json).read_text())
    saved = sum(size for _count, size in trims.values())
    print("\n## What each trim saved (files PyInstaller collected, left out)\n")
    print("| trim | files | MB |")
    print("| --- | ---: | ---: |")
    for name, (count, size) in sorted(trims.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {count} | {size / 1e6:.1f} |")
    print(f"| **all trims** | | **{saved / 1e6:.1f}** |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
