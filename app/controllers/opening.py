"""How files reach the window: a posterior file becomes a column, a picture opens in its tab
(Image, or Face), whether it comes from an Open dialog, a drop, the command line or a thumbnail
of the Dataset tab. Several files at once (a drop, the command line) go through
:mod:`app.controllers.drop`, which says in one dialog which were refused and why; those that
come before the engine is loaded (the launcher's, a drop in the first seconds) wait for it."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app import settings as app_settings
from app.controllers import drop
from app.workspace import task_of
from core.engine.model_inputs import photo_words

log = logging.getLogger(__name__)


def readable(exc: BaseException, path: Path) -> str:
    """An engine error as a dialog sentence: the file is named, its folder left out."""
    text = str(exc) or "it could not be read"
    for form in (str(path.expanduser().resolve()), str(path)):
        text = text.replace(form, f"“{path.name}”")
    return text


class FileOpening:
    """The main window's file opening, mixed into ``app.main.MainWindow`` (it reads the window's
    panels, workspace, session and status bar; that module sits above this layer, hence not named)."""

    def add_posterior(self, path: Path, quiet: bool = False) -> bool:
        """Add a column for a posterior file; say why not in a dialog (or stay quiet at start-up)."""
        why = self.add_posterior_or_why(path, quiet)
        if why is not None and not quiet:
            QMessageBox.warning(self, "Cannot use this posterior", why)
        return why is None

    def add_posterior_or_why(self, path: Path, quiet: bool = False) -> str | None:
        """Add a column for a posterior file: None when added, else why not in a sentence."""
        try:
            column = self.workspace.add_posterior(path)
        except Exception as exc:  # noqa: BLE001 — every failure becomes a sentence, never a crash
            log.warning("could not add %s: %s", path, exc)
            return readable(exc, Path(path))
        if task_of(column.posterior) == "images" and not self.session.loading:
            if self.current_panel() is not self.image_panel and not quiet:
                self.modes.setCurrentWidget(self.image_panel)  # the one tab that judges it
                self.statusBar().showMessage(
                    f"“{column.title(self.workspace.num_samples)}” reads {photo_words(column.posterior.arch)}: "
                    "open a photo here to see its belief.", 15_000)
            self._show_task()
        return None

    def open_posterior_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open posterior", app_settings.last_folder("posterior"),
                                              "bayescope posterior (*.pt)")
        if path:
            app_settings.remember_folder("posterior", path)
            self.add_posterior(Path(path))

    def open_image_dialog(self) -> None:
        """A photo with a face in the Face tab, else an image of a digit."""
        if self.current_panel() is self.face_panel:
            title, formats = "Open a photo with a face", "Photos (*.jpg *.jpeg *.png *.webp *.bmp *.tif *.tiff)"
        else:
            what = "a photo" if self._task_of_panel(self.image_panel) == "images" else "an image of a digit"
            title, formats = f"Open {what}", "Images (*.png *.jpg *.jpeg *.bmp *.gif *.tif *.tiff *.webp)"
        path, _ = QFileDialog.getOpenFileName(self, title, app_settings.last_folder("image"), formats)
        if path:
            app_settings.remember_folder("image", path)
            self.load_image_file(Path(path))

    def load_image_file(self, path: Path) -> bool:
        """Open an image: a photo in the Face tab, else one in the Image tab (a photo for the
        posteriors of one's own images when there are any, else a digit); a dialog says why not."""
        why = self.load_image_or_why(path)
        if why is not None:
            QMessageBox.warning(self, "Cannot use this image", why)
        return why is None

    def load_image_or_why(self, path: Path) -> str | None:
        """:meth:`load_image_file` without the dialog: None when shown, else why not in a sentence."""
        panel = self.face_panel if self.current_panel() is self.face_panel else self.image_panel
        if panel is self.image_panel:  # a photo for one's own images, or a digit: which columns judge it
            self.session.read_columns("images")
            self.image_panel.set_judges_photos(self._task_of_panel(self.image_panel) == "images")
        try:
            panel.load(path)
        except Exception as exc:  # noqa: BLE001 — bad files get a sentence, never a crash
            log.warning("could not load image %s: %s", path, exc)
            return readable(exc, Path(path))
        self.modes.setCurrentWidget(panel)
        return None

    def show_image_array(self, image: np.ndarray, label: str) -> None:
        """Judge a ready 28×28 image in every column (shown in the Image tab)."""
        self.image_panel.set_array(image, label)
        self.modes.setCurrentWidget(self.image_panel)
        self.views.setCurrentIndex(0)

    def show_photo_array(self, image: np.ndarray, label: str) -> None:
        """Judge one of a person's images (a thumbnail of the Dataset tab, as the models read it)
        in the Image tab, with the columns of their images."""
        from core.engine.data.images import photo_from_array

        self.session.read_columns("images")
        self.image_panel.set_judges_photos(True)
        self.image_panel.set_photo(photo_from_array(image, label), label)
        self.modes.setCurrentWidget(self.image_panel)
        self.views.setCurrentIndex(0)

    def show_face_photo(self, image: np.ndarray, name: str) -> None:
        """Judge a face photo (a thumbnail of the Dataset tab) in the Face tab."""
        self.modes.setCurrentWidget(self.face_panel)
        self.face_panel.set_photo(image, name)
        self.views.setCurrentIndex(0)

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt override)
        """Open every file dropped; one dialog at most says which were refused and why."""
        event.acceptProposedAction()
        self.open_files([Path(url.toLocalFile()) for url in event.mimeData().urls()])

    def open_files(self, paths: Iterable[Path | str], given: str = drop.DROPPED) -> drop.DropOutcome | None:
        """Posteriors become columns, a picture goes to its tab; refusals are told in one dialog.

        The one way in for files whose kind the window must tell by itself: dropped, or named on
        the command line (``given``, :data:`~app.controllers.drop.COMMAND_LINE`, says so in the
        dialog). Before the engine is loaded (the first seconds after the launch) they wait, and
        open in order once the columns are read (:meth:`open_waiting_files`); None then."""
        paths = [Path(p) for p in paths]
        if not paths:
            return drop.DropOutcome(given=given)
        if not self.workspace.engine_loaded:
            self.files_waiting.append((paths, given))
            waiting = [p for batch, _ in self.files_waiting for p in batch]
            names = f"“{waiting[0].name}” opens" if len(waiting) == 1 else f"{len(waiting)} files open"
            self.statusBar().showMessage(f"{names} once the posteriors are loaded…")
            return None
        outcome = drop.open_dropped(paths, self.add_posterior_or_why, self.load_image_or_why, given)
        drop.tell(self, outcome)
        return outcome

    def open_waiting_files(self) -> None:
        """Open the files that came before the engine was loaded (the launcher's, an early drop)."""
        if not self.files_waiting:
            return
        if self.statusBar().currentMessage().endswith("once the posteriors are loaded…"):
            self.statusBar().clearMessage()  # they open now: the note would no longer be true
        waiting, self.files_waiting = self.files_waiting, []
        for paths, given in waiting:
            self.open_files(paths, given)
