from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from core.engine.data.datasets import (
    DatasetDownloadError,
    DatasetNotFoundError,
    download,
    load_split,
)
from core.engine.data.idx import IdxFormatError, parse_idx, read_idx, write_idx
from core.engine.data.preprocess import (
    EmptyDrawingError,
    ImageLoadError,
    centre_of_mass,
    load_image,
    rotate,
    to_mnist,
)


def _write_split(folder, split="t10k", n=5, compress=True):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = np.arange(n, dtype=np.uint8) % 10
    ext = ".gz" if compress else ""
    write_idx(folder / f"{split}-images-idx3-ubyte{ext}", images)
    write_idx(folder / f"{split}-labels-idx1-ubyte{ext}", labels)
    return images, labels


def test_idx_header_parsed_by_hand():
    # magic 0x00000803: unsigned bytes, 3 dims; sizes 2, 1, 3; then 6 data bytes.
    raw = bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6])
    out = parse_idx(raw)
    assert out.shape == (2, 1, 3)
    assert out.tolist() == [[[1, 2, 3]], [[4, 5, 6]]]


def test_idx_big_endian_int32():
    raw = bytes([0, 0, 0x0C, 1, 0, 0, 0, 2]) + (258).to_bytes(4, "big") + (-1).to_bytes(4, "big", signed=True)
    assert parse_idx(raw).tolist() == [258, -1]


@pytest.mark.parametrize("compress", [True, False])
def test_idx_round_trip(tmp_path, compress):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = write_idx(tmp_path / ("a.idx.gz" if compress else "a.idx"), array)
    np.testing.assert_array_equal(read_idx(path), array)


def test_truncated_idx_is_named(tmp_path):
    path = tmp_path / "t.idx"
    write_idx(path, np.zeros((10, 28, 28), np.uint8))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(IdxFormatError, match="truncated.*needs 7840 data bytes, found 7740"):
        read_idx(path)


def test_truncated_gzip_is_named(tmp_path):
    path = tmp_path / "t.idx.gz"
    write_idx(path, np.zeros((10, 28, 28), np.uint8))
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(IdxFormatError, match="gzip"):
        read_idx(path)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x01\x02\x08\x01\x00\x00\x00\x01\x00", "bad magic"),
        (b"\x00\x00\x07\x01\x00\x00\x00\x01\x00", "unknown IDX data type"),
        (b"\x00\x00\x08\x03\x00\x00", "truncated header"),
        (b"\x00\x00", "too short"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x01\x00\x00", "unexpected bytes"),
    ],
)
def test_corrupt_idx_messages(raw, message):
    with pytest.raises(IdxFormatError, match=message):
        parse_idx(raw)


def test_load_split_from_folder(tmp_path):
    images, labels = _write_split(tmp_path / "d", compress=False)
    data = load_split(str(tmp_path / "d"), "test")
    assert data.x.shape == (5, 1, 28, 28) and data.x.dtype == torch.float32
    np.testing.assert_allclose(data.x[:, 0].numpy(), images / 255.0, rtol=1e-6)
    assert data.y.tolist() == labels.tolist()


def test_missing_split_names_files_and_places(tmp_path):
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.zeros(4, np.uint8))  # an IDX folder lacking its split
    with pytest.raises(DatasetNotFoundError, match="train-images-idx3-ubyte.*" + str(tmp_path)):
        load_split(str(tmp_path), "train")


def test_an_empty_folder_is_told_it_holds_nothing_readable_not_which_idx_files_it_lacks(tmp_path):
    (tmp_path / "mine").mkdir()
    with pytest.raises(DatasetNotFoundError, match="mine holds no images .* nor MNIST's IDX files") as caught:
        load_split(str(tmp_path / "mine"), "test")
    assert "t10k" not in str(caught.value)


def test_mismatched_label_count(tmp_path):
    _write_split(tmp_path, n=5)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.zeros(4, np.uint8))
    with pytest.raises(IdxFormatError, match="do not match 5 images"):
        load_split(str(tmp_path), "test")


