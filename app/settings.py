"""Where the app keeps things, what it remembers between launches, and the bundled posteriors.

Settings live in ``QSettings`` under the organisation and application name "bayescope" (the
platform's usual place); posteriors trained in the window go to the user data folder.
Nothing depends on the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from PySide6.QtCore import QSettings

from core.engine.resources import bundled_face_posteriors, bundled_posteriors

APP_NAME = "bayescope"

#: The columns a first launch shows: one posterior of each family.
DEFAULT_COLUMNS = ("mnist_lenet_mc_dropout.pt", "mnist_lenet_sghmc.pt", "mnist_lenet_mfvi.pt", "mnist_mlp_snvi_r8.pt")


def settings() -> QSettings:
    return QSettings(APP_NAME, APP_NAME)


def user_models_dir() -> Path:
    """Posteriors trained in the GUI are saved here."""
    path = Path(platformdirs.user_data_dir(APP_NAME)) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def bundled_models() -> list[Path]:
    """The bundled posteriors, the default (MC-dropout LeNet) first."""
    return bundled_posteriors()


def available_models() -> list[Path]:
    """Bundled digit posteriors, then the bundled face heads, then the user's own."""
    from core.engine.resources import bundled_face_posteriors

    return bundled_models() + bundled_face_posteriors() + sorted(user_models_dir().glob("*.pt"))


def default_columns() -> list[Path]:
    folder = bundled_models()[0].parent if bundled_models() else Path()
    return [folder / name for name in DEFAULT_COLUMNS if (folder / name).is_file()]


def default_face_columns() -> list[Path]:
    """The bundled face posteriors (age groups from a face descriptor)."""
    return bundled_face_posteriors()


def data_folder() -> Path | None:
    """The one data folder (it holds ``mnist/``, ``notmnist/``, ``utkface/``), if the person chose one.

    The Rotate tab, the Dataset tab and the training dialog all read it; data sets missing
    there are looked for in the user cache (:func:`core.engine.data.locate.find_dataset`).

    ``BAYESCOPE_DATA_DIR`` overrides it (tests, a lab's shared copy); None means the user cache.
    """
    env = os.environ.get("BAYESCOPE_DATA_DIR")
    if env:
        return Path(env)
    value = settings().value("data/folder", "")
    return Path(value) if value else None


def set_data_folder(path: Path) -> None:
    settings().setValue("data/folder", str(path))


def last_folder(kind: str) -> str:
    """The folder last used for ``kind`` ("posterior", "image", "export"), or the home folder."""
    value = settings().value(f"folders/{kind}", "")
    return value if value and Path(value).is_dir() else str(Path.home())


def remember_folder(kind: str, path: str | Path) -> None:
    folder = Path(path)
    settings().setValue(f"folders/{kind}", str(folder if folder.is_dir() else folder.parent))
