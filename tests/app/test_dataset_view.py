"""The Dataset tab, driven as a person would (offscreen): evaluate, watch the progress, cancel,
read the tables, hit the cache, click a confusion cell and a thumbnail, export the report."""

from __future__ import annotations

from html.parser import HTMLParser

import numpy as np
import pytest
from PySide6.QtCore import Qt, QThreadPool
from PySide6.QtWidgets import QMessageBox

from app.main import MainWindow
from core.analysis.evaluation import evaluate, resolve_dataset
from core.analysis.evaluation_results import evaluation_tables
from core.engine.resources import resources_dir
from core.engine.runner import drain
from core.engine.store import load_posterior
from core.outputs.evaluation_cache import cache_folder

MODELS = resources_dir() / "models"
FILES = [MODELS / "network_lenet5_mc_dropout.pt", MODELS / "network_lenet5_sghmc.pt"]
IMAGES, SAMPLES = 200, 5


def open_dataset_tab(qtbot, monkeypatch, data_dir, files=FILES, size=(1400, 860)) -> MainWindow:
    """The window with the two digit posteriors (or ``files``), data from ``data_dir``, on the Dataset
    tab, ``size`` pixels (the first launch's). The Dataset tab's other test files open it here too."""
    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(data_dir))
    win = MainWindow([str(p) for p in files])
    qtbot.addWidget(win)
    win.resize(*size)
    win.show()
    qtbot.waitExposed(win)
    win.views.setCurrentWidget(win.dataset_view)
    return win


@pytest.fixture
def window(qtbot, monkeypatch, shared_data):
    win = open_dataset_tab(qtbot, monkeypatch, shared_data)
    win.dataset_view.set_choice("mnist-test", "notmnist", IMAGES, SAMPLES)
    yield win
    win.dataset_view.cancel(quiet=True)


def run_to_end(qtbot, view, timeout=120_000):
    with qtbot.waitSignal(view.run_ended, timeout=timeout):
        assert view.evaluate()
    assert view.results is not None, view.status.text()


@pytest.fixture(scope="module")
def reference(shared_data):
    """core.analysis.evaluation's own evaluation of the same columns, images, draws and seed."""
    data = resolve_dataset("mnist-test", shared_data).first(IMAGES)
    ood = resolve_dataset("notmnist", shared_data).first(IMAGES)
    from core.engine.naming import posterior_title, samples_used

    posteriors = {}
    for path in FILES:
        p = load_posterior(path)
        posteriors[posterior_title(p, samples_used(p, SAMPLES))] = p
    ev = drain(evaluate(posteriors, data, ood, num_samples=SAMPLES, seed=0))
    return ev, evaluation_tables(ev), data


def test_evaluation_runs_with_progress_and_equals_the_engine(qtbot, window, reference):
    view = window.dataset_view
    progress = []
    view.progress_reported.connect(lambda done, total, name: progress.append((done, total, name)))
    run_to_end(qtbot, view)
    ev, tables, _ = reference
    names = list(ev.results)
    # progress: images of each posterior, in column order, rising to test + OOD images
    order = [name for _, _, name in progress]
    assert sorted(set(order), key=order.index) == names
    for name in names:
        done = [d for d, _, n in progress if n == name]
        assert done == sorted(done) and done[-1] == 2 * IMAGES
        assert {t for _, t, n in progress if n == name} == {2 * IMAGES}
    assert "in " in view.status.text() and "from the cache" not in view.status.text()
    # one column per posterior, the workspace's order, each table the engine's numbers
    assert list(view.column_widgets) == names
    for row in tables["summary"]:
        widget = view.column_widgets[row["posterior"]]
        assert widget.column.summary == row
        shown = widget.metrics
        assert shown.value("Accuracy") == f"{row['accuracy'] * 100:.2f} %"
        assert shown.value("Log loss") == f"{row['nll']:.4f}"
        assert shown.value("Brier") == f"{row['brier']:.4f}"
        assert shown.value("ECE") == f"{row['ece']:.4f}"
        assert shown.value("Classwise ECE") == f"{row['classwise_ece']:.4f}"
        assert shown.value("Draws") == str(row["samples"])
        auroc = next(r["auroc"] for r in tables["ood_detection"]
                     if r["posterior"] == row["posterior"] and r["score"] == "total")
        assert shown.value("AUROC") == f"{auroc:.4f}"
    # SGHMC keeps several chains: its error plot shows boxes; MC dropout has one chain: bars
    sghmc = view.column_widgets[names[1]].errors
    assert sghmc.boxes.isVisible() and not sghmc.bars.isVisible()
    assert view.column_widgets[names[0]].errors.bars.isVisible()
    # the histogram score can change: AUROC follows
    view.score.setCurrentIndex(view.score.findData("epistemic"))
    epistemic = next(r["auroc"] for r in tables["ood_detection"]
                     if r["posterior"] == names[0] and r["score"] == "epistemic")
    assert view.column_widgets[names[0]].metrics.value("AUROC") == f"{epistemic:.4f}"


