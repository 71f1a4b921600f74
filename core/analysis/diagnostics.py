"""Did a sampled posterior converge? Its chains compared on a fixed probe set (numbers only).

Weights themselves are a poor thing to compare across chains (a network has many equivalent
weight settings, so two chains that predict alike may sit far apart), so the chains are
compared where it matters: the predicted class probabilities. Every stored draw predicts the
same **probe set** — the first :data:`PROBE_SIZE` images of the data set's test split (for
UTKFace's test faces, which its names sort by age as text, :data:`PROBE_SIZE` faces spread over
the age groups: :func:`probe_images`); their predictions are never scored — giving an array (chains, draws, images, classes). Its rank-normalised
split-R̂ and bulk/tail ESS (:mod:`core.analysis.convergence`) are taken per image × class
(leaving out probabilities that move by less than :data:`MIN_SPREAD` across all draws); the
record keeps the worst of each and, per class, the largest R̂ over the images.

The record, as kept in a posterior file's ``info["diagnostics"]``::

    {"status": "measured", "chains": 2, "draws": 4, "probe": "the first 1000 images of ...",
     "rhat_max": 2.1, "ess_bulk_min": 2.9, "ess_tail_min": 3.4, "rhat_per_class": [...],
     "rhat_above_1_1": 0.93 (the share of image × class probabilities whose R̂ is above 1.1),
     "rhat_above_1_01": 0.99 (… above 1.01), "rhat_max_shuffled": 1.017,
     "rhat_above_1_01_shuffled": 0.008, "acceptance": 0.81 (HMC only), "measure": "..."}

``…_shuffled`` is the baseline of perfectly mixed chains with the same draws: the draws of all
chains pooled, shuffled, and dealt out again into chains of the same length
(:data:`SHUFFLES` times; the largest R̂ and the largest share above 1.01 of those). The largest
of thousands of R̂ values lies above 1.01 by chance alone when the draws are few: with 4 × 200
draws of nearly independent HMC on 10,000 probe probabilities, shuffled draws give 1.015–1.019.
Chains whose share above 1.01 is no larger than the shuffled draws' agree as well as these
draws can show (:func:`core.engine.naming.mixed_as_shuffled`).

or ``{"status": "n/a", "reason": "one chain: ...", "chains": 1, "draws": 1, ...}`` when R̂
cannot be measured (fewer than 2 chains or 4 draws per chain; a posterior without chains).

A file that keeps fewer draws than its run measured (``"kept_draws"``: ``train --keep-draws``)
also records the same figures on the draws it stores, as ``"stored"`` (:func:`stored_figures`):
the run's R̂ cannot be checked from the file, the stored draws' can (``bayescope-cli diagnose
FILE`` reproduces it), and each R̂ has its own floor, ``rhat_max_shuffled``, at its own number of
draws: 4 × 25 perfectly mixed draws of 10,000 probabilities read a largest R̂ near 1.2.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import torch

from core.analysis.streaming import STEP_BYTES
from core.engine import convergence, convergence_blocks
from core.engine.inference.base import Dataset, Posterior, ProgressRecord
from core.engine.naming import RHAT_LOOSE, method_label, why_not_measurable

#: Images in the probe set.
PROBE_SIZE = 1000

#: Probabilities that move less than this across all draws are left out: float32 resolves
#: about 6e-8 near 1, and a probability that flips between 0.99999988 and 1.0 has tied halves,
#: hence an infinite R̂ that says nothing about the chains.
MIN_SPREAD = 1e-6

#: What is measured, in words (kept in the record so a file says it).
MEASURE = ("rank-normalised split-R̂ (max of bulk and tail) and bulk/tail ESS of each class "
           "probability on each probe image (Vehtari et al. 2021)")

#: Shuffles of the pooled draws behind the baseline of perfectly mixed chains.
SHUFFLES = 8
#: The threshold whose shares are compared with the shuffled baseline.
RHAT_TIGHT = 1.01

#: The probe set's data set for a posterior trained on each known training set.
PROBE_DATA = {"mnist-train": "mnist-test"}
FACE_PREFIX = "utkface"


def probe_spec(posterior: Posterior) -> str | None:
    """The data set (a name :func:`core.analysis.evaluation.resolve_dataset` knows) whose test
    images probe ``posterior``, or None when its training set is not a known one."""
    if posterior.dataset in PROBE_DATA:
        return PROBE_DATA[posterior.dataset]
    if posterior.dataset.startswith(FACE_PREFIX):
        return "utkface-test"
    return None


def chain_shape(posterior: Posterior) -> tuple[int, int] | None:
    """(chains, draws per chain) of a posterior that stores chains, else None."""
    chains, draws = getattr(posterior, "num_chains", None), getattr(posterior, "num_draws", None)
    if chains is None or draws is None:
        return None
    return int(chains), int(draws)


def not_applicable(posterior: Posterior) -> dict[str, Any] | None:
    """The "n/a" record, with its reason, for a posterior whose R̂ cannot be measured."""
    shape = chain_shape(posterior)
    if shape is None:
        return {"status": "n/a", "chains": None, "draws": None,
                "reason": (f"{method_label(posterior.method)} draws each prediction independently: "
                           "there are no chains to compare")}
    reason = why_not_measurable(*shape)
    if reason is None:
        return None
    return {"status": "n/a", "chains": shape[0], "draws": shape[1], "reason": reason}


def diagnostics_unavailable(info: Any) -> str | None:
    """Why a posterior's Diagnostics window would show nothing (None when it has something to show).

    The window shows the chains' traces and R̂ per class that the file records; a method that
    draws each prediction independently (MC dropout, VI, Laplace, SWAG, MAP, an ensemble) records
    neither, and its two plots would only say "n/a".
    """
    info = info if isinstance(info, dict) else {}
    traces = info.get("traces") if isinstance(info.get("traces"), dict) else {}
    record = info.get("diagnostics") if isinstance(info.get("diagnostics"), dict) else {}
    if any(traces.values()) or record.get("status") == "measured":
        return None
    if record.get("status") == "n/a" and record.get("reason"):
        return f"No chains to compare: {record['reason']}"
    return "This file records no chains' traces and no R̂ to show (bayescope-cli diagnose FILE measures R̂)."


def _number(value: float) -> float | None:
    """NaN (nothing measured) as None; an infinite R̂ stays infinite."""
    return None if math.isnan(value) else float(value)


def probe_draws_progress(
    posterior: Posterior, images: torch.Tensor, seed: int = 0
) -> Generator[ProgressRecord, None, np.ndarray]:
    """Class probabilities of every stored draw on ``images``: (chains, draws, images, classes).

    A batch holds as many images as :data:`~core.analysis.streaming.STEP_BYTES` of the forward's
    own memory allows (its estimate per image), so memory stays bounded for any number of draws
    while each read of the draws' weights serves many images; a posterior that masks its inputs
    at prediction draws its masks from ``seed``.
    """
    chains, draws = chain_shape(posterior)  # type: ignore[misc]
    s = chains * draws
    per_image = max(1.0, posterior.prediction_bytes(s, 2) - posterior.prediction_bytes(s, 1))
    batch_size = int(max(1, min(len(images), STEP_BYTES // per_image)))
    posterior.check_prediction(s, batch_size=min(batch_size, len(images)))
    generator = torch.Generator().manual_seed(seed)
    total = math.ceil(len(images) / batch_size)
    parts = []
    for i, start in enumerate(range(0, len(images), batch_size), start=1):
        p = posterior.predict_proba(images[start : start + batch_size], num_samples=s, generator=generator)
        parts.append(p.detach().cpu().double().numpy().reshape(chains, draws, *p.shape[1:]))
        yield ProgressRecord(i, total, {}, "convergence")
    return np.concatenate(parts, axis=2)


def probe_set(probe: Dataset) -> Dataset:
    """The probe, labels kept: the first :data:`PROBE_SIZE` images of ``probe``; of UTKFace's test
    faces, whose first thousand hold no face aged 25–59 (the split is in name order, and names begin
    with the age as text), :data:`PROBE_SIZE` spread over the age groups in their shares
    (:func:`core.engine.faces.testset.spread_order`, seeded), in split order."""
    from core.engine.faces.testset import is_face_set, spread_order

    if is_face_set(probe.name) and len(probe) > PROBE_SIZE:
        return probe.subset(torch.from_numpy(np.sort(spread_order(probe.y.numpy())[:PROBE_SIZE])))
    return probe.first(PROBE_SIZE)


def probe_images(probe: Dataset) -> tuple[torch.Tensor, str]:
    """:func:`probe_set`'s inputs, and what they are in words (kept in the record)."""
    from core.engine.faces.testset import is_face_set

    chosen = probe_set(probe)
    if is_face_set(probe.name) and len(probe) > PROBE_SIZE:
        return chosen.x, (f"{len(chosen)} faces of {probe.name} spread over the age groups in their shares "
                          "(the labels choose them; no prediction is scored)")
    return chosen.x, f"the first {len(chosen)} images of {probe.name} (their labels are not read)"


