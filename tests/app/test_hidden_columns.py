"""The columns are fed only while their tab is in front (issue 49: a stroke drawn beside the Sweep
tab fed four columns' plots and words nobody saw); the predictions that arrived meanwhile are
drawn when the tab shows again, exactly as if they had been fed at once."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QImage

from app.views.column import ColumnView
from tests.app.test_main_window import at, drag, settle


def _pixels(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_ARGB32)
    return np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine()).copy()


def _columns(window) -> list[np.ndarray]:
    return [_pixels(view.grab().toImage()) for view in window.column_views.values()]


def _feeds(monkeypatch) -> list[str]:
    fed: list[str] = []
    show_column = ColumnView.show_column

    def counted(view, *args, **kwargs):
        fed.append(view.key)
        return show_column(view, *args, **kwargs)

    monkeypatch.setattr(ColumnView, "show_column", counted)
    return fed


def test_a_hidden_tab_is_fed_when_shown_as_if_fed_at_once(qtbot, window, monkeypatch):
    canvas = window.canvas
    drag(qtbot, canvas, [at(canvas, 0.5, 0.15), at(canvas, 0.5, 0.5), at(canvas, 0.5, 0.85)])  # a 1
    settle(qtbot, window)
    first = _columns(window)
    texts = [view.verdict.text() for view in window.column_views.values()]

    fed = _feeds(monkeypatch)
    window.views.setCurrentIndex(1)  # the Sweep tab in front: "This input" hidden
    qtbot.waitUntil(window.columns_scroll.isHidden)
    drag(qtbot, canvas, [at(canvas, 0.25, 0.3), at(canvas, 0.75, 0.3), at(canvas, 0.4, 0.85)])  # a 7 over it
    settle(qtbot, window)
    assert fed == []  # every prediction of the stroke arrived, none was drawn
    assert [view.verdict.text() for view in window.column_views.values()] == texts

    window.views.setCurrentIndex(0)
    qtbot.waitUntil(lambda: not window.columns_scroll.isHidden())
    assert sorted(fed) == sorted(window.column_views)  # each column once, with its latest prediction
    qtbot.wait(30)
    shown = _columns(window)
    assert any(not np.array_equal(a, b) for a, b in zip(first, shown, strict=True))  # the 7's numbers
    # the same pixels as columns fed the same predictions while in front
    for key in window.column_views:
        window.columns_scroll.show_prediction(window.workspace, key)
    qtbot.wait(30)
    assert all(np.array_equal(a, b) for a, b in zip(shown, _columns(window), strict=True))


def test_predictions_left_unfed_are_dropped_when_the_input_is_cleared(qtbot, window, monkeypatch):
    canvas = window.canvas
    window.views.setCurrentIndex(1)
    qtbot.waitUntil(window.columns_scroll.isHidden)
    drag(qtbot, canvas, [at(canvas, 0.5, 0.15), at(canvas, 0.5, 0.85)])
    settle(qtbot, window)
    window.clear_drawing()
    fed = _feeds(monkeypatch)
    window.views.setCurrentIndex(0)
    qtbot.waitUntil(lambda: not window.columns_scroll.isHidden())
    assert fed == []  # nothing stale drawn over the cleared columns
    assert all(view.verdict.text() == window._empty_message() for view in window.column_views.values())
