"""Where the app keeps things, and the bundled posteriors it offers on first launch."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from core.resources import bundled_posteriors

APP_NAME = "bayescope"


def user_models_dir() -> Path:
    """Posteriors trained in the GUI are saved here."""
    path = Path(platformdirs.user_data_dir(APP_NAME)) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def bundled_models() -> list[Path]:
    """The bundled posteriors, the default (MC-dropout LeNet) first."""
    return bundled_posteriors()


def available_models() -> list[Path]:
    """Bundled posteriors first, then the user's own."""
    return bundled_models() + sorted(user_models_dir().glob("*.pt"))


def default_data_dir() -> Path:
    """The MNIST folder the training dialog proposes: the user cache (downloads land there)."""
    from core.data.datasets import cache_dir

    return cache_dir("mnist")
