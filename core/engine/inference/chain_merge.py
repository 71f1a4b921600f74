"""Chains run in parts joined into the run: :func:`merge_chains` (and :func:`chains_of_run`).

A run's chains may be fitted as subsets, on other machines or at other times
(``fit(..., chains=...)``); each part holds exactly its chains of the whole run
(:mod:`~core.engine.inference.chains`), so joining the parts in chain order gives the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from core.engine.inference.base import SampledPosterior
from core.engine.inference.chains import chains_in_words
from core.engine.inference.sampling import diagnostics

#: ``info`` values that add up over the parts of a run.
_SUMMED_INFO = ("num_chains", "num_members", "divergences", "train_seconds")
#: ``info`` values that are a mean over chains (weighted by each part's number of chains).
_CHAIN_MEAN_INFO = ("acceptance_rate",)
#: ``info`` values that hold one entry per chain, in chain order.
_PER_CHAIN_INFO = ("chain_ids", "step_size")


def chains_of_run(config: Any) -> int:
    """How many chains (or ensemble members) a run's settings ask for: a config object or its
    dict as saved in a file; 0 for a method without chains."""
    get = config.get if isinstance(config, dict) else (lambda name, default: getattr(config, name, default))
    return int(get("num_chains", 0) or get("num_members", 0) or 0)


def merge_chains(posteriors: Sequence[SampledPosterior]) -> SampledPosterior:
    """Concatenate posteriors that hold different chains of one run along the chain dimension.

    Each part is a fit of the same method, architecture, config, seed and data run on a
    subset of the chains (``fit(..., chains=...)``, perhaps on another machine); the result
    holds their chains in chain order, so merging the subsets of a run gives the run.
    ``info`` is merged chain by chain: per-chain traces and lists are concatenated in chain
    order, counts (chains, members, divergences, training seconds) added, the acceptance
    rate averaged over chains; R̂ and ESS, which need all chains at once, are recomputed from
    the merged traces that ``info`` keeps (downsampled to at most 500 points per chain, so
    they can differ a little from those of a single run, which used every step). Raises
    ``ValueError`` naming what disagrees, or a chain held twice.
    """
    parts = list(posteriors)
    if not parts:
        raise ValueError("there is nothing to merge: no posterior was given")
    first = parts[0]
    for p in parts:
        if not isinstance(p, SampledPosterior):
            raise ValueError(f"only sampled posteriors hold chains to merge, got a {type(p).__name__}")
    for what, value in (
        ("kind", lambda p: type(p).__name__), ("method", lambda p: p.method), ("architecture", lambda p: p.arch),
        ("settings", lambda p: p.config), ("seed", lambda p: p.seed), ("training data", lambda p: p.dataset),
        ("training data files", lambda p: p.info.get("training_data")),
        ("number of draws per chain", lambda p: p.num_draws),
    ):
        values = [value(p) for p in parts]
        if any(v != values[0] for v in values[1:]):
            raise ValueError(f"the posteriors to merge differ in their {what}: {_differences(values)}")
    ids = [_chain_ids(p) for p in parts]
    flat = [c for part in ids for c in part]
    if len(set(flat)) != len(flat):
        twice = sorted({c for c in flat if flat.count(c) > 1})
        raise ValueError(f"the posteriors to merge hold {chains_in_words(twice)} twice")
    order = sorted(range(len(parts)), key=lambda i: ids[i][0])  # parts by their first chain
    parts, ids = [parts[i] for i in order], [ids[i] for i in order]
    concat = [c for part in ids for c in part]
    index = sorted(range(len(concat)), key=concat.__getitem__)  # then chains by number
    samples = {k: torch.cat([p.samples[k] for p in parts])[index] for k in first.samples}
    info = _merge_info([p.info for p in parts], ids, index, first.config)
    return type(first).from_state(first.method, first.arch, first.config, first.seed, first.dataset,
                                  info, samples)


def _differences(values: list[Any]) -> str:
    """What differs between the parts' values, in words: "sgld, sghmc"; for settings (dicts), each
    setting that differs with its values, "step_size 0.001, 0.002"."""
    if all(isinstance(v, dict) for v in values):
        keys = dict.fromkeys(k for v in values for k in v)
        return "; ".join(f"{k} {', '.join(str(v.get(k, 'unset')) for v in values)}"
                         for k in keys if any(v.get(k) != values[0].get(k) for v in values))
    return ", ".join(str(v) for v in values)


def _chain_ids(posterior: SampledPosterior) -> list[int]:
    ids = posterior.info.get("chain_ids")
    if ids is None and not chains_of_run(posterior.config):
        raise ValueError(f"a {posterior.method} posterior runs no chains, so it has none to merge")
    if ids is None:
        raise ValueError(f"this {posterior.method} posterior does not record which chains it holds "
                         "(it was trained before chains could be run apart), so it cannot be merged")
    if len(ids) != posterior.num_chains:
        raise ValueError(f"the posterior records chains {ids} but holds {posterior.num_chains}")
    return [int(c) for c in ids]


def _merge_info(
    infos: list[dict[str, Any]], ids: list[list[int]], index: list[int], config: dict[str, Any]
) -> dict[str, Any]:
    """``info`` of merged parts (see :func:`merge_chains`); ``index`` puts the chains in order."""
    counts = [len(i) for i in ids]
    out: dict[str, Any] = {}
    diagnosed: set[str] = set()
    for key in dict.fromkeys(k for info in infos for k in info):
        values = [info.get(key) for info in infos]
        if key.startswith(("rhat_", "ess_")):
            diagnosed.add(key.split("_", 1)[1])
        elif key == "traces":
            names = dict.fromkeys(n for v in values for n in (v or {}))
            out[key] = {n: [[row for v in values for row in v[n]][i] for i in index] for n in names}
        elif key in _SUMMED_INFO and all(isinstance(v, (int, float)) for v in values):
            out[key] = sum(values)
        elif key in _CHAIN_MEAN_INFO and all(isinstance(v, (int, float)) for v in values):
            out[key] = sum(v * c for v, c in zip(values, counts, strict=True)) / sum(counts)
        elif key in _PER_CHAIN_INFO and all(isinstance(v, list) for v in values):
            out[key] = [[x for v in values for x in v][i] for i in index]
        elif all(v == values[0] for v in values[1:]):
            out[key] = values[0]
        else:
            out[key] = values  # one value per part, parts in chain order: kept, not guessed at
    traces = {n: v for n, v in out.get("traces", {}).items() if n in diagnosed}
    if traces:
        # downsampled_traces kept every stride-th step of the run's T steps, burn-in included
        if "num_steps" in out:
            total, burn_in = int(out["num_steps"]), int(out.get("burn_in_steps", 0))
        else:  # HMC: warm-up, then sampling
            total = int(config.get("num_warmup", 0)) + int(config.get("num_samples", 0))
            burn_in = int(config.get("num_warmup", 0))
        stride = max(1, math.ceil(total / 500))
        full = {n: torch.tensor(v, dtype=torch.float32) for n, v in traces.items()}
        out.update(diagnostics(full, math.ceil(burn_in / stride)))
        out["diagnostics_from"] = "the merged traces" + (f", one step in {stride}" if stride > 1 else "")
    return out
