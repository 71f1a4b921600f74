"""UTKFace for the face mode: ages from file names, eight age groups, a fixed split.

UTKFace (Zhang, Song & Qi 2017) holds 23,708 aligned and cropped faces, each named
``<age>_<gender>_<race>_<date&time>.jpg.chip.jpg``. A few names lack the race field or
carry stray characters, so the age is parsed as the whole number before the first ``_``
and nothing else is read from the name. The D-SGHMC paper's age experiment used ADIENCE
(eight age ranges); here each face's age is mapped to the eight contiguous groups of
:mod:`core.engine.faces.age_groups` (0–2, 3–7, 8–14, 15–24, 25–37, 38–47, 48–59, 60+).

:func:`open_utkface` reads the official archive (``UTKFace.tar.gz`` or the 128-pixel
``UTKFace-128.tar.gz``; members are read in memory, never extracted) or a folder of the
images, and reports every file it skips with the reason. :func:`load_utkface` computes the
faces' descriptors (cached, resumable: :mod:`core.engine.faces.extract`) and returns the fixed,
seeded, stratified train/test split as two :class:`~core.engine.inference.base.Dataset` of
descriptors with their class counts.

**The split is by name, and no photo is on both sides** (:func:`split_unseen`, the one split every
reader of UTKFace takes). UTKFace holds some photos twice under two names (375 photos, 765 files
of the 128-pixel archive), so a split of the names alone puts 108 test files that are byte-for-byte
copies of training files into the test split. The test side leaves out every photo whose bytes
(SHA-256) are a training photo's, and keeps one of several identical test photos (the first by
name). The training side is the name split unchanged, so heads trained on it stay valid. The rule
is :func:`core.engine.data.split.unseen_test`, which a person's own folders take as well.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs
import torch

from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.data.split import UnseenSplit, unseen_test
from core.engine.faces._worker import STATUS_ASSUMED, STATUS_DETECTED
from core.engine.faces.age_groups import AGE_GROUP_NAMES, MAX_AGE, age_group
from core.engine.faces.descriptor import DEFAULT_DESCRIPTOR
from core.engine.faces.extract import DescriptorTable, extract_descriptors
from core.engine.inference.base import Dataset, ProgressRecord

NAME = "utkface"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
#: A member larger than this is not one of UTKFace's faces (they are a few kB).
MAX_IMAGE_BYTES = 20 * 1024 * 1024
#: The archive names looked for in a folder, in order.
ARCHIVE_NAMES = ("UTKFace-128.tar.gz", "UTKFace.tar.gz", "UTKFace.tar", "utkface.tar.gz")
_AGE = re.compile(r"^(\d+)_")
#: Where the detector finds no face in an aligned crop, this box (fractions of the image's
#: width and height: left, top, right, bottom) is described instead. It is the median box
#: dlib's detector returns on the UTKFace crops it does find (8, 8, 115, 116 of 128 pixels,
#: measured on 293 faces); the aligner then places the landmarks inside it as usual.
ASSUMED_BOX = (0.0625, 0.0625, 0.9, 0.906)
#: Fraction of each age group held out for testing, and the seed of the split.
TEST_FRACTION = 0.2
SPLIT_SEED = 0


def parse_age(file_name: str) -> int:
    """The age in a UTKFace file name: the whole number before the first ``_``.

    Raises ``ValueError`` (in words) when the name has none or it is out of range.
    """
    base = file_name.rsplit("/", 1)[-1]
    match = _AGE.match(base)
    if not match:
        raise ValueError("no age (a whole number) before the first '_' of the name")
    age = int(match.group(1))
    if age > MAX_AGE:
        raise ValueError(f"age {age} is above {MAX_AGE}")
    return age


@dataclass
class UtkfaceSource:
    """UTKFace's images: an archive or a folder, with their ages and what was skipped.

    Implements :class:`core.engine.faces.extract.ImageSource`. ``names`` are the members' paths in
    the archive (or relative to the folder), sorted; ``key`` is the SHA-256 of the archive
    file, or of the sorted names and bytes of the folder's files; ``contents`` the SHA-256 of each
    face's bytes (read when the source is opened; empty for a source made without them, whose
    :meth:`content_digests` then reads the faces).
    """

    path: Path
    kind: str
    names: tuple[str, ...]
    ages: np.ndarray
    key: str
    skipped: list[tuple[str, str]] = field(default_factory=list)
    contents: tuple[bytes, ...] = ()

    def content_digests(self) -> tuple[bytes, ...]:
        """The SHA-256 of every face's bytes, in ``names`` order (read once, then kept)."""
        if len(self.contents) != len(self.names):
            digests = dict.fromkeys(range(len(self.names)), b"")
            for i, blob in self.read(set(range(len(self.names)))):
                digests[i] = hashlib.sha256(blob).digest()
            self.contents = tuple(digests[i] for i in range(len(self.names)))
        return self.contents

    def subset(self, indices: np.ndarray, key: str) -> UtkfaceSource:
        """The faces at ``indices`` (in that order) as a source of their own, under ``key``."""
        indices = np.asarray(indices, dtype=np.int64)
        contents = tuple(self.contents[i] for i in indices) if len(self.contents) == len(self.names) else ()
        return UtkfaceSource(self.path, self.kind, tuple(self.names[i] for i in indices), self.ages[indices], key,
                             self.skipped, contents)

    @property
    def groups(self) -> np.ndarray:
        return np.asarray([age_group(int(a)) for a in self.ages], dtype=np.int64)

    def describe(self) -> str:
        return f"UTKFace {self.kind} {self.path}"

    def read(self, wanted: set[int]) -> Iterator[tuple[int, bytes]]:
        index = {name: i for i, name in enumerate(self.names)}
        if self.kind == "folder":
            for i in sorted(wanted):
                yield i, (self.path / self.names[i]).read_bytes()
            return
        try:
            with tarfile.open(self.path, "r:*") as tar:
                for member in tar:
                    i = index.get(member.name)
                    if i is None or i not in wanted or not member.isfile():
                        continue
                    fh = tar.extractfile(member)
                    if fh is not None:
                        yield i, fh.read()
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise DatasetContentError(f"{self.path}: the archive cannot be read to its end ({exc})") from None

    def record(self) -> dict[str, Any]:
        """What was read, for data-set provenance."""
        return {
            "name": NAME,
            "path": str(self.path),
            "kind": self.kind,
            "sha256" if self.kind == "archive" else "content_sha256": self.key,
            "faces": len(self.names),
            "skipped_files": len(self.skipped),
        }


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _accept(name: str, size: int, skipped: list[tuple[str, str]]) -> int | None:
    base = name.rsplit("/", 1)[-1]
    if not base.lower().endswith(IMAGE_SUFFIXES):
        skipped.append((name, "not a JPEG or PNG image"))
        return None
    if size > MAX_IMAGE_BYTES:
        skipped.append((name, f"{size / 1e6:.0f} MB, too large for a face crop"))
        return None
    try:
        return parse_age(base)
    except ValueError as exc:
        skipped.append((name, str(exc)))
        return None


