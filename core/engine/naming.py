"""Names a person reads: methods and architectures in words, posteriors as column titles."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from core.engine.method_words import METHOD_WORDS

if TYPE_CHECKING:  # the window imports this module before the engine (torch) loads
    from core.engine.inference.base import Posterior


#: Short name of each method as shown in headers and tables (``Method.label``), and one line on
#: each for a person who never read the paper (``Method.description``): from the table the
#: registry's entries take theirs from, which needs no torch (the window titles its columns
#: before the engine loads).
METHOD_LABELS: Mapping[str, str] = {name: words[0] for name, words in METHOD_WORDS.items()}
METHOD_DESCRIPTIONS: Mapping[str, str] = {name: words[1] for name, words in METHOD_WORDS.items()}

ARCH_LABELS: dict[str, str] = {"softmax": "softmax regression", "mlp": "MLP", "lenet": "LeNet", "lenet5": "LeNet-5",
                               "resnet": "ResNet-8", "resnet18": "ResNet-18",
                               "features": "head on your network's features"}


#: A class whose probability has a standard deviation across draws below this is faded in
#: the correlation view (window and export alike): its correlations are exact but concern
#: changes too small to matter (classes at 1e-9 that move together would otherwise light up
#: as strongly as a real trade).
FADE_SD = 0.01


def method_label(method: str) -> str:
    """``"sghmc"`` → ``"SGHMC"``; unknown names are shown as they are."""
    return METHOD_LABELS.get(method, method)


def fixed_sample_count(posterior: Posterior) -> int | None:
    """How many draws a posterior holds when it cannot draw more (stored samples, or one
    deterministic predictive), else None."""
    return posterior.fixed_num_samples


def samples_used(posterior: Posterior, requested: int) -> int:
    """The number of samples a prediction with ``requested`` samples actually uses."""
    fixed = fixed_sample_count(posterior)
    return requested if fixed is None else min(fixed, requested)


#: The data sets in words (known names; a folder is shown by its name).
DATASET_WORDS: dict[str, str] = {
    "mnist-test": "MNIST test digits",
    "mnist-train": "MNIST training digits",
    "notmnist": "notMNIST letters",
    "notmnist-test": "notMNIST letters",
    "mnist-inverted": "MNIST test digits, inverted (dark on white)",
    "utkface-test": "UTKFace test faces",
    "utkface-dlib-resnet-v1-test": "UTKFace test faces",
}


def dataset_words(name: str) -> str:
    """``"mnist-test"`` → ``"MNIST test digits"``; a folder's data set keeps its name."""
    return DATASET_WORDS.get(name, name)


def probe_words(probe: str) -> str:
    """A convergence record's probe set in words: ``"the first 1000 images of mnist-test (…)"``
    → ``"the first 1,000 MNIST test digits (…)"``; a folder's name stays as written."""
    match = re.match(r"the first (\d+) images of (\S+)", probe)
    if match is None or match.group(2) not in DATASET_WORDS:
        return probe
    return f"the first {int(match.group(1)):,} {DATASET_WORDS[match.group(2)]}{probe[match.end():]}"


