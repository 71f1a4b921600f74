"""Split conformal prediction sets on a posterior's mean predictive, beside its credible set.

A posterior answers "which classes could this be?" in two ways that mean different things:

- the **credible set** at level 1 − α: the smallest set of classes whose posterior-mean
  probability p̄ adds up to 1 − α (a statement about this one input, true if the posterior is);
- the **conformal set** at level 1 − α (split conformal, Vovk et al. 2005; Angelopoulos & Bates
  2021, "A gentle introduction to conformal prediction"): the classes whose nonconformity score
  s(x, y) is at most q̂, the ⌈(n + 1)(1 − α)⌉-th smallest of the scores of n calibration images.
  On exchangeable inputs it covers the true class with probability ≥ 1 − α, and, with scores
  that are almost surely distinct, ≤ 1 − α + 1/(n + 1); the guarantee is over inputs drawn like
  the calibration images, not for any one input.

Two scores, both on p̄ (K,) of each input:

- ``threshold`` (Sadinle, Lei & Wasserman 2019, "least ambiguous set-valued classifiers"):
  s(x, y) = 1 − p̄_y; the set is {y : p̄_y ≥ 1 − q̂}.
- ``aps`` (Romano, Sesia & Candès 2020, adaptive prediction sets, their randomised form):
  s(x, y, u) = Σ_{j ranked above y} p̄_j + u·p̄_y with u ~ U(0, 1) drawn per input (ranked by
  falling p̄, ties by class index); the set {y : s(x, y, u) ≤ q̂} is a run of top classes. The
  draws make the scores distinct, so both bounds hold. A set that changes with a draw is no
  answer for one input, so a column shows the threshold set and the tables report both.

When the posterior is right more often than 1 − α (a good MNIST model at 90 %), the upper bound
*forces* some sets to be empty: the threshold set is then empty for the most ambiguous inputs
(no class reaches p̄ ≥ 1 − q̂), which is what a column says for them.

The guarantee needs no assumption on the posterior, only that the calibration and test
inputs are exchangeable; the calibration images are kept apart from training and test images
by :mod:`core.engine.calibration_file` (which records them) and :func:`calibration_mask`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The nonconformity scores, in the order tables list them.
CONFORMAL_SCORES = ("threshold", "aps")
#: Words of each score (tables, tooltips).
SCORE_WORDS = {
    "threshold": "threshold score 1 − p̄(true class)",
    "aps": "adaptive sets (APS): mass of the classes ranked above the true class, plus a random share of its own",
}
#: The default level 1 − α.
DEFAULT_LEVEL = 0.9
#: Fraction of the posterior's test images that calibrate (the rest are evaluated).
CALIBRATION_FRACTION = 0.5
#: Seed of the calibration split's hash (fixed: the split is part of the method's definition).
CALIBRATION_SEED = 48
#: Words of the guarantee (tooltip, report, CLI).
GUARANTEE_WORDS = (
    "Over many inputs drawn like the calibration images, the set holds the true class at least "
    "{level:.0%} of the time (and at most {upper:.1%}, with {n:,} calibration images). It is not a "
    "probability for this one input: a strange input can be missed while the guarantee still holds."
)


def _ranked(proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classes of each row by falling p̄ (ties by class index), and the cumulated mass along them."""
    order = np.argsort(-proba, axis=-1, kind="stable")
    return order, np.cumsum(np.take_along_axis(proba, order, axis=-1), axis=-1)


def aps_draws(n: int, seed: int) -> np.ndarray:
    """APS's u ~ U(0, 1) for ``n`` inputs, from one seeded generator."""
    return np.random.default_rng([int(seed), 48]).random(n)


