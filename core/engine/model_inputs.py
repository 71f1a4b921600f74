"""What a posterior reads, decided from its architecture record alone: a digit, a photo of a
person's own images, or a feature vector.

A digit (drawn, picked from MNIST or notMNIST, or an image file read as MNIST's were prepared)
is always :data:`IMAGE_SIZE`² grey pixels. A model reads digits when it reads grey images of that
side as they are (no standardisation of its own). Every other image model was trained on a
person's images, colour or grey, of any side: it reads a photo at its own side and channels, as
its training images were read (:func:`core.engine.data.images.read_image`), and never a digit.
This is the one rule; the loader, ``predict``, ``compare`` and the window's tabs all ask it.

The module needs no torch, so that the window can ask it of a file's records
(:mod:`core.engine.store_records`) before the engine loads.
"""

from __future__ import annotations

from typing import Any

#: The side of every digit bayescope reads: MNIST's, the drawing canvas's, the digit data sets'.
IMAGE_SIZE = 28


def _field(arch: Any, name: str, default: Any) -> Any:
    # a file's records leave out the fields at their defaults (channels 1, no mean, no input_dim)
    return getattr(arch, name, default)


def reads_photos(arch: Any) -> bool:
    """Whether a model of ``arch`` (an :class:`~core.engine.models.ArchSpec` or a file's
    ``ArchRecords``) was trained on a person's images: colour, grey standardised to them, or grey
    of a side other than a digit's. It reads an image file as its training read it, not as a digit."""
    if _field(arch, "input_dim", 0):
        return False
    return (_field(arch, "channels", 1) == 3 or bool(_field(arch, "mean", ()))
            or _field(arch, "image_size", IMAGE_SIZE) != IMAGE_SIZE)


def reads_digits(arch: Any) -> bool:
    """Whether a model of ``arch`` reads digits: grey :data:`IMAGE_SIZE`² images, used as they are."""
    return not _field(arch, "input_dim", 0) and not reads_photos(arch)


def images_words(arch: Any) -> str:
    """What a model of a person's images reads, in words: "colour 32×32 images", "grey 8×8 images"."""
    side = _field(arch, "image_size", IMAGE_SIZE)
    return f"{'colour' if _field(arch, 'channels', 1) == 3 else 'grey'} {side}×{side} images"


def photo_words(arch: Any) -> str:
    """What a posterior of a person's images reads, in words, and when it is grey of another side
    than a digit's, why no digit can reach it: "your own grey 8×8 images, while a drawn or picked
    digit is 28×28 (MNIST's size)"."""
    side = _field(arch, "image_size", IMAGE_SIZE)
    words = f"your own {images_words(arch)}"
    if _field(arch, "channels", 1) == 1 and side != IMAGE_SIZE:
        words += f", while a drawn or picked digit is {IMAGE_SIZE}×{IMAGE_SIZE} (MNIST's size)"
    return words


def why_not_a_digit(arch: Any) -> str:
    """Why a posterior of a person's images cannot judge a drawn or picked digit, in one sentence
    for a person (the Draw and Rotate tabs show it in its column)."""
    if _field(arch, "channels", 1) == 1 and _field(arch, "image_size", IMAGE_SIZE) != IMAGE_SIZE:
        return (f"This posterior was trained on {photo_words(arch)}: it judges a photo opened in the Image tab, "
                "read as its training images were")
    return ("This posterior was trained on your own images: it judges a photo opened in the Image tab, read as "
            "its training images were, not a drawn or picked digit")
