"""The column's ⋯ menu offers no dead entries: no "Move left" on the first column, no "Move right"
on the last, and no "Diagnostics…" for a method without chains (its tooltip says why)."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QMainWindow

from app.workspace import Workspace
from core.analysis.diagnostics import diagnostics_unavailable
from core.engine.resources import resources_dir

MODELS = resources_dir() / "models"


@pytest.fixture
def panel_and_workspace(qtbot):
    from app.views.columns import ColumnsPanel

    window = QMainWindow()
    qtbot.addWidget(window)
    workspace = Workspace(window)
    for name in ("paper_softmax_map.pt", "paper_softmax_mc_dropout.pt", "paper_softmax_sghmc.pt"):
        workspace.add_posterior(MODELS / name)
    panel = ColumnsPanel()
    qtbot.addWidget(panel)
    panel.show_columns(workspace)
    yield panel, workspace
    window.close()  # kept alive until here: the workspace is its child


def test_move_entries_are_off_at_the_ends_and_follow_a_move(panel_and_workspace):
    panel, workspace = panel_and_workspace
    first, middle, last = (panel.views[k] for k in workspace.column_keys())
    assert not first.move_left.isEnabled() and first.move_right.isEnabled()
    assert middle.move_left.isEnabled() and middle.move_right.isEnabled()
    assert last.move_left.isEnabled() and not last.move_right.isEnabled()
    assert "last column" in last.move_right.toolTip()
    workspace.move(workspace.column_keys()[0], 2)  # the first becomes the last
    panel.show_columns(workspace)
    assert first.move_left.isEnabled() and not first.move_right.isEnabled()
    assert not middle.move_left.isEnabled()


def test_diagnostics_is_offered_only_where_chains_were_recorded(panel_and_workspace):
    panel, workspace = panel_and_workspace
    views = {c.posterior.method: panel.views[c.key] for c in workspace.columns}
    assert views["sghmc"].diagnostics.isEnabled()
    for method in ("map", "mc_dropout"):
        assert not views[method].diagnostics.isEnabled()
        assert views[method].diagnostics.toolTip().startswith("No chains to compare")


@pytest.mark.parametrize(("info", "shown"), [
    ({"traces": {"log_posterior": [[1.0, 2.0]]}}, True),  # a sampler's traces
    ({"diagnostics": {"status": "measured", "rhat_per_class": [1.0]}}, True),
    ({"traces": {"log_posterior": []}, "diagnostics": {"status": "n/a", "reason": "one chain"}}, False),
    ({}, False),
    (None, False),
])
def test_diagnostics_unavailable_reads_the_files_record(info, shown):
    reason = diagnostics_unavailable(info)
    assert (reason is None) is shown
    if not shown:
        assert reason and ("one chain" in reason if info and "diagnostics" in info else "diagnose" in reason)
