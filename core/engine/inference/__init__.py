"""Inference methods, one module each, behind one registry.

``METHODS[name]`` gives the config class and the ``fit`` generator of a method (every ``fit``
returns a :class:`~core.engine.inference.base.Posterior`) and every other fact about it: its
words, its family, its use of the network's dropout, its chains, its settings in each tier of
``bayescope-cli zoo``. The window, the commands and the words read them here; none lists
methods of its own (docs/architecture.md, "Where a new thing goes").

The registry names each method's module without importing it: the module is imported when its
config, its ``fit`` or a posterior of it is first needed (``Method.load``), so a launch that reads
four posteriors imports those four methods' modules only. ``tests/core/test_method_registry.py``
imports every module of this package and checks it against the registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import ModuleType
from typing import Any, Literal, get_args

from core.engine.inference.base import Dataset, FitGenerator, Posterior, ProgressRecord
from core.engine.inference.recipes import (
    CONVERGED_MAP,
    DSGHMC_CHAINS,
    FACE_PRIOR,
    FACE_PRIOR_STD,
    FACE_SG,
    FACE_TRAINING,
    FACES,
    FEATURES_DSGHMC,
    FEATURES_HMC,
    FEATURES_SGHMC,
    FEATURES_SGLD,
    FEATURES_TIER,
    FROM_TIER_MAP,
    HALF,
    KRON_NETWORK_CHAINS,
    NETWORK,
    NETWORK_PRIOR,
    NETWORK_PRIOR_STD,
    PAPER,
    SGHMC_CHAINS,
    SGLD_CHAINS,
    chain_settings,
)
from core.engine.method_words import method_words
from core.engine.models import ArchSpec

#: How a method finds its spread of belief, which sets what its training reports and how the
#: window explains its trace: ``sampler`` (draws of weights; log posterior), ``loss`` (networks
#: trained the usual way; training loss), ``elbo`` (a variational fit; ELBO) and ``post_hoc``
#: (best weights first, then a spread around them).
Family = Literal["sampler", "loss", "elbo", "post_hoc"]
FAMILIES: tuple[str, ...] = get_args(Family)


@dataclass(frozen=True)
class Method:
    """Every fact about an inference method: what runs it, and what the window, the commands
    and the tables say about it. A new method is its module, one entry here, its settings' words
    and its tests (docs/architecture.md); ``tests/core/test_method_registry.py`` checks each fact."""

    name: str
    #: The module that runs it, imported when it is first needed (its config, its ``fit``, a
    #: posterior of it read from a file): a launch imports only its columns' methods.
    module: str
    #: The name of its config dataclass in ``module``.
    config_name: str
    summary: str
    #: Its short name in headers and tables (``"SGHMC"``); from :mod:`core.engine.method_words`,
    #: as ``description``: the window shows them before the engine (torch) loads.
    label: str = ""
    #: One line on it for a person who never read the paper; the words before a colon name it.
    description: str = ""
    family: Family = "loss"
    #: Whether it predicts with the network's own dropout layers, so needs a drop rate above 0.
    needs_dropout: bool = False
    #: Whether its training runs the network with its dropout layers switched on (a regulariser
    #: for the others), so the window offers a drop rate.
    uses_model_dropout: bool = False
    #: The network's drop rate it starts with (Gal & Ghahramani use 0.5 for MC dropout).
    default_drop_rate: float = 0.0
    #: Whether it starts from given MAP weights (a saved MAP posterior) instead of training them:
    #: its module has ``fit_from`` (below).
    starts_from_weights: bool = False
    #: Whether ``fit(..., chains=...)`` runs a subset of independent chains (or ensemble
    #: members), each from its own stream, to be merged with
    #: :func:`~core.engine.inference.chain_merge.merge_chains`.
    runs_chains: bool = False
    #: Its ``bayescope-cli train`` settings in each tier of ``bayescope-cli zoo`` it belongs to
    #: (without ``--method``; :mod:`core.engine.inference.recipes`).
    tiers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def load(self) -> ModuleType:
        """Its module, imported on first use (which registers its posterior kinds too)."""
        return importlib.import_module(self.module)

    @property
    def config_cls(self) -> type:
        return getattr(self.load(), self.config_name)

    @property
    def fit(self) -> Callable[[Any, ArchSpec, Dataset, int], FitGenerator]:
        """``fit(config, arch, data, seed)``: the generator that trains it."""
        return self.load().fit

    @property
    def fit_from(self) -> Callable[..., FitGenerator] | None:
        """``fit_from(weights, config, arch, data, seed)`` for a method that starts from given MAP
        weights; None for the others (without importing its module)."""
        return self.load().fit_from if self.starts_from_weights else None

    def make_config(self, **overrides: Any) -> Any:
        known = {f.name for f in fields(self.config_cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(
                f"method {self.name!r} has no setting(s) {sorted(unknown)}; it knows {sorted(known)}"
            )
        return self.config_cls(**overrides)

    def defaults(self) -> dict[str, Any]:
        """Each setting's default value, in declaration order."""
        return {f.name: f.default for f in fields(self.config_cls)}

    def parse_settings(self, texts: dict[str, str]) -> Any:
        """Build the config from settings typed as text (CLI ``--set``, GUI form).

        Each text is parsed as the type of the setting's default (int, float, bool, str).
        """
        defaults = self.defaults()
        values = {}
        for raw_name, text in texts.items():
            name = raw_name.strip().replace("-", "_")
            if name not in defaults:
                raise ValueError(
                    f"method {self.name!r} has no setting {name!r}; it knows {sorted(defaults)}"
                )
            values[name] = _parse_like(defaults[name], text.strip(), name)
        return self.make_config(**values)