def conformal_scores(proba: Any, labels: Any, score: str, u: Any = None) -> np.ndarray:
    """Nonconformity score s(x_i, y_i) of each row of p̄ (n, K) at its label (n,); ``u``: APS's
    draws (one per input, or one number)."""
    p = np.asarray(proba, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if score == "threshold":
        return 1.0 - p[np.arange(len(y)), y]
    if score == "aps":
        u = _draws(u, len(p))
        order, cum = _ranked(p)
        rank = np.argmax(order == y[:, None], axis=-1)
        py = p[np.arange(len(y)), y]
        return cum[np.arange(len(y)), rank] - py + u * py
    raise ValueError(f"unknown conformal score {score!r} (known: {', '.join(CONFORMAL_SCORES)})")


def conformal_quantile(scores: Any, level: float) -> float:
    """q̂: the ⌈(n + 1)·level⌉-th smallest calibration score (+∞ when that exceeds n: too few
    calibration images for the level, so the set must hold every class)."""
    s = np.sort(np.asarray(scores, dtype=np.float64).reshape(-1))
    if not 0.0 < level < 1.0:
        raise ValueError(f"the level must lie strictly between 0 and 1, got {level}")
    rank = math.ceil((len(s) + 1) * level - 1e-9)  # a level such as 0.9 stored as 0.9000000000000000222
    return math.inf if rank > len(s) else float(s[rank - 1])


def _draws(u: Any, n: int) -> np.ndarray:
    if u is None:
        raise ValueError("APS scores need their draws u (one per input)")
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    if len(u) == 1:
        return np.full(n, float(u[0]))
    if len(u) != n:
        raise ValueError(f"{len(u)} values of APS's u for {n} inputs")
    return u


def prediction_sets(proba: Any, qhat: float, score: str, u: Any = None) -> np.ndarray:
    """Boolean sets (n, K): the classes whose score is at most ``qhat`` (``u``: APS's draws)."""
    p = np.atleast_2d(np.asarray(proba, dtype=np.float64))
    if score == "threshold":
        return 1.0 - p <= qhat
    if score == "aps":
        u = _draws(u, len(p))
        order, cum = _ranked(p)
        ranked = np.take_along_axis(p, order, axis=-1)
        members = cum - ranked + u[:, None] * ranked <= qhat  # each class's own score
        out = np.zeros_like(p, dtype=bool)
        np.put_along_axis(out, order, members, axis=-1)
        return out
    raise ValueError(f"unknown conformal score {score!r} (known: {', '.join(CONFORMAL_SCORES)})")


def credible_sets(proba: Any, level: float) -> np.ndarray:
    """The smallest sets of classes (n, K) whose p̄ makes up at least ``level`` (top classes first)."""
    p = np.atleast_2d(np.asarray(proba, dtype=np.float64))
    order = np.argsort(-p, axis=-1, kind="stable")  # as _ranked, by indexing: the window asks once a column per update
    rows = np.arange(len(p))[:, None]
    ranked = p[rows, order]
    # a class is in when the mass above it is still short of the level
    before = np.cumsum(ranked, axis=-1) - ranked
    out = np.zeros_like(p, dtype=bool)
    out[rows, order] = before < level - 1e-12
    return out


def coverage_bounds(level: float, n: int) -> tuple[float, float]:
    """The split-conformal guarantee: coverage ≥ level, ≤ level + 1/(n + 1) (distinct scores)."""
    return level, min(1.0, level + 1.0 / (n + 1))


@dataclass(frozen=True)
class Calibration:
    """One posterior's calibration: its sorted scores per score name on ``n`` images."""

    scores: dict[str, np.ndarray]
    n: int
    identity: dict[str, Any]
    #: q̂ by (level, score), found once: the window asks for it on every update of a column
    _quantiles: dict[tuple[float, str], float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, proba: Any, labels: Any, identity: dict[str, Any] | None = None, u: Any = None) -> Calibration:
        """The calibration from p̄ (n, K) of the calibration images and their labels (``u``: APS's
        draws, seeded from 0 when not given)."""
        p = np.asarray(proba, dtype=np.float64)
        u = aps_draws(len(p), 0) if u is None else u
        return cls({s: np.sort(conformal_scores(p, labels, s, u)) for s in CONFORMAL_SCORES}, len(p),
                   dict(identity or {}))

    def quantile(self, level: float, score: str) -> float:
        key = (level, score)
        if key not in self._quantiles:
            self._quantiles[key] = conformal_quantile(self.scores[score], level)
        return self._quantiles[key]

    def sets(self, proba: Any, level: float, score: str, u: Any = None) -> np.ndarray:
        return prediction_sets(proba, self.quantile(level, score), score, u)


@dataclass(frozen=True)
class CoverageRow:
    """Empirical coverage and mean set size of one score on the evaluated images."""

    score: str
    level: float
    qhat: float
    calibration_images: int
    evaluated_images: int
    coverage: float
    mean_set_size: float
    lower_bound: float
    upper_bound: float

    @property
    def sampling_error(self) -> float:
        """Standard error of the measured coverage: the calibration's draw (given it, coverage is
        Beta-distributed with variance ≈ α(1 − α)/(n + 2)) and the evaluated images' (binomial)."""
        a = self.level * (1 - self.level)
        return math.sqrt(a / (self.calibration_images + 2) + a / max(self.evaluated_images, 1))

    @property
    def within(self) -> bool:
        """Coverage inside the guarantee up to 3 standard errors (:attr:`sampling_error`): the
        guarantee bounds the coverage expected over calibration and test draws."""
        se = 3 * self.sampling_error
        return self.lower_bound - se <= self.coverage <= self.upper_bound + se


def coverage_table(calibration: Calibration, proba: Any, labels: Any, level: float,
                   u: Any = None) -> list[CoverageRow]:
    """Coverage and mean set size of each score on p̄ (n, K) of evaluated images (never the
    calibration images: the caller leaves those out, :func:`calibration_mask`)."""
    p = np.asarray(proba, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    rows = []
    lower, upper = coverage_bounds(level, calibration.n)
    u = aps_draws(len(p), 1) if u is None else u
    for score in CONFORMAL_SCORES:
        qhat = calibration.quantile(level, score)
        sets = prediction_sets(p, qhat, score, u)
        covered = sets[np.arange(len(y)), y] if len(y) else np.zeros(0, dtype=bool)
        rows.append(CoverageRow(score, level, qhat, calibration.n, len(y),
                                float(covered.mean()) if len(y) else math.nan,
                                float(sets.sum(-1).mean()) if len(y) else math.nan, lower, upper))
    return rows


def image_fingerprints(images: Any) -> list[bytes]:
    """48 bits of the SHA-256 of each image's pixels as float32 (N, ...): an image's identity,
    the same wherever it was read from (the file's name and position play no part)."""
    x = np.ascontiguousarray(np.asarray(images, dtype=np.float32))
    return [hashlib.sha256(row.tobytes()).digest()[:6] for row in x.reshape(len(x), -1)]


def calibration_mask(prints: Sequence[bytes], fraction: float = CALIBRATION_FRACTION,
                     seed: int = CALIBRATION_SEED) -> np.ndarray:
    """Which of a posterior's test images calibrate: a hash of each image's pixels (its
    fingerprint) with ``seed`` falls below ``fraction``. The split depends on each image alone,
    so any subset of the test set (``--limit``) splits as the whole set did."""
    def draw(fp: bytes) -> float:
        digest = hashlib.sha256(b"bayescope-conformal\0" + str(int(seed)).encode() + b"\0" + fp).digest()
        return int.from_bytes(digest[:8], "big") / 2.0**64

    return np.fromiter((draw(fp) < fraction for fp in prints), dtype=bool, count=len(prints))


def _listing(names: Sequence[str]) -> str:
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " or " + names[-1]


@dataclass(frozen=True)
class SetsInWords:
    """The two sets of one input in words: ``conformal``, ``credible``, and ``disagreement``
    (empty when the two sets are the same); ``tooltip`` says what the guarantee means."""

    conformal: str
    credible: str
    disagreement: str
    tooltip: str


def sets_in_words(mean: Any, class_names: Sequence[str], calibration: Calibration, level: float) -> SetsInWords:
    """The conformal (threshold score: one set per input, no draw) and the credible set of one
    input (p̄ (K,)) at ``level``, in words."""
    score = "threshold"
    p = np.asarray(mean, dtype=np.float64).reshape(1, -1)
    order = np.argsort(-p[0], kind="stable")
    conformal = calibration.sets(p, level, score)[0]
    credible = credible_sets(p, level)[0]
    names = [str(n) for n in class_names]

    def members(mask: np.ndarray) -> list[str]:
        return [names[j] for j in order if mask[j]]

    pct = f"{level * 100:.0f} %"
    c, b = members(conformal), members(credible)
    if not c:
        conformal_text = f"Conformal: names no class at {pct} — too unclear to name at this level"
    elif len(c) == len(names):
        conformal_text = f"Conformal: could be any class, {pct} guaranteed"
    elif len(c) == 1:
        conformal_text = f"Conformal: {c[0]}, {pct} guaranteed"
    else:
        conformal_text = f"Conformal: could be {_listing(c)}, {pct} guaranteed"
    credible_text = (f"Credible: {b[0]} holds {pct} of the belief" if len(b) == 1
                     else f"Credible: {_listing(b)} hold {pct} of the belief")
    extra = [n for n in c if n not in b]
    fewer = [n for n in b if n not in c]
    parts = []
    if extra:
        parts.append(f"the guarantee also needs {_listing(extra)}")
    if fewer:
        parts.append(f"the belief also needs {_listing(fewer)}")
    disagreement = ("They differ: " + "; ".join(parts)) if parts else ""
    lower, upper = coverage_bounds(level, calibration.n)
    draws = calibration.identity.get("num_samples")
    tooltip = (f"Conformal set ({SCORE_WORDS[score]}), calibrated on {calibration.n:,} held-out images"
               + (f" with {draws} draws" if draws else "") + ". "
               + GUARANTEE_WORDS.format(level=lower, upper=upper, n=calibration.n)
               + f"\nCredible set: the fewest classes whose mean probability over the draws adds up to {pct}; "
               "it is what the posterior believes about this input, with no guarantee over inputs.")
    return SetsInWords(conformal_text, credible_text, disagreement, tooltip)


__all__ = [
    "CALIBRATION_FRACTION", "CALIBRATION_SEED", "CONFORMAL_SCORES", "Calibration", "CoverageRow",
    "DEFAULT_LEVEL", "SetsInWords", "aps_draws", "calibration_mask", "conformal_quantile", "conformal_scores",
    "coverage_bounds", "coverage_table", "credible_sets", "image_fingerprints", "prediction_sets",
    "sets_in_words",
]
