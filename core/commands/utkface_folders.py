"""``bayescope-cli utkface-folders``: lay UTKFace's faces out as eight age-group folders.

``OUT/train/<group>/`` and ``OUT/test/<group>/`` (groups ``00-02``, ``03-07``, ``08-14``,
``15-24``, ``25-37``, ``38-47``, ``48-59``, ``60+``: two-digit ages, so that they sort in order),
split as the descriptor heads' faces are (no photo on both sides), so that
``bayescope-cli train --dataset OUT`` trains a colour network from the pixels and is tested on
the same faces as ``train --dataset utkface``. The images are copied, not decoded; a stopped
run goes on where it stopped.
"""

from __future__ import annotations

import argparse

from core.commands.console import bar_callback, progress_bar, say
from core.engine.data.utkface import (
    AGE_FOLDERS,
    default_age_folders,
    open_utkface,
    split_unseen,
    write_age_folders,
)
from core.engine.runner import drain


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--utkface", metavar="PATH",
                        help="UTKFace's archive (UTKFace.tar.gz or UTKFace-128.tar.gz) or its folder of images "
                        "(default: the user cache's data/utkface)")
    parser.add_argument("--out", metavar="FOLDER",
                        help=f"where the folders go (default: {default_age_folders()})")


def run(args: argparse.Namespace) -> int:
    source = open_utkface(args.utkface)
    out = args.out or default_age_folders()
    bar = progress_bar(len(source.names), "writing faces")
    try:
        counts = drain(write_age_folders(source, out), bar_callback(bar))
    finally:
        bar.close()
    for split, per_group in counts.items():
        groups = ", ".join(f"{g} {n:,}" for g, n in zip(AGE_FOLDERS, per_group, strict=True))
        say(f"{split}: {sum(per_group):,} faces ({groups})")
    sides = split_unseen(source)
    if len(sides.seen) or len(sides.repeated):
        seen, repeated = len(sides.seen), len(sides.repeated)
        say(f"left out of test/, since UTKFace holds some photos twice under two names: {seen:,} byte-for-byte "
            f"{'copy' if seen == 1 else 'copies'} of training faces and {repeated:,} "
            f"{'copy' if repeated == 1 else 'copies'} of other test faces")
    if source.skipped:
        say(f"{len(source.skipped):,} files of the archive were left out (no age in their names)")
    say(f"wrote {out}; train a colour network on it with: bayescope-cli train --dataset {out} --method mc_dropout")
    return 0
