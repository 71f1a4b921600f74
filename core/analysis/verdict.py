"""One sentence of verdict on an input, in plain words, before any symbol: "Sure it is a 4",
"Torn between 4 and 9", "Unsure, and unlike anything it was trained on".

It reads what the per-input summary (:mod:`core.analysis.uncertainty`) already holds: the mean
probability p̄ over the draws and the epistemic part of the uncertainty (the mutual information
between the prediction and the model, in nats). The rules, in order (first that holds):

1. **Sure** — p̄ of the top class ≥ :data:`SURE` (0.9).
2. **Probably** — p̄ of the top class ≥ :data:`PROBABLY` (0.6) and no rival reaches :data:`RIVAL` (0.2);
   when the draws disagree as in 4, "Leans to a 7, but unlike anything it was trained on" (a
   notMNIST letter read as a 7 by most draws is not "probably a 7").
3. **Torn between a and b** — the second reaches :data:`RIVAL` and the top two hold ≥ :data:`TWO_HOLD`
   (0.75), or no third class reaches :data:`IN_PLAY` (0.1).
4. **Unlike anything it was trained on** — the draws disagree: epistemic ≥ :data:`UNLIKE` (0.3 nats,
   about half of what two classes split evenly between confident draws give, ln 2 = 0.69).
   A method with one draw (MAP) has no disagreement to show and never says it.
5. **Unsure** — otherwise: the belief is spread over the classes reaching :data:`IN_PLAY` (three or
   more), or, with no rival, it leans to the top class without conviction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: p̄ of the top class from which the verdict is "Sure".
SURE = 0.9
#: p̄ of the top class from which it is "Probably", when no rival reaches RIVAL.
PROBABLY = 0.6
#: p̄ from which a second class counts as a rival.
RIVAL = 0.2
#: Share the top two hold together to be "torn between" them.
TWO_HOLD = 0.75
#: Epistemic uncertainty (nats) from which the draws are said to disagree.
UNLIKE = 0.3
#: Classes with p̄ from this value count as "in play" for "spread over n classes".
IN_PLAY = 0.1


@dataclass(frozen=True)
class Verdict:
    """``text``: the sentence; ``kind``: ``sure``, ``probably``, ``torn``, ``unlike`` or ``unsure``."""

    text: str
    kind: str


def _named(name: str) -> str:
    """``4`` → ``a 4``, ``8`` → ``an 8``, ``A`` → ``an A``; a longer name is quoted as it is."""
    if len(name) == 1:
        return ("an " if name.upper() in "AEFHILMNORSX8" else "a ") + name
    return f"“{name}”"


def verdict_words(mean: Any, epistemic: float, class_names: Sequence[str]) -> Verdict:
    """The verdict from the mean probabilities p̄ (K,) and the epistemic part (nats)."""
    p = np.asarray(mean, dtype=np.float64).reshape(-1)
    if p.size != len(class_names):
        raise ValueError(f"{len(class_names)} class names for {p.size} probabilities")
    order = np.argsort(-p, kind="stable")
    a, b = int(order[0]), int(order[1]) if p.size > 1 else int(order[0])
    first, second = float(p[a]), float(p[b]) if p.size > 1 else 0.0
    name_a, name_b = str(class_names[a]), str(class_names[b])
    if first >= SURE:
        return Verdict(f"Sure it is {_named(name_a)}", "sure")
    if first >= PROBABLY and second < RIVAL:
        if epistemic >= UNLIKE:
            return Verdict(f"Leans to {_named(name_a)}, but unlike anything it was trained on", "unlike")
        return Verdict(f"Probably {_named(name_a)}", "probably")
    in_play = int((p >= IN_PLAY).sum())
    if second >= RIVAL and (first + second >= TWO_HOLD or in_play <= 2):
        return Verdict(f"Torn between {name_a} and {name_b}", "torn")
    if epistemic >= UNLIKE:
        return Verdict("Unsure, and unlike anything it was trained on", "unlike")
    if in_play >= 3:
        return Verdict(f"Unsure: its belief is spread over {in_play} classes", "unsure")
    return Verdict(f"Unsure, leaning to {_named(name_a)}", "unsure")


def verdict(probs: Any, class_names: Sequence[str]) -> Verdict:
    """The verdict from S draws of class probabilities ``probs`` (S, K)."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"probs must be (draws, classes), got shape {p.shape}")
    mean = p.mean(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        def h(x: np.ndarray) -> np.ndarray:
            return -np.where(x > 0, x * np.log(x), 0.0).sum(-1)
    epistemic = max(float(h(mean) - h(p).mean()), 0.0)  # mutual information, clamped at 0
    return verdict_words(mean, epistemic, class_names)


def summary_verdict(summary: Any, class_names: Sequence[str]) -> Verdict:
    """The verdict of a :class:`core.analysis.uncertainty.Summary`; for D-SGHMC only the
    weights' disagreement counts as epistemic (its input masks' noise is not knowledge)."""
    masks = getattr(summary, "masks", None)
    epistemic = masks.weights if masks is not None else summary.epistemic
    mean = summary.mean.numpy() if hasattr(summary.mean, "numpy") else summary.mean
    return verdict_words(mean, float(epistemic), class_names)


__all__ = ["PROBABLY", "RIVAL", "SURE", "TWO_HOLD", "UNLIKE", "Verdict", "summary_verdict", "verdict",
           "verdict_words"]
