"""Where do the paper tier's samplers put their draws? Full-data log posterior of the draws.

R̂ says whether chains agree with one another, not whether they sample the posterior: chains can
agree on a wrong distribution. For softmax regression under the tier's N(0, 1) prior the exact
log posterior of a draw is cheap, so this prints, for 40 draws spread over each bundled sampled
file of the paper tier, the mean and spread of log p(D | θ) + log p(θ) over the 60,000 training
images (constants left out) and the draws' mean weight norm. HMC, which is exact for this model
(docs/zoo.md), shows where the posterior's draws lie; a stochastic-gradient sampler far below it
samples a wider distribution than the posterior (its mini-batch noise is not corrected).
D-SGHMC drops input pixels, so its draws belong to another model and are not comparable.

Run: ``python benchmarks/measure_sampler_bias.py --data-dir ../shared/data`` (seconds).
"""

from __future__ import annotations

import argparse

import torch

from core.engine.data.datasets import load_split
from core.engine.resources import resources_dir
from core.engine.store import load_posterior

FILES = ("paper_softmax_hmc", "paper_softmax_sgld", "paper_softmax_sghmc", "paper_softmax_dsghmc")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--draws", type=int, default=40)
    args = parser.parse_args()
    train = load_split("mnist", "train", root=args.data_dir)
    x, y = train.x.reshape(len(train.x), -1), train.y
    print("file | log posterior, mean ± sd over the draws | mean weight norm")
    for name in FILES:
        samples = load_posterior(resources_dir() / "models" / f"{name}.pt").samples
        weights = samples["linear.weight"].float().flatten(0, 1)
        biases = samples["linear.bias"].float().flatten(0, 1)
        values, norms = [], []
        for i in torch.linspace(0, len(weights) - 1, args.draws).long():
            logits = x @ weights[i].T + biases[i]
            log_lik = torch.log_softmax(logits, -1).gather(1, y[:, None]).sum()
            theta = torch.cat([weights[i].flatten(), biases[i]])
            values.append(float(log_lik - 0.5 * theta.pow(2).sum()))
            norms.append(float(theta.norm()))
        v = torch.tensor(values)
        print(f"{name} | {v.mean():,.0f} ± {v.std():,.0f} | {sum(norms) / len(norms):.1f}", flush=True)


if __name__ == "__main__":
    main()