def test_second_run_comes_from_the_cache(qtbot, window):
    view = window.dataset_view
    run_to_end(qtbot, view)
    assert not any(w.column.cached for w in view.column_widgets.values())
    assert len(list(cache_folder().glob("*.npz"))) == 2
    first = {name: w.column.summary for name, w in view.column_widgets.items()}
    run_to_end(qtbot, view, timeout=20_000)
    assert all(w.column.cached for w in view.column_widgets.values())
    assert all(w.note.text() == "from the cache" for w in view.column_widgets.values())
    assert "(2 from the cache)" in view.status.text()
    assert {name: w.column.summary for name, w in view.column_widgets.items()} == first
    # clearing (the View menu's action) empties the cache; the next run computes again
    assert view.clear_cache() == 2
    assert not list(cache_folder().glob("*.npz"))


def test_cancel_stops_within_a_second_and_keeps_nothing(qtbot, window):
    view = window.dataset_view
    view.set_choice("mnist-test", "notmnist", 3000, 30)
    started = []
    view.progress_reported.connect(lambda done, total, name: started.append(done))
    assert view.evaluate()
    qtbot.waitUntil(lambda: len(started) >= 1 and started[-1] > 0, timeout=60_000)
    with qtbot.waitSignal(view.run_ended, timeout=1000):
        view.cancel_button.click()
    assert not view.running and view.evaluate_button.isEnabled() and view.results is None
    assert "cancelled" in view.status.text()
    # the worker itself ends after its current batch (a fraction of a second on a quiet machine)
    assert QThreadPool.globalInstance().waitForDone(30_000)
    assert not list(cache_folder().glob("*.npz"))


def test_clicking_a_confusion_cell_lists_its_images_and_a_thumbnail_opens_in_the_workspace(qtbot, window, reference):
    view = window.dataset_view
    run_to_end(qtbot, view)
    ev, _, data = reference
    name = list(ev.results)[1]
    preds = ev.results[name].data
    predicted = preds.mean_proba.argmax(1)
    # the true class with the most mistakes, and the class they went to
    hard = view.column_widgets[name].hard
    off = hard.counts - np.diag(np.diag(hard.counts))
    i, j = np.unravel_index(np.argmax(off), off.shape)
    if off[i, j] == 0:
        i, j = 3, 3  # no mistake at all: a diagonal cell
    expected = sorted(n for n in range(IMAGES) if preds.labels[n] == i and predicted[n] == j)
    assert expected
    view.scroll.ensureWidgetVisible(hard)
    qtbot.wait(50)
    qtbot.mouseClick(hard.viewport(), Qt.MouseButton.LeftButton, pos=hard.scene_point(float(j), float(i)))
    qtbot.waitUntil(view.thumbnails.isVisible, timeout=5000)
    grid = view.thumbnails.grid
    shown = sorted(int(grid.item(r).text().lstrip("#")) for r in range(grid.count()))
    assert shown == expected
    assert f"predicted as {j}" in view.thumbnails.caption.text()
    # clicking the first thumbnail judges that very image in the per-input workspace
    first = grid.item(0)
    index = int(first.text().lstrip("#"))
    qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=grid.visualItemRect(first).center())
    qtbot.waitUntil(lambda: window.workspace.image is not None and window.views.currentIndex() == 0, timeout=5000)
    assert np.allclose(window.workspace.image, data.x[index, 0].numpy(), atol=1e-6)
    assert f"#{index}" in window.workspace.input_label and f"true class {i}" in window.workspace.input_label


