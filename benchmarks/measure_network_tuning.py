"""Choose a tier's sampler settings on a validation split (the figures of docs/zoo.md).

Each setting runs as a short pilot of four chains on MNIST training images 0–54,999 and is
scored on training images 55,000–59,999, which it never saw (the test set is never read):

- the NLL and accuracy of its mean predictive on those 5,000 validation images;
- the largest rank-normalised split-R̂ of the class probabilities on the first 1,000 of them
  (the measure the bundled files record), and the smallest bulk ESS;
- whether the run diverged;
- its pace: milliseconds per step of all four chains, between the sampler's first and last
  progress report (``--device cuda`` runs the pilots on a GPU).

A setting is given as ``method:name=value,name=value`` (``--set`` values of ``train``), e.g.
``sgld:step_size=1e-5,prior_std=0.2,init=prior``. Read the scores together: a validation NLL
near ln 10 = 2.303 means the network died (every class at 1/10), whatever its R̂ says; of the
live settings, the lowest R̂ at a validation NLL near the best. docs/zoo.md lists the pilots
behind the network tier's settings.

What keeps chains apart: ``--starts 0,0,0,0`` starts every chain where chain 0 of the run starts
(its own initialisation) while each keeps its own mini-batches and noise; ``--noise 0,0,0,0``
gives every chain chain 0's mini-batches and noise while each keeps its own start; ``--starts
mode`` starts every chain at the mode the metric was computed at (a trained network). Chains that
share a start and still disagree by the run's end were parted by their noise; chains that share
their noise and come together forgot their starts (synchronous coupling contracts them where the
posterior is one hill). The last column, the chains' spread, is the total variation between two
chains' mean predictive, averaged over the validation images and the pairs of chains.

Run: ``python benchmarks/measure_network_tuning.py --data-dir ../shared/data SETTING ...``
(about 3 min per setting of 10 epochs of LeNet-5 on two CPU cores; ``--model softmax`` pilots
the paper tier's softmax regression).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import sys
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages

from core.analysis.diagnostics import MIN_SPREAD, probe_draws_progress  # noqa: E402
from core.analysis.metrics import accuracy, negative_log_likelihood  # noqa: E402
from core.engine import convergence  # noqa: E402
from core.engine.data.datasets import load_split  # noqa: E402
from core.engine.device import describe_device, resolve_device  # noqa: E402
from core.engine.inference import get_method, hmc, sampling  # noqa: E402
from core.engine.inference.chains import ChainGenerators  # noqa: E402
from core.engine.inference.sampling import ChainConfig, SamplerDivergedError  # noqa: E402
from core.engine.models import ArchSpec  # noqa: E402
from core.engine.runner import drain, fit_posterior  # noqa: E402

TRAIN = 55_000
PROBE = 1_000


def coupled(starts: str | None, noise: str | None) -> list:
    """Patches that give the pilot's chains other starts or other streams (``--starts``, ``--noise``).

    ``starts``: run chain numbers, one per chain, whose initialisation each chain takes (a number
    repeated: a shared start), or ``"mode"``: every chain starts at the mode the metric was computed
    at (a network trained 10 epochs). ``noise``: run chain numbers whose mini-batches and noise each
    chain draws. None keeps the chains' own.
    """
    own = ",".join(map(str, range(4)))
    noise_ids = tuple(int(c) for c in (noise or own).split(","))
    start_ids = tuple(int(c) for c in (starts or own).split(",")) if starts != "mode" else noise_ids

    class Streams(ChainGenerators):
        def __init__(self, seed: int, chain_ids, device="cpu") -> None:
            if not len(chain_ids) == len(noise_ids) == len(start_ids):
                raise SystemExit(f"--starts and --noise name one run chain for each of the {len(chain_ids)} chains")
            super().__init__(seed, noise_ids, device)
            self.starts = ChainGenerators(seed, start_ids, device)

        def models(self, arch):
            return self.starts.models(arch)

    patches = [mock.patch.object(sampling, "ChainGenerators", Streams),
               mock.patch.object(hmc, "ChainGenerators", Streams)]
    if starts == "mode":
        seen = {}
        fit_sgmcmc = sampling.fit_sgmcmc

        def keep_mode(*args, metric=None, **kwargs):
            seen["mode"] = metric.mode
            return fit_sgmcmc(*args, metric=metric, **kwargs)

        def at_mode(arch, init, prior_std, generators):
            return {k: v.expand(len(generators), *v.shape[1:]).clone() for k, v in seen["mode"].items()}

        patches += [mock.patch.object(sampling, "fit_sgmcmc", keep_mode),
                    mock.patch.object(sampling, "initial_params", at_mode)]
    return patches


def chains_spread(probs) -> float:
    """Total variation between two chains' mean predictives, averaged over images and pairs of chains."""
    means = probs.mean(axis=1)  # (chains, images, classes)
    pairs = itertools.combinations(range(means.shape[0]), 2)
    return float(sum(0.5 * abs(means[a] - means[b]).sum(-1).mean() for a, b in pairs)
                 / math.comb(means.shape[0], 2))