def plural(count: int, word: str) -> str:
    """``plural(1, "draw")`` → ``"1 draw"``; ``plural(8, "draw")`` → ``"8 draws"``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


#: Words for a Laplace posterior's settings in its column title.
LAPLACE_WORDS = {"last_layer": "last layer", "all": "all layers", "kron": "K-FAC", "diag": "diagonal",
                 "full": "full"}


def posterior_name(posterior: Posterior) -> str:
    """The name a person gave the posterior when training it (``info["name"]``), or ""."""
    name = (getattr(posterior, "info", None) or {}).get("name")
    return " ".join(name.split()) if isinstance(name, str) else ""


def posterior_title(posterior: Posterior, num_samples: int) -> str:
    """A column header: ``"SGHMC, LeNet, 8 draws"``; a Laplace column says its curvature
    and subset, and ``probit`` instead of draws when it predicts by the probit formula. A
    posterior given a name when trained is titled by it first (``"long run: SGHMC, …"``), so
    that two runs of one method can be told apart."""
    arch = ARCH_LABELS.get(posterior.arch.name, posterior.arch.name)
    label = method_label(posterior.method)
    name = posterior_name(posterior)
    if name:
        label = f"{name}: {label}"
    if posterior.method == "laplace":
        c = posterior.config
        words = [LAPLACE_WORDS.get(c.get("structure"), str(c.get("structure"))),
                 LAPLACE_WORDS.get(c.get("subset"), str(c.get("subset")))]
        if c.get("predictive") == "probit":
            return f"{label} ({', '.join(words)}, probit), {arch}"
        label += f" ({', '.join(words)})"
    return f"{label}, {arch}, {plural(num_samples, 'draw')}"


# ------------------------------------------------------------------- convergence in words

#: R̂ targets: the paper's (Vehtari et al. 2021) and the looser one networks are held to;
#: above :data:`RHAT_LOOSE` the chains disagree and a column says so.
RHAT_STRICT = 1.01
RHAT_LOOSE = 1.1

#: With fewer draws per chain, each split half holds fewer than 5 and the ESS estimator looks
#: at no autocorrelation at all: it returns its floor, N·log₁₀N for N draws, whatever the chains.
MIN_DRAWS_ESS = 10


def ess_estimable(draws: int) -> bool:
    """Whether ESS says anything at ``draws`` draws per chain (see :data:`MIN_DRAWS_ESS`)."""
    return draws >= MIN_DRAWS_ESS


def why_not_measurable(chains: int, draws: int) -> str | None:
    """Why R̂ cannot be measured on ``chains`` chains of ``draws`` draws, in words (None: it can)."""
    from core.engine.convergence import MIN_CHAINS, MIN_DRAWS  # torch: imported when first needed

    if chains < MIN_CHAINS:
        return ("one chain: R̂ compares chains with one another, so it needs at least "
                f"{MIN_CHAINS} chains")
    if draws < MIN_DRAWS:
        return (f"{plural(draws, 'draw')} per chain: split-R̂ cuts each chain in half and needs "
                f"at least {MIN_DRAWS} draws per chain")
    return None


def ess_text(value: float) -> str:
    """An effective sample size as a person reads it: ``472`` (not 472.0), ``5.8`` below 10."""
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def rhat_text(value: float) -> str:
    """R̂ as shown: three decimals near the targets, two above the looser one, ∞ for chains
    whose halves each hold one value and disagree. Never rounded onto the other side of a
    target: 1.1018 is "1.102", not "1.10", beside a warning that it is above 1.1."""
    if value == float("inf"):
        return "∞"
    for digits in range(2 if value >= RHAT_LOOSE else 3, 7):
        text = f"{value:.{digits}f}"
        if all((value > t) == (float(text) > t) for t in (RHAT_STRICT, RHAT_LOOSE)):
            return text
    return repr(float(value))  # closer to a target than a millionth: every digit


def _number(value: object) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    return float(value) if ok else None


#: Above this largest R̂ chains are not called converged, whatever the shuffled baseline says.
SHUFFLED_RHAT_CAP = 1.05


def mixed_as_shuffled(record: dict) -> bool:
    """Whether chains agree as well as their own draws, shuffled into perfectly mixed chains, do
    (``record``: :mod:`core.analysis.diagnostics`): the share of probe probabilities with R̂ above
    1.01 is no larger than the shuffled draws' largest share, and the largest R̂ is at most
    :data:`SHUFFLED_RHAT_CAP`. With few draws the largest of thousands of R̂ values exceeds 1.01
    by chance alone; chains that did not converge exceed it far more often than shuffled ones."""
    share, baseline, rhat = (record.get(k) for k in ("rhat_above_1_01", "rhat_above_1_01_shuffled", "rhat_max"))
    return (record.get("status") == "measured" and None not in (share, baseline, rhat)
            and rhat <= SHUFFLED_RHAT_CAP and share <= baseline)


#: The verdict on chains as far apart as their own draws shuffled, above the cap (:func:`within_shuffled`).
TOO_FEW_DRAWS = "too few draws to tell whether the chains agree"

#: Chains whose largest R̂ exceeds the shuffled draws' by up to this share of its distance from 1
#: lie within the spread of the shuffles themselves (8 shuffles of the same draws differ so much).
SHUFFLED_RHAT_SLACK = 1.25


def within_shuffled(record: dict) -> bool:
    """Whether chains are as far apart as their own draws shuffled into perfectly mixed chains
    are, by both measures (the share of probe probabilities with R̂ above 1.01, and the largest
    R̂ within :data:`SHUFFLED_RHAT_SLACK`), whatever that largest R̂ is. Above
    :data:`SHUFFLED_RHAT_CAP` this says that the draws are too few to tell whether the chains
    agree, not that they do: 120 draws of chains that mix perfectly give a largest R̂ near 1.15.
    Below :data:`MIN_DRAWS_ESS` draws per chain the shuffles themselves reach any R̂ the chains
    can, so nothing is told apart and the chains are not given this benefit of the doubt."""
    values = [_number(record.get(k)) for k in
              ("rhat_above_1_01", "rhat_above_1_01_shuffled", "rhat_max", "rhat_max_shuffled")]
    draws = _number(record.get("draws"))
    if record.get("status") != "measured" or None in values or draws is None or not ess_estimable(int(draws)):
        return False
    share, baseline, rhat, shuffled = values
    return share <= baseline and rhat - 1 <= SHUFFLED_RHAT_SLACK * (shuffled - 1)


#: Draws whose mean exact log posterior lies this many of the reference draws' standard
#: deviations from the reference's mean are less (or more) probable than almost every
#: reference draw (three: 99.7 % of a normal spread).
LEVEL_SPREADS = 3


def _log_number(value: float) -> str:
    return f"{value:,.0f}".replace("-", "−")


def level_line(method: str, info: dict) -> str | None:
    """How probable a posterior's weight draws are under the exact posterior, against the
    reference's own draws (``info["log_posterior_level"]``, written by ``bayescope-cli zoo``), or
    None. Below the reference's level a distribution is too wide somewhere or off-centre; above
    it, too narrow (:mod:`core.analysis.fidelity`)."""
    level = info.get("log_posterior_level")
    ref = level.get("reference") if isinstance(level, dict) else None
    if not isinstance(ref, dict) or ref.get("method") == method:
        return None
    mean, sd, ref_mean, ref_sd = (_number(d.get(k)) for d, k in ((level, "mean"), (level, "sd"),
                                                                  (ref, "mean"), (ref, "sd")))
    if None in (mean, sd, ref_mean, ref_sd):
        return None
    name = method_label(str(ref.get("method")))
    numbers = (f"log posterior {_log_number(mean)} on average, against {_log_number(ref_mean)} ± "
               f"{_log_number(ref_sd)} for {name}'s draws, which are exact")
    if mean < ref_mean - LEVEL_SPREADS * ref_sd:
        return (f"Under the exact posterior its draws are far less probable than {name}'s ({numbers}): they stray "
                "where the posterior's own draws seldom go, spread too wide or off-centre.")
    if mean > ref_mean + LEVEL_SPREADS * ref_sd:
        return (f"Under the exact posterior its draws are far more probable than {name}'s ({numbers}): they crowd "
                "nearer the posterior's peak than exact draws do: spread too narrow.")
    return f"Under the exact posterior its draws are as probable as {name}'s ({numbers})."


def interval_mass_words(info: dict, reference: str = "exact inference") -> str | None:
    """How much of ``reference``'s belief the posterior's interval holds, in words, from the
    file's ``info["interval_mass"]`` (``bayescope-cli fidelity --record``, ``zoo``): "its 90 %
    interval holds about 9 % of what exact inference believes"; None when not measured."""
    record = info.get("interval_mass") if isinstance(info, dict) else None
    if not isinstance(record, dict) or record.get("status") != "measured":
        return None
    mean, stated = _number(record.get("mean")), _number(record.get("stated_level"))
    if mean is None or stated is None:
        return None
    return f"its {100 * stated:.0f} % interval holds about {100 * mean:.0f} % of what {reference} believes"


