"""Inference methods, one module each, behind one registry.

``METHODS[name]`` gives the config class and the ``fit`` generator of a method; every
``fit`` returns a :class:`~core.engine.inference.base.Posterior`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from core.engine.inference import dsghmc, ensemble, hmc, laplace, mc_dropout, sghmc, sgld
from core.engine.inference import map as map_
from core.engine.inference import mfvi as mfvi
from core.engine.inference import sgmmvi as sgmmvi
from core.engine.inference import snvi as snvi
from core.engine.inference import swag as swag
from core.engine.inference import vdropout as vdropout
from core.engine.inference.base import Dataset, FitGenerator, Posterior, ProgressRecord
from core.engine.models import ArchSpec


@dataclass(frozen=True)
class Method:
    """An inference method: its name, config dataclass, fit generator and one-line summary."""

    name: str
    config_cls: type
    fit: Callable[[Any, ArchSpec, Dataset, int], FitGenerator]
    summary: str
    needs_dropout: bool = False
    #: ``fit_from(weights, config, arch, data, seed)`` for methods that start from given MAP
    #: weights (a saved MAP posterior) instead of training them; None for the others.
    fit_from: Callable[..., FitGenerator] | None = None
    #: Whether ``fit(..., chains=...)`` runs a subset of independent chains (or ensemble
    #: members), each from its own stream, to be merged with
    #: :func:`~core.engine.inference.sampling.merge_chains`.
    runs_chains: bool = False

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


register(Method("map", map_.MapConfig, map_.fit, "maximum a posteriori point estimate"))
register(
    Method(
        "mc_dropout",
        mc_dropout.McDropoutConfig,
        mc_dropout.fit,
        "MC dropout (Gal & Ghahramani 2016)",
        needs_dropout=True,
    )
)
register(Method("sgld", sgld.SgldConfig, sgld.fit, "SGLD (Welling & Teh 2011)", runs_chains=True))
register(Method("sghmc", sghmc.SghmcConfig, sghmc.fit, "SGHMC (Chen, Fox & Guestrin 2014)", runs_chains=True))
register(
    Method("dsghmc", dsghmc.DsghmcConfig, dsghmc.fit, "Dropout SGHMC (Hernández et al., Alg. 1)",
           runs_chains=True)
)
register(Method("hmc", hmc.HmcConfig, hmc.fit, "full-batch HMC with Stan-style warm-up", runs_chains=True))
register(
    Method("ensemble", ensemble.EnsembleConfig, ensemble.fit, "deep ensemble (Lakshminarayanan et al.)",
           runs_chains=True)
)

register(Method("mfvi", mfvi.MfviConfig, mfvi.fit, "mean-field Gaussian VI, Bayes by backprop"))
register(
    Method("snvi", snvi.SnviConfig, snvi.fit, "sN-VI: Gaussian, diag + rank-K covariance (Le Folgoc et al.)")
)
register(
    Method("sgmmvi", sgmmvi.SgmmviConfig, sgmmvi.fit, "sGMM-VI: mixture of sN-VI Gaussians (Le Folgoc et al.)")
)
register(Method("laplace", laplace.LaplaceConfig, laplace.fit, "Laplace approximation around the MAP (MacKay; Daxberger et al. 2021)",
                fit_from=laplace.fit_from))
register(Method("swag", swag.SwagConfig, swag.fit, "SWAG: Gaussian of SGD iterates (Maddox et al. 2019)",
                fit_from=swag.fit_from))
register(
    Method("vdropout", vdropout.VdropoutConfig, vdropout.fit, "variational dropout, learned α (Kingma et al. 2015)")
)


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose from {sorted(METHODS)}") from None


__all__ = ["METHODS", "Dataset", "Method", "Posterior", "ProgressRecord", "get_method", "register"]
