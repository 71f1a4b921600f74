"""Model tiers: sets of posteriors that share one model, data set and prior, so that a
comparison among them differs in method only (built by ``bayescope-cli zoo``).

A posterior of a tier records it in ``info["zoo"]["tier"]``. A tier may have a *reference*
method, the closest to exact inference there is for its model (HMC with converged chains),
whose predictive the others are measured against and which the window marks on their plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.engine.naming import mixed_as_shuffled, rhat_text

#: The reference method of each tier that has one.
REFERENCES: dict[str, str] = {"paper": "hmc", "faces": "hmc", "features": "hmc"}

#: Each tier's model in words, for menus and tables.
TIER_WORDS: dict[str, str] = {
    "paper": "softmax regression (the D-SGHMC paper's model)",
    "network": "LeNet-5 network",
    "faces": "softmax regression on the face descriptor (age groups)",
    "features": "softmax-regression head on the features of a network of your own",
}


#: The largest R̂ at which a reference is called exact inference (Vehtari et al. 2021's aim).
REFERENCE_RHAT = 1.01


def reference_words(info: dict[str, Any]) -> tuple[str, str]:
    """What to call a tier's reference (its ``info``): a short name, and a sentence for tooltips.
    HMC is "exact inference" only when its chains converged: recorded R̂ ≤ 1.01, or chains that
    agree as well as their draws shuffled do (:func:`core.engine.naming.mixed_as_shuffled`, said with its numbers);
    otherwise the words say it has not, with the R̂, so its marks are not taken for the truth."""
    record = info.get("diagnostics") if isinstance(info.get("diagnostics"), dict) else {}
    rhat = record.get("rhat_max")
    if record.get("status") == "measured" and rhat is not None and rhat <= REFERENCE_RHAT:
        return ("Exact inference (HMC)",
                "exact inference, HMC with converged chains on the same model (this set's reference)")
    if mixed_as_shuffled(record):
        draws = (record.get("chains") or 0) * (record.get("draws") or 0)
        return ("Exact inference (HMC)",
                f"exact inference, HMC on the same model (this set's reference), its chains converged: their "
                f"largest R̂ is {rhat:.3f} and {record['rhat_above_1_01']:.1%} of the probe's probabilities have "
                f"R̂ above {REFERENCE_RHAT}, no more than its {draws:,} draws give when shuffled into perfectly "
                f"mixed chains ({record['rhat_above_1_01_shuffled']:.1%}, largest {record['rhat_max_shuffled']:.3f})")
    said = f"largest R̂ {rhat_text(rhat)}, aim {REFERENCE_RHAT}" if rhat is not None else "not measured"
    return (f"HMC (not converged, R̂ {rhat_text(rhat)})" if rhat is not None else "HMC (convergence not measured)",
            f"HMC on the same model, this set's reference, whose chains have NOT converged ({said}): it is "
            "not yet exact inference, so read its marks as one more approximation, not as the truth")


def tier_words(info: dict[str, Any]) -> str | None:
    """The model of the tier a posterior belongs to (its ``info``), in words; a features tier names
    its network's file, as two people's networks make two tiers."""
    tier = tier_of(info)
    if tier not in TIER_WORDS:
        return None
    network = info.get("network") if isinstance(info.get("network"), dict) else {}
    name = Path(str(network.get("file", ""))).name
    return f"{TIER_WORDS[tier]} ({name})" if tier == "features" and name else TIER_WORDS[tier]


def file_name(tier: str, model: str, method: str) -> str:
    """The file a tier's method is saved as: ``<tier>_<model>_<method>.pt``, the name said once
    where the model is called as its tier is (a features tier's head: ``features_<method>.pt``)."""
    return f"{tier}_{method}.pt" if model == tier else f"{tier}_{model}_{method}.pt"


def former_file_name(tier: str, model: str, method: str) -> str | None:
    """The name earlier versions gave the file, where it differs (``features_features_<method>.pt``)."""
    return f"{tier}_{model}_{method}.pt" if model == tier else None


def tier_file(folder: Path, tier: str, model: str, method: str) -> Path:
    """The file of ``method`` of the tier in ``folder``: :func:`file_name`, or the former name in a
    folder built under the former names, so that its files are read and a rebuild goes on in it
    (keeping each file made with the same arguments) instead of starting over."""
    former = former_file_name(tier, model, method)
    if former is not None and any(folder.glob(former_file_name(tier, model, "*") or "")):
        return folder / former
    return folder / file_name(tier, model, method)


def tier_of(info: dict[str, Any]) -> str | None:
    """The tier a posterior was built for (its ``info``), or None."""
    zoo = info.get("zoo")
    return zoo.get("tier") if isinstance(zoo, dict) else None


def reference_candidates(tier: str, model: str, beside: Path, bundled: Path) -> list[Path]:
    """Where a tier's reference file may be: beside the posterior's own file, then among the
    bundled posteriors."""
    method = REFERENCES.get(tier)
    if method is None:
        return []
    return [tier_file(beside, tier, model, method), bundled / file_name(tier, model, method)]
