"""A tier's columns carry exact inference's marks: the window judges the tier's HMC reference
beside them without showing it as a column, draws its mean and interval on each of their
Mean-and-interval plots and says what it reads; columns of no tier get no marks."""

from __future__ import annotations

import numpy as np
import pytest

from app.main import MainWindow
from core.engine.inference import get_method
from core.engine.models import ArchSpec
from core.engine.runner import drain, fit_posterior
from core.engine.store import save_posterior
from core.engine.tiers import file_name
from tests.app.test_main_window import MODELS, settle


@pytest.fixture(scope="module")
def tier_folder(tmp_path_factory):
    """A paper tier of two posteriors (HMC and MAP) on a small two-halves digit set."""
    from core.analysis.evaluation import resolve_dataset
    from core.engine.data.idx import write_idx
    from tests.conftest import _two_halves

    folder = tmp_path_factory.mktemp("tier")
    rng = np.random.default_rng(0)
    (folder / "mnist").mkdir()
    x, y = _two_halves(200, rng)
    write_idx(folder / "mnist" / "train-images-idx3-ubyte.gz", x)
    write_idx(folder / "mnist" / "train-labels-idx1-ubyte.gz", y)
    train = resolve_dataset(str(folder / "mnist"), split="train")
    for method, settings in (("hmc", {"num_warmup": 10, "num_samples": 10, "num_leapfrog": 3}), ("map", {"epochs": 1})):
        m = get_method(method)
        posterior = drain(fit_posterior(m, m.make_config(**settings), ArchSpec("softmax"), train, 0))
        posterior.info["zoo"] = {"tier": "paper", "arguments": []}
        if method == "hmc":  # the record a converged reference carries (what the words depend on)
            posterior.info["diagnostics"] = {"status": "measured", "rhat_max": 1.004, "chains": 4, "draws": 10}
        save_posterior(posterior, folder / file_name("paper", "softmax", method))
    return folder


@pytest.fixture
def window(qtbot, tier_folder):
    win = MainWindow([tier_folder / "paper_softmax_map.pt", MODELS / "network_lenet5_mc_dropout.pt"])
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


def test_a_tier_column_shows_the_reference_and_others_do_not(qtbot, window, tier_folder):
    ref = window.workspace.reference
    assert ref is not None and ref.key == str((tier_folder / "paper_softmax_hmc.pt").resolve())
    assert ref.key not in window.workspace.column_keys()  # judged, not shown as a column
    from PIL import Image

    arr = np.full((100, 80), 255, np.uint8)
    arr[15:85, 36:44] = 0  # a dark "1" on white paper
    Image.fromarray(arr).save(tier_folder / "one.png")
    assert window.load_image_file(tier_folder / "one.png")
    settle(qtbot, window)
    qtbot.waitUntil(lambda: ref.prediction is not None, timeout=30_000)
    qtbot.wait(50)
    tier_key, lenet_key = window.workspace.column_keys()
    marked = window.column_views[tier_key].plots["interval"]
    assert marked.reference is not None
    assert np.allclose(marked.reference["mean"], ref.prediction.summary.mean.numpy())
    verdict = window.column_views[tier_key].verdict.text()
    assert "Exact inference (HMC): reads" in verdict and "differs by" in verdict
    # every column keeps the room of that line, the plots of all start at one height
    from PySide6.QtCore import QPoint

    qtbot.waitUntil(lambda: len({v.plots["histograms"].mapTo(window, QPoint(0, 0)).y()
                                 for v in window.column_views.values()}) == 1, timeout=5000)
    assert "Black marks" in marked.toolTip()
    assert window.column_views[lenet_key].plots["interval"].reference is None
    assert "Exact inference" not in window.column_views[lenet_key].verdict.text()
    grab = window.column_views[tier_key].plots["interval"].grab().toImage()
    dark = sum(grab.pixelColor(x, y).value() < 40 for x in range(grab.width()) for y in range(grab.height()))
    assert dark > 50  # the marks are drawn


def test_removing_the_tier_columns_lets_the_reference_go(qtbot, window):
    assert window.workspace.reference is not None
    window.remove_column(window.workspace.column_keys()[0])
    assert window.workspace.reference is None


