"""Hernández et al., D-SGHMC, section 5.2: age groups from face descriptors, on UTKFace.

``bayescope-cli reproduce dhmc-faces --data-dir ../shared/data/utkface --out DIR`` puts the
paper's Bayesian softmax regression, p(y | d, W, b) = softmax(W d + b) with N(0, 1) priors
on W and b, on a pretrained face descriptor d and classifies the eight age groups. The
paper used ADIENCE and VGG-Face (512 features); ADIENCE cannot be obtained here, so this
runs on UTKFace's faces (ages mapped to eight contiguous groups,
:mod:`core.engine.faces.age_groups`) with dlib's 128-d ResNet descriptor, computed once and cached
(:func:`core.engine.data.utkface.load_utkface`), split 80/20 per group with a fixed seed (the
class counts are written as the paper's Table 3). Descriptors are used as they come, with
no centring or scaling, so the heads here are the heads ``train --dataset utkface`` makes.

Every method runs ``--runs`` times (5, as the paper's "5 runs"): SG-MCMC and HMC as that
many independent chains, the optimisation-based methods with that many seeds. Each run's
prediction is the mean predictive over its draws; a table gives mean ± s.d. over runs of
the test accuracy and of the within-one-group accuracy (the prediction is the true group or
a neighbour), as the paper's Table 4 reports accuracy. Two protocols:

``paper``
    The setting of the paper's code, as for its MNIST experiment (:mod:`core.commands.reproduce.dhmc`):
    SGLD (η = 10⁻⁴/(t + 1)^0.55), SGHMC and D-SGHMC (Edward's η = 10⁻⁶, friction 0.5) with
    N(0, 1) starting values, mini-batches of 100 taken in one fixed order every epoch (the
    faces are shuffled once with the seed: UTKFace's file order is sorted by age), the batch
    likelihood scaled by the number of batches, 30 draws per chain taken uniformly from all
    iterates; D-SGHMC keeps its input masks on at prediction, with the paper's keep
    probabilities p ∈ {0.1, 0.5, 0.9}, i.e. drop rates 0.9, 0.5, 0.1.
``tuned``
    Every method through its ordinary ``fit`` (what ``bayescope-cli train`` runs), with
    settings chosen for this problem
    (:data:`~core.commands.reproduce.dhmc_faces_runs.TUNED`): SGLD, SGHMC and D-SGHMC at drop rates
    0.1, 0.5 and 0.9 with shuffled batches, burn-in and evenly thinned draws; full-batch
    HMC; MC dropout (dropout on the descriptor) and mean-field VI, each from ``--runs`` seeds.

Outputs in DIR: ``class_counts.csv`` (Table 3), ``table_<protocol>.csv`` (Table 4),
``per_class_accuracy_<protocol>.csv/png`` (Fig. 11: box plots over runs),
``soft_confusion_<protocol>.csv/png`` (Fig. 10: mean predicted probability of each group
per true group, with the share of mass on or next to the diagonal),
``drop_rate_<protocol>.csv/png`` (Fig. 9: accuracy against the drop rate),
``summary.md`` and ``provenance.json``. The folder is replaced as a whole, atomically.
The protocols and their scores are in :mod:`core.commands.reproduce.dhmc_faces_runs`, the tables
and figures in :mod:`core.commands.reproduce.dhmc_faces_figures`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from core.commands.console import (
    CLUSTER_HELP,
    add_device_argument,
    check_cluster,
    chosen_device,
    cluster_for,
    say_where,
)
from core.commands.reproduce import Reproduction, register
from core.commands.reproduce.dhmc_faces_figures import mean_sd, write_outputs
from core.commands.reproduce.dhmc_faces_runs import TUNED, ProtocolResult, run_protocol
from core.engine.files import strict_json
from core.engine.inference.base import ProgressRecord

# ------------------------------------------------------------------------------ CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for the CSV, PNG and markdown files (replaced)")
    parser.add_argument("--data-dir", help="UTKFace's archive or folder (default: the user cache)")
    parser.add_argument("--protocol", choices=("paper", "tuned", "both"), default="both")
    parser.add_argument("--runs", type=int, default=5, help="runs (chains or seeds) per method")
    parser.add_argument("--epochs", type=int, default=100, help="passes over the training faces (SG-MCMC)")
    parser.add_argument("--methods", default="all",
                        help="comma-separated label prefixes, e.g. SGLD,SGHMC,D-SGHMC,HMC,MC dropout,MF-VI")
    parser.add_argument("--limit", type=int, help="use only N faces (a quick look; not the reproduction)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    add_device_argument(parser)
    parser.add_argument("--cluster", metavar="ADDRESS",
                        help=CLUSTER_HELP + " (the tuned protocol's chains and runs; the paper protocol runs here)")


def _is_ours(folder: Path) -> bool:
    try:
        return json.loads((folder / "provenance.json").read_text()).get("reproduction") == "dhmc-faces"
    except (OSError, ValueError, AttributeError):
        return False


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from core.engine.data.utkface import load_utkface
    from core.engine.files import check_output_folder, replacing_folder
    from core.engine.runner import drain

    if args.runs < 1 or args.epochs < 1:
        raise ValueError("--runs and --epochs must be at least 1")
    device = chosen_device(args)
    check_cluster(args.cluster)
    check_output_folder(args.out, _is_ours, "the reproduction")
    torch.set_num_threads(args.threads)
    methods = None if args.methods == "all" else {m.strip() for m in args.methods.split(",") if m.strip()}
    start = time.perf_counter()
    with tqdm(desc="face descriptors", unit="face", file=sys.stderr, dynamic_ncols=True) as bar:
        def show(record: ProgressRecord) -> None:
            bar.total, bar.n = record.total, record.step
            bar.refresh()

        split = drain(load_utkface(args.data_dir, limit=args.limit), show)
    info = split.table.info
    protocols = ("paper", "tuned") if args.protocol == "both" else (args.protocol,)
    results: dict[str, ProtocolResult] = {}
    say_where("Running", device)
    with tqdm(desc="dhmc-faces", unit="step", file=sys.stderr, dynamic_ncols=True) as bar:
        def progress(record: ProgressRecord) -> None:
            bar.total, bar.n = record.total, record.step
            bar.set_description_str(f"{record.phase[:40]}", refresh=False)
            bar.refresh()

        with cluster_for(args.cluster) as cluster:
            for protocol in protocols:
                results[protocol] = drain(run_protocol(protocol, split.train, split.test, info, runs=args.runs,
                                                       epochs=args.epochs, seed=args.seed, methods=methods,
                                                       device=device, executor=cluster), progress)
                for label, s in results[protocol].scores.items():
                    tqdm.write(f"{protocol:6s} {label:18s} accuracy {mean_sd(s.accuracy)} %  within one "
                               f"{mean_sd(s.within_one)} %  ({s.seconds:.0f} s)", file=sys.stderr)
    wall = time.perf_counter() - start
    facts = {"descriptor": info.describe(), "runs": args.runs, "wall_seconds": wall}
    with replacing_folder(args.out, _is_ours, "the reproduction") as tmp:
        summary = write_outputs(tmp, results, split.train, split.test, facts)
        (tmp / "summary.md").write_text(summary)
        provenance = {
            "reproduction": "dhmc-faces", "command": " ".join(sys.argv), "protocols": list(protocols),
            "runs": args.runs, "epochs": args.epochs, "seed": args.seed, "limit": args.limit,
            "tuned_settings": TUNED, "wall_seconds": round(wall, 1), "torch_threads": torch.get_num_threads(),
            "device": str(device),
            "train": {k: v for k, v in split.train.source.items()},
            "test_faces": len(split.test), "descriptor": info.to_dict(),
            "runs_config": {p: {label: {"method": run.method, **asdict(run.config)}
                                for label, run in r.runs.items()} for p, r in results.items()},
        }
        (tmp / "provenance.json").write_text(strict_json(provenance, indent=1))
    print(summary)
    return 0


register(Reproduction("dhmc-faces", "D-SGHMC paper: age groups from face descriptors (UTKFace; Table 4, Figs. 9-11)",
                      add_arguments, run))
