"""Where the app keeps things, what it remembers between launches, and the bundled posteriors.

Settings live in ``QSettings`` under the organisation and application name "bayescope" (the
platform's usual place); posteriors trained in the window go to the user data folder.
Nothing depends on the current directory.

A settings file is the user's to edit, break or carry between versions, so nothing read from
it is trusted: every value goes through a typed reader (:func:`read_int`, :func:`read_str`,
:func:`read_list`, :func:`read_bytes`) that falls back to the default and logs why, and a file
that Qt cannot read at all is set aside (renamed) before it is used. A column is remembered
as a reference (:func:`column_reference`): a bundled posterior by its name, so that a moved or
upgraded copy of the app finds it again, a person's own file by its path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import platformdirs
from PySide6.QtCore import QByteArray, QSettings

from core.engine.resources import bundled_face_posteriors, bundled_posteriors, resources_dir

log = logging.getLogger(__name__)

APP_NAME = "bayescope"

#: The columns a first launch shows: one method of each family (exact, stochastic-gradient
#: sampling, dropout, variational) on one and the same model, data and prior, so that they
#: differ in method only (the paper tier, docs/zoo.md); HMC, the exact reference, first.
DEFAULT_COLUMNS = ("paper_softmax_hmc.pt", "paper_softmax_sghmc.pt", "paper_softmax_mc_dropout.pt",
                   "paper_softmax_mfvi.pt")

#: The Face tab's first columns: the face tier's HMC (exact inference, the reference whose marks
#: the others carry), SGHMC, MC dropout, mean-field VI and Laplace, one method of each family on
#: the same head, data and prior (docs/zoo.md, "The face tier").
DEFAULT_FACE_COLUMNS = ("faces_softmax_hmc.pt", "faces_softmax_sghmc.pt", "faces_softmax_mc_dropout.pt",
                        "faces_softmax_mfvi.pt", "faces_softmax_laplace.pt")

#: How a saved column names a bundled posterior: ``bundled:<file name>``.
BUNDLED = "bundled:"

_file: Path | None = None  # an INI file used instead of the user's settings (the self-test's)
_checked: set[str] = set()  # the settings files already checked in this process


def settings() -> QSettings:
    """The app's settings: the user's, or the file :func:`separate_settings` put in their place.

    The first time a process opens a settings file, a file Qt cannot read (a broken section
    line, a folder in its place) is renamed ``….unreadable-<time>`` with a line in the log, and
    a fresh one begins: a broken settings file is never a reason not to start.
    """
    s = QSettings(str(_file), QSettings.Format.IniFormat) if _file is not None else QSettings(APP_NAME, APP_NAME)
    name = s.fileName()
    if name not in _checked:
        _checked.add(name)
        if s.status() != QSettings.Status.NoError:
            del s
            _set_aside(Path(name))
            return settings()
    return s


def _set_aside(path: Path) -> None:
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        path.rename(aside)
    except OSError as exc:
        log.error("the settings file %s can neither be read nor set aside (%s); the defaults are used", path, exc)
    else:
        log.warning("the settings file %s could not be read; it was set aside as %s and the defaults are used",
                    path, aside.name)


@contextlib.contextmanager
def separate_settings(path: Path) -> Iterator[None]:
    """Meanwhile, read and write the settings in the INI file ``path`` instead of the user's
    (the self-test opens a window without touching the person's window size or columns)."""
    global _file
    previous, _file = _file, Path(path)
    try:
        yield
    finally:
        _file = previous


# ----------------------------------------------------------------- typed readers
def _rejected(key: str, value: object, default: object, why: str) -> None:
    log.warning("the setting %s = %r %s; %r is used instead", key, value, why, default)


def _text(value: object) -> bool:
    return isinstance(value, str) and "\x00" not in value


def read_int(key: str, default: int, lo: int, hi: int) -> int:
    """The whole number stored under ``key`` if it lies in [lo, hi], else ``default``."""
    value = settings().value(key)
    if value is None:
        return default
    try:
        number = float(value) if isinstance(value, str) else value
        if isinstance(number, bool) or not isinstance(number, (int, float)) or number != int(number):
            raise ValueError(value)
        number = int(number)
    except (TypeError, ValueError, OverflowError):
        _rejected(key, value, default, "is not a whole number")
        return default
    if not lo <= number <= hi:
        _rejected(key, value, default, f"is outside {lo}–{hi}")
        return default
    return number


def read_str(key: str, default: str = "") -> str:
    """The text stored under ``key``, else ``default``."""
    value = settings().value(key)
    if value is None:
        return default
    if not _text(value):
        _rejected(key, value, default, "is not a text")
        return default
    return value


def read_list(key: str) -> list[str]:
    """The texts stored under ``key`` (a single text reads as a list of one); [] when there
    are none or they cannot be read."""
    value = settings().value(key)
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(_text(v) and v for v in value):
        _rejected(key, value, [], "is not a list of texts")
        return []
    return list(value)


def read_bytes(key: str) -> QByteArray | None:
    """The bytes stored under ``key`` (a window geometry), or None."""
    value = settings().value(key)
    if value is None:
        return None
    if not isinstance(value, QByteArray) or value.isEmpty():
        _rejected(key, value, None, "is not saved bytes")
        return None
    return value


# ------------------------------------------------------------------ saved columns
def bundled_folder() -> Path:
    """The folder of the bundled posteriors in this copy of the app."""
    return resources_dir() / "models"


def column_reference(path: str | Path) -> str:
    """How a column is remembered: ``bundled:<name>`` for a bundled posterior, else its path."""
    resolved = Path(path).expanduser().resolve()
    if resolved.parent == bundled_folder().resolve():
        return BUNDLED + resolved.name
    return str(resolved)


def resolve_reference(reference: str) -> Path:
    """The posterior file a saved reference means in this copy of the app.

    A path to a bundled posterior that is gone (saved, before references by name, by a copy of
    the app that was moved or upgraded since) means the bundled posterior of that name here; a
    bundled posterior that has left the bundle means the one that replaced it (:data:`REPLACED`).
    """
    if reference.startswith(BUNDLED):
        return bundled_folder() / _successor(Path(reference[len(BUNDLED):]).name)
    path = Path(reference)
    bundled = bundled_folder() / _successor(path.name)
    if (not path.exists() and path.parent.name == "models" and path.parent.parent.name == "resources"
            and bundled.is_file()):
        return bundled
    return path


#: The network tier's files, ``network_lenet5_<method>.pt`` (:func:`core.engine.tiers.file_name`).
_NETWORK_TIER_FILES = "network_lenet5_"

#: Bundled posteriors that left the bundle, and the file of the same method that replaced them:
#: the LeNet (20-50-500) and MLP posteriors gave way to the network tier's LeNet-5, trained by
#: every method with one prior (docs/zoo.md), and the MAP to the paper tier's. A LeNet file of
#: any method opens that method's file of the tier, read from the bundle so that the window
#: names no method (nor loads the engine to list them).
REPLACED = {
    **{f"mnist_lenet_{p.name.removeprefix(_NETWORK_TIER_FILES)}": p.name
       for p in sorted(bundled_folder().glob(f"{_NETWORK_TIER_FILES}*.pt"))},
    "mnist_mlp_snvi_r8.pt": "network_lenet5_snvi.pt",
    "mnist_mlp_sgmmvi_c3r2.pt": "network_lenet5_sgmmvi.pt",
    "mnist_softmax_map.pt": "paper_softmax_map.pt",
    # the four face heads gave way to the face tier, every method on one head with one prior: each
    # opens its method's tier file where that is bundled (a saved column of another is said gone)
    **{f"face_{m}.pt": f"faces_softmax_{m}.pt" for m in ("sghmc", "dsghmc", "mc_dropout", "mfvi")
       if (bundled_folder() / f"faces_softmax_{m}.pt").is_file()},
}


def _successor(name: str) -> str:
    return name if (bundled_folder() / name).is_file() else REPLACED.get(name, name)


def user_models_dir() -> Path:
    """Posteriors trained in the GUI are saved here."""
    path = Path(platformdirs.user_data_dir(APP_NAME)) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def bundled_models() -> list[Path]:
    """The bundled digit posteriors, the command line's default (the network tier's Laplace) first."""
    return bundled_posteriors()


def own_tiers_dir() -> Path:
    """Tiers built in the window on a person's own network, one folder each (its files, its table)."""
    return user_models_dir() / "tiers"


def available_models() -> list[Path]:
    """Bundled digit posteriors, then the bundled face heads, then the user's own, then the files of
    the tiers built on their own networks."""
    return (bundled_models() + bundled_face_posteriors() + sorted(user_models_dir().glob("*.pt"))
            + sorted(own_tiers_dir().glob("*/*.pt")))


def default_columns() -> list[Path]:
    folder = bundled_models()[0].parent if bundled_models() else Path()
    return [folder / name for name in DEFAULT_COLUMNS if (folder / name).is_file()]


def default_face_columns() -> list[Path]:
    """The Face tab's first columns (:data:`DEFAULT_FACE_COLUMNS`) that are bundled, or every
    bundled face head while the face tier's are not."""
    folder = bundled_folder()
    return [folder / name for name in DEFAULT_FACE_COLUMNS if (folder / name).is_file()] or bundled_face_posteriors()


#: Where the device chosen under View ▸ Compute on is kept: ``auto``, ``cpu``, ``cuda:N`` or ``mps``.
DEVICE_KEY = "compute/device"


def read_device() -> str:
    """The device chosen under View ▸ Compute on, or ``auto`` when the saved value is not one
    this computer offers now (a damaged value, a GPU taken out, a CPU-only torch)."""
    from core.engine.device import device_choices  # torch: only once the engine is loaded

    value = read_str(DEVICE_KEY, "auto")
    if value not in [choice for choice, _words in device_choices()]:
        _rejected(DEVICE_KEY, value, "auto", "is not a device this computer offers")
        return "auto"
    return value


def set_device(value: str) -> None:
    settings().setValue(DEVICE_KEY, value)


def compute_device():  # -> torch.device (torch is imported only when called)
    """The device the window's predictions, evaluations and training run on."""
    from core.engine.device import resolve_device

    return resolve_device(read_device())


def data_folder() -> Path | None:
    """The one data folder (it holds ``mnist/``, ``notmnist/``, ``utkface/``), if the person chose one.

    The Rotate tab, the Dataset tab and the training dialog all read it; data sets missing
    there are looked for in the user cache (:func:`core.engine.data.locate.find_dataset`).

    ``BAYESCOPE_DATA_DIR`` overrides it (tests, a lab's shared copy); None means the user cache.
    """
    env = os.environ.get("BAYESCOPE_DATA_DIR")
    if env:
        return Path(env)
    value = read_str("data/folder")
    return Path(value) if value else None


def set_data_folder(path: Path) -> None:
    settings().setValue("data/folder", str(path))


def last_folder(kind: str) -> str:
    """The folder last used for ``kind`` ("posterior", "image", "export"), or the home folder."""
    value = read_str(f"folders/{kind}")
    return value if value and Path(value).is_dir() else str(Path.home())


def remember_folder(kind: str, path: str | Path) -> None:
    folder = Path(path)
    settings().setValue(f"folders/{kind}", str(folder if folder.is_dir() else folder.parent))
