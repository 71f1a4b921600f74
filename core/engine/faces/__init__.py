"""Faces: find a face in a photo, align it, describe it, and name its age group.

The public API the face mode (GUI and CLI) builds on::

    image = load_photo(path)                      # (H, W, 3) uint8 RGB, EXIF upright
    boxes = detect_faces(image)                   # list[FaceBox], largest first
    chip, descriptor = align_and_describe(image, boxes[0])
    # chip: (150, 150, 3) uint8, "what the model sees"; descriptor: float32 (D,)
    AGE_GROUP_NAMES                               # ("0-2", "3-7", ..., "60+")

A face posterior (see :mod:`core.engine.faces.heads`) predicts from descriptors of shape (N, D)
and refuses descriptors of another kind. This package's ``__init__`` imports neither torch
nor dlib; the descriptor backend is loaded on first use.
"""

from __future__ import annotations

import numpy as np

from core.engine.faces.age_groups import (
    ADIENCE_GROUP_NAMES,
    AGE_GROUP_NAMES,
    AGE_GROUPS,
    AgeGroup,
    age_group,
)
from core.engine.faces.descriptor import (
    DEFAULT_DESCRIPTOR,
    MIN_FACE_SIZE,
    DescriptorInfo,
    DescriptorMismatchError,
    DescriptorUnavailableError,
    FaceBox,
    FaceDescriptor,
    FaceError,
    FaceTooSmallError,
    NoFaceError,
    get_descriptor,
)
from core.engine.faces.photo import MAX_WORK_SIDE, decode_photo, load_photo


def detect_faces(image: np.ndarray, descriptor: str = DEFAULT_DESCRIPTOR) -> list[FaceBox]:
    """Every face the descriptor's detector finds in an RGB uint8 image, largest first."""
    return get_descriptor(descriptor).detect(image)


def align_and_describe(
    image: np.ndarray, box: FaceBox, descriptor: str = DEFAULT_DESCRIPTOR
) -> tuple[np.ndarray, np.ndarray]:
    """The aligned chip ((150, 150, 3) uint8 for dlib) and descriptor (float32 (D,)) of a face.

    Raises :class:`FaceTooSmallError` for a box under :data:`MIN_FACE_SIZE` pixels.
    """
    return get_descriptor(descriptor).align_and_describe(image, box)


def descriptor_info(descriptor: str = DEFAULT_DESCRIPTOR) -> DescriptorInfo:
    """Name, version and dimension of a descriptor backend (loads it)."""
    return get_descriptor(descriptor).info


__all__ = [
    "ADIENCE_GROUP_NAMES",
    "AGE_GROUPS",
    "AGE_GROUP_NAMES",
    "DEFAULT_DESCRIPTOR",
    "MAX_WORK_SIDE",
    "MIN_FACE_SIZE",
    "AgeGroup",
    "DescriptorInfo",
    "DescriptorMismatchError",
    "DescriptorUnavailableError",
    "FaceBox",
    "FaceDescriptor",
    "FaceError",
    "FaceTooSmallError",
    "NoFaceError",
    "age_group",
    "align_and_describe",
    "decode_photo",
    "descriptor_info",
    "detect_faces",
    "get_descriptor",
    "load_photo",
]