def diagnose_progress(
    posterior: Posterior, probe: Dataset | None, seed: int = 0
) -> Generator[ProgressRecord, None, dict[str, Any]]:
    """The convergence record of ``posterior`` on :func:`probe_images` of ``probe``
    (which may be None when :func:`not_applicable` gives the record without any)."""
    acceptance = posterior.info.get("acceptance_rate")
    extra = {} if acceptance is None else {"acceptance": float(acceptance)}
    record = not_applicable(posterior)
    if record is not None:
        return {**record, **extra}
    if probe is None:
        raise ValueError("comparing the chains needs probe images")
    images, words = probe_images(probe)
    if len(images) == 0:
        raise ValueError(f"{probe.name} holds no images to compare the chains on")
    chains, draws = chain_shape(posterior)  # type: ignore[misc]
    probs = yield from probe_draws_progress(posterior, images, seed)
    # R̂, ESS and the shuffled baseline from one ranking of each probability's draws, element by
    # element (the figures summarise and shuffled_baseline give apart, to within 1e-12)
    orders = shuffle_orders(probs, seed) if chains >= 2 else []
    summary, shuffled = convergence_blocks.summarise_with_shuffles(probs, MIN_SPREAD, orders)
    rhat = summary.rhat  # (images, classes), NaN where a probability does not vary
    per_class = [_number(float(np.nanmax(col))) if (~np.isnan(col)).any() else None for col in rhat.T]
    measured = rhat[~np.isnan(rhat)]
    above = float((measured > RHAT_LOOSE).mean()) if measured.size else None
    tight = float((measured > RHAT_TIGHT).mean()) if measured.size else None
    shuffled_max, shuffled_tight = worst_of_shuffles(shuffled) if shuffled and shuffled[0].size else (None, None)
    return {
        "status": "measured",
        "chains": chains,
        "draws": draws,
        "probe": words,
        "rhat_max": _number(summary.rhat_max),
        "ess_bulk_min": _number(summary.ess_bulk_min),
        "ess_tail_min": _number(summary.ess_tail_min),
        "rhat_per_class": per_class,
        "rhat_above_1_1": above,
        "rhat_above_1_01": tight,
        "rhat_max_shuffled": shuffled_max,
        "rhat_above_1_01_shuffled": shuffled_tight,
        "measure": MEASURE,
        **extra,
    }


