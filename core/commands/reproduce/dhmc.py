"""Hernández et al., D-SGHMC: softmax regression on MNIST (Table 2, the p sweep, Figs. 4–5).

``bayescope-cli reproduce dhmc-mnist --out DIR`` runs SGLD, SGHMC and D-SGHMC (at the paper's
p ∈ {0.1, 0.5, 0.9}) on softmax regression, p(y | x, W, b) = softmax(Wx + b), with N(0, 1)
priors on W and b, mini-batches of 100, 100 epochs, 5 independent chains and 30 predictive
draws per chain, under two protocols:

``paper``
    What the authors' code (Edward 1.3 ``sgld.py`` / ``sghmc.py``) ran: the first 55,000
    training images (TensorFlow's split), inputs centred by the per-pixel training mean,
    batches taken in file order every epoch, the batch likelihood scaled by the number of
    batches (550), N(0, 1) starting values; one update per batch (100 × 550 = 55,000; their
    ``n_iter = n_samples + 500`` only sizes the progress bar). SGLD:
    θ ← θ + ½ηₜ ĝ + N(0, ηₜ), ηₜ = 10⁻⁴/(t + 1)^0.55; SGHMC (Edward's ``step_size`` 10⁻⁴ ×
    0.01 = η = 10⁻⁶, friction 1): v ← ½v + η ĝ + N(0, η), θ ← θ + v; D-SGHMC the same on
    inputs masked with keep probability p (kept values scaled by 1/p), masks also on the
    test images at prediction. 30 draws are taken uniformly, with replacement, from all
    55,000 iterates (no burn-in, Edward's ``Empirical.sample``); the accuracy is that of the
    mean predictive.
``tuned``
    The same model, data and priors with sampler settings one would choose: random per-chain
    batch order, constant step sizes, half the run as burn-in, 30 draws evenly thinned from
    the rest. D-SGHMC is reported with and without masks at prediction. The step sizes
    (:data:`TUNED`) were chosen by :func:`tune_step_sizes` on a validation split, the training
    images after the first 55,000, never on test images; ``--tune`` chooses them again.

The paper's p is the keep probability of its Algorithm 1 and code, so drop rate = 1 − p.
Outputs in DIR: ``table_<protocol>.csv`` (mean ± s.d. of the accuracy over chains),
``sensitivity.csv/png`` (accuracy versus p), ``per_class_error_<protocol>.csv/png`` (box
plots over chains), ``probability_matrix_<protocol>.csv/png`` (mean predicted probability
per true class), ``summary.md``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from core.commands.console import add_device_argument, chosen_device, say_where
from core.commands.reproduce import Reproduction, register
from core.commands.reproduce.dhmc_chains import (
    ARCH,
    KEEP_PROBS,
    TUNED,
    ChainScores,
    MnistArrays,
    evaluate,
    load_mnist,
    paper_specs,
    run_group,
    tuned_specs,
)
from core.commands.reproduce.dhmc_figures import (
    plot_class_errors,
    plot_probability_matrix,
    plot_sensitivity,
    write_table,
)
from core.commands.reproduce.dhmc_tuning import TrialRow, tune_step_sizes
from core.engine.device import on_device, seeded_generator
from core.engine.inference.chains import Params

PAPER_TABLE2 = {"SGLD": (88.06, 0.18), "SGHMC": (90.94, 0.28), "D-SGHMC p=0.5": (91.72, 0.11)}


def _fmt(scores: np.ndarray) -> str:
    sd = scores.std(ddof=1) if len(scores) > 1 else 0.0
    return f"{scores.mean():.2f} ± {sd:.2f}"


# -------------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for the CSV, PNG and markdown files")
    parser.add_argument("--data-dir", help="folder holding the MNIST IDX files")
    parser.add_argument("--protocol", choices=("paper", "tuned", "both"), default="both")
    parser.add_argument("--epochs", type=int, default=100, help="passes over the 55,000 images")
    parser.add_argument("--chains", type=int, default=5, help="independent chains")
    parser.add_argument("--draws", type=int, default=30, help="predictive draws per chain")
    parser.add_argument("--train-size", type=int, default=55_000,
                        help="first N training images (TensorFlow's split: 55,000)")
    parser.add_argument("--test-limit", type=int, help="evaluate on the first N test images only")
    parser.add_argument("--tune", action="store_true",
                        help="choose the tuned protocol's step sizes first: a short trial of each "
                             "grid value scored by NLL on the validation images (the training "
                             "images after --train-size, never test images); without it the "
                             "recorded TUNED values, chosen so, are used")
    parser.add_argument("--tune-epochs", type=int, default=10, help="epochs of each trial run")
    parser.add_argument("--validation-size", type=int, default=5_000,
                        help="validation images for --tune: training images N..N+V after "
                             "--train-size N (default 5,000: the rest of MNIST's 60,000)")
    parser.add_argument("--methods", default="all",
                        help="comma-separated subset of SGLD,SGHMC,D-SGHMC (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    add_device_argument(parser)


def tune(args: argparse.Namespace, out: Path, device: torch.device) -> dict[str, float]:
    """``--tune``: :func:`tune_step_sizes` with the command's arguments; prints the trial
    table, writes it to ``out/tuning.csv`` and returns the chosen values."""
    num_validation = args.validation_size
    print(f"Tuning on training images {args.train_size:,}.. (up to {num_validation:,} of them), "
          f"{args.tune_epochs} epoch(s) and {args.chains} chain(s) per value, scored by validation NLL",
          file=sys.stderr)
    print(f"{'sampler':8s} {'step size':>10s} {'val NLL':>8s} {'s.d.':>7s} {'val acc %':>9s} {'s':>6s}")

    def report(row: TrialRow) -> None:
        print(f"{row.key.split('_')[0].upper():8s} {row.step_size:10.2g} {row.nll:8.4f} "
              f"{row.nll_sd:7.4f} {row.accuracy:9.2f} {row.seconds:6.1f}", flush=True)

    chosen, rows = tune_step_sizes(
        args.data_dir, num_train=args.train_size, num_validation=num_validation,
        epochs=args.tune_epochs, chains=args.chains, draws=args.draws, seed=args.seed,
        device=device, report=report)
    write_table(out / "tuning.csv", [asdict(r) for r in rows])
    print("Chosen: " + ", ".join(f"{k} = {v:g} (recorded {TUNED[k]:g})" for k, v in chosen.items()))
    return chosen


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    device = chosen_device(args)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    protocols = ("paper", "tuned") if args.protocol == "both" else (args.protocol,)
    wanted = None if args.methods == "all" else {m.strip() for m in args.methods.split(",")}
    tuned_values = dict(TUNED)
    if args.tune:
        if "tuned" not in protocols:
            raise ValueError("--tune chooses the tuned protocol's step sizes; use it with "
                             "--protocol tuned or both")
        tuned_values = tune(args, out, device)
    data = load_mnist(args.data_dir, args.train_size, args.test_limit)
    # the chains run where the training images are; the test images stay on the CPU for scoring
    train_data = MnistArrays(data.x_train.to(device), data.y_train.to(device), data.x_test, data.y_test)
    say_where("Running", device)
    steps_per_epoch = len(data.y_train) // 100
    plans = {}
    for protocol in protocols:
        specs = paper_specs(args.epochs) if protocol == "paper" else \
            tuned_specs(args.epochs, tuned_values)
        plans[protocol] = [s for s in specs if wanted is None or s.label.split(" p=")[0] in wanted]
    total = sum(len(v) for v in plans.values()) * args.epochs * steps_per_epoch
    start = time.perf_counter()
    results: dict[str, dict[str, ChainScores]] = {}
    rows: dict[str, list[dict]] = {}
    with tqdm(total=total, desc="dhmc-mnist", unit="step", file=sys.stderr,
              dynamic_ncols=True) as bar:
        for protocol, specs in plans.items():
            results[protocol], rows[protocol] = {}, []
            groups = [[s for s in specs if s.method == "sgld"],
                      [s for s in specs if s.method != "sgld"]]
            drawn: dict[str, tuple[Params, float]] = {}
            for i, group in enumerate(g for g in groups if g):
                generator = seeded_generator(args.seed * 1000 + i, device)
                t0 = time.perf_counter()
                with on_device(device):
                    group_draws = run_group(group, train_data, protocol=protocol, chains=args.chains,
                                            epochs=args.epochs, draws=args.draws,
                                            generator=generator, progress=bar)
                seconds = time.perf_counter() - t0
                for spec, samples in zip(group, group_draws, strict=True):
                    drawn[spec.label] = (samples, seconds)
            for spec in specs:
                samples, seconds = drawn[spec.label]
                generator = torch.Generator().manual_seed(args.seed * 1000 + 99)
                masked = spec.method == "dsghmc"
                scores = evaluate(spec, samples, data, mask_at_prediction=masked,
                                  generator=generator, device=device)
                results[protocol][spec.label] = scores
                row = {
                    "protocol": protocol, "method": spec.label,
                    "drop_rate": getattr(spec.config, "drop_rate", 0.0),
                    "step_size": spec.config.step_size,
                    "accuracy_mean": round(float(scores.accuracy.mean()), 3),
                    "accuracy_sd": round(float(scores.accuracy.std(ddof=1)), 3)
                    if args.chains > 1 else 0.0,
                    "per_chain": " ".join(f"{a:.2f}" for a in scores.accuracy),
                    "mask_at_prediction": masked,
                    "group_seconds": round(seconds, 1),
                }
                if masked:
                    clean = evaluate(spec, samples, data, mask_at_prediction=False,
                                     generator=generator, device=device)
                    row["accuracy_mask_off_mean"] = round(float(clean.accuracy.mean()), 3)
                    row["accuracy_mask_off_sd"] = round(float(clean.accuracy.std(ddof=1)), 3) \
                        if args.chains > 1 else 0.0
                else:
                    row["accuracy_mask_off_mean"] = row["accuracy_mean"]
                    row["accuracy_mask_off_sd"] = row["accuracy_sd"]
                rows[protocol].append(row)
                tqdm.write(f"{protocol:6s} {spec.label:15s} {_fmt(scores.accuracy)} %", file=sys.stderr)
            write_table(out / f"table_{protocol}.csv", rows[protocol])
            k = ARCH.num_classes
            with (out / f"per_class_error_{protocol}.csv").open("w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["method", "chain", *[f"class_{j}" for j in range(k)]])
                for label, sc in results[protocol].items():
                    for c, errs in enumerate(sc.class_error):
                        w.writerow([label, c, *[f"{e:.3f}" for e in errs]])
            with (out / f"probability_matrix_{protocol}.csv").open("w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["method", "true_class", *[f"p_{j}" for j in range(k)]])
                for label, sc in results[protocol].items():
                    for j, row_p in enumerate(sc.probability_matrix):
                        w.writerow([label, j, *[f"{v:.4f}" for v in row_p]])
            plot_class_errors(out / f"per_class_error_{protocol}.png", results[protocol],
                              f"Per-class test error over {args.chains} chains ({protocol})")
            plot_probability_matrix(out / f"probability_matrix_{protocol}.png",
                                    results[protocol], f"True vs predicted class ({protocol})")
    wall = time.perf_counter() - start
    with (out / "sensitivity.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["protocol", "keep_prob_p", "drop_rate", "accuracy_mean", "accuracy_sd"])
        for protocol, scores in results.items():
            for p in KEEP_PROBS:
                sc = scores.get(f"D-SGHMC p={p:g}")
                if sc is not None:
                    sd = sc.accuracy.std(ddof=1) if len(sc.accuracy) > 1 else 0.0
                    w.writerow([protocol, p, round(1 - p, 6), f"{sc.accuracy.mean():.3f}", f"{sd:.3f}"])
    plot_sensitivity(out / "sensitivity.png", results)
    lines = [f"# D-SGHMC on MNIST ({args.epochs} epochs, {args.chains} chains, "
             f"{args.draws} draws per chain)", ""]
    for protocol, prot_rows in rows.items():
        lines += [f"## {protocol}", "", "| method | accuracy % (mask on) | mask off | paper |",
                  "|---|---|---|---|"]
        for row in prot_rows:
            paper = PAPER_TABLE2.get(row["method"])
            ref = f"{paper[0]:.2f} ± {paper[1]:.2f}" if paper else ""
            on = f"{row['accuracy_mean']:.2f} ± {row['accuracy_sd']:.2f}"
            off = f"{row['accuracy_mask_off_mean']:.2f} ± {row['accuracy_mask_off_sd']:.2f}"
            lines.append(f"| {row['method']} | {on} | {off} | {ref} |")
        lines.append("")
    where = f"{torch.get_num_threads()} torch thread(s)" if device.type == "cpu" else str(device)
    lines.append(f"Wall time: {wall:.0f} s on {where}.")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


register(Reproduction("dhmc-mnist", "D-SGHMC paper: softmax regression on MNIST (Table 2, p sweep)",
                      add_arguments, run))

