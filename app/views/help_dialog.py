"""The help window (F1): how to read the columns, and the Dataset tab's measures, in one scrolling page."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

from app.help import DATASET_HELP, HOW_TO_READ


class HelpDialog(QDialog):
    """One page of help; :meth:`show_section` scrolls to a section."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("How to read this window")
        self.resize(720, 620)
        self.text = QTextBrowser()
        self.text.setOpenExternalLinks(True)
        self.text.setHtml(HOW_TO_READ + DATASET_HELP)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)

    def show_section(self, anchor: str | None) -> None:
        """Scroll to the section named ``anchor`` (``"dataset"``), or to the top for None."""
        if anchor is None:
            self.text.verticalScrollBar().setValue(0)
        else:
            self.text.scrollToAnchor(anchor)
