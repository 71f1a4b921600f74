"""Data-set evaluation speed and memory of every bundled posterior (the Dataset tab's work).

Each posterior runs in its own process (so its peak memory is its own) through
:func:`core.outputs.evaluation_cache.evaluate_dataset` without the cache: the CLI's batches
(``SAMPLE_BUDGET // S`` images), ``S`` draws per image, the MNIST test images. Prints one
Markdown row per posterior: draws used, images, seconds (wall and CPU, both threads together),
images per second, the peak resident
memory of the process and how much it grew during the evaluation (the streaming keeps one
batch of S×B×K probabilities, never S×N×K).

Run: ``nice python benchmarks/bench_evaluate.py --data-dir ../shared/data [--images 2000]
[--default-images 10000] [--samples 30] [--threads 2] [--device auto|cpu|cuda[:N]|mps]``. The
default posterior (MC-dropout LeNet) runs on ``--default-images`` (the full test set), the
others on ``--images``; ``--device`` (default cpu) is where the posteriors predict, so that
``--device cuda`` on a GPU machine measures the GPU path against the CPU's rows.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rss_mb() -> float:
    """Resident memory now (Linux /proc), in MB."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_one(path: str, data_dir: str, images: int, samples: int, threads: int, device: str = "cpu") -> dict:
    import torch

    from core.engine.device import resolve_device

    torch.set_num_threads(threads)
    from core.analysis.dataset import EvaluationItem, load_sets
    from core.engine.naming import posterior_title, samples_used
    from core.engine.runner import drain
    from core.engine.store import load_posterior
    from core.outputs.evaluation_cache import evaluate_dataset

    posterior = load_posterior(path, device=resolve_device(device))
    data, _ = load_sets("mnist-test", None, data_dir, images)
    title = posterior_title(posterior, samples_used(posterior, samples))
    item = EvaluationItem(title, posterior, path)
    before = _rss_mb()
    cpu_before = _cpu_seconds()
    start = time.perf_counter()
    views = drain(evaluate_dataset([item], data, None, num_samples=samples, use_cache=False))
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_before
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    row = views.columns[0].summary
    return {"posterior": title, "file": Path(path).name, "draws": row["samples"], "images": len(data),
            "seconds": seconds, "cpu_seconds": cpu, "images_per_s": len(data) / seconds, "peak_mb": peak,
            "growth_mb": peak - before, "accuracy": row["accuracy"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--images", type=int, default=2000, help="test images for each posterior")
    parser.add_argument("--default-images", type=int, default=10000, help="test images for the default posterior")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="where the posteriors predict (auto, cpu, cuda[:N], mps)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", help="file names of the posteriors to measure (default: all)")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.data_dir, args.images, args.samples, args.threads, args.device)))
        return 0
    from core.engine.device import describe_device, resolve_device

    where = describe_device(resolve_device(args.device))
    from core.engine.resources import bundled_posteriors

    paths = bundled_posteriors()
    if args.only:
        paths = [p for p in paths if p.name in args.only]
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs; "
          f"{args.threads} torch threads; {args.samples} draws asked; predicting on {where}")
    print("| posterior | draws | images | seconds | CPU seconds | images/s | peak memory (MB) | growth (MB) "
          "| accuracy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, path in enumerate(paths):
        images = args.default_images if i == 0 else args.images
        out = subprocess.run([sys.executable, __file__, "--one", str(path), "--data-dir", args.data_dir,
                              "--images", str(images), "--samples", str(args.samples),
                              "--threads", str(args.threads), "--device", args.device],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {r['posterior']} | {r['draws']} | {r['images']:,} | {r['seconds']:.1f} | {r['cpu_seconds']:.0f} "
              f"| {r['images_per_s']:.0f} "
              f"| {r['peak_mb']:.0f} | {r['growth_mb']:.0f} | {100 * r['accuracy']:.2f} % |", flush=True)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
