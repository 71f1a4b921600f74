"""The Dataset tab with several out-of-distribution sets (issue 46, item 4): added and removed in
the set chooser, evaluated together, one AUROC per set and score in every column."""

from __future__ import annotations

import numpy as np
from PIL import Image

from app.main import MainWindow
from app.views.dataset_tables import OOD_TABLE_SCORES
from core.analysis.ood_sets import best_among
from core.engine.resources import resources_dir
from tests.app.test_dataset_view import open_dataset_tab

MODELS = resources_dir() / "models"
FILES = [MODELS / "paper_softmax_map.pt", MODELS / "paper_softmax_mc_dropout.pt", MODELS / "paper_softmax_sgld.pt"]


def _squares(folder):
    rng = np.random.default_rng(5)
    folder.mkdir()
    for i in range(12):
        image = np.zeros((36, 36, 3), np.uint8)
        a, b = sorted(rng.integers(2, 34, 2))
        image[a:b, a:b] = rng.integers(120, 255, 3)
        Image.fromarray(image).save(folder / f"square_{i:02d}.png")
    return folder


def test_further_sets_are_added_and_removed(qtbot, monkeypatch, shared_data, tmp_path):
    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow([str(p) for p in FILES[:1]])
    qtbot.addWidget(win)
    sets = win.dataset_view.sets
    sets.set_choice("mnist-test", "notmnist")
    assert sets.ood_specs() == ["notmnist"] and sets.more_button.text() == "+"
    folder = _squares(tmp_path / "squares")
    sets.set_more_chosen("mnist-inverted", True)
    sets.set_more_chosen(str(folder), True)
    sets.set_more_chosen("notmnist", True)  # the set on the left already: not twice
    assert sets.ood_specs() == ["notmnist", "mnist-inverted", str(folder)]
    assert sets.more_button.text() == "+2" and "“squares”" in sets.more_button.toolTip()
    sets._fill_more_menu()  # the menu ticks what is chosen, and offers every known set and the folder
    ticked = {a.text(): a.isChecked() for a in sets.more_menu.actions() if a.isCheckable()}
    assert ticked["MNIST digits, inverted (built in)"] and ticked["squares (folder)"]
    assert not ticked["MNIST test digits"]
    next(a for a in sets.more_menu.actions() if a.text() == "squares (folder)").setChecked(False)  # removed
    assert sets.ood_specs() == ["notmnist", "mnist-inverted"]
    sets.set_choice("mnist-test", None)  # no set on the left: the further ones still count
    assert sets.ood_specs() == ["mnist-inverted"]


def test_each_column_shows_one_auroc_per_set_and_score(qtbot, monkeypatch, shared_data, tmp_path):
    view = open_dataset_tab(qtbot, monkeypatch, shared_data, FILES).dataset_view
    view.set_choice("mnist-test", "notmnist", 60, 4)
    view.sets.set_more(["mnist-inverted", str(_squares(tmp_path / "squares"))])
    with qtbot.waitSignal(view.run_ended, timeout=300_000):
        assert view.evaluate()
    assert view.results is not None, view.status.text()
    ev = view.results.evaluation
    assert ev.ood_names() == ("notmnist-test", "mnist-inverted", "squares-test")
    assert "60 notMNIST letters and 60 MNIST test digits, inverted (dark on white) and 12 squares-test" in \
        view.status.text()
    rows = view.results.tables["ood_sets"]
    names = list(view.column_widgets)
    best = best_among(rows, names)
    for name, widget in view.column_widgets.items():
        table = widget.ood_sets
        assert widget.ood_sets_title.isVisibleTo(widget) and table.isVisibleTo(widget)
        headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
        assert headers == ["letters", "inverted", "squares"]  # one per set
        assert table.horizontalHeaderItem(1).toolTip() == "AUROC on the MNIST test digits, inverted (dark on white)"
        assert table.rowCount() == len(OOD_TABLE_SCORES)
        for c, set_name in enumerate(ev.ood_names()):
            for score in OOD_TABLE_SCORES:
                row = next(r for r in rows if r["set"] == set_name and r["posterior"] == name and r["score"] == score)
                text = table.cell_text(score, c)
                if row["auroc"] is None:
                    assert text == "n/a"
                    continue
                assert text == f"{row['auroc']:.3f}"
                # the best of the columns shown for that score on that set: bold on green
                assert table.item([*OOD_TABLE_SCORES].index(score), c).font().bold() == (name in best[(set_name, score)])
        # the whole table shows: no row cut off, no number elided at the column's width
        assert table.height() >= table.rowCount() * table.ROW_HEIGHT + table.horizontalHeader().height()
        for c in range(table.columnCount()):
            width = table.columnWidth(c)
            assert all(table.fontMetrics().horizontalAdvance(table.item(r, c).text()) < width
                       for r in range(table.rowCount()))
    assert all(len(v) >= 1 for v in best.values())  # one best column per score and set, more on a tie
    view.cancel(quiet=True)
