"""Convergence in the window: the column header's tooltip and warning, and the Diagnostics window."""

from __future__ import annotations

import numpy as np

from core.engine.resources import resources_dir

MODELS = resources_dir() / "models"


def _sghmc_file(name: str, diagnostics: dict | None):
    """The bundled SGHMC posterior saved under the user's models with ``diagnostics`` (or none)."""
    from app.settings import user_models_dir
    from core.engine.store import load_posterior, save_posterior

    posterior = load_posterior(MODELS / "network_lenet5_sghmc.pt")
    posterior.info.pop("diagnostics", None)
    posterior.info["name"] = name
    if diagnostics is not None:
        posterior.info["diagnostics"] = diagnostics
    return save_posterior(posterior, user_models_dir() / f"{name}.pt", storage="float16")


DISAGREE = {"status": "measured", "chains": 4, "draws": 25, "rhat_max": 2.2, "ess_bulk_min": 5.8,
            "ess_tail_min": 6.1, "probe": "the first 1000 images of mnist-test (their labels are not read)",
            "rhat_per_class": [1.3, 2.2, 1.05, 1.0, 1.2, 1.1, 1.4, 1.6, 1.9, 1.5]}


def test_a_column_whose_chains_disagree_says_so_in_words(qtbot, window):
    path = _sghmc_file("disagree", DISAGREE)
    assert window.add_posterior(path)
    view = window.column_views[str(path.resolve())]
    assert not view.convergence.isHidden()  # (shown once the window lays the column out)
    assert "The chains disagree: this posterior may not have converged (R̂ 2.20)." in view.convergence.text()
    tip = view.title.toolTip()
    assert "4 chains × 25 draws." in tip and "Largest R̂ 2.20: the chains disagree" in tip
    assert "5.8" in tip  # the effective draws they are worth
    assert "Measured on the first 1,000 MNIST test digits" in tip  # the data sets in words, not their code names


def test_an_old_file_says_not_measured_and_shows_no_warning(qtbot, window):
    path = _sghmc_file("old", None)
    assert window.add_posterior(path)
    view = window.column_views[str(path.resolve())]
    assert view.convergence.text() == "" and not view.has_warning
    assert "Convergence: not measured" in view.title.toolTip()
    dropout = next(v for v in window.column_views.values() if "MC dropout" in v.title.text())
    assert "Convergence: n/a" in dropout.title.toolTip() and dropout.convergence.text() == ""
    # no room is kept for a warning once no column has one
    for key in [k for k, v in window.column_views.items() if v.has_warning]:
        window.remove_column(key)
    assert all(v.convergence.isHidden() for v in window.column_views.values())


def test_the_plots_start_at_one_height_whether_a_column_warns_or_not(qtbot, window):
    from PySide6.QtCore import QPoint

    path = _sghmc_file("disagree", DISAGREE)
    assert window.add_posterior(path)
    window.resize(1400, 860)
    qtbot.wait(50)
    views = list(window.column_views.values())
    assert sum(v.has_warning for v in views) >= 1 and not all(v.has_warning for v in views)

    def tops():
        return {v.plots["histograms"].mapTo(window, QPoint(0, 0)).y() for v in views}

    # once the new column is laid out (after a long run of tests the layout can lag the resize)
    qtbot.waitUntil(lambda: len(tops()) == 1, timeout=5000)


def test_the_diagnostics_window_draws_the_traces_and_r_hat_per_class(qtbot, window):
    path = _sghmc_file("disagree", DISAGREE)
    assert window.add_posterior(path)
    view = window.column_views[str(path.resolve())]
    more = next(b for b in view.findChildren(type(view._button("x", "", None))) if b.text() == "⋯")
    action = next(a for a in more.menu().actions() if a.text() == "Diagnostics…")
    action.trigger()
    dialog = window.diagnostics_window
    qtbot.waitExposed(dialog)
    assert "disagree" in dialog.windowTitle()
    curves = dialog.trace.getPlotItem().listDataItems()
    assert len(curves) == 4  # one per chain
    heights = np.asarray(dialog.rhat.bars.opts["height"])
    np.testing.assert_allclose(heights, np.array(DISAGREE["rhat_per_class"]) - 1.0)
    assert [line.value() for line in dialog.rhat.lines] == [1.01, 1.1]
    assert "1.01" in dialog.rhat.toolTip() and "chain" in dialog.trace.toolTip()
    assert dialog.warning.isVisible() and "(R̂ 2.20)" in dialog.warning.text()
    dialog.close()


def test_hmcs_trace_runs_over_its_iterations_with_the_warm_up_shaded(qtbot):
    """The bundled HMC keeps every second of its 950 iterations' log posterior (150 warm-up, 800
    sampling): the plot spans the iterations (not the points kept), the warm-up ones shaded; its
    lines say it converged to the tier's 1.01."""
    import pyqtgraph as pg

    from app.views.diagnostics import DiagnosticsWindow
    from core.engine.store import load_posterior

    posterior = load_posterior(MODELS / "paper_softmax_hmc.pt")
    window = DiagnosticsWindow(posterior, "HMC", tuple(str(k) for k in range(10)))
    qtbot.addWidget(window)
    item = window.trace.getPlotItem()
    curves = item.listDataItems()
    assert len(curves) == 4 and max(float(c.xData.max()) for c in curves) == 950
    (shade,) = [i for i in item.items if isinstance(i, pg.LinearRegionItem)]
    assert shade.getRegion() == (0, 150)
    labels = [i.toPlainText() for i in item.items if isinstance(i, pg.TextItem) and i.toPlainText()]
    assert labels == ["warm-up (not kept)"]  # HMC's, not a mini-batch sampler's burn-in
    assert item.getAxis("bottom").labelText == "iteration (12 leapfrog steps each)"
    text = window.summary.text()
    assert ": the chains agree (" in text and "as well as these draws can show" not in text  # within 1.01 outright
    assert not window.warning.isVisible()