def _open_archive(path: Path) -> UtkfaceSource:
    entries: list[tuple[str, int, bytes]] = []
    skipped: list[tuple[str, str]] = []
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if member.isdir():
                    continue
                if not member.isfile():
                    skipped.append((member.name, "not a regular file (a link or device)"))
                    continue
                age = _accept(member.name, member.size, skipped)
                if age is not None:
                    # the listing decompresses every member anyway: hashing its bytes here costs
                    # about a second for UTKFace's archive, a second pass would cost the whole read
                    fh = tar.extractfile(member)
                    digest = hashlib.sha256(fh.read()).digest() if fh is not None else b""
                    entries.append((member.name, age, digest))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DatasetContentError(f"{path}: not a readable tar archive ({exc})") from None
    entries.sort()
    if len({n for n, _, _ in entries}) != len(entries):
        raise DatasetContentError(f"{path}: the archive holds the same file name twice")
    return UtkfaceSource(
        path, "archive", tuple(n for n, _, _ in entries), np.asarray([a for _, a, _ in entries], dtype=np.int64),
        _sha256_file(path), skipped, tuple(d for _, _, d in entries),
    )


def _open_folder(folder: Path) -> UtkfaceSource:
    entries: list[tuple[str, int, bytes]] = []
    skipped: list[tuple[str, str]] = []
    h = hashlib.sha256()
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.is_dir():
            continue
        if not entry.is_file():
            skipped.append((entry.name, "not a regular file"))
            continue
        age = _accept(entry.name, entry.stat().st_size, skipped)
        if age is None:
            continue
        digest = hashlib.sha256(entry.read_bytes()).digest()
        h.update(entry.name.encode("utf-8", "surrogateescape") + b"\0" + digest)
        entries.append((entry.name, age, digest))
    return UtkfaceSource(
        folder, "folder", tuple(n for n, _, _ in entries), np.asarray([a for _, a, _ in entries], dtype=np.int64),
        h.hexdigest(), skipped, tuple(d for _, _, d in entries),
    )


