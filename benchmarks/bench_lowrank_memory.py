"""sN-VI on LeNet (P ≈ 431k) stays O(P·K) in memory: it never builds a P×P matrix.

For each rank K, in a fresh process, one training step (2 paired draws, batch 32) and one
log q(θ) evaluation are run under a dispatch mode that records the largest tensor any op
returns, and the peak resident memory is read before and after. A dense covariance would
hold P² ≈ 1.9·10¹¹ floats (≈ 743 GB in float32).

Run: ``python benchmarks/bench_lowrank_memory.py [--ranks 1 4 16 64]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages


def measure(rank: int) -> dict:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from core.engine.inference import snvi
    from core.engine.models import ArchSpec

    torch.set_num_threads(1)

    class MaxNumel(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor):
                    self.largest = max(self.largest, t.numel())
            return out

    config = snvi.SnviConfig(rank=rank, num_samples=2, batch_size=32, epochs=1)
    state = snvi.init(config, ArchSpec("lenet"), num_train=60000, seed=0)
    p = state.layout.size
    batch = (torch.rand(32, 1, 28, 28), torch.randint(0, 10, (32,)))
    g = torch.Generator().manual_seed(0)
    snvi.step(state, batch, g, config)  # warm-up: optimiser state, allocator
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with MaxNumel() as probe:
        start = time.perf_counter()
        snvi.step(state, batch, g, config)
        step_s = time.perf_counter() - start
        state.variational.log_prob(torch.zeros(4, p))
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "rank": rank,
        "P": p,
        "largest_tensor_elements": probe.largest,
        "P_times_K": p * rank,
        "largest_over_P2": probe.largest / p**2,
        "peak_rss_MB": rss_after / 1024,
        "rss_growth_in_step_MB": (rss_after - rss_before) / 1024,
        "variational_params_MB": sum(t.numel() for t in state.variational.parameters()) * 4 / 2**20,
        "step_seconds": step_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one)))
        return 0
    print(
        "| K | P | largest tensor (elements) | P·K | largest / P² | peak RSS (MB) | q params (MB) | step (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k in args.ranks:
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(k)], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {r['rank']} | {r['P']} | {r['largest_tensor_elements']} | {r['P_times_K']} | "
            f"{r['largest_over_P2']:.1e} | {r['peak_rss_MB']:.0f} | {r['variational_params_MB']:.1f} | "
            f"{r['step_seconds']:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