def test_histogram_bar_lists_the_out_of_distribution_images_of_its_bin(qtbot, window):
    view = window.dataset_view
    run_to_end(qtbot, view)
    name = next(iter(view.column_widgets))
    column = view.column_widgets[name]
    pair = column.column.histograms["total"]
    b = int(np.argmax(pair.ood_fraction))  # the fullest OOD bar
    selection = view.show_bin_images(name, b, True)
    assert len(selection.indices) == round(pair.ood_fraction[b] * IMAGES)
    assert view.thumbnails.grid.count() == len(selection.indices)
    assert "notMNIST" in view.thumbnails.caption.text()


def test_report_is_written_and_parses(qtbot, window, tmp_path):
    view = window.dataset_view
    run_to_end(qtbot, view)
    path = tmp_path / "report.html"
    assert view.exports.export_report(path)
    qtbot.waitUntil(lambda: view.exports.worker is None, timeout=120_000)
    assert path.is_file(), view.status.text()

    class Page(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags: list[str] = []
            self.text: list[str] = []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)

        def handle_data(self, data):
            self.text.append(data)

    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    assert page.tags.count("svg") == 6 and page.tags.count("table") >= 4
    body = " ".join(page.text)
    for name in view.column_widgets:
        assert name in body
    assert "MNIST test digits" in body and "notMNIST letters" in body
    assert "Wrote the report" in view.status.text()


