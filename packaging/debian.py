"""The Debian package's metadata, written into the staged package tree before ``dpkg-deb --build``.

    python packaging/debian.py maintainer
        the Maintainer field for this build, or (exit status 1) why a release build has none
    python packaging/debian.py write STAGE VERSION COMMIT DATE_EPOCH GLIBC
        DEBIAN/control (from packaging/linux/control.in), DEBIAN/md5sums and
        usr/share/doc/bayescope/changelog.gz

The Maintainer is the field a releaser sets: ``BAYESCOPE_MAINTAINER="name <address>"`` (the
release workflow passes the repository variable of that name). A release build
(``BAYESCOPE_RELEASE=1``, which the workflow sets on a version tag) stops with a sentence when
it is unset or a placeholder (an ``example.*`` or ``.invalid`` address, ``localhost``): a
package must name someone who answers. A local build says it is unreleased instead: the
Maintainer "bayescope unreleased build", and the changelog's distribution ``UNRELEASED``.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import sys
from email.utils import formatdate
from pathlib import Path

PACKAGE = "bayescope"
HERE = Path(__file__).resolve().parent
CONTROL_TEMPLATE = HERE / "linux" / "control.in"
CHANGELOG = "changelog.gz"

#: What a local build names as its maintainer: not an address anyone reads.
UNRELEASED_MAINTAINER = "bayescope unreleased build <unreleased@bayescope.invalid>"

_FIELD = re.compile(r"^(?P<name>[^<>@\n]*[^<>@\s]) <(?P<address>[^<>@\s]+@(?P<domain>[^<>@\s]+\.[A-Za-z]{2,}))>$")
#: Domains reserved for examples and tests (RFC 2606, RFC 6761) and the local machine.
_PLACEHOLDER_DOMAIN = re.compile(r"(^|\.)(example(\.(com|org|net))?|invalid|test|localhost|localdomain|local)$", re.I)


class MaintainerError(ValueError):
    """The Maintainer field cannot be used for this build; the message says what to do."""


def is_release(env: dict[str, str]) -> bool:
    return env.get("BAYESCOPE_RELEASE", "").strip().lower() in ("1", "true", "yes")


def maintainer(env: dict[str, str]) -> str:
    """The Maintainer field: ``BAYESCOPE_MAINTAINER`` when it is a real ``name <address>``;
    for a local build without one, :data:`UNRELEASED_MAINTAINER`; a release build without a
    real one raises :class:`MaintainerError`."""
    value = env.get("BAYESCOPE_MAINTAINER", "").strip()
    match = _FIELD.match(value)
    real = match is not None and not _PLACEHOLDER_DOMAIN.search(match.group("domain"))
    if real:
        return value
    if not is_release(env):
        return UNRELEASED_MAINTAINER
    why = "is not set" if not value else (f"is {value!r}, a placeholder address" if match else
                                          f"is {value!r}, not of the form 'name <address>'")
    raise MaintainerError(
        f"A release build needs the name and address of whoever answers for the package, and "
        f"BAYESCOPE_MAINTAINER {why}. Set it, e.g. BAYESCOPE_MAINTAINER='bayescope maintainers "
        f"<you@your-domain.org>' (in the release workflow: the repository variable "
        f"BAYESCOPE_MAINTAINER, under Settings → Secrets and variables → Actions → Variables).")


def changelog(version: str, commit: str, date_epoch: int, env: dict[str, str]) -> str:
    """The Debian changelog: one entry, for this build."""
    if is_release(env):
        distribution, urgency = "unstable", "medium"
        line = f"Release {version}, built from commit {commit[:12]}."
    else:
        distribution, urgency = "UNRELEASED", "low"
        line = f"Unreleased local build of commit {commit[:12]}; not for distribution."
    date = formatdate(date_epoch, localtime=False, usegmt=False)
    return (f"{PACKAGE} ({version}) {distribution}; urgency={urgency}\n\n"
            f"  * {line}\n\n"
            f" -- {maintainer(env)}  {date}\n")


def installed_size_kib(stage: Path) -> int:
    """Installed-Size as dpkg-gencontrol counts it: each file's size rounded up to KiB, one
    KiB per link and folder, DEBIAN/ left out."""
    total = 0
    for root, dirs, files in os.walk(stage):
        rel = Path(root).relative_to(stage)
        if rel.parts[:1] == ("DEBIAN",):
            continue
        total += sum(1 for name in dirs if rel.parts or name != "DEBIAN")
        for name in files:
            path = Path(root) / name
            total += 1 if path.is_symlink() else -(-path.stat().st_size // 1024)
    return total


def md5sums(stage: Path) -> str:
    """DEBIAN/md5sums: every regular file outside DEBIAN/, by path, as ``md5sum`` writes it."""
    lines = []
    for root, dirs, files in os.walk(stage):
        dirs.sort()
        rel_root = Path(root).relative_to(stage)
        if rel_root.parts[:1] == ("DEBIAN",):
            dirs[:] = []
            continue
        for name in sorted(files):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            digest = hashlib.md5()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            lines.append(f"{digest.hexdigest()}  {(rel_root / name).as_posix()}")
    return "\n".join(sorted(lines, key=lambda line: line[34:])) + "\n"


def write(stage: Path, version: str, commit: str, date_epoch: int, glibc: str, env: dict[str, str]) -> None:
    """Write the changelog, then DEBIAN/control and DEBIAN/md5sums (which count the changelog).

    The changelog is ``changelog.gz``, not ``changelog.Debian.gz``: the version has no Debian
    revision (0.1.0, not 0.1.0-1) because the packaging is part of the project itself, which
    makes this a native package, and Debian Policy 12.7 names a native package's changelog so
    (lintian: wrong-name-for-changelog-of-native-package).
    """
    doc = stage / "usr" / "share" / "doc" / PACKAGE
    doc.mkdir(parents=True, exist_ok=True)
    text = changelog(version, commit, date_epoch, env).encode()
    (doc / CHANGELOG).write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
    (doc / CHANGELOG).chmod(0o644)
    debian = stage / "DEBIAN"
    debian.mkdir(exist_ok=True)
    control = CONTROL_TEMPLATE.read_text()
    for key, value in {"VERSION": version, "INSTALLED_SIZE": str(installed_size_kib(stage)), "GLIBC": glibc,
                       "MAINTAINER": maintainer(env)}.items():
        control = control.replace(f"@{key}@", value)
    if "@" in re.sub(r"<[^>]*>", "", control):
        raise ValueError(f"control.in has a field left to fill: {control}")
    (debian / "control").write_text(control)
    (debian / "md5sums").write_text(md5sums(stage))
    for name in ("control", "md5sums"):
        (debian / name).chmod(0o644)


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    try:
        if argv[:1] == ["maintainer"] and len(argv) == 1:
            print(maintainer(env))
            return 0
        if argv[:1] == ["write"] and len(argv) == 6:
            _, stage, version, commit, date_epoch, glibc = argv
            write(Path(stage), version, commit, int(date_epoch), glibc, env)
            return 0
    except MaintainerError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
