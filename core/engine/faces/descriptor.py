"""The face-descriptor interface: find faces, align one, turn it into a feature vector.

The D-SGHMC paper's age experiment (Hernández et al., section 5.2) puts a Bayesian softmax
regression on a pretrained face descriptor (VGG-Face, 512 features). A descriptor here is
any backend that implements :class:`FaceDescriptor`:

- :meth:`~FaceDescriptor.detect` finds faces in an RGB image (largest first);
- :meth:`~FaceDescriptor.align` crops and aligns one face into the fixed-size chip the
  network reads ("what the model sees");
- :meth:`~FaceDescriptor.describe` maps that chip, and nothing else, to a vector of
  :attr:`DescriptorInfo.dim` floats, so the chip shown to a person is exactly the input.

:class:`DescriptorInfo` (name, version, dimension) identifies a descriptor. Every face
posterior records it and refuses descriptors of another name, version or size, because a
softmax layer trained on one descriptor's features means nothing on another's.

This module imports neither torch nor a backend; :func:`get_descriptor` loads a backend on
first use and says in words what to install when it is missing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: The smallest face (side of its box, in pixels) a prediction accepts. A descriptor
#: network reads a 150-pixel chip; a face under 40 pixels has to be blown up almost four
#: times, and its landmarks (eye corners, nose) are only a few pixels apart.
MIN_FACE_SIZE = 40


class FaceError(ValueError):
    """A photo that cannot give a face descriptor, with the reason in words."""


class NoFaceError(FaceError):
    """No face was found in the image."""


class FaceTooSmallError(FaceError):
    """The face (or the whole image) is smaller than :data:`MIN_FACE_SIZE` pixels."""


class DescriptorUnavailableError(RuntimeError):
    """The descriptor's packages or model files are not installed."""


class DescriptorMismatchError(ValueError):
    """Descriptors of one kind were given to a posterior trained on another kind."""


@dataclass(frozen=True)
class FaceBox:
    """A face's bounding box in pixel coordinates of the image it was found in.

    ``left``/``top`` are the first pixel inside the box, ``right``/``bottom`` the first
    pixel past it (so ``width = right - left``). ``score`` is the detector's confidence
    (larger is surer; its scale is the backend's), NaN for a box drawn by hand or assumed.
    """

    left: int
    top: int
    right: int
    bottom: int
    score: float = float("nan")

    def __post_init__(self) -> None:
        for name in ("left", "top", "right", "bottom"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"a face box's {name} must be a whole pixel, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.right <= self.left or self.bottom <= self.top:
            raise ValueError(
                f"a face box must have a positive size, got left={self.left}, top={self.top}, "
                f"right={self.right}, bottom={self.bottom}"
            )

    @property
    def width(self) -> int:
        return self.right - self.left

    @property
    def height(self) -> int:
        return self.bottom - self.top

    @property
    def size(self) -> int:
        """The shorter side, in pixels: what :data:`MIN_FACE_SIZE` is compared with."""
        return min(self.width, self.height)

    @property
    def area(self) -> int:
        return self.width * self.height

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scaled(self, factor: float) -> FaceBox:
        """The same box in an image scaled by ``factor`` (rounded outwards to whole pixels)."""
        return FaceBox(
            int(np.floor(self.left * factor)),
            int(np.floor(self.top * factor)),
            max(int(np.ceil(self.right * factor)), int(np.floor(self.left * factor)) + 1),
            max(int(np.ceil(self.bottom * factor)), int(np.floor(self.top * factor)) + 1),
            self.score,
        )


@dataclass(frozen=True)
class DescriptorInfo:
    """What identifies a descriptor: features from two descriptors are comparable only
    when their name, version and dimension all agree.

    Attributes
    ----------
    name
        The descriptor's short name, e.g. ``"dlib-resnet-v1"``.
    version
        Changes whenever the features could change: the backend's pipeline version and a
        checksum of its model files.
    dim
        Length D of a descriptor vector.
    details
        Facts for people (library version, model file names); not compared.
    """

    name: str
    version: str
    dim: int
    details: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> DescriptorInfo:
        if not isinstance(data, dict):
            raise ValueError("the descriptor record is not a table of fields")
        try:
            name, version, dim = data["name"], data["version"], data["dim"]
        except KeyError as exc:
            raise ValueError(f"the descriptor record lacks its {exc.args[0]!r} field") from None
        if not isinstance(name, str) or not isinstance(version, str):
            raise ValueError("the descriptor record's name and version must be text")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"the descriptor record's dimension must be a positive whole number, got {dim!r}")
        return cls(name, version, dim, str(data.get("details", "")))

    def same_kind(self, other: DescriptorInfo) -> bool:
        return (self.name, self.version, self.dim) == (other.name, other.version, other.dim)

    def describe(self) -> str:
        return f"{self.name} (version {self.version}, {self.dim} features)"


