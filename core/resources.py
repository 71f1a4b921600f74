"""Where the bundled resources live: posteriors, example inputs. Used by the app and the CLI."""

from __future__ import annotations

from pathlib import Path


def resources_dir() -> Path:
    """The installed ``resources`` package folder (source tree or frozen app alike)."""
    import resources

    return Path(resources.__file__).parent


def default_posterior_path() -> Path:
    """The bundled MC-dropout LeNet trained on MNIST."""
    return resources_dir() / "models" / "mnist_lenet_mc_dropout.pt"


def bundled_posteriors() -> list[Path]:
    """The bundled posterior files, the default first, then by name."""
    default = default_posterior_path()
    return sorted((resources_dir() / "models").glob("*.pt"), key=lambda p: (p != default, p.name))
