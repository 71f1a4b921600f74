"""What float32 scoring would buy, measured, not adopted: evaluate's scores taken from the draws in
float32 (the logarithm, the products), their sums over the draws in float64 or in float32, against
today's float64 scoring, on the same posteriors and images.

For each posterior (a face head: the UTKFace test split's descriptors, ``utkface-test``; else the
first ``--images`` MNIST test images), in this process, one torch thread:

* **forward**: the plain batched forward pass, fastest of calls of 64, 256, 1,024 images and
  evaluate's own step (``bench_evaluate.py``'s floor), CPU time;
* **evaluate (float64)**: :func:`core.analysis.evaluation.evaluate` as shipped, CPU time;
* **evaluate (float32)**: the same with the scorer of :func:`float32_scorer` in its place, CPU time:
  its sums over the draws in float64 (each float32 product widened first), or in float32 too;
* each one's ratio to the forward pass, the best of ``--repeats``;
* **largest change**: the largest absolute difference between the two runs in any per-image
  number evaluate reports (p̄ and the six scores) and in any number of its tables
  (:func:`core.analysis.evaluation_results.evaluation_tables`: accuracy, NLL, ECE, Brier, AUROC ...),
  and how many images' predicted class or chains' predictions changed.

The product keeps float64 scoring (the 1e-12 bound of ``tests/core/test_evaluation_batching.py``;
stored draws since from their logits, exact against mpmath: ``tests/core/test_scores_from_logits.py``);
this script measures the alternative for whoever decides.

Run: ``python benchmarks/bench_score_precision.py [--data-dir ../shared/data] [--images 10000]
[--repeats 5] [--only FILE ...]``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_FILES = ("faces_softmax_hmc.pt", "faces_softmax_sghmc.pt", "faces_softmax_sgld.pt",
                 "faces_softmax_ensemble.pt", "faces_softmax_map.pt", "paper_softmax_hmc.pt",
                 "paper_softmax_sghmc.pt")


def float32_scorer(wide_sums: bool = True):
    """The scorer class with its passes over the draws in float32, and its sums over the draws
    in float64 (``wide_sums``: each float32 product converted before a float64 product with a
    row of ones) or in float32 (a float32 product, the result then widened)."""
    import torch

    from core.analysis import scoring

    class Float32Scorer(scoring.PartScorer):
        def __init__(self, chains, num_classes, images, bins=scoring.DEFAULT_BINS) -> None:
            super().__init__(chains, num_classes, images, bins)
            s = len(chains)
            self.ones32 = torch.ones(1, s, dtype=torch.float32)
            self.temporary = torch.empty(s, images * num_classes, dtype=torch.float32)
            self.wide = torch.empty(s, images * num_classes, dtype=torch.float64)

        def score(self, part, logits=False):
            s, n, k = part.shape
            if s == 1 or self.num_chains == s:  # one draw, or one draw a chain: nothing to gain
                return super().score(part, logits)
            if logits:  # stored draws hand their logits: the float32 softmax, as predict_proba takes it
                part = torch.softmax(part, -1)
            p = part.reshape(s, n * k)  # float32 as predicted (a copy only of a strided part)
            # p̄ and each chain's sums: float32 rows multiplied in float32 but summed by the
            # product's float32 accumulator would lose digits over hundreds of draws, so the
            # sums over the draws run in float64 on the float32 values (one conversion pass)
            d = self.draws[: s * n * k].view(s, n * k)
            if wide_sums:
                d.copy_(p)
                mean = ((self.ones @ d) / s).view(n, k)
            else:
                mean = ((self.ones32 @ p).double() / s).view(n, k)
            if not math.isfinite(float(mean.sum())):
                return None
            order = scoring.ClassOrder(mean)
            if self.num_chains == 1:
                chain_preds = order.first.unsqueeze(0)
            else:
                sums = self.member @ d if wide_sums else (self.member.float() @ p).double()
                chain_preds = scoring.first_argmax((sums / self.chain_counts).view(-1, n, k))
            top = order.top_two()
            # the same bins as float64 values give: a float32 value is exactly a float64 one
            pair = p.view(s, n, k).gather(-1, top.unsqueeze(0).expand(s, n, 2)).double()
            which = pair.mul_(self.bins).clamp_(0, self.bins - 1).long()
            which += self.cells[:n]
            counts = torch.bincount(which.view(-1), minlength=2 * n * self.bins).view(n, 2, self.bins)
            fractions = counts.float() / s
            overlap = (fractions[:, 0] * fractions[:, 1]).sqrt_().sum(-1).double()
            t = self.temporary[:, : n * k]
            sums = self.sums[: 3 * n * k].view(3, n * k)
            torch.clamp_min(mean.view(1, -1), scoring._TINY, out=sums[:1]).log_().mul_(mean.view(1, -1))
            # p log p in float32 (its logarithm a third of float64's), summed in float64
            wide = self.wide[:, : n * k]
            torch.clamp_min(p, float(torch.finfo(torch.float32).tiny), out=t).log_().mul_(p)
            if wide_sums:
                torch.mm(self.ones, wide.copy_(t), out=sums[1:2])
            else:
                sums[1:2] = self.ones32 @ t
            torch.mul(p, p, out=t)
            if wide_sums:
                torch.mm(self.ones, wide.copy_(t), out=sums[2:])
            else:
                sums[2:] = self.ones32 @ t
            sums[2:].view(-1).sub_(mean.view(-1).square().mul_(s))
            per_image = (sums.view(3 * n, k) @ self.ones_k).view(3, n)
            total = per_image[0].neg() + 0.0
            aleatoric = per_image[1].div(-s) + 0.0
            scores = torch.stack([total, aleatoric, (total - aleatoric).clamp_min_(0) + 0.0,
                                  per_image[2].div_(s).clamp_min_(0), 1 - order.largest, overlap])
            return mean, scores, chain_preds

    return Float32Scorer


def _table_numbers(ev) -> dict[str, float]:
    """Every number of evaluate's tables, by table, row and column."""
    from core.analysis.evaluation_results import evaluation_tables

    out: dict[str, float] = {}
    for name, rows in evaluation_tables(ev).items():
        for i, row in enumerate(rows):
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    out[f"{name}[{i}].{key}"] = float(value)
    return out


