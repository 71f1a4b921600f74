"""Launch the bayescope GUI: ``bayescope [FILE ...] [--posterior A B ...] [--self-test]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bayescope", description="Explore the predictive uncertainty of image classifiers.")
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="files to open as if dropped on the window: a posterior file (.pt) becomes a column, "
                             "an image (PNG, JPEG, ...) opens in the Image tab, or in the Face tab if that is open")
    parser.add_argument("--posterior", nargs="+", metavar="FILE",
                        help="posterior files to show side by side instead of last time's (or the default) columns")
    parser.add_argument("--self-test", action="store_true",
                        help="check the bundled posteriors and the window, print one line per check, and exit")
    return parser


def _log_to_file() -> None:
    """Keep a log in the user's log folder: the dialogs say what happened, the log says how."""
    import logging

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

    _log_to_file()
    install_excepthook()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("bayescope")
    app.setOrganizationName("bayescope")
    app.setWindowIcon(_app_icon())
    # The engine (torch) and the plots take a second or two to import: say so at once.
    splash = _starting_splash()
    from app.controllers.drop import COMMAND_LINE
    from app.main import MainWindow
    from app.workers import (
        PythonThreadCall,
        collect_garbage_in_gui_thread,
        stop_workers,
        worker_classes,
    )

    garbage_collector = collect_garbage_in_gui_thread()
    # No collection until the columns' weights are in: what the engine's import makes lives until
    # exit (frozen by load_columns), and walking it cost the import 80–90 ms of the interpreter.
    garbage_collector.timer.stop()
    app.aboutToQuit.connect(stop_workers)  # a cancelled face description stops its processes
    window = MainWindow(posteriors=args.posterior, defer_columns=True)
    window.show()
    splash.close()
    # The window works (drawing, tabs, menus) while the engine imports in the background;
    # the columns appear when their posteriors are read.
    # with the modules of the methods of the columns shown from their records, so that reading
    # their files imports nothing more in the window's thread
    methods = {column.posterior.method for column in window.workspace.columns}
    engine = PythonThreadCall(lambda: _import_engine(methods))
    engine.finished.connect(worker_classes)  # superqt's workers, before the first prediction asks for one
    engine.finished.connect(window.load_columns)
    engine.finished.connect(garbage_collector.timer.start)
    engine.start()
    # Opened as a drop of them is, once the columns are read: a file that cannot be used is
    # explained over the window, one dialog for all of them.
    window.open_files(args.files, COMMAND_LINE)
    return app.exec()


def _import_engine(methods: Iterable[str] = ()) -> None:
    """Import torch, the engine and the modules of ``methods`` (the others': when first needed)."""
    import core.analysis.predictive  # noqa: F401
    import core.engine.store  # noqa: F401 — torch and the method registry
    from core.engine.inference import METHODS

    for name in methods:
        if name in METHODS:  # an unknown one is explained when its file is read
            METHODS[name].load()


def _app_icon():
    from PySide6.QtGui import QIcon

    from core.engine.resources import ICON_SIZES, icon_path

    icon = QIcon()
    for size in ICON_SIZES:
        icon.addFile(str(icon_path(size)))
    return icon


def _starting_splash():
    """A small window with the icon and "Starting bayescope…", shown while the engine loads.

    A plain label, not ``QSplashScreen``: that one waits up to a second for the window
    system to confirm the window is visible, which some (and the offscreen) platforms never do.
    """
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QPixmap
    from PySide6.QtWidgets import QApplication, QLabel

    from core.engine.resources import icon_path

    splash = QLabel()
    splash.setWindowFlags(Qt.WindowType.SplashScreen | Qt.WindowType.FramelessWindowHint)
    picture = QPixmap(str(icon_path(128)))
    splash.setText(f"<div align='center'><img src='{icon_path(128).as_posix()}'><br>Starting bayescope…</div>"
                   if not picture.isNull() else "Starting bayescope…")
    splash.setStyleSheet("QLabel { background: white; padding: 24px; font-size: 14pt; }")
    splash.show()
    QApplication.processEvents()
    return splash


if __name__ == "__main__":
    sys.exit(main())
