"""How a person's images are split into training and test images, file by file.

A file's split depends on that file alone: its **key** (its class's name and its path below the
data set's folder, a ``train/`` or ``test/`` prefix left out) is hashed with the split's seed
(SHA-256) into a number u in [0, 1), and the file is a test image when u < the test fraction.
Adding, removing or editing one image therefore moves no other image between the splits, and
the same folder splits alike on every machine and in every version of bayescope that reads
the same rule (:data:`HASH_RULE`) with the same parameters, which the posterior records.

Posterior files written before this rule record the per-class seeded draw
(:func:`seeded_split`, :data:`SEEDED_RULE`); it is kept only to read their folders as they
were split, since adding one image to a class re-draws that whole draw.

**No photo is on both sides** (:func:`unseen_test`, :func:`leave_out_copies`): of the images a
rule draws to test, one whose bytes are a training image's (a copy under another name, in another
class folder, at another depth) or those of a test image before it is left out, so that a copy
neither inflates a test figure nor counts twice. The training side is the rule's, unchanged, so
weights trained on it stay valid. UTKFace's split (:func:`core.engine.data.utkface.split_unseen`)
and a person's own folders (:mod:`core.engine.data.folder`, :mod:`core.engine.data.features`)
take this one rule; :func:`copies_note` says in one line what it left out, and which photos sit
in two classes at once (a labelling conflict).

The set of keys a split holds is recorded compactly (:func:`pack`): 48 bits of each key's
SHA-256, sorted, in base64 (8 characters a file), enough to tell which images of a folder
were training images without storing their names (two of 60,000 keys share 48 bits with a
chance of about 6 in a million).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.engine.naming import plural

#: The rule of this version: a file's own hash decides its split.
HASH_RULE = "hash of each file's class and path"
#: The rule of posterior files written before it: a seeded draw over each class in label order.
SEEDED_RULE = "seeded per-class draw"
#: A layout that gives the split (``train/`` and ``test/`` folders).
FOLDERS_RULE = "train/ and test/ folders"
#: A folder of one class: every image is a test image (an out-of-distribution set).
WHOLE_RULE = "one class: every image is a test image"
#: CIFAR binaries: the files' own training and test batches.
FILES_RULE = "the files' own train and test batches"

#: Bytes of each key's SHA-256 kept in a packed set.
FINGERPRINT_BYTES = 6
#: Paths named in a note before "and N more".
SHOWN_PATHS = 5


def file_key(class_name: str, relative: str, split_folders: bool = False) -> str:
    """The key of one image: its class name and its path (``/``-separated) below the data set's
    folder, without the leading ``train/`` or ``test/`` of a layout that gives the split, so that
    a file moved from ``train/`` to ``test/`` keeps its key."""
    if split_folders:
        head, _, rest = relative.partition("/")
        if head in ("train", "test") and rest:
            relative = rest
    return f"{class_name}\0{relative}"


def key_path(key: str) -> str:
    """The path part of a key (what a sentence names)."""
    return key.partition("\0")[2]


def split_draw(key: str, seed: int) -> float:
    """u ∈ [0, 1): the first 64 bits of SHA-256(seed, key), uniform over files."""
    digest = hashlib.sha256(f"bayescope-split\0{int(seed)}\0{key}".encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def hashed_test_mask(keys: Sequence[str], test_fraction: float, seed: int) -> np.ndarray:
    """A boolean mask of the test images under :data:`HASH_RULE`."""
    return np.fromiter((split_draw(k, seed) < test_fraction for k in keys), dtype=bool, count=len(keys))


def seeded_split(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """:data:`SEEDED_RULE` (older files): ``round(fraction·n)`` of each class (at least one of a
    class with two or more images) drawn by one generator seeded with ``seed``, class by class in
    label order, so that one image more in any class re-draws every later class."""
    generator = torch.Generator().manual_seed(seed)
    test = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        if len(members) < 2:
            continue
        take = min(len(members) - 1, max(1, round(fraction * len(members))))
        order = torch.randperm(len(members), generator=generator).numpy()
        test[members[order[:take]]] = True
    return test


def fingerprint(key: str) -> bytes:
    """48 bits of the key's SHA-256."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()[:FINGERPRINT_BYTES]