def test_export_one_view_writes_figure_and_numbers(qtbot, window, tmp_path):
    view = window.dataset_view
    run_to_end(qtbot, view)
    out = tmp_path / "exports"
    assert view.exports.export_view("rejection", out / "rejection.png")
    qtbot.waitUntil(lambda: view.exports.worker is None, timeout=120_000)
    assert {p.name for p in out.iterdir()} == {"rejection.png", "rejection.csv", "rejection.json"}
    assert (out / "rejection.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Exported" in view.status.text()


def test_missing_images_get_a_dialog_without_paths(qtbot, window, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr(QMessageBox, "critical", lambda parent, title, text: shown.append((title, text)))
    empty = tmp_path / "my-images"
    empty.mkdir()
    view = window.dataset_view
    view.set_choice(str(empty), None, 0, SAMPLES)
    with qtbot.waitSignal(view.run_ended, timeout=30_000):
        assert view.evaluate()
    assert len(shown) == 1
    title, text = shown[0]
    assert title == "The evaluation stopped"
    assert "my-images" in text and str(tmp_path) not in text and "Error" not in text
    assert view.evaluate_button.isEnabled() and view.results is None


def test_engine_errors_become_sentences_without_folders():
    from app.views.dataset_sets import plain_sentence

    text = plain_sentence(OSError("could not write /tmp/run/out/report.html: no space left; the report was not saved"))
    assert text == "Could not write “report.html”: no space left; the report was not saved"


# ----------------------------------------------------------------------------- faces test split

UTKFACE_ARCHIVE = "utkface/UTKFace-128.tar.gz"
FACES_PER_GROUP = 4  # 32 photos: the split's test side holds one face of each of the 8 age groups


@pytest.fixture(scope="module")
def tiny_utkface(shared_data, tmp_path_factory):
    """A data folder whose utkface/UTKFace holds 4 photos of every age group (from the shared
    archive, at test time); skipped without the archive or the descriptor packages."""
    import tarfile

    from core.engine.faces import age_group

    archive = shared_data / UTKFACE_ARCHIVE
    if not archive.is_file():
        pytest.skip(f"UTKFace archive not found at {archive}")
    try:
        from core.engine.faces import get_descriptor

        get_descriptor()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"the face descriptor (bayescope[faces]) is not available: {exc}")
    root = tmp_path_factory.mktemp("data")
    folder = root / "utkface" / "UTKFace"
    folder.mkdir(parents=True)
    taken = [0] * 8
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            base = member.name.rsplit("/", 1)[-1]
            if not member.isfile() or not base.split("_", 1)[0].isdigit():
                continue
            group = age_group(int(base.split("_", 1)[0]))
            if taken[group] < FACES_PER_GROUP:
                (folder / base).write_bytes(tar.extractfile(member).read())
                taken[group] += 1
            if min(taken) == FACES_PER_GROUP:
                break
    return root


@pytest.fixture
def face_window(qtbot, monkeypatch, tiny_utkface):
    win = open_dataset_tab(qtbot, monkeypatch, tiny_utkface)
    yield win
    win.dataset_view.cancel(quiet=True)
    if win.dataset_view._worker is not None and hasattr(win.dataset_view._worker, "join"):
        win.dataset_view._worker.join(30)
    qtbot.waitUntil(lambda: not win.face_panel.busy, timeout=30_000)


def offered(box) -> list[str]:
    return [box.itemData(i) for i in range(box.count()) if box.model().item(i).isEnabled()]


def test_face_split_is_offered_only_for_face_columns(qtbot, face_window):
    from app.views.dataset_sets import FACE_SET

    view = face_window.dataset_view
    assert view.task == "digits"
    assert FACE_SET not in offered(view.test_set) and "mnist-test" in offered(view.test_set)
    assert view.test_set.currentData() != FACE_SET
    assert "faces test split is not offered" in view.sets_note.text()
    face_window.modes.setCurrentWidget(face_window.face_panel)  # the face heads become the columns
    assert view.task == "faces" and view.columns()
    assert offered(view.test_set) == [FACE_SET] and view.test_set.currentData() == FACE_SET
    assert offered(view.ood_set) == [""]  # no out-of-distribution set for faces
    assert "face heads" in view.sets_note.text() and "only UTKFace's test split" in view.sets_note.text()
    face_window.modes.setCurrentWidget(face_window.draw_panel)  # back: the digit sets come back
    assert view.test_set.currentData() == "mnist-test" and view.ood_set.currentData() == "notmnist"


def test_face_heads_on_a_tiny_split_describe_first_equal_core_and_a_cell_lists_its_faces(
        qtbot, face_window, tiny_utkface):
    from app.views.dataset_sets import FACE_SET
    from core.engine.faces.testset import load_face_test_set

    window = face_window
    view = window.dataset_view
    window.modes.setCurrentWidget(window.face_panel)
    view.set_choice(FACE_SET, None, 0, SAMPLES)
    progress = []
    view.progress_reported.connect(lambda done, total, name: progress.append((done, total, name)))
    with qtbot.waitSignal(view.run_ended, timeout=180_000):
        assert view.evaluate()
    assert view.results is not None, view.status.text()
    # the descriptors were computed first, in the same worker, with progress in faces
    describing = [(d, t) for d, t, name in progress if name == "describing faces"]
    assert describing and describing[-1] == (8, 8)
    assert view.progress.format() == "%v / %m images" or not view.progress.isVisible()
    # core's own evaluation of the same columns on the same faces (descriptors from the cache now)
    faces = drain(load_face_test_set(tiny_utkface / "utkface"))
    assert len(faces) == 8 and sorted(faces.data.y.tolist()) == list(range(8))
    posteriors = {c.title(SAMPLES): c.posterior for c in view.columns()}
    ev = drain(evaluate(posteriors, faces.data, num_samples=SAMPLES, seed=0))
    # the tab measures each file's conformal sets beside it (the face tier's files ship calibrated)
    from core.analysis.conformal_run import attach_conformal

    attach_conformal(ev, faces.data, {c.title(SAMPLES): c.key for c in view.columns()})
    tables = evaluation_tables(ev)
    assert list(view.column_widgets) == list(ev.results) and len(ev.results) >= 2
    for row in tables["summary"]:
        widget = view.column_widgets[row["posterior"]]
        assert widget.column.summary == row
        assert widget.metrics.value("Accuracy") == f"{row['accuracy'] * 100:.2f} %"
        assert widget.metrics.value("Log loss") == f"{row['nll']:.4f}"
    assert view.results.evaluation.class_names[-1] == "60+"
    assert "UTKFace test faces" in view.status.text() and "photos" in view.status.text()
    # a confusion cell lists exactly its faces, as photos
    name = next(iter(view.column_widgets))
    preds = ev.results[name].data
    hard = view.column_widgets[name].hard
    i, j = np.unravel_index(np.argmax(hard.counts), hard.counts.shape)
    expected = sorted(n for n in range(len(faces)) if preds.labels[n] == i and preds.predictions[n] == j)
    assert expected
    view.scroll.ensureWidgetVisible(hard)
    qtbot.wait(50)
    with qtbot.waitSignal(view.thumbnails_shown, timeout=20_000):
        qtbot.mouseClick(hard.viewport(), Qt.MouseButton.LeftButton, pos=hard.scene_point(float(j), float(i)))
    grid = view.thumbnails.grid
    shown = sorted(int(grid.item(r).text().lstrip("#")) for r in range(grid.count()))
    assert shown == expected
    names = view.results.evaluation.class_names
    assert f"faces aged {names[i]} predicted as {names[j]}" in view.thumbnails.caption.text()
    assert view.thumbnails.faces and all(im.ndim == 3 and im.dtype == np.uint8 for im in view.thumbnails.images)
    # clicking a photo judges it in the Face tab
    first = grid.item(0)
    row = int(first.text().lstrip("#"))
    qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=grid.visualItemRect(first).center())
    qtbot.waitUntil(lambda: window.views.currentIndex() == 0
                    and window.modes.currentWidget() is window.face_panel, timeout=5000)
    assert window.face_panel._name == faces.names[row].rsplit("/", 1)[-1]
    assert np.array_equal(window.face_panel._photo, faces.photos([row])[0])


