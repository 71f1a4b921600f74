"""The Rotate panel holds still while a sweep runs: its Cancel button and progress bar keep their
room when hidden, so the image, the slider and the Sweep button do not jump (issue 47, item 14)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint


def test_nothing_moves_when_a_sweep_starts_and_ends(qtbot):
    from app.views.modes import RotatePanel

    panel = RotatePanel(lambda name: (_ for _ in ()).throw(RuntimeError("no data here")))
    qtbot.addWidget(panel)
    panel.resize(440, 600)
    panel.show()
    qtbot.waitExposed(panel)
    image = np.zeros((28, 28), np.float32)
    image[6:22, 12:16] = 1.0
    panel.set_drawing(image)

    def places():
        qtbot.wait(20)  # the layout runs on the event loop
        return {name: (w.mapTo(panel, QPoint(0, 0)), w.size()) for name, w in
                (("thumbnail", panel.thumbnail), ("angle", panel.angle), ("sweep", panel.sweep))}

    idle = places()
    panel.set_sweep_running(True)
    assert panel.progress.isVisible() and panel.cancel.isVisible()
    assert places() == idle
    panel.set_sweep_running(False)
    assert places() == idle