def test_download_from_mirror_then_cached(tmp_path, monkeypatch, shared_data):
    # MNIST downloads are checked against the official files, so the mirror serves real ones.
    mirror = shared_data / "mnist"
    monkeypatch.setattr("core.engine.data.datasets.cache_dir", lambda name: tmp_path / "cache" / name)
    data = load_split("mnist", "test", download_if_missing=True, mirrors=(mirror.as_uri(),))
    assert len(data) == 10000 and data.class_names[3] == "3" and data.name == "mnist-test"
    assert (tmp_path / "cache" / "mnist" / "t10k-images-idx3-ubyte.gz").is_file()
    # Now served from the cache without any mirror.
    assert len(load_split("mnist", "test")) == 10000


def test_download_refuses_corrupt_file_and_leaves_nothing(tmp_path):
    mirror = tmp_path / "mirror"
    _write_split(mirror, n=3)
    (mirror / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x09"))
    dest = tmp_path / "dest"
    with pytest.raises(DatasetDownloadError, match="t10k-labels.*truncated"):  # the dialog: "could not be downloaded"
        download("digits", "test", dest, mirrors=(mirror.as_uri(),))
    assert sorted(p.name for p in dest.iterdir()) == ["t10k-images-idx3-ubyte.gz"]


def test_download_tries_next_mirror(tmp_path):
    good = tmp_path / "good"
    _write_split(good, n=2)
    dest = download("digits", "test", tmp_path / "dest", mirrors=((tmp_path / "nowhere").as_uri(), good.as_uri()))
    assert len(read_idx(dest / "t10k-labels-idx1-ubyte.gz")) == 2


def test_real_mnist_and_notmnist(shared_data):
    test = load_split("mnist", "test", root=shared_data / "mnist")
    assert test.x.shape == (10000, 1, 28, 28)
    assert torch.bincount(test.y).tolist()[:3] == [980, 1135, 1032]  # the official counts
    letters = load_split("notmnist", "test", root=shared_data / "notmnist")
    assert len(letters) == 10000 and letters.class_names[0] == "A"


# ------------------------------------------------------------------ preprocessing


def test_to_mnist_box_is_20_and_centred():
    canvas = np.zeros((300, 300), np.float32)
    canvas[40:240, 200:260] = 1.0  # a tall bar off to the right: 200 × 60
    out = to_mnist(canvas)
    ink = out > 0.05
    rows, cols = np.flatnonzero(ink.any(1)), np.flatnonzero(ink.any(0))
    assert rows[-1] - rows[0] + 1 in (20, 21)  # 20 pixels, plus at most one from the sub-pixel shift
    assert cols[-1] - cols[0] + 1 in (6, 7)  # 60 · 20 / 200
    cy, cx = centre_of_mass(out)
    assert abs(cy - 13.5) < 0.3 and abs(cx - 13.5) < 0.3


def test_to_mnist_centres_off_centre_mass():
    # An L shape: mass concentrated in the vertical bar, so the box is not centred.
    canvas = np.zeros((100, 100), np.float32)
    canvas[10:90, 10:20] = 1
    canvas[80:90, 10:60] = 1
    cy, cx = centre_of_mass(to_mnist(canvas))
    assert abs(cy - 13.5) < 0.3 and abs(cx - 13.5) < 0.3


def test_to_mnist_rejects_empty_and_nan():
    with pytest.raises(EmptyDrawingError):
        to_mnist(np.zeros((50, 50)))
    bad = np.zeros((5, 5))
    bad[2, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        to_mnist(bad)


def test_rotation_quarter_turns_are_exact():
    x = torch.rand(2, 1, 28, 28)
    # 90° counter-clockwise on screen = numpy's rot90 (k=1) on a rows-down image.
    expected = torch.from_numpy(np.rot90(x.numpy(), k=1, axes=(2, 3)).copy())
    torch.testing.assert_close(rotate(x, 90.0), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(rotate(x, 0.0), x, atol=1e-5, rtol=0)
    torch.testing.assert_close(rotate(x, 180.0), x.flip(2, 3), atol=1e-5, rtol=0)


def test_rotation_per_image_angles():
    x = torch.rand(1, 1, 28, 28).expand(3, 1, 28, 28)
    out = rotate(x, torch.tensor([0.0, 90.0, 180.0]))
    torch.testing.assert_close(out[2], x[0].flip(1, 2), atol=1e-5, rtol=0)


def test_load_image_inverts_dark_on_light(tmp_path):
    from PIL import Image

    arr = np.full((40, 40), 255, np.uint8)
    arr[10:30, 18:22] = 0  # black stroke on white paper
    Image.fromarray(arr).save(tmp_path / "d.png")
    grey = load_image(tmp_path / "d.png")
    assert grey[20, 20] == pytest.approx(1.0) and grey[0, 0] == pytest.approx(0.0)


def test_load_image_errors(tmp_path):
    (tmp_path / "x.png").write_bytes(b"not a png at all")
    with pytest.raises(ImageLoadError, match="not a readable image"):
        load_image(tmp_path / "x.png")
    with pytest.raises(ImageLoadError, match="no such file"):
        load_image(tmp_path / "missing.png")


def _edge_ink(image: np.ndarray) -> float:
    """The most ink on the field's outermost rows and columns."""
    return float(max(image[0].max(), image[-1].max(), image[:, 0].max(), image[:, -1].max()))


def test_the_bundled_seven_keeps_off_the_fields_edge():
    from core.engine.data.preprocess import load_image
    from core.engine.resources import resources_dir

    seven = to_mnist(load_image(resources_dir() / "examples" / "digit-7.png"))
    assert _edge_ink(seven) == 0.0  # it lay on the bottom row (0.23) before
    cy, cx = centre_of_mass(seven)
    assert abs(cy - 13.5) < 1.0 and abs(cx - 13.5) < 0.3  # centred but for the margin's push


def test_a_top_heavy_stroke_keeps_all_its_ink_inside():
    # A T with a thick bar and a thin stem: centring its mass alone would push the stem's end
    # past the bottom edge and cut it off
    canvas = np.zeros((200, 200), np.float32)
    canvas[10:60, 20:180] = 1.0
    canvas[60:190, 97:103] = 1.0
    out = to_mnist(canvas)
    assert _edge_ink(out) == 0.0
    rows = np.flatnonzero((out > 0.05).any(1))
    assert rows[-1] - rows[0] + 1 >= 20  # the whole 20-pixel box, stem included, is there


def _shifted_by_rolls(box: np.ndarray, ft: float, fl: float) -> np.ndarray:
    """The sub-pixel bilinear shift by (ft, fl) of a box padded with a row and a column of zeros,
    written with np.roll: each pixel moved down, right and both, weighted."""
    padded = np.zeros((box.shape[0] + 1, box.shape[1] + 1), dtype=np.float32)
    padded[:-1, :-1] = box
    down, right = np.roll(padded, 1, axis=0), np.roll(padded, 1, axis=1)
    return ((1 - ft) * (1 - fl) * padded + ft * (1 - fl) * down + (1 - ft) * fl * right
            + ft * fl * np.roll(down, 1, axis=1))


def _mnist_recipe(canvas: np.ndarray) -> np.ndarray:
    """MNIST's recipe for a drawing that is its own ink box, written out with Pillow's own array
    conversions, integer index grids and the shift by np.roll: the 20-pixel box by Pillow's
    Lanczos resize, its centre of mass (integer-weighted) on the field's centre, the box held a
    pixel inside the field, a whole-pixel placement and the bilinear shift of the rest."""
    import math

    from PIL import Image

    h, w = canvas.shape
    scale = 20 / max(h, w)
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    crop = np.clip(canvas, 0.0, 1.0)
    small = np.clip(np.asarray(Image.fromarray(crop, mode="F").resize(
        (new_w, new_h), Image.Resampling.LANCZOS), dtype=np.float32), 0.0, 1.0)
    ys, xs = np.indices(small.shape)
    total = small.sum()
    top = min(max(13.5 - (ys * small).sum() / total, 1), 27 - new_h)
    left = min(max(13.5 - (xs * small).sum() / total, 1), 27 - new_w)
    ti, li = math.floor(top), math.floor(left)
    expected = np.zeros((28, 28), dtype=np.float32)
    shifted = _shifted_by_rolls(small, top - ti, left - li)
    expected[ti : ti + new_h + 1, li : li + new_w + 1] = shifted[: 28 - ti, : 28 - li]
    return np.clip(expected, 0.0, 1.0)


def test_to_mnist_places_the_box_by_the_bilinear_shift_bit_for_bit():
    """The 20-pixel box lands in the field by a whole-pixel placement and the bilinear shift of
    its remaining fraction: the same float32 bytes as the recipe written with np.roll, Pillow's
    own array conversions and integer index grids (drawings of every aspect, the sub-pixel
    fractions 0 to 1; values beyond [0, 1] and -0.0; heavy corners, which the edge holds on both
    axes, so the shift's weights are whole numbers and its sums float32; column-major drawings)."""
    rng = np.random.default_rng(3)
    for case in range(160):
        h, w = (int(v) for v in rng.integers(3, 200, 2))
        canvas = np.zeros((h, w), dtype=np.float32)
        canvas[rng.integers(0, h, 40), rng.integers(0, w, 40)] = rng.uniform(0.3, 1.0, 40)
        if case % 4 == 1:
            canvas[rng.integers(0, h, 9), rng.integers(0, w, 9)] = rng.uniform(-0.5, 1.5, 9)
            canvas[rng.integers(0, h, 5), rng.integers(0, w, 5)] = -0.0
        if case % 4 == 2:  # ink heavy in the top-left corner: the edge holds the box on both axes
            canvas[: max(1, h // 3), : max(1, w // 3)] = 1.0
            canvas[-1, -1] = 0.5
        else:
            canvas[h // 2, :] = 1.0  # a bar across: the box is the whole drawing
            canvas[:, w // 2] = 1.0
        if case % 4 == 3:
            canvas = np.asfortranarray(canvas)  # column-major, as a transposed image is
        assert to_mnist(canvas).tobytes() == _mnist_recipe(canvas).tobytes(), case


def test_to_mnist_finds_the_ink_and_clips_as_with_flags_and_np_clip():
    """The box of the ink read from each row's and column's largest value and the check from the
    smallest and largest (no arrays of flags): the same float32 bits as the box of the pixels
    over the threshold, clipped by np.clip, for drawings with faint grey around the ink and
    values beyond [0, 1]; NaN and infinities refused, a drawing all under the threshold empty."""
    from core.engine.data.preprocess import INK_THRESHOLD, EmptyDrawingError

    rng = np.random.default_rng(5)
    for case in range(80):
        h, w = (int(v) for v in rng.integers(5, 240, 2))
        canvas = rng.uniform(0, INK_THRESHOLD, (h, w)).astype(np.float32)  # faint, never ink
        r0, c0 = int(rng.integers(0, h)), int(rng.integers(0, w))
        r1, c1 = int(rng.integers(r0, h)) + 1, int(rng.integers(c0, w)) + 1
        canvas[r0:r1, c0:c1] += rng.uniform(0, [1.0, 1.3][case % 2], (r1 - r0, c1 - c0)).astype(np.float32)
        canvas[r0, c0] = 0.9
        if case % 3 == 0:
            canvas[rng.integers(0, h), rng.integers(0, w)] = -0.4  # below 0: clipped to it
        ink = canvas > INK_THRESHOLD
        rows, cols = np.flatnonzero(ink.any(1)), np.flatnonzero(ink.any(0))
        box = np.clip(canvas[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1], 0.0, 1.0)
        assert to_mnist(canvas).tobytes() == to_mnist(box).tobytes(), case
    for bad in (np.nan, np.inf, -np.inf):
        canvas = np.zeros((30, 30), np.float32)
        canvas[5:9, 5:9], canvas[20, 20] = 1.0, bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            to_mnist(canvas)
    with pytest.raises(EmptyDrawingError):
        to_mnist(np.full((30, 30), INK_THRESHOLD, np.float32))  # at the threshold is not over it
