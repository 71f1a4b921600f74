"""A posterior of one's own images in the window: refused in a sentence, never a column that fails."""

from __future__ import annotations

from app.main import MainWindow
from core.engine.inference.base import SampledPosterior
from core.engine.models import ArchSpec, build_model
from core.engine.store import save_posterior


def _colour_posterior(path):
    arch = ArchSpec("resnet", num_classes=2, image_size=32, channels=3, mean=(0.5,) * 3, std=(0.25,) * 3)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    return save_posterior(SampledPosterior("map", arch, {}, 0, "pets-train", samples, {"class_names": ["cat", "dog"]}),
                          path)


def test_a_colour_posterior_is_refused_with_what_to_do(qtbot, monkeypatch, tmp_path):
    shown = []
    monkeypatch.setattr("app.main.QMessageBox.warning", lambda *a: shown.append(a[2]))
    window = MainWindow()
    qtbot.addWidget(window)
    before = window.workspace.column_keys()
    path = _colour_posterior(tmp_path / "pets.pt")
    assert window.add_posterior(path) is False
    assert window.workspace.column_keys() == before
    assert len(shown) == 1 and "trained on your own colour 32×32 images" in shown[0]
    assert "bayescope-cli predict IMAGE --posterior FILE" in shown[0] and "Traceback" not in shown[0]
    assert window._menu_entry(path) is None  # not offered in the Add menu either