def interval_mass_line(info: dict) -> str | None:
    """:func:`interval_mass_words` as a sentence with what it was measured on (tooltips, ``info``)."""
    words = interval_mass_words(info)
    if words is None:
        return None
    record = info["interval_mass"]
    ref = record.get("reference") if isinstance(record.get("reference"), dict) else {}
    name, p10 = method_label(str(ref.get("method", "the reference"))), _number(record.get("p10"))
    where = f" on {probe_words(str(record['probe']))}" if record.get("probe") else ""
    floor = f"{100 * float(record.get('min_mass', 0.01)):.0f} %"
    tail = f"; for a tenth of them, {100 * p10:.0f} % or less." if p10 is not None else "."
    return (f"Measured against {name}'s {ref.get('draws', '?')} draws{where}, {words} (its interval drawn from "
            f"{record.get('draws', '?')} draws): that share of {name}'s draws of each class probability above "
            f"{floor} falls inside it on average{tail}")


def sgld_widening(config: dict | None) -> float | None:
    """How much wider than the posterior, per direction, SGLD moving by the curvature samples at
    its constant step η, even with exact gradients: with no accept/reject step, each direction of
    the posterior's own units follows θ' = (1 − η/2)θ + √η z, whose spread is 1/√(1 − η/4) of
    the posterior's (tests/core/test_samplers.py); None for another schedule or temperature."""
    config = config if isinstance(config, dict) else {}
    eta = _number(config.get("step_size"))
    if (config.get("metric") != "curvature" or config.get("schedule", "constant") != "constant"
            or _number(config.get("temperature", 1.0)) != 1.0 or eta is None or not 0 < eta < 4):
        return None
    return 1 / math.sqrt(1 - eta / 4) - 1


