"""A posterior of one's own images in the window: the Image tab judges a colour photo with it,
the preview shows in colour what the model sees, and a column that cannot read the input says why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import MainWindow
from core.commands.main import main
from core.engine.inference.base import SampledPosterior
from core.engine.models import ArchSpec, build_model
from core.engine.store import save_posterior

DIGITS = Path(__file__).resolve().parents[2] / "resources" / "models" / "network_lenet5_mc_dropout.pt"


def _tinted(rng, rgb, side=40):
    """A photo of noise around one colour (so red and blue are told apart by colour alone)."""
    noise = rng.normal(0, 30, size=(side, side + 8, 3))
    return Image.fromarray(np.clip(np.array(rgb) + noise, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def colour_posterior(tmp_path_factory):
    """A ResNet-8 MAP posterior trained by ``bayescope-cli train`` on a folder of red and blue photos."""
    folder = tmp_path_factory.mktemp("colours")
    rng = np.random.default_rng(0)
    for name, rgb in (("blue", (40, 60, 200)), ("red", (210, 40, 40))):
        (folder / name).mkdir()
        for i in range(20):
            _tinted(rng, rgb).save(folder / name / f"{i}.png")
    out = folder / "colours-map.pt"
    assert main(["train", "--dataset", str(folder), "--method", "map", "--set", "epochs=3",
                 "--set", "batch_size=8", "--seed", "0", "--out", str(out)]) == 0
    red = folder / "a red photo.jpg"
    _tinted(np.random.default_rng(1), (200, 50, 45), side=90).save(red)
    return out, red


def _window(qtbot, paths):
    window = MainWindow([str(p) for p in paths])
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    return window


def settle(qtbot, window):
    qtbot.waitUntil(lambda: not window.inference.busy and not window._throttle.isActive()
                    and not window._refine.isActive()
                    and all(c.prediction is not None or c.failure is not None for c in window.workspace.columns),
                    timeout=30_000)
    qtbot.wait(30)


def test_a_colour_photo_is_judged_by_a_colour_posterior_and_previewed_in_colour(qtbot, colour_posterior):
    path, red = colour_posterior
    window = _window(qtbot, [DIGITS, path])
    assert window.workspace.column_keys() == [str(DIGITS.resolve())]  # Draw: the digit column only
    assert window.load_image_file(red)
    assert window.modes.currentWidget() is window.image_panel
    settle(qtbot, window)
    # the Image tab shows the posteriors of one's own images, not the digit column beside them
    assert window.workspace.task == "images"
    assert window.workspace.column_keys() == [str(path.resolve())]
    assert "your own images judge this photo" in window.image_panel.judging.text()
    column = window.workspace.columns[0]
    assert column.failure is None and column.prediction is not None
    assert window.workspace.class_names == ("blue", "red")  # the folders' names
    assert window.workspace.class_names[column.prediction.summary.predicted_class] == "red"
    assert "red" in window.column_views[column.key].verdict.text()
    # the preview: what the model sees, 32×32 in colour (the photo cropped square), red on top
    seen = window.preview.shown
    assert seen.shape == (32, 32, 3) and seen.dtype == np.uint8
    assert seen[..., 0].mean() > seen[..., 1].mean() + 80 and seen[..., 0].mean() > seen[..., 2].mean() + 80
    painted = window.preview.grab().toImage()
    middle = painted.pixelColor(painted.width() // 2, painted.height() // 2)
    assert middle.red() > middle.green() + 60 and middle.red() > middle.blue() + 60
    assert "colour 32×32 images" in window.preview_note.text()
    # the picture beside the button is the photo in colour too
    picture = window.image_panel.picture.pixmap().toImage()
    centre = picture.pixelColor(picture.width() // 2, picture.height() // 2)
    assert centre.red() > centre.green() + 60
    # the Draw tab judges digits with the digit column again
    window.modes.setCurrentWidget(window.draw_panel)
    assert window.workspace.task == "digits" and window.workspace.column_keys() == [str(DIGITS.resolve())]


def test_a_colour_column_given_a_digit_says_why_in_words(qtbot, colour_posterior):
    path, _ = colour_posterior
    window = _window(qtbot, [path])
    window.modes.setCurrentWidget(window.image_panel)
    assert window.workspace.task == "images"
    digit = np.zeros((28, 28), np.float32)
    digit[6:22, 12:16] = 1.0
    window.show_image_array(digit, "MNIST test digit #3 (a 1)")  # as the Dataset tab's thumbnails send it
    settle(qtbot, window)
    column = window.workspace.columns[0]
    assert column.prediction is None and "trained on your own images" in column.failure
    words = window.column_views[column.key].verdict.text()
    assert "Could not judge this input" in words and "open" in words.lower()
    assert "Error" not in words and "/" not in column.failure  # no exception names, no paths


def test_the_image_tab_judges_digits_again_when_the_last_colour_column_goes(qtbot, colour_posterior):
    path, _ = colour_posterior
    window = _window(qtbot, [DIGITS, path])
    window.modes.setCurrentWidget(window.image_panel)
    assert window.workspace.column_keys() == [str(path.resolve())]
    window.remove_column(str(path.resolve()))
    assert window.workspace.task == "digits" and window.workspace.column_keys() == [str(DIGITS.resolve())]
    assert "digit posteriors judge this image" in window.image_panel.judging.text()
    window.undo_remove_column()
    assert window.workspace.task == "images" and window.workspace.column_keys() == [str(path.resolve())]


def _untrained(path, names):
    arch = ArchSpec("resnet", num_classes=len(names), image_size=32, channels=3, mean=(0.5,) * 3, std=(0.25,) * 3)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    return save_posterior(SampledPosterior("map", arch, {}, 0, "pets-train", samples, {"class_names": list(names)}),
                          path)


def test_another_set_of_classes_is_refused_in_a_sentence_and_the_menu_groups_by_model(qtbot, monkeypatch, tmp_path):
    shown = []
    monkeypatch.setattr("app.main.QMessageBox.warning", lambda *a: shown.append(a[2]))
    pets, fruit = _untrained(tmp_path / "pets.pt", ["cat", "dog"]), _untrained(tmp_path / "fruit.pt", ["apple", "pear"])
    window = _window(qtbot, [])
    assert window.add_posterior(pets)
    assert window.modes.currentWidget() is window.image_panel and window.workspace.task == "images"
    assert window.workspace.class_names == ("cat", "dog")
    assert window.add_posterior(fruit) is False
    assert len(shown) == 1 and "“apple” and “pear”" in shown[0] and "“cat” and “dog”" in shown[0]
    assert "Traceback" not in shown[0] and str(tmp_path) not in shown[0]
    title, task, group = window.add_menu.menu_entry(fruit)
    assert task == "images" and group == "Your images, ResNet-8" and "ResNet-8" in title


def test_columns_of_different_sizes_each_read_the_photo_at_their_own(tmp_path, colour_posterior):
    from app.controllers.inference import ColumnFailure, ColumnRequest, predict_columns
    from core.engine.data.images import open_photo
    from core.engine.store import load_posterior

    trained, red = colour_posterior
    arch = ArchSpec("resnet", num_classes=2, image_size=48, channels=3, mean=(0.5,) * 3, std=(0.25,) * 3)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    wide = SampledPosterior("map", arch, {}, 0, "colours-train", samples, {"class_names": ["blue", "red"]})
    digits = load_posterior(DIGITS)
    requests = [ColumnRequest("32", load_posterior(trained), 1), ColumnRequest("48", wide, 1),
                ColumnRequest("digits", digits, 4)]
    out = dict(predict_columns(open_photo(red), requests, 0.9))
    assert out["32"].summary.predicted_class == 1 and out["48"].samples.shape[-1] == 2
    assert isinstance(out["digits"], ColumnFailure) and "judges digits" in out["digits"].message


def test_the_columns_of_ones_images_come_back_at_the_next_start_on_the_image_tab(qtbot, colour_posterior):
    path, _ = colour_posterior
    first = _window(qtbot, [DIGITS, path])
    first.modes.setCurrentWidget(first.image_panel)
    first.close()
    again = _window(qtbot, [])
    assert again.modes.currentWidget() is again.image_panel
    assert again.workspace.task == "images" and again.workspace.column_keys() == [str(path.resolve())]
    again.modes.setCurrentWidget(again.draw_panel)
    assert again.workspace.column_keys() == [str(DIGITS.resolve())]


def _colour_folders(root: Path) -> tuple[Path, Path]:
    """A folder of red and blue photos (class folders under train/ and test/: its test/ part is
    judged) and a folder of green ones, which the posterior never saw (no class folders: one set
    of unfamiliar images)."""
    rng = np.random.default_rng(5)
    test, unseen = root / "test photos", root / "green"
    for name, rgb in (("blue", (40, 60, 200)), ("red", (210, 40, 40))):
        for split, count in (("train", 2), ("test", 6)):
            (test / split / name).mkdir(parents=True)
            for i in range(count):
                _tinted(rng, rgb).save(test / split / name / f"{i}.png")
    unseen.mkdir()
    for i in range(6):
        _tinted(rng, (40, 200, 60)).save(unseen / f"{i}.png")
    return test, unseen


def test_the_dataset_tab_judges_the_columns_of_ones_images_on_their_folders(qtbot, colour_posterior, tmp_path):
    from app.views.dataset import CHOOSE_IMAGES, IMAGES_FOLDER

    path, _ = colour_posterior
    test, unseen = _colour_folders(tmp_path)
    window = _window(qtbot, [path])
    window.modes.setCurrentWidget(window.image_panel)
    window.views.setCurrentIndex(2)
    view = window.dataset_view
    offered = [view.test_set.itemData(i) for i in range(view.test_set.count())
               if view.test_set.model().item(i).isEnabled()]
    assert offered == [IMAGES_FOLDER]  # not the digits, letters or faces
    assert view.evaluate() is False and view.status.text() == CHOOSE_IMAGES
    view.set_choice(str(test), str(unseen), 0, 1)
    assert view.test_set.currentText() == "test photos (folder)" and view.ood_set.currentText() == "green (folder)"
    with qtbot.waitSignal(view.run_ended, timeout=60_000):
        assert view.evaluate()
    assert view.results is not None, view.status.text()
    ev = view.results.evaluation
    assert ev.class_names == ("blue", "red") and len(view.results.ood) == 6  # the green photos, unfamiliar
    result = next(iter(ev.results.values()))
    assert sorted(result.data.labels.tolist()) == [0] * 6 + [1] * 6
    assert (result.data.mean_proba.argmax(1) == result.data.labels).mean() == 1.0  # told apart by colour
    # a cell of the confusion matrix lists its photos in colour; a click judges one in the Image tab
    name = next(iter(view.column_widgets))
    selection = view.show_cell_images(name, False, 1, 1)
    assert len(selection.indices) == 6 and view.thumbnails.photos
    assert all(im.shape == (32, 32, 3) and im.dtype == np.uint8 for im in view.thumbnails.images)
    assert view.thumbnails.images[0][..., 0].mean() > view.thumbnails.images[0][..., 2].mean() + 80  # red
    view.thumbnails.choose(0)
    settle(qtbot, window)
    assert window.views.currentIndex() == 0 and window.modes.currentWidget() is window.image_panel
    column = window.workspace.columns[0]
    assert column.failure is None
    assert window.workspace.class_names[column.prediction.summary.predicted_class] == "red"
    assert np.array_equal(window.preview.shown, view.thumbnails.images[0])  # the same pixels, read back
    window.modes.setCurrentWidget(window.draw_panel)  # no digit column: the digit sets are offered again
    assert view.test_set.model().item(view.test_set.findData("mnist-test")).isEnabled()


def test_a_folder_without_images_is_refused_in_the_dataset_tab(qtbot, colour_posterior, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    from app.views.dataset import IMAGES_FOLDER

    path, _ = colour_posterior
    empty = tmp_path / "nothing here"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images")
    window = _window(qtbot, [path])
    window.modes.setCurrentWidget(window.image_panel)
    window.views.setCurrentIndex(2)
    view = window.dataset_view
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(empty))
    index = view.test_set.findData(IMAGES_FOLDER)
    view.test_set.setCurrentIndex(index)
    view.sets._on_set_box_activated(view.test_set, index)
    assert "“nothing here” holds no images" in view.status.text()
    assert view.test_set.findData(str(empty)) < 0


def test_the_add_menu_offers_ones_images_on_the_image_tab_in_their_own_group(qtbot, tmp_path):
    from app import settings as app_settings

    folder = app_settings.user_models_dir()
    folder.mkdir(parents=True, exist_ok=True)
    pets = _untrained(folder / "pets.pt", ["cat", "dog"])
    window = _window(qtbot, [DIGITS])

    def sections():
        window.add_menu.fill()
        return [a.text() for a in window.add_menu.actions() if a.isSeparator() and a.text()]

    assert "Your images, ResNet-8" not in sections()  # the Draw tab judges digits
    window.modes.setCurrentWidget(window.image_panel)
    shown = sections()
    assert shown[-1] == "Your images, ResNet-8" and any(s.startswith("Same model, every method") for s in shown[:-1])
    entry = next(a for a in window.add_menu.actions() if "ResNet-8" in a.text() and not a.isSeparator())
    entry.trigger()
    assert window.workspace.task == "images" and window.workspace.column_keys() == [str(pets.resolve())]


def _numbers(folder: Path) -> list[dict]:
    """The rows of a comparison folder's numbers.json."""
    table = json.loads((folder / "numbers.json").read_text())
    return [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]


