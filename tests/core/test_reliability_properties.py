"""Property-based tests (Hypothesis) for the two loaders that read what users hand in.

For any bytes, any truncation and any few flipped bits of real files:

- the image loader returns a finite grey image in [0, 1] or raises ``ImageLoadError``, and
  turning that image into a model input succeeds or raises ``EmptyDrawingError``;
- the posterior loader raises ``PosteriorFileError`` or returns a posterior whose weights are
  bit for bit those of the intact file: never a crash of another type, never silently
  changed weights.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from core.engine.data.preprocess import (
    EmptyDrawingError,
    ImageLoadError,
    image_to_input,
    load_image,
)
from core.engine.store import PosteriorFileError, load_posterior

ROOT = Path(__file__).resolve().parents[2]
POSTERIOR = ROOT / "resources" / "models" / "paper_softmax_map.pt"
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _png(array: np.ndarray, mode: str | None = None) -> bytes:
    buffer = io.BytesIO()
    (Image.fromarray(array, mode) if mode else Image.fromarray(array)).save(buffer, format="PNG")
    return buffer.getvalue()


def _digit() -> np.ndarray:
    ink = np.zeros((36, 30), bool)
    ink[6:30, 13:18] = True
    ink[6:10, 9:18] = True
    return ink


#: Real images made here: an 8-bit scan, a 16-bit scan and an RGBA drawing on transparency.
IMAGES = {
    "grey8": _png(np.where(_digit(), 20, 235).astype(np.uint8)),
    "grey16": _png(np.where(_digit(), 3000, 61000).astype(np.uint16)),
    "rgba": _png(np.dstack([np.zeros((36, 30, 3), np.uint8), (_digit() * 255).astype(np.uint8)]), "RGBA"),
}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("properties")


def _check_image_contract(data: bytes, scratch: Path) -> None:
    path = scratch / "input.img"
    path.write_bytes(data)
    try:
        grey = load_image(path)
    except ImageLoadError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
        return
    assert grey.ndim == 2 and grey.dtype == np.float32
    assert np.isfinite(grey).all() and grey.min() >= 0.0 and grey.max() <= 1.0
    try:
        x = image_to_input(grey)
    except EmptyDrawingError:
        return
    assert x.shape == (1, 1, 28, 28) and torch.isfinite(x).all()


def test_intact_images_load_with_their_digit(scratch):
    for name, data in IMAGES.items():
        path = scratch / f"{name}.png"
        path.write_bytes(data)
        grey = load_image(path)
        assert grey[_digit()].min() > 0.85 and grey[~_digit()].max() < 0.05, name


@SETTINGS
@given(data=st.binary(max_size=4096))
def test_image_loader_on_arbitrary_bytes(scratch, data):
    _check_image_contract(data, scratch)


@SETTINGS
@given(name=st.sampled_from(sorted(IMAGES)), cut=st.floats(0.0, 1.0, exclude_max=True))
def test_image_loader_on_truncated_files(scratch, name, cut):
    data = IMAGES[name]
    _check_image_contract(data[: int(cut * len(data))], scratch)


@SETTINGS
@given(name=st.sampled_from(sorted(IMAGES)), flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                                                    st.integers(0, 7)), min_size=1, max_size=4))
def test_image_loader_on_flipped_bits(scratch, name, flips):
    data = bytearray(IMAGES[name])
    for where, bit in flips:
        data[int(where * len(data))] ^= 1 << bit
    _check_image_contract(bytes(data), scratch)


# ------------------------------------------------------------------------ posteriors

INTACT = POSTERIOR.read_bytes()


def _weight_ranges() -> list[tuple[int, int]]:
    """Byte ranges of the stored tensors inside the archive (where flips are most dangerous)."""
    ranges = []
    with zipfile.ZipFile(io.BytesIO(INTACT)) as archive:
        for info in archive.infolist():
            if "/data/" in info.filename:
                # the local header's own name and extra lengths (torch pads the extra field)
                local = INTACT[info.header_offset : info.header_offset + 30]
                name_len, extra_len = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
                start = info.header_offset + 30 + name_len + extra_len
                ranges.append((start, start + info.compress_size))
    assert ranges, "the archive layout changed: no tensor entries found"
    return ranges


WEIGHT_RANGES = _weight_ranges()
REFERENCE = {k: v.clone() for k, v in load_posterior(POSTERIOR).state_tensors().items()}


def _check_posterior_contract(data: bytes, scratch: Path) -> None:
    path = scratch / "candidate.pt"
    path.write_bytes(data)
    try:
        posterior = load_posterior(path)
    except PosteriorFileError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    weights = posterior.state_tensors()
    assert weights.keys() == REFERENCE.keys()
    for name, t in weights.items():  # loaded means: exactly the intact weights
        assert t.dtype == REFERENCE[name].dtype and torch.equal(t, REFERENCE[name]), name


@SETTINGS
@given(data=st.binary(max_size=4096))
def test_posterior_loader_on_arbitrary_bytes(scratch, data):
    path = scratch / "junk.pt"
    path.write_bytes(data)
    with pytest.raises(PosteriorFileError):
        load_posterior(path)


@SETTINGS
@given(cut=st.integers(0, len(INTACT) - 1))
def test_posterior_loader_on_truncated_files(scratch, cut):
    _check_posterior_contract(INTACT[:cut], scratch)


_anywhere = st.integers(0, len(INTACT) - 1)
_in_weights = st.sampled_from(WEIGHT_RANGES).flatmap(lambda r: st.integers(r[0], r[1] - 1))


@SETTINGS
@given(flips=st.lists(st.tuples(st.one_of(_anywhere, _in_weights), st.integers(0, 7)), min_size=1, max_size=3))
def test_posterior_loader_on_flipped_bits(scratch, flips):
    data = bytearray(INTACT)
    for at, bit in flips:
        data[at] ^= 1 << bit
    _check_posterior_contract(bytes(data), scratch)


def test_a_flip_in_every_weight_byte_is_caught(scratch):
    """Not left to chance: one flip in each of 200 bytes spread over the weights."""
    start, stop = WEIGHT_RANGES[0]
    for at in np.linspace(start, stop - 1, 200).astype(int):
        data = bytearray(INTACT)
        data[at] ^= 0x10
        path = scratch / "flipped.pt"
        path.write_bytes(bytes(data))
        with pytest.raises(PosteriorFileError, match="damaged"):
            load_posterior(path)