def _parse_like(default: Any, text: str, name: str) -> Any:
    try:
        if isinstance(default, bool):
            if text.lower() in ("true", "yes", "1", "on"):
                return True
            if text.lower() in ("false", "no", "0", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            number = float(text)
            if not number.is_integer():
                raise ValueError
            return int(number)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = type(default).__name__
        raise ValueError(f"setting {name}={text!r} is not a valid {kind}") from None
    return text


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    METHODS[method.name] = method
    return method


# In the order the training dialog lists them: point estimates and dropout, the samplers, the
# variational families, the methods that spread belief around a trained network.
register(Method(
    "map", f"{__name__}.map", "MapConfig", "maximum a posteriori point estimate",
    **method_words("map"),
    family="loss", uses_model_dropout=True,
    # to the mode by Newton steps (issue 46: the 10 epochs of Adam before stopped 2,804 nats below it)
    tiers={PAPER: CONVERGED_MAP, NETWORK: NETWORK_PRIOR, FACES: (*CONVERGED_MAP, *FACE_PRIOR)},
))
register(Method(
    "mc_dropout", f"{__name__}.mc_dropout", "McDropoutConfig", "MC dropout (Gal & Ghahramani 2016)",
    **method_words("mc_dropout"),
    family="loss", needs_dropout=True, uses_model_dropout=True, default_drop_rate=0.5,
    tiers={PAPER: ("--drop-rate", "0.5"),
           # MC dropout's prior N(0, I/l²) is the tier's at the length-scale l = 1/σ
           NETWORK: ("--drop-rate", "0.5", "--set", "epochs=15", "--set", f"length_scale={1 / NETWORK_PRIOR_STD:g}"),
           # a tenth of the descriptor's values dropped: each carries part of every face's age, and
           # more dropped costs accuracy (docs/reproduction.md)
           FACES: ("--drop-rate", "0.1", *FACE_TRAINING, "--set", f"length_scale={1 / FACE_PRIOR_STD:g}")},
))
register(Method(
    "sgld", f"{__name__}.sgld", "SgldConfig", "SGLD (Welling & Teh 2011)",
    **method_words("sgld"),
    family="sampler", runs_chains=True,
    tiers={PAPER: (*SGLD_CHAINS, "--set", "step_size=5e-2", *HALF),
           NETWORK: (*KRON_NETWORK_CHAINS, "--set", "step_size=1e-3", "--set", "metric=kron", *NETWORK_PRIOR,
                     "--keep-draws", "25", *HALF),
           # η 0.1 in the posterior's own units (forgets in about 40 steps; its draws spread 1/√(1 − η/4),
           # 1.3 % wider than the posterior's, where the paper tier's 0.05 gives 0.6 %): 10,050 epochs of
           # 5 steps, every 25th step measured (4 × 2,000 draws: over 4 × 1,000, SGHMC's largest R̂ of
           # the probe's 8,000 was 1.0102, HMC's 1.008)
           FACES: (*chain_settings(thin=25, init="overdispersed", epochs=10050, burn_in=50), *FACE_SG,
                   "--set", "step_size=1e-1", *HALF),
           FEATURES_TIER: (*FEATURES_SGLD, *HALF)},
))
register(Method(
    "sghmc", f"{__name__}.sghmc", "SghmcConfig", "SGHMC (Chen, Fox & Guestrin 2014)",
    **method_words("sghmc"),
    family="sampler", runs_chains=True,
    tiers={PAPER: (*SGHMC_CHAINS, "--set", "step_size=4e-3", "--set", "friction=0.12", *HALF),
           NETWORK: (*KRON_NETWORK_CHAINS, "--set", "step_size=5e-5", "--set", "friction=0.1", "--set", "metric=kron",
                     *NETWORK_PRIOR, "--keep-draws", "25", *HALF),
           FACES: (*chain_settings(thin=27, init="overdispersed", epochs=10850, burn_in=50), *FACE_SG,
                   "--set", "step_size=4e-3", "--set", "friction=0.12", *HALF),
           FEATURES_TIER: (*FEATURES_SGHMC, *HALF)},
))
register(Method(
    "dsghmc", f"{__name__}.dsghmc", "DsghmcConfig", "Dropout SGHMC (Hernández et al., Alg. 1)",
    **method_words("dsghmc"),
    family="sampler", runs_chains=True,
    tiers={PAPER: (*DSGHMC_CHAINS, "--set", "step_size=1.6e-5", "--set", "friction=0.1", "--drop-rate", "0.5", *HALF),
           NETWORK: (*KRON_NETWORK_CHAINS, "--set", "step_size=5e-5", "--set", "friction=0.1", "--drop-rate", "0.5",
                     "--set", "metric=kron", *NETWORK_PRIOR, "--keep-draws", "25", *HALF),
           # SGHMC's settings with a tenth of the descriptor's values dropped (MC dropout's rate)
           FACES: (*chain_settings(thin=27, init="overdispersed", epochs=10850, burn_in=50), *FACE_SG,
                   "--set", "step_size=4e-3", "--set", "friction=0.12", "--drop-rate", "0.1", *HALF),
           FEATURES_TIER: (*FEATURES_DSGHMC, *HALF)},
))
register(Method(
    "hmc", f"{__name__}.hmc", "HmcConfig", "full-batch HMC with Stan-style warm-up",
    **method_words("hmc"),
    family="sampler", runs_chains=True,
    # the dense curvature metric (docs/zoo.md: diagonal HMC did not converge in 700 iterations);
    # every iteration measured (4 × 800 draws) and 200 of each chain's kept: over 4 × 200 draws
    # the largest of 10,000 R̂ values lies near 1.02 even for perfectly mixed chains
    tiers={PAPER: ("--set", "num_chains=4", "--set", "metric=curvature", "--set", "init=overdispersed",
                   "--set", "step_size=0.1", "--set", "num_warmup=150", "--set", "num_samples=800",
                   "--set", "thin=1", "--set", "num_leapfrog=12", "--keep-draws", "200", *HALF),
           # as the paper tier's, with 1,000 sampling iterations of 8 leapfrog steps, every one
           # measured (4 × 1,000 draws) and 100 of each chain's kept (0.8 MB: the installer's 230 MB)
           FACES: ("--set", "num_chains=4", "--set", "metric=curvature", "--set", "init=overdispersed",
                   "--set", "step_size=0.1", "--set", "num_warmup=150", "--set", "num_samples=1000",
                   "--set", "thin=1", "--set", "num_leapfrog=8", "--keep-draws", "100", *FACE_PRIOR, *HALF),
           FEATURES_TIER: (*FEATURES_HMC, *HALF)},
))
register(Method(
    "ensemble", f"{__name__}.ensemble", "EnsembleConfig", "deep ensemble (Lakshminarayanan et al.)",
    **method_words("ensemble"),
    family="loss", runs_chains=True, uses_model_dropout=True,
    # every member from its own random start to convergence by Newton steps, as the MAP (issue 46):
    # on a convex model each ends at the one mode, the MAP five times over (docs/zoo.md); LeNet-5
    # keeps Adam (not convex, too large for full-batch second-order steps here)
    tiers={PAPER: ("--set", "num_members=5", *CONVERGED_MAP), NETWORK: ("--set", "num_members=5", *NETWORK_PRIOR),
           FACES: ("--set", "num_members=5", *CONVERGED_MAP, *FACE_PRIOR)},
))
register(Method(
    "mfvi", f"{__name__}.mfvi", "MfviConfig", "mean-field Gaussian VI, Bayes by backprop",
    **method_words("mfvi"),
    family="elbo",
    # 60 epochs: at 30 its ELBO still rose by 0.0006 (paper) and 0.001 (network) per epoch as the
    # learning rate reached zero
    tiers={PAPER: ("--set", "epochs=60"), NETWORK: ("--set", "epochs=60", *NETWORK_PRIOR),
           FACES: ("--set", "epochs=60", "--set", "lr=0.01", *FACE_PRIOR)},
))
register(Method(
    "snvi", f"{__name__}.snvi", "SnviConfig", "sN-VI: Gaussian, diag + rank-K covariance (Le Folgoc et al.)",
    **method_words("snvi"),
    family="elbo",
    tiers={PAPER: ("--set", "epochs=30", "--set", "rank=4"),
           NETWORK: ("--set", "epochs=60", "--set", "rank=4", *NETWORK_PRIOR),
           FACES: ("--set", "epochs=60", "--set", "lr=0.01", "--set", "rank=4", *FACE_PRIOR)},
))
register(Method(
    "sgmmvi", f"{__name__}.sgmmvi", "SgmmviConfig", "sGMM-VI: mixture of sN-VI Gaussians (Le Folgoc et al.)",
    **method_words("sgmmvi"),
    family="elbo",
    # each component keeps at least half an equal weight (min_share 0.5, the default): left
    # free, the weights collapsed onto one component (0.010 / 0.027 / 0.964)
    tiers={PAPER: ("--set", "epochs=30", "--set", "components=3", "--set", "rank=2"),
           NETWORK: ("--set", "epochs=30", "--set", "components=3", "--set", "rank=2", *NETWORK_PRIOR, *HALF),
           FACES: ("--set", "epochs=60", "--set", "lr=0.01", "--set", "components=3", "--set", "rank=2",
                   *FACE_PRIOR)},
))
register(Method(
    "vdropout", f"{__name__}.vdropout", "VdropoutConfig", "variational dropout, learned α (Kingma et al. 2015)",
    **method_words("vdropout"),
    family="elbo",
    # the log-uniform prior of variational dropout has no scale to share
    tiers={PAPER: ("--set", "epochs=30"), NETWORK: ("--set", "epochs=30"),
           FACES: ("--set", "epochs=60", "--set", "lr=0.01")},
))
register(Method(
    "swag", f"{__name__}.swag", "SwagConfig", "SWAG: Gaussian of SGD iterates (Maddox et al. 2019)",
    **method_words("swag"),
    family="post_hoc", starts_from_weights=True,
    # float16, as the samplers: the tier fits the 230 MB installer only so (docs/zoo.md)
    tiers={PAPER: FROM_TIER_MAP, NETWORK: (*NETWORK_PRIOR, *HALF),
           FACES: (*FROM_TIER_MAP, "--set", "batch_size=100", *FACE_PRIOR)},
))
register(Method(
    "laplace", f"{__name__}.laplace", "LaplaceConfig",
    "Laplace approximation around the MAP (MacKay; Daxberger et al. 2021)",
    **method_words("laplace"),
    family="post_hoc", starts_from_weights=True,
    # the face tier's 1,032 weights: the exact curvature (full) costs 8.5 MB, so nothing is factored
    tiers={PAPER: ("--set", "structure=kron", "--set", "prior_precision=prior", *FROM_TIER_MAP),
           NETWORK: ("--set", "structure=kron", "--set", "prior_precision=prior", *NETWORK_PRIOR),
           FACES: ("--set", "structure=full", "--set", "prior_precision=prior", *FROM_TIER_MAP, *FACE_PRIOR)},
))

#: The method a training dialog opened for the first time offers.
DEFAULT_METHOD = "mc_dropout"


def load_all_methods() -> None:
    """Import every method's module (and so register every posterior kind): for a posterior file
    whose kind its own method's module does not define."""
    for method in METHODS.values():
        method.load()


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose from {sorted(METHODS)}") from None


__all__ = ["DEFAULT_METHOD", "FAMILIES", "METHODS", "Dataset", "Family", "Method", "Posterior", "ProgressRecord", "get_method", "load_all_methods", "register"]
