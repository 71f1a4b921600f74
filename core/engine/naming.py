"""Names a person reads: methods and architectures in words, posteriors as column titles."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the window imports this module before the engine (torch) loads
    from core.engine.inference.base import Posterior

#: Short name of each method as shown in headers and tables.
METHOD_LABELS: dict[str, str] = {
    "map": "MAP",
    "mc_dropout": "MC dropout",
    "sgld": "SGLD",
    "sghmc": "SGHMC",
    "dsghmc": "Dropout-SGHMC",
    "hmc": "HMC",
    "ensemble": "Deep ensemble",
    "mfvi": "Mean-field VI",
    "snvi": "Low-rank VI",
    "sgmmvi": "Mixture VI",
    "vdropout": "Variational dropout",
    "swag": "SWAG",
    "laplace": "Laplace",
}

#: One line on each method for a person who never read the paper.
METHOD_DESCRIPTIONS: dict[str, str] = {
    "map": "maximum a posteriori: one best set of weights, no spread of belief",
    "mc_dropout": "Monte Carlo dropout: random units switched off at every prediction",
    "sgld": "stochastic gradient Langevin dynamics: noisy gradient steps that sample weights",
    "sghmc": "stochastic gradient Hamiltonian Monte Carlo: sampling with momentum and friction",
    "dsghmc": "SGHMC with a fresh dropout mask on the inputs at every step",
    "hmc": "Hamiltonian Monte Carlo: exact full-data sampling with accept/reject",
    "ensemble": "several networks trained from different starting points",
    "mfvi": "a Gaussian over the weights, each weight independent",
    "snvi": "a Gaussian over the weights whose covariance has a few shared directions",
    "sgmmvi": "a mixture of low-rank Gaussians over the weights",
    "vdropout": "dropout rates learned per weight (local reparameterisation)",
    "swag": "a Gaussian fitted to the weights that training visits around its best point",
    "laplace": "a Gaussian around the best weights, as wide as the loss is flat there",
}

ARCH_LABELS: dict[str, str] = {"softmax": "softmax regression", "mlp": "MLP", "lenet": "LeNet"}


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
