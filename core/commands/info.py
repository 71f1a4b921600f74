"""``bayescope-cli info FILE [--json]``: what a posterior file holds, read without predicting.

The method in words, architecture, data set, chains and draws, whether the chains agree (R̂,
ESS, HMC's acceptance: as the file records them, see ``bayescope-cli diagnose``), training
time, seed and provenance. ``--json`` prints one object with the same facts.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from core.commands.console import say
from core.engine import tiers
from core.engine.data.identity import output_class_names
from core.engine.data.split import unpack
from core.engine.inference.chain_merge import chains_of_run
from core.engine.inference.chains import chains_in_words
from core.engine.models import ArchSpec
from core.engine.naming import (
    ARCH_LABELS,
    METHOD_DESCRIPTIONS,
    MIN_DRAWS_ESS,
    convergence_verdict,
    dataset_words,
    ess_estimable,
    ess_text,
    fit_lines,
    interval_mass_line,
    method_label,
    plural,
    probe_words,
    rhat_with_floor,
    stored_rhat_line,
    why_not_measurable,
)
from core.engine.store import file_records


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a posterior file (.pt)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _plain(value: Any) -> Any:
    """JSON-safe: NaN becomes null, an infinity the string "inf" (or "-inf")."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def convergence_record(records: dict[str, Any]) -> dict[str, Any]:
    """The file's diagnostics record, or what can be said without one."""
    info, weights = records["info"], records["weights"]
    recorded = info.get("diagnostics")
    if isinstance(recorded, dict):
        return recorded
    if records["kind"] not in ("sampled", "input_dropout"):
        return {"status": "n/a", "chains": None, "draws": None,
                "reason": f"{method_label(records['method'])} draws each prediction independently: "
                          "there are no chains to compare"}
    chains, draws = next(iter(weights.values()))[:2]
    reason = why_not_measurable(chains, draws)
    if reason is not None:
        return {"status": "n/a", "chains": chains, "draws": draws, "reason": reason}
    return {"status": "not measured", "chains": chains, "draws": draws,
            "reason": "the file predates the measurement; bayescope-cli diagnose FILE adds it"}


def convergence_text(record: dict[str, Any]) -> str:
    """One line: R̂ and ESS in words, or why there are none."""
    if record.get("status") != "measured":
        return f"{record.get('status', 'not measured')}: {record.get('reason', '')}"
    rhat, bulk, tail = record.get("rhat_max"), record.get("ess_bulk_min"), record.get("ess_tail_min")
    if rhat is None:
        return "convergence measured, but every probability was the same in every draw"
    verdict = convergence_verdict(record)
    if verdict == "the chains disagree":
        verdict += ": this posterior may not have converged"
    total = (record.get("chains") or 0) * (record.get("draws") or 0)
    ess = "" if bulk is None or tail is None else f"; smallest ESS {ess_text(bulk)} bulk, {ess_text(tail)} tail, of {total:,} draws"
    if ess and not ess_estimable(record.get("draws") or 0):
        ess = f"; ESS not estimable from {plural(record.get('draws') or 0, 'draw')} per chain (needs {MIN_DRAWS_ESS})"
    stored = stored_rhat_line(record)
    return f"{verdict} (largest R̂ {rhat_with_floor(record)}{ess})" + (f". {stored}" if stored else "")



def summary(records: dict[str, Any]) -> dict[str, Any]:
    """The facts ``info`` prints, as one plain dictionary."""
    info = records["info"]
    arch = ArchSpec.from_dict(records["arch"])
    record = convergence_record(records)
    out = {
        "method": records["method"],
        "method_label": method_label(records["method"]),
        "method_words": METHOD_DESCRIPTIONS.get(records["method"], records["method"]),
        "name": info.get("name"),
        "kind": records["kind"],
        "architecture": arch.to_dict(),
        "architecture_label": ARCH_LABELS.get(arch.name, arch.name),
        "parameters": arch.parameter_count(),
        "dataset": records["dataset"],
        "tier": tiers.tier_of(info),
        "chains": record.get("chains"),
        "draws": record.get("kept_draws") or record.get("draws"),  # what the file holds, per chain
        "measured_draws": record.get("draws"),  # what its convergence was measured on, per chain
        "convergence": record,
        "part_of_run": part_of_run(info, records["config"]),
        "fit_notes": fit_lines(records["method"], info, records["config"]),
        "log_posterior_level": info.get("log_posterior_level"),
        "interval_mass": info.get("interval_mass"),
        "interval_mass_line": interval_mass_line(info),
        "acceptance": info.get("acceptance_rate"),
        "train_seconds": info.get("train_seconds"),
        "test_accuracy": info.get("test_accuracy"),
        "seed": records["seed"],
        "config": records["config"],
        "class_names": _class_names(records),
        "training_data": _readable(info.get("training_data")),
        "test_data": info.get("test_data"),
        "started_from": info.get("started_from"),
        "network": info.get("network"),  # a head on a person's own network: its checksum, layer, input
        "format_version": records["format_version"],
        "code_version": records.get("code_version"),
        "storage": records["storage"],
        "checksum": records.get("checksum"),
    }
    return _plain(out)