def test_a_long_title_or_axis_label_is_cut_to_the_plot_and_never_widens_it(qtbot):
    """pyqtgraph makes a title's width its plot's minimum: in a narrow column the plot ran off
    the column's edge, its legend and right half cut off. A shorter wording is preferred to a cut."""
    from app.plots.axes import CompactPlot

    title, label = "Accuracy when uncertain images are referred to a person", "total uncertainty (entropy of the mean)"
    plot = CompactPlot()
    qtbot.addWidget(plot)
    plot.set_title(title)
    plot.set_bottom_label(label)
    plot.resize(220, 200)
    plot.show()
    qtbot.waitExposed(plot)
    item = plot.getPlotItem()
    assert item.size().width() <= plot.width()
    assert item.titleLabel.text.endswith("…") and title.startswith(item.titleLabel.text[:-1])
    assert item.getAxis("bottom").labelText.endswith("…")
    plot.set_title("Short")  # a new title is fitted at once, not at the next resize
    assert item.titleLabel.text == "Short"
    plot.set_title(title, "Accuracy kept", "Kept")  # the longest wording that fits is shown whole
    plot.set_bottom_label(label, "total uncertainty (nats)")
    assert item.titleLabel.text == "Accuracy kept"
    assert item.getAxis("bottom").labelText == "total uncertainty (nats)"
    plot.set_title(title)
    plot.resize(900, 200)
    qtbot.waitUntil(lambda: item.titleLabel.text == title)
    assert item.getAxis("bottom").labelText == label


def test_the_metrics_names_and_numbers_are_whole_at_any_width(qtbot):
    """In a narrow column the names were cut (“Accur…”, “Class…”, “Uncer…”): the measures now
    go one to a row there, two to a row where they fit whole."""
    from app.views.dataset_tables import MetricsTable

    table = MetricsTable()
    qtbot.addWidget(table)
    for label, _ in MetricsTable.ROWS:
        table._value_item(label).setText(MetricsTable.WIDEST_NUMBER)
    table.show()
    qtbot.waitExposed(table)
    for width, columns in ((table.minimumWidth(), 2), (220, 2), (400, 4)):
        table.resize(max(width, table.minimumWidth()), table.height())
        qtbot.waitUntil(lambda columns=columns: table.columnCount() == columns)
        for c in range(columns):
            assert table.columnWidth(c) >= table.sizeHintForColumn(c), (width, c)
        assert table.height() == table.ROW_HEIGHT * table.rowCount() + 4  # every measure shown
        assert table.value("Classwise ECE") == MetricsTable.WIDEST_NUMBER


def test_the_window_fits_a_1024_by_680_screen_on_every_tab(qtbot, monkeypatch, shared_data):
    """With the Dataset tab built, the window would not shrink below 1228 px: its row of
    controls (Test set … Cancel) was one line."""
    win = open_dataset_tab(qtbot, monkeypatch, shared_data)
    for mode in range(win.modes.count()):
        win.modes.setCurrentIndex(mode)
        for tab in range(win.views.count()):
            win.views.setCurrentIndex(tab)
            hint = win.minimumSizeHint()
            assert hint.width() <= 1024 and hint.height() <= 680, (mode, tab, hint)
    win.resize(1024, 680)
    qtbot.waitUntil(lambda: win.width() == 1024 and win.height() == 680)


