"""The corruptions of one input (core.engine.data.corruptions): one property per test."""

from __future__ import annotations

import numpy as np
import pytest

from core.engine.data.corruptions import (
    CORRUPTIONS,
    OCCLUDER,
    corrupt,
    occlusion,
    occlusion_box,
    shift,
    shift_offset,
)

NAMES = tuple(CORRUPTIONS)


def digit() -> np.ndarray:
    """A 28×28 'digit': a ring of ink in the middle of a black square, with grey edges."""
    yy, xx = np.mgrid[:28, :28]
    r = np.hypot(yy - 13.5, xx - 13.5)
    return np.clip(1.0 - np.abs(r - 7.0) / 2.0, 0.0, 1.0).astype(np.float32)


def colour(side: int = 32) -> np.ndarray:
    rng = np.random.default_rng(7)
    smooth = rng.uniform(0.2, 0.8, (3, side // 4, side // 4))
    return np.kron(smooth, np.ones((4, 4))).astype(np.float32)  # blocks: blur and contrast change it


IMAGES = {"grey (28, 28)": digit(), "grey (1, 28, 28)": digit()[None], "colour (3, 32, 32)": colour()}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("which", IMAGES)
def test_severity_zero_is_the_clean_image_bit_for_bit(name, which):
    image = IMAGES[which]
    out = corrupt(image, name, 0, seed=3)
    assert out.dtype == image.dtype and out.shape == image.shape
    assert out.tobytes() == image.tobytes()
    assert out is not image  # a copy: the caller's image is never the result


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("which", IMAGES)
def test_shape_dtype_and_range_are_kept(name, which):
    image = IMAGES[which]
    for severity in (0.5, 1, 2.5, 5):
        out = corrupt(image, name, severity, seed=1)
        assert out.shape == image.shape and out.dtype == image.dtype
        assert out.min() >= 0.0 and out.max() <= 1.0


@pytest.mark.parametrize("name", NAMES)
def test_the_input_is_left_untouched(name):
    image = digit()
    before = image.copy()
    corrupt(image, name, 4, seed=2)
    assert np.array_equal(image, before)


@pytest.mark.parametrize("name", ["noise", "blur", "contrast", "occlusion"])
@pytest.mark.parametrize("which", IMAGES)
def test_distance_to_the_clean_image_grows_with_severity(name, which):
    image = IMAGES[which]
    distances = [float(np.linalg.norm(corrupt(image, name, s, seed=5) - image)) for s in range(6)]
    assert distances[0] == 0.0
    assert all(b > a for a, b in zip(distances, distances[1:], strict=False)), distances


def test_shift_moves_the_content_by_the_offset_it_reports():
    image = digit()
    for severity in (1, 3, 5):
        down, right = shift_offset(image.shape, severity, seed=4)
        # 2 px per level on a 28-px side, in the seed's direction
        assert abs(np.hypot(down, right) - 2 * severity) <= 1.0
        expected = np.zeros_like(image)
        src = image[max(-down, 0):28 - max(down, 0), max(-right, 0):28 - max(right, 0)]
        expected[max(down, 0):28 - max(-down, 0), max(right, 0):28 - max(-right, 0)] = src
        assert np.array_equal(shift(image, severity, seed=4), expected)
    # one seed, one direction: the moves of rising severity point the same way
    offsets = np.array([shift_offset(image.shape, s, seed=4) for s in (1, 3, 5)], dtype=float)
    unit = offsets / np.linalg.norm(offsets, axis=1, keepdims=True)
    assert np.all(unit @ unit[-1] > 0.9)


def test_shift_of_a_single_pixel_lands_where_the_offset_says():
    image = np.zeros((28, 28), np.float32)
    image[14, 14] = 1.0
    down, right = shift_offset(image.shape, 2, seed=11)
    out = shift(image, 2, seed=11)
    assert out[14 + down, 14 + right] == 1.0 and out.sum() == 1.0


def test_occlusion_patch_sits_where_the_position_says():
    image = digit()
    for x in (0.3, 0.5, 0.7):  # far enough from the edges that the whole square fits
        out = occlusion(image, 5, position=(x, 0.5))
        changed = np.argwhere(out == OCCLUDER)
        rows, cols = changed[:, 0], changed[:, 1]
        assert cols.max() - cols.min() + 1 == 14 and rows.max() - rows.min() + 1 == 14  # side 14 at s=5
        assert abs((cols.min() + cols.max() + 1) / 2 - x * 28) <= 1.0
        assert abs((rows.min() + rows.max() + 1) / 2 - 14) <= 1.0
        # every pixel outside the patch is the clean one
        mask = np.ones_like(image, bool)
        mask[rows.min():rows.max() + 1, cols.min():cols.max() + 1] = False
        assert np.array_equal(out[mask], image[mask])


def test_occlusion_patch_moves_right_as_the_position_rises():
    centres = []
    for x in np.linspace(0.1, 0.9, 9):
        top, bottom, left, right = occlusion_box((28, 28), 3, position=(x, 0.5))
        centres.append((left + right) / 2)
    assert all(b > a for a, b in zip(centres, centres[1:], strict=False))


def test_occlusion_squares_of_rising_severity_are_nested():
    boxes = [occlusion_box((28, 28), s, seed=9) for s in np.arange(0.5, 5.01, 0.5)]
    for (t0, b0, l0, r0), (t1, b1, l1, r1) in zip(boxes, boxes[1:], strict=False):
        assert t1 <= t0 and b1 >= b0 and l1 <= l0 and r1 >= r0


def test_occlusion_without_a_position_lies_in_the_middle_half():
    for seed in range(20):
        top, bottom, left, right = occlusion_box((28, 28), 1, seed=seed)
        assert 7 - 2 <= (top + bottom) / 2 <= 21 + 2 and 7 - 2 <= (left + right) / 2 <= 21 + 2


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_corruption(name):
    image = colour()
    assert np.array_equal(corrupt(image, name, 3, seed=12), corrupt(image, name, 3, seed=12))


@pytest.mark.parametrize("name", ["noise", "occlusion", "shift"])
def test_the_seed_draws_the_random_part(name):
    image = digit()
    outs = [corrupt(image, name, 4, seed=s) for s in range(4)]
    assert any(not np.array_equal(outs[0], o) for o in outs[1:])


def test_noise_has_the_stated_standard_deviation():
    image = np.full((200, 200), 0.5, np.float32)  # mid-grey: clipping stays rare at σ = 0.16
    noise = corrupt(image, "noise", 2, seed=0) - image
    assert noise.std() == pytest.approx(0.16, rel=0.02)
    assert abs(noise.mean()) < 0.005


def test_contrast_keeps_the_mean_and_scales_the_spread():
    image = colour()
    out = corrupt(image, "contrast", 3, seed=0).astype(np.float64)
    clean = image.astype(np.float64)
    for c in range(3):
        assert out[c].mean() == pytest.approx(clean[c].mean(), abs=1e-6)
        assert out[c].std() == pytest.approx((1 - 0.57) * clean[c].std(), rel=1e-5)


def test_blur_keeps_a_flat_image_and_spreads_a_point_by_its_sigma():
    flat = np.full((28, 28), 0.3, np.float32)
    assert np.allclose(corrupt(flat, "blur", 5), 0.3, atol=1e-6)
    point = np.zeros((28, 28), np.float32)
    point[14, 14] = 1.0
    out = corrupt(point, "blur", 5).astype(np.float64)  # σ = 2 px at severity 5
    assert out.sum() == pytest.approx(1.0, abs=1e-4)
    cols = np.arange(28)
    variance = (out.sum(0) * (cols - 14) ** 2).sum() / out.sum()
    assert variance == pytest.approx(4.0, rel=0.05)


@pytest.mark.parametrize("bad", [-0.1, 5.5, float("nan")])
def test_a_severity_off_the_scale_is_refused_in_words(bad):
    with pytest.raises(ValueError, match="severity must lie between 0 and 5"):
        corrupt(digit(), "noise", bad)


def test_an_unknown_corruption_names_the_choices():
    with pytest.raises(ValueError, match="noise, blur, contrast, occlusion, shift"):
        corrupt(digit(), "fog", 1)
