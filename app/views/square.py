"""A container that keeps its one child square and centred, whatever room it gets."""

from __future__ import annotations

from PySide6.QtWidgets import QSizePolicy, QWidget


class SquareContainer(QWidget):
    def __init__(self, child: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.child = child
        child.setParent(self)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumSize(child.minimumSize())

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        side = min(self.width(), self.height())
        self.child.setGeometry((self.width() - side) // 2, (self.height() - side) // 2, side, side)
        super().resizeEvent(event)
