"""A tier's files measured: convergence, test-set quality, OOD detection, distance to the reference
and the log posterior of the draws, one row per method, and the table as Markdown (``zoo.md``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from core.commands.console import bar_callback, progress_bar
from core.commands.zoo_tiers import Tier, TierSets
from core.engine.inference import METHODS


def measure(tier: Tier, methods: list[str], folder: Path, args: argparse.Namespace,
            sets: TierSets | None = None) -> list[dict[str, Any]]:
    """One row per method: convergence, test-set quality, OOD detection and distance to the reference,
    on ``sets`` (by default the tier's own, :attr:`Tier.data`)."""
    from core.analysis.conformal_run import calibrate_evaluation
    from core.analysis.evaluation import evaluate
    from core.analysis.evaluation_results import evaluation_tables
    from core.analysis.fidelity import fidelity_to_reference
    from core.commands.info import convergence_record, summary
    from core.engine.runner import drain
    from core.engine.store import file_records, load_posterior

    paths = {m: tier.path(folder, m) for m in methods}
    posteriors = {m: load_posterior(p) for m, p in paths.items()}
    sets = tier.data.load(args) if sets is None else sets
    test, ood = sets.test, sets.ood
    bar = progress_bar(0, "evaluating")
    try:
        ev = drain(evaluate(posteriors, test, ood, seed=args.seed), bar_callback(bar))
        tables = evaluation_tables(ev)
        distance = {}
        if tier.reference in posteriors:
            others = {m: p for m, p in posteriors.items() if m != tier.reference}
            if others:
                report = drain(fidelity_to_reference((tier.reference, posteriors[tier.reference]), others, test,
                                                     seed=args.seed), bar_callback(bar))
                distance = {m: f.record() for m, f in report.results.items()}
        levels = record_levels(tier, posteriors, paths, sets.train, bar)
        masses = {}
        if tier.reference in posteriors:  # after record_levels, which rewrites the files it scores
            from core.analysis.diagnostics import probe_set
            from core.commands.fidelity import interval_masses, record_interval_masses

            others = {m: p for m, p in posteriors.items() if m != tier.reference}
            masses = interval_masses((tier.reference, posteriors[tier.reference]), others,
                                     probe_set(test), seed=args.seed, on_progress=bar_callback(bar))
            record_interval_masses(masses, paths)
        if tier.own:  # after the last rewrite of the files: a calibration names its file's SHA-256
            # A person's own tier then shows conformal sets in the window without a command to
            # run (the bundled tiers' are made by ``calibrate``, docs/zoo.md): from the tier's own
            # evaluation of its test split, no second pass. The folder's split already leaves the
            # training images out, so none are checked against.
            calibrate_evaluation(ev, test, paths, seed=args.seed)
    finally:
        bar.close()
    auroc = {(r["posterior"], r["score"]): r["auroc"] for r in tables.get("ood_detection", [])}  # none without OOD images
    rows = []
    for row in tables["summary"]:
        m = row["posterior"]
        records = file_records(paths[m])
        facts, record = summary(records), convergence_record(records)
        rows.append({
            "method": m, "label": facts["method_label"] if m in METHODS else facts["name"] or m,
            "chains": record.get("chains"),
            "draws": facts["draws"], "measured_draws": facts["measured_draws"],
            "rhat": record.get("rhat_max"), "ess_bulk": record.get("ess_bulk_min"),
            "acceptance": facts["acceptance"], "accuracy": row["accuracy"], "nll": row["nll"], "ece": row["ece"],
            "ood_auroc_total": auroc.get((m, "total")), "ood_auroc_epistemic": auroc.get((m, "epistemic")),
            **{f"to_{tier.reference}_{k}": v for k, v in distance.get(m, {}).items() if not k.startswith("per_")},
            "interval_mass": masses.get(m, {}).get("mean"), "interval_mass_p10": masses.get(m, {}).get("p10"),
            "interval_level": masses.get(m, {}).get("stated_level"),
            "log_posterior_mean": levels.get(m, {}).get("mean"), "log_posterior_sd": levels.get(m, {}).get("sd"),
            "elbo_per_epoch": records["info"].get("elbo_per_epoch"),
            "mixture_weights": records["info"].get("weights"),
            "file_mb": paths[m].stat().st_size / 1e6, "train_seconds": facts["train_seconds"],
            "command": "bayescope-cli " + " ".join(records["info"].get("zoo", {}).get("arguments", [])),
        })
    return rows


def record_levels(tier: Tier, posteriors: dict, paths: dict[str, Path], train: Any,
                  bar: Any) -> dict[str, dict[str, Any]]:
    """Where the tier's reference is among ``posteriors``: the exact log posterior of the weight
    draws of every posterior of its model and prior over the training set, the reference's own included,
    returned by method and written into each other file as ``info["log_posterior_level"]`` with
    the reference's beside it (the window's column says it). The reference's file, and files
    whose draws belong to another model or prior, are left as they are."""
    from core.analysis.fidelity import log_posterior_level, why_not_level
    from core.engine.runner import drain
    from core.engine.store import save_posterior

    if tier.reference not in posteriors:
        return {}
    ref = posteriors[tier.reference]
    scored = {m: p for m, p in posteriors.items() if why_not_level(p, ref) is None}
    prior_std = float(ref.config.get("prior_std", 1.0))
    levels = {m: drain(log_posterior_level(p, train, prior_std), bar_callback(bar)).record() for m, p in scored.items()}
    for m, posterior in scored.items():
        if m == tier.reference:
            continue
        posterior.info["log_posterior_level"] = {
            **levels[m], "data": f"the {len(train):,} training images", "prior_std": prior_std,
            "reference": {"method": tier.reference, **levels[tier.reference]}}
        storage = "float16" if "float16" in posterior.info.get("zoo", {}).get("arguments", []) else "float32"
        save_posterior(posterior, paths[m], storage=storage)
    return levels


def _cell(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _level_cell(row: dict[str, Any]) -> str:
    mean, sd = row.get("log_posterior_mean"), row.get("log_posterior_sd")
    return "n/a" if mean is None else f"{mean:,.0f} ± {sd:,.0f}".replace("-", "−")


def _mass_cell(row: dict[str, Any]) -> str:
    mean, p10, level = row.get("interval_mass"), row.get("interval_mass_p10"), row.get("interval_level")
    if mean is None:
        return "n/a"
    held = "" if level is None or round(100 * level) == 90 else f"; its interval holds {100 * level:.0f} %"
    return f"{mean:.2f} ({p10:.2f}{held})"


def markdown(tier: Tier, rows: list[dict[str, Any]]) -> str:
    """The tier's table as Markdown, one row per method."""
    ref = tier.reference
    head = ["method", "chains × draws", "R̂", "bulk ESS", "accuracy", "NLL", "ECE", "OOD AUROC (total)",
            "OOD AUROC (epistemic)"] + ([f"KL({ref} ‖ ·)", "TV", "top-class agreement",
                                         f"{ref}'s mass in its 90 % interval (10th pct.)",
                                         "log posterior of the draws"] if ref else []) + [
            "MB", "train s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        draws = f"{r['chains']} × {r['draws']}" if r["chains"] else "n/a"
        if r["chains"] and r.get("measured_draws") not in (None, r["draws"]):  # R̂ and ESS from the whole run
            draws += f" (of {r['measured_draws']:,})"
        cells = [r["label"], draws, _cell(r["rhat"]), _cell(r["ess_bulk"], 0), f"{r['accuracy'] * 100:.2f} %",
                 _cell(r["nll"]), _cell(r["ece"]), _cell(r["ood_auroc_total"]), _cell(r["ood_auroc_epistemic"])]
        if ref:
            cells += [_cell(r.get(f"to_{ref}_kl"), 4), _cell(r.get(f"to_{ref}_total_variation"), 4),
                      _cell(r.get(f"to_{ref}_agreement")), _mass_cell(r), _level_cell(r)]
        cells += [f"{r['file_mb']:.1f}", _cell(r["train_seconds"], 0)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