def _class_names(records: dict[str, Any]) -> list[str] | None:
    """The outputs' class names in output order (an older digit file's from its data set)."""
    arch = ArchSpec.from_dict(records["arch"])
    names = output_class_names(records["info"], records["dataset"], arch.num_classes)
    return None if names is None else list(names)


def _readable(record: Any) -> Any:
    """A ``training_data`` record with its packed sets of files and images given as counts."""
    if not isinstance(record, dict) or not isinstance(record.get("identity"), dict):
        return record
    identity = dict(record["identity"])
    for key in ("files", "train_images", "test_images"):
        packed = unpack(identity.get(key))
        if packed is not None:
            identity[key] = f"{len(packed)} fingerprints"
    return {**record, "identity": identity}


def part_of_run(info: dict[str, Any], config: dict[str, Any]) -> dict[str, Any] | None:
    """The chains a part of a run holds and the run's count (``train --chains``), or None for a whole run."""
    count = chains_of_run(config)
    ids = info.get("chain_ids")
    if not isinstance(ids, list) or not count or sorted(ids) == list(range(count)):
        return None
    return {"chains": sorted(int(c) for c in ids), "of": count}


def run(args: argparse.Namespace) -> int:
    facts = summary(file_records(args.file))
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    say(f"{args.file}")
    name = f" “{facts['name']}”" if facts["name"] else ""
    say(f"  method        {facts['method_label']}{name}: {facts['method_words']}")
    say(f"  architecture  {facts['architecture_label']} ({facts['parameters']:,} weights)")
    network = facts["network"]
    if isinstance(network, dict) and network.get("sha256"):
        say(f"  network       {Path(str(network.get('file', ''))).name}, split at {network.get('head')} "
            f"({network.get('features')} features; {'colour' if network.get('channels') == 3 else 'grey'} "
            f"{network.get('image_size')}×{network.get('image_size')}, mean {network.get('mean')}, std "
            f"{network.get('std')}; sha256 {str(network['sha256'])[:16]}…)")
    data, words = facts["dataset"], dataset_words(facts["dataset"])
    say(f"  trained on    {words}" + ("" if words == data else f" ({data})"))
    if facts["class_names"]:
        say(f"  classes       {', '.join(facts['class_names'])} (in output order)")
    if facts["tier"]:
        say(f"  tier          {facts['tier']}: one of a set of methods on this same model (bayescope-cli zoo)")
    if facts["chains"] is not None:
        kept = "" if facts["draws"] == facts["measured_draws"] else (
            f" (of {facts['measured_draws']:,} a chain in the run, all measured for convergence)")
        say(f"  draws         {plural(facts['chains'], 'chain')} × {plural(facts['draws'], 'draw')}{kept}")
    part = facts["part_of_run"]
    if part:
        say(f"  part of a run {chains_in_words(part['chains'])} of {part['of']} (train --chains): "
            "bayescope-cli join joins it with the others")
    say(f"  convergence   {convergence_text(facts['convergence'])}")
    probe = facts["convergence"].get("probe")
    if probe:
        say(f"                measured on {probe_words(probe)}")
    for i, line in enumerate(facts["fit_notes"]):
        say(f"  {'fit notes' if i == 0 else '':13s} {line}")
    if facts["interval_mass_line"]:
        say(f"  interval mass {facts['interval_mass_line']}")
    if facts["acceptance"] is not None:
        say(f"  acceptance    {facts['acceptance'] * 100:.0f}% of HMC's proposals")
    if facts["test_accuracy"] is not None:
        say(f"  test accuracy {facts['test_accuracy'] * 100:.2f}%")
    if facts["train_seconds"] is not None:
        say(f"  training time {facts['train_seconds']:.0f} s")
    say(f"  seed          {facts['seed']}")
    data = facts["training_data"] or {}
    if data:
        where = data.get("folder") or data.get("path") or ""
        say(f"  training data {data.get('name', '?')}, {data.get('images', '?')} images"
            + (f", from {where}" if where else ""))
    if facts["started_from"]:
        say(f"  started from  {facts['started_from'].get('method')} {facts['started_from'].get('file', '')}")
    say(f"  file          format {facts['format_version']}, written by bayescope {facts['code_version']}, "
        f"{facts['storage']} weights, {facts['checksum']}")
    return 0
