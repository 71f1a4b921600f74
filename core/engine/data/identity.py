"""A data set's identity, recorded with a posterior and compared with what a folder holds now.

Training records, in ``info["training_data"]`` (the read folder's ``source``), what identifies a
person's images and their split (:func:`core.engine.data.listing.listing_identity`): the
listing digest, the split rule and its parameters, the class names in output order, every
file's key and the contents of the training images. Everything that reads such a folder for a
posterior again (``evaluate``, ``join``, the Dataset tab, the training dialog) compares the
folder with that record through one function, :func:`compare_folder`:

- the same listing → the same split, nothing to say;
- a changed listing → the recorded rule with its recorded parameters (so a file keeps its
  split), a note naming how many files were added or removed and which test images now are
  images the posterior trained on (by content, so a copy under another name or class counts);
  those are left out of the test images;
- a refusal, in a sentence, where no honest answer exists: an older file (a per-class draw,
  no contents recorded) whose folder changed, or a folder whose every test image was trained on.

Classes are matched by name, never by position, whenever both sides have names
(:func:`output_class_names`, :func:`class_map`): a digit posterior's outputs are "0".."9" (a
file that records no names takes them from its data set), so a folder ``7/ 8/ 9/`` is read as
outputs 7, 8 and 9.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.engine.data.split import (
    FILES_RULE,
    FOLDERS_RULE,
    HASH_RULE,
    SEEDED_RULE,
    WHOLE_RULE,
    SplitRule,
    content_fingerprints,
    fingerprint,
    named,
    unpack,
)
from core.engine.naming import plural


class DataMismatchError(ValueError):
    """A data set that cannot be read for a posterior as it was trained: said in one sentence."""


# ----------------------------------------------------------------------------- class names


def output_class_names(info: Mapping[str, Any], dataset: str, num_classes: int) -> tuple[str, ...] | None:
    """A posterior's class names in output order: those it records, else its data set's (MNIST's
    "0".."9", notMNIST's "A".."J"), else None (an output is known only by its position)."""
    from core.engine.data.datasets import KNOWN

    own = info.get("class_names") if isinstance(info, Mapping) else None
    if isinstance(own, (list, tuple)) and len(own) == num_classes and all(isinstance(n, str) for n in own):
        return tuple(own)
    known = KNOWN.get(str(dataset).split("-")[0].split("@")[0])
    if known is not None and len(known.class_names) == num_classes:
        return tuple(known.class_names)
    return None


def class_names_of(posterior: Any) -> tuple[str, ...] | None:
    """:func:`output_class_names` of a loaded posterior."""
    return output_class_names(posterior.info, posterior.dataset, posterior.num_classes)


def class_map(data_names: Sequence[str], output_names: Sequence[str] | None, data: str,
              who: str) -> np.ndarray | None:
    """``map[label] = output`` taking each class of ``data`` to the output of the same name, None
    when the output names are not known (labels are then positions, as the file's maker meant).

    Raises :class:`DataMismatchError` naming the classes the outputs do not know.
    """
    if output_names is None or not data_names:
        return None
    index = {name: i for i, name in enumerate(output_names)}
    unknown = [name for name in data_names if name not in index]
    if unknown:
        shown = ", ".join(unknown[:6]) + (" ..." if len(unknown) > 6 else "")
        raise DataMismatchError(
            f"{data} has the class{'es' if len(unknown) > 1 else ''} {shown}, which {who} does not tell apart "
            f"(its classes are {', '.join(list(output_names)[:10])}{' ...' if len(output_names) > 10 else ''}); "
            "classes are matched by name: name the class folders (or manifest labels) as its classes")
    return np.asarray([index[name] for name in data_names], dtype=np.int64)


def relabelled(data: Any, mapping: np.ndarray | None, output_names: Sequence[str] | None) -> Any:
    """``data`` (a Dataset) with its labels taken to the outputs of the same names, and the
    outputs' names as its class names; unchanged when there is nothing to map."""
    from core.engine.inference.base import Dataset

    if mapping is None or output_names is None:
        return data
    if np.array_equal(mapping, np.arange(len(mapping))) and tuple(data.class_names) == tuple(output_names):
        return data
    y = torch.as_tensor(mapping, device=data.y.device)[data.y.long()] if len(data.y) else data.y
    source = dict(data.source)
    source["classes_matched"] = {name: int(mapping[i]) for i, name in enumerate(data.class_names)}
    return Dataset(data.x, y, data.name, tuple(output_names), source)


def start_classes(start: Any, start_file: str, train: Any, test: Any, where: str) -> tuple[Any, Any]:
    """The two splits (Datasets) with their labels taken to the outputs of ``start`` (a MAP) of the
    same class names, so that a fit from it never renames its outputs; :class:`DataMismatchError`
    in a sentence when the classes differ (by name when it names them, else by number). The
    command line's ``train --start-from`` calls it; a window that starts a fit from a MAP should too."""
    names = class_names_of(start)
    if names is None:
        if start.num_classes != len(train.class_names):
            raise DataMismatchError(f"{start_file} has {start.num_classes} classes, but {where} has {len(train.class_names)}")
        return train, test
    if set(names) != set(train.class_names) or len(names) != len(train.class_names):
        missing = [n for n in names if n not in train.class_names]
        extra = [n for n in train.class_names if n not in names]
        why = "; ".join(part for part in (
            f"it has no images of {', '.join(missing[:6])}" if missing else "",
            (f"its class{'es' if len(extra) > 1 else ''} {', '.join(extra[:6])} "
             f"{'are' if len(extra) > 1 else 'is'} not among the outputs") if extra else "") if part)
        raise DataMismatchError(
            f"{start_file} tells apart {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}, and "
            f"{where} holds other classes ({why}); a fit from it needs images of exactly its classes, "
            "matched by name")
    mapping = class_map(train.class_names, names, where, start_file)
    return relabelled(train, mapping, names), relabelled(test, mapping, names)


# ----------------------------------------------------------------------------- the comparison


@dataclass
class DataCheck:
    """A folder compared with what a posterior recorded of it (:func:`compare_folder`).

    ``split`` is the rule to read the folder with (None: the folder's own default);
    ``leave_out`` the keys of test images that were training images; ``note`` what changed, in
    a sentence (None: nothing to say); ``refusal`` why the folder cannot be read for the
    posterior (None: it can).
    """

    who: str
    split: SplitRule | None = None
    same_listing: bool | None = None
    added: int = 0
    removed: int = 0
    seen: tuple[str, ...] = ()
    leave_out: frozenset[str] = frozenset()
    note: str | None = None
    refusal: str | None = None
    test_images: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """Whether the folder's files changed since the record was made."""
        return self.same_listing is False

    def check(self) -> DataCheck:
        """Itself, or :class:`DataMismatchError` with the refusal."""
        if self.refusal:
            raise DataMismatchError(self.refusal)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"posterior": self.who, "split": None if self.split is None else self.split.to_dict(),
                "same_listing": self.same_listing, "added": self.added, "removed": self.removed,
                "seen_in_training": list(self.seen), "note": self.note}


