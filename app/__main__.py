"""Launch the bayescope GUI."""

from __future__ import annotations

import sys


def main() -> int:
    from PySide6.QtWidgets import QApplication

    from app.main import MainWindow

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("bayescope")
    window = MainWindow()
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
