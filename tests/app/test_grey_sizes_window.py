"""A grey posterior of another side than a digit's (``train --image-size 8`` on a grey folder) in the
window: the loader refused it before; now the Image tab judges a photo with it and the Dataset tab
its folder, and the Draw tab, whose canvas is MNIST's 28×28, says in one sentence why it cannot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.app.test_own_images_window import _window, settle
from tests.conftest import grey_shapes, train_at_eight

DIGITS = Path(__file__).resolve().parents[2] / "resources" / "models" / "network_lenet5_mc_dropout.pt"
CLASSES = ("bar", "column")


@pytest.fixture(scope="module")
def grey_eight(tmp_path_factory) -> tuple[Path, Path]:
    """(posterior, folder): a MAP softmax regression that ``bayescope-cli train`` fits at 8×8."""
    folder = grey_shapes(tmp_path_factory.mktemp("grey") / "shapes", CLASSES)
    return train_at_eight(folder), folder


def test_the_draw_tab_says_why_and_the_image_tab_judges_a_photo(qtbot, grey_eight, monkeypatch):
    path, folder = grey_eight
    warned = []
    monkeypatch.setattr("app.main.QMessageBox.warning", lambda *a: warned.append(a[2]))
    window = _window(qtbot, [DIGITS])
    assert window.modes.currentWidget() is window.draw_panel
    assert window.add_posterior(path), warned  # refused before: "every image here is 28×28"
    # it cannot judge the drawing: the window goes to the Image tab and says why in one sentence
    assert window.modes.currentWidget() is window.image_panel and window.workspace.task == "images"
    said = window.statusBar().currentMessage()
    assert "reads your own grey 8×8 images, while a drawn or picked digit is 28×28 (MNIST's size)" in said, said
    assert "open a photo here" in said and str(path.parent) not in said and "Error" not in said
    assert window.load_image_file(folder / "column" / "5.png")
    settle(qtbot, window)
    column = window.workspace.columns[0]
    assert column.failure is None and window.workspace.class_names == CLASSES
    assert window.workspace.class_names[column.prediction.summary.predicted_class] == "column"
    assert window.preview.shown.shape == (8, 8)  # what the model sees: the photo at its own side
    # a digit (a Dataset tab thumbnail of MNIST) reaching it gets the same reason, in its column
    digit = np.zeros((28, 28), np.float32)
    digit[6:22, 12:16] = 1.0
    window.show_image_array(digit, "MNIST test digit #3 (a 1)")
    settle(qtbot, window)
    column = window.workspace.columns[0]
    assert column.prediction is None
    assert "grey 8×8 images, while a drawn or picked digit is 28×28" in column.failure
    assert "/" not in column.failure and "Error" not in column.failure
    window.modes.setCurrentWidget(window.draw_panel)  # the Draw tab judges with the digit column
    assert window.workspace.column_keys() == [str(DIGITS.resolve())]


def test_the_dataset_tab_judges_it_on_its_folder(qtbot, grey_eight, tmp_path):
    path, _ = grey_eight
    test = tmp_path / "unseen shapes"  # train/ and test/ given: its test/ part is judged, all 10 images
    grey_shapes(test / "train", CLASSES, 2, 7)
    grey_shapes(test / "test", CLASSES, 5, 8)
    window = _window(qtbot, [path])
    window.modes.setCurrentWidget(window.image_panel)
    window.views.setCurrentIndex(2)
    view = window.dataset_view
    view.set_choice(str(test), None, 0, 1)
    with qtbot.waitSignal(view.run_ended, timeout=60_000):
        assert view.evaluate()
    assert view.results is not None, view.status.text()
    result = next(iter(view.results.evaluation.results.values()))
    assert view.results.evaluation.class_names == CLASSES
    assert sorted(result.data.labels.tolist()) == [0] * 5 + [1] * 5
    assert (result.data.mean_proba.argmax(1) == result.data.labels).mean() == 1.0
