"""The training dialog takes a folder of one's own images: it reads the folder in the background,
says what it found in words (images, classes, grey or colour, the size trained at, the files it
could not read), offers the network the command line would pick, refuses in a sentence what the
command line would refuse, and the trained posterior becomes a column of one's own images."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image
from PySide6.QtWidgets import QMessageBox

from app.views.training import TrainingDialog
from app.workspace import task_of
from core.engine.store import load_posterior
from tests.app.test_training_dialog import run_to_saved


def _tinted_folder(root, classes=(("blue", 2), ("red", 0)), count=12, corrupt=True):
    """``count`` 32×32 PNGs per class, noise with one channel raised (red-ish or blue-ish), and
    one file that is no image under the first class given."""
    rng = np.random.default_rng(0)
    for name, channel in classes:
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 80, (32, 32, 3)).astype(np.uint8)
            pixels[..., channel] += 150
            Image.fromarray(pixels).save(root / name / f"{name}-{i:02d}.png")
    if corrupt:
        (root / classes[-1][0] / "broken.png").write_bytes(b"this is not a PNG")
    return root


def _read(qtbot, dialog: TrainingDialog, folder) -> None:
    dialog.choose_images_folder(folder)
    assert dialog.uses_folder and dialog.reading_folder
    qtbot.waitUntil(lambda: not dialog.reading_folder, timeout=20_000)


def _dialog(qtbot) -> TrainingDialog:
    dialog = TrainingDialog()
    qtbot.addWidget(dialog)
    return dialog


def test_a_colour_folder_is_described_in_words_and_trains_a_column_of_its_classes(qtbot, tmp_path, monkeypatch):
    from app.main import MainWindow

    folder = _tinted_folder(tmp_path / "tints")
    monkeypatch.setattr("app.views.training.dialog.QMessageBox.question", lambda *a: pytest.fail("asked"))
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.show_training_dialog()
    dialog = window.training_dialog
    assert not dialog.uses_folder  # MNIST's digits, as before, unless a folder is chosen
    assert dialog.form.isRowVisible(dialog._data_row) and not dialog.form.isRowVisible(dialog._images_row)
    _read(qtbot, dialog, folder)
    assert dialog.form.isRowVisible(dialog._images_row) and not dialog.form.isRowVisible(dialog._data_row)

    found = dialog.folder_found.text()
    assert "Found 24 colour images in 2 classes: “blue”, “red”" in found  # the 25th file is not an image
    assert "32×32 pixels" in found
    assert "1 file could not be read and is left out: broken.png in “red”" in found
    assert str(tmp_path) not in found  # names within the folder, no paths
    assert "broken.png" in dialog.folder_found.toolTip() and "not a readable image" in dialog.folder_found.toolTip()
    # a colour folder trains the colour network, as `bayescope-cli train --dataset FOLDER` picks it
    assert dialog.model_name == "resnet" and dialog.models_offered() == ("resnet",)
    assert dialog.start_button.isEnabled()

    dialog.select_method("map")
    dialog.set_setting("epochs", 1)
    dialog.set_setting("batch_size", 8)
    dialog.name.setText("tints map")
    path = run_to_saved(qtbot, dialog, 30_000)
    posterior = load_posterior(path)
    assert posterior.method == "map" and posterior.arch.name == "resnet"
    assert posterior.arch.channels == 3 and posterior.arch.image_size == 32 and posterior.arch.num_classes == 2
    assert posterior.info["class_names"] == ["blue", "red"]  # the folders' names
    record = posterior.info["training_data"]
    # each readable image is a training or a test image (each file's split is its own hash)
    assert record["images"] + posterior.info["test_data"]["images"] == 24
    assert [u["file"] for u in record["unreadable"]] == ["red/broken.png"]
    key = str(path.resolve())
    assert key in [c.key for c in window.workspace.columns_of("images")]
    assert "tints_map" in dialog.status.text()
    # checked on the images kept aside, as `bayescope-cli train` checks them, and said in words
    kept = posterior.info["test_data"]["images"]
    assert kept > 0 and posterior.info["eval_samples"] == 1  # a MAP holds one
    right = round(posterior.info["test_accuracy"] * kept)
    assert f"names the right class of {right} of the {kept} images kept aside" in dialog.status.text()


def test_a_folder_that_cannot_train_gets_a_sentence_and_start_stays_off(qtbot, tmp_path):
    one_class = _tinted_folder(tmp_path / "only red", classes=(("red", 0),), count=5, corrupt=False)
    loose = tmp_path / "loose"
    loose.mkdir()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(loose / "a.png")
    empty = tmp_path / "empty"
    empty.mkdir()
    broken = tmp_path / "broken"
    for name in ("cats", "dogs"):
        (broken / name).mkdir(parents=True)
        (broken / name / "a.png").write_bytes(b"not an image")
    dialog = _dialog(qtbot)
    # each sentence is chosen by the loader's error class, never by its message's words
    for folder, words in ((one_class, "all of one class"), (loose, "all of one class"),
                          (empty, "No images were found"), (tmp_path / "nowhere", "not a folder that can be read"),
                          (broken, "None of the images in this folder could be read (the first: cats/a.png")):
        _read(qtbot, dialog, folder)
        assert words in dialog.folder_found.text(), folder
        assert str(tmp_path) not in dialog.folder_found.text()
        assert not dialog.start_button.isEnabled() and dialog.folder_data is None
    dialog.choose_images_folder(None)  # back to MNIST: Start as before
    assert dialog.start_button.isEnabled() and not dialog.form.isRowVisible(dialog.folder_found)


def test_a_network_the_folder_does_not_train_is_refused_in_a_sentence(qtbot, tmp_path, monkeypatch):
    folder = _tinted_folder(tmp_path / "tints", count=4, corrupt=False)
    warned: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text: warned.append(text))
    dialog = _dialog(qtbot)
    _read(qtbot, dialog, folder)
    items = dialog.model.model()
    assert [items.item(i).isEnabled() for i in range(dialog.model.count())] == [
        dialog.model.itemData(i) == "resnet" for i in range(dialog.model.count())]
    dialog.select_method("map")
    dialog.select_model("softmax")  # not offered for colour images; chosen anyway
    dialog.start()
    assert not dialog.running and warned
    assert "colour images trains ResNet-8, not softmax regression" in warned[0]


def test_the_folder_choice_is_remembered(qtbot, tmp_path):
    folder = _tinted_folder(tmp_path / "tints", count=3, corrupt=False)
    dialog = _dialog(qtbot)
    _read(qtbot, dialog, folder)
    dialog.save_settings()
    again = _dialog(qtbot)
    assert again.uses_folder and again.images_folder.text() == str(folder)
    qtbot.waitUntil(lambda: again.folder_data is not None, timeout=20_000)  # read again when opened
    assert again.folder_data.train.class_names == ("blue", "red")


def test_a_grey_folder_offers_every_network_at_its_size_and_trains_lenet_by_default(qtbot, tmp_path):
    root = tmp_path / "strokes"
    rng = np.random.default_rng(1)
    for label, name in enumerate(("left", "right")):
        (root / name).mkdir(parents=True)
        for i in range(6):
            pixels = rng.integers(0, 60, (40, 40)).astype(np.uint8)
            pixels[:, label * 20:(label + 1) * 20] += 150
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    dialog = _dialog(qtbot)
    dialog.select_model("mlp")
    _read(qtbot, dialog, root)
    found = dialog.folder_found.text()
    assert "Found 12 grey images in 2 classes: “left”, “right”" in found and "28×28 pixels" in found
    assert "could not be read" not in found and dialog.folder_found.toolTip() == ""
    assert dialog.model_name == "lenet" and set(dialog.models_offered()) == {"softmax", "mlp", "lenet", "lenet5", "resnet"}
    dialog.select_model("mlp")  # any of them, at the folder's size and standardisation
    arch = dialog.architecture()
    assert (arch.name, arch.channels, arch.image_size, arch.num_classes) == ("mlp", 1, 28, 2)
    assert arch.mean == dialog.folder_data.mean  # so the window reads photos with it, as training did
    dialog.select_model("softmax")
    dialog.select_method("map")
    dialog.set_setting("epochs", 1)
    dialog.name.setText("strokes")
    posterior = load_posterior(run_to_saved(qtbot, dialog, 30_000))
    assert posterior.info["class_names"] == ["left", "right"] and task_of(posterior) == "images"


def test_a_folder_changed_since_it_was_read_is_read_again_before_a_run(qtbot, tmp_path):
    folder = _tinted_folder(tmp_path / "tints", count=4, corrupt=False)
    dialog = _dialog(qtbot)
    _read(qtbot, dialog, folder)
    assert "Found 8 colour images" in dialog.folder_found.text()
    Image.fromarray(np.full((32, 32, 3), (200, 20, 20), np.uint8)).save(folder / "red" / "new.png")
    dialog.select_method("map")
    dialog.start()  # not on the 8 images read before: the folder is read again first
    assert not dialog.running and "changed since it was read" in dialog.status.text()
    assert dialog.reading_folder and not dialog.start_button.isEnabled()
    qtbot.waitUntil(lambda: not dialog.reading_folder, timeout=20_000)
    assert "Found 9 colour images" in dialog.folder_found.text() and dialog.start_button.isEnabled()


def test_a_problem_with_the_folder_is_told_without_its_path(tmp_path):
    from core.engine.data.datasets import DatasetContentError
    from core.engine.data.folder import NoReadableImageError
    from core.engine.training_words import folder_problem

    folder = tmp_path / "many"
    words = folder_problem(DatasetContentError(f"{folder} has 200,000 class folders; bayescope reads at most "
                                               "100,000"), folder)
    assert words == ("These images cannot train a posterior: this folder has 200,000 class folders; bayescope "
                     "reads at most 100,000")
    words = folder_problem(NoReadableImageError(f"none of the 3 image files in {folder} could be read (the first: "
                                               "a.png: not a readable image)"), folder)
    assert words == "None of the images in this folder could be read (the first: a.png: not a readable image)."


def test_a_reading_overtaken_by_another_folder_is_dropped(qtbot, tmp_path):
    first = _tinted_folder(tmp_path / "first", count=10, corrupt=False)
    second = _tinted_folder(tmp_path / "second", classes=(("green", 1), ("red", 0)), count=3, corrupt=False)
    dialog = _dialog(qtbot)
    dialog.choose_images_folder(first)
    # the first reading has started (it may even have ended: ten images read fast, and a finished
    # reading clears _scan_worker, which waiting for it to be set could miss)
    qtbot.waitUntil(lambda: not dialog._scan_timer.isActive(), timeout=30_000)
    dialog.choose_images_folder(second)
    qtbot.waitUntil(lambda: not dialog.reading_folder, timeout=60_000)
    qtbot.wait(100)  # any late report of the first reading has arrived by now, and was dropped
    assert dialog.folder_data.train.class_names == ("green", "red")
    assert "Found 6 colour images in 2 classes: “green”, “red”" in dialog.folder_found.text()


def test_the_image_size_is_chosen_reads_the_folder_again_and_is_the_posteriors(qtbot, tmp_path):
    folder = _tinted_folder(tmp_path / "tints", count=4, corrupt=False)
    dialog = _dialog(qtbot)
    assert not dialog.form.isRowVisible(dialog.image_size)  # MNIST's digits are 28×28
    _read(qtbot, dialog, folder)
    assert dialog.form.isRowVisible(dialog.image_size) and dialog.image_size.currentData() is None
    assert "32×32 pixels" in dialog.folder_found.text()  # colour's usual side
    dialog.image_size.setCurrentIndex(dialog.image_size.findData(48))
    assert dialog.reading_folder and dialog.folder_data is None  # the 32-pixel reading is forgotten
    qtbot.waitUntil(lambda: not dialog.reading_folder, timeout=20_000)
    assert "48×48 pixels" in dialog.folder_found.text() and dialog.folder_data.image_size == 48
    assert dialog.folder_data.train.x.shape[-2:] == (48, 48)
    dialog.select_method("map")
    dialog.set_setting("epochs", 1)
    dialog.name.setText("tints at 48")
    posterior = load_posterior(run_to_saved(qtbot, dialog, 30_000))
    assert (posterior.arch.image_size, posterior.arch.channels) == (48, 3)
    dialog.save_settings()
    again = _dialog(qtbot)
    assert again.image_size.currentData() == 48  # remembered with the folder


def test_a_saved_start_of_another_size_is_refused_with_the_size_to_choose(qtbot, tmp_path, monkeypatch):
    folder = _tinted_folder(tmp_path / "tints", count=4, corrupt=False)
    warned: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text: warned.append(text))
    dialog = _dialog(qtbot)
    dialog.image_size.setCurrentIndex(dialog.image_size.findData(48))
    _read(qtbot, dialog, folder)
    dialog.select_method("map")
    dialog.set_setting("epochs", 1)
    dialog.name.setText("start at 48")
    start = run_to_saved(qtbot, dialog, 30_000)
    dialog.image_size.setCurrentIndex(0)  # back to 32 pixels
    qtbot.waitUntil(lambda: dialog.folder_data is not None, timeout=20_000)
    dialog.select_method("laplace")
    dialog.set_start_file(start)
    dialog.start()
    assert not dialog.running and warned
    assert "48×48 images, and these images are 2 classes of colour 32×32" in warned[0]
    assert "Choose 48×48 pixels under “Image size”" in warned[0]


def test_a_small_folder_gets_enough_steps_and_settings_one_chose_are_kept(qtbot, tmp_path):
    """96 images at the default 128 per step made one step a pass (issue 47, item 5): a small
    folder's run takes fewer images per step and more passes, said in a sentence; a batch size
    typed by hand stays, and MNIST's digits get the defaults back."""
    from core.engine.inference import get_method
    from core.engine.training_plan import (
        MIN_STEPS_PER_PASS,
        MIN_TRAINING_STEPS,
        small_folder_settings,
    )

    folder = _tinted_folder(tmp_path / "tints", count=60, corrupt=False)
    dialog = _dialog(qtbot)
    dialog.select_method("map")
    default = dialog.setting_values()
    assert default["batch_size"] == 128 and default["epochs"] == 10
    _read(qtbot, dialog, folder)
    train = len(dialog.folder_data.train)
    values = dialog.setting_values()
    per_pass = math.ceil(train / values["batch_size"])
    assert per_pass >= MIN_STEPS_PER_PASS and values["epochs"] * per_pass >= MIN_TRAINING_STEPS
    assert f"For {train} training images" in dialog.status.text()
    dialog.set_setting("batch_size", 50)  # the person's choice: kept, passes still enough for it
    dialog.choose_images_folder(None)
    assert dialog.setting_values()["batch_size"] == 50 and dialog.setting_values()["epochs"] == 10
    assert not dialog.status.text().startswith("For ")
    dialog.choose_images_folder(folder)
    qtbot.waitUntil(lambda: not dialog.reading_folder, timeout=20_000)
    values = dialog.setting_values()
    assert values["batch_size"] == 50 and values["epochs"] * math.ceil(train / 50) >= MIN_TRAINING_STEPS
    # the fitted passes are not remembered as the person's: a new dialog fits them afresh, and says so
    dialog.set_setting("batch_size", 128)
    dialog.save_settings()
    again = _dialog(qtbot)
    qtbot.waitUntil(lambda: again.folder_data is not None and not again.reading_folder, timeout=20_000)
    fresh = small_folder_settings(get_method("map").make_config(), train)
    assert {k: again.setting_values()[k] for k in fresh} == fresh
    assert f"For {train} training images" in again.status.text()