def widening_line(method: str, config: dict | None) -> str | None:
    """What SGLD's step does to its draws, in words (:func:`sgld_widening`), or None."""
    widening = sgld_widening(config) if method == "sgld" else None
    if widening is None:
        return None
    return ("Unlike HMC it keeps every step without an accept-or-reject test, so it samples a slightly wider "
            f"distribution than the posterior: at its step size, about {100 * widening:.1f}% wider in every direction.")


def fit_lines(method: str, info: dict, config: dict | None = None) -> list[str]:
    """What a posterior's file records about where its fit ended or how it sampled, when that
    bounds what it shows, one sentence a line: a variational fit's limits, a sampler's
    preconditioner and what its step does to its draws (``config``: the method's settings), how
    probable its weight draws are under a tier's exact posterior (nothing for the other
    methods)."""
    info = info if isinstance(info, dict) else {}
    lines = [line] if (line := level_line(method, info)) else []
    share = _number(info.get("alpha_at_limit"))
    if method == "vdropout" and share:
        lines.append(f"Its learned noise sits at the method's upper limit (α = 1, dropping half) for {share:.0%} of "
                     "the weights: for those the limit, not the data, sets the spread.")
    pre = info.get("preconditioner")
    if isinstance(pre, dict) and pre.get("kind") in ("curvature", "kron"):
        where = ("the posterior around its peak" if pre["kind"] == "curvature" else
                 "the posterior around one of its peaks, layer by layer")
        lines.append(f"Its steps follow the shape of {where}, measured once before the first "
                     "step: small along the directions the data pin down, large along those they leave free. This "
                     "changes how fast it moves, not what it samples.")
        if line := widening_line(method, config):
            lines.append(line)
    elif isinstance(pre, dict):
        lines.append("Its step size was fitted to each weight during the burn-in and then held fixed, so its draws "
                     "target the same posterior." if pre.get("fixed_before_draws") else
                     "Its step size kept adapting to each weight while draws were kept, so its draws are only "
                     "approximate.")
    weights = info.get("weights")
    if method == "sgmmvi" and isinstance(weights, list) and len(weights) > 1 and all(_number(w) is not None for w in weights):
        words = " / ".join(f"{w:.2f}" for w in weights)
        floor = _number(info.get("weight_floor"))
        if max(weights) > 0.9:
            lines.append(f"Mixture weights {words}: one Gaussian carries {max(weights):.0%} of the weight, so this "
                         "mixture acts as one Gaussian.")
        elif floor:
            held = sum(w <= floor * 1.001 for w in weights)
            lines.append(f"Mixture weights {words}" + (f"; {plural(held, 'component')} held at the floor of "
                                                      f"{floor:.2f}, which keeps each one visible in the draws."
                                                      if held else "."))
        else:
            lines.append(f"Mixture weights {words}.")
    return lines


