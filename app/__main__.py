"""Launch the bayescope GUI: ``bayescope [IMAGE] [--posterior A B ...] [--self-test]``."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bayescope", description="Explore the predictive uncertainty of image classifiers.")
    parser.add_argument("image", nargs="?", help="an image of a digit to open (PNG, JPEG ...)")
    parser.add_argument("--posterior", nargs="+", metavar="FILE", help="posterior files to show side by side")
    parser.add_argument("--self-test", action="store_true",
                        help="check the bundled posteriors and the window, print one line per check, and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        from app.selftest import run_self_test

        return run_self_test()

    from PySide6.QtWidgets import QApplication

    from app.main import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("bayescope")
    app.setOrganizationName("bayescope")
    window = MainWindow(posteriors=args.posterior, image=args.image)
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