def test_the_window_keeps_a_1024_pixel_width_while_a_run_shows_its_progress(qtbot, monkeypatch, shared_data):
    """The progress bar, shown only during a run, sat in the row of buttons: a 1024 × 680 window
    grew to 1101 pixels wide for as long as a run lasted (and a resize asked meanwhile was held at
    that width)."""
    win = open_dataset_tab(qtbot, monkeypatch, shared_data, size=(1024, 680))
    view = win.dataset_view
    from core.outputs import evaluation_cache

    monkeypatch.setattr(evaluation_cache, "run_evaluation", slow_evaluation([]))
    view.set_choice("mnist-test", "notmnist", IMAGES, SAMPLES)
    assert view.evaluate()
    qtbot.waitUntil(lambda: view.progress.isVisible() and view.progress.value() > 100)
    qtbot.wait(50)  # the layout's new minimum applied
    hint = win.minimumSizeHint()
    assert hint.width() <= 1024 and hint.height() <= 680, hint
    assert (win.width(), win.height()) == (1024, 680)
    view.cancel(quiet=True)


def slow_evaluation(started: list[str]):
    """A stand-in for run_evaluation that never ends on its own: a stream of progress records
    (the faces' description first for the faces test split), as fast as the GUI takes them."""

    def run(items, dataset, ood=None, data_dir=None, limit=None, **kwargs):
        import time

        from app.views.dataset_sets import FACE_SET
        from core.engine.inference.base import ProgressRecord

        started.append(dataset)
        yield ProgressRecord(0, 0, {}, "loading")
        for i in range(10**9):
            if dataset == FACE_SET:
                yield ProgressRecord(i, 4741, {"faces_per_second": 5.0}, "descriptors")
            else:
                yield ProgressRecord(i, 10**9, {"index": 0.0, "images_done": float(i), "images_total": 1e9,
                                                "cached": 0.0}, items[0].name)
            time.sleep(0.0002)

    return run


def test_cancelling_long_evaluations_at_any_point_leaves_the_window_working(qtbot, window, monkeypatch):
    """Cancel (or replace, or close the window on) a long face or digit evaluation, early and
    late, with the other mode's results on screen: each worker is let go by the GUI thread and
    the window works on. A face evaluation cancelled after minutes crashed the window (exit 139)."""
    import gc
    import threading
    import weakref

    from app import workers
    from app.views.dataset_sets import FACE_SET
    from core.outputs import evaluation_cache

    view = window.dataset_view
    run_to_end(qtbot, view)  # digit results on screen
    digit_results = view.results
    started: list[str] = []
    monkeypatch.setattr(evaluation_cache, "run_evaluation", slow_evaluation(started))
    freed_in: list[str] = []
    records: list[int] = []
    view.progress_reported.connect(lambda done, total, name: records.append(done))

    def start(mode_panel) -> None:
        window.modes.setCurrentWidget(mode_panel)
        records.clear()
        assert view.evaluate()
        weakref.finalize(view._worker, lambda: freed_in.append(threading.current_thread().name))

    points = (0, 1, 40, 400)
    for panel in (window.face_panel, window.draw_panel):
        for point in points:
            start(panel)
            qtbot.waitUntil(lambda p=point: len(records) >= p, timeout=20_000)
            with qtbot.waitSignal(view.run_ended, timeout=1000):
                view.cancel_button.click()
            assert not view.running and view.evaluate_button.isEnabled()
            gc.collect()
    assert set(started) == {FACE_SET, "mnist-test"}  # a run cancelled before its first step never starts
    # a face evaluation running while the digit mode (and its results) are on screen, cancelled there
    start(window.face_panel)
    qtbot.waitUntil(lambda: len(records) >= 100, timeout=20_000)
    window.modes.setCurrentWidget(window.draw_panel)
    assert view.results is digit_results  # the digit mode's own results come back
    view.cancel_button.click()
    # the silent look into the cache replaced by Evaluate, then the window closed during a run
    window.modes.setCurrentWidget(window.face_panel)
    assert view.evaluate(cache_only=True)
    start(window.face_panel)
    qtbot.waitUntil(lambda: len(records) >= 100, timeout=20_000)
    window.close()
    assert not view.running
    qtbot.waitUntil(lambda: not workers.running_workers(), timeout=20_000)
    gc.collect()
    qtbot.waitUntil(lambda: len(freed_in) == 2 * len(points) + 2, timeout=20_000)
    assert set(freed_in) == {threading.main_thread().name}


