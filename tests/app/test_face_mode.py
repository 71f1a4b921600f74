"""The Face mode, driven as a person would: open a photo, pick a face, draw a box by hand."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from PIL import Image
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QLabel, QWidget

from app import settings as app_settings
from app.main import MainWindow
from app.plots.axes import short_class_name
from app.plots.input_views import INPUT_PLOTS
from core.engine.faces.age_groups import AGE_GROUP_NAMES
from core.engine.resources import bundled_face_posteriors

DIGITS = tuple(str(d) for d in range(10))


def drawn_labels(plot, axis) -> list[tuple[object, str]]:
    """The labels ``axis`` of ``plot`` has drawn at its size now: (rectangle, text)."""
    plot.grab()  # a paint at the current size
    return list(axis.drawn)


def assert_apart(plot, axis) -> None:
    """No two labels touch: side by side by their drawn boxes, stacked by their glyphs' ink."""
    labels = sorted(drawn_labels(plot, axis), key=lambda lt: (lt[0].center().x(), lt[0].center().y()))
    assert labels, "no label drawn"
    metrics = QFontMetricsF(axis.font(plot.font()))
    for (a, ta), (b, tb) in zip(labels, labels[1:], strict=False):
        if axis.orientation in ("top", "bottom"):
            assert a.right() <= b.left(), f"{ta!r} and {tb!r} overlap"
        else:
            ink = (metrics.tightBoundingRect(ta).height() + metrics.tightBoundingRect(tb).height()) / 2
            assert abs(b.center().y() - a.center().y()) >= ink, f"{ta!r} and {tb!r} overlap"


@pytest.fixture(scope="module")
def face_photos(tmp_path_factory, shared_data):
    """Two UTKFace photos (a child and an older adult) and a photo with both, side by side."""
    archive = shared_data / "utkface" / "UTKFace-128.tar.gz"
    if not archive.is_file():
        pytest.skip(f"UTKFace archive not found at {archive}")
    folder = tmp_path_factory.mktemp("faces")
    wanted = {"child": None, "adult": None}
    with tarfile.open(archive) as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            if not name.endswith(".jpg") or "_" not in name:
                continue
            age = int(name.split("_", 1)[0])
            key = "child" if age == 4 else "adult" if age == 60 else None
            if key and wanted[key] is None:
                wanted[key] = tar.extractfile(member).read()
            if all(wanted.values()):
                break
    paths = {}
    for key, data in wanted.items():
        image = Image.open(io.BytesIO(data)).convert("RGB").resize((256, 256))
        paths[key] = folder / f"{key}.jpg"
        image.save(paths[key])
    both = Image.new("RGB", (600, 300), (230, 230, 230))
    both.paste(Image.open(paths["child"]).resize((200, 200)), (20, 50))
    both.paste(Image.open(paths["adult"]).resize((280, 280)), (300, 10))
    paths["both"] = folder / "both.jpg"
    both.save(paths["both"])
    return paths


@pytest.fixture
def window(qtbot, monkeypatch, shared_data):
    if not bundled_face_posteriors():
        pytest.skip("no bundled face posteriors (resources/models/faces_*.pt)")
    monkeypatch.setenv("BAYESCOPE_DATA_DIR", str(shared_data))
    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    win.modes.setCurrentWidget(win.face_panel)
    return win


def judged(qtbot, window, timeout=60_000):
    qtbot.waitUntil(lambda: not window.face_panel.busy and not window.inference.busy
                    and not window._throttle.isActive() and window.workspace.image is not None
                    and all(c.prediction is not None for c in window.workspace.columns), timeout=timeout)


def test_face_tab_shows_the_face_columns_labelled_by_age(window):
    assert window.workspace.task == "faces"
    # the face tier's default columns, HMC (its reference) first
    assert [c.key for c in window.workspace.columns] == [str(p.resolve()) for p in app_settings.default_face_columns()]
    if app_settings.default_face_columns()[0].name == app_settings.DEFAULT_FACE_COLUMNS[0]:
        assert window.workspace.columns[0].posterior.method == "hmc"
    view = next(iter(window.column_views.values()))
    axis = view.plots["interval"].bottom
    assert axis.class_names == ("0-2", "3-7", "8-14", "15-24", "25-37", "38-47", "48-59", "60+")
    # in a column this narrow each group is labelled by its first age (wider: the full names)
    assert [t for _, t in axis.labels()] in (list(axis.class_names),
                                                   ["0", "3", "8", "15", "25", "38", "48", "60"])


