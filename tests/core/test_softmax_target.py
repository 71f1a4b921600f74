"""The closed-form target of a softmax-regression head (``core.engine.inference.softmax_target``)
and the full batch that is not copied per chain (``epoch_batches(..., ordered=False)``).

Both change how a step is computed, never what it computes. So each is checked against the path
it replaced, autograd through the model on a batch gathered in each chain's drawn order: the log
posterior and its gradient to rounding, and whole trajectories of every sampler that uses them
(SGLD, SGHMC with and without the curvature metric, D-SGHMC, HMC) from the same seed to 1e-10, in
float64 so that a difference in rounding order cannot hide a difference in the arithmetic (a wrong
sign, a missing prior term or a lost scale N/B moves the first step by far more).
"""

from __future__ import annotations

import pytest
import torch

from core.engine.inference import dsghmc, hmc, sghmc, sgld, softmax_target
from core.engine.inference.base import Dataset
from core.engine.inference.chains import ChainGenerators
from core.engine.inference.curvature import DenseMetric
from core.engine.inference.sampling import ModelTarget, epoch_batches, initial_params
from core.engine.models import ArchSpec, build_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FEATURES = ArchSpec("softmax", num_classes=3, input_dim=6)
ARCHS = {
    "features": FEATURES,
    "grey": ArchSpec("softmax", num_classes=2, image_size=4),
    "colour": ArchSpec("softmax", num_classes=3, image_size=4, channels=3, mean=(0.2, 0.4, 0.6), std=(0.5, 0.3, 0.2)),
    "head": ArchSpec("features", num_classes=3, features=6, network="0" * 64, head="fc", image_size=16, channels=3),
}
CHAINS = 3


def _data(arch: ArchSpec, n: int = 30, seed: int = 0, dtype: torch.dtype = torch.float64) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    shape = (arch.input_dim or arch.features,) if (arch.input_dim or arch.features) else (arch.channels, 4, 4)
    y = torch.arange(n) % arch.num_classes
    x = torch.rand(n, *shape, generator=g, dtype=dtype) + 0.3 * y.to(dtype).reshape(n, *[1] * len(shape))
    return Dataset(x, y, "synthetic")


def _target(arch: ArchSpec, num_data: int, closed_form: bool, shared: bool = False) -> ModelTarget:
    target = ModelTarget(build_model(arch).double(), num_data, 0.8, shared_batch=shared)
    assert target.closed_form  # a softmax regression is computed in closed form unless told otherwise
    target.closed_form = closed_form
    return target


def _params(arch: ArchSpec, seed: int = 1) -> dict[str, torch.Tensor]:
    params = initial_params(arch, "default", 1.0, ChainGenerators(seed, range(CHAINS)))
    return {k: 3.0 * v.double() for k, v in params.items()}  # far from 0: every term of the gradient counts


@pytest.mark.parametrize("name", list(ARCHS))
@pytest.mark.parametrize("batch", ["per_chain", "shared", "expanded"])
def test_the_closed_form_is_autograd_s_log_posterior_and_gradient(name, batch):
    arch = ARCHS[name]
    data, params = _data(arch), _params(arch)
    g = torch.Generator().manual_seed(2)
    if batch == "per_chain":
        index = torch.stack([torch.randperm(len(data), generator=g)[:12] for _ in range(CHAINS)])
        given = (data.x[index], data.y[index])
    elif batch == "shared":
        given = (data.x, data.y)
    else:  # one batch expanded over the chains (a full batch, not copied)
        given = (data.x.expand(CHAINS, *data.x.shape), data.y.expand(CHAINS, len(data)))
    shared = batch == "shared"
    want, want_grad = _target(arch, 500, False, shared).log_prob_and_grad(params, given)
    got, got_grad = _target(arch, 500, True, shared).log_prob_and_grad(params, given)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=0)
    assert set(got_grad) == set(want_grad) == {"linear.weight", "linear.bias"}
    for k in want_grad:
        torch.testing.assert_close(got_grad[k], want_grad[k], rtol=1e-12, atol=1e-12 * float(want_grad[k].abs().max()))


def test_a_network_with_hidden_layers_keeps_autograd():
    for arch in (ArchSpec("mlp", num_classes=3, input_dim=6, hidden=5), ArchSpec("lenet5", num_classes=10)):
        assert not softmax_target.has_closed_form(build_model(arch))
        assert not ModelTarget(build_model(arch), 10, 1.0).closed_form


def test_a_full_batch_unordered_is_the_data_expanded_and_draws_the_same_orders():
    """No copy per chain, the data in their stored order, and each chain's stream left where the
    gathered batches leave it (so its noise is the noise it had)."""
    data = _data(FEATURES, n=10)
    gathered, unordered = ChainGenerators(4, range(CHAINS)), ChainGenerators(4, range(CHAINS))
    old = epoch_batches(data, CHAINS, 16, gathered)
    new = epoch_batches(data, CHAINS, 16, unordered, ordered=False)
    for _ in range(3):
        (_, yo), (xn, yn) = next(old), next(new)
        assert xn.stride(0) == 0 and xn.data_ptr() == data.x.data_ptr()
        assert torch.equal(xn[1], data.x) and torch.equal(yn[2], data.y)
        for c in range(CHAINS):  # the same examples, in another order
            assert sorted(yo[c].tolist()) == sorted(yn[c].tolist())
        assert torch.equal(gathered.randn((CHAINS, 5)), unordered.randn((CHAINS, 5)))
    # a batch smaller than the data set is gathered in the drawn order either way
    assert torch.equal(next(epoch_batches(data, CHAINS, 4, ChainGenerators(4, range(CHAINS)), ordered=False))[0],
                       next(epoch_batches(data, CHAINS, 4, ChainGenerators(4, range(CHAINS))))[0])