def content_fingerprint(path: str | os.PathLike) -> bytes | None:
    """48 bits of the SHA-256 of a file's bytes (None when it cannot be read): the same image
    under another name or in another class has the same one."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).digest()[:FINGERPRINT_BYTES]
    except OSError:
        return None


def bytes_fingerprint(data: bytes) -> bytes:
    """:func:`content_fingerprint` of bytes already read (the decoder hashes what it decodes)."""
    return hashlib.sha256(data).digest()[:FINGERPRINT_BYTES]


def content_fingerprints(paths: Sequence[str | os.PathLike]) -> list[bytes | None]:
    """:func:`content_fingerprint` of every path, read by a few threads (hashing releases the GIL)."""
    if len(paths) < 64:
        return [content_fingerprint(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return list(pool.map(content_fingerprint, paths, chunksize=64))


# ----------------------------------------------------------------------------- copies


@dataclass(frozen=True)
class UnseenSplit:
    """The images on each side of a split (indices), and those a rule drew to test that are left
    out because their photo is there already."""

    train: np.ndarray
    test: np.ndarray
    #: Drawn to test, left out: byte-for-byte a training image (under another name or class).
    seen: np.ndarray
    #: Drawn to test, left out: byte-for-byte a test image earlier in the drawn order.
    repeated: np.ndarray

    def record(self) -> dict[str, int]:
        """What the test side left out, for a data set's provenance."""
        return {"left_out_as_training_photos": len(self.seen), "left_out_as_repeated_photos": len(self.repeated)}


def unseen_test(train: Sequence[int] | np.ndarray, drawn: Sequence[int] | np.ndarray,
                contents: Sequence[bytes | None]) -> UnseenSplit:
    """The test images among ``drawn`` whose photo is neither a training image's (``train``) nor
    that of a test image before it: one copy of a photo counts once, and never on both sides.

    ``contents`` are the images' content digests, any length (an empty one or None, an unreadable
    file, matches nothing). Of identical test photos the first in ``drawn``'s order is kept,
    whatever its class: which of two labels is right cannot be told from the photo.
    """
    trained = {contents[i] for i in train if contents[i]}
    kept: list[int] = []
    seen: list[int] = []
    repeated: list[int] = []
    first: set[bytes] = set()
    for i in drawn:
        digest = contents[i]
        if digest and digest in trained:
            seen.append(int(i))
        elif digest and digest in first:
            repeated.append(int(i))
        else:
            if digest:
                first.add(digest)
            kept.append(int(i))
    as_array = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    return UnseenSplit(np.asarray(train, dtype=np.int64), as_array(kept), as_array(seen), as_array(repeated))


@dataclass(frozen=True)
class Copies:
    """What :func:`leave_out_copies` found: the test images it left out (a mask over the listed
    files), the split behind it, and the photos that sit in two classes at once (pairs of
    indices, the first of each photo's files with every file of it in another class)."""

    left_out: np.ndarray
    sides: UnseenSplit
    conflicts: tuple[tuple[int, int], ...] = ()

    def record(self, name_of: Callable[[int], str]) -> dict[str, Any]:
        """The provenance record (``source["copies"]``): counts and the files by name."""
        return {**self.sides.record(),
                "training_photos": [name_of(int(i)) for i in self.sides.seen],
                "repeated_photos": [name_of(int(i)) for i in self.sides.repeated],
                "in_two_classes": [[name_of(a), name_of(b)] for a, b in self.conflicts]}


def leave_out_copies(is_test: np.ndarray, usable: np.ndarray, labels: np.ndarray,
                     contents: Sequence[bytes | None]) -> Copies:
    """:func:`unseen_test` over a listed folder: the training side is every usable image the rule
    put in training (unchanged), the drawn ones every usable test image in listing order.

    Also finds every photo whose copies carry different labels (among all usable images, either
    side), which no split can mend: the same photo cannot be of two classes.
    """
    is_test, usable = np.asarray(is_test, dtype=bool), np.asarray(usable, dtype=bool)
    sides = unseen_test(np.flatnonzero(usable & ~is_test), np.flatnonzero(usable & is_test), contents)
    left = np.zeros(len(is_test), dtype=bool)
    left[sides.seen] = True
    left[sides.repeated] = True
    first_of: dict[bytes, int] = {}
    conflicts: list[tuple[int, int]] = []
    reported: set[tuple[bytes, int]] = set()
    for i in np.flatnonzero(usable):
        digest = contents[i]
        if not digest:
            continue
        j = first_of.setdefault(digest, int(i))
        if labels[i] != labels[j] and (digest, int(labels[i])) not in reported:
            reported.add((digest, int(labels[i])))
            conflicts.append((j, int(i)))
    return Copies(left, sides, tuple(conflicts))


def named(paths: Sequence[str]) -> str:
    """The first :data:`SHOWN_PATHS` paths, then "and N more"."""
    shown = ", ".join(paths[:SHOWN_PATHS])
    return shown + (f" and {len(paths) - SHOWN_PATHS} more" if len(paths) > SHOWN_PATHS else "")


def _copies(count: int) -> str:
    return "copy" if count == 1 else "copies"


