"""“Add posterior”: the posteriors this tab can judge, bundled and the person's own, one
section per model (a comparison within a section differs in method only), then opening a
file or training a new one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QWidget

from app import settings as app_settings
from app.workspace import menu_group, task_of
from core.engine.naming import posterior_title, samples_used

if TYPE_CHECKING:
    from app.workspace import Workspace


class AddPosteriorMenu(QMenu):
    """Filled each time it opens.

    Signals
    -------
    posterior_chosen(object)
        The :class:`~pathlib.Path` of the posterior file chosen.
    open_requested
        “Open a posterior file…”.
    train_requested
        “Train a new posterior…”.
    """

    posterior_chosen = Signal(object)
    open_requested = Signal()
    train_requested = Signal()

    #: (path, modification time) → (title, task, group), or None for an unusable file.
    _titles: dict[tuple[str, float], tuple[str, str, str] | None] = {}

    def __init__(self, workspace: Workspace, tasks: Callable[[], set[str]], parent: QWidget | None = None) -> None:
        """``tasks()``: the tasks whose posteriors the current tab can judge."""
        super().__init__(parent)
        self.workspace = workspace
        self.tasks = tasks
        self.aboutToShow.connect(self.fill)

    def fill(self) -> None:
        self.clear()
        shown = set(self.workspace.column_keys())
        bundled = set(app_settings.bundled_models()) | set(app_settings.bundled_face_posteriors())
        groups: dict[str, list[tuple[str, Path]]] = {}
        tasks = self.tasks()
        for path in app_settings.available_models():
            entry = self.menu_entry(path)
            if entry is None or entry[1] not in tasks:
                continue
            title, _, group = entry
            origin = "bundled" if path in bundled else "yours"
            groups.setdefault(group, []).append((f"{title} ({origin})", path))
        # one section per model: a comparison within a section differs in method only
        for group in sorted(groups, key=lambda g: (not g.startswith("Same model"), g)):
            self.addSection(group)
            for text, path in groups[group]:
                key = str(path.resolve())
                action = self.addAction(text)
                action.setCheckable(True)
                action.setChecked(key in shown)
                action.setEnabled(key not in shown)
                action.triggered.connect(lambda _=False, p=path: self.posterior_chosen.emit(p))
        self.addSeparator()
        self.addAction("Open a posterior file…", self.open_requested.emit)
        self.addAction("Train a new posterior…", self.train_requested.emit)

    def menu_entry(self, path: Path) -> tuple[str, str, str] | None:
        """The posterior's title in words, its task and its group in the menu (its tier, else its
        model), loaded once per file version; None if unusable."""
        key = (str(path), path.stat().st_mtime)
        if key not in self._titles:
            from core.engine.store import load_posterior

            try:
                posterior = load_posterior(path)
                title = posterior_title(posterior, samples_used(posterior, posterior.default_num_samples))
                self._titles[key] = (title, task_of(posterior), menu_group(posterior))
            except Exception:  # noqa: BLE001 — an unusable file is simply not offered
                self._titles[key] = None
        return self._titles[key]