def test_the_other_modes_results_leave_the_tab_and_come_back_with_their_mode(qtbot, window):
    view = window.dataset_view
    run_to_end(qtbot, view)
    digit_results = view.results
    window.modes.setCurrentWidget(window.face_panel)  # the columns become face heads
    assert view.results is None and not view.column_widgets
    assert not view.report_button.isEnabled()  # nothing of the digits to export under the faces split
    assert "press Evaluate" in view.status.text()
    window.modes.setCurrentWidget(window.draw_panel)
    assert view.results is digit_results and list(view.column_widgets) == [c.name for c in digit_results.columns]
    assert view.report_button.isEnabled() and "latest results of the digit posteriors" in view.status.text()


def test_evaluate_pressed_while_the_columns_are_still_read_starts_when_they_are(qtbot, monkeypatch, shared_data):
    """Right after launch the engine imports in the background and the columns come after it:
    an Evaluate pressed then was answered "Add a digit posterior first" and did nothing."""
    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow([str(p) for p in FILES], defer_columns=True)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    win.views.setCurrentWidget(win.dataset_view)
    view = win.dataset_view
    view.set_choice("mnist-test", None, IMAGES, SAMPLES)
    assert not view.columns()
    assert view.evaluate()
    assert "still being read" in view.status.text()
    with qtbot.waitSignal(view.run_ended, timeout=120_000):
        win.load_columns()  # what the start-up does once the engine is imported
    assert view.results is not None and len(view.results.columns) == len(FILES)


def test_a_face_limit_describes_only_that_many_faces_after_an_estimate(qtbot, face_window):
    """Asked for N faces, the tab described the whole split first (4,741 faces, 15 minutes)."""
    from app.views.dataset_sets import FACE_SET

    window = face_window
    view = window.dataset_view
    window.modes.setCurrentWidget(window.face_panel)
    view.set_choice(FACE_SET, None, 3, SAMPLES)
    seen: list[tuple[int, int, str]] = []
    view.progress_reported.connect(
        lambda done, total, name: name == "describing faces" and seen.append((done, total, view.status.text())))
    with qtbot.waitSignal(view.run_ended, timeout=180_000):
        assert view.evaluate()
    assert view.results is not None, view.status.text()
    assert {total for _, total, _ in seen} == {3} and seen[-1][0] == 3  # 3 faces asked, 3 described
    assert seen[0][2].startswith("Describing 3 faces with dlib takes ")  # the estimate, before any work
    assert len(view.results.data) == 3 - view.results.data.source["dropped"]


def test_four_columns_fit_a_1600_pixel_window_and_the_histograms_name_their_sets(qtbot, monkeypatch, shared_data):
    """The fourth column was cut off at 1600 px, and nothing said which colour was which set."""
    files = FILES + [MODELS / "network_lenet5_mfvi.pt", MODELS / "network_lenet5_vdropout.pt"]
    win = open_dataset_tab(qtbot, monkeypatch, shared_data, files, size=(1600, 1000))
    view = win.dataset_view
    view.set_choice("mnist-test", "notmnist", 100, SAMPLES)
    run_to_end(qtbot, view)
    qtbot.wait(50)
    assert len(view.column_widgets) == 4
    assert not view.scroll.horizontalScrollBar().isVisible()
    for widget in view.column_widgets.values():
        assert widget.histogram.legend_names() == ["MNIST test digits", "notMNIST letters"]
    # every title and axis label whole, in a shorter wording where the long one does not fit
    # ("AUROC 0.97… · AUPR …", "total uncertainty (entropy o…" were cut at 1600 and at 1024)
    for size in ((1600, 1000), (1024, 680)):
        win.resize(*size)
        qtbot.waitUntil(lambda size=size: (win.width(), win.height()) == size)
        qtbot.wait(50)
        assert cut_texts(view) == [], size