def pilot(spec: str, train, validation, epochs: int, seed: int, model: str = "lenet5",
          device: torch.device | None = None, patches: tuple = ()) -> dict:
    method_name, _, values = spec.partition(":")
    method = get_method(method_name)
    steps = math.ceil(TRAIN / ChainConfig.batch_size)  # per epoch; thinned to 25 draws per chain
    settings = {"num_chains": "4", "epochs": str(epochs), "burn_in_epochs": str(epochs // 2),
                "thin": str(max(1, (epochs - epochs // 2) * steps // 25))}
    settings.update(dict(item.split("=", 1) for item in values.split(",") if item))
    config = method.parse_settings(settings)
    arch = ArchSpec(model, num_classes=10, drop_rate=0.5 if method_name == "dsghmc" else 0.0)
    began = time.perf_counter()
    steps_at: list[tuple[float, int]] = []  # (time, step) of the sampler's reports, for its pace

    def note(record) -> None:
        if record.phase in ("burn-in", "sampling"):
            steps_at.append((time.perf_counter(), record.step))

    try:
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            posterior = drain(fit_posterior(method, config, arch, train, seed, device=device), note)
    except SamplerDivergedError as exc:
        return {"setting": spec, "diverged": str(exc).split(";")[0], "seconds": time.perf_counter() - began}
    probs = drain(probe_draws_progress(posterior, validation.x, seed))  # (chains, draws, images, classes)
    mean = probs.mean(axis=(0, 1))
    y = validation.y.numpy()
    summary = convergence.summarise(probs[:, :, :PROBE], MIN_SPREAD)
    return {"setting": spec, "nll": negative_log_likelihood(mean, y), "accuracy": accuracy(mean, y),
            "rhat": summary.rhat_max, "ess": summary.ess_bulk_min, "draws": probs.shape[:2],
            "seconds": time.perf_counter() - began, "ms_per_step": ms_per_step(steps_at),
            "spread": chains_spread(probs)}


def ms_per_step(steps_at: list[tuple[float, int]]) -> float:
    """Milliseconds per step of all chains, between the sampler's first and last report."""
    (t0, s0), (t1, s1) = steps_at[0], steps_at[-1]
    return 1e3 * (t1 - t0) / (s1 - s0) if s1 > s0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="+", help="method:name=value,... (see the module's docstring)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="lenet5", help="lenet5 (the network tier) or softmax (the paper tier)")
    parser.add_argument("--device", default="cpu", help="where the pilots run: cpu or cuda[:N]")
    parser.add_argument("--starts", help="run chains whose starts the chains take, e.g. 0,0,0,0, or mode (default: their own)")
    parser.add_argument("--noise", help="run chains whose noise the chains take, e.g. 0,0,0,0 (default: their own)")
    args = parser.parse_args()
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)
    full = load_split("mnist", "train", root=args.data_dir)
    train, validation = full.subset(slice(0, TRAIN)), full.subset(slice(TRAIN, len(full)))
    if args.starts or args.noise:
        print(f"chains start {'at the mode' if args.starts == 'mode' else 'as run chains ' + (args.starts or '0,1,2,3')}"
              f" and draw the noise of run chains {args.noise or '0,1,2,3'}")
    print(f"pilots of {args.epochs} epochs on training images 0–{TRAIN - 1:,}, scored on "
          f"{len(validation):,} validation images ({TRAIN:,}–{len(full) - 1:,}), on {describe_device(device)}")
    print("setting | validation NLL | accuracy | R̂ (max, first 1,000) | bulk ESS (min) | chains × draws | s "
          "| ms per step | chains' spread")
    for spec in args.settings:
        patches = coupled(args.starts, args.noise) if args.starts or args.noise else []
        row = pilot(spec, train, validation, args.epochs, args.seed, args.model, device, patches)
        if "diverged" in row:
            print(f"{spec} | diverged: {row['diverged']} | | | | | {row['seconds']:.0f}", flush=True)
        else:
            print(f"{spec} | {row['nll']:.4f} | {row['accuracy']:.2%} | {row['rhat']:.3f} | {row['ess']:.0f} | "
                  f"{row['draws'][0]} × {row['draws'][1]} | {row['seconds']:.0f} | {row['ms_per_step']:.1f} | "
                  f"{row['spread']:.4f}",
                  flush=True)


if __name__ == "__main__":
    main()
