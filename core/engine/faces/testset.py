"""The faces test split as a data set to evaluate face heads on, with the photos behind it.

UTKFace's test split (:func:`core.engine.data.utkface.split_unseen`, seed 0, 20 % of every age
group, no photo that is a training photo too) is what the bundled face heads report their
accuracy on. :func:`load_face_test_set` returns it as a :class:`~core.engine.inference.base.Dataset` of descriptors (N, D) with age-group
labels, plus the name of each face's photo, so the Dataset tab can show the photos behind
a confusion cell (:meth:`FaceTestSet.photos`) and send one to the Face mode.

Descriptors come from :func:`core.engine.faces.extract.extract_descriptors` (cached in the user
cache, resumable, in worker processes, with progress):

- when the whole archive's descriptors are cached (``bayescope-cli train --dataset utkface``
  or ``reproduce dhmc-faces`` computed them), they are read and the test faces picked out;
- otherwise only the test faces (a fifth of the archive) are described, under a cache key
  of their own (the archive's key plus the split), so evaluating does not wait for the
  training faces. Both give the same numbers: the descriptor is deterministic.

Either way the rows are the faces of :func:`core.engine.data.utkface.split_datasets`' test set, in
the same order, so an evaluation here is an evaluation of the heads' own test set.

A limit of N faces takes the first N of :func:`spread_order` (seeded; every age group in about
its share) and describes only those: the test faces are described in that order, so the
descriptors of a smaller limit are reused by a larger one and by the whole split.
"""

from __future__ import annotations

import io
import os
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from core.engine.data.locate import find_dataset
from core.engine.data.utkface import (
    ASSUMED_BOX,
    NAME,
    SPLIT_SEED,
    TEST_FRACTION,
    UtkfaceSource,
    class_counts,
    open_utkface,
    split_unseen,
)
from core.engine.faces._worker import STATUS_ASSUMED, STATUS_DETECTED
from core.engine.faces.age_groups import AGE_GROUP_NAMES
from core.engine.faces.descriptor import DEFAULT_DESCRIPTOR, get_descriptor
from core.engine.faces.extract import MERGED, cache_folder, cache_root, extract_descriptors
from core.engine.inference.base import Dataset, ProgressRecord

#: The data-set name of the faces test split (``bayescope-cli evaluate --dataset utkface-test``).
FACE_TEST_SET = "utkface-test"
#: Progress records of the descriptor extraction carry this phase.
DESCRIBING = "descriptors"
#: The seed of :func:`spread_order`.
SPREAD_SEED = 0


def spread_order(groups: np.ndarray, seed: int = SPREAD_SEED) -> np.ndarray:
    """An order of faces whose every prefix holds each age group in about its share.

    Each group's faces are shuffled (seeded); the j-th of a group of n is placed at
    (j + u)/n with u uniform in [0, 1), and all faces are sorted by their place. The split is in
    name order, and names start with the age as text ("1_", "10_", "100_", "11_", …): its first
    faces would be of a few ages only.
    """
    rng = np.random.default_rng(seed)
    place = np.empty(len(groups))
    for group in np.unique(groups):
        members = rng.permutation(np.flatnonzero(groups == group))
        place[members] = (np.arange(len(members)) + rng.random(len(members))) / len(members)
    return np.argsort(place, kind="stable")


def is_face_set(spec: str | None) -> bool:
    """Whether a data-set name (or a data set's own name) is the faces test split."""
    return bool(spec) and (spec == FACE_TEST_SET or str(spec).startswith(f"{NAME}-"))


def utkface_location(data_dir: str | os.PathLike | None) -> Path:
    """Where UTKFace is, found by :func:`core.engine.data.locate.find_dataset`: ``<data_dir>/utkface``,
    else ``data_dir`` itself (its archive, a folder holding the archive, or a folder of the
    images), else the user cache (:func:`core.engine.data.utkface.default_folder`).

    Raises :class:`~core.engine.data.locate.DatasetMissingError` naming every place looked in.
    """
    return find_dataset(NAME, data_dir)


@dataclass
class FaceTestSet:
    """The faces test split: descriptors and age groups, and where each face's photo is.

    ``names[i]`` is the photo of ``data.x[i]`` in ``source`` (a member of the archive, or a
    file of the folder); ``ranks[i]`` its place in the split's :func:`spread_order`.
    """

    data: Dataset
    names: tuple[str, ...]
    source: UtkfaceSource
    ranks: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    def spread(self, limit: int | None) -> FaceTestSet:
        """The faces among the first ``limit`` of the split's :func:`spread_order` (all when None):
        the faces ``load_face_test_set(limit=limit)`` gives, in split order."""
        if limit is None or limit > self.ranks.max(initial=-1):
            return self
        if limit < 1:
            raise ValueError(f"a limit must be at least 1 face, got {limit}")
        rows = np.flatnonzero(self.ranks < limit)
        data = self.data.subset(torch.from_numpy(rows))
        data.source["used"] = len(rows)
        data.source["class_counts"] = class_counts(data.y.numpy())
        return FaceTestSet(data, tuple(self.names[i] for i in rows), self.source, self.ranks[rows])

    def photo_path(self, row: int) -> Path | None:
        """The file of a face's photo when the faces are a folder (None inside an archive)."""
        if self.source.kind != "folder":
            return None
        path = self.source.path / self.names[row]
        return path if path.is_file() else None

    def photos(self, rows: Sequence[int], side: int | None = None) -> list[np.ndarray]:
        """The photos of ``rows`` as RGB uint8 arrays (H, W, 3), in the order given.

        ``side`` scales each down to at most that many pixels (a thumbnail). One pass over
        the archive reads them all (about 2 s for UTKFace's); a folder's files are read directly.
        """
        from core.engine.faces.photo import decode_photo

        index = {name: i for i, name in enumerate(self.source.names)}
        wanted = {index[self.names[r]] for r in rows}
        blobs = dict(self.source.read(wanted))
        out = []
        for r in rows:
            blob = blobs.get(index[self.names[r]])
            if blob is None:
                raise ValueError(f"{self.names[r]} could not be read from {self.source.describe()}")
            image = decode_photo(blob) if side is None else _thumbnail(blob, side)
            out.append(image)
        return out