def default_folder() -> Path:
    """``<user cache>/data/utkface``, looked in when no place is given."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "data" / NAME


def _is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith((".tar.gz", ".tgz", ".tar"))


def _has_images(folder: Path) -> bool:
    try:
        return any(p.name.lower().endswith(IMAGE_SUFFIXES) for p in folder.iterdir())
    except OSError:
        return False


def open_utkface(path: str | os.PathLike | None = None) -> UtkfaceSource:
    """Find and list UTKFace at ``path``: the archive itself, a folder holding the archive
    (:data:`ARCHIVE_NAMES`) or a ``UTKFace`` folder of images, or a folder of the images.

    Without ``path`` the user cache (:func:`default_folder`) is looked in.

    Raises
    ------
    DatasetNotFoundError
        Nothing usable at ``path``.
    DatasetContentError
        A damaged archive, or one without any face whose name gives an age.
    """
    root = Path(path).expanduser() if path is not None else default_folder()
    if not root.exists():
        raise DatasetNotFoundError(
            f"{root}: no such file or folder; choose UTKFace's archive (UTKFace.tar.gz) or its folder of images"
        )
    if _is_archive(root):
        source = _open_archive(root)
    elif root.is_dir():
        archive = next((root / n for n in ARCHIVE_NAMES if (root / n).is_file()), None)
        if archive is not None:
            source = _open_archive(archive)
        elif (root / "UTKFace").is_dir():
            source = _open_folder(root / "UTKFace")
        elif _has_images(root):
            source = _open_folder(root)
        else:
            raise DatasetNotFoundError(
                f"{root} holds neither UTKFace's archive ({', '.join(ARCHIVE_NAMES[:2])}) nor its images"
            )
    else:
        raise DatasetNotFoundError(f"{root} is neither UTKFace's archive nor a folder")
    if not source.names:
        reasons = "; ".join(sorted({r for _, r in source.skipped})[:3]) or "it is empty"
        raise DatasetContentError(f"{source.path} holds no face whose file name gives an age ({reasons})")
    return source


# ----------------------------------------------------------------------------- the split


def stratified_split(
    names: tuple[str, ...] | list[str], labels: np.ndarray, test_fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test) with ``round(test_fraction · n_k)`` faces of every class k in test
    (at least one of every class that has two or more, so tiny sets test every class too).

    Within a class, faces are ordered by SHA-256 of ``"<seed>:<name>"`` and the first ones go
    to the test set, so the split depends only on the names and the seed: not on the order
    in which files are listed, and a face keeps its side when others are added or removed.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"the test fraction must lie strictly between 0 and 1, got {test_fraction}")
    labels = np.asarray(labels)
    if len(names) != len(labels):
        raise ValueError(f"{len(names)} names but {len(labels)} labels")
    keys = [hashlib.sha256(f"{seed}:{n}".encode("utf-8", "surrogateescape")).digest() for n in names]
    test: list[int] = []
    for k in np.unique(labels):
        members = sorted(np.flatnonzero(labels == k), key=lambda i: keys[i])
        wanted = int(round(test_fraction * len(members)))
        test.extend(members[: max(wanted, 1) if len(members) >= 2 else 0])
    test_mask = np.zeros(len(labels), dtype=bool)
    test_mask[test] = True
    return np.flatnonzero(~test_mask), np.flatnonzero(test_mask)


def split_unseen(
    source: UtkfaceSource, test_fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED
) -> UnseenSplit:
    """UTKFace's split, the one every reader of it takes: :func:`stratified_split` of the names
    (the training side as it is), and of the faces it draws to test only those whose photo is
    not already on either side (:func:`core.engine.data.split.unseen_test`, the rule a person's
    folders take too, by the SHA-256 of each file's bytes)."""
    train, drawn = stratified_split(source.names, source.groups, test_fraction, seed)
    return unseen_test(train, drawn, source.content_digests())


def class_counts(labels: np.ndarray, num_classes: int = len(AGE_GROUP_NAMES)) -> list[int]:
    return np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes).tolist()