def rhat_with_floor(record: dict) -> str:
    """A record's largest R̂ beside its floor, the largest R̂ its own draws give shuffled into
    perfectly mixed chains (``rhat_max_shuffled``, :mod:`core.analysis.diagnostics`): "1.20 (floor
    at these draws 1.15)". Few draws over many probabilities lift every R̂ above 1 (4 × 25 draws of
    10,000: near 1.2); the distance above the floor is what the chains do. Without a floor, the R̂."""
    rhat, floor = _number(record.get("rhat_max")), _number(record.get("rhat_max_shuffled"))
    if rhat is None:
        return "n/a"
    return rhat_text(rhat) + ("" if floor is None else f" (floor at these draws {rhat_text(floor)})")


def stored_rhat_line(record: dict) -> str | None:
    """The R̂ of the draws a file stores, beside the run's, when it keeps fewer draws than its run
    measured (``record["stored"]``, written by ``train --keep-draws`` and ``bayescope-cli
    diagnose``), or None."""
    stored = record.get("stored") if isinstance(record, dict) else None
    if not isinstance(stored, dict) or _number(stored.get("rhat_max")) is None:
        return None
    shape = f"{stored.get('chains')} × {stored.get('draws')}"
    return (f"On the {shape} draws the file stores, largest R̂ {rhat_with_floor(stored)}: what "
            "bayescope-cli diagnose reproduces from the file alone.")


def convergence_verdict(record: dict) -> str:
    """A measured record's largest R̂ in words: "the chains agree", "… agree as well as these
    draws can show", "too few draws to tell …", "… roughly agree" or "… disagree"."""
    rhat = _number(record.get("rhat_max"))
    if rhat is not None and rhat <= RHAT_STRICT:
        return "the chains agree"
    if mixed_as_shuffled(record):
        return "the chains agree as well as these draws can show"
    if within_shuffled(record):
        return TOO_FEW_DRAWS
    return "the chains roughly agree" if rhat is not None and rhat <= RHAT_LOOSE else "the chains disagree"


def convergence_warning(info: dict) -> str | None:
    """The sentence a column shows when its chains disagree (R̂ above 1.1), else None."""
    record = info.get("diagnostics") if isinstance(info, dict) else None
    if not isinstance(record, dict) or record.get("status") != "measured":
        return None
    rhat = _number(record.get("rhat_max"))
    if rhat is None or rhat <= RHAT_LOOSE:
        return None
    if within_shuffled(record):
        return f"{TOO_FEW_DRAWS.capitalize()} (R̂ {rhat_with_floor(record)}): this posterior may not have converged."
    return f"The chains disagree: this posterior may not have converged (R̂ {rhat_with_floor(record)})."


def convergence_advice(info: dict, trusted: str | None = None) -> str | None:
    """What a column's red convergence line (:func:`convergence_warning`) means for the person
    reading it, and what to do, in plain words; None where there is no such line.

    Chains that disagree ended in different places, so the pooled draws are not yet a fair
    sample of the posterior: its spread (the intervals, the shading, the epistemic part) can be
    too wide or too narrow. Only sampling longer brings chains together, and for a network that
    can take many times the run (docs/convergence.md). ``trusted``: the name of a column of the
    same set whose chains converged (a tier's exact inference), to be read instead.
    """
    if convergence_warning(info) is None:
        return None
    instead = f" {trusted} is the column to trust here." if trusted else ""
    if within_shuffled(info["diagnostics"]):
        return f"So read its spread as a rough guess; more draws per chain would tell.{instead}"
    return f"So read its spread as a rough guess; a much longer run may fix it.{instead}"