def _thumbnail(blob: bytes, side: int) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(blob)) as im:
        im.draft("RGB", (side, side))  # JPEG decodes at a reduced size directly
        im = im.convert("RGB")
        im.thumbnail((side, side))
        return np.asarray(im, dtype=np.uint8).copy()


def descriptors_cached(path: str | os.PathLike | None = None, descriptor: str = DEFAULT_DESCRIPTOR,
                       *, root: Path | None = None, source: UtkfaceSource | None = None) -> bool:
    """Whether the test faces' descriptors are in the cache (the archive's or the split's own)."""
    source = source or open_utkface(path)
    info = get_descriptor(descriptor).info
    root = root or cache_root()
    return any((cache_folder(root, info, s.key) / MERGED).is_file()
               for s in (source, _test_source(source)[0], _test_source(source, _split_order(source))[0]))


def _test_source(source: UtkfaceSource, order: np.ndarray | None = None) -> tuple[UtkfaceSource, np.ndarray]:
    """The test faces alone as a source (its own cache key), and their indices in ``source``;
    with ``order`` (positions in the split), those faces in that order."""
    test = split_unseen(source, TEST_FRACTION, SPLIT_SEED).test
    # "unseen": the split without the photos that are training photos too; the key of the name
    # split alone (4,741 faces of the archive, before) named another set of faces
    key = f"{source.key}-test{TEST_FRACTION:g}-seed{SPLIT_SEED}-unseen"
    if order is not None:
        test, key = test[order], f"{key}-spread{SPREAD_SEED}"
    return source.subset(test, key), test


def _split_order(source: UtkfaceSource) -> np.ndarray:
    """:func:`spread_order` of the test split's faces (positions in the split)."""
    test = split_unseen(source, TEST_FRACTION, SPLIT_SEED).test
    return spread_order(source.groups[test])


def load_face_test_set(
    path: str | os.PathLike | None = None,
    descriptor: str = DEFAULT_DESCRIPTOR,
    *,
    root: Path | None = None,
    workers: int | None = None,
    cache_only: bool = False,
    limit: int | None = None,
) -> Generator[ProgressRecord, None, FaceTestSet | None]:
    """Open UTKFace at ``path`` (see :func:`core.engine.data.utkface.open_utkface`), read or compute
    the test faces' descriptors, and return the test split, or with ``limit`` its first ``limit``
    faces of :func:`spread_order` (only those are described), in split order.

    Yields the extraction's progress (``phase`` :data:`DESCRIBING`, ``step``/``total`` in
    faces; one record when the descriptors come from the cache). Stop iterating to cancel:
    finished chunks stay cached and the next call resumes. With ``cache_only``, returns None
    instead of computing anything when the descriptors are not cached. ``root`` is the
    descriptor cache (default :func:`core.engine.faces.extract.cache_root`).
    """
    if limit is not None and limit < 1:
        raise ValueError(f"a limit must be at least 1 face, got {limit}")
    source = open_utkface(path)
    info = get_descriptor(descriptor).info
    root = root or cache_root()
    in_split, test = _test_source(source)
    order = _split_order(source)
    ranks = np.empty(len(order), np.int64)
    ranks[order] = np.arange(len(order))
    count = len(order) if limit is None else min(limit, len(order))
    positions = np.sort(order[:count])  # the faces asked for, as positions in the split
    spread, _ = _test_source(source, order)
    count_asked: int | None = None
    if (cache_folder(root, info, source.key) / MERGED).is_file():
        used, rows = source, test[positions]  # the whole archive is described: pick the faces out
    elif (cache_folder(root, info, in_split.key) / MERGED).is_file():
        used, rows = in_split, positions  # the whole split described in name order (before limits)
    else:  # the faces asked for are the first of the spread order: describe only those
        used, rows, count_asked = spread, ranks[positions], count
    # chunk size and assumed box as load_utkface's, so that both share the archive's cache
    table = yield from extract_descriptors(used, descriptor, root=root, workers=workers, assumed_box=ASSUMED_BOX,
                                           count=count_asked, cache_only=cache_only)
    if table is None:
        return None
    keep = table.usable()[rows] & np.isin(table.status[rows], [STATUS_DETECTED, STATUS_ASSUMED])
    chosen = rows[keep]
    labels = source.groups[test[positions]][keep]
    x = torch.from_numpy(np.ascontiguousarray(table.descriptors[chosen], dtype=np.float32))
    record = {
        **source.record(),
        "descriptor": info.to_dict(),
        "split": "test",
        "split_seed": SPLIT_SEED,
        "test_fraction": TEST_FRACTION,
        "detected_only": False,
        "descriptor_outcomes": table.status_counts(),
        "split_faces": len(test),
        **split_unseen(source, TEST_FRACTION, SPLIT_SEED).record(),
        "faces_asked": int(count),
        "dropped": int(count - keep.sum()),
        "class_counts": class_counts(labels),
    }
    # the same name as split_datasets gives the test set (the heads record it as their test data)
    data = Dataset(x, torch.from_numpy(labels.astype(np.int64)), f"{NAME}-{info.name}-test", AGE_GROUP_NAMES, record)
    names = tuple(source.names[i] for i in test[positions][keep])
    return FaceTestSet(data, names, source, ranks[positions][keep])
