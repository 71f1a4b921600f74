"""While a stroke moves, a column works out only what a person watches change (its plots, the
verdict's sentence, the top class's numbers and the overlap flag); the comparison with the reference
and the conformal and credible sets say, faded, that they come when the stroke stops, and the full
count works every line out (issue 49: comparing with the reference, finding the sets and laying out
their new words on every move was a fifth of feeding a column). They once kept the last full
count's words, faded: "HMC reads 7" beside "Probably a 0" read as a contradiction."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from app.views.column import SETS_WAIT, ColumnView, comparison_waits, preview_note
from app.views.rich_lines import RichLines
from app.workspace import Column
from core.analysis.predictive import predict_image
from core.engine.resources import resources_dir
from core.engine.store import load_posterior

MODELS = resources_dir() / "models"
DIGITS = tuple("0123456789")


def _four_or_nine() -> np.ndarray:
    """A 4 whose top is nearly closed: the softmax regressions are torn between 4 and 9."""
    image = np.zeros((28, 28), np.float32)
    image[6:20, 8:11] = 1.0
    image[6:24, 17:20] = 1.0
    image[17:20, 8:20] = 1.0
    image[5:8, 10:18] = 1.0
    return image


def _one() -> np.ndarray:
    image = np.zeros((28, 28), np.float32)
    image[4:24, 13:16] = 1.0
    return image


def _pixels(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    return np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine()).copy()


@pytest.fixture(scope="module")
def posterior():
    return load_posterior(MODELS / "paper_softmax_sghmc.pt")  # calibrated: it has conformal sets


@pytest.fixture(scope="module")
def exact():
    return load_posterior(MODELS / "paper_softmax_hmc.pt")  # its tier's reference


def _view(qtbot, posterior, image, draws: int) -> tuple[ColumnView, Column]:
    column = Column(str(MODELS / "paper_softmax_sghmc.pt"), posterior, predict_image(posterior, image, draws))
    view = ColumnView(column.key, DIGITS)
    qtbot.addWidget(view)
    view.resize(260, 900)
    return view, column


def _sets_found(monkeypatch) -> list[int]:
    import core.analysis.conformal as conformal

    found: list[int] = []
    real = conformal.sets_in_words
    monkeypatch.setattr(conformal, "sets_in_words", lambda *a, **k: found.append(1) or real(*a, **k))
    return found


def test_a_preview_says_the_comparison_and_the_sets_wait_and_the_full_count_works_them_out(
        qtbot, monkeypatch, posterior, exact):
    view, column = _view(qtbot, posterior, _four_or_nine(), 100)
    view.show()
    qtbot.waitExposed(view)

    def show(view, column, image, draws: int) -> None:
        """Feed ``view`` its column's prediction, with exact inference's on ``image`` as the window does."""
        view.show_column(column, DIGITS, 0.9, full=100, reference=predict_image(exact, image, draws),
                         reference_info=exact.info)

    show(view, column, _four_or_nine(), 100)  # the last full count, on a 4-or-9, with exact inference's line
    at_rest = view.verdict.paragraphs
    assert "Exact inference (HMC): reads " in view.verdict.text() and "Conformal: " in view.verdict.text()
    assert view.verdict.pending == frozenset()
    found = _sets_found(monkeypatch)

    # a stroke moves: the input is now a 1, judged from 16 draws
    column.prediction = predict_image(posterior, _one(), 16)
    show(view, column, _one(), 16)
    shown, faded = view.verdict.paragraphs, view.verdict.pending
    assert found == []  # no set was worked out for the preview
    fresh, fresh_column = _view(qtbot, posterior, _one(), 16)  # a column with nothing before
    show(fresh, fresh_column, _one(), 16)
    # the sentence, the top class and the overlap flag: this input's, as a column with nothing before shows them
    assert shown == fresh.verdict.paragraphs and faded == fresh.verdict.pending
    assert shown[:3] != at_rest[:3]
    # then the note (not faded), the comparison and the sets, in words that wait for the full count, faded
    assert list(shown[3:]) == [(((preview_note(16, 100), "i"),), None),
                               comparison_waits("Exact inference (HMC)"), SETS_WAIT]
    assert faded == {4, 5}
    # nothing of the 4-or-9's comparison or sets is left on screen
    assert not set(at_rest[3:]) & set(shown)
    assert "reads" not in "".join(view.verdict.text().splitlines()[3:])

    # the stroke ends: every line is this input's, none faded, as a column fed it at once
    column.prediction = predict_image(posterior, _one(), 100)
    show(view, column, _one(), 100)
    fresh_column.prediction = column.prediction
    show(fresh, fresh_column, _one(), 100)
    assert view.verdict.pending == frozenset()
    assert view.verdict.paragraphs == fresh.verdict.paragraphs
    assert view.verdict.paragraphs[3:] != at_rest[3:]  # the 1's comparison and sets, not the 4-or-9's
    assert "Exact inference (HMC): reads " in view.verdict.text() and "Conformal: " in view.verdict.text()
    assert found  # its sets were worked out
    # and the screen holds what a full paint gives (the faded bands repainted in full)
    qtbot.wait(50)
    lines = view.verdict
    at = lines.mapTo(view, QPoint(0, 0))
    screen = QApplication.primaryScreen().grabWindow(view.winId(), at.x(), at.y(), lines.width(), lines.height())
    assert np.array_equal(_pixels(screen.toImage()), _pixels(lines.grab().toImage()))


def test_a_preview_without_a_reference_or_a_calibration_says_only_what_waits(qtbot, monkeypatch, posterior):
    """No reference: no line waits for a comparison. No calibration: the line saying how to get
    one is the same for every input, so it is shown as it is, not faded."""
    found = _sets_found(monkeypatch)
    view, column = _view(qtbot, posterior, _one(), 16)
    view.show_column(column, DIGITS, 0.9, full=100)
    assert found == [] and view.verdict.paragraphs[3:] == ((((preview_note(16, 100), "i"),), None), SETS_WAIT)
    assert view.verdict.pending == {4}
    uncalibrated, plain = _view(qtbot, posterior, _one(), 16)
    plain.extra["conformal"] = (None, "No calibration yet: bayescope-cli calibrate makes one.")
    uncalibrated.show_column(plain, DIGITS, 0.9, full=100)
    assert uncalibrated.verdict.paragraphs[3:] == (
        (((preview_note(16, 100), "i"),), None), ((("No calibration yet: bayescope-cli calibrate makes one.", "i"),), None))
    assert uncalibrated.verdict.pending == frozenset()
    with_reference, _ = _view(qtbot, posterior, _one(), 16)
    with_reference.show_column(plain, DIGITS, 0.9, full=100, reference=plain.prediction, reference_info={})
    assert with_reference.verdict.paragraphs[4] == comparison_waits("HMC (convergence not measured)")
    assert with_reference.verdict.pending == {4}


@pytest.mark.parametrize("how", ["cleared", "failed"])
def test_nothing_from_before_a_clear_or_a_failure_comes_back(qtbot, posterior, how):
    view, column = _view(qtbot, posterior, _four_or_nine(), 100)
    view.show_column(column, DIGITS, 0.9, full=100)
    before = set(view.verdict.paragraphs[3:])
    if how == "cleared":
        view.clear_column("Draw a digit")
    else:
        view.show_failure("It could not judge this input.")
    column.prediction = predict_image(posterior, _one(), 16)
    view.show_column(column, DIGITS, 0.9, full=100)
    assert {view.verdict.paragraphs[i] for i in view.verdict.pending} == {SETS_WAIT}  # only what waits
    assert not before & set(view.verdict.paragraphs)


def test_a_faded_paragraph_is_painted_fainter_and_repainted_when_it_is_current_again(qtbot):
    lines = RichLines()
    qtbot.addWidget(lines)
    lines.resize(260, 120)
    paragraphs = [((("Reads ", ""), ("8", "b"), (": p̄ 0.70", "")), None), ((("Conformal: 8, 90 % guaranteed", "b"),), None)]
    lines.set_paragraphs(paragraphs)
    lines.show()
    qtbot.waitExposed(lines)
    qtbot.wait(50)
    plain = _pixels(lines.grab().toImage())
    lines.set_paragraphs(paragraphs, {1})
    qtbot.wait(50)
    faded = _pixels(lines.grab().toImage())
    screen = QApplication.primaryScreen().grabWindow(lines.winId()).toImage()
    assert np.array_equal(_pixels(screen), faded)  # the band that faded was repainted
    height = int(lines._layouts(260)[0][1][1])
    assert np.array_equal(faded[:height], plain[:height])  # the current line as it was
    changed = faded[height:] != plain[height:]
    assert changed.any() and faded[height:][changed].mean() > plain[height:][changed].mean()  # paler ink
    lines.set_paragraphs(paragraphs)
    qtbot.wait(50)
    screen = QApplication.primaryScreen().grabWindow(lines.winId()).toImage()
    assert np.array_equal(_pixels(screen), plain)


def test_the_lines_that_wait_never_need_more_room_than_the_verdict_keeps(qtbot):
    """The verdict's height is kept for its longest lines (``reserve_reference_room``): a preview's
    lines, those that wait included, must never take more, or the plots below would move."""
    from app.views.column import verdict_room

    room, lines = RichLines(), RichLines()
    qtbot.addWidget(room)
    qtbot.addWidget(lines)
    view = ColumnView("k", DIGITS)
    qtbot.addWidget(view)
    view.reserve_reference_room(True)
    kept = view._verdict_room.paragraphs
    room.set_paragraphs(kept)
    preview = [verdict_room("0"), ((("Reads ", ""), ("0", "b"), (": p̄ 0.88 (90%: 0.88–0.88)", "")), None),
               ((("Uncertain:", "b"), (" 0 and 0 overlap (0.88)", "")), None),
               (((preview_note(16, 1000), "i"),), None), comparison_waits("HMC (not converged, R̂ 8.88)"), SETS_WAIT]
    lines.set_paragraphs(preview, {4, 5})
    for width in range(100, 720, 4):
        assert lines.heightForWidth(width) <= room.heightForWidth(width), width


def test_in_the_window_a_strokes_previews_fade_the_lines_and_its_full_count_restores_them(qtbot, window):
    """The window's own strokes: a 1, then a 7 drawn over it. While the 7's stroke moves, every
    column shows the 7's own sentence and, faded, lines saying that the comparison and the sets
    come when the stroke stops (none of the 1's words); once it ends, every line is the 7's, none
    faded, as each column fed its prediction afresh shows it."""
    from PySide6.QtCore import QPoint, Qt

    from tests.app.test_main_window import at, drag, settle

    canvas = window.canvas
    drag(qtbot, canvas, [at(canvas, 0.5, 0.15), at(canvas, 0.5, 0.5), at(canvas, 0.5, 0.85)])  # a 1
    settle(qtbot, window)
    views = list(window.column_views.values())
    the_one = [view.verdict.paragraphs for view in views]
    assert all(view.verdict.pending == frozenset() for view in views)

    qtbot.mousePress(canvas, Qt.MouseButton.LeftButton, pos=QPoint(*at(canvas, 0.25, 0.3)))
    for fx, fy in ((0.45, 0.3), (0.75, 0.3), (0.6, 0.55), (0.4, 0.85)):  # a 7's stroke, still moving
        qtbot.mouseMove(canvas, QPoint(*at(canvas, fx, fy)))
    qtbot.waitUntil(lambda: not window.inference.busy and not window._throttle.isActive() and all(
        c.prediction is not None and c.prediction.summary.num_samples == 16 for c in window.workspace.columns),
        timeout=30_000)
    qtbot.wait(20)
    for view, before in zip(views, the_one, strict=True):
        shown, faded = view.verdict.paragraphs, view.verdict.pending
        assert faded and all(shown[i][0][0][0].endswith("when you stop") for i in faded)
        assert not set(before[3:]) & set(shown)  # nothing of the 1's comparison or sets
        assert shown[:3] != before[:3]  # the 7's sentence, top class and overlap

    qtbot.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=QPoint(*at(canvas, 0.4, 0.85)))
    settle(qtbot, window)
    assert all(c.prediction.summary.num_samples == c.samples(100) for c in window.workspace.columns)
    after = [view.verdict.paragraphs for view in views]
    assert all(view.verdict.pending == frozenset() for view in views)
    assert all(a[3:] != b[3:] for a, b in zip(after, the_one, strict=True))  # the 7's comparison and sets
    for key in window.column_views:
        window.columns_scroll.show_prediction(window.workspace, key)
    assert [view.verdict.paragraphs for view in views] == after
