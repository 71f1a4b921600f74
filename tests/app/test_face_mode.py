"""The Face mode, driven as a person would: open a photo, pick a face, draw a box by hand."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from PIL import Image

from app.main import MainWindow
from core.resources import bundled_face_posteriors


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
        pytest.skip("no bundled face posteriors (resources/models/face_*.pt)")
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
    assert [c.key for c in window.workspace.columns] == [str(p.resolve()) for p in bundled_face_posteriors()]
    view = next(iter(window.column_views.values()))
    ticks = view.plots["interval"].getPlotItem().getAxis("bottom")._tickLevels[0]
    assert [t for _, t in ticks] == ["0-2", "3-7", "8-14", "15-24", "25-37", "38-47", "48-59", "60+"]


def test_a_photo_is_found_aligned_and_judged_by_every_face_column(qtbot, window, face_photos):
    assert window.load_image_file(face_photos["child"])
    judged(qtbot, window)
    assert window.workspace.image.shape == (128,)
    assert window.workspace.preview.shape == (150, 150, 3)  # the aligned crop is what is shown
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


def test_an_unreadable_photo_gets_a_sentence(qtbot, window, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr("app.main.QMessageBox.warning", lambda *a: shown.append(a[2]))
    bad = tmp_path / "photo.jpg"
    bad.write_bytes(b"not a photo")
    assert window.load_image_file(bad) is False
    assert shown and str(tmp_path) not in shown[0] and "Traceback" not in shown[0]
