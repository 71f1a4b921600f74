"""The Image tab judging one photo with some files of a features tier (docs/zoo.md's screenshot).

Opens the window offscreen with the given posterior files as its columns (the first one's marks,
when it is HMC, show on the others), loads the photo, waits until every column has judged it and
saves the window as a PNG. The window's settings are read from and written to a temporary folder,
so a person's own are left alone.

Run: ``QT_QPA_PLATFORM=offscreen python benchmarks/screenshot_own_network.py PHOTO OUT.png
TIER/features_features_hmc.pt TIER/features_features_network.pt ... [--size 1500x950]``
(after ``benchmarks/demo_own_network.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("photo", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("posteriors", nargs="+", type=Path)
    parser.add_argument("--size", default="1500x950", help="the window's size, WxH")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the columns")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="bayescope-shot-")  # not the person's settings

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from app.main import MainWindow

    window = MainWindow(posteriors=[str(p) for p in args.posteriors])
    window.resize(width, height)
    window.show()
    if not window.load_image_file(args.photo):
        raise SystemExit(f"error: the window could not open {args.photo.name}")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        app.processEvents()
        if (not window.inference.busy and not window._throttle.isActive() and not window._refine.isActive()
                and all(c.prediction is not None for c in window.workspace.columns)):
            break
        time.sleep(0.05)
    else:
        raise SystemExit("error: the columns did not finish judging the photo in time")
    for _ in range(20):  # let the plots draw what they were given
        app.processEvents()
        time.sleep(0.05)
    if not window.grab().save(str(args.out)):
        raise SystemExit(f"error: could not write {args.out}")
    for column, view in zip(window.workspace.columns, window.column_views.values(), strict=False):
        print(view.title.text().replace("\n", " "), "|", [round(float(v), 3) for v in column.prediction.summary.mean])
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
