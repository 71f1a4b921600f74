"""The column's first sentence, from crafted S×K probability arrays with a known answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.analysis.uncertainty import mutual_information
from core.analysis.verdict import verdict

DIGITS = tuple(str(k) for k in range(10))


def draws(rows: list[dict[int, float]], k: int = 10) -> np.ndarray:
    """Each draw: the given classes' probabilities, the rest shared evenly."""
    out = np.zeros((len(rows), k))
    for s, row in enumerate(rows):
        rest = (1.0 - sum(row.values())) / (k - len(row))
        out[s] = rest
        for c, v in row.items():
            out[s, c] = v
    return out


def test_confident_draws_that_agree_are_sure():
    v = verdict(draws([{4: 0.97}] * 20), DIGITS)
    assert (v.kind, v.text) == ("sure", "Sure it is a 4")


def test_a_clear_favourite_without_rival_is_probable():
    v = verdict(draws([{8: 0.7, 3: 0.1}] * 10), DIGITS)
    assert (v.kind, v.text) == ("probably", "Probably an 8")


def test_two_classes_sharing_the_mass_are_torn_whether_draws_agree_or_not():
    agree = verdict(draws([{4: 0.5, 9: 0.45}] * 10), DIGITS)  # each draw hesitates (aleatoric)
    disagree = verdict(draws([{4: 0.98}] * 5 + [{9: 0.98}] * 5), DIGITS)  # draws split (epistemic)
    assert agree.text == "Torn between 4 and 9"
    assert disagree.kind == "torn" and set(disagree.text.split()[-3::2]) == {"4", "9"}


def test_draws_confident_in_different_classes_are_unlike_the_training_data():
    # five draws, each sure of another class: the mean is flat, the draws disagree (MI = ln 5 − small)
    probs = draws([{c: 0.96} for c in (0, 2, 5, 7, 8)])
    assert mutual_information(torch.from_numpy(probs)).item() > 1.0
    v = verdict(probs, DIGITS)
    assert (v.kind, v.text) == ("unlike", "Unsure, and unlike anything it was trained on")


def test_a_flat_belief_that_every_draw_shares_is_unsure_not_unlike():
    probs = draws([{1: 0.3, 7: 0.3, 2: 0.2}] * 10)  # the same hesitant draw ten times: MI = 0
    v = verdict(probs, DIGITS)
    assert v.kind == "unsure" and "3 classes" in v.text


def test_one_draw_never_claims_disagreement():
    v = verdict(draws([{1: 0.3, 7: 0.25, 2: 0.2}]), DIGITS)
    assert v.kind == "unsure"


def test_letters_and_shapes_checked():
    assert verdict(draws([{0: 0.95}] * 3), tuple("ABCDEFGHIJ")).text == "Sure it is an A"
    with pytest.raises(ValueError):
        verdict(np.ones(10) / 10, DIGITS)


def test_a_favourite_the_draws_disagree_on_leans_but_is_unlike_the_training_data():
    # most draws sure of 7, a few sure of 3 or 5 (a letter read as a 7): p̄(7) ≈ 0.75, MI ≈ 0.5 nats
    probs = draws([{7: 0.98}] * 15 + [{3: 0.98}] * 3 + [{5: 0.98}] * 2)
    assert mutual_information(torch.from_numpy(probs)).item() > 0.3
    v = verdict(probs, DIGITS)
    assert (v.kind, v.text) == ("unlike", "Leans to a 7, but unlike anything it was trained on")


def test_two_classes_in_play_with_the_rest_in_crumbs_are_torn():
    # p̄ 0.48 and 0.22, every other class below 0.1 (MC dropout on a 9 that looks like a 4)
    v = verdict(draws([{9: 0.48, 4: 0.22}] * 10), DIGITS)
    assert v.text == "Torn between 9 and 4"


def test_no_rival_and_no_conviction_leans():
    v = verdict(draws([{9: 0.5, 4: 0.15}] * 10), DIGITS)
    assert (v.kind, v.text) == ("unsure", "Unsure, leaning to a 9")
