"""Does a variational fit predict with the noise it was trained with? (docs/zoo.md, issue 23)

Mean-field VI and variational dropout train through
:class:`~core.engine.inference.local_reparam.LocalReparameterisation`, which gives every example
the noise of its own weight draw, and predict by drawing whole weights. For each diagonal
variational file given, this prints the MNIST test NLL and accuracy of the mean predictive of S
passes three ways:

- ``predicted``: the file's own prediction (S whole-weight draws, as the window shows it);
- ``training noise``: S passes of the mean weights under the training hooks (one kernel draw per
  example in a convolution, exact local reparameterisation in a linear layer);
- ``per-position noise``: the same, but a convolution's noise drawn independently at every
  position, as training did before (the audit's mismatch: NLL 0.037 there against 0.055 as
  predicted, on the older LeNet).

If training and prediction share a noise model, the first two agree to within the Monte Carlo
error. Run: ``python benchmarks/measure_vi_noise.py --data-dir ../shared/data FILE ...``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this checkout's packages

from core.analysis.metrics import accuracy, negative_log_likelihood  # noqa: E402
from core.engine.data.datasets import load_split  # noqa: E402
from core.engine.inference.local_reparam import LocalReparameterisation  # noqa: E402
from core.engine.store import load_posterior  # noqa: E402


def per_position(hooks: LocalReparameterisation):
    """Make a convolution's noise independent at every position (the older training noise)."""

    def conv_noise(module, x, w_var, b_var, output):
        var = F.conv2d(x * x, w_var, b_var, module.stride, module.padding, module.dilation, module.groups)
        return (var + 1e-16).sqrt() * torch.randn(output.shape, generator=hooks.generator)

    hooks._conv_noise = conv_noise


def hooked_probs(posterior, x: torch.Tensor, samples: int, seed: int, old: bool) -> torch.Tensor:
    model = posterior._model
    hooks = LocalReparameterisation(model)
    if old:
        per_position(hooks)
    params = posterior.layout.unflatten(posterior.mean[0])
    var = posterior.layout.unflatten(posterior.diag_std[0].pow(2))
    hooks.variances = {n: v for n, v in var.items() if n in hooks.covered() and bool((v > 0).any())}
    hooks.generator = torch.Generator().manual_seed(seed)
    total = torch.zeros(len(x), posterior.num_classes)
    with torch.no_grad():
        for _ in range(samples):
            for start in range(0, len(x), 2000):
                chunk = slice(start, start + 2000)
                total[chunk] += torch.softmax(functional_call(model, params, (x[chunk],)), -1)
    hooks.remove()
    return total / samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    test = load_split("mnist", "test", root=args.data_dir)
    y = test.y.numpy()
    print(f"MNIST test set, mean predictive of {args.samples} passes: NLL / accuracy")
    print("file | predicted | training noise | per-position noise")
    for path in args.files:
        posterior = load_posterior(path)
        if posterior.num_components != 1 or posterior.rank:
            raise SystemExit(f"{path}: not a diagonal Gaussian fit (mean-field VI or variational dropout)")
        generator = torch.Generator().manual_seed(args.seed)
        predicted = torch.cat([posterior.predict_proba(test.x[i:i + 2000], args.samples, generator).mean(0)
                               for i in range(0, len(test.x), 2000)])
        cells = [predicted, hooked_probs(posterior, test.x, args.samples, args.seed, old=False),
                 hooked_probs(posterior, test.x, args.samples, args.seed, old=True)]
        print(path + " | " + " | ".join(f"{negative_log_likelihood(p.numpy(), y):.4f} / {accuracy(p.numpy(), y):.2%}"
                                        for p in cells), flush=True)


if __name__ == "__main__":
    main()
