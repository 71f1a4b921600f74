"""Where predictions, evaluations and training run: View ▸ Compute on lists the places found,
the status bar says the one in use, and the choice is remembered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel, QMainWindow, QMenu

from app import settings as app_settings

if TYPE_CHECKING:
    from app.workspace import Workspace


class DeviceController(QObject):
    """``menu``: View ▸ Compute on; ``label``: the status bar's “Computing on …”.

    Signals
    -------
    device_changed
        A person chose another place: what is shown should be computed again there.
    """

    device_changed = Signal()

    def __init__(self, window: QMainWindow, workspace: Workspace) -> None:
        super().__init__(window)
        self.window = window
        self.workspace = workspace
        self.menu = QMenu("Compute on", window)  # filled with the devices found when it opens
        self.menu.setToolTipsVisible(True)
        self.menu.aboutToShow.connect(self.fill_menu)
        self.label = QLabel()
        self.label.setToolTip("Where predictions, evaluations and training run; "
                              "View ▸ Compute on chooses another place")

    def fill_menu(self) -> None:
        """Automatic, the CPU and each GPU found (only the first two with a CPU-only torch)."""
        from core.engine.device import device_choices

        self.menu.clear()
        current = app_settings.read_device()
        for value, words in device_choices():
            action = self.menu.addAction(words)
            action.setCheckable(True)
            action.setChecked(value == current)
            action.setData(value)
            if value == "auto":
                action.setToolTip("A GPU when there is one, else the CPU")
            action.triggered.connect(lambda _=False, value=value: self.set_device(value))

    def set_device(self, value: str, announce: bool = True) -> None:
        """Run predictions, evaluations and training on ``value`` (``auto``, ``cpu``, ``cuda:N``,
        ``mps``), remember it, and say where in the status bar."""
        from core.engine.device import describe_device, resolve_device

        try:
            device = resolve_device(value)
        except ValueError:  # gone since the menu was filled
            value, device = "auto", resolve_device("auto")
        if announce:
            app_settings.set_device(value)
        self.workspace.set_device(device)
        where = describe_device(device)
        self.label.setText(f"Computing on {where}")
        if announce:
            self.window.statusBar().showMessage(f"Predictions, evaluations and training now run on {where}.", 8000)
            self.device_changed.emit()