def test_a_photo_is_found_aligned_and_judged_by_every_face_column(qtbot, window, face_photos):
    assert window.load_image_file(face_photos["child"])
    judged(qtbot, window)
    assert window.workspace.image.shape == (128,)
    assert window.workspace.preview.shape == (150, 150, 3)  # the aligned crop is what is shown
    assert "assume the box holds a face" not in window.warning.text()  # the detector found this one
    for column in window.workspace.columns:
        s = column.prediction.summary
        assert s.mean.shape == (8,) and abs(float(s.mean.sum()) - 1) < 1e-4
        assert s.predicted_class <= 2, f"a 4-year-old read as group {s.predicted_class}"
    # switching back to digits brings the digit columns back, untouched
    window.modes.setCurrentWidget(window.draw_panel)
    assert window.workspace.task == "digits" and len(window.workspace.columns) == 4


def test_several_faces_largest_first_and_another_can_be_picked(qtbot, window, face_photos):
    window.load_image_file(face_photos["both"])
    judged(qtbot, window)
    panel = window.face_panel
    assert panel.faces.count() == 2 and panel.faces.isEnabled()
    assert panel._boxes[0].area >= panel._boxes[1].area
    first = window.workspace.image.copy()
    panel.faces.setCurrentIndex(1)
    qtbot.waitUntil(lambda: not np.array_equal(window.workspace.image, first), timeout=60_000)
    judged(qtbot, window)
    assert window.workspace.columns[0].prediction.summary.predicted_class <= 2  # the child


def test_no_face_says_so_and_a_box_drawn_by_hand_is_used(qtbot, window, tmp_path):
    digit = np.zeros((200, 200), np.uint8)
    digit[40:160, 95:105] = 255
    Image.fromarray(digit).save(tmp_path / "digit.png")
    window.load_image_file(tmp_path / "digit.png")
    qtbot.waitUntil(lambda: not window.face_panel.busy, timeout=60_000)
    assert "No face was found" in window.face_panel.message.text()
    assert window.workspace.image is None
    window.face_panel.draw_box.click()
    assert window.face_panel.use_box.isVisible()
    window.face_panel.use_box.click()
    judged(qtbot, window)
    assert window.workspace.image.shape == (128,)
    # beside the result: nothing found a face in this box, and the heads cannot tell
    assert "The age groups assume the box holds a face" in window.warning.text()
    assert "cannot tell a face from anything else" in window.warning.text()


