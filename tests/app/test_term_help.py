"""A column's terms open their Help paragraph when clicked (issue 47, item 8): each plot's title,
and the red convergence line's "What this means" (tests/app/test_diagnostics_window.py)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt

WORDS = {"histograms": "Draws per class.", "interval": "Mean probability and interval.",
         "entropy": "Uncertainty (nats).", "variance": "Variance per class.", "correlation": "Class correlation."}


def _top_paragraph(dialog) -> str:
    cursor = dialog.text.cursorForPosition(dialog.text.viewport().rect().topLeft() + QPoint(4, 4))
    cursor.select(cursor.SelectionType.BlockUnderCursor)
    return cursor.selectedText()


@pytest.mark.parametrize("view", ["correlation", "variance"])
def test_a_plot_title_opens_its_help_paragraph(qtbot, window, view):
    column = next(iter(window.column_views.values()))
    plot = column.plots[view]
    qtbot.waitExposed(plot)
    inside = plot.data_rect().center().toPoint()
    qtbot.mouseClick(plot, Qt.MouseButton.LeftButton, pos=inside)  # the data: no help
    assert getattr(window, "help_dialog", None) is None
    title = plot.title_rect().center().toPoint()
    qtbot.mouseClick(plot, Qt.MouseButton.LeftButton, pos=title)
    dialog = window.help_dialog
    qtbot.waitExposed(dialog)
    assert dialog.text.verticalScrollBar().value() > 0  # not left at the page's top
    assert WORDS[view] in _top_paragraph(dialog)
    assert "Click the title for its help." in plot.toolTip()
    dialog.close()
