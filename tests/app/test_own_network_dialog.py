"""The training dialog's second job: a network of one's own and a folder of images. It estimates,
builds the features tier (``zoo --tier features``'s own run) with progress, cancels keeping the
files made so far, and lists the tier under Add posterior as one group."""

from __future__ import annotations

import pytest
import torch

from app.views.training import TrainingDialog
from app.views.training.dialog import OWN_NETWORK_JOB
from tests.core.test_own_network import NoLinear, TinyCNN, colour_folder, save_torchscript

#: A handful of steps: what is checked is the way through, not the numbers.
QUICK = ("epochs=2", "num_chains=2", "num_warmup=6", "num_samples=8", "num_leapfrog=3")


@pytest.fixture
def dialog(qtbot):
    d = TrainingDialog()
    qtbot.addWidget(d)
    d.show()
    d.show_own_network()
    d.own_network.extra_settings = QUICK
    return d


def _choose(qtbot, dialog, tmp_path, model=None, methods=("map", "mfvi")):
    torch.manual_seed(0)
    network = save_torchscript((model or TinyCNN()).eval(), tmp_path / "net.pt")
    photos = colour_folder(tmp_path / "photos", per_class=7)  # 21 photos in 3 classes
    dialog.own_network.choose(network, photos, list(methods))
    return network, photos


def _estimated(qtbot, panel):
    qtbot.waitUntil(lambda: panel.last_estimate is not None, timeout=60_000)
    return panel.last_estimate


def test_the_dialog_offers_a_network_of_ones_own(dialog):
    assert dialog.job.currentData() == OWN_NETWORK_JOB and dialog.pages.currentWidget() is dialog.own_network
    assert "network of your own and a folder of images" in dialog.job.currentText()
    assert not dialog.own_network.build_button.isEnabled()  # nothing chosen: nothing to estimate


def test_it_estimates_lists_the_layers_builds_with_progress_and_adds_a_group(qtbot, dialog, tmp_path):
    from app import settings
    from app.views.add_menu import AddPosteriorMenu
    from app.workspace import Workspace

    panel = dialog.own_network
    _choose(qtbot, dialog, tmp_path)
    estimate = _estimated(qtbot, panel)
    assert [n for n, _ in estimate.stages] == ["features", "map", "mfvi"] and estimate.seconds > 0
    assert "Estimated time:" in panel.estimate.text() and panel.build_button.isEnabled()
    assert "Split at fc: 6 features" in panel.network_found.text()
    assert "21 images in 3 classes (blue, green, red)" in panel.folder_found.text()
    # the head is picked among the network's own linear layers
    qtbot.waitUntil(lambda: panel.head.count() == 3, timeout=10_000)
    assert [panel.head.itemData(i) for i in range(panel.head.count())] == [None, "hidden", "fc"]
    shares, texts = [], []
    panel.progress.valueChanged.connect(shares.append)
    with qtbot.waitSignal(panel.tier_built, timeout=240_000) as built:
        panel.build()
        qtbot.waitUntil(lambda: "left" in panel.status.text() or not panel.running, timeout=60_000)
        texts.append(panel.status.text())
    qtbot.waitUntil(lambda: not panel.running, timeout=30_000)
    folder = built.args[0]
    assert folder.parent == settings.own_tiers_dir()
    assert {p.name for p in folder.glob("*.pt")} == {"features_map.pt", "features_mfvi.pt",
                                                      "features_network.pt"}
    assert shares and max(shares) == 1000 and shares == sorted(shares)  # a progress bar that only moves on
    assert texts and ("left" in texts[0] or "of" in texts[0])
    assert panel.status.text().startswith("Built 3 posteriors") and "Add posterior" in panel.status.text()
    assert "/" not in panel.status.text()  # no file path on screen
    # Add posterior lists the tier's columns as one group, named after the network
    menu = AddPosteriorMenu(Workspace(), lambda: {"images"})
    menu.fill()
    sections = [a.text() for a in menu.actions() if a.isSeparator() and a.text()]
    group = [s for s in sections if s.startswith("Same model, every method:") and "net.pt" in s]
    assert len(group) == 1
    titles = [a.text() for a in menu.actions() if not a.isSeparator()]
    assert sum("(yours)" in t for t in titles) >= 3


def test_cancel_stops_the_build_and_keeps_the_files_made(qtbot, dialog, tmp_path):
    panel = dialog.own_network
    panel.extra_settings = ("epochs=5000",)  # MF-VI for minutes; the MAP is Newton's, a second
    _choose(qtbot, dialog, tmp_path, methods=("map", "mfvi"))
    _estimated(qtbot, panel)
    panel.build()
    qtbot.waitUntil(lambda: panel._stage.kind == "method" and panel._stage.method == "mfvi" and panel._fraction > 0,
                    timeout=120_000)
    with qtbot.waitSignal(panel.running_changed, timeout=60_000):
        panel.cancel_button.click()
    out = panel.out_folder()
    assert (out / "features_map.pt").is_file() and not (out / "features_mfvi.pt").exists()
    assert panel.status.text().startswith("Cancelled. Kept: 2 posteriors")  # the network's own column and the MAP
    assert panel.build_button.isEnabled() and not panel.cancel_button.isEnabled()


def test_a_network_that_cannot_be_split_gets_cores_sentence(qtbot, dialog, tmp_path):
    panel = dialog.own_network
    _choose(qtbot, dialog, tmp_path, model=NoLinear())
    qtbot.waitUntil(lambda: "export it so that" in panel.network_found.text(), timeout=60_000)
    said = panel.network_found.text()
    assert "net.pt has no linear layer bayescope can find to split it at" in said
    assert str(tmp_path) not in said and "Error" not in said
    assert not panel.build_button.isEnabled() and "cannot be built on" in panel.estimate.text()


def test_a_folder_of_unreadable_images_gets_the_readers_sentence(qtbot, dialog, tmp_path):
    panel = dialog.own_network
    network = save_torchscript(TinyCNN().eval(), tmp_path / "net.pt")
    for name in ("cats", "dogs"):
        (tmp_path / "bad" / name).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "bad" / name / f"{i}.png").write_bytes(b"not a picture")
    panel.extra_settings = QUICK
    panel.choose(network, tmp_path / "bad", ["map"])
    _estimated(qtbot, panel)  # listed: the images are decoded only when the build reads them
    panel.build()
    qtbot.waitUntil(lambda: not panel.running, timeout=60_000)
    said = panel.folder_found.text()
    assert "None of the images in this folder could be read" in said and str(tmp_path) not in said
    assert panel.status.text().startswith("Not built")
