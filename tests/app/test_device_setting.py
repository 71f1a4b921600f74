"""View ▸ Compute on: the device setting, its fallback, its menu and the status bar's words.

No GPU is here: a CUDA GPU is pretended by patching torch's availability checks, which
tests what the window offers and remembers, never a computation on a GPU.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from PySide6.QtCore import QSettings

from app import settings as app_settings
from app.main import MainWindow
from core.engine.device import describe_device
from tests.conftest import pretend_cuda


def _settings_with(text: str) -> None:
    path = Path(QSettings(app_settings.APP_NAME, app_settings.APP_NAME).fileName())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.mark.parametrize("saved", ["cuda:3", "gpu", "", "@Invalid()"])
def test_a_bad_or_gone_device_falls_back_to_auto(saved, monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _settings_with(f"""\
        [compute]
        device={saved}
        """)
    assert app_settings.read_device() == "auto"
    assert app_settings.compute_device() == torch.device("cpu")


def test_a_saved_gpu_is_kept_while_it_is_there(monkeypatch):
    pretend_cuda(monkeypatch, 2)
    app_settings.set_device("cuda:1")
    assert app_settings.read_device() == "cuda:1"
    pretend_cuda(monkeypatch, 1)  # the second GPU taken out
    assert app_settings.read_device() == "auto"


def _open(qtbot) -> MainWindow:
    win = MainWindow(posteriors=[])
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


def test_the_menu_offers_auto_and_cpu_here_and_the_status_bar_says_where(qtbot, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    win = _open(qtbot)
    cpu = describe_device(torch.device("cpu"))
    assert win.device_label.text() == f"Computing on {cpu}"
    win.device_menu.aboutToShow.emit()
    actions = win.device_menu.actions()
    assert [a.text() for a in actions] == [f"Automatic ({cpu})", "CPU"]
    assert [a.isChecked() for a in actions] == [True, False]
    actions[1].trigger()
    assert app_settings.read_device() == "cpu"
    assert win.device_label.text() == f"Computing on {cpu}"
    win.device_menu.aboutToShow.emit()
    assert [a.isChecked() for a in win.device_menu.actions()] == [False, True]


def test_the_menu_lists_each_gpu_found(qtbot, monkeypatch):
    win = _open(qtbot)  # opened on the CPU; a GPU is pretended for the menu only
    pretend_cuda(monkeypatch, 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    win.device_menu.aboutToShow.emit()
    assert [a.text() for a in win.device_menu.actions()] == [
        "Automatic (NVIDIA Test GPU (cuda:0))", "CPU", "NVIDIA Test GPU (cuda:0)", "NVIDIA Test GPU (cuda:1)"]


def test_columns_follow_the_chosen_device(qtbot, monkeypatch):
    """Every column's posterior moves to the workspace's device, a removed one too, and a
    column added later is loaded there (``meta`` stands in for a GPU: shapes, no numbers)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    win = _open(qtbot)
    # kinds that can be built on meta (a variational posterior checks its numbers when built)
    first, second, third = (app_settings.bundled_folder() / name for name in
                            ("network_lenet5_mc_dropout.pt", "network_lenet5_sghmc.pt", "network_lenet5_dsghmc.pt"))
    for key in win.workspace.column_keys():  # the default columns, a variational one among them
        win.workspace.remove(key)
    assert win.add_posterior(first) and win.add_posterior(second)
    win.workspace.remove(win.workspace.column_keys()[1])
    win.workspace.set_device(torch.device("meta"))
    assert [c.posterior.device.type for c in win.workspace.columns] == ["meta"]
    assert win.workspace.last_removed[2].posterior.device.type == "meta"
    assert win.add_posterior(third)
    assert [c.posterior.device.type for c in win.workspace.columns] == ["meta", "meta"]
    assert all(t.device.type == "meta" for c in win.workspace.columns for t in c.posterior.state_tensors().values())
