"""UTKFace's split never puts one photo on both sides (issue 45).

UTKFace holds some photos twice under two names, and its split goes by the names: without a
check of the files' contents, 108 of the name split's test faces are byte-for-byte copies of
training faces. :func:`core.engine.data.utkface.split_unseen` is the one split every reader takes
(the descriptor heads' test set, the face test set, ``utkface-folders``); these tests hold it to
that on folders made with copies under other names, and on the real archive.
"""

from __future__ import annotations

import hashlib
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.commands.main import main
from core.engine.data.utkface import (
    AGE_FOLDERS,
    open_utkface,
    split_unseen,
    stratified_split,
    unseen_test,
    write_age_folders,
)
from core.engine.runner import drain
from tests.core.test_faces import ARCHIVE


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _tree_digests(folder: Path) -> list[bytes]:
    return [_sha(p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()]


# A folder: photos (distinct contents), each written under one or more names with any ages.
photos = st.lists(
    st.lists(st.integers(0, 116), min_size=1, max_size=4),  # the ages of one photo's copies
    min_size=2, max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(photos=photos, seed=st.integers(0, 2**16))
def test_no_photo_is_on_both_sides_of_a_folder_with_copies(photos, seed):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "UTKFace"
        folder.mkdir()
        for p, ages in enumerate(photos):
            content = f"photo {p}".encode() * 3
            for c, age in enumerate(ages):
                (folder / f"{age}_0_0_{p:03d}{c}.jpg.chip.jpg").write_bytes(content)
        source = open_utkface(folder)
        sides = split_unseen(source, 0.3, seed)
        digest = [_sha((folder / n).read_bytes()) for n in source.names]  # read here, not the source's
        train = {digest[i] for i in sides.train}
        test = [digest[i] for i in sides.test]

        assert not train & set(test)  # no photo on both sides
        assert len(set(test)) == len(test)  # a photo counts once among the test faces
        name_train, drawn = stratified_split(source.names, source.groups, 0.3, seed)
        np.testing.assert_array_equal(sides.train, name_train)  # the training side is the name split's
        assert sorted([*sides.test, *sides.seen, *sides.repeated]) == drawn.tolist()  # nothing else left out
        assert all(digest[i] in train for i in sides.seen)
        # every distinct photo drawn to test and not trained on is kept, once
        assert set(test) == {digest[i] for i in drawn} - train

        out = Path(tmp) / "ages"
        drain(write_age_folders(source, out, test_fraction=0.3, seed=seed))
        written_test = _tree_digests(out / "test")
        assert not set(_tree_digests(out / "train")) & set(written_test)
        assert sorted(written_test) == sorted(test)


def test_of_identical_test_photos_the_first_by_name_is_kept():
    contents = [b"a", b"b", b"a", b"c", b"c", b"d", b""]
    sides = unseen_test(np.array([1]), np.array([0, 2, 3, 4, 5, 6]), contents)
    assert sides.test.tolist() == [0, 3, 5, 6]  # an unreadable file (no digest) matches nothing
    assert sides.repeated.tolist() == [2, 4] and sides.seen.tolist() == []
    trained = unseen_test(np.array([0, 3]), np.array([1, 2, 4, 5]), contents)
    assert trained.seen.tolist() == [2, 4] and trained.test.tolist() == [1, 5]


def test_utkface_folders_removes_a_copy_an_older_version_wrote_into_test(tmp_path, capsys):
    folder = tmp_path / "UTKFace"
    folder.mkdir()
    for i in range(20):
        (folder / f"30_0_0_{i:03d}.jpg.chip.jpg").write_bytes(f"face {i}".encode())
    source = open_utkface(folder)
    train, drawn = stratified_split(source.names, source.groups)
    copy = source.names[drawn[0]]
    (folder / copy).write_bytes((folder / source.names[train[0]]).read_bytes())  # the same photo, two names
    stale = tmp_path / "ages" / "test" / AGE_FOLDERS[4] / copy
    stale.parent.mkdir(parents=True)
    stale.write_bytes((folder / copy).read_bytes())  # as the name split wrote it

    assert main(["utkface-folders", "--utkface", str(folder), "--out", str(tmp_path / "ages")]) == 0
    said = capsys.readouterr().out
    assert not stale.exists()
    assert "left out of test/" in said and "1 byte-for-byte copy of training faces and 0 copies" in said
    assert len(list((tmp_path / "ages" / "test").rglob("*.jpg"))) == len(drawn) - 1


@pytest.fixture(scope="module")
def archive_digests() -> tuple[tuple[str, ...], dict[str, bytes]]:
    if not ARCHIVE.is_file():
        pytest.skip(f"UTKFace archive not found at {ARCHIVE}")
    digests: dict[str, bytes] = {}
    with tarfile.open(ARCHIVE, "r:gz") as tar:  # read here, independently of the source's own hashes
        for member in tar:
            if member.isfile():
                digests[member.name] = _sha(tar.extractfile(member).read())
    return tuple(sorted(digests)), digests


def test_no_test_photo_of_the_real_archive_is_a_training_photo(archive_digests):
    source = open_utkface(ARCHIVE)
    _, digests = archive_digests
    sides = split_unseen(source)
    train = {digests[source.names[i]] for i in sides.train}
    test = [digests[source.names[i]] for i in sides.test]
    assert not train & set(test)
    assert len(set(test)) == len(test)
    # the name split alone put 108 copies of training photos among its 4,741 test faces, and
    # 10 more test faces repeat another test photo; the training side stays the heads' 18,966
    _, drawn = stratified_split(source.names, source.groups)
    assert len(drawn) == 4741 and sum(digests[source.names[i]] in train for i in drawn) == 108
    assert (len(sides.train), len(sides.test), len(sides.seen), len(sides.repeated)) == (18966, 4623, 108, 10)


def test_the_face_test_set_holds_no_training_photo(archive_digests):
    """``evaluate --dataset utkface-test`` and the Dataset tab read these faces (when the archive's
    descriptors are cached here; describing 4,623 faces is not a unit test's work)."""
    from core.engine.faces.testset import load_face_test_set

    faces = drain(load_face_test_set(ARCHIVE, cache_only=True))
    if faces is None:
        pytest.skip("the test faces' descriptors are not in the user cache (bayescope-cli train --dataset utkface)")
    _, digests = archive_digests
    source = open_utkface(ARCHIVE)
    train = {digests[source.names[i]] for i in stratified_split(source.names, source.groups)[0]}
    held = [digests[name] for name in faces.names]
    assert not train & set(held) and len(set(held)) == len(held)
    record = faces.data.source
    assert record["split_faces"] == 4623 and len(faces) == 4623 - record["dropped"]
    assert (record["left_out_as_training_photos"], record["left_out_as_repeated_photos"]) == (108, 10)