def _wide_posterior(path: Path) -> Path:
    """An untrained ResNet-8 reading the same two classes at 48 pixels, saved to ``path``."""
    arch = ArchSpec("resnet", num_classes=2, image_size=48, channels=3, mean=(0.5,) * 3, std=(0.25,) * 3)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    save_posterior(SampledPosterior("map", arch, {}, 0, "colours-train", samples, {"class_names": ["blue", "red"]}),
                   path)
    return path


def test_compare_judges_a_photo_with_posteriors_of_ones_images_as_predict_does(tmp_path, colour_posterior, capsys):
    trained, red = colour_posterior
    wide = _wide_posterior(tmp_path / "wide.pt")
    out = tmp_path / "comparison"
    assert main(["compare", str(red), "--posterior", str(trained), str(wide), "--samples", "5", "--format", "png",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "class red" in printed  # the trained column reads the red photo as red
    rows = _numbers(out)
    for path in (trained, wide):  # each column at its own size, as predict reads the photo for it
        assert main(["predict", str(red), "--posterior", str(path), "--samples", "5", "--json"]) == 0
        expected = json.loads(capsys.readouterr().out)
        mine = [r for r in rows if r["source"] == str(path)]
        assert [r["class"] for r in mine] == ["blue", "red"]
        for row, want in zip(mine, expected["classes"], strict=True):
            assert row["mean"] == pytest.approx(want["mean"], abs=1e-6)
    shown = np.asarray(Image.open(out / "input.png"))
    assert shown.shape == (320, 320, 3)  # the 32×32 colour input the first column sees, enlarged
    assert shown[..., 0].mean() > shown[..., 2].mean() + 80  # red, as the photo
    page = (out / "index.html").read_text()
    assert "32 × 32 pixels, colour" in page and "each posterior reads the photo at its own size" in page
    # a digit posterior beside them is refused in a sentence, before anything is written
    assert main(["compare", str(red), "--posterior", str(trained), str(DIGITS), "--out",
                 str(tmp_path / "mixed")]) != 0
    err = capsys.readouterr().err
    assert "judges digits" in err and "Traceback" not in err and not (tmp_path / "mixed").exists()


def test_export_comparison_of_a_colour_photo_writes_the_folder(qtbot, colour_posterior, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    path, red = colour_posterior
    monkeypatch.setattr(QMessageBox, "warning", lambda *a: pytest.fail(f"warned: {a[2]}"))
    window = _window(qtbot, [path])
    assert window.load_image_file(red)
    settle(qtbot, window)
    out = tmp_path / "photo comparison"
    window.exports.export_comparison(out)
    qtbot.waitUntil(lambda: window.exports.worker is None, timeout=60_000)
    assert "Saved the comparison" in window.statusBar().currentMessage()
    shown = np.asarray(Image.open(out / "input.png"))
    assert shown.shape == (320, 320, 3) and np.array_equal(shown[::10, ::10], window.preview.shown)
    assert (out / "index.html").is_file() and any(out.glob("*-interval.png"))
    rows = [r for r in _numbers(out) if r["predicted"]]
    assert [r["class"] for r in rows] == ["red"]


def test_an_imported_resnet18_judges_a_photo_in_the_window(qtbot, colour_posterior, tmp_path):
    from tests.core.test_colour_models_and_import import _batch_norm_twin

    _, red = colour_posterior
    spec = ArchSpec("resnet18", num_classes=2, image_size=64, channels=3)
    torch.save(_batch_norm_twin(spec).state_dict(), tmp_path / "w.pt")
    (tmp_path / "names.txt").write_text("blue\nred\n")
    assert main(["import", "--arch", "resnet18", "--weights", str(tmp_path / "w.pt"), "--image-size", "64",
                 "--classes", str(tmp_path / "names.txt"), "--out", str(tmp_path / "resnet18.pt")]) == 0
    window = _window(qtbot, [tmp_path / "resnet18.pt"])
    assert window.load_image_file(red)
    settle(qtbot, window)
    (column,) = window.workspace.columns
    assert column.failure is None and column.prediction.samples.shape == (1, 2)
    assert window.column_views[column.key].title.text() == "<b>MAP, ResNet-18, 1 draw</b>"
    assert window.preview.shown.shape == (64, 64, 3)  # what ResNet-18 reads, at its own side
    assert "colour 64×64 images" in window.preview_note.text()