def copies_note(copies: Copies | None, name_of: Callable[[int], str]) -> str | None:
    """What the split left out of the test images and why, and any photo in two classes, in one
    line (None: nothing to say)."""
    if copies is None:
        return None
    parts = []
    seen, repeated = copies.sides.seen, copies.sides.repeated
    if len(seen) or len(repeated):
        kinds = [f"{len(seen)} byte-for-byte {_copies(len(seen))} of training images "
                 f"({named([name_of(int(i)) for i in seen])})" if len(seen) else "",
                 f"{len(repeated)} {_copies(len(repeated))} of other test images "
                 f"({named([name_of(int(i)) for i in repeated])})" if len(repeated) else ""]
        parts.append(f"left out of the test images, so that no photo is on both sides or counts twice: "
                     f"{' and '.join(k for k in kinds if k)}")
    if copies.conflicts:
        pairs = [f"{name_of(a)} and {name_of(b)}" for a, b in copies.conflicts]
        count = len(copies.conflicts)
        parts.append(f"{plural(count, 'photo')} {'is' if count == 1 else 'are'} in two classes at once "
                     f"(the same bytes: {'; '.join(pairs[:SHOWN_PATHS])}"
                     f"{f' and {count - SHOWN_PATHS} more' if count > SHOWN_PATHS else ''}); a photo has one class, "
                     "so keep each in one class folder")
    return "; ".join(parts) or None


def pack(keys: Iterable[str]) -> str:
    """A set of keys as base64 text (sorted fingerprints): what a posterior records."""
    return pack_fingerprints(fingerprint(k) for k in keys)


def pack_fingerprints(prints: Iterable[bytes | None]) -> str:
    """A set of fingerprints as base64 text, sorted (None left out)."""
    return base64.b64encode(b"".join(sorted({p for p in prints if p is not None}))).decode("ascii")


def unpack(text: Any) -> set[bytes] | None:
    """The fingerprints :func:`pack` wrote, or None for a record that is not such a set."""
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    if len(raw) % FINGERPRINT_BYTES:
        return None
    return {raw[i:i + FINGERPRINT_BYTES] for i in range(0, len(raw), FINGERPRINT_BYTES)}


_SEEDED_WORDS = re.compile(r"seeded per-class split, (?P<fraction>[0-9.eE+-]+) of each class to test \(seed (?P<seed>-?\d+)\)")


@dataclass(frozen=True)
class SplitRule:
    """Which images of a folder are test images: the rule and its parameters."""

    rule: str = HASH_RULE
    test_fraction: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.rule in (HASH_RULE, SEEDED_RULE):
            if self.test_fraction is None or not 0.0 < self.test_fraction < 1.0:
                raise ValueError(f"the test fraction must lie strictly between 0 and 1, got {self.test_fraction}")
            if self.seed is None:
                raise ValueError("a drawn split needs its seed")

    def test_mask(self, keys: Sequence[str], labels: np.ndarray) -> np.ndarray:
        """The test images among ``keys`` (their ``labels``) under a drawn rule."""
        if self.rule == HASH_RULE:
            return hashed_test_mask(keys, float(self.test_fraction), int(self.seed))
        if self.rule == SEEDED_RULE:
            return seeded_split(labels, float(self.test_fraction), int(self.seed))
        raise ValueError(f"the split {self.rule!r} is given by the files, not drawn")

    def words(self) -> str:
        """The rule in words (the ``split_rule`` record)."""
        if self.rule == HASH_RULE:
            return f"{self.test_fraction:g} of the images to test, each by a hash of its class and path (seed {self.seed})"
        if self.rule == SEEDED_RULE:
            return f"seeded per-class split, {self.test_fraction:g} of each class to test (seed {self.seed})"
        return self.rule

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "test_fraction": self.test_fraction, "seed": self.seed}

    @classmethod
    def of_record(cls, record: Mapping[str, Any] | None) -> SplitRule | None:
        """The rule a posterior's ``training_data`` (or a data set's ``source``) records, or None
        when it records none (a data set of IDX files, or no record)."""
        if not isinstance(record, Mapping):
            return None
        identity = record.get("identity")
        if isinstance(identity, Mapping) and isinstance(identity.get("split"), Mapping):
            split = identity["split"]
            try:
                return cls(str(split.get("rule")), split.get("test_fraction"), split.get("seed"))
            except (TypeError, ValueError):
                return None
        words = record.get("split_rule")
        if not isinstance(words, str):
            return None
        match = _SEEDED_WORDS.fullmatch(words)
        if match:  # a file written before the hash rule
            return cls(SEEDED_RULE, float(match["fraction"]), int(match["seed"]))
        if words in (FOLDERS_RULE, WHOLE_RULE, FILES_RULE):
            return cls(words)
        return None
