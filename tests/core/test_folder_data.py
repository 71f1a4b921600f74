"""A person's own images: class folders, CSV manifests and CIFAR binaries, read as the docs say.

Folders are built in tmp from the shared MNIST digits (grey) and UTKFace photos (colour);
expected values come from reading the written files again with Pillow or NumPy, or from the
layout of an image drawn for the test, never from the loader's own output.
"""

from __future__ import annotations

import hashlib
import io
import json
import string
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from core.commands.main import main
from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.data.folder import check_training_classes, load_image_folder
from core.engine.data.idx import read_idx, write_idx
from core.engine.data.images import StreamedImages, fit_square, open_photo, photo_input, read_image
from core.engine.data.listing import EmptyClassError, image_folder
from core.engine.store import load_posterior

# ----------------------------------------------------------------------------- material


@pytest.fixture(scope="module")
def digits(shared_data) -> tuple[np.ndarray, np.ndarray]:
    """The first 300 MNIST test digits (uint8 28×28) and their labels."""
    x = read_idx(shared_data / "mnist" / "t10k-images-idx3-ubyte.gz")[:300]
    y = read_idx(shared_data / "mnist" / "t10k-labels-idx1-ubyte.gz")[:300]
    return x, y


@pytest.fixture(scope="module")
def photos(shared_data) -> dict[str, list[bytes]]:
    """JPEG bytes of 16 UTKFace photos under 30 years and 16 of 50 or more, as stored."""
    wanted, out = 16, {"young": [], "old": []}
    with tarfile.open(shared_data / "utkface" / "UTKFace-128.tar.gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            age = int(Path(member.name).name.split("_")[0])
            group = "young" if age < 30 else "old" if age >= 50 else None
            if group and len(out[group]) < wanted:
                out[group].append(tar.extractfile(member).read())
            if min(len(v) for v in out.values()) >= wanted:
                return out
    raise AssertionError("UTKFace holds too few photos")


def _digit_folder(root: Path, digits, classes=(0, 1, 2), per_class=6, first=0) -> dict[str, list[np.ndarray]]:
    """Class folders of digit PNGs (the second half of each class one folder deeper), from the
    ``first`` of each class's digits on (another ``first`` gives other photos, not copies)."""
    x, y = digits
    written: dict[str, list[np.ndarray]] = {}
    for c in classes:
        images = x[y == c][first:first + per_class]
        folder = root / f"digit {c}"
        for i, image in enumerate(images):
            place = folder / "more" if i >= per_class // 2 else folder
            place.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(place / f"{i}.png")
        written[f"digit {c}"] = list(images)
    return written


def _photo_folder(root: Path, photos, per_class: int = 16) -> Path:
    for group, blobs in photos.items():
        (root / group).mkdir(parents=True, exist_ok=True)
        for i, blob in enumerate(blobs[:per_class]):
            (root / group / f"{i}.jpg").write_bytes(blob)
    return root


def _as_set(x: torch.Tensor) -> set[bytes]:
    return {bytes((img * 255).round().to(torch.uint8).numpy().tobytes()) for img in x}


# ----------------------------------------------------------------------------- layouts


def test_grey_class_folders_at_any_depth_read_exactly(tmp_path, digits):
    written = _digit_folder(tmp_path / "d", digits)
    data = load_image_folder(tmp_path / "d")
    assert data.channels == 1 and data.image_size == 28
    assert data.train.class_names == ("digit 0", "digit 1", "digit 2")  # sorted folder names
    assert len(data.train) + len(data.test) == 18 and data.unreadable == []
    # 28×28 PNGs are not resized: every pixel is the MNIST byte written
    expected = {bytes(img[None].tobytes()) for images in written.values() for img in images}
    assert _as_set(torch.cat([data.train.x, data.test.x])) == expected
    for part in (data.train, data.test):  # each image carries its own folder's label
        for img, label in zip(part.x, part.y, strict=True):
            raw = (img[0] * 255).round().to(torch.uint8).numpy()
            name = part.class_names[int(label)]
            assert any(np.array_equal(raw, w) for w in written[name])


def hashed_test_files(root: Path, fraction: float = 0.2, seed: int = 0) -> set[str]:
    """The files of a class folder that docs/data.md's split rule puts in test, computed here from
    its words: u = the first 8 bytes of SHA-256("bayescope-split", seed, class, path) over 2^64,
    a test image when u < the fraction."""
    out = set()
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        key = f"{rel.split('/')[0]}\0{rel}"
        digest = hashlib.sha256(f"bayescope-split\0{seed}\0{key}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2.0**64 < fraction:
            out.add(rel)
    return out


def test_the_split_holds_out_each_file_by_its_own_hash_the_same_way_every_time(tmp_path, digits):
    written = _digit_folder(tmp_path / "d", digits, classes=(0, 1), per_class=10)
    a, b = load_image_folder(tmp_path / "d"), load_image_folder(tmp_path / "d")
    assert torch.equal(a.test.x, b.test.x) and torch.equal(a.train.y, b.train.y)
    for fraction in (0.2, 0.5):
        data = load_image_folder(tmp_path / "d", test_fraction=fraction)
        expected = hashed_test_files(tmp_path / "d", fraction)
        # the test images are exactly the files the rule names (their pixels and their labels)
        pixels = {}
        for rel in expected:
            name = rel.split("/")[0]
            pixels[bytes(np.asarray(Image.open(tmp_path / "d" / rel))[None].tobytes())] = name
        assert _as_set(data.test.x) == set(pixels)
        assert sorted(data.test.class_names[int(c)] for c in data.test.y) == sorted(pixels.values())
        assert not (_as_set(data.train.x) & _as_set(data.test.x))
        assert len(data.train) + len(data.test) == sum(len(v) for v in written.values())
    assert hashed_test_files(tmp_path / "d", 0.2) <= hashed_test_files(tmp_path / "d", 0.5)


def test_train_and_test_folders_give_the_split(tmp_path, digits):
    _digit_folder(tmp_path / "d" / "train", digits, classes=(3, 4), per_class=4)
    _digit_folder(tmp_path / "d" / "test", digits, classes=(4,), per_class=2, first=4)
    data = load_image_folder(tmp_path / "d")
    assert data.train.class_names == ("digit 3", "digit 4")
    assert len(data.train) == 8 and data.test.y.tolist() == [1, 1]  # test's only class is train's second
    assert data.train.source["split_rule"] == "train/ and test/ folders"


def test_non_ascii_names_and_a_corrupt_file_are_read_and_listed(tmp_path, digits):
    x, _ = digits
    root = tmp_path / "Ziffern ä"
    for k, name in enumerate(("nul", "ünö", "日本")):
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(x[3 * k + i]).save(root / name / f"ñ{i}.png")
    (root / "ünö" / "kaputt.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    buffer = io.BytesIO()
    Image.fromarray(x[0]).save(buffer, format="PNG")
    (root / "日本" / "halb.png").write_bytes(buffer.getvalue()[:60])  # truncated
    (root / "nul" / "notes.txt").write_text("not an image")
    data = load_image_folder(root)
    assert data.train.class_names == tuple(sorted(("nul", "ünö", "日本")))
    assert data.files == 11 and len(data.train) + len(data.test) == 9
    assert sorted(u["file"] for u in data.unreadable) == ["ünö/kaputt.png", "日本/halb.png"]
    assert all("not a readable image" in u["reason"] for u in data.unreadable)
    assert data.train.source["ignored"] == 1
    line = data.summary()
    assert line.startswith("2 of 11 image files could not be read") and "ünö/kaputt.png" in line


def test_a_folder_of_one_class_cannot_train_but_is_an_ood_set(tmp_path, digits):
    x, _ = digits
    (tmp_path / "loose").mkdir()
    for i in range(5):
        Image.fromarray(x[i]).save(tmp_path / "loose" / f"{i}.png")
    data = load_image_folder(tmp_path / "loose")
    assert len(data.test) == 5 and len(data.train) == 0  # read whole as test images
    with pytest.raises(DatasetContentError, match="holds one class .* a classifier needs at least two"):
        check_training_classes(data, "loose")
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError, match="holds no images"):
        load_image_folder(tmp_path / "empty")


def test_unreadable_everything_is_a_sentence(tmp_path):
    (tmp_path / "bad" / "a").mkdir(parents=True)
    (tmp_path / "bad" / "b").mkdir(parents=True)
    (tmp_path / "bad" / "a" / "x.jpg").write_bytes(b"nope")
    (tmp_path / "bad" / "b" / "y.png").write_bytes(b"")
    with pytest.raises(DatasetContentError, match="none of the 2 image files .* could be read"):
        load_image_folder(tmp_path / "bad")


def test_a_csv_manifest_reads_relative_paths_and_names_missing_files(tmp_path, digits):
    x, y = digits
    (tmp_path / "imgs").mkdir()
    rows = ["path,label"]
    for i in range(12):
        Image.fromarray(x[i]).save(tmp_path / "imgs" / f"{i}.png")
        rows.append(f"imgs/{i}.png,{'even' if y[i] % 2 == 0 else 'odd'}")
    rows.append("imgs/gone.png,odd")
    (tmp_path / "set.csv").write_text("\n".join(rows) + "\n")
    data = load_image_folder(tmp_path / "set.csv")
    assert data.train.class_names == ("even", "odd")
    assert data.unreadable == [{"file": "imgs/gone.png", "reason": "no such file"}]
    both = torch.cat([data.train.x, data.test.x])
    labels = torch.cat([data.train.y, data.test.y])
    for img, label in zip(both, labels, strict=True):  # each image kept its row's label
        raw = (img[0] * 255).round().to(torch.uint8).numpy()
        i = next(i for i in range(12) if np.array_equal(x[i], raw))
        assert int(label) == int(y[i] % 2)
    (tmp_path / "broken.csv").write_text("path,label\nimgs/0.png\n")
    with pytest.raises(DatasetContentError, match="line 2: expected 'path,label'"):
        load_image_folder(tmp_path / "broken.csv")


def _cifar_records(images: np.ndarray, labels: list[tuple[int, ...]]) -> bytes:
    return b"".join(bytes(label) + img.tobytes() for img, label in zip(images, labels, strict=True))


def test_cifar_10_and_100_binaries_read_byte_for_byte(tmp_path):
    rng = np.random.default_rng(3)
    train = rng.integers(0, 256, (6, 3, 32, 32), dtype=np.uint8)
    test = rng.integers(0, 256, (4, 3, 32, 32), dtype=np.uint8)
    ten = tmp_path / "cifar-10-batches-bin"
    ten.mkdir()
    (ten / "data_batch_1.bin").write_bytes(_cifar_records(train[:3], [(0,), (1,), (2,)]))
    (ten / "data_batch_2.bin").write_bytes(_cifar_records(train[3:], [(9,), (1,), (0,)]))
    (ten / "test_batch.bin").write_bytes(_cifar_records(test, [(3,), (2,), (1,), (0,)]))
    data = load_image_folder(tmp_path)  # the archive's own sub-folder is found
    assert data.channels == 3 and data.image_size == 32
    assert data.train.class_names[:3] == ("airplane", "automobile", "bird")  # CIFAR-10's published names
    assert torch.equal(data.train.x, torch.from_numpy(train).float() / 255)
    assert data.train.y.tolist() == [0, 1, 2, 9, 1, 0] and data.test.y.tolist() == [3, 2, 1, 0]
    expected_mean = (train.astype(np.float64) / 255).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(data.mean, expected_mean, rtol=1e-6)

    hundred = tmp_path / "c100"
    hundred.mkdir()
    (hundred / "train.bin").write_bytes(_cifar_records(train[:2], [(4, 57), (1, 3)]))  # coarse, fine
    (hundred / "test.bin").write_bytes(_cifar_records(test[:1], [(2, 99)]))
    data = load_image_folder(hundred)
    assert data.train.y.tolist() == [57, 3] and data.test.y.tolist() == [99]
    assert torch.equal(data.test.x, torch.from_numpy(test[:1]).float() / 255)
    (hundred / "test.bin").write_bytes(_cifar_records(test[:1], [(2, 99)])[:-5])
    with pytest.raises(DatasetContentError, match="not a whole number of cifar-100 records"):
        load_image_folder(hundred)


# ----------------------------------------------------------------------------- one image


def test_the_shorter_side_is_resized_and_the_centre_cut(tmp_path):
    # 40 wide, 80 tall: red top quarter, green middle half, blue bottom quarter
    image = np.zeros((80, 40, 3), np.uint8)
    image[:20, :, 0] = 255
    image[20:60, :, 1] = 255
    image[60:, :, 2] = 255
    Image.fromarray(image).save(tmp_path / "bands.png")
    x = read_image(tmp_path / "bands.png", 32, 3)
    # 40 → 32 scales the height to 64: the bands sit at rows 0-16, 16-48, 48-64 and the
    # centre 32 rows (16-48) are the green band alone, up to a blended edge row
    assert x.shape == (3, 32, 32)
    assert (x[1, 1:-1] == 255).all() and (x[0, 1:-1] == 0).all() and (x[2, 1:-1] == 0).all()
    assert fit_square(Image.fromarray(image), 32).size == (32, 32)


def test_the_exif_orientation_is_applied(tmp_path):
    stored = np.zeros((20, 40), np.uint8)
    stored[:, 20:] = 255  # stored: dark left half, light right half
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated 90° clockwise: the left half becomes the top
    Image.fromarray(stored).save(tmp_path / "turned.jpg", exif=exif, quality=95)
    x = read_image(tmp_path / "turned.jpg", 20, 1)[0]  # shown 20×40: the centre 20 rows
    assert x[:8].max() < 40 and x[12:].min() > 215


def test_an_opened_photo_reads_as_predict_reads_its_file_at_every_size(tmp_path, photos):
    """The window keeps an opened photo as its bytes; each column reads it as ``predict`` reads
    the file (a JPEG larger than four times the side decodes at a reduced size, the EXIF turn applied)."""
    from core.engine.models import ArchSpec

    big = Image.open(io.BytesIO(photos["old"][0])).resize((300, 200))
    exif = Image.Exif()
    exif[0x0112] = 6
    big.save(tmp_path / "turned.jpg", exif=exif, quality=90)
    photo = open_photo(tmp_path / "turned.jpg")
    for side, channels in ((32, 3), (48, 3), (28, 1)):
        arch = ArchSpec("resnet", num_classes=2, image_size=side, channels=channels,
                        mean=(0.5,) * channels, std=(0.25,) * channels)
        assert np.array_equal(photo.array(side, channels), read_image(tmp_path / "turned.jpg", side, channels))
        torch.testing.assert_close(photo.model_input(arch), photo_input(tmp_path / "turned.jpg", arch), rtol=0, atol=0)
    assert photo.picture(100).shape == (100, 67, 3)  # shown upright: 200 wide, 300 tall
    with pytest.raises(ValueError, match="judges digits"):
        photo.model_input(ArchSpec("lenet"))  # MNIST's digits are prepared otherwise
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(ValueError, match="bad.png: not a readable image") as refused:
        open_photo(tmp_path / "bad.png")
    assert str(tmp_path) not in str(refused.value)


def test_colour_is_detected_and_grey_photos_stay_grey(tmp_path, photos, digits):
    colour = load_image_folder(_photo_folder(tmp_path / "faces", photos, 6))
    assert colour.channels == 3 and colour.image_size == 32
    assert colour.train.x.shape[1:] == (3, 32, 32)
    for group, blobs in photos.items():  # grey copies of the photos, saved as RGB JPEGs
        (tmp_path / "grey" / group).mkdir(parents=True)
        for i, blob in enumerate(blobs[:6]):
            Image.open(io.BytesIO(blob)).convert("L").convert("RGB").save(tmp_path / "grey" / group / f"{i}.jpg")
    assert load_image_folder(tmp_path / "grey").channels == 1


def test_the_standardisation_is_measured_on_the_training_images(tmp_path, photos):
    data = load_image_folder(_photo_folder(tmp_path / "faces", photos, 8), image_size=24)
    # independently: every training image read back with Pillow, resized as documented
    pixels = []
    for img in data.train.x:
        pixels.append(img.reshape(3, -1).double())
    stacked = torch.cat(pixels, 1)
    np.testing.assert_allclose(data.mean, stacked.mean(1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(data.std, stacked.std(1, unbiased=False).numpy(), rtol=1e-5)
    files = sorted((tmp_path / "faces").rglob("*.jpg"))
    values = []
    for f in files:
        with Image.open(f) as im:
            w, h = im.size
            side = 24
            scale = side / min(w, h)
            small = im.convert("RGB").resize((round(w * scale), round(h * scale)), Image.Resampling.BILINEAR)
            left, top = (small.width - side) // 2, (small.height - side) // 2
            values.append(np.asarray(small.crop((left, top, left + side, top + side))))
    assert _as_set(torch.cat([data.train.x, data.test.x])) == {
        bytes(v.transpose(2, 0, 1).tobytes()) for v in values}


def test_a_large_set_streams_from_disk_with_the_same_images(tmp_path, photos):
    folder = _photo_folder(tmp_path / "faces", photos, 16)  # 6 of its 32 files are test images
    held = load_image_folder(folder)
    streamed = load_image_folder(folder, stream_bytes=0)
    assert isinstance(streamed.train.x, StreamedImages) and streamed.train.source["streamed"]
    assert streamed.train.x.shape == held.train.x.shape
    index = torch.tensor([3, 0, 5])
    assert torch.equal(streamed.train.x[index], held.train.x[index])
    assert len(held.test) >= 1
    assert torch.equal(streamed.test.first(1).x[torch.arange(1)], held.test.x[:1])
    assert isinstance(streamed.test.first(1).x, StreamedImages)  # a part stays on disk
    assert torch.equal(streamed.train.x[2:6], held.train.x[2:6])  # a slice is decoded, as a tensor's is
    assert streamed.mean == held.mean
    # the accuracy loop and the evaluation read batches by slices: the same numbers either way
    from core.engine.inference.base import SampledPosterior, accuracy
    from core.engine.models import ArchSpec, build_model

    arch = ArchSpec("resnet", num_classes=2, image_size=32, channels=3, mean=held.mean, std=held.std)
    torch.manual_seed(0)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    posterior = SampledPosterior("map", arch, {}, 0, "faces", samples)
    assert accuracy(posterior, streamed.test) == accuracy(posterior, held.test)
    # a fit draws mini-batches by index tensors: the same fit from disk as from memory
    import dataclasses

    from core.engine.inference import get_method
    from core.engine.runner import drain, fit_posterior

    method = get_method("map")
    config = dataclasses.replace(method.parse_settings({}), epochs=1, batch_size=4)
    fits = [drain(fit_posterior(method, config, arch, data.train, 0)) for data in (held, streamed)]
    for name, tensor in fits[0].samples.items():
        torch.testing.assert_close(fits[1].samples[name], tensor)


def test_decoding_with_worker_processes_gives_the_same_images(tmp_path, photos):
    folder = _photo_folder(tmp_path / "faces", photos, 4)
    alone = load_image_folder(folder, workers=0)
    with_workers = load_image_folder(folder, workers=2)
    assert torch.equal(alone.train.x, with_workers.train.x)


_VALID = st.sampled_from(["png", "jpg", "bmp", "webp", "tiff"])
_CORRUPT = st.sampled_from(["empty", "garbage", "truncated"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(st.integers(0, 2), st.one_of(_VALID, _CORRUPT), st.integers(1, 40),
                                st.integers(1, 40), st.booleans()), min_size=1, max_size=12),
       name=st.text(string.ascii_letters + "äñ日 ", min_size=1, max_size=6))
def test_any_mix_of_valid_and_corrupt_files_adds_up(tmp_path_factory, files, name):
    root = tmp_path_factory.mktemp("mix")
    valid = 0
    readable: dict[int, int] = {}
    for i, (cls, kind, w, h, colour) in enumerate(files):
        folder = root / f"{name.strip() or 'c'}{cls}"
        folder.mkdir(exist_ok=True)
        if kind in ("empty", "garbage", "truncated"):
            blob = {"empty": b"", "garbage": bytes(range(7)) * 3}.get(kind)
            if blob is None:
                buffer = io.BytesIO()
                Image.new("RGB", (w, h), (200, 10, 10)).save(buffer, format="PNG")
                blob = buffer.getvalue()[:20]
            (folder / f"{i}.png").write_bytes(blob)
        else:
            pixels = np.full((h, w, 3) if colour else (h, w), 90 + 7 * i, np.uint8)
            Image.fromarray(pixels).save(folder / f"{i}.{kind}")
            valid += 1
        readable[cls] = readable.get(cls, 0) + (kind not in ("empty", "garbage", "truncated"))
    if valid == 0:
        with pytest.raises(DatasetContentError):
            load_image_folder(root, image_size=16)
        return
    if len(readable) > 1 and 0 in readable.values():  # a class of damaged files only: never an unseen output
        with pytest.raises(DatasetContentError, match="has no training image.*: none of its .* could be read"):
            load_image_folder(root, image_size=16)
        return
    try:
        data = load_image_folder(root, image_size=16)
    except EmptyClassError as exc:  # each file's split is its own hash: a small class may fall wholly in test
        assert "fell in the test split" in str(exc)
        data = load_image_folder(root, image_size=16, need_train=False)
    assert len(data.train) + len(data.test) == valid
    assert len(data.unreadable) == len(files) - valid == data.files - valid
    assert data.train.x.shape[1:] == (data.channels, 16, 16) if len(data.train) else True


# ----------------------------------------------------------------------------- command line


def test_image_folder_tells_idx_folders_and_names_apart(tmp_path, digits):
    _digit_folder(tmp_path / "d", digits)
    (tmp_path / "idx").mkdir()
    write_idx(tmp_path / "idx" / "t10k-images-idx3-ubyte.gz", digits[0][:4])
    write_idx(tmp_path / "idx" / "t10k-labels-idx1-ubyte.gz", digits[1][:4])
    assert image_folder(tmp_path / "d") and not image_folder(tmp_path / "idx") and not image_folder("mnist")


def test_train_on_a_colour_folder_then_evaluate_it_with_an_ood_folder(tmp_path, photos, digits, capsys):
    faces = _photo_folder(tmp_path / "faces", photos, 16)
    (faces / "old" / "broken.jpg").write_bytes(b"not a photo")
    _digit_folder(tmp_path / "digits", digits, classes=(0, 1), per_class=5)
    out = tmp_path / "map.pt"
    assert main(["train", "--dataset", str(faces), "--method", "map", "--set", "epochs=2",
                 "--set", "batch_size=8", "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert "1 of 33 image files could not be read" in said.err and "old/broken.jpg" in said.err
    posterior = load_posterior(out)
    assert posterior.arch.name == "resnet" and posterior.arch.channels == 3  # colour → the colour net
    assert posterior.info["class_names"] == ["old", "young"]
    record = posterior.info["training_data"]
    assert record["unreadable"] == [{"file": "old/broken.jpg", "reason": record["unreadable"][0]["reason"]}]
    assert tuple(record["normalisation"]["mean"]) == posterior.arch.mean
    trained_accuracy = posterior.info["test_accuracy"]
    report = tmp_path / "report"
    assert main(["evaluate", "--posterior", str(out), "--dataset", str(faces), "--ood", str(tmp_path / "digits"),
                 "--out", str(report)]) == 0
    ev = json.loads((report / "evaluation.json").read_text())
    text = capsys.readouterr().out
    # the files the split rule names, the broken file left out
    faces_test = {rel for rel in hashed_test_files(faces) if not rel.endswith("broken.jpg")}
    assert f"faces-test: {len(faces_test)} images" in text
    assert f"OOD digits-test: {len(hashed_test_files(tmp_path / 'digits'))} images" in text
    # the same split in both commands: the MAP's accuracy on it is the one train recorded
    assert f"{trained_accuracy * 100:7.2f}" in text
    assert json.dumps(ev).count("old/broken.jpg") >= 1  # the unreadable file is in the report's provenance
    # a folder of other classes is refused: its labels would be read as the posterior's classes
    assert main(["evaluate", "--posterior", str(out), "--dataset", str(tmp_path / "digits"),
                 "--out", str(tmp_path / "other")]) == 2
    assert "has the classes digit 0, digit 1, which map does not tell apart (its classes are old, young)" in (
        capsys.readouterr().err)


def test_train_refuses_a_one_class_folder_in_one_line(tmp_path, digits, capsys):
    x, _ = digits
    (tmp_path / "one" / "only").mkdir(parents=True)
    for i in range(4):
        Image.fromarray(x[i]).save(tmp_path / "one" / "only" / f"{i}.png")
    assert main(["train", "--dataset", str(tmp_path / "one"), "--method", "map", "--out", str(tmp_path / "p.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "a classifier needs at least two" in err and "Error" not in err
    assert not (tmp_path / "p.pt").exists()


def test_reading_a_folder_reports_progress_and_picks_the_command_lines_network(tmp_path, photos):
    from core.engine.data.folder import default_folder_model, folder_architecture, read_image_folder

    folder = _photo_folder(tmp_path / "colours", photos, per_class=5)  # 10 files: records at 4, 8 and 10
    reading = read_image_folder(folder, report_every=4)
    records = []
    while True:
        try:
            records.append(next(reading))
        except StopIteration as stop:
            data = stop.value
            break
    assert data.files == 10
    assert [(r.step, r.total) for r in records] == [(0, 0), (4, 10), (8, 10), (10, 10)]
    assert data.channels == 3 and default_folder_model(3) == "resnet" and default_folder_model(1) == "lenet"
    arch = folder_architecture(data)
    assert (arch.name, arch.channels, arch.image_size) == ("resnet", 3, data.image_size)
    assert arch.num_classes == len(data.train.class_names) and arch.mean == data.mean
    assert folder_architecture(data, "mlp", 0.2, 50).hidden == 50


def test_calibrate_and_evaluate_calibrate_on_a_class_folder_agree(tmp_path, digits, capsys):
    """``calibrate --dataset FOLDER`` (it once failed on the folder's file count) and
    ``evaluate --calibrate`` calibrate the same held-out half of the folder's test split with the
    same scores: one from its own pass, one from the evaluation's predictions."""
    from core.analysis.conformal import calibration_mask, image_fingerprints
    from core.analysis.conformal_run import calibration_of_record
    from core.engine.calibration_file import read_calibration, sidecar_path

    folder = tmp_path / "digits"
    _digit_folder(folder, digits, classes=(0, 1, 2), per_class=20)
    out = tmp_path / "map.pt"
    assert main(["train", "--dataset", str(folder), "--method", "map", "--set", "epochs=1",
                 "--set", "batch_size=16", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["calibrate", "--posterior", str(out), "--dataset", str(folder)]) == 0
    assert "wrote" in capsys.readouterr().out
    record = read_calibration(out)
    # the images are the hash-chosen half of the folder's test split (the files the split rule
    # names, read again with Pillow here), identified by their pixels: the folder lists no IDX files
    test_files = hashed_test_files(folder)
    pixels = np.stack([np.asarray(Image.open(folder / rel)) for rel in sorted(test_files)])
    prints = image_fingerprints(torch.from_numpy(pixels).float().div(255).unsqueeze(1))
    assert record["identity"]["of_images"] == len(test_files)
    assert record["identity"]["images"] == int(calibration_mask(prints).sum()) > 0
    assert record["identity"]["dataset_files"] == {}
    own_pass = calibration_of_record(record)
    sidecar_path(out).unlink()
    assert main(["evaluate", "--posterior", str(out), "--dataset", str(folder), "--calibrate",
                 "--out", str(tmp_path / "report")]) == 0
    assert f"map: calibrated on {own_pass.n:,} of {len(test_files):,} images" in capsys.readouterr().out
    from_evaluation = calibration_of_record(read_calibration(out))
    for score, values in own_pass.scores.items():
        np.testing.assert_allclose(from_evaluation.scores[score], values, rtol=1e-5, atol=1e-6)
