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


def _log_to_file() -> None:
    """Keep a log in the user's log folder: the dialogs say what happened, the log says how."""
    import logging
    from pathlib import Path

    import platformdirs

    folder = Path(platformdirs.user_log_dir("bayescope"))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        logging.basicConfig(filename=folder / "bayescope.log", level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    except OSError:
        logging.basicConfig(level=logging.WARNING)


def install_excepthook() -> None:
    """An error nobody caught becomes a dialog with one sentence (and a log entry), not a crash."""
    import logging
    import traceback

    def hook(kind, value, tb) -> None:
        logging.getLogger("bayescope").error("unexpected error:\n%s", "".join(traceback.format_exception(kind, value, tb)))
        from PySide6.QtWidgets import QApplication, QMessageBox

        if QApplication.instance() is not None:
            reason = str(value) or "no reason was given"
            QMessageBox.critical(None, "Something went wrong",
                                 f"bayescope hit an unexpected problem: {reason}\n\nYour work is kept; "
                                 "the details are in the log file (Help → About says where).")

    sys.excepthook = hook


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        from app.selftest import run_self_test

        return run_self_test()

    from PySide6.QtWidgets import QApplication

    from app.main import MainWindow
    from app.workers import collect_garbage_in_gui_thread

    _log_to_file()
    install_excepthook()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("bayescope")
    app.setOrganizationName("bayescope")
    garbage_collector = collect_garbage_in_gui_thread()  # noqa: F841 — kept alive until exit
    window = MainWindow(posteriors=args.posterior, image=args.image)
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