def shuffled_baseline(probs: np.ndarray, varies: np.ndarray, seed: int = 0) -> tuple[float | None, float | None]:
    """The largest R̂ and the largest share above :data:`RHAT_TIGHT` over :data:`SHUFFLES`
    shuffles of ``probs`` (chains, draws, images, classes) pooled over chains and draws, on the
    probabilities that vary (``varies``): what perfectly mixed chains of these draws give."""
    chains = probs.shape[0]
    values = probs[:, :, varies]  # (chains, draws, kept)
    if values.shape[-1] == 0 or chains < 2:
        return None, None
    return worst_of_shuffles(convergence.rhat_of_shuffles(values, shuffle_orders(probs, seed)))


def shuffle_orders(probs: np.ndarray, seed: int = 0) -> list[np.ndarray]:
    """The :data:`SHUFFLES` orders in which :func:`shuffled_baseline` deals out the pooled draws."""
    rng = np.random.default_rng(seed)
    return [rng.permutation(probs.shape[0] * probs.shape[1]) for _ in range(SHUFFLES)]


def worst_of_shuffles(rhats: list[np.ndarray]) -> tuple[float, float]:
    """The largest R̂ and the largest share above :data:`RHAT_TIGHT` over the shuffles' R̂s."""
    worst, share = 1.0, 0.0
    for r in rhats:
        r = r[~np.isnan(r)]
        if r.size:
            worst, share = max(worst, float(r.max())), max(share, float((r > RHAT_TIGHT).mean()))
    return worst, share


def diagnose(posterior: Posterior, probe: Dataset | None, seed: int = 0) -> dict[str, Any]:
    """:func:`diagnose_progress` run to its end."""
    run = diagnose_progress(posterior, probe, seed)
    while True:
        try:
            next(run)
        except StopIteration as stop:
            return stop.value


#: The figures of a record that :func:`stored_figures` keeps for the stored draws.
STORED_KEYS = ("chains", "draws", "rhat_max", "rhat_max_shuffled", "rhat_above_1_1", "rhat_above_1_01",
               "rhat_above_1_01_shuffled", "ess_bulk_min", "ess_tail_min")


def stored_figures(record: dict[str, Any], seed: int) -> dict[str, Any]:
    """The R̂ and ESS figures of ``record`` (measured on a file's stored draws, with input masks
    drawn from ``seed``), to keep beside the run's as ``record["stored"]``."""
    return {**{k: record.get(k) for k in STORED_KEYS}, "seed": seed}