def folder_record(record: Mapping[str, Any] | None) -> bool:
    """Whether a ``training_data`` record is of a person's images (a folder, manifest or CIFAR)."""
    return isinstance(record, Mapping) and "layout" in record


def compare_folder(path: str | os.PathLike, record: Mapping[str, Any] | None, who: str = "the posterior",
                   ) -> DataCheck:
    """Compare the images at ``path`` now with a posterior's ``training_data`` record (or the
    ``source`` of the folder as it was read before): the one comparison of bayescope.

    Lists the folder (no image decoded) and reads the bytes of the images that are test images
    under the recorded rule, to recognise images the posterior trained on. Returns a
    :class:`DataCheck`; a record that is not of a person's images (a data set of IDX files, or
    None) gives an empty check (the folder's default split, nothing to say).
    """
    from core.engine.data.listing import find_cifar, image_keys, list_images, listing_digest

    if not folder_record(record):
        return DataCheck(who)
    path = Path(path)
    rule = SplitRule.of_record(record)
    if path.is_dir() and find_cifar(path) is not None:
        return DataCheck(who, SplitRule(FILES_RULE))
    digest_then, digest_now = record.get("listing_sha256"), listing_digest(path)
    same = None if digest_then is None or digest_now is None else digest_then == digest_now
    identity = record.get("identity") if isinstance(record.get("identity"), Mapping) else {}
    trained = unpack(identity.get("train_images"))
    here = str(path.resolve()) == record.get("folder")
    if rule is None or rule.rule == SEEDED_RULE or trained is None:
        # an older file: its split can be drawn again only from the very same listing
        if same or rule is None:
            return DataCheck(who, rule, same)
        if not here:
            return DataCheck(who, None, None, note=(
                f"{who} records no contents of its training images, so whether {path.name} holds any of "
                "them cannot be checked"))
        return DataCheck(who, rule, False, refusal=(
            f"{path.name} changed since {who} was trained on it, and {who} was saved by an older bayescope "
            "that records neither its training images nor a split that survives a change, so its test images "
            f"cannot be told from its training images; evaluate it on {path.name} as it was, or train it again"))
    listing = list_images(path)
    keys = image_keys(listing)
    labels = np.asarray(listing.labels, dtype=np.int64)
    if listing.splits is not None:
        test = np.asarray([s == "test" for s in listing.splits], dtype=bool)
        now_rule = SplitRule(FOLDERS_RULE)
    elif len(listing.class_names) < 2:
        test, now_rule = np.ones(len(keys), dtype=bool), SplitRule(WHOLE_RULE)
    else:
        now_rule = rule if rule.rule == HASH_RULE else SplitRule(
            HASH_RULE, *_default_split())
        test = now_rule.test_mask(keys, labels)
    test_index = np.flatnonzero(test)
    prints = content_fingerprints([listing.paths[i] for i in test_index])
    seen_index = [int(i) for i, p in zip(test_index, prints, strict=True) if p is not None and p in trained]
    seen = tuple(listing.relative(listing.paths[i]) for i in seen_index)
    files_then = unpack(identity.get("files")) or set()
    files_now = {fingerprint(k) for k in keys}
    added, removed = len(files_now - files_then), len(files_then - files_now)
    related = here or bool(files_now & files_then)
    check = DataCheck(who, now_rule, same, added if related else 0, removed if related else 0, seen,
                      frozenset(keys[i] for i in seen_index), test_images=len(test_index))
    parts = []
    if same is False and related:
        changes = [f"{plural(added, 'file')} added" if added else "", f"{plural(removed, 'file')} removed" if removed else ""]
        changes = [c for c in changes if c] or ["files edited (the same names, other sizes)"]
        parts.append(f"{path.name} changed since {who} was trained on it ({', '.join(changes)}); "
                     f"its images keep their split ({now_rule.words()})")
    if seen:
        parts.append(f"{plural(len(seen), 'test image')} {'was' if len(seen) == 1 else 'were'} among {who}'s "
                     f"training images and {'is' if len(seen) == 1 else 'are'} left out: {named(seen)}")
    check.note = "; ".join(parts) or None
    if seen and len(seen) == len(test_index):
        check.refusal = (f"every test image of {path.name} ({len(seen)}) was among {who}'s training images, so "
                         "there is nothing to test it on; evaluate it on images it has not seen")
    return check


