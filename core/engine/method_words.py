"""Each inference method's words: its short label and its one line for a person who never read a paper.

They belong to the registry (:data:`core.engine.inference.METHODS`, whose entries take them from
here) but live apart from it, in a module without torch: the window titles its columns from
their files' records before the engine loads (:mod:`core.engine.store_records`), and importing
the registry imports every method and torch. A new method's words go here, in the registry's order.
"""

from __future__ import annotations

#: ``name: (label, description)``, in the order the registry lists the methods.
METHOD_WORDS: dict[str, tuple[str, str]] = {
    "map": ("MAP",
            "maximum a posteriori: one best set of weights, no spread of belief"),
    "mc_dropout": ("MC dropout",
                   "Monte Carlo dropout: random units switched off at every prediction"),
    "sgld": ("SGLD",
             "stochastic gradient Langevin dynamics: noisy gradient steps that sample weights"),
    "sghmc": ("SGHMC",
              "stochastic gradient Hamiltonian Monte Carlo: sampling with momentum and friction"),
    "dsghmc": ("Dropout-SGHMC",
               "SGHMC with a fresh dropout mask on the inputs at every step"),
    "hmc": ("HMC",
            "Hamiltonian Monte Carlo: exact full-data sampling with accept/reject"),
    "ensemble": ("Deep ensemble",
                 "several networks trained from different starting points"),
    "mfvi": ("Mean-field VI",
             "a Gaussian over the weights, each weight independent"),
    "snvi": ("Low-rank VI",
             "a Gaussian over the weights whose covariance has a few shared directions"),
    "sgmmvi": ("Mixture VI",
               "a mixture of low-rank Gaussians over the weights"),
    "vdropout": ("Variational dropout",
                 "dropout rates learned per weight"),
    "swag": ("SWAG",
             "a Gaussian fitted to the weights that training visits around its best point"),
    "laplace": ("Laplace",
                "a Gaussian around the best weights, as wide as the loss is flat there: it sees only how the "
                "loss bends at those weights, so where they get every training image right and sure, the loss "
                "is flat there, the Gaussian about as wide as the prior, and its draws reach weights that get "
                "training images wrong, which exact inference (HMC) seldom does"),
}


def method_words(name: str) -> dict[str, str]:
    """``label`` and ``description`` of the method ``name``, as its registry entry takes them."""
    label, description = METHOD_WORDS[name]
    return {"label": label, "description": description}
