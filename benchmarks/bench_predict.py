"""Prediction time of 100 stacked posterior samples for one image.

For an MLP 784-100-100-10 and a LeNet, compares

* :class:`core.engine.inference.base.SampledPosterior` (``vmap(functional_call)`` over the stacked
  samples),
* a Python loop over the same 100 samples (``functional_call`` per sample), and
* the compute floor: FLOPs of 100 forward passes / the measured fp32 matmul rate, and, for
  the MLP, the memory floor: bytes of weights read / a measured copy bandwidth.

Run: ``python benchmarks/bench_predict.py [--threads 2] [--repeats 200]``. Prints one line
per model; timings are medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages

from core.engine.inference.base import SampledPosterior  # noqa: E402
from core.engine.models import ArchSpec, build_model  # noqa: E402

SAMPLES = 100


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 10) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_gflops(size: int = 1024, repeats: int = 20) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    seconds = median_seconds(lambda: a @ b, repeats, warmup=3)
    return 2 * size**3 / seconds / 1e9


def copy_gbytes(numel: int = 16 * 2**20, repeats: int = 20) -> float:
    src, dst = torch.randn(numel), torch.empty(numel)
    seconds = median_seconds(lambda: dst.copy_(src), repeats, warmup=3)
    return 2 * numel * 4 / seconds / 1e9  # read + write


def forward_flops(model: nn.Module, x: torch.Tensor) -> int:
    """Multiply-adds ×2 of the linear and convolution layers for one forward pass."""
    flops = 0

    def count(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        nonlocal flops
        if isinstance(module, nn.Linear):
            flops += 2 * module.in_features * module.out_features * output.shape[0]
        elif isinstance(module, nn.Conv2d):
            k = module.in_channels * module.kernel_size[0] * module.kernel_size[1]
            flops += 2 * k * output.numel()

    hooks = [m.register_forward_hook(count) for m in model.modules()]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return flops


def stacked_posterior(arch: ArchSpec) -> SampledPosterior:
    model = build_model(arch)
    samples = {
        k: v.detach()[None, None].repeat(1, SAMPLES, *([1] * v.ndim)) + 0.01 * torch.randn(1, SAMPLES, *v.shape)
        for k, v in model.named_parameters()
    }
    return SampledPosterior("bench", arch, {}, 0, "none", samples)


def bench(arch: ArchSpec, repeats: int, gflops: float, gbytes: float) -> str:
    post = stacked_posterior(arch)
    x = torch.rand(1, 1, 28, 28)
    model = post._model
    flat = post.flat_samples()
    per_sample = [{k: v[s] for k, v in flat.items()} for s in range(SAMPLES)]

    def vectorised() -> torch.Tensor:
        return post.predict_proba(x)

    def loop() -> torch.Tensor:
        with torch.no_grad():
            return torch.stack([torch.softmax(functional_call(model, p, (x,)), -1) for p in per_sample])

    assert torch.allclose(vectorised(), loop(), atol=1e-5)
    t_vec = median_seconds(vectorised, repeats)
    t_loop = median_seconds(loop, max(repeats // 4, 5))
    flops = SAMPLES * forward_flops(model, x)
    compute_floor = flops / (gflops * 1e9)
    weight_bytes = SAMPLES * sum(v.numel() for v in model.parameters()) * 4
    memory_floor = weight_bytes / (gbytes * 1e9)
    floor = max(compute_floor, memory_floor)
    return (
        f"{arch.name:6s} vmap {t_vec * 1e3:7.3f} ms | loop {t_loop * 1e3:7.3f} ms "
        f"(loop/vmap {t_loop / t_vec:4.1f}x) | {flops / 1e6:6.1f} MFLOP -> compute floor "
        f"{compute_floor * 1e3:6.3f} ms, {weight_bytes / 1e6:5.1f} MB weights -> memory floor "
        f"{memory_floor * 1e3:6.3f} ms | vmap/floor {t_vec / floor:5.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gflops = matmul_gflops()
    gbytes = copy_gbytes()
    print(f"torch {torch.__version__}, {args.threads} thread(s): 1024² fp32 matmul "
          f"{gflops:.0f} GFLOP/s, copy bandwidth {gbytes:.1f} GB/s; {SAMPLES} samples, 1 image")
    for arch in (ArchSpec("mlp", hidden=100), ArchSpec("lenet")):
        print(bench(arch, args.repeats, gflops, gbytes))


if __name__ == "__main__":
    main()