def test_hmc_with_a_trajectory_length_says_up_to_its_most_steps(qtbot):
    """With ``trajectory_length`` each chain takes its own number of steps (at most
    ``num_leapfrog``): the axis must not claim a fixed count."""
    from app.views.diagnostics import DiagnosticsWindow
    from core.engine.store import load_posterior

    posterior = load_posterior(MODELS / "paper_softmax_hmc.pt")
    posterior.config = {**posterior.config, "trajectory_length": 2.5, "num_leapfrog": 32}
    window = DiagnosticsWindow(posterior, "HMC", tuple(str(k) for k in range(10)))
    qtbot.addWidget(window)
    assert window.trace.getPlotItem().getAxis("bottom").labelText == "iteration (up to 32 leapfrog steps each)"


def test_a_variational_column_says_where_its_fit_ended(qtbot, window):
    """Variational dropout names the share of weights its α limit decides; the mixture its weights."""
    for name, words in (("paper_softmax_vdropout.pt", "of the weights: for those the limit, not the data"),
                        ("paper_softmax_sgmmvi.pt", "Mixture weights ")):
        path = MODELS / name
        assert window.add_posterior(path)
        tip = window.column_views[str(path.resolve())].title.toolTip()
        assert words in tip, tip
        assert "Convergence: n/a" in tip  # and, as before, what convergence means for it
    assert "A mixture of low-rank Gaussians over the weights." in tip  # its description's capitals kept


def test_a_samplers_view_says_how_probable_its_draws_are_under_the_exact_posterior(qtbot):
    """The paper tier's SGLD: its draws placed against exact HMC's under the exact posterior (the
    level ``bayescope-cli zoo`` records), and its trace named what it is, a mini-batch's estimate;
    HMC's trace is its exact log posterior, and HMC is not placed against itself."""
    import pyqtgraph as pg

    from app.views.diagnostics import DiagnosticsWindow
    from core.engine.store import load_posterior

    classes = tuple(str(k) for k in range(10))
    sgld = DiagnosticsWindow(load_posterior(MODELS / "paper_softmax_sgld.pt"), "SGLD", classes)
    hmc = DiagnosticsWindow(load_posterior(MODELS / "paper_softmax_hmc.pt"), "HMC", classes)
    qtbot.addWidget(sgld)
    qtbot.addWidget(hmc)
    assert "Under the exact posterior its draws are" in sgld.summary.text()
    assert "for HMC&#x27;s draws, which are exact" in sgld.summary.text()
    # and why its draws spread a little wider than HMC's: its step, 1/√(1 − 0.05/4) − 1 = 0.6 %
    assert "about 0.6% wider in every direction" in sgld.summary.text()
    assert "wider in every direction" not in hmc.summary.text()
    assert sgld.trace.getPlotItem().getAxis("left").labelText == "log posterior (mini-batch)"
    assert sgld.trace.getPlotItem().getAxis("bottom").labelText == "step"
    assert "burn-in (not kept)" in [i.toPlainText() for i in sgld.trace.getPlotItem().items
                                    if isinstance(i, pg.TextItem)]
    assert "one mini-batch of images per step" in sgld.trace.toolTip()
    assert "mini-batch" not in hmc.trace.toolTip()
    assert hmc.trace.getPlotItem().getAxis("left").labelText == "log posterior"
    assert "Under the exact posterior" not in hmc.summary.text()


def test_a_samplers_column_tooltip_places_its_draws_against_exact_inference(qtbot, window):
    path = MODELS / "paper_softmax_sghmc.pt"
    assert window.add_posterior(path)
    tip = window.column_views[str(path.resolve())].title.toolTip()
    assert "Under the exact posterior its draws are as probable as HMC&#x27;s" in tip, tip
    assert "Its steps follow the shape of the posterior around its peak" in tip  # the curvature metric
    assert "Largest R̂" in tip  # beside what convergence means for it, measured on the whole run
    assert "over all 4 × 1,000 draws of the run; the file keeps 30 of each chain&#x27;s" in tip
    assert "4 chains × 30 draws." in tip
    assert "wider in every direction" not in tip  # SGHMC's step widens its draws by 0.05 %: said of SGLD only


def test_the_red_line_says_what_to_do_and_opens_its_help_paragraph(qtbot, window):
    """A column whose chains disagree (R̂ 1.3) says what that means for the reader and what to do,
    and its "What this means" opens the help at the paragraph on chains; one whose chains agree
    (R̂ 1.005) says nothing (issue 47, item 9)."""
    shaky = _sghmc_file("shaky", {**DISAGREE, "rhat_max": 1.3})
    sound = _sghmc_file("sound", {**DISAGREE, "rhat_max": 1.005})
    assert window.add_posterior(shaky) and window.add_posterior(sound)
    view = window.column_views[str(shaky.resolve())]
    text = view.convergence.text()
    assert "(R̂ 1.30)" in text and "rough guess" in text and "longer run" in text
    assert "What this means" in text
    assert window.column_views[str(sound.resolve())].convergence.text() == ""
    view.convergence.linkActivated.emit("help:chains")  # what a click on the link sends
    dialog = window.help_dialog
    qtbot.waitExposed(dialog)
    bar = dialog.text.verticalScrollBar()
    assert bar.value() > 0  # scrolled down to the paragraph, not left at the top
    top = dialog.text.cursorForPosition(dialog.text.viewport().rect().topLeft())
    top.select(top.SelectionType.BlockUnderCursor)
    assert "Did the chains agree?" in top.selectedText() or "What the red line means" in top.selectedText()
    dialog.close()