def cut_texts(view) -> list[str]:
    from app.plots.axes import CompactPlot

    items = [plot.getPlotItem() for widget in view.column_widgets.values() for plot in widget.findChildren(CompactPlot)]
    assert items
    texts = [t for item in items for t in (item.titleLabel.text, item.getAxis("bottom").labelText)]
    return [t for t in texts if t.endswith("…")]


def test_the_report_shows_its_progress_and_cancel_stops_it_leaving_no_page(qtbot, window, tmp_path):
    """Export report (38 s on the defaults) counts its figures in the status line and the tab's Cancel
    stops it between two figures: no page is written, and the buttons come back."""
    view = window.dataset_view
    run_to_end(qtbot, view)
    seen: list[str] = []
    path = tmp_path / "report.html"
    assert view.exports.export_report(path)
    assert view.cancel_button.isEnabled() and not view.report_button.isEnabled()
    qtbot.waitUntil(lambda: seen.append(view.status.text()) or "figures drawn" in view.status.text(), timeout=60_000)
    view.cancel_button.click()
    qtbot.waitUntil(lambda: view.exports.worker is None, timeout=120_000)
    assert not path.exists()
    assert view.status.text() == "Report cancelled: no page was written."
    assert not view.cancel_button.isEnabled() and view.report_button.isEnabled()
    assert any("of" in text and "figures drawn" in text for text in seen)



def test_every_column_s_views_start_at_one_height_the_reference_s_included(qtbot, monkeypatch, shared_data):
    """The reference (HMC) has no 'against exact inference' line of its own measure; it says what it
    is instead, so that its metrics and plots do not sit higher than its neighbours'."""
    win = open_dataset_tab(qtbot, monkeypatch, shared_data,
                           [MODELS / "paper_softmax_hmc.pt", MODELS / "paper_softmax_mfvi.pt"])
    view = win.dataset_view
    view.set_choice("mnist-test", "notmnist", IMAGES, SAMPLES)
    run_to_end(qtbot, view)
    columns = list(view.column_widgets.values())
    assert len(columns) == 2
    assert sum("the reference the other columns" in c.reference.text() for c in columns) == 1
    assert all(c.reference.isVisibleTo(c) for c in columns)
    tops = {c.metrics.mapTo(c, c.metrics.rect().topLeft()).y() for c in columns}
    assert len(tops) == 1, tops
    view.cancel(quiet=True)


@pytest.mark.parametrize("width", [200, 280, 420])
def test_the_data_set_plots_legends_lie_under_their_data_and_within_their_width(qtbot, width):
    """The histograms' legend, over the bars on a pale ground, hid the tops of the bars between
    about 4 % and 40 % (a face column's 200 images), and the kept-accuracy legend stretches of
    its curves: each legend now has a row of its own under the plot, as many entries a row as fit."""
    from types import SimpleNamespace

    from app.plots.dataset_plots import OodHistogramPlot, RejectionPlot
    from core.analysis.metrics import REJECTION_SCORES

    edges = np.linspace(0, 2, 31)
    share = np.full(30, 1 / 30)
    histogram = OodHistogramPlot()
    histogram.set_set_names("MNIST test digits", "notMNIST letters")
    histogram.show_column(SimpleNamespace(histograms={"total": SimpleNamespace(edges=edges, in_fraction=share,
                                                                               ood_fraction=share)},
                                          ood={"total": {"auroc": 0.9, "aupr_out": 0.8}}), "total")
    rates = np.linspace(0, 0.95, 20)
    rejection = RejectionPlot()
    rejection.show_column(SimpleNamespace(rejection={s: (rates, 0.9 + 0.1 * rates) for s in REJECTION_SCORES},
                                          oracle=(rates, np.minimum(1, 0.9 + rates))))
    for plot, names in ((histogram, ["MNIST test digits", "notMNIST letters"]),
                        (rejection, [*REJECTION_SCORES, "best"])):
        qtbot.addWidget(plot)
        plot.resize(width, 220)
        plot.show()
        qtbot.waitExposed(plot)
        qtbot.wait(20)
        assert [label.text for _, label in plot.legend.items] == names
        data = plot.getPlotItem().getViewBox().sceneBoundingRect()
        legend = plot.legend.sceneBoundingRect()
        assert legend.top() >= data.bottom(), (width, legend, data)
        for _, label in plot.legend.items:
            assert label.sceneBoundingRect().right() <= plot.width() + 0.5, (width, label.text)
