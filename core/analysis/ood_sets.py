"""Out-of-distribution detection on several unseen sets at once: which column's score tells
each set apart best, and whether that changes from one set to another.

An audit found that the ranking of the posteriors by mutual information on notMNIST is not
their ranking on Fashion-MNIST; one OOD set cannot show that. :func:`ood_set_rows` computes the
AUROC and AUPR of every score of every posterior on every set (the ``ood_sets`` table of
:func:`core.analysis.evaluation_results.evaluation_tables`), ranks the posteriors per set and score,
and :func:`ranking_changes` names the scores whose best column differs between the sets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.analysis.metrics import ood_detection
from core.analysis.scoring import SCORES

#: What an AUROC is, in plain words (the window's tooltip, the report, the command's legend).
AUROC_WORDS = ("AUROC: the chance that an image of the unfamiliar set gets a higher score than an image of the "
               "test set. 1.0 tells them apart perfectly, 0.5 is a coin toss, below 0.5 the score is higher on "
               "the test images.")

Scores = Mapping[str, np.ndarray]


def ood_set_rows(in_scores: Mapping[str, Scores], ood_scores: Mapping[str, Mapping[str, Scores]],
                 scores: Sequence[str] = SCORES) -> list[dict[str, Any]]:
    """One row per (set, posterior, score): ``auroc``, ``aupr_in``, ``aupr_out``, ``rank`` and ``best``.

    Parameters
    ----------
    in_scores
        posterior → score → its values on the test set.
    ood_scores
        OOD set → posterior → score → its values on that set.
    scores
        The scores to rank, in order.

    ``rank`` is 1 for the highest AUROC of that score on that set (ties share a rank, the next
    rank skipping as in a race); ``best`` marks rank 1. A score that is the same on every image
    (the mutual information of a one-draw posterior) has no AUROC and no rank.
    """
    rows: list[dict[str, Any]] = []
    for set_name, by_posterior in ood_scores.items():
        found = {name: {r.score: r for r in ood_detection(in_scores[name], by_posterior[name])}
                 for name in by_posterior}
        for score in scores:
            values = {name: res[score].auroc for name, res in found.items() if score in res}
            measured = [v for v in values.values() if v is not None]
            for name, res in found.items():
                if score not in res:
                    continue
                a = res[score].auroc
                rank = None if a is None else 1 + sum(v > a for v in measured)
                rows.append({"set": set_name, "posterior": name, "score": score, "auroc": a,
                             "aupr_in": res[score].aupr_in, "aupr_out": res[score].aupr_out,
                             "rank": rank, "best": rank == 1})
    return rows


def best_columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, tuple[str, ...]]]:
    """score → set → the posteriors ranked first on it (several on a tie; none when no AUROC)."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for row in rows:
        by_set = out.setdefault(row["score"], {})
        names = by_set.setdefault(row["set"], ())
        if row["best"]:
            by_set[row["set"]] = (*names, row["posterior"])
    return out


def ranking_changes(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, tuple[str, ...]]]:
    """The scores whose best column is not the same on every set: score → set → best posteriors."""
    return {score: by_set for score, by_set in best_columns(rows).items()
            if len(by_set) > 1 and len({frozenset(names) for names in by_set.values()}) > 1}


def best_among(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(set, score) → which of ``names`` has the highest AUROC there: the columns a person sees, when
    the evaluation also holds one that is not shown (a tier's reference)."""
    top: dict[tuple[str, str], float] = {}
    for row in rows:
        if row["posterior"] in names and row["auroc"] is not None:
            key = (row["set"], row["score"])
            top[key] = max(top.get(key, -1.0), row["auroc"])
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for row in rows:
        key = (row["set"], row["score"])
        if row["posterior"] in names and row["auroc"] is not None and row["auroc"] == top[key]:
            out[key] = (*out.get(key, ()), row["posterior"])
    return out


__all__ = ["AUROC_WORDS", "best_among", "best_columns", "ood_set_rows", "ranking_changes"]
