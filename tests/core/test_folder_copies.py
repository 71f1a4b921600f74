"""No photo on both sides of a person's folder's split (issue 45's own-data path).

A folder may hold one photo under two names: in another class folder, deeper down, or beside
itself. The split goes by each file's class and path, so without a look at the files' bytes a
copy of a training image can be a test image and inflate every test figure. Every reader of a
person's images (pixels: :func:`core.engine.data.folder.read_image_folder`; a network's features:
:func:`core.engine.data.features.folder_features`) takes UTKFace's rule
(:func:`core.engine.data.split.unseen_test`): of the images drawn to test, one whose bytes are a
training image's or an earlier test image's is left out, and the training side is the rule's.

Each photo here is a uniform grey square of its own level, so a decoded image names its photo
(its level) whatever file it came from; the expected sides are worked out from the files as
written and the split rule's words (docs/data.md: SHA-256 of "bayescope-split", seed, class, path).
"""

from __future__ import annotations

import hashlib
import io
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from core.commands.main import main
from core.engine.data.folder import load_image_folder
from core.engine.data.split import Copies, leave_out_copies, unseen_test

SIDE = 8
CLASSES = ("cat", "dog", "owl")


def png(level: int) -> bytes:
    """A uniform grey PNG: photo ``level``'s bytes (every copy of it is these bytes)."""
    out = io.BytesIO()
    Image.fromarray(np.full((SIDE, SIDE), level, dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


def level_of_photo(p: int) -> int:
    return 10 + 6 * p  # distinct, far apart: a decoded square rounds back to its own level


def is_test_by_rule(class_name: str, relative: str, fraction: float = 0.2, seed: int = 0) -> bool:
    """docs/data.md's rule from its words (the key is the class name and the path)."""
    digest = hashlib.sha256(f"bayescope-split\0{seed}\0{class_name}\0{relative}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < fraction


def photos_in(x) -> list[int]:
    """The photo each decoded image is (by its grey level)."""
    levels = np.rint(x.reshape(len(x), SIDE * SIDE).mean(1).numpy() * 255).astype(int)
    return [(int(v) - 10) // 6 for v in levels]


# A folder: photos, each written as one or more files; a file is (class, depth).
copies_of_a_photo = st.lists(st.tuples(st.sampled_from(CLASSES), st.integers(0, 2)), min_size=1, max_size=4)
folders = st.lists(copies_of_a_photo, min_size=3, max_size=30)


def write_folder(root: Path, photos: list[list[tuple[str, int]]]) -> dict[str, tuple[str, int]]:
    """Write every copy; returns relative path → (class, photo). Every class gets one photo of its
    own first, so that no class is empty."""
    files: dict[str, tuple[str, int]] = {}
    everything = [[(c, 0)] for c in CLASSES] + photos
    for p, copies in enumerate(everything):
        data = png(level_of_photo(p))
        for c, (class_name, depth) in enumerate(copies):
            folder = root / class_name / Path(*[f"sub{d}" for d in range(depth)])
            folder.mkdir(parents=True, exist_ok=True)
            name = f"p{p:02d}c{c}.png"
            (folder / name).write_bytes(data)
            files[(folder / name).relative_to(root).as_posix()] = (class_name, p)
    return files


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(photos=folders)
def test_no_photo_is_on_both_sides_of_a_folder_with_copies(photos):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pets"
        files = write_folder(root, photos)
        data = load_image_folder(root, SIDE, 1, workers=0)
        train, test = photos_in(data.train.x), photos_in(data.test.x)

        drawn = {rel: is_test_by_rule(c, rel) for rel, (c, _) in files.items()}
        expected_train = Counter(p for rel, (_, p) in files.items() if not drawn[rel])
        # the training side is the rule's, every copy of it included: weights trained before stay valid
        assert Counter(train) == expected_train
        assert not set(train) & set(test)  # no photo on both sides
        assert len(set(test)) == len(test)  # a photo counts once among the test images
        # every photo drawn to test and not trained on is kept, once
        assert set(test) == {p for rel, (_, p) in files.items() if drawn[rel]} - set(expected_train)
        # a test image keeps the label of its file (the first of its copies drawn to test, in listing order)
        labels = data.test.y.tolist()
        for p, label in zip(test, labels, strict=True):
            classes = {c for rel, (c, q) in files.items() if q == p and drawn[rel]}
            assert data.test.class_names[label] in classes
        record = data.test.source["copies"]
        left = sum(drawn.values()) - len(test)
        assert record["left_out_as_training_photos"] + record["left_out_as_repeated_photos"] == left
        note = data.test.source["copies_note"]
        assert (note is not None) == (left > 0 or bool(record["in_two_classes"]))


def test_a_copy_in_another_class_folder_is_left_out_and_the_conflict_named(tmp_path, capsys):
    root = tmp_path / "pets"
    trained, copy = _folder_with_a_copy(root)  # a training cat, copied as a test dog

    data = load_image_folder(root, SIDE, 1, workers=0)
    cat = level_of_photo(3 * int(trained[:2]))
    assert cat not in photos_in(data.test.x) and photos_in(data.train.x).count(cat) == 1
    record = data.train.source["copies"]
    assert record["training_photos"] == [f"dog/{copy}"]
    assert record["in_two_classes"] == [[f"cat/{trained}", f"dog/{copy}"]]
    assert data.notes() == [data.copies]
    assert f"1 byte-for-byte copy of training images (dog/{copy})" in data.copies
    assert f"1 photo is in two classes at once (the same bytes: cat/{trained} and dog/{copy})" in data.copies
    assert "Error" not in data.copies and str(tmp_path) not in data.copies  # a sentence, no path of the machine

    # the command line says it in one line and trains on (the copy is no reason to refuse)
    out = tmp_path / "map.pt"
    code = main(["train", "--method", "map", "--dataset", str(root), "--model", "softmax", "--set", "epochs=1",
                 "--image-size", str(SIDE), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0 and out.is_file()
    notes = [line for line in err.splitlines() if "in two classes" in line]
    assert len(notes) == 1 and notes[0].startswith("note: left out of the test images")


def test_nested_copies_and_a_repeated_test_photo():
    """unseen_test over a listing: a repeated test photo keeps its first copy; an unreadable file
    (no fingerprint) matches nothing."""
    contents = [b"a", b"b", b"a", b"c", b"c", None, None, b"b"]
    is_test = np.array([False, False, True, True, True, True, True, True])
    labels = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    copies = leave_out_copies(is_test, np.ones(8, dtype=bool), labels, contents)
    assert isinstance(copies, Copies)
    assert copies.sides.seen.tolist() == [2, 7] and copies.sides.repeated.tolist() == [4]
    assert copies.sides.test.tolist() == [3, 5, 6]
    assert copies.left_out.tolist() == [False, False, True, False, True, False, False, True]
    assert copies.conflicts == ((1, 7),)  # b is a 0 and a 1
    # the same rule as UTKFace's
    same = unseen_test(np.flatnonzero(~is_test), np.flatnonzero(is_test), contents)
    assert same.seen.tolist() == copies.sides.seen.tolist() and same.repeated.tolist() == [4]


def test_a_folder_without_copies_splits_as_before(tmp_path):
    root = tmp_path / "pets"
    for class_name in CLASSES:
        (root / class_name).mkdir(parents=True)
        for i in range(10):
            (root / class_name / f"{i}.png").write_bytes(png(level_of_photo(3 * i + CLASSES.index(class_name))))
    data = load_image_folder(root, SIDE, 1, workers=0)
    assert data.copies is None and data.notes() == []
    files = {f"{c}/{i}.png" for c in CLASSES for i in range(10)}
    assert len(data.test) == sum(is_test_by_rule(f.split("/")[0], f) for f in files)
    assert len(data.train) + len(data.test) == 30


@pytest.mark.parametrize("layout", ["train/ and test/", "manifest"])
def test_given_splits_and_manifests_leave_copies_out_too(tmp_path, layout):
    if layout == "manifest":
        rows = ["path,label"]
        for i in range(6):
            for class_name in ("cat", "dog"):
                name = f"img/{class_name}{i}.png"
                (tmp_path / "img").mkdir(exist_ok=True)
                (tmp_path / name).write_bytes(png(level_of_photo(2 * i + (class_name == "dog"))))
                rows.append(f"{name},{class_name}")
        trained = next(i for i in range(6) if not is_test_by_rule("cat", f"img/cat{i}.png"))
        drawn = next(i for i in range(200) if is_test_by_rule("cat", f"img/again{i}.png"))
        (tmp_path / f"img/again{drawn}.png").write_bytes(png(level_of_photo(2 * trained)))
        rows.append(f"img/again{drawn}.png,cat")
        copied_into_test = level_of_photo(2 * trained)
        (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
        data = load_image_folder(tmp_path / "list.csv", SIDE, 1, workers=0)
    else:
        for split in ("train", "test"):
            for class_name in ("cat", "dog"):
                (tmp_path / split / class_name).mkdir(parents=True)
        for i in range(4):
            (tmp_path / "train" / "cat" / f"{i}.png").write_bytes(png(level_of_photo(i)))
            (tmp_path / "train" / "dog" / f"{i}.png").write_bytes(png(level_of_photo(10 + i)))
            (tmp_path / "test" / "dog" / f"{i}.png").write_bytes(png(level_of_photo(20 + i)))
        (tmp_path / "test" / "cat" / "same.png").write_bytes(png(level_of_photo(0)))
        (tmp_path / "test" / "cat" / "twice-a.png").write_bytes(png(level_of_photo(30)))
        (tmp_path / "test" / "cat" / "twice-b.png").write_bytes(png(level_of_photo(30)))
        data = load_image_folder(tmp_path, SIDE, 1, workers=0)
        assert sorted(photos_in(data.test.x)) == [20, 21, 22, 23, 30]
        assert data.test.source["copies"]["repeated_photos"] == ["test/cat/twice-b.png"]
        copied_into_test = level_of_photo(0)
    assert (copied_into_test - 10) // 6 not in photos_in(data.test.x)
    assert data.test.source["copies"]["left_out_as_training_photos"] == 1


def _folder_with_a_copy(root: Path) -> tuple[str, str]:
    """Three classes of distinct photos and one training cat copied into dog under a test name."""
    for class_name in CLASSES:
        (root / class_name).mkdir(parents=True)
        for i in range(12):
            (root / class_name / f"{i:02d}.png").write_bytes(png(level_of_photo(3 * i + CLASSES.index(class_name))))
    trained = next(f"{i:02d}.png" for i in range(12) if not is_test_by_rule("cat", f"cat/{i:02d}.png"))
    copy = next(f"copy{i}.png" for i in range(100) if is_test_by_rule("dog", f"dog/copy{i}.png"))
    (root / "dog" / copy).write_bytes((root / "cat" / trained).read_bytes())
    return trained, copy


def test_the_training_dialog_and_an_evaluation_say_what_was_left_out(tmp_path):
    from core.engine.data.identity import read_test_split
    from core.engine.training_words import folder_in_words

    trained, copy = _folder_with_a_copy(tmp_path / "pets")
    words, _ = folder_in_words(load_image_folder(tmp_path / "pets", SIDE, 1, workers=0))
    assert f"Left out of the test images, so that no photo is on both sides or counts twice: 1 byte-for-byte copy " \
           f"of training images (dog/{copy})" in words
    test = read_test_split(tmp_path / "pets", {"a posterior": None}, SIDE, 1)
    assert level_of_photo(3 * int(trained[:2])) not in [v * 6 + 10 for v in photos_in(test.x)]
    assert f"(the same bytes: cat/{trained} and dog/{copy})" in test.source["data_check"]["note"]


def test_a_test_side_of_nothing_but_copies_says_so(tmp_path, capsys):
    """Every image drawn to test is a copy of a training image: the refusal says why the test
    images are gone, not only that the set is empty."""
    root = tmp_path / "same"
    for name, level in (("dark", level_of_photo(1)), ("light", level_of_photo(2))):
        (root / name).mkdir(parents=True)
        for i in range(12):
            (root / name / f"{i}.png").write_bytes(png(level))
    data = load_image_folder(root, SIDE, 1, workers=0)
    assert len(data.test) == 0 and len(data.train) > 0
    # training keeps its file and says why its accuracy could not be measured
    posterior = tmp_path / "map.pt"
    assert main(["train", "--method", "map", "--dataset", str(root), "--model", "softmax", "--set", "epochs=1",
                 "--image-size", str(SIDE), "--out", str(posterior)]) != 0
    err = capsys.readouterr().err
    assert posterior.is_file() and "byte-for-byte copy of a training image" in err and "Traceback" not in err
    # and any check of that test side as data for a model says why it is empty
    from core.engine.inference.base import check_data_fits
    from core.engine.models import ArchSpec

    with pytest.raises(ValueError, match="is empty: every one of the 3 images drawn to test is a byte-for-byte copy"):
        check_data_fits(ArchSpec("softmax", num_classes=2, image_size=SIDE, channels=1), data.test, "test set")