def measure(path: Path, data, repeats: int) -> dict:
    import numpy as np
    from bench_evaluate import _forward_seconds

    from core.analysis import scoring, streaming
    from core.analysis.evaluation import evaluate
    from core.engine.runner import drain
    from core.engine.store import load_posterior

    posterior = load_posterior(path)
    s = len(streaming.chain_ids(posterior))
    block = max(1, streaming.SAMPLE_BUDGET // s)
    fixed = streaming.draws_fixed(posterior)
    step = streaming.step_images(posterior, s, block, fixed)
    shipped = streaming.PartScorer
    variants = {"f64": shipped, "f32_wide": float32_scorer(True), "f32": float32_scorer(False)}

    def run(scorer):
        streaming.PartScorer = scorer
        try:
            start = time.process_time()
            ev = drain(evaluate({"p": posterior}, data))
            return time.process_time() - start, ev
        finally:
            streaming.PartScorer = shipped

    for scorer in variants.values():  # warm up each
        run(scorer)
    forward: list[float] = []
    seconds: dict[str, list[float]] = {key: [] for key in variants}
    runs = {}
    for _ in range(repeats):  # taken in turn, so a busy spell weighs on all alike
        forward.append(_forward_seconds(posterior, data.x, None, block, step, fixed)[1])
        for key, scorer in variants.items():
            spent, runs[key] = run(scorer)
            seconds[key].append(spent)
    out = {"file": path.name, "draws": s, "images": len(data), "forward": min(forward)}
    a = runs["f64"].results["p"].data
    ta = _table_numbers(runs["f64"])
    for key in ("f32_wide", "f32"):
        b = runs[key].results["p"].data
        gaps = {"mean_proba": float(np.abs(a.mean_proba - b.mean_proba).max()),
                **{k: float(np.abs(a.scores[k] - b.scores[k]).max()) for k in scoring.SCORES}}
        worst = max(gaps, key=gaps.get)
        tb = _table_numbers(runs[key])
        changes = {name: abs(ta[name] - tb[name]) for name in ta.keys() & tb.keys()}
        worst_table = max(changes, key=changes.get) if changes else "-"
        out[key] = {"seconds": min(seconds[key]), "per_image": gaps[worst], "worst": worst,
                    "table": changes.get(worst_table, 0.0), "worst_table": worst_table,
                    "classes_changed": int((a.predictions != b.predictions).sum()),
                    "chains_changed": int((a.chain_predictions != b.chain_predictions).sum())}
    out["f64"] = {"seconds": min(seconds["f64"])}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--images", type=int, default=10000, help="MNIST test images (the faces: all 4,741)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=list(DEFAULT_FILES))
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from core.analysis.evaluation import FACE_TEST_SET, resolve_dataset
    from core.engine.resources import bundled_face_posteriors, bundled_posteriors

    paths = [p for p in [*bundled_posteriors(), *bundled_face_posteriors()] if p.name in args.only]
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; 1 torch thread; CPU time, best of "
          f"{args.repeats}")
    print("| posterior | draws | images | forward (ms) | float64 (today): evaluate (ms), ratio "
          "| float32, float64 sums: evaluate (ms), ratio, largest change per image, in a table "
          "| float32 throughout: evaluate (ms), ratio, largest change per image, in a table, classes changed |")
    print("| --- | ---: | ---: | ---: | --- | --- | --- |")
    sets = {}
    for path in paths:
        face = path.name.startswith("faces_")
        key = FACE_TEST_SET if face else "mnist-test"
        if key not in sets:
            sets[key] = resolve_dataset(key, args.data_dir)
        data = sets[key] if face else sets[key].first(args.images)
        r = measure(path, data, args.repeats)
        fw = r["forward"]
        cells = [f"{1e3 * r['f64']['seconds']:.1f}, {r['f64']['seconds'] / fw:.2f}"]
        for key in ("f32_wide", "f32"):
            v = r[key]
            cells.append(f"{1e3 * v['seconds']:.1f}, {v['seconds'] / fw:.2f}, {v['per_image']:.1e} ({v['worst']}), "
                         f"{v['table']:.1e} ({v['worst_table']})"
                         + (f", {v['classes_changed']} images / {v['chains_changed']} chain predictions"
                            if key == "f32" else ""))
        print(f"| {r['file']} | {r['draws']} | {r['images']:,} | {1e3 * fw:.1f} | " + " | ".join(cells) + " |",
              flush=True)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