def test_the_reference_shown_as_a_column_is_not_marked_against_itself(qtbot, window, tier_folder):
    window.add_posterior(tier_folder / "paper_softmax_hmc.pt")
    ref_column = window.workspace.column(str((tier_folder / "paper_softmax_hmc.pt").resolve()))
    assert window.workspace.reference_for(ref_column) is None


def test_the_dataset_tab_says_how_far_a_tier_column_is_from_the_reference(qtbot, window, monkeypatch, shared_data):
    from core.analysis.evaluation import resolve_dataset
    from core.analysis.fidelity import predictive_fidelity

    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    view = window.dataset_view
    window.views.setCurrentWidget(view)
    view.set_choice("mnist-test", None, 60, 10)
    with qtbot.waitSignal(view.run_ended, timeout=120_000):
        assert view.evaluate()
    assert view.results is not None, view.status.text()
    tier_key, lenet_key = window.workspace.column_keys()
    assert len(view.column_widgets) == 2  # the reference was evaluated, not shown
    assert view.status.text().startswith("2 posteriors on 60")
    tier_widget, lenet_widget = (view.column_widgets[n] for n in list(view.column_widgets))
    assert lenet_widget.reference.isHidden()
    # the figures: those of the two predictives computed here, with the same draws and seed
    data = resolve_dataset("mnist-test", shared_data).first(60)
    ev = view.results.evaluation
    names = list(ev.results)
    got = predictive_fidelity(ev.results[names[-1]].data.mean_proba, ev.results[names[0]].data.mean_proba)
    assert names[-1].startswith("HMC") and len(ev.results[names[0]].data.labels) == len(data)
    text = tier_widget.reference.text()
    assert text == (f"Against exact inference (HMC): same top class on {got.agreement * 100:.1f}% of the images; "
                    f"differs by {got.total_variation:.3f} on average")


def test_a_reference_whose_chains_have_not_converged_is_not_called_exact():
    from core.engine.tiers import reference_words

    short, sentence = reference_words({"diagnostics": {"status": "measured", "rhat_max": 2.9238}})
    assert short == "HMC (not converged, R̂ 2.92)"
    assert "have NOT converged (largest R̂ 2.92, aim 1.01)" in sentence and "not yet exact inference" in sentence
    assert reference_words({})[0] == "HMC (convergence not measured)"
    assert reference_words({"diagnostics": {"status": "measured", "rhat_max": 1.01}})[0] == "Exact inference (HMC)"


def test_the_words_kept_for_a_stroke_follow_a_new_reference(qtbot, window, tier_folder):
    """A column keeps its reference and the reference's words between the predictions of a
    stroke (``ColumnsPanel._reference_of``, ``ColumnView._reference_words``): a reference read
    anew (another posterior object, another record of its chains) and a reference gone show at
    the next prediction, not the words or marks kept from the one before."""
    import copy

    from PIL import Image

    from app.workspace import Column

    arr = np.full((100, 80), 255, np.uint8)
    arr[15:85, 36:44] = 0
    Image.fromarray(arr).save(tier_folder / "one.png")
    assert window.load_image_file(tier_folder / "one.png")
    ref = window.workspace.reference
    settle(qtbot, window)
    qtbot.waitUntil(lambda: ref.prediction is not None, timeout=30_000)
    tier_key = window.workspace.column_keys()[0]
    view, panel = window.column_views[tier_key], window.columns_scroll
    panel.show_prediction(window.workspace, tier_key)
    assert "Exact inference (HMC): reads" in view.verdict.text()

    # the same reference file read again, its chains now recorded as disagreeing
    unconverged = copy.copy(ref.posterior)
    unconverged.info = {**ref.posterior.info, "diagnostics": {"status": "measured", "rhat_max": 2.5}}
    window.workspace.reference = again = Column(ref.key, unconverged)
    again.prediction = ref.prediction
    panel.show_prediction(window.workspace, tier_key)
    verdict = view.verdict.text()
    assert "HMC (not converged, R̂ 2.50): reads" in verdict and "Exact inference" not in verdict
    assert "NOT converged" in view.plots["interval"].toolTip()

    # no reference any more: no marks, no line
    window.workspace.reference = None
    panel.show_prediction(window.workspace, tier_key)
    assert view.plots["interval"].reference is None
    assert "HMC" not in view.verdict.text()
