"""Time to build a feature tier: every method on a softmax-regression head over 10,000 images ×
512 features (issue 45: ≤ 15 minutes on this machine).

The images are synthetic: ``--classes`` classes of small colour PNGs (16×16), each class a
pattern plus noise, written once into a temporary folder. The network is a linear map of the
pixels to ``--features`` numbers (ReLU) and a last linear layer to the classes, saved with
torch.export (no training: the head is learnt by the tier; what is timed is the tier). Then
``bayescope-cli zoo --tier features`` runs as a person would run it, in this process: the
network is imported, every image passes through it once (features cached), and each method
trains with the paper tier's settings, HMC first as the reference, then every file is measured.
Prints the time of each phase and each method's training time (from its file), and the CPU
time of the build (this process and the worker processes ``zoo --jobs`` trains the methods in:
by default two, each at one thread, on a machine of two cores or more).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_feature_tier.py [--images 10000] [--features 512]
[--methods hmc,map,...] [--set epochs=5] [--jobs N] [--keep DIR]``. With ``--keep`` the images are written once
and reused (writing them is not part of a tier's build), while the tier's files and the feature
cache are removed before every run, so each run builds everything, features included; the figures
also go to ``DIR/bench.json``. On a machine whose cores are busy with other work the figure says
as much about that work as about the tier: note the load average it prints before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIDE = 16


def write_images(folder: Path, images: int, classes: int, seed: int = 0) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    patterns = rng.integers(0, 256, (classes, SIDE, SIDE, 3))
    for i in range(images):
        k = i % classes
        (folder / f"c{k}").mkdir(parents=True, exist_ok=True)
        noise = rng.normal(0, 60, (SIDE, SIDE, 3))
        Image.fromarray(np.clip(patterns[k] + noise, 0, 255).astype(np.uint8)).save(folder / f"c{k}" / f"{i}.png")


def write_network(path: Path, features: int, classes: int) -> None:
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(3 * SIDE * SIDE, features)
            self.fc = nn.Linear(features, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.body(x.flatten(1))))

    torch.manual_seed(0)
    model = Net().eval()
    torch.export.save(torch.export.export(model, (torch.rand(64, 3, SIDE, SIDE),)), path)
    path.with_suffix(".json").write_text(json.dumps({
        "image_size": SIDE, "mean": [0.5] * 3, "std": [0.25] * 3, "classes": [f"c{k}" for k in range(classes)]}))


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its finished child processes (the build's workers)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--methods", help="a subset of the tier's methods (default: all 13)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="zoo --set: a shorter run for a quick look (the figure is then not the tier's)")
    parser.add_argument("--jobs", type=int, help="zoo --jobs: methods trained at a time (default: zoo's)")
    parser.add_argument("--keep", metavar="DIR", help="build in DIR (kept) instead of a temporary folder")
    args = parser.parse_args()

    import torch

    from core.commands.main import main as cli

    load_before = os.getloadavg()
    print(f"load average {load_before[0]:.1f} (1 min), {load_before[1]:.1f} (5 min) on {os.cpu_count()} cores; "
          f"torch on {torch.get_num_threads()} thread(s)", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-feature-tier-") as scratch:
        base = Path(args.keep or scratch)
        base.mkdir(parents=True, exist_ok=True)
        cache, images, network, out = base / "cache", base / "images", base / "net.pt2", base / "tier"
        for built in (cache, out):  # a tier's build starts from nothing: no file and no feature kept
            shutil.rmtree(built, ignore_errors=True)
        os.environ["XDG_CACHE_HOME"] = str(cache)
        started = time.perf_counter()
        if not images.is_dir():
            write_images(images, args.images, args.classes)
        elif sum(1 for _ in images.rglob("*.png")) != args.images:
            print(f"error: {images} holds other images than --images {args.images}; remove it first")
            return 2
        write_network(network, args.features, args.classes)
        print(f"{args.images:,} images and the network ready in {time.perf_counter() - started:.0f} s "
              "(not part of the tier's build)", flush=True)
        argv = ["zoo", "--tier", "features", "--network", str(network), "--dataset", str(images), "--out", str(out)]
        argv += [*(["--methods", args.methods] if args.methods else []), *[p for s in args.set for p in ("--set", s)]]
        argv += ["--jobs", str(args.jobs)] if args.jobs else []
        started, cpu_started = time.perf_counter(), _cpu_seconds()
        code = cli(argv)
        wall, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
        if code != 0:
            print(f"zoo failed (exit {code}) after {wall / 60:.1f} min")
            return code
        rows = json.loads((out / "zoo.json").read_text())["rows"]
        print(f"\n{'method':<22} {'train s':>8}   R̂      accuracy")
        for r in rows:
            rhat = f"{r['rhat']:.3f}" if r["rhat"] is not None else "n/a"
            seconds = r["train_seconds"] if r["train_seconds"] is not None else float("nan")
            print(f"{r['label']:<22} {seconds:8.0f}   {rhat:<6} {100 * r['accuracy']:.2f} %")
        trained = sum(r["train_seconds"] or 0 for r in rows)
        load_after = os.getloadavg()
        late = [f"{r['label']} ({r['rhat']:.3f})" for r in rows if r["rhat"] is not None and r["rhat"] > 1.01]
        print(f"\nthe tier took {wall / 60:.1f} min in all against 15 min ({trained / 60:.1f} min training, the rest "
              f"features and measuring); load average now {load_after[0]:.1f} (1 min), {load_after[1]:.1f} (5 min)")
        print(f"CPU of the build: {cpu / 60:.1f} min (this process and its workers)")
        print(f"samplers above R̂ 1.01: {', '.join(late) if late else 'none'}")
        if args.keep:
            (base / "bench.json").write_text(json.dumps({
                "images": args.images, "features": args.features, "classes": args.classes,
                "threads": torch.get_num_threads(), "load_before": load_before, "load_after": load_after,
                "minutes": wall / 60, "training_minutes": trained / 60, "cpu_minutes": cpu / 60, "jobs": args.jobs,
                "rows": [{k: r[k] for k in ("method", "label", "train_seconds", "rhat", "ess_bulk", "accuracy",
                                            "chains", "measured_draws")} for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