def _metric(arch: ArchSpec) -> DenseMetric:
    g = torch.Generator().manual_seed(5)
    p = arch.num_classes * (arch.input_size + 1)
    a = torch.randn(p, p, generator=g, dtype=torch.float64)
    model = build_model(arch)
    return DenseMetric(a @ a.T / p + torch.eye(p, dtype=torch.float64), {k: v.shape for k, v in model.named_parameters()})


SG_RUNS = {
    "sgld-rmsprop": (sgld, sgld.SgldConfig(step_size=1e-3, precondition=True, prior_std=0.8)),
    "sghmc": (sghmc, sghmc.SghmcConfig(step_size=1e-3, friction=0.1, resample_every=7, prior_std=0.8)),
    "sghmc-curvature": (sghmc, sghmc.SghmcConfig(step_size=1e-2, friction=0.1, metric="curvature", prior_std=0.8)),
    "dsghmc": (dsghmc, dsghmc.DsghmcConfig(step_size=1e-3, friction=0.1, drop_rate=0.3, prior_std=0.8)),
}


def _sg_trajectory(run: str, batch_size: int, new: bool, steps: int = 120) -> torch.Tensor:
    """θ of every chain after every step: ``new`` as the fits run now (closed form; a full batch
    not gathered, but for D-SGHMC), else as before (autograd on batches gathered in drawn order)."""
    module, config = SG_RUNS[run]
    data = _data(FEATURES)
    generators = ChainGenerators(9, range(CHAINS))
    metric = _metric(FEATURES) if config.metric == "curvature" else None
    state = module.init(_params(FEATURES), config=config, generator=generators,
                        **({"metric": metric} if metric else {}))
    batches = epoch_batches(data, CHAINS, batch_size, generators, ordered=not new or module is dsghmc)
    target = _target(FEATURES, len(data), new)
    path = []
    for _ in range(steps):
        state, _info = module.step(state, next(batches), generators, config=config, target=target)
        path.append(torch.cat([v.flatten(1) for v in state.params.values()], 1))
    return torch.stack(path)


@pytest.mark.parametrize("run", list(SG_RUNS))
@pytest.mark.parametrize("batch_size", [8, 30, 64])
def test_a_sampler_s_trajectory_is_the_one_before_to_1e_10(run, batch_size):
    before, now = _sg_trajectory(run, batch_size, False), _sg_trajectory(run, batch_size, True)
    assert float(now.sub(now[0]).abs().max()) > 0.1  # the chains moved
    torch.testing.assert_close(now, before, rtol=0, atol=1e-10)


def test_hmc_s_trajectory_is_the_one_before_to_1e_10():
    data = _data(FEATURES)
    config = hmc.HmcConfig(num_chains=CHAINS, num_leapfrog=6, step_size=0.02, prior_std=0.8)
    paths = []
    for new in (False, True):
        generators = ChainGenerators(11, range(CHAINS))
        target = _target(FEATURES, len(data), new, shared=True)
        params = _params(FEATURES)  # hmc.init keeps float32 weights: its state is made here in float64
        logp, grad = target.log_prob_and_grad(params, (data.x, data.y))
        state = hmc.HmcState(params, logp, grad, torch.full((CHAINS,), config.step_size, dtype=torch.float64),
                             hmc.DiagonalMetric({k: torch.ones_like(v) for k, v in params.items()}))
        path, accepted = [], 0.0
        for _ in range(40):
            state, info = hmc.step(state, (data.x, data.y), generators, config=config, target=target)
            path.append(torch.cat([v.flatten(1) for v in state.params.values()], 1))
            accepted += float(info["acceptance"].mean())
        assert 0.2 < accepted / 40 < 1.0  # proposals both accepted and rejected
        paths.append(torch.stack(path))
    torch.testing.assert_close(paths[1], paths[0], rtol=0, atol=1e-10)


def test_a_fit_in_float32_keeps_its_draws_to_rounding(monkeypatch):
    """Through ``sghmc.fit`` as the tiers run it (full batch, curvature metric, float32): the draws
    of the path before and of the path now agree to float32's rounding, carried over 200 steps."""
    data = _data(FEATURES, n=40, dtype=torch.float32)
    config = sghmc.SghmcConfig(num_chains=2, epochs=200, batch_size=64, burn_in_epochs=20, thin=20,
                               step_size=4e-3, friction=0.12, metric="curvature", init="overdispersed", prior_std=3.0)
    from core.engine.runner import drain

    now = drain(sghmc.fit(config, FEATURES, data, 0))
    monkeypatch.setattr(softmax_target, "has_closed_form", lambda model: False)
    import core.engine.inference.sampling as sampling

    gathered = sampling.epoch_batches
    monkeypatch.setattr(sampling, "epoch_batches", lambda *a, ordered=True, **k: gathered(*a, ordered=True, **k))
    before = drain(sghmc.fit(config, FEATURES, data, 0))
    for k in now.samples:
        assert float(now.samples[k].std()) > 0.1
        torch.testing.assert_close(now.samples[k], before.samples[k], rtol=0, atol=2e-4)
