"""Where the bundled resources live: posteriors, example inputs. Used by the app and the CLI."""

from __future__ import annotations

from pathlib import Path


def resources_dir() -> Path:
    """The installed ``resources`` package folder (source tree or frozen app alike)."""
    import resources

    return Path(resources.__file__).parent


def default_posterior_path() -> Path:
    """The command line's posterior when none is named: the network tier's Laplace LeNet-5.

    Of that tier it reads digits well (99.0 %) and is the best calibrated (ECE 0.005) of the
    methods that draw as many weight samples as asked, so its 90 % interval is one; it has no
    chains whose convergence is in question (the samplers' is not reached), where the deep
    ensemble's five members are too few for a 90 % interval and MC dropout underfits (98.0 %).
    """
    return resources_dir() / "models" / "network_lenet5_laplace.pt"


#: Bundled posteriors whose name starts so are face heads (age groups from face
#: descriptors, :mod:`core.engine.faces.heads`), not digit classifiers: the face tier's files,
#: ``faces_softmax_<method>.pt`` (``bayescope-cli zoo --tier faces``; docs/zoo.md).
FACE_PREFIX = "faces_"
#: The four heads bundled before the face tier (``face_<method>.pt``): each counts as a face head
#: only while the face tier's file of its method (its successor) is not bundled beside it.
EARLIER_FACE_PREFIX = "face_"


def _is_face_head(path: Path) -> bool:
    """Whether a bundled file is a face head shown in the Face tab (an earlier one: until replaced)."""
    if path.name.startswith(FACE_PREFIX):
        return True
    if path.name.startswith(EARLIER_FACE_PREFIX):
        method = path.name.removeprefix(EARLIER_FACE_PREFIX)
        return not (path.parent / f"{FACE_PREFIX}softmax_{method}").is_file()
    return False


def bundled_posteriors() -> list[Path]:
    """The bundled digit posterior files, the default first, then by name."""
    default = default_posterior_path()
    files = [p for p in (resources_dir() / "models").glob("*.pt")
             if not p.name.startswith((FACE_PREFIX, EARLIER_FACE_PREFIX))]
    return sorted(files, key=lambda p: (p != default, p.name))


def bundled_face_posteriors() -> list[Path]:
    """The bundled face heads (``faces_*.pt``), the default (HMC, the tier's reference) first, then by name."""
    files = [p for p in (resources_dir() / "models").glob("*.pt") if _is_face_head(p)]
    return sorted(files, key=lambda p: (p.name not in (DEFAULT_FACE_POSTERIOR, "face_sghmc.pt"), p.name))


ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def icon_path(size: int) -> Path:
    """The application icon as a ``size``-pixel PNG (one of :data:`ICON_SIZES`)."""
    return resources_dir() / "icons" / f"bayescope-{size}.png"


#: The bundled head ``predict --task age`` uses when no posterior is given: the face tier's HMC,
#: exact inference for the head (its chains converged; docs/zoo.md).
DEFAULT_FACE_POSTERIOR = "faces_softmax_hmc.pt"


def default_face_posterior_path() -> Path:
    """The face tier's HMC, or while it is not bundled the earlier SGHMC head."""
    path = resources_dir() / "models" / DEFAULT_FACE_POSTERIOR
    return path if path.is_file() else path.with_name("face_sghmc.pt")
