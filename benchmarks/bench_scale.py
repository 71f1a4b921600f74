"""Scale: chains and ensemble members vectorised against one at a time, and evaluation
of every bundled digit posterior against a plain batched forward pass.

All in one run, on MNIST from the shared data folder:

(a) SGLD, 4 chains, a fixed number of steps, on softmax regression and on LeNet: the
    chains vectorised (one ``fit``, the chains stacked under ``vmap``) against the same 4
    chains run one after another (``fit(..., chains=(c,))``, the very same chains: see
    ``tests/core/test_chains.py``). Time per step each way and the speed-up.
(b) A deep ensemble of 4 members, side by side (``train_side_by_side``) against one by one
    (``train_one_by_one``), softmax regression and LeNet: time per step and speed-up.
(c) Every bundled digit posterior (``paper_*.pt``, ``network_*.pt``): ``predict_proba`` of N test images with S draws
    (S = what the posterior uses when 30 are asked) against one plain forward pass of the
    same architecture on a batch of N·S images (the same number of network evaluations,
    no sampling, no stacking), median of repeats; the ratio and whether it is within the
    target of 1.5×.
(d) A sampler's gradient of 4 chains on their own mini-batches of 100 (``ModelTarget``), the
    chains under ``vmap`` against chain by chain, for each digit architecture: the target
    computes a convolutional network chain by chain on a CPU because of this comparison.

Each pair is timed in turn (``--train-repeats``, ``--repeats`` times) and the medians are
reported, so that the load of a shared machine falls on both sides alike.

Run: ``nice python benchmarks/bench_scale.py --data-dir ../shared/data [--threads 1]
[--images 200] [--samples 30] [--device cuda]`` (``--device``: where the fits and predictions
run; a GPU's queued work is waited for inside each timing). Prints Markdown tables (the ``## Scale`` section of
docs/performance.md). Timings on a shared machine are noisy: compare within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.engine.data.datasets import load_split  # noqa: E402
from core.engine.device import describe_device, on_device, resolve_device  # noqa: E402
from core.engine.inference import ensemble, sgld  # noqa: E402
from core.engine.inference.base import Dataset  # noqa: E402
from core.engine.inference.chains import ChainGenerators  # noqa: E402
from core.engine.inference.sampling import ModelTarget, initial_params  # noqa: E402
from core.engine.models import ArchSpec, build_model  # noqa: E402
from core.engine.naming import samples_used  # noqa: E402
from core.engine.runner import drain  # noqa: E402
from core.engine.store import load_posterior  # noqa: E402

CHAINS = 4


DEVICE = torch.device("cpu")  # --device


def seconds(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of ``fn`` on :data:`DEVICE`, its queued GPU work finished."""
    t0 = time.perf_counter()
    with on_device(DEVICE):
        fn()
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)
    return time.perf_counter() - t0