@dataclass
class FaceSplit:
    """UTKFace's descriptors split for training and testing, with what was left out."""

    train: Dataset
    test: Dataset
    table: DescriptorTable
    source: UtkfaceSource

    def counts(self) -> dict[str, list[int]]:
        return {"train": class_counts(self.train.y.numpy()), "test": class_counts(self.test.y.numpy())}


def split_datasets(
    source: UtkfaceSource,
    table: DescriptorTable,
    *,
    test_fraction: float = TEST_FRACTION,
    seed: int = SPLIT_SEED,
    detected_only: bool = False,
) -> FaceSplit:
    """Two data sets of descriptors (N, D) with age-group labels, the split fixed by ``seed``.

    The split is :func:`split_unseen`, made over every face the names give (so it does not depend
    on the descriptor); faces without a descriptor (unreadable), or, with ``detected_only``, those
    the detector missed, are then dropped from either side and counted in ``source``.
    """
    if tuple(table.names) != tuple(source.names):
        raise ValueError("the descriptors were computed for other images than this source's")
    labels = source.groups
    sides = split_unseen(source, test_fraction, seed)
    train_idx, test_idx = sides.train, sides.test
    keep = table.usable()
    keep &= np.isin(table.status, [STATUS_DETECTED] if detected_only else [STATUS_DETECTED, STATUS_ASSUMED])
    x_all = torch.from_numpy(np.ascontiguousarray(table.descriptors, dtype=np.float32))
    y_all = torch.from_numpy(labels)
    common = {
        **source.record(),
        "descriptor": table.info.to_dict(),
        "split_seed": seed,
        "test_fraction": test_fraction,
        "detected_only": detected_only,
        "descriptor_outcomes": table.status_counts(),
    }

    def part(split: str, idx: np.ndarray) -> Dataset:
        used = idx[keep[idx]]
        info = dict(common, split=split, split_faces=len(idx), dropped=int(len(idx) - len(used)),
                    class_counts=class_counts(labels[used]), **(sides.record() if split == "test" else {}))
        return Dataset(x_all[used], y_all[used], f"{NAME}-{table.info.name}-{split}", AGE_GROUP_NAMES, info)

    return FaceSplit(part("train", train_idx), part("test", test_idx), table, source)


#: The age groups' folder names: two-digit ages, so that sorted by name (as a folder's classes
#: are) they keep the groups' order (``00-02``, ``03-07``, …, ``48-59``, ``60+``).
AGE_FOLDERS: tuple[str, ...] = tuple(
    "-".join(f"{int(a):02d}" for a in name.split("-")) if "-" in name else name for name in AGE_GROUP_NAMES
)


def default_age_folders() -> Path:
    """``<user cache>/data/utkface-age-groups``: where :func:`write_age_folders` lays the faces
    out when no place is given."""
    return Path(platformdirs.user_cache_dir("bayescope")) / "data" / f"{NAME}-age-groups"