def _default_split() -> tuple[float, int]:
    from core.engine.data.folder import SPLIT_SEED, TEST_FRACTION

    return TEST_FRACTION, SPLIT_SEED


def compare_folder_for(path: str | os.PathLike, records: Mapping[str, Mapping[str, Any] | None]) -> DataCheck:
    """:func:`compare_folder` for several posteriors at once (name → ``training_data``): one
    split they all share (else a refusal), the union of their left-out images, their notes."""
    checks = [compare_folder(path, record, who) for who, record in records.items()]
    checks = [c for c in checks if c.split is not None or c.note or c.refusal]
    if not checks:
        return DataCheck(", ".join(records))
    for c in checks:
        c.check()
    rules = {c.split for c in checks if c.split is not None}
    if len(rules) > 1:
        named = "; ".join(f"{c.who}: {c.split.words()}" for c in checks if c.split is not None)
        raise DataMismatchError(f"these posteriors split {Path(path).name} into training and test images "
                                f"differently ({named}); evaluate them one at a time")
    first = checks[0]
    seen = tuple(sorted({p for c in checks for p in c.seen}))
    out = DataCheck(", ".join(c.who for c in checks), next(iter(rules), None),
                    None if any(c.same_listing is None for c in checks) else all(c.same_listing for c in checks),
                    first.added, first.removed, seen, frozenset().union(*(c.leave_out for c in checks)),
                    "; ".join(dict.fromkeys(c.note for c in checks if c.note)) or None,
                    test_images=first.test_images)
    if first.test_images is not None and seen and len(out.leave_out) >= first.test_images:
        out.refusal = (f"every test image of {Path(path).name} was among the training images of "
                       f"{out.who}, so there is nothing to test them on")
    return out