def alternating(first: Callable[[], object], second: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median seconds of ``first`` and ``second``, run in turn ``repeats`` times each, so that
    a busy spell of a shared machine falls on both alike."""
    pairs = [(seconds(first), seconds(second)) for _ in range(repeats)]
    return statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)


# ------------------------------------------------------------------------- (a) chains


def chains_row(name: str, arch: ArchSpec, data: Dataset, batch_size: int, repeats: int) -> dict:
    """SGLD on ``data`` for 2 epochs (the first burn-in): 4 chains at once, then one by one."""
    per_epoch = -(-len(data) // batch_size)
    steps = 2 * per_epoch
    config = sgld.SgldConfig(num_chains=CHAINS, epochs=2, burn_in_epochs=1, batch_size=batch_size,
                             thin=per_epoch, step_size=1e-6)  # one stored draw per chain
    warm = sgld.SgldConfig(num_chains=CHAINS, epochs=2, burn_in_epochs=1, batch_size=batch_size, thin=2)
    seconds(lambda: drain(sgld.fit(warm, arch, data.subset(slice(0, batch_size * 2)), 0)))  # warm vmap, allocator
    together, alone = alternating(
        lambda: drain(sgld.fit(config, arch, data, 0)),
        lambda: [drain(sgld.fit(config, arch, data, 0, chains=(c,))) for c in range(CHAINS)],
        repeats,
    )
    return {"what": f"SGLD, {CHAINS} chains, {name}", "steps": steps,
            "vectorised": together / steps, "sequential": alone / steps}


# ---------------------------------------------------------------------- (b) ensemble


def ensemble_row(name: str, arch: ArchSpec, data: Dataset, batch_size: int, repeats: int) -> dict:
    """4 members, one epoch of ``data``, side by side and one by one (the same members)."""
    steps = -(-len(data) // batch_size)

    def members():
        streams = ChainGenerators(0, range(CHAINS), DEVICE)
        return [m.to(DEVICE) for m in streams.models(arch)], streams.generators

    kw = {"epochs": 1, "batch_size": batch_size, "lr": 1e-3, "penalty": 1.0 / (2 * len(data))}
    def run(train, on: Dataset) -> None:
        models, generators = members()
        drain(train(models, on, generators, **kw))

    seconds(lambda: run(ensemble.train_side_by_side, data.subset(slice(0, 2 * batch_size))))  # warm vmap, allocator
    side, one = alternating(
        lambda: run(ensemble.train_side_by_side, data), lambda: run(ensemble.train_one_by_one, data), repeats
    )
    return {"what": f"ensemble, {CHAINS} members, {name}", "steps": steps,
            "vectorised": side / steps, "sequential": one / steps}


# -------------------------------------------------------------------- (c) evaluation


def evaluation_rows(x: torch.Tensor, requested: int, repeats: int) -> list[dict]:
    """Per bundled digit posterior: median seconds of its prediction and of the plain pass,
    measured alternately (so that a busy spell of the machine hits both alike)."""
    rows = []
    models = ROOT / "resources" / "models"
    for path in sorted([*models.glob("paper_*.pt"), *models.glob("network_*.pt")]):
        posterior = load_posterior(path, device=DEVICE)
        s = samples_used(posterior, requested)
        gen = torch.Generator(device=DEVICE).manual_seed(0)
        model = build_model(posterior.arch).to(DEVICE)
        batch = x.repeat(s, 1, 1, 1)  # N·S images: the same number of network evaluations

        def method(p=posterior, s=s, gen=gen):
            return p.predict_proba(x, s, gen)

        def plain(model=model, batch=batch):
            with torch.no_grad():
                return torch.softmax(model(batch), -1)

        for fn in (method, plain, method, plain):  # warm-up: caches, allocator, the fixed banks
            seconds(fn)
        method_s, plain_s = alternating(method, plain, repeats)
        rows.append({"file": path.name, "method": posterior.method, "arch": posterior.arch.name,
                     "draws": s, "method_s": method_s, "plain_s": plain_s})
    return rows


def gradient_row(arch: ArchSpec, train: Dataset, repeats: int) -> dict:
    """Median seconds of one gradient of :data:`CHAINS` chains each way (equal to float rounding)."""
    params = {k: v.to(DEVICE) for k, v in initial_params(arch, "default", 0.2, ChainGenerators(0, range(CHAINS))).items()}
    x = train.x[: CHAINS * 100].reshape(CHAINS, 100, *train.x.shape[1:])
    y = train.y[: CHAINS * 100].reshape(CHAINS, 100)
    target = ModelTarget(build_model(arch).to(DEVICE), len(train), 0.2)
    choice = "chain by chain" if target.convolutional and DEVICE.type == "cpu" else "vmap"
    times: dict[str, list[float]] = {"vmap": [], "chains": []}
    for _ in range(repeats + 1):  # the first round warms up and is dropped
        for way, by_chain in (("vmap", False), ("chains", True)):
            target.chain_by_chain = by_chain
            times[way].append(seconds(lambda: target.log_prob_and_grad(params, (x, y))))
    return {way: statistics.median(t[1:]) for way, t in times.items()} | {"choice": choice}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--images", type=int, default=200, help="test images per evaluation")
    parser.add_argument("--samples", type=int, default=30, help="draws asked of each posterior")
    parser.add_argument("--repeats", type=int, default=9, help="evaluations timed per posterior")
    parser.add_argument("--train-repeats", type=int, default=3, help="training runs timed each way")
    parser.add_argument("--train-images", type=int, default=2000,
                        help="training images (softmax; LeNet uses half): sets the number of steps")
    parser.add_argument("--parts", default="abcd", help="which parts to run: any of a, b, c, d")
    parser.add_argument("--device", default="cpu", help="where everything runs: cpu or cuda[:N]")
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    train, test = (load_split("mnist", split, args.data_dir).to(DEVICE) for split in ("train", "test"))
    print(f"torch {torch.__version__}, {args.threads} thread(s) on the CPU "
          f"({torch.get_num_interop_threads()} interop); computing on {describe_device(DEVICE)}")

    softmax = ArchSpec("softmax", num_classes=10)
    lenet = ArchSpec("lenet", num_classes=10)
    small = train.subset(slice(0, args.train_images))
    smaller = train.subset(slice(0, args.train_images // 2))
    if "a" in args.parts or "b" in args.parts:
        print("\n| what | steps | vectorised, per step | one at a time, per step | speed-up |")
        print("| --- | --- | --- | --- | --- |")
    for part, row in (("a", chains_row), ("b", ensemble_row)):
        if part not in args.parts:
            continue
        for name, arch, data in (("softmax regression", softmax, small), ("LeNet", lenet, smaller)):
            r = row(name, arch, data, 100, args.train_repeats)  # each printed as soon as it is measured
            print(f"| {r['what']} | {r['steps']} | {1e3 * r['vectorised']:.1f} ms | "
                  f"{1e3 * r['sequential']:.1f} ms | {r['sequential'] / r['vectorised']:.2f}× |", flush=True)

    if "d" in args.parts:
        print("\n| a gradient of 4 chains, mini-batches of 100 | under vmap | chain by chain | speed-up | the target's choice |")
        print("| --- | --- | --- | --- | --- |")
        for name in ("softmax", "mlp", "lenet5", "lenet"):
            r = gradient_row(ArchSpec(name, num_classes=10), train, args.repeats)
            print(f"| {name} | {1e3 * r['vmap']:.1f} ms | {1e3 * r['chains']:.1f} ms | {r['vmap'] / r['chains']:.2f}× "
                  f"| {r['choice']} |", flush=True)
    if "c" not in args.parts:
        return 0
    x = test.x[: args.images]
    print(f"\n| posterior | draws | {args.images} images × draws, method | plain batched forward "
          f"| ratio | within 1.5× |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in evaluation_rows(x, args.samples, args.repeats):
        ratio = r["method_s"] / r["plain_s"]
        print(f"| {r['file']} ({r['method']}, {r['arch']}) | {r['draws']} | {1e3 * r['method_s']:.1f} ms | "
              f"{1e3 * r['plain_s']:.1f} ms | {ratio:.2f}× | {'yes' if ratio <= 1.5 else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
