"""The tiers ``bayescope-cli zoo`` rebuilds: each one's model, the ``train`` arguments of every method
on it (from the method registry), its reference, its R̂ target and the images its files are measured on."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.commands.console import bar_callback, progress_bar
from core.engine import tiers
from core.engine.inference import METHODS
from core.engine.inference.recipes import FACES, FEATURES_TIER, NETWORK, PAPER


@dataclass(frozen=True)
class TierSets:
    """The images a tier's files are measured on: its training set (the draws' log posterior), its
    test set, and its out-of-distribution set (None where it has none)."""

    train: Any
    test: Any
    ood: Any | None


@dataclass(frozen=True)
class TierData:
    """Where a tier's images are, and what its table's columns measure them on, in words."""

    #: The test set, as the table says it ("the 10,000 MNIST test digits").
    test_words: str
    #: What the OOD AUROC tells apart, or why the tier has no such set (its column then says n/a).
    ood_words: str
    #: ``train``'s ``--data-dir`` from ``zoo``'s (None: none given).
    locate: Callable[[str | None], str | None]
    #: The sets, for ``zoo``'s arguments (``--data-dir``, ``--limit``).
    load: Callable[[argparse.Namespace], TierSets]


def _digit_sets(args: argparse.Namespace) -> TierSets:
    """MNIST's training and test digits and notMNIST's letters, each the first ``--limit``."""
    from core.analysis.evaluation import resolve_dataset

    return TierSets(*(resolve_dataset(name, args.data_dir).first(args.limit)
                      for name in ("mnist-train", "mnist-test", "notmnist")))


def _face_folder(data_dir: str | None) -> str | None:
    """UTKFace's archive or folder, found from ``--data-dir`` (its own, or a folder holding utkface/);
    None without one (``train`` then looks in the user cache)."""
    from core.engine.faces.testset import utkface_location

    return None if data_dir is None else str(utkface_location(data_dir))


def _face_sets(args: argparse.Namespace) -> TierSets:
    """UTKFace's fixed training and test splits of face descriptors, as ``train --dataset utkface``
    reads them (with ``--limit``, the same faces); no OOD set (:data:`FACE_OOD`)."""
    from core.engine.data.utkface import load_utkface
    from core.engine.runner import drain

    bar = progress_bar(0, "face descriptors")
    try:
        split = drain(load_utkface(_face_folder(args.data_dir), limit=args.limit), bar_callback(bar))
    finally:
        bar.close()
    return TierSets(split.train, split.test, None)


DIGITS = TierData("the 10,000 MNIST test digits", "notMNIST's letters against the test digits",
                  locate=lambda data_dir: data_dir, load=_digit_sets)
#: Why the face tier's OOD AUROC is n/a: a head's every input is the descriptor of a face the
#: detector found, and UTKFace's faces are the only ones here; a descriptor of something that is not
#: a face (a letter, noise of the descriptors' size) is an input the window never gives a head, so an
#: AUROC against it would measure nothing a person meets.
FACE_OOD = ("n/a: a head reads only descriptors of faces the detector found, and UTKFace's are the only "
            "faces here, so the tier has no out-of-distribution set")
FACE_DATA = TierData("UTKFace's test faces (20 % of each age group, seed 0; docs/faces.md)", FACE_OOD,
                     locate=_face_folder, load=_face_sets)

def _own_sets(args: argparse.Namespace) -> TierSets:
    """A features tier's sets come with its network (:func:`core.commands.zoo._own_network`), never from here."""
    raise ValueError("the features tier's images are read with its network (--network, --dataset)")


#: A features tier's images: the hash split of a person's folder, its features read from the cache
#: (:func:`core.commands.zoo._own_network`); a folder of their own classes has no out-of-distribution set.
OWN_DATA = TierData("the test images of your folder (its hash split: docs/data.md)",
                    "n/a: a folder of your own images has no out-of-distribution set",
                    locate=lambda data_dir: data_dir, load=_own_sets)


@dataclass(frozen=True)
class Tier:
    """One model and the ``train`` arguments of every method on it."""

    name: str
    model: tuple[str, ...]  # the ``train`` arguments that fix the model and its data
    methods: dict[str, tuple[str, ...]]
    reference: str | None  # the method every other is measured against
    rhat_target: float  # the largest R̂ a sampled posterior of this tier may have
    words: str
    data: TierData = DIGITS
    model_label: str = ""  # the model's part of the file names (default: the --model given)
    #: Built on a person's own network and images (``--network``, ``--dataset``): none is bundled,
    #: each is built where it is used.
    own: bool = False

    @property
    def model_name(self) -> str:
        return self.model_label or self.model[self.model.index("--model") + 1]

    def file_name(self, method: str) -> str:
        """``method``'s file name (:func:`core.engine.tiers.file_name`; the bundled files')."""
        return tiers.file_name(self.name, self.model_name, method)

    def path(self, folder: Path, method: str) -> Path:
        """``method``'s file in ``folder`` (:func:`core.engine.tiers.tier_file`)."""
        return tiers.tier_file(folder, self.name, self.model_name, method)


def tier_methods(tier: str, like: str | None = None) -> dict[str, tuple[str, ...]]:
    """The ``train`` arguments of every method in ``tier``, from the method registry, the tier's
    reference first (every other method is measured against it); a method that names no settings
    for ``tier`` takes those it names for the tier ``like``."""
    reference = tiers.REFERENCES.get(tier)
    ordered = sorted(METHODS.values(), key=lambda m: m.name != reference)  # stable: registry order after
    return {m.name: ("--method", m.name, *(m.tiers[tier] if tier in m.tiers else m.tiers[like]))
            for m in ordered if tier in m.tiers or (like is not None and like in m.tiers)}


TIERS: dict[str, Tier] = {
    PAPER: Tier(PAPER, ("--model", "softmax"), tier_methods(PAPER), reference=tiers.REFERENCES[PAPER],
                rhat_target=1.01,
                words="softmax regression (the D-SGHMC paper's model), every method, HMC as the reference"),
    NETWORK: Tier(NETWORK, ("--model", "lenet5"), tier_methods(NETWORK), reference=None, rhat_target=1.1,
                  words="LeNet-5, a network that reads drawn digits well, every method but HMC"),
    FACES: Tier(FACES, ("--dataset", "utkface", "--model", "softmax"), tier_methods(FACES),
                reference=tiers.REFERENCES[FACES], rhat_target=1.01,
                words="softmax regression on the face descriptor (eight age groups), every method, "
                      "HMC as the reference", data=FACE_DATA),
    FEATURES_TIER: Tier(FEATURES_TIER, ("--features-of", "IMPORTED.pt", "--dataset", "FOLDER"),
                        tier_methods(FEATURES_TIER, like=PAPER), reference=tiers.REFERENCES[FEATURES_TIER],
                        rhat_target=1.01, model_label="features",
                        words="a softmax-regression head on your own network's features, every method, HMC as "
                              "the reference", data=OWN_DATA, own=True),
}
#: The column of a features tier that is the imported network itself (its own last layer).
NETWORK_COLUMN = "network"