def read_test_split(path: str | os.PathLike, records: Mapping[str, Mapping[str, Any] | None],
                    image_size: int | None = None, channels: int | None = None, split: str = "test") -> Any:
    """The test images of a person's folder for the posteriors whose ``training_data`` records
    are ``records`` (name → record): split by their recorded rule and parameters, the images
    they trained on left out, what changed in ``source["data_check"]`` (its ``note`` a sentence
    to show). Raises :class:`DataMismatchError` where no honest answer exists."""
    from core.engine.data.folder import load_image_split

    check = compare_folder_for(path, records).check()
    kwargs: dict[str, Any] = {}
    if check.split is not None and check.split.rule in (HASH_RULE, SEEDED_RULE):
        kwargs = {"split_rule": check.split, "test_fraction": check.split.test_fraction, "seed": check.split.seed}
    data = load_image_split(path, split, image_size, channels, leave_out=check.leave_out, **kwargs)
    data.source["data_check"] = check.to_dict()
    # the split's own copies (test images that are copies of training or earlier test images) said beside it
    notes = [n for n in (check.note, data.source.get("copies_note")) if n]
    data.source["data_check"]["note"] = "; ".join(notes) or None
    return data


def trained_images_among(data_source: Mapping[str, Any], record: Mapping[str, Any] | None) -> int:
    """How many of the images a data set was read with (its ``source``) have the contents of a
    training image in ``record``: the last guard before a number is computed."""
    if not folder_record(record) or not isinstance(record.get("identity"), Mapping):
        return 0
    now = data_source.get("identity") if isinstance(data_source.get("identity"), Mapping) else {}
    tested, trained = unpack(now.get("test_images")), unpack(record["identity"].get("train_images"))
    if not tested or not trained:
        return 0
    return len(tested & trained)


# ----------------------------------------------------------------------------- for an evaluation


def match_classes(posteriors: Mapping[str, Any], data: Any) -> Any:
    """``data`` with its labels taken to the posteriors' outputs by class name (all of them must
    name their outputs alike), or as it is when the outputs have no names."""
    named = {who: class_names_of(p) for who, p in posteriors.items()}
    known = {names for names in named.values() if names is not None}
    if len(known) > 1:
        listing = "; ".join(f"{who}: {', '.join(names[:6])}" for who, names in named.items() if names)
        raise DataMismatchError(f"these posteriors name their outputs differently ({listing}); "
                                "evaluate them one at a time")
    if not known:
        return data
    output_names = next(iter(known))
    if tuple(data.class_names) == output_names:  # the outputs' own classes in their order: nothing to map
        return data
    who = next(who for who, names in named.items() if names is not None)
    return relabelled(data, class_map(data.class_names, output_names, data.name, who), output_names)


def check_not_trained_on(posteriors: Mapping[str, Any], data: Any) -> None:
    """Refuse to score images a posterior trained on as test images (an image folder read without
    its posteriors' records, :func:`read_test_split`), in one sentence."""
    for who, posterior in posteriors.items():
        count = trained_images_among(data.source, posterior.info.get("training_data"))
        if count:
            raise DataMismatchError(
                f"{plural(count, 'image')} of {data.name} {'was' if count == 1 else 'were'} among {who}'s "
                "training images, so its accuracy there would be too good; read the folder with the split "
                f"{who} records (bayescope-cli evaluate does), which leaves them out")
