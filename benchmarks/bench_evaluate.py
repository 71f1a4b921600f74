"""Data-set evaluation of every bundled posterior against its plain batched forward pass.

For each bundled posterior, in a process of its own (so its peak memory is its own), on the
first ``--images`` MNIST test images (a face head: the first of the UTKFace test split's
descriptors, ``utkface-test``, 4,741 at most) with the posterior's own number of draws (or
``--samples``):

* **evaluate**: :func:`core.analysis.evaluation.evaluate` drained, as the command line and the
  Dataset tab run it (predictions, every score, each chain's predictions);
* **forward** (the floor): the posterior's ``predict_proba`` (its float32 softmax included)
  of the same draws over the same images and nothing else, timed in the same process. A
  posterior with stored draws (HMC, SG-MCMC, ensembles, MAP) predicts the images in calls of
  64, 256 and 1,024 images no larger than evaluate's own step (whose bytes ``STEP_BYTES``
  bounds) and of that step, and the fastest of these call sizes counts; one that draws at
  prediction (dropout masks, weight draws) makes evaluate's own calls, block by block with
  each block's generator, since those calls are the draws evaluate makes;
* **ratio**: evaluate / forward, each the best of ``--repeats`` runs taken alternately, so
  that a busy spell of the machine (shared by other work) weighs on both alike; and the same
  ratio of the process's CPU time, which waiting for a core shared with other work does not
  count (with one thread, the steadier of the two on a loaded machine).

Prints one Markdown row per posterior with the peak resident memory after the first
evaluation (before any plain forward pass), the run's own memory (the rise of the peak over
that evaluation, Linux) beside the estimate the memory check weighs before the first image
(:func:`core.analysis.evaluation.run_bytes`), and the load average before and after. With ``--tab`` it also times the Dataset tab's work for the default columns
(:func:`core.outputs.evaluation_cache.evaluate_dataset`, no cache) on the whole MNIST test set
plus notMNIST, by the clock and by the process's CPU time. With ``--parts`` it prints a second
table: where evaluate's CPU time goes, its own calls of the forward pass and of the scorer timed
inside it (``predict_logits`` or ``predict_proba``, whichever it calls; the scorer's set-up and
``PartScorer.score``), the rest (the checks, the memory estimate, the steps' own work, the
results), against the forward floor, and the scorer's time per draw-image-class value.

Run: ``nice python benchmarks/bench_evaluate.py [--data-dir ../shared/data] [--images 1000]
[--repeats 3] [--threads 2] [--device cpu|cuda|auto] [--only FILE ...] [--tab] [--parts]``.
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

#: Images per call tried for the forward floor of a posterior with stored draws.
FORWARD_CALLS = (64, 256, 1024)


def _forward_seconds(posterior, x, num_samples, block: int, step: int, fixed: bool) -> tuple[float, float]:
    """One plain forward pass of the draws over ``x``: the fastest plan (see the module doc),
    in seconds of the clock and of this process's CPU time."""
    import torch

    from core.analysis.evaluation import batch_generator

    best, best_cpu = float("inf"), float("inf")
    # no call larger than evaluate's step, which STEP_BYTES bounds: a LeNet's 100 draws over
    # 1,024 images held 4 GB, the benchmark's own peak, not evaluate's (evaluate: 0.4 GB)
    plans = sorted({size for size in FORWARD_CALLS if size <= step} | {step}) if fixed else [block]
    for size in plans:
        draw = batch_generator(0, 0)
        start, cpu = time.perf_counter(), time.process_time()
        with torch.no_grad():
            for i in range(0, len(x), size):
                posterior.predict_proba(x[i : i + size], num_samples=num_samples,
                                        generator=None if fixed else draw(i // size))
        best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - cpu)
    return best, best_cpu


def _status_mb(field: str) -> float | None:
    """``VmRSS`` or ``VmHWM`` (the peak since the last :func:`_reset_peak`) of this process in
    MB, from /proc/self/status; None where there is none (not Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Start this process's peak resident memory (VmHWM) afresh at its present size (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def measure_one(path: str, data_dir: str, images: int, samples: int | None, threads: int, repeats: int,
                device: str = "cpu", dataset: str = "mnist-test", parts: bool = False) -> dict:
    import torch

    torch.set_num_threads(threads)
    from core.analysis.evaluation import evaluate, resolve_dataset, run_bytes
    from core.analysis.streaming import SAMPLE_BUDGET, chain_ids, draws_fixed, step_images
    from core.engine.device import resolve_device
    from core.engine.runner import drain
    from core.engine.store import load_posterior

    posterior = load_posterior(path, device=resolve_device(device))
    data = resolve_dataset(dataset, data_dir).first(images)
    s = len(chain_ids(posterior, samples))
    block = max(1, SAMPLE_BUDGET // s)
    fixed = draws_fixed(posterior)
    step = step_images(posterior, s, block, fixed)
    # what the run itself holds: the rise of the peak from here over the first evaluation,
    # before any plain forward pass, against the estimate the memory check weighs up front
    estimate, _ = run_bytes([("p", posterior, block)], [len(data)], samples)
    base = _status_mb("VmRSS") if _reset_peak() else None
    drain(evaluate({"p": posterior}, data.first(min(images, 2 * step)), num_samples=samples))  # warm up
    evaluate_s, forward_s, evaluate_cpu, forward_cpu = [], [], [], []
    run_mb = None
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        ev = drain(evaluate({"p": posterior}, data, num_samples=samples))
        evaluate_s.append(time.perf_counter() - start)
        evaluate_cpu.append(time.process_time() - cpu)
        if run_mb is None:
            peak = _status_mb("VmHWM")
            run_mb = peak - base if base is not None and peak is not None else float("nan")
            evaluate_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
        clock, cpu = _forward_seconds(posterior, data.x, samples, block, step, fixed)
        forward_s.append(clock)
        forward_cpu.append(cpu)
    result = ev.results["p"].data
    timed = _timed_parts(posterior, data, samples, repeats) if parts else None
    return {"parts": timed, "values": len(data) * result.num_samples * posterior.num_classes,
            "file": Path(path).name, "draws": result.num_samples, "images": len(data),
            "draws_at_prediction": not fixed, "step": min(step, len(data)),
            "evaluate_s": min(evaluate_s), "forward_s": min(forward_s), "peak_mb": evaluate_peak,
            "run_mb": run_mb, "estimate_mb": estimate / 2**20,
            "evaluate_cpu_s": min(evaluate_cpu), "forward_cpu_s": min(forward_cpu),
            "accuracy": float((result.predictions == result.labels).mean())}


def _timed_parts(posterior, data, samples, repeats: int) -> dict:
    """evaluate's CPU time split into its own forward calls, its scoring and the rest (ms, each
    from the run of least total time): the posterior's prediction method evaluate calls, and
    :class:`~core.analysis.scoring.PartScorer`'s construction and
    :meth:`~core.analysis.scoring.PartScorer.score`, wrapped with CPU timers in this process."""
    import core.analysis.scoring as scoring
    from core.analysis.evaluation import evaluate
    from core.analysis.streaming import scored_from_logits
    from core.engine.runner import drain

    spent = {"forward": 0.0, "scoring": 0.0}

    def timed(fn, key):
        def wrapped(*args, **kwargs):
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.process_time() - start
        return wrapped

    name = "predict_logits" if scored_from_logits(posterior) else "predict_proba"
    setattr(posterior, name, timed(getattr(posterior, name), "forward"))  # this instance only
    scoring.PartScorer.__init__ = timed(scoring.PartScorer.__init__, "scoring")  # the scorer's set-up
    scoring.PartScorer.score = timed(scoring.PartScorer.score, "scoring")
    best = None
    for _ in range(repeats):
        spent.update(forward=0.0, scoring=0.0)
        start = time.process_time()
        drain(evaluate({"p": posterior}, data, num_samples=samples))
        total = time.process_time() - start
        if best is None or total < best["evaluate"]:
            best = {"evaluate": total, **spent}
    delattr(posterior, name)
    return {key: 1e3 * value for key, value in best.items()}


def measure_tab(data_dir: str, threads: int) -> dict:
    """The Dataset tab's work for the default columns: the whole MNIST test set plus notMNIST."""
    import torch

    torch.set_num_threads(threads)
    from app.settings import DEFAULT_COLUMNS  # the window's own list
    from core.analysis.dataset import EvaluationItem, load_sets
    from core.engine.resources import bundled_posteriors
    from core.engine.runner import drain
    from core.engine.store import load_posterior
    from core.outputs.evaluation_cache import evaluate_dataset

    paths = [p for name in DEFAULT_COLUMNS for p in bundled_posteriors() if p.name == name]
    items = [EvaluationItem(Path(p).stem, load_posterior(p), str(p)) for p in paths]
    data, ood = load_sets("mnist-test", "notmnist", data_dir, None)
    start, cpu = time.perf_counter(), time.process_time()
    drain(evaluate_dataset(items, data, ood, use_cache=False))
    return {"columns": [Path(p).name for p in paths], "images": len(data), "ood_images": len(ood),
            "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--images", type=int, default=1000, help="MNIST test images for each posterior")
    parser.add_argument("--samples", type=int, help="draws (default: each posterior's own)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, the best counts")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="where the posteriors predict (auto, cpu, cuda[:N], mps)")
    parser.add_argument("--only", nargs="*", help="file names of the posteriors to measure (default: all)")
    parser.add_argument("--tab", action="store_true", help="also time the Dataset tab's default columns")
    parser.add_argument("--parts", action="store_true",
                        help="also print where evaluate's CPU time goes (its forward calls, its scoring, the rest)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", default="mnist-test", help=argparse.SUPPRESS)
    parser.add_argument("--tab-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.data_dir, args.images, args.samples, args.threads,
                                     args.repeats, args.device, args.dataset, args.parts)))
        return 0
    if args.tab_only:
        print(json.dumps(measure_tab(args.data_dir, args.threads)))
        return 0
    from core.analysis.evaluation import FACE_TEST_SET
    from core.engine.device import describe_device, resolve_device
    from core.engine.resources import bundled_face_posteriors, bundled_posteriors

    where = describe_device(resolve_device(args.device))
    faces = bundled_face_posteriors()
    paths = [*bundled_posteriors(), *faces]
    if args.only:
        paths = [p for p in paths if p.name in args.only]
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs; "
          f"{args.threads} torch threads; best of {args.repeats}; predicting on {where}")
    print("forward: the posterior's predict_proba (its softmax included) over the same images and draws and "
          "nothing else; stored draws in calls of 64, 256 and 1,024 images and of evaluate's step, the fastest "
          "of these call sizes counting; draws made at prediction in evaluate's own blocks. ratio: evaluate "
          "÷ forward, each the best of its runs.")
    print("| posterior | draws | images | images a step | evaluate (s) | forward (s) | ratio | ratio of CPU time "
          "| images/s | peak memory (MB) | run's memory (MB) | estimated (MB) | accuracy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for path in paths:
        command = [sys.executable, __file__, "--one", str(path), "--data-dir", args.data_dir,
                   "--images", str(args.images), "--threads", str(args.threads), "--repeats", str(args.repeats),
                   "--device", args.device, "--dataset", FACE_TEST_SET if path in faces else "mnist-test"]
        if args.samples:
            command += ["--samples", str(args.samples)]
        if args.parts:
            command.append("--parts")
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        draws = f"{r['draws']}" + (" (drawn)" if r["draws_at_prediction"] else "")
        print(f"| {r['file']} | {draws} | {r['images']:,} | {r['step']:,} | {r['evaluate_s']:.2f} "
              f"| {r['forward_s']:.2f} | {r['evaluate_s'] / r['forward_s']:.2f} "
              f"| {r['evaluate_cpu_s'] / r['forward_cpu_s']:.2f} "
              f"| {r['images'] / r['evaluate_s']:,.0f} | {r['peak_mb']:.0f} | {r['run_mb']:.0f} | {r['estimate_mb']:.0f} "
              f"| {100 * r['accuracy']:.2f} % |",
              flush=True)
    if args.parts:
        print("\nWhere evaluate's CPU time goes (ms of CPU time, the run of least total of "
              f"{args.repeats}): its forward calls (predict_logits for the posteriors scored from their "
              "logits, without the softmax, which the scorer takes; else predict_proba), its scoring (the "
              "scorer's set-up and its score calls), the rest (checks, the memory estimate, the steps' "
              "own work, the results); the floor as above:\n")
        print("| posterior | evaluate | its forward calls | its scoring | the rest | forward floor "
              "| scoring a value (ns) | ratio of CPU time |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            t = r["parts"]
            floor = 1e3 * r["forward_cpu_s"]
            print(f"| {r['file']} | {t['evaluate']:.1f} | {t['forward']:.1f} | {t['scoring']:.1f} "
                  f"| {t['evaluate'] - t['forward'] - t['scoring']:.1f} | {floor:.1f} "
                  f"| {1e6 * t['scoring'] / r['values']:.2f} | {t['evaluate'] / floor:.2f} |", flush=True)
    if args.tab:
        out = subprocess.run([sys.executable, __file__, "--tab-only", "--data-dir", args.data_dir,
                              "--threads", str(args.threads)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"Dataset tab, default columns ({', '.join(r['columns'])}) on {r['images']:,} MNIST test images "
              f"+ {r['ood_images']:,} notMNIST images: {r['seconds']:.1f} s ({r['cpu_seconds']:.1f} s of CPU time)")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