def write_age_folders(
    source: UtkfaceSource, out: str | os.PathLike, *, test_fraction: float = TEST_FRACTION, seed: int = SPLIT_SEED
) -> Generator[ProgressRecord, None, dict[str, list[int]]]:
    """Lay the faces out as class folders, ``out/train/<group>/<file>`` and
    ``out/test/<group>/<file>`` (:data:`AGE_FOLDERS`: ``00-02`` … ``60+``), with the split of the
    descriptor heads (:func:`split_unseen`, same fraction and seed): a network trained
    from these pixels and a head trained on descriptors are tested on the same faces, and no
    photo lies in ``test/`` that is in ``train/`` (or twice in ``test/``); such a copy written
    there by an older version is removed.

    The image bytes are copied as they are (no decoding). A file already there with the same
    size is kept, so a stopped run goes on; each file is written to a temporary name and
    renamed. Yields progress every 200 faces; returns the faces per group of each split.
    """
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file: give a folder to write the age groups into (it is made if missing)")
    for split in ("train", "test"):
        if (out / split).exists() and not (out / split).is_dir():
            raise NotADirectoryError(f"{out / split} is a file, where the {split} faces' folders go: choose another "
                                     "folder, or move that file")
    labels = source.groups
    sides = split_unseen(source, test_fraction, seed)
    split_of = {int(i): "train" for i in sides.train} | {int(i): "test" for i in sides.test}
    left_out = {int(i) for i in np.concatenate([sides.seen, sides.repeated])}
    counts = {"train": [0] * len(AGE_GROUP_NAMES), "test": [0] * len(AGE_GROUP_NAMES)}
    for split in counts:
        for group in AGE_FOLDERS:
            (out / split / group).mkdir(parents=True, exist_ok=True)
    total = len(source.names)
    for done, (i, data) in enumerate(source.read(set(range(total))), start=1):
        group = int(labels[i])
        if i in left_out:
            # a copy an older bayescope wrote into test/ goes: its photo is in the folders already
            stale = out / "test" / AGE_FOLDERS[group] / Path(source.names[i]).name
            if stale.is_file() and stale.read_bytes() == data:
                stale.unlink()
        else:
            split = split_of[i]
            target = out / split / AGE_FOLDERS[group] / Path(source.names[i]).name
            counts[split][group] += 1
            _write_face(target, data)
        if done % 200 == 0 or done == total:
            yield ProgressRecord(done, total, {}, "writing faces")
    return counts


def _write_face(target: Path, data: bytes) -> None:
    """``data`` at ``target`` through a temporary name, unless a file of that size is there."""
    if not (target.is_file() and target.stat().st_size == len(data)):
        partial = target.with_name(target.name + ".partial")
        partial.write_bytes(data)
        partial.replace(target)


def _whole_cached(source: UtkfaceSource, descriptor: str, root: Path | None) -> bool:
    """Whether the descriptors of every face of ``source`` are cached, merged into one file."""
    from core.engine.faces.descriptor import get_descriptor
    from core.engine.faces.extract import MERGED, cache_folder
    from core.engine.faces.extract import cache_root as default_root

    return (cache_folder(root or default_root(), get_descriptor(descriptor).info, source.key) / MERGED).is_file()


def load_utkface(
    path: str | os.PathLike | None = None,
    descriptor: str = DEFAULT_DESCRIPTOR,
    *,
    cache_root: Path | None = None,
    workers: int | None = None,
    limit: int | None = None,
    test_fraction: float = TEST_FRACTION,
    seed: int = SPLIT_SEED,
    detected_only: bool = False,
) -> Generator[ProgressRecord, None, FaceSplit]:
    """Open UTKFace, compute (or read from the cache) its descriptors, and split it.

    ``limit`` keeps only the first ``limit`` faces (in name order) before anything is
    computed: a quick look at a few hundred faces while the full extraction runs elsewhere.
    When the whole archive's descriptors are cached, a limit's faces are read from them
    (the descriptor is deterministic, so they are the ones it would compute).
    Yields the extraction's progress; returns the :class:`FaceSplit`.
    """
    source = open_utkface(path)
    whole: DescriptorTable | None = None
    if limit is not None:
        if limit < 1:
            raise ValueError(f"a limit must be at least 1 face, got {limit}")
        if _whole_cached(source, descriptor, cache_root):  # (never touching a folder being filled)
            whole = yield from extract_descriptors(source, descriptor, root=cache_root, workers=workers,
                                                   assumed_box=ASSUMED_BOX, cache_only=True)
        # keep a spread of ages: every k-th face of the name order (names start with the age)
        step = max(1, len(source.names) // limit)
        keep = np.arange(0, len(source.names), step)[:limit]
        source = source.subset(keep, f"{source.key}-every{step}-first{limit}")
    if whole is not None:
        table = replace(whole, names=source.names, descriptors=whole.descriptors[keep], status=whole.status[keep],
                        boxes=whole.boxes[keep], source_key=source.key)
    else:
        table = yield from extract_descriptors(
            source, descriptor, root=cache_root, workers=workers, assumed_box=ASSUMED_BOX
        )
    split = split_datasets(source, table, test_fraction=test_fraction, seed=seed, detected_only=detected_only)
    if limit is not None:
        for data in (split.train, split.test):
            data.source["limit"] = limit
    return split
