"""The status bar's word on a training run going on while its dialog is hidden."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget


class RunIndicator(QWidget):
    """The status bar's word on a training run going on while its dialog is hidden: a small
    progress bar and “Training SGLD… 40 %”; a click shows the training dialog again.

    Signals
    -------
    clicked
        The person clicked it.
    """

    clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)  # the words stay beside the bar, never under its fill
        self.bar.setFixedSize(90, 12)
        self.label = QLabel()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.addWidget(self.bar)
        layout.addWidget(self.label)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        tip = ("A posterior is training in the background. Click to show the training window: its "
               "trace, the time left, and Cancel. When it is done, it is added as a column.")
        for widget in (self, self.bar, self.label):
            widget.setToolTip(tip)

    def show_progress(self, text: str, step: int, total: int) -> None:
        if total:
            self.bar.setRange(0, total)
            self.bar.setValue(step)
        else:
            self.bar.setRange(0, 0)  # busy: nothing counted yet
        self.label.setText(text)

    def mouseReleaseEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit()
        super().mouseReleaseEvent(event)
