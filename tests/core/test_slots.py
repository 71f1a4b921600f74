"""Chain slots (``core.engine.inference.slots``): every chain of a run in one product, bit for bit
the same as the chain alone.

A run of C chains takes the softmax head's logits and gradient on a shared batch, and the dense
curvature metric's products, as one product over C slots, chain c in slot c; a run of a subset
fills the other slots with zeros. The checks compare with ``torch.equal``: the subsets of a run
are merged as if they had run together (``train --chains``, the cluster), so a chain's numbers
must not depend on its neighbours at all, not merely to rounding. Each check puts a chain among
random neighbours and alone (zeros beside it), at one and at two torch threads, and the sizes are
large enough for the kernels' blocked paths (512 features, a 1,500 × 1,500 metric).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from core.engine.inference import METHODS, softmax_target
from core.engine.inference.base import Dataset
from core.engine.inference.chain_merge import merge_chains
from core.engine.inference.chains import ChainGenerators
from core.engine.inference.curvature import DenseMetric
from core.engine.inference.lowrank_metric import LowRankMetric
from core.engine.inference.sampling import ModelTarget, epoch_batches
from core.engine.inference.slots import ChainSlots, chain_slots
from core.engine.models import ArchSpec, build_model
from core.engine.runner import drain, fit_posterior

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SLOTS = 4
SUBSETS = [(0,), (2,), (3,), (1, 3), (0, 2, 3)]


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _rows(tree: dict[str, torch.Tensor], ids: tuple[int, ...]) -> dict[str, torch.Tensor]:
    return {k: v[list(ids)].clone() for k, v in tree.items()}


# ------------------------------------------------------------------------------ the layout


def test_chains_are_placed_in_their_slots_and_taken_back():
    slots = ChainSlots.of((3, 1), 4)
    assert slots.ids == (3, 1) and not slots.full and ChainSlots.all(4).full
    x = torch.arange(1.0, 7.0).reshape(2, 3)
    placed = slots.place(x)
    assert placed.shape == (4, 3) and placed.is_contiguous()
    assert torch.equal(placed[3], x[0]) and torch.equal(placed[1], x[1])
    assert not placed[0].any() and not placed[2].any()  # no chain there: zeros
    assert torch.equal(slots.take(placed), x)
    assert torch.equal(slots.take(placed.T, dim=1), x.T)
    full = ChainSlots.all(2).place(x)
    assert torch.equal(full, x) and full.data_ptr() != x.data_ptr()  # a fresh tensor, never a view


def test_slots_refuse_a_layout_that_does_not_fit():
    for ids, count in [((), 4), ((4,), 4), ((1, 1), 4), ((-1,), 2)]:
        with pytest.raises(ValueError, match="do not each take one of"):
            ChainSlots.of(ids, count)
    with pytest.raises(ValueError, match="3 chains given for the 2 chains in slots"):
        ChainSlots.of((0, 1), 4).place(torch.zeros(3, 5))
    with pytest.raises(ValueError, match="3 chains given for the 2 chains in slots"):
        chain_slots(ChainSlots.of((0, 1), 4), 3)
    assert chain_slots(None, 3) == ChainSlots.all(3)


# ------------------------------------------------------------------ the softmax head's target


FEATURES = ArchSpec("softmax", num_classes=10, input_dim=512)


def _batch(n: int = 1000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, FEATURES.num_classes, (n,), generator=g)
    return torch.randn(n, FEATURES.input_dim, generator=g) + 0.5 * y[:, None], y


def _weights(seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"linear.weight": 0.05 * torch.randn(SLOTS, 10, 512, generator=g),
            "linear.bias": 0.5 * torch.randn(SLOTS, 10, generator=g)}


@pytest.mark.parametrize("threads", [1, 2])
def test_the_target_of_a_chain_beside_random_chains_is_the_chain_alone_bit_for_bit(threads):
    model = build_model(FEATURES)
    params, batch = _weights(), _batch()
    with torch_threads(threads):
        together = ModelTarget(model, 8000, 0.7, shared_batch=True).log_prob_and_grad(params, batch)
        for ids in SUBSETS:
            target = ModelTarget(model, 8000, 0.7, shared_batch=True, slots=ChainSlots.of(ids, SLOTS))
            logp, grad = target.log_prob_and_grad(_rows(params, ids), batch)
            assert torch.equal(logp, together[0][list(ids)]), ids
            for k in grad:
                assert torch.equal(grad[k], together[1][k][list(ids)]), (ids, k)


def test_one_product_over_the_slots_is_each_chain_s_closed_form():
    """The slotted products compute what the closed form of one chain computes (float64: to
    rounding), with the prior's term and the scale N/B."""
    model = build_model(FEATURES).double()
    params = {k: v.double() for k, v in _weights().items()}
    x, y = _batch(300)
    x = x.double()
    logp, grad = softmax_target.log_prob_and_grad(model, params, (x, y), 8000, 0.7, True, ChainSlots.all(SLOTS))
    scale, precision = 8000 / 300, 1 / 0.7**2
    for c in range(SLOTS):
        w, b = params["linear.weight"][c], params["linear.bias"][c]
        lik, gw, gb = softmax_target.log_likelihood_and_grad(w, b, x, y)
        prior = -0.5 * precision * (w.pow(2).sum() + b.pow(2).sum())
        torch.testing.assert_close(logp[c], scale * lik + prior, rtol=1e-13, atol=0)
        torch.testing.assert_close(grad["linear.weight"][c], scale * gw - precision * w, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(grad["linear.bias"][c], scale * gb - precision * b, rtol=1e-12, atol=1e-10)


# --------------------------------------------------------------------- the dense metric


def _mass(p: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(p, p, generator=g, dtype=torch.float64)
    return a @ a.T / p + torch.eye(p, dtype=torch.float64)


def _metric(p: int = 1500) -> DenseMetric:
    return DenseMetric(_mass(p), {"theta": torch.Size([p])})


#: The curvature metrics a run's products go through: dense, and as a scaled identity plus its main
#: directions (the spectrum of ``_mass`` spreads over 1-5, so the cap of 256 directions binds).
METRICS = {"dense": _metric,
           "lowrank": lambda p=1500: LowRankMetric.of_precision(_mass(p), {"theta": torch.Size([p])})}


PRODUCTS = {
    "momentum": lambda m, t: m.momentum(t)["theta"],
    "velocity": lambda m, t: m.velocity(t)["theta"],
    "kinetic": lambda m, t: m.kinetic(t),
    "spread": lambda m, t: m.spread(t)["theta"],
    "whiten": lambda m, t: m.whiten(t)["theta"],
}


@pytest.mark.parametrize("kind", list(METRICS))
@pytest.mark.parametrize("threads", [1, 2])
def test_every_metric_product_of_a_chain_beside_random_chains_is_the_chain_alone_bit_for_bit(threads, kind):
    metric = METRICS[kind]()
    if kind == "lowrank":
        assert metric.rank == 256
    tree = {"theta": torch.randn(SLOTS, 1500, generator=torch.Generator().manual_seed(4))}
    with torch_threads(threads):
        for name, product in PRODUCTS.items():
            together = product(metric, tree)
            for ids in SUBSETS:
                alone = product(metric.in_slots(ChainSlots.of(ids, SLOTS)), _rows(tree, ids))
                assert torch.equal(alone, together[list(ids)]), (name, ids)


def test_the_metric_s_products_are_m_s_own():
    """One product over the slots is each chain's M⁻¹r, Lᵀz, L⁻ᵀz and L⁻¹g (to float32's rounding
    of the kept factors), for a subset in its slots as for all chains."""
    p = 300
    metric = _metric(p)
    mass = metric.chol.double() @ metric.chol.double().T
    r = torch.randn(SLOTS, p, generator=torch.Generator().manual_seed(6))
    exact = {
        "velocity": torch.linalg.solve(mass, r.double().T).T,
        "momentum": r.double() @ metric.chol.double().T,
        "spread": torch.linalg.solve_triangular(metric.chol.double().T, r.double().T, upper=True).T,
        "whiten": torch.linalg.solve_triangular(metric.chol.double(), r.double().T, upper=False).T,
    }
    exact["kinetic"] = 0.5 * (r.double() * exact["velocity"]).sum(1)
    for ids in [(0, 1, 2, 3), (1, 3)]:
        placed = metric.in_slots(ChainSlots.of(ids, SLOTS))
        assert metric.slots is None and placed.inverse is metric.inverse  # the matrices are shared
        for name, product in PRODUCTS.items():
            want = exact[name][list(ids)]
            torch.testing.assert_close(product(placed, {"theta": r[list(ids)]}).double(), want,
                                       rtol=2e-3, atol=2e-3 * float(want.abs().max()))


# -------------------------------------------------------------- whole runs with --chains


def _features_data(n: int = 300) -> Dataset:
    g = torch.Generator().manual_seed(8)
    y = torch.arange(n) % 10
    x = torch.randn(n, 64, generator=g) + 0.8 * torch.nn.functional.one_hot(y, 64).float()
    return Dataset(x, y, "synthetic features")


HEAD = ArchSpec("softmax", num_classes=10, input_dim=64)
RUNS = {  # full batch (batch_size ≥ 300 examples) with the curvature metric: both slotted products
    # (a run of one chain of them failed before its full batch kept stride 0 over one chain, and
    # a subset of three before the metric's solve gave its rows back contiguous)
    "sghmc": {"num_chains": 4, "epochs": 30, "batch_size": 512, "burn_in_epochs": 10, "thin": 4,
              "step_size": 2e-3, "friction": 0.1, "metric": "curvature", "init": "overdispersed"},
    # mini-batches drawn per chain: the target chain by chain, the metric's products in slots
    "sghmc-minibatch": {"num_chains": 4, "epochs": 6, "batch_size": 100, "burn_in_epochs": 2, "thin": 4,
                        "step_size": 2e-3, "friction": 0.1, "metric": "curvature", "init": "overdispersed"},
    "sgld": {"num_chains": 4, "epochs": 30, "batch_size": 512, "burn_in_epochs": 10, "thin": 4,
             "step_size": 1e-3, "metric": "curvature", "init": "overdispersed"},
    "hmc": {"num_chains": 4, "num_warmup": 12, "num_samples": 8, "num_leapfrog": 5, "step_size": 0.3,
            "metric": "curvature", "init": "overdispersed"},
    # each chain's leapfrog steps from its own step size: chains stop at different steps
    "hmc-trajectory": {"num_chains": 4, "num_warmup": 12, "num_samples": 8, "num_leapfrog": 12, "step_size": 0.3,
                       "trajectory_length": 1.5, "metric": "curvature", "init": "overdispersed"},
    # the curvature as a scaled identity plus its main directions: its thin products in slots too
    "hmc-lowrank": {"num_chains": 4, "num_warmup": 12, "num_samples": 8, "num_leapfrog": 12, "step_size": 0.3,
                    "trajectory_length": 1.5, "metric": "curvature-lowrank", "init": "overdispersed"},
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_run_of_subsets_of_chains_merges_to_the_full_run_bit_for_bit(name):
    method = METHODS[name.split("-")[0]]
    config = method.make_config(**RUNS[name])
    data = _features_data()

    def fit(chains=None):
        return drain(fit_posterior(method, config, HEAD, data, 5, chains=chains))

    full = fit()
    weights = full.samples["linear.weight"]
    assert float((weights[:, -1] - weights[:, 0]).abs().max()) > 1e-3  # the chains moved
    assert not torch.equal(weights[0], weights[1])
    for parts in [[(2,), (0, 1, 3)], [(3, 1), (2, 0)]]:
        merged = merge_chains([fit(chains) for chains in parts])
        for k in full.samples:
            assert torch.equal(merged.samples[k], full.samples[k]), (parts, k)


def test_a_full_batch_is_seen_by_every_chain_of_a_run_of_one_chain_too():
    """``expand`` gives a chain dim of size 1 a nonzero stride; the target must still see one
    batch that every chain sees, or a run of one chain takes another path than the whole run."""
    data = _features_data(20)
    for chains in (1, 3):
        x, y = next(epoch_batches(data, chains, 64, ChainGenerators(0, range(chains)), ordered=False))
        assert x.shape == (chains, 20, 64) and x.stride(0) == 0 and y.stride(0) == 0
        assert x.data_ptr() == data.x.data_ptr() and torch.equal(x[0], data.x)
