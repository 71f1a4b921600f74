"""What the per-input numbers hold at a given number of draws (the tables of docs/uncertainty.md).

1. The 90% interval's expected coverage from S draws: the old one (``torch.quantile``'s linear
   interpolation; exact for uniform draws, simulated for a normal and a Beta(0.3, 3)) and the
   one shown now (order statistics, :func:`core.analysis.uncertainty.expected_coverage`).
2. How low the mutual information reads from 8, 30 and 100 draws against 1000 draws, on the
   bundled MC-dropout and MF-VI LeNets (20 random subsets of the 1000 per count).
3. The share of the bundled D-SGHMC LeNet's mutual information that is input-mask noise
   (:func:`core.analysis.predictive.input_mask_split` with 256 masks per draw).

Run: ``python benchmarks/measure_draw_counts.py --data-dir ../shared/data [--images 200]``.
Predicts in batches of 10 images: 1000 draws of a LeNet for 200 images at once would need
about 17 GB.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages

from core.analysis.evaluation import resolve_dataset  # noqa: E402
from core.analysis.predictive import input_mask_split  # noqa: E402
from core.analysis.uncertainty import expected_coverage, mutual_information  # noqa: E402
from core.engine.resources import resources_dir  # noqa: E402
from core.engine.store import load_posterior  # noqa: E402

REPEATS = 20_000


def coverage_table() -> None:
    print("S | old, uniform (exact) | old, normal | old, Beta(0.3, 3) | new")
    for s in (2, 5, 8, 10, 19, 20, 30, 50, 100):
        row = [f"{(s - 1) * 0.9 / (s + 1):.3f}"]
        for dist in (stats.norm(), stats.beta(0.3, 3)):
            x = torch.as_tensor(dist.rvs(size=(s, REPEATS), random_state=s))
            q = torch.quantile(x, torch.tensor([0.05, 0.95], dtype=x.dtype), dim=0)
            row.append(f"{float((dist.cdf(q[1].numpy()) - dist.cdf(q[0].numpy())).mean()):.3f}")
        print(f"{s} | " + " | ".join(row) + f" | {expected_coverage(s, 0.9):.3f}")


def mutual_information_bias(data) -> None:
    for name in ("network_lenet5_mc_dropout", "network_lenet5_mfvi"):
        posterior = load_posterior(resources_dir() / "models" / f"{name}.pt")
        g = torch.Generator().manual_seed(0)
        big = torch.cat([posterior.predict_proba(data.x[i:i + 10], 1000, g).double()
                         for i in range(0, len(data), 10)], 1)
        reference = mutual_information(big).sum()
        low = {}
        for s in (8, 30, 100):
            subsets = [mutual_information(big[torch.randperm(1000, generator=g)[:s]]).sum() for _ in range(20)]
            low[s] = 100 * (1 - float(torch.stack(subsets).mean() / reference))
        print(f"{name}: mean MI of 1000 draws {float(reference) / len(data):.4f} nats; "
              + ", ".join(f"{s} draws {v:.1f}% low" for s, v in low.items()))


def mask_share(data) -> None:
    posterior = load_posterior(resources_dir() / "models" / "network_lenet5_dsghmc.pt")
    g = torch.Generator().manual_seed(0)
    plain, weights, masks = 0.0, 0.0, 0.0
    for i in range(len(data)):
        x = data.x[i:i + 1]
        plain += float(mutual_information(posterior.predict_proba(x, None, g)[:, 0].double()))
        split = input_mask_split(posterior, x, None, g, masks=256)
        weights, masks = weights + split.weights, masks + split.input_masks
    n = len(data)
    print(f"D-SGHMC LeNet ({posterior.num_samples} draws): plain MI {plain / n:.4f} nats; "
          f"weights {weights / n:.4f} + input masks {masks / n:.4f}; masks' share {100 * masks / (weights + masks):.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder holding mnist/")
    parser.add_argument("--images", type=int, default=200)
    args = parser.parse_args()
    data = resolve_dataset("mnist-test", args.data_dir).first(args.images)
    coverage_table()
    mutual_information_bias(data)
    mask_share(data)


if __name__ == "__main__":
    main()