class FaceDescriptor(ABC):
    """A face detector, aligner and descriptor network behind one interface.

    Images are ``(H, W, 3)`` RGB ``uint8`` arrays. Implementations are deterministic: the
    same image gives the same boxes and the same vector on every call and in every process.
    """

    #: Side of the aligned chip the network reads.
    chip_size: int

    @property
    @abstractmethod
    def info(self) -> DescriptorInfo:
        """Name, version and dimension of this descriptor."""

    @abstractmethod
    def detect(self, image: np.ndarray) -> list[FaceBox]:
        """Every face found in ``image``, largest first (may be empty)."""

    @abstractmethod
    def align(self, image: np.ndarray, box: FaceBox) -> np.ndarray:
        """The aligned ``(chip_size, chip_size, 3)`` uint8 chip of the face in ``box``."""

    @abstractmethod
    def describe(self, chip: np.ndarray) -> np.ndarray:
        """The descriptor (float32, shape ``(dim,)``) of an aligned chip."""

    def align_and_describe(self, image: np.ndarray, box: FaceBox) -> tuple[np.ndarray, np.ndarray]:
        """The aligned chip and the descriptor of the face in ``box``.

        Raises :class:`FaceTooSmallError` for a box under :data:`MIN_FACE_SIZE` pixels.
        """
        image = check_rgb(image)
        if box.size < MIN_FACE_SIZE:
            raise FaceTooSmallError(
                f"the face is {box.width}×{box.height} pixels; a face must be at least "
                f"{MIN_FACE_SIZE} pixels across to be described (use a larger photo or crop closer)"
            )
        h, w = image.shape[:2]
        if box.right <= 0 or box.bottom <= 0 or box.left >= w or box.top >= h:
            raise ValueError(f"the face box {box.to_dict()} lies outside the {w}×{h} image")
        chip = self.align(image, box)
        return chip, self.describe(chip)


def check_rgb(image: np.ndarray) -> np.ndarray:
    """``image`` as a C-contiguous ``(H, W, 3)`` uint8 array, or a ``ValueError``."""
    if not isinstance(image, np.ndarray):
        raise ValueError(f"an image must be a numpy array, got {type(image).__name__}")
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"a face image must be RGB with shape (H, W, 3), got {image.shape}")
    if image.dtype != np.uint8:
        raise ValueError(f"a face image must hold uint8 values, got {image.dtype}")
    if image.shape[0] < 1 or image.shape[1] < 1:
        raise ValueError("the image has no pixels")
    return np.ascontiguousarray(image)


#: Backends by descriptor name: module and class, imported on first use.
BACKENDS: dict[str, tuple[str, str]] = {
    "dlib-resnet-v1": ("core.engine.faces.dlib_backend", "DlibResNetDescriptor"),
}
DEFAULT_DESCRIPTOR = "dlib-resnet-v1"
_INSTANCES: dict[str, FaceDescriptor] = {}


def get_descriptor(name: str = DEFAULT_DESCRIPTOR) -> FaceDescriptor:
    """The (shared, loaded once per process) descriptor backend called ``name``.

    Raises ``ValueError`` for an unknown name and :class:`DescriptorUnavailableError`, with
    what to install, when the backend's packages or model files are missing.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown face descriptor {name!r}; this bayescope knows {', '.join(sorted(BACKENDS))}")
    if name not in _INSTANCES:
        import importlib

        module_name, class_name = BACKENDS[name]
        module = importlib.import_module(module_name)
        _INSTANCES[name] = getattr(module, class_name)()
    return _INSTANCES[name]