def convergence_lines(posterior: Posterior) -> list[str]:
    """What a posterior's file says about convergence, one sentence a line, for a person.

    Reads ``info["diagnostics"]`` (written by training or ``bayescope-cli diagnose``); never
    computes. A file without it says "not measured", unless R̂ cannot be measured at all.
    """
    info = posterior.info if isinstance(posterior.info, dict) else {}
    record = info.get("diagnostics")
    chains, draws = getattr(posterior, "num_chains", None), getattr(posterior, "num_draws", None)
    lines = []
    if chains is not None and draws is not None:
        lines.append(f"{plural(chains, 'chain')} × {plural(draws, 'draw')}.")
    acceptance = _number(info.get("acceptance_rate"))
    if isinstance(record, dict) and record.get("status") == "measured":
        rhat = _number(record.get("rhat_max"))
        bulk, tail = _number(record.get("ess_bulk_min")), _number(record.get("ess_tail_min"))
        if rhat is not None:
            verdict = convergence_verdict(record)
            scale = "" if verdict == TOO_FEW_DRAWS else f", above {RHAT_LOOSE} the chains disagree"  # it cannot tell
            lines.append(f"Largest R̂ {rhat_with_floor(record)}: {verdict} (1.00 is perfect agreement; "
                         f"aim for at most {RHAT_STRICT}{scale}).")
        tight, baseline = _number(record.get("rhat_above_1_01")), _number(record.get("rhat_above_1_01_shuffled"))
        if rhat is not None and rhat > RHAT_STRICT and tight is not None and baseline is not None:
            lines.append(f"R̂ is above {RHAT_STRICT} for {tight:.1%} of the probe's class probabilities; the same "
                         f"draws shuffled into perfectly mixed chains give up to {baseline:.1%} (largest R̂ "
                         f"{rhat_text(record.get('rhat_max_shuffled') or 1.0)}): with few draws some R̂ lie above "
                         f"{RHAT_STRICT} by chance alone.")
        above = _number(record.get("rhat_above_1_1"))
        if above is not None and above > 0:
            share = f"{above:.0%}" if above >= 0.01 else f"{above:.1%}" if above >= 0.001 else "under 0.1%"
            lines.append(f"R̂ is above {RHAT_LOOSE} for {share} of the probe's class probabilities.")
        per_chain = record.get("draws") or 0
        if bulk is not None and tail is not None and not ess_estimable(per_chain):
            lines.append(f"ESS: too few draws per chain ({per_chain}) to estimate how many "
                         f"independent draws they are worth (it needs {MIN_DRAWS_ESS}).")
        elif bulk is not None and tail is not None:
            total = (record.get("chains") or 0) * per_chain
            of = f" of {total:,} draws" if total else ""
            lines.append(f"Worth about {ess_text(bulk)} independent draws for the mean and {ess_text(tail)} "
                         f"for the 5%/95% tails (smallest ESS{of}).")
        kept = record.get("kept_draws")  # one sentence for what was measured: the probe, then the draws
        where = [probe_words(record["probe"])] if record.get("probe") else []
        if kept and record.get("chains") and per_chain:
            where.append(f"all {record['chains']} × {per_chain:,} draws of the run; the file keeps {kept} of each "
                         "chain's, evenly spaced")
        if where:
            lines.append(f"Measured on {', over '.join(where)}.")
        if line := stored_rhat_line(record):
            lines.append(line)
    elif isinstance(record, dict) and record.get("status") == "n/a":
        lines.append(f"Convergence: n/a ({record.get('reason', 'not measurable')}).")
    elif chains is None:
        lines.append("Convergence: n/a (its draws are independent by construction: no chains to compare).")
    elif why_not_measurable(chains, draws or 0) is not None:
        lines.append(f"Convergence: n/a ({why_not_measurable(chains, draws or 0)}).")
    else:
        lines.append("Convergence: not measured (this file predates the measurement; "
                     "bayescope-cli diagnose FILE adds it).")
    if acceptance is not None:
        lines.append(f"HMC accepted {acceptance * 100:.0f}% of its proposals.")
    return lines
