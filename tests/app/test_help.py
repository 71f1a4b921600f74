"""F1 help and tooltips for the Dataset tab: every measure says what it means and which way is better,
in the same words on screen (tooltips) and in the help page."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QTextCursor

from app.help import DATASET_HELP, DATASET_TERMS
from app.main import MainWindow
from app.plots.dataset_plots import (
    ClassErrorPlot,
    RejectionPlot,
    ReliabilityPlot,
    SoftConfusionPlot,
)
from app.views.dataset_tables import MetricsTable
from core.engine.resources import resources_dir

#: The measures issue 21 asked words for, by the key they carry in DATASET_TERMS.
ASKED = ("ECE", "Classwise ECE", "Brier", "Log loss", "AUROC", "AUPR", "soft_diagonal", "images_referred",
         "Chains", "reliability_share")
BETTER = re.compile(r"(Lower|Higher) is better|More .* is better|No direction is better|rises fast is better")


@pytest.mark.parametrize("key", ASKED)
def test_each_measure_says_what_it_means_and_which_way_is_better(key):
    term = DATASET_TERMS[key]
    assert BETTER.search(term.good), term.good
    assert f"<b>{term.title}.</b> {term.means}" in DATASET_HELP and term.good in DATASET_HELP


def test_metric_rows_and_plots_carry_the_same_words_as_the_help(qtbot):
    rows = dict(MetricsTable.ROWS)
    for key in ("ECE", "Classwise ECE", "Brier", "Log loss", "AUROC", "AUPR", "Chains"):
        assert rows[key] == DATASET_TERMS[key].tooltip
    assert DATASET_TERMS["reliability_share"].tooltip in ReliabilityPlot.tooltip
    assert DATASET_TERMS["soft_diagonal"].tooltip in SoftConfusionPlot.tooltip
    assert DATASET_TERMS["images_referred"].good in RejectionPlot.tooltip
    assert DATASET_TERMS["Chains"].good in ClassErrorPlot.tooltip
    table = MetricsTable()
    qtbot.addWidget(table)
    shown = {table.item(r, c).text(): table.item(r, c).toolTip()
             for r in range(table.rowCount()) for c in (0, 2) if table.item(r, c) is not None}
    assert shown["ECE"] == DATASET_TERMS["ECE"].tooltip


def test_f1_on_the_dataset_tab_opens_the_help_at_its_section(qtbot, monkeypatch, shared_data):
    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow([str(resources_dir() / "models" / "network_lenet5_mc_dropout.pt")])
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    win.show_help()
    assert win.help_dialog.text.verticalScrollBar().value() == 0  # the columns' part first
    win.views.setCurrentWidget(win.dataset_view)
    win.show_help()
    qtbot.waitExposed(win.help_dialog)
    bar = win.help_dialog.text.verticalScrollBar()
    assert bar.value() > 0
    top = win.help_dialog.text.cursorForPosition(QPoint(10, 10))  # the first line in view
    top.select(QTextCursor.SelectionType.BlockUnderCursor)
    assert "The Dataset tab" in top.selectedText()
    win.help_dialog.close()
