"""dlib's face pipeline: HOG detector, 5-point aligner and ResNet descriptor (128-d).

The descriptor is dlib's ``dlib_face_recognition_resnet_model_v1``: a 29-layer ResNet
(after He et al. 2016) trained by Davis King on about 3 million faces with a metric loss,
so that faces of one person lie close together (99.38% on LFW). Its 128 features are the
analogue of the VGG-Face features of the D-SGHMC paper's ADIENCE experiment (512-d,
section 5.2): a fixed, pretrained representation under a Bayesian softmax layer. It was
trained to tell identities apart, not ages, which bounds what a linear layer on it can do.

The pipeline, all offline, from the packages ``dlib-bin`` and ``face-recognition-models``:

1. **Detect** with dlib's frontal-face HOG + linear SVM detector. An image is first scaled
   down so that its longer side is at most :data:`DETECT_MAX_SIDE` pixels; images whose
   (scaled) longer side is at most :data:`UPSAMPLE_MAX_SIDE` are searched once more at
   twice the size, which finds faces down to about 40 pixels. Boxes are mapped back to the
   original image, clipped to it, and sorted largest first.
2. **Align** with the 5-point shape predictor (eye corners and nose base) inside the box,
   then cut a 150×150 chip with 25% padding, rotated and scaled so the eyes are level at
   fixed positions (``dlib.get_face_chip``), from the full-resolution image.
3. **Describe** the chip with the ResNet (no jitter, so it is deterministic).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import numpy as np

from core.engine.faces.descriptor import (
    DescriptorInfo,
    DescriptorUnavailableError,
    FaceBox,
    FaceDescriptor,
    check_rgb,
)

NAME = "dlib-resnet-v1"
#: Bump whenever a step above changes in a way that can change a descriptor.
PIPELINE_VERSION = 1
#: Longer side (pixels) an image is scaled down to before detection.
DETECT_MAX_SIDE = 1280
#: Images up to this longer side are also searched at twice the size (faces ≥ ~40 px).
UPSAMPLE_MAX_SIDE = 800
CHIP_SIZE = 150
CHIP_PADDING = 0.25
DIM = 128
MODEL_FILES = ("shape_predictor_5_face_landmarks.dat", "dlib_face_recognition_resnet_model_v1.dat")
INSTALL = "pip install 'bayescope[faces]' (the packages dlib-bin and face-recognition-models)"


def model_folder() -> Path:
    """Folder of the model files shipped by ``face-recognition-models``.

    Found without importing that package (its ``__init__`` needs ``pkg_resources``, which
    recent setuptools no longer ships).
    """
    frozen = Path(getattr(sys, "_MEIPASS", "")) / "face_recognition_models" / "models"
    if getattr(sys, "frozen", False) and frozen.is_dir():  # the packaged app ships the two files
        folder = frozen
    else:
        spec = importlib.util.find_spec("face_recognition_models")
        if spec is None or not spec.submodule_search_locations:
            raise DescriptorUnavailableError(f"the face descriptor's model files are not installed; {INSTALL}")
        folder = Path(next(iter(spec.submodule_search_locations))) / "models"
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise DescriptorUnavailableError(
            f"the face descriptor's model files {', '.join(missing)} are missing from {folder}; "
            f"reinstall them: {INSTALL}"
        )
    return folder


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class DlibResNetDescriptor(FaceDescriptor):
    """dlib's HOG detector, 5-point aligner and 128-d ResNet descriptor.

    Raises :class:`DescriptorUnavailableError` (with what to install) when ``dlib`` or the
    model files are missing.
    """

    chip_size = CHIP_SIZE

    def __init__(self) -> None:
        try:
            import dlib
        except ImportError:
            raise DescriptorUnavailableError(f"the face descriptor needs dlib; {INSTALL}") from None
        folder = model_folder()
        self._dlib = dlib
        try:
            self._detector = dlib.get_frontal_face_detector()
            self._aligner = dlib.shape_predictor(str(folder / MODEL_FILES[0]))
            self._network = dlib.face_recognition_model_v1(str(folder / MODEL_FILES[1]))
        except RuntimeError as exc:
            raise DescriptorUnavailableError(
                f"the face descriptor's model files in {folder} could not be read ({exc}); reinstall them: {INSTALL}"
            ) from None
        digest = hashlib.sha256()
        for name in MODEL_FILES:
            digest.update(_sha256(folder / name).encode())
        self._info = DescriptorInfo(
            NAME,
            f"{PIPELINE_VERSION}-{digest.hexdigest()[:12]}",
            DIM,
            f"dlib {dlib.__version__}; HOG detector; {MODEL_FILES[0]}; {MODEL_FILES[1]}; "
            f"chip {CHIP_SIZE} px, padding {CHIP_PADDING}",
        )

    @property
    def info(self) -> DescriptorInfo:
        return self._info

    def detect(self, image: np.ndarray) -> list[FaceBox]:
        image = check_rgb(image)
        h, w = image.shape[:2]
        scale = min(1.0, DETECT_MAX_SIDE / max(h, w))
        small = image
        if scale < 1.0:
            from PIL import Image

            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            small = np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BILINEAR))
        upsample = 1 if max(small.shape[:2]) <= UPSAMPLE_MAX_SIDE else 0
        rects, scores, _ = self._detector.run(small, upsample, 0.0)
        boxes = []
        for rect, score in zip(rects, scores, strict=True):
            left = max(0, int(np.floor(rect.left() / scale)))
            top = max(0, int(np.floor(rect.top() / scale)))
            # dlib's right/bottom are the last pixel inside: +1 for the first one outside
            right = min(w, int(np.ceil((rect.right() + 1) / scale)))
            bottom = min(h, int(np.ceil((rect.bottom() + 1) / scale)))
            if right > left and bottom > top:
                boxes.append(FaceBox(left, top, right, bottom, float(score)))
        boxes.sort(key=lambda b: (-b.area, b.top, b.left))
        return boxes

    def align(self, image: np.ndarray, box: FaceBox) -> np.ndarray:
        image = check_rgb(image)
        rect = self._dlib.rectangle(box.left, box.top, box.right - 1, box.bottom - 1)
        shape = self._aligner(image, rect)
        chip = self._dlib.get_face_chip(image, shape, size=CHIP_SIZE, padding=CHIP_PADDING)
        return np.ascontiguousarray(chip, dtype=np.uint8)

    def describe(self, chip: np.ndarray) -> np.ndarray:
        chip = check_rgb(chip)
        if chip.shape[:2] != (CHIP_SIZE, CHIP_SIZE):
            raise ValueError(f"the {NAME} descriptor reads {CHIP_SIZE}×{CHIP_SIZE} chips, got {chip.shape[:2]}")
        vector = np.asarray(self._network.compute_face_descriptor(chip), dtype=np.float32)
        if vector.shape != (DIM,) or not np.isfinite(vector).all():
            raise RuntimeError(f"the {NAME} network returned an invalid descriptor of shape {vector.shape}")
        return vector
