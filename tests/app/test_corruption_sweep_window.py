"""The Rotate tab's corruption choice, its severity slider and the corruption sweep (issue 48, item 2)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt

from core.engine.data.corruptions import corrupt
from core.engine.data.preprocess import rotate_image
from tests.app.test_main_window import settle


def ring() -> np.ndarray:
    yy, xx = np.mgrid[:28, :28]
    return np.clip(1.0 - np.abs(np.hypot(yy - 13.5, xx - 13.5) - 7.0) / 2.0, 0, 1).astype(np.float32)


def panel_with_drawing(qtbot):
    from app.views.modes import RotatePanel

    panel = RotatePanel(lambda name: None)
    qtbot.addWidget(panel)
    panel.set_drawing(ring(), "your drawing")
    return panel


class TestSweepChoice:
    def test_rotation_first_and_no_severity_until_a_corruption_is_chosen(self, qtbot):
        panel = panel_with_drawing(qtbot)
        panel.show()
        kinds = [panel.kind.itemData(i) for i in range(panel.kind.count())]
        assert kinds == ["rotation", "noise", "blur", "contrast", "occlusion", "shift"]
        assert panel.sweep_kind() == "rotation" and not panel.severity_row.isVisible()
        assert panel.sweep.text() == "Sweep 0–180°"
        panel.kind.setCurrentIndex(kinds.index("noise"))
        assert panel.severity_row.isVisible() and panel.sweep.text() == "Sweep severity 0–5"
        assert "0.08" in panel.severity.toolTip()

    def test_the_severity_slider_corrupts_the_image_shown(self, qtbot):
        panel = panel_with_drawing(qtbot)
        panel.kind.setCurrentIndex(panel.kind.findData("blur"))
        panel.angle.setValue(30)
        panel.severity.setValue(3)
        shown, label = panel.current_input()
        assert np.array_equal(shown, corrupt(rotate_image(ring(), 30), "blur", 3.0, 0))
        assert label == "your drawing rotated 30°, blur at severity 3"
        # severity 0 is the rotated image itself
        panel.severity.setValue(0)
        assert np.array_equal(panel.current_input()[0], rotate_image(ring(), 30))
        # the corruption sweep starts from the turned image, the rotation sweep from the unturned one
        assert np.array_equal(panel.sweep_base()[0], rotate_image(ring(), 30))
        panel.kind.setCurrentIndex(0)
        assert np.array_equal(panel.sweep_base()[0], ring())
        assert panel.sweep_severity() == 0.0  # the rotation leaves the image uncorrupted
        assert np.array_equal(panel.current_input()[0], rotate_image(ring(), 30))

    def test_keyboard_reaches_the_choice_and_steps_the_severity(self, qtbot):
        panel = panel_with_drawing(qtbot)
        panel.show()
        qtbot.waitExposed(panel)
        panel.kind.setFocus()
        qtbot.keyClick(panel.kind, Qt.Key.Key_Down)  # Rotation → Gaussian noise
        assert panel.sweep_kind() == "noise"
        panel.severity.setFocus()
        qtbot.keyClick(panel.severity, Qt.Key.Key_Right)
        qtbot.keyClick(panel.severity, Qt.Key.Key_Right)
        assert panel.severity.value() == 2 and panel.severity_label.text() == "2"
        assert panel.kind.focusPolicy() & Qt.FocusPolicy.TabFocus
        assert panel.severity.focusPolicy() & Qt.FocusPolicy.TabFocus

    def test_a_new_noise_draw_changes_the_image_shows_its_seed_and_leaves_severity_0_clean(self, qtbot):
        panel = panel_with_drawing(qtbot)
        panel.show()
        panel.kind.setCurrentIndex(panel.kind.findData("noise"))
        panel.severity.setValue(3)
        assert panel.new_draw.isVisible() and panel.seed_label.text() == "seed 0"
        upright = rotate_image(ring(), 0)
        first, label = panel.current_input()
        assert np.array_equal(first, corrupt(upright, "noise", 3.0, 0)) and label.endswith("(draw 0)")
        panel.new_draw.click()
        second, label = panel.current_input()
        assert panel.noise_seed == 1 and panel.seed_label.text() == "seed 1" and label.endswith("(draw 1)")
        assert np.array_equal(second, corrupt(upright, "noise", 3.0, 1)) and not np.array_equal(second, first)
        panel.severity.setValue(0)  # no noise at severity 0, whatever the draw
        assert np.array_equal(panel.current_input()[0], upright)
        # the shift's direction is drawn too; blur, contrast and the centred patch have nothing to draw
        panel.kind.setCurrentIndex(panel.kind.findData("shift"))
        assert panel.new_draw.isVisible() and "direction" in panel.new_draw.toolTip()
        for kind in ("blur", "contrast", "occlusion", "rotation"):
            panel.kind.setCurrentIndex(panel.kind.findData(kind))
            assert not panel.new_draw.isVisible() and not panel.seed_label.isVisible()

    def test_occlusion_needs_a_patch_size_before_it_can_move_it(self, qtbot):
        panel = panel_with_drawing(qtbot)
        panel.kind.setCurrentIndex(panel.kind.findData("occlusion"))
        assert panel.sweep.text() == "Move the patch across" and not panel.sweep.isEnabled()
        panel.severity.setValue(2)
        assert panel.sweep.isEnabled()
        shown = panel.current_input()[0]
        assert np.array_equal(shown, corrupt(rotate_image(ring(), 0), "occlusion", 2.0, 0, position=(0.5, 0.5)))


def test_a_noise_sweep_runs_for_every_column_and_says_what_it_swept(qtbot, window):
    window.modes.setCurrentWidget(window.rotate_panel)
    panel = window.rotate_panel
    panel.source.setCurrentIndex(1)  # an MNIST test digit
    panel.index.setValue(0)
    panel.kind.setCurrentIndex(panel.kind.findData("noise"))
    panel.severity.setValue(2)
    settle(qtbot, window)
    assert "Gaussian noise at severity 2" in window.workspace.input_label
    with qtbot.waitSignal(panel.sweep_requested, timeout=5_000):
        panel.sweep.click()
    qtbot.waitUntil(lambda: window.sweeps.worker is None, timeout=120_000)
    assert list(window.sweep_view.columns) == window.workspace.column_keys()
    sweep = window.workspace.columns[0].sweep
    assert np.array_equal(sweep.angles, np.arange(0, 5.01, 0.5)) and sweep.parameter == "severity"
    column = next(iter(window.sweep_view.columns.values()))
    axis = column.probability.getPlotItem().getAxis("bottom")
    assert axis.labelText in ("severity (noise σ = 0.08 per level)", "severity (σ 0.08/level)")  # as room allows
    text = window.sweep_view.label.text()
    assert text.startswith("Gaussian noise sweep of MNIST test digit #0") and "severity 0–5" in text
    assert "(draw 0)" in text
    # moving the severity slider keeps the sweep (same image swept); a new noise draw makes it stale,
    # and swept again, the sweep starts from the clean image at severity 0 and differs above it
    panel.severity.setValue(4)
    settle(qtbot, window)
    assert not window.sweep_view.stale
    panel.new_draw.click()
    settle(qtbot, window)
    assert window.sweep_view.stale
    with qtbot.waitSignal(panel.sweep_requested, timeout=5_000):
        panel.sweep.click()
    qtbot.waitUntil(lambda: window.sweeps.worker is None, timeout=120_000)
    redrawn = window.workspace.columns[0].sweep
    assert not window.sweep_view.stale and "(draw 1)" in window.sweep_view.label.text()
    assert np.allclose(redrawn.mean[0], sweep.mean[0])  # severity 0: the clean digit either way
    assert not np.allclose(redrawn.mean[1:], sweep.mean[1:])  # another noise above it
    panel.index.setValue(1)
    settle(qtbot, window)
    assert window.sweep_view.stale and "Sweep severity 0–5" in window.sweep_view.label.text()