def test_an_unreadable_photo_gets_a_sentence(qtbot, window, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr("app.main.QMessageBox.warning", lambda *a: shown.append(a[2]))
    bad = tmp_path / "photo.jpg"
    bad.write_bytes(b"not a photo")
    assert window.load_image_file(bad) is False
    assert shown and str(tmp_path) not in shown[0] and "Traceback" not in shown[0]


# ------------------------------------------------------------------ age-group labels


def class_axes(plot):
    return plot.class_axes()


def test_short_names_are_a_group_s_first_age():
    assert [short_class_name(n) for n in AGE_GROUP_NAMES] == ["0", "3", "8", "15", "25", "38", "48", "60"]
    assert short_class_name("7") == "7" and short_class_name("T-shirt") == "T-shirt"


@pytest.mark.parametrize("width", [200, 260, 420])
@pytest.mark.parametrize("plot_class", INPUT_PLOTS, ids=lambda c: c.__name__)
def test_age_group_labels_never_collide_down_to_a_200_px_column(qtbot, plot_class, width):
    plot = plot_class(AGE_GROUP_NAMES)
    qtbot.addWidget(plot)
    plot.resize(width - 12, plot.minimumHeight())  # a column's plot: its width less the frame
    QWidget.show(plot)  # the plots' own show() draws a prediction
    qtbot.waitExposed(plot)
    assert class_axes(plot) or plot_class.__name__ == "EntropyPlot"  # the only plot without classes
    for axis in class_axes(plot):
        assert_apart(plot, axis)
        assert axis.choice is not None
        texts = [t for _, t in drawn_labels(plot, axis)]
        assert set(texts) <= set(AGE_GROUP_NAMES) | {short_class_name(n) for n in AGE_GROUP_NAMES}
        if plot_class.__name__ in ("IntervalPlot", "VariancePlot"):
            assert len(texts) == len(AGE_GROUP_NAMES), "the bar plots name every group"
        if texts != list(AGE_GROUP_NAMES):
            assert all(n in plot.toolTip() for n in AGE_GROUP_NAMES), "the full names are a hover away"


def test_wide_columns_keep_the_full_group_names(qtbot):
    plot = INPUT_PLOTS[1](AGE_GROUP_NAMES)  # mean and interval
    qtbot.addWidget(plot)
    plot.resize(600, 200)
    QWidget.show(plot)
    qtbot.waitExposed(plot)
    assert [t for _, t in drawn_labels(plot, class_axes(plot)[0])] == list(AGE_GROUP_NAMES)


@pytest.mark.parametrize("plot_class", INPUT_PLOTS, ids=lambda c: c.__name__)
def test_digit_labels_never_touch_in_narrow_columns(qtbot, plot_class):
    """Digits are drawn as they are where they fit (the bar plots' 0–9), and made smaller or
    thinned where they would touch: at its smallest, the correlation matrix's ten rows are
    about 7 pixels apart, less than a digit is tall (issue 47, item 14)."""
    plot = plot_class(DIGITS)
    qtbot.addWidget(plot)
    plot.resize(188, plot.minimumHeight())
    QWidget.show(plot)
    qtbot.waitExposed(plot)
    assert class_axes(plot) or plot_class.__name__ == "EntropyPlot"  # the only plot without classes
    for axis in class_axes(plot):
        assert_apart(plot, axis)
        texts = [t for _, t in drawn_labels(plot, axis)]
        assert texts[0] == "0" and set(texts) <= set(DIGITS)
        if plot_class.__name__ in ("IntervalPlot", "VariancePlot"):
            assert axis.choice is None and texts == list(DIGITS)  # the normal font, every digit
    if plot_class.__name__ == "CorrelationPlot":
        rows = plot.data_rect().height() / len(DIGITS)
        cap = QFontMetricsF(plot.font()).capHeight()
        assert rows < cap + 1.5  # too close for every digit in the normal font: what was fixed
        assert plot.left.choice is not None and plot.bottom.choice is not None


def test_the_aligned_face_is_shown_once_below_the_tabs(qtbot, window, face_photos):
    window.load_image_file(face_photos["child"])
    judged(qtbot, window)
    chip = window.face_panel.preview()
    assert chip is not None and window.workspace.preview is chip
    assert window.preview.shown is chip  # the window's "what the model sees"
    # the Face panel shows the photo and its boxes, but no second copy of the crop
    pictures = [w for w in window.face_panel.findChildren(QLabel) if w.pixmap() is not None and not w.pixmap().isNull()]
    assert pictures == []


@pytest.mark.parametrize("width", [188, 420])
def test_numbers_on_the_uncertainty_axis_never_touch(qtbot, width):
    plot = INPUT_PLOTS[2](AGE_GROUP_NAMES)  # uncertainty in nats: 0, 0.5, 1 ... up to 1.12 ln K
    qtbot.addWidget(plot)
    plot.resize(width, plot.minimumHeight())
    QWidget.show(plot)
    qtbot.waitExposed(plot)
    assert_apart(plot, plot.bottom)
    texts = [t for _, t in drawn_labels(plot, plot.bottom)]
    assert texts[0] == "0" and len(texts) >= 3


def test_single_character_classes_stacked_too_close_are_thinned_not_overprinted(qtbot):
    names = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")  # single letters are never fitted
    plot = INPUT_PLOTS[0](names)  # draws per class: one row per class
    qtbot.addWidget(plot)
    plot.resize(188, plot.minimumHeight())
    QWidget.show(plot)
    qtbot.waitExposed(plot)
    drawn = drawn_labels(plot, plot.left)
    cap = QFontMetricsF(plot.left.font(plot.font())).capHeight()
    assert 1 < len(drawn) < len(names) and drawn[0][1] == "A"
    assert all(b.center().y() - a.center().y() >= 0.75 * cap for (a, _), (b, _) in zip(drawn, drawn[1:], strict=False))
