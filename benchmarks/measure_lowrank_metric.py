"""CPU time of one HMC transition (and one SGLD step) with the dense curvature metric against the
low-rank one, on the features tier's benchmark head (issue 45).

Builds ``measure_hmc_feature_head.py``'s 8,026 × 512 synthetic features, the mode and the curvature
there (:func:`~core.engine.inference.curvature.mode_and_curvature`, CPU time printed) and its
low-rank form (:func:`~core.engine.inference.lowrank_metric.lowrank_of_dense`: the eigendecomposition's
CPU time, the rank k the rule keeps and the spectrum's quantiles). Then, in this one process and
alternating dense / low-rank ``--rounds`` times, it times ``--reps`` HMC transitions of 8 chains at
a fixed step size and a fixed number of leapfrog steps (the same arithmetic but for the metric's
products), one metric product of each kind, and an SGLD step with the features tier's full batch.
Prints the median CPU seconds of each and the ratio low-rank / dense.

Run: ``OMP_NUM_THREADS=1 python benchmarks/measure_lowrank_metric.py [--rounds 3 --reps 3 --leapfrog 16]``.
One thread; note the load average printed with the figures (compare ratios, not seconds, on a
shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--leapfrog", type=int, default=16)
    parser.add_argument("--chains", type=int, default=8)
    args = parser.parse_args()

    import torch

    from benchmarks.measure_hmc_feature_head import feature_sets, next_value
    from core.engine.inference import hmc, sampling, sgld
    from core.engine.inference.base import Dataset
    from core.engine.inference.curvature import mode_and_curvature
    from core.engine.inference.lowrank_metric import lowrank_of_dense
    from core.engine.models import ArchSpec, build_model

    torch.set_num_threads(1)
    f, y, _, _ = feature_sets(args.features, False)
    data = Dataset(f, y, name="synthetic features")
    arch = ArchSpec("softmax", num_classes=10, input_dim=args.features)
    out: dict = {"load_before": os.getloadavg()}
    started = time.process_time()
    mode, _, dense = next_value(mode_and_curvature(arch, data, 1.0))
    out["mode and curvature cpu_s"] = round(time.process_time() - started, 1)
    started = time.process_time()
    low = lowrank_of_dense(dense)
    out["low-rank form cpu_s (L Lᵀ and eigh, float32)"] = round(time.process_time() - started, 1)
    out["low-rank"] = {k: v for k, v in low.about.items() if k in ("rank", "bulk", "ratio", "cap", "largest", "smallest")}

    c = args.chains
    generator = torch.Generator().manual_seed(0)
    z = {k: torch.randn((c, *s), generator=generator) for k, s in dense.shapes.items()}
    start = {k: mode[k] + dense.spread(z)[k] for k in mode}
    target = sampling.ModelTarget(build_model(arch), len(data), 1.0, shared_batch=True)
    batch = (data.x, data.y)
    config = hmc.HmcConfig(num_chains=c, num_leapfrog=args.leapfrog, step_size=0.1, step_size_jitter=0.0,
                           metric="curvature")
    sg_config = sgld.SgldConfig(num_chains=c, step_size=0.4, batch_size=50_000, metric="curvature")
    metrics = {"dense": dense, "lowrank": low}
    times: dict[str, dict[str, list[float]]] = {name: {"hmc transition": [], "velocity": [], "spread": [],
                                                       "sgld step": [], "gradient": []} for name in metrics}
    for _ in range(args.rounds):
        for name, metric in metrics.items():
            state = hmc.init(start, config=config, target=target, batch=batch, metric=metric)
            for _ in range(args.reps):
                t = time.process_time()
                state, _ = hmc.step(state, batch, generator, config=config, target=target)
                times[name]["hmc transition"].append(time.process_time() - t)
            for _ in range(args.reps * 4):
                t = time.process_time()
                metric.velocity(state.grad)
                times[name]["velocity"].append(time.process_time() - t)
                t = time.process_time()
                metric.spread(state.grad)
                times[name]["spread"].append(time.process_time() - t)
                t = time.process_time()
                target.log_prob_and_grad(state.params, batch)
                times[name]["gradient"].append(time.process_time() - t)
            sg_state = sgld.init(start, config=sg_config, generator=generator, metric=metric)
            for _ in range(args.reps * 4):
                t = time.process_time()
                sg_state, _ = sgld.step(sg_state, batch, generator, config=sg_config, target=target)
                times[name]["sgld step"].append(time.process_time() - t)
    medians = {name: {k: round(statistics.median(v), 4) for k, v in parts.items()} for name, parts in times.items()}
    out["median cpu_s"] = medians
    out["lowrank / dense"] = {k: round(medians["lowrank"][k] / medians["dense"][k], 3) for k in medians["dense"]}
    out["leapfrog steps a transition"] = args.leapfrog
    out["chains"] = c
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
