"""One property per test for every step function, beside the statistical tests (issue 43).

The statistical tests (``test_samplers.py``, ``test_stein.py``, ``test_variational_*.py``) run
thousands of steps and say that a method's draws are wrong; these run one step in milliseconds
and say which part of it is. Modelled on BlackJAX's ``tests/sgmcmc/test_kernels.py``: every
property is a test of its own, parametrised over the methods, and each test id names the method
(and its variant) while the test's name says the property.

Steps covered:

- the samplers' ``step(state, batch, generator, *, config, target)``: SGLD (plain, RMSprop,
  polynomial schedule, dense curvature metric, Kronecker-factored metric), SGHMC (the same
  metrics, a mass, momentum resampling), D-SGHMC (input masks) and HMC (leapfrog + Metropolis,
  diagonal and dense metric, step-size jitter); plus HMC's leapfrog, its Metropolis rejection,
  its dual averaging, and the shared RMSprop preconditioner and chain loop (burn-in,
  thinning) of ``sampling.py``;
- the variational methods' ``step(state, batch, generator, config)`` (MF-VI with and without
  local reparameterisation, sN-VI paired and unscented, sGMM-VI, variational dropout) and
  their shared Adam step ``variational.apply_gradients``;
- methods without a step of their own: MAP, MC dropout and the MAP phases of SWAG and Laplace
  train through ``optimisation.optimise`` and the ensemble through ``ensemble.train_side_by_side``; each
  is checked on a one-batch epoch, which is exactly one step. SWAG's averaging phase (SGD with
  momentum inside its fit) and Laplace (no iteration: curvature at a mode) have no step to
  check; their units (``swag_moments``, the GGN) are tested in ``test_swag.py`` and
  ``test_laplace.py``.

The properties:

- a step keeps the shapes and dtypes of its state;
- with a zero gradient and zero noise θ stays where it is (the noise is zeroed where the
  samplers draw it, ``sampling.normal_like``, their only source of noise; SGLD also at its own
  knob, temperature 0);
- the same seed gives the same step (and another seed another one);
- a positive gradient moves θ up, by exactly what the update rule says on its first step
  (½ηG·a for SGLD, (η/M)G·a for SGHMC, (εL)²/2·M⁻¹a for HMC's leapfrog; Adam's first step,
  lr·g/(|g| + ε), for the optimisers);
- every value in ``info`` is finite.

Every expected value is computed here from the update rule, not read from the code's output,
and the last section breaks a step on purpose (noise from the global generator, a descent, a
hidden shrinkage, a cast, a forgotten mass, a NaN) to show that each check can fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch

from core.engine.inference import (
    dsghmc,
    ensemble,
    hmc,
    mfvi,
    sampling,
    sghmc,
    sgld,
    sgmmvi,
    snvi,
    vdropout,
)
from core.engine.inference.base import Dataset
from core.engine.inference.chains import ChainGenerators, Params, stack_chains
from core.engine.inference.curvature import DenseMetric, KronMetric
from core.engine.inference.elbo import apply_gradients
from core.engine.inference.optimisation import optimise
from core.engine.inference.sample_store import StoragePlan
from core.engine.inference.sampling import RmsPreconditioner
from core.engine.models import ArchSpec, build_model
from core.engine.runner import drain

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# ----------------------------------------------------------------------- targets and trees

CHAINS = 5
#: A linear layer's weights as the samplers see them: one tree, a leading chain dimension.
SHAPES = {"weight": torch.Size([3, 4]), "bias": torch.Size([3])}
PRIOR_STD = 0.7


def random_tree(dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 1.0) -> Params:
    g = torch.Generator().manual_seed(seed)
    return {k: scale * torch.randn(CHAINS, *s, generator=g).to(dtype) for k, s in SHAPES.items()}


def _per_chain_sum(tree: Params) -> torch.Tensor:
    return sum(v.flatten(1).sum(1) for v in tree.values())


class FlatTarget:
    """log p = 0: the gradient is zero everywhere."""

    def log_prob_and_grad(self, params, batch):
        first = next(iter(params.values()))
        return first.new_zeros(first.shape[0]), {k: torch.zeros_like(v) for k, v in params.items()}


class LinearTarget:
    """log p(θ) = Σ aᵢθᵢ with every aᵢ > 0: the same positive gradient a everywhere."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(9)
        self.slope = {k: 0.5 + torch.rand(*s, generator=g) for k, s in SHAPES.items()}

    def gradient(self, like: Params) -> Params:
        return {k: self.slope[k].to(v.dtype).expand_as(v).clone() for k, v in like.items()}

    def log_prob_and_grad(self, params, batch):
        grad = self.gradient(params)
        return _per_chain_sum({k: grad[k] * v for k, v in params.items()}), grad


class QuadraticTarget:
    """log p(θ) = −‖θ‖² / (2σ²): a Gaussian, for steps that should simply run."""

    def log_prob_and_grad(self, params, batch):
        return (-0.5 * _per_chain_sum({k: v.pow(2) for k, v in params.items()}) / PRIOR_STD**2,
                {k: -v / PRIOR_STD**2 for k, v in params.items()})


#: A batch for D-SGHMC to mask (the targets above ignore it; the masks still draw from the stream).
BATCH = (torch.rand(CHAINS, 6, 1, 2, 2, generator=torch.Generator().manual_seed(1)), torch.zeros(CHAINS, 6).long())


# --------------------------------------------------------------------------- metrics


def _spd(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    return a @ a.T / n + 0.5 * torch.eye(n, dtype=torch.float64)


def _flat(tree: Params) -> torch.Tensor:
    """(C, 15): weight then bias, row-major (DenseMetric's order)."""
    return torch.cat([tree["weight"].flatten(1), tree["bias"]], dim=1).double()


def _unflat(flat: torch.Tensor) -> Params:
    return {"weight": flat[:, :12].reshape(-1, 3, 4), "bias": flat[:, 12:]}


DENSE_MASS = _spd(15, 3)
_G, _A = _spd(3, 4), _spd(5, 5)  # K-FAC's factors over the layer's outputs and its inputs + 1


def dense_metric() -> DenseMetric:
    return DenseMetric(DENSE_MASS, dict(SHAPES))


def kron_metric() -> KronMetric:
    lg, qg = torch.linalg.eigh(_G)
    la, qa = torch.linalg.eigh(_A)
    return KronMetric([("weight", "bias", qg, lg, qa, la)], PRIOR_STD)


def _kron_mass() -> torch.Tensor:
    """K-FAC's M = G ⊗ A + I/σ² on [W b] (3 × 5) read row by row, as a dense 15 × 15 matrix."""
    return torch.kron(_G, _A) + torch.eye(15, dtype=torch.float64) / PRIOR_STD**2


def _to_layer(tree: Params) -> torch.Tensor:
    """[W b] of each chain, row-major: (C, 15)."""
    return torch.cat([tree["weight"], tree["bias"].unsqueeze(-1)], dim=-1).flatten(1).double()


def _from_layer(flat: torch.Tensor) -> Params:
    x = flat.reshape(-1, 3, 5)
    return {"weight": x[..., :4], "bias": x[..., 4]}


def solve_dense(mass: torch.Tensor, a: Params) -> Params:
    """M⁻¹a per chain for the dense metric's order."""
    return _unflat(torch.linalg.solve(mass, _flat(a).T).T)


def solve_kron(a: Params) -> Params:
    return _from_layer(torch.linalg.solve(_kron_mass(), _to_layer(a).T).T)


# ---------------------------------------------------------------------- sampler cases


@dataclass(frozen=True)
class SamplerCase:
    """A sampler's step with its settings, how its state starts, and its first move under a
    constant gradient a with zero noise (None where the rule draws something, as HMC's jitter)."""

    name: str
    step: Callable[..., tuple[Any, dict[str, torch.Tensor]]]
    config: Any
    start: Callable[[Params, Any, Any], Any]  # (params, config, target) → state
    drift: Callable[[Params], Params] | None = None
    batch: Any = None
    diagonal: bool = True  # a diagonal preconditioner: each weight moves along its own gradient
    momentum: bool = False  # the state carries momenta shaped as θ
    noisy: bool = True  # a step draws random numbers (another seed, another step)

    def run(self, state: Any, generator: torch.Generator, target: Any, step: Callable | None = None):
        return (step or self.step)(state, self.batch, generator, config=self.config, target=target)


def _sg_start(module, metric: Callable[[], Any] | None = None, t: int = 0):
    def start(params, config, target):
        state = module.init(params, config=config, generator=torch.Generator(),
                            **({"metric": metric()} if metric else {}))
        return replace(state, t=t)
    return start


def _hmc_start(metric: Callable[[], Any] | None = None):
    def start(params, config, target):
        return hmc.init(params, config=config, target=target, metric=metric() if metric else None)
    return start


ETA = 0.02
SGLD_PLAIN = sgld.SgldConfig(step_size=ETA)
SGLD_RMS = sgld.SgldConfig(step_size=ETA, precondition=True, rms_epsilon=1e-3)
SGLD_DECAY = sgld.SgldConfig(step_size=ETA, schedule="polynomial", decay_offset=2.0, decay_power=0.55)
SGLD_DENSE = sgld.SgldConfig(step_size=ETA, metric="curvature")
SGLD_KRON = sgld.SgldConfig(step_size=ETA, metric="kron")
SGHMC_PLAIN = sghmc.SghmcConfig(step_size=ETA, friction=0.2, mass=2.0)
SGHMC_RMS = sghmc.SghmcConfig(step_size=ETA, friction=0.2, precondition=True, rms_epsilon=1e-3)
SGHMC_DENSE = sghmc.SghmcConfig(step_size=ETA, friction=0.2, metric="curvature")
SGHMC_KRON = sghmc.SghmcConfig(step_size=ETA, friction=0.2, metric="kron")
SGHMC_RESAMPLE = sghmc.SghmcConfig(step_size=ETA, friction=0.2, resample_every=1)
DSGHMC = dsghmc.DsghmcConfig(step_size=ETA, friction=0.2, drop_rate=0.5)
EPS, LEAPFROG = 0.1, 3
HMC_FIXED = hmc.HmcConfig(step_size=EPS, num_leapfrog=LEAPFROG, step_size_jitter=0.0)
HMC_JITTER = hmc.HmcConfig(step_size=EPS, num_leapfrog=LEAPFROG, step_size_jitter=0.5)
INV_MASS = {k: 0.5 + torch.rand(*s, generator=torch.Generator().manual_seed(2)) for k, s in SHAPES.items()}


def _diag_metric() -> hmc.DiagonalMetric:
    return hmc.DiagonalMetric({k: v.expand(CHAINS, *v.shape).clone() for k, v in INV_MASS.items()})


def _rms(a: Params, eps: float) -> Params:
    """RMSprop's G at its first update: V = a², G = 1/(λ + |a|)."""
    return {k: 1.0 / (eps + v.abs()) for k, v in a.items()}


def _scale(c: float, tree: Params) -> Params:
    return {k: c * v for k, v in tree.items()}


SAMPLERS = [
    SamplerCase("sgld", sgld.step, SGLD_PLAIN, _sg_start(sgld), lambda a: _scale(ETA / 2, a)),
    SamplerCase("sgld-rmsprop", sgld.step, SGLD_RMS, _sg_start(sgld),
                lambda a: {k: ETA / 2 * g * a[k] for k, g in _rms(a, 1e-3).items()}),
    # ten steps in: ηₜ = η₀ (b / (b + t))^γ
    SamplerCase("sgld-polynomial", sgld.step, SGLD_DECAY, _sg_start(sgld, t=10),
                lambda a: _scale(ETA * (2 / 12) ** 0.55 / 2, a)),
    SamplerCase("sgld-curvature", sgld.step, SGLD_DENSE, _sg_start(sgld, dense_metric),
                lambda a: _scale(ETA / 2, solve_dense(DENSE_MASS, a)), diagonal=False),
    SamplerCase("sgld-kron", sgld.step, SGLD_KRON, _sg_start(sgld, kron_metric),
                lambda a: _scale(ETA / 2, solve_kron(a)), diagonal=False),
    SamplerCase("sghmc", sghmc.step, SGHMC_PLAIN, _sg_start(sghmc), lambda a: _scale(ETA / 2.0, a), momentum=True),
    SamplerCase("sghmc-rmsprop", sghmc.step, SGHMC_RMS, _sg_start(sghmc),
                lambda a: {k: ETA * g * a[k] for k, g in _rms(a, 1e-3).items()}, momentum=True),
    SamplerCase("sghmc-curvature", sghmc.step, SGHMC_DENSE, _sg_start(sghmc, dense_metric),
                lambda a: _scale(ETA, solve_dense(DENSE_MASS, a)), diagonal=False, momentum=True),
    SamplerCase("sghmc-kron", sghmc.step, SGHMC_KRON, _sg_start(sghmc, kron_metric),
                lambda a: _scale(ETA, solve_kron(a)), diagonal=False, momentum=True),
    # one step in, so that this step redraws the momentum first
    SamplerCase("sghmc-resample", sghmc.step, SGHMC_RESAMPLE, _sg_start(sghmc, t=1),
                lambda a: _scale(ETA, a), momentum=True),
    SamplerCase("dsghmc", dsghmc.step, DSGHMC, _sg_start(dsghmc), lambda a: _scale(ETA, a), batch=BATCH,
                momentum=True),
    SamplerCase("hmc-diagonal", hmc.step, HMC_FIXED, _hmc_start(_diag_metric),
                lambda a: {k: (EPS * LEAPFROG) ** 2 / 2 * INV_MASS[k] * v for k, v in a.items()}),
    SamplerCase("hmc-dense", hmc.step, HMC_FIXED, _hmc_start(dense_metric),
                lambda a: _scale((EPS * LEAPFROG) ** 2 / 2, solve_dense(DENSE_MASS, a)), diagonal=False),
    SamplerCase("hmc-jitter", hmc.step, HMC_JITTER, _hmc_start()),
]
BY_NAME = {case.name: case for case in SAMPLERS}
IDS = [case.name for case in SAMPLERS]


def _zero_noise(monkeypatch) -> None:
    """The samplers draw every Gaussian they inject through ``sampling.normal_like``."""
    monkeypatch.setattr(sampling, "normal_like", lambda params, generator: {k: torch.zeros_like(v)
                                                                            for k, v in params.items()})


def _trees(state: Any, case: SamplerCase) -> dict[str, Params]:
    trees = {"params": state.params}
    if case.momentum:
        trees["momentum"] = state.momentum
    return trees


# ------------------------------------------------------------------------- the checks


def check_shapes_and_dtypes(case: SamplerCase, dtype: torch.dtype, step: Callable | None = None) -> None:
    target = QuadraticTarget()
    state = case.start(random_tree(dtype), case.config, target)
    before = {name: {k: (v.shape, v.dtype) for k, v in tree.items()} for name, tree in _trees(state, case).items()}
    new, info = case.run(state, torch.Generator().manual_seed(0), target, step)
    after = {name: {k: (v.shape, v.dtype) for k, v in tree.items()} for name, tree in _trees(new, case).items()}
    assert after == before
    for key, value in info.items():  # per-chain values or one scalar
        assert value.shape in ((CHAINS,), ()), (key, value.shape)


def check_still_without_gradient_or_noise(case: SamplerCase, step: Callable | None = None) -> None:
    target = FlatTarget()
    state = case.start(random_tree(), case.config, target)
    before = {k: v.clone() for k, v in state.params.items()}
    new, _ = case.run(state, torch.Generator().manual_seed(0), target, step)
    for k, v in before.items():
        assert torch.equal(new.params[k], v), k


def check_same_seed_same_step(case: SamplerCase, step: Callable | None = None) -> None:
    target = QuadraticTarget()
    runs = []
    for _ in range(2):
        state = case.start(random_tree(), case.config, target)
        runs.append(case.run(state, torch.Generator().manual_seed(123), target, step))
    (first, info1), (second, info2) = runs
    for name, tree in _trees(first, case).items():
        for k, v in tree.items():
            assert torch.equal(v, _trees(second, case)[name][k]), (name, k)
    for k, v in info1.items():
        assert torch.equal(v, info2[k]), k


def check_moves_up(case: SamplerCase, step: Callable | None = None) -> None:
    target = LinearTarget()
    state = case.start(random_tree(), case.config, target)
    start = {k: v.clone() for k, v in state.params.items()}
    logp0, _ = target.log_prob_and_grad(start, None)
    new, _ = case.run(state, torch.Generator().manual_seed(0), target, step)
    logp1, _ = target.log_prob_and_grad(new.params, None)
    assert (logp1 > logp0).all(), (logp1 - logp0).tolist()  # uphill, whatever the metric
    if case.diagonal:  # and every weight up its own (positive) gradient
        for k, v in new.params.items():
            assert (v > start[k]).all(), k


def check_drift(case: SamplerCase, step: Callable | None = None) -> None:
    target = LinearTarget()
    state = case.start(random_tree(), case.config, target)
    start = {k: v.clone() for k, v in state.params.items()}
    new, _ = case.run(state, torch.Generator().manual_seed(0), target, step)
    expected = case.drift(target.gradient(start))
    for k, v in new.params.items():
        torch.testing.assert_close((v - start[k]).double(), expected[k].double(), rtol=1e-4, atol=1e-6)


def check_finite_info(case: SamplerCase, step: Callable | None = None) -> None:
    target = QuadraticTarget()
    state = case.start(random_tree(), case.config, target)
    _, info = case.run(state, torch.Generator().manual_seed(0), target, step)
    assert info, "a step reports what a person watches"
    for k, v in info.items():
        assert torch.isfinite(torch.as_tensor(v)).all(), (k, v)


# -------------------------------------------------------------------------- sampler tests


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", SAMPLERS, ids=IDS)
def test_a_step_keeps_the_shapes_and_dtypes_of_its_state(case, dtype):
    check_shapes_and_dtypes(case, dtype)


@pytest.mark.parametrize("case", SAMPLERS, ids=IDS)
def test_zero_gradient_and_zero_noise_leave_theta_where_it_was(case, monkeypatch):
    _zero_noise(monkeypatch)
    check_still_without_gradient_or_noise(case)


def test_sgld_at_temperature_zero_injects_no_noise():
    """SGLD's own knob for its noise: T = 0 is gradient ascent, with no patch needed."""
    check_still_without_gradient_or_noise(replace(BY_NAME["sgld"], config=sgld.SgldConfig(step_size=ETA,
                                                                                          temperature=0.0)))


@pytest.mark.parametrize("case", SAMPLERS, ids=IDS)
def test_the_same_seed_gives_the_same_step(case):
    check_same_seed_same_step(case)


@pytest.mark.parametrize("case", SAMPLERS, ids=IDS)
def test_another_seed_gives_another_step(case):
    target = QuadraticTarget()
    moved = []
    for seed in (1, 2):
        state = case.start(random_tree(), case.config, target)
        moved.append(case.run(state, torch.Generator().manual_seed(seed), target)[0].params["weight"])
    assert not torch.equal(*moved)


@pytest.mark.parametrize("case", SAMPLERS, ids=IDS)
def test_a_positive_gradient_moves_theta_up(case, monkeypatch):
    _zero_noise(monkeypatch)
    check_moves_up(case)


@pytest.mark.parametrize("case", [c for c in SAMPLERS if c.drift is not None],
                         ids=[c.name for c in SAMPLERS if c.drift is not None])
def test_the_first_move_is_the_update_rules(case, monkeypatch):
    """From rest (zero momentum), with a constant gradient a and zero noise: SGLD moves ½ηG a,
    SGHMC (η/M)G a, HMC (εL)²/2 M⁻¹a (the leapfrog is exact on a linear log density, so the
    Metropolis test accepts)."""
    _zero_noise(monkeypatch)
    check_drift(case)


@pytest.mark.parametrize("case", SAMPLERS, ids=IDS)
def test_info_holds_finite_values(case):
    check_finite_info(case)


# ------------------------------------------------------------------ HMC's parts on their own


def test_hmc_leapfrog_is_reversible():
    """L leapfrog steps, momenta negated, L more: back at the start (what makes the Metropolis
    test exact)."""
    target = QuadraticTarget()
    theta = random_tree(torch.float64)
    momentum = random_tree(torch.float64, seed=1)
    metric = hmc.DiagonalMetric({k: v.double().expand(CHAINS, *v.shape) for k, v in INV_MASS.items()})
    eps = torch.full((CHAINS,), 0.3, dtype=torch.float64)
    _, grad = target.log_prob_and_grad(theta, None)
    end, r, _, g = hmc.leapfrog(theta, momentum, grad, eps, metric, 7, target, None)
    back, r_back, _, _ = hmc.leapfrog(end, {k: -v for k, v in r.items()}, g, eps, metric, 7, target, None)
    for k in theta:
        torch.testing.assert_close(back[k], theta[k], rtol=0, atol=1e-12)
        torch.testing.assert_close(-r_back[k], momentum[k], rtol=0, atol=1e-12)


def test_hmc_rejects_a_divergent_proposal_and_keeps_its_state():
    """A step far past the stability limit of a stiff Gaussian: the energy error is huge, the
    proposal divergent, and θ, its log posterior and gradient stay as they were."""
    target = QuadraticTarget()
    config = hmc.HmcConfig(step_size=10.0, num_leapfrog=5, step_size_jitter=0.0, max_energy_error=1000.0)
    state = hmc.init(random_tree(), config=config, target=target)
    before = (dict(state.params), state.log_posterior.clone(), dict(state.grad))
    new, info = hmc.step(state, None, torch.Generator().manual_seed(0), config=config, target=target)
    assert (info["divergent"] == 1).all() and (info["acceptance"] == 0).all()
    for k in before[0]:
        assert torch.equal(new.params[k], before[0][k]) and torch.equal(new.grad[k], before[2][k])
    assert torch.equal(new.log_posterior, before[1])


def test_hmc_dual_averaging_lengthens_the_step_after_high_acceptance():
    """Above the target acceptance the next ε is longer than below it, chain by chain."""
    step = torch.full((CHAINS,), 0.1)
    high = hmc.DualAveraging.start(step, 0.8).update(torch.full((CHAINS,), 0.99))
    low = hmc.DualAveraging.start(step, 0.8).update(torch.full((CHAINS,), 0.3))
    assert high.shape == (CHAINS,) and (high > low).all()


def test_the_rmsprop_preconditioner_is_fixed_once_it_stops_adapting():
    """G = 1/(λ + √V) with V the running mean of g²; after ``adapt=False`` it no longer moves."""
    pre = RmsPreconditioner(decay=0.9, epsilon=1e-3)
    g1, g2 = random_tree(seed=1), random_tree(seed=2)
    first = pre.update(g1)
    for k, v in first.items():
        torch.testing.assert_close(v, 1.0 / (1e-3 + g1[k].abs()))
    second = {k: v.clone() for k, v in pre.update(g2).items()}
    for k, v in second.items():
        torch.testing.assert_close(v, 1.0 / (1e-3 + (0.9 * g1[k] ** 2 + 0.1 * g2[k] ** 2).sqrt()))
    fixed = pre.update(random_tree(seed=3, scale=100.0), adapt=False)
    for k, v in fixed.items():
        assert torch.equal(v, second[k])


def test_the_chain_loop_keeps_the_state_after_every_thin_th_step_past_burn_in():
    """``sampling.sample_chains``, the loop every sampler's steps run in: with burn-in b and
    thinning k it stores θ after steps b + k, b + 2k, … (a step here sets θ to its own count)."""
    from types import SimpleNamespace

    def count(state, batch, generator, *, config, target):
        t = state.t + 1
        return SimpleNamespace(t=t, params={"theta": torch.full((2, 1), float(t))}), {"log_posterior": torch.zeros(2)}

    plan = StoragePlan(burn_in=7, thin=3, num_draws=4)
    result = drain(sampling.sample_chains(count, SimpleNamespace(t=0, params={"theta": torch.zeros(2, 1)}),
                                          config=None, target=None, batches=sampling.constant_batches(),
                                          num_steps=20, plan=plan, generator=torch.Generator()))
    kept = torch.tensor([10.0, 13.0, 16.0, 19.0])
    assert torch.equal(result.samples["theta"], kept.expand(2, -1).reshape(2, 4, 1))


# ------------------------------------------------------------------ variational steps

ARCH = ArchSpec("softmax", num_classes=3, image_size=2)
NUM_TRAIN = 8


def _data() -> Dataset:
    g = torch.Generator().manual_seed(4)
    return Dataset(torch.rand(NUM_TRAIN, 1, 2, 2, generator=g), torch.randint(0, 3, (NUM_TRAIN,), generator=g), "toy")


@dataclass(frozen=True)
class VariationalCase:
    name: str
    module: Any
    config: Any

    def start(self):
        return self.module.init(self.config, ARCH, NUM_TRAIN, 0)

    def run(self, state, seed: int = 0):
        data = _data()
        return self.module.step(state, (data.x, data.y), torch.Generator().manual_seed(seed), self.config)


VARIATIONAL = [
    VariationalCase("mfvi-local", mfvi, mfvi.MfviConfig(local_reparam=True, init_std=0.1)),
    VariationalCase("mfvi-paired", mfvi, mfvi.MfviConfig(local_reparam=False, sampling="paired", init_std=0.1)),
    VariationalCase("snvi-paired", snvi, snvi.SnviConfig(rank=2, sampling="paired", init_std=0.1)),
    VariationalCase("snvi-unscented", snvi, snvi.SnviConfig(rank=2, sampling="unscented", num_samples=4, init_std=0.1)),
    VariationalCase("sgmmvi", sgmmvi, sgmmvi.SgmmviConfig(rank=1, components=2, init_std=0.1)),
    VariationalCase("vdropout", vdropout, vdropout.VdropoutConfig()),
]
VI_IDS = [case.name for case in VARIATIONAL]


def _variational(state) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.variational.named_parameters()}


@pytest.mark.parametrize("case", VARIATIONAL, ids=VI_IDS)
def test_a_variational_step_keeps_the_shapes_and_dtypes_of_q(case):
    state = case.start()
    before = {k: (v.shape, v.dtype) for k, v in _variational(state).items()}
    state, _ = case.run(state)
    assert {k: (v.shape, v.dtype) for k, v in _variational(state).items()} == before


@pytest.mark.parametrize("case", VARIATIONAL, ids=VI_IDS)
def test_a_zero_gradient_leaves_q_where_it_was(case):
    """The variational methods' one optimiser step (``apply_gradients``: Adam, cosine schedule) on
    a loss with zero gradient. (Their ELBO has no knob that zeroes its gradient, so the shared
    step is the unit checked.)"""
    state = case.start()
    before = _variational(state)
    loss = sum((0.0 * p).sum() for p in state.variational.parameters() if p.requires_grad)
    apply_gradients(state, loss + 1.0)
    for k, v in _variational(state).items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("case", VARIATIONAL, ids=VI_IDS)
def test_the_same_seed_gives_the_same_variational_step(case):
    (s1, i1), (s2, i2) = (case.run(case.start(), seed=5) for _ in range(2))
    after1, after2 = _variational(s1), _variational(s2)
    for k, v in after1.items():
        assert torch.equal(v, after2[k]), k
    assert i1 == i2


@pytest.mark.parametrize("case", VARIATIONAL, ids=VI_IDS)
def test_another_seed_gives_another_variational_step(case):
    """Two steps: Adam's first moves every parameter by about lr·sign(g), which other noise
    rarely changes (MF-VI's first steps at two seeds are equal), while its second depends on the
    gradients' sizes, and its ELBO estimate on the noise at once."""
    after, infos = [], []
    for seed in (1, 2):
        state, info = case.run(case.start(), seed=seed)
        state, _ = case.run(state, seed=seed + 10)
        after.append(_variational(state))
        infos.append(info)
    assert any(not torch.equal(v, after[1][k]) for k, v in after[0].items())
    assert infos[0]["elbo"] != infos[1]["elbo"]


def _record_gradients(state) -> dict[int, tuple[torch.Tensor, float, float]]:
    """Each parameter's gradient, learning rate and Adam ε, as the optimiser sees them."""
    seen: dict[int, tuple[torch.Tensor, float, float]] = {}

    def hook(optimiser, args, kwargs):
        for group in optimiser.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    seen[id(p)] = (p.grad.detach().clone(), group["lr"], group["eps"])

    state.optimiser.register_step_pre_hook(hook)
    return seen


@pytest.mark.parametrize("case", VARIATIONAL, ids=VI_IDS)
def test_a_variational_step_moves_each_parameter_up_its_elbo_gradient_by_the_learning_rate(case):
    """Adam's first step is lr·g/(|g| + ε) against the loss gradient g (m̂ = g, v̂ = g²): each
    parameter whose −ELBO gradient is negative (ELBO gradient positive) goes up by about lr."""
    state = case.start()
    params = dict(state.variational.named_parameters())
    before = _variational(state)
    grads = _record_gradients(state)
    state, _ = case.run(state)
    assert grads, "the step took an optimiser step"
    for name, p in params.items():
        if id(p) not in grads:
            assert torch.equal(p.detach(), before[name]), name
            continue
        g, lr, eps = grads[id(p)]
        torch.testing.assert_close(p.detach() - before[name], -lr * g / (g.abs() + eps), rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize("case", VARIATIONAL, ids=VI_IDS)
def test_variational_info_holds_finite_values(case):
    _, info = case.run(case.start())
    assert info and all(math.isfinite(v) for v in info.values()), info


# ---------------------------------------- methods that train through an optimiser loop

def _one_batch_data() -> Dataset:
    g = torch.Generator().manual_seed(6)
    return Dataset(torch.rand(10, 1, 2, 2, generator=g), torch.randint(0, 3, (10,), generator=g), "toy")


def _loss_gradients(model: torch.nn.Module, data: Dataset, penalty: float) -> dict[str, torch.Tensor]:
    """∇ of mean cross-entropy + penalty·‖θ‖², written out independently of the fits."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
    logits = torch.func.functional_call(model, params, (data.x,))
    log_prob = logits.log_softmax(-1)[torch.arange(len(data.y)), data.y]
    loss = -log_prob.mean() + penalty * sum(p.pow(2).sum() for p in params.values())
    return dict(zip(params, torch.autograd.grad(loss, list(params.values())), strict=True))


def _adam_first_move(g: torch.Tensor, lr: float) -> torch.Tensor:
    return -lr * g / (g.abs() + 1e-8)


def test_the_map_fits_one_step_moves_each_weight_down_its_loss_gradient_by_the_learning_rate():
    """``optimisation.optimise`` (MAP, MC dropout, the MAP phase of SWAG and Laplace) on one batch for one
    epoch is one Adam step: each weight moves by lr·g/(|g| + ε) against its gradient."""
    data, lr, penalty = _one_batch_data(), 0.01, 0.05
    torch.manual_seed(0)
    model = build_model(ARCH)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    grads = _loss_gradients(model, data, penalty)
    drain(optimise(model, data, epochs=1, batch_size=len(data), lr=lr, penalty=penalty,
                   generator=torch.Generator().manual_seed(0)))
    for k, v in model.named_parameters():
        torch.testing.assert_close(v.detach() - before[k], _adam_first_move(grads[k], lr), rtol=1e-3, atol=1e-7)


def test_the_ensembles_one_step_moves_each_members_weights_down_its_loss_gradient():
    """``ensemble.train_side_by_side``, one batch for one epoch: member m moves as it would alone."""
    data, lr, penalty = _one_batch_data(), 0.01, 0.05
    generators = ChainGenerators(0, (0, 1, 2))
    models = generators.models(ARCH)
    grads = [_loss_gradients(m, data, penalty) for m in models]
    before = stack_chains(models)
    after = drain(ensemble.train_side_by_side(models, data, generators.generators, epochs=1, batch_size=len(data),
                                              lr=lr, penalty=penalty))
    for k, v in after.items():
        expected = torch.stack([_adam_first_move(g[k], lr) for g in grads])
        torch.testing.assert_close(v - before[k], expected, rtol=1e-3, atol=1e-7)


# ----------------------------------------------- negative controls: each check can fail


def test_the_same_seed_check_fails_a_step_whose_noise_ignores_its_generator(monkeypatch):
    monkeypatch.setattr(sampling, "normal_like", lambda params, generator: {k: torch.randn_like(v)
                                                                            for k, v in params.items()})
    with pytest.raises(AssertionError):
        check_same_seed_same_step(BY_NAME["sgld"])


def test_the_uphill_check_fails_a_step_that_descends(monkeypatch):
    _zero_noise(monkeypatch)

    class Downhill:  # the gradient's sign flipped on its way into the step
        def __init__(self, target):
            self.target = target

        def log_prob_and_grad(self, params, batch):
            logp, grad = self.target.log_prob_and_grad(params, batch)
            return logp, {k: -v for k, v in grad.items()}

    def descending(state, batch, generator, *, config, target):
        return sgld.step(state, batch, generator, config=config, target=Downhill(target))

    with pytest.raises(AssertionError):
        check_moves_up(BY_NAME["sgld"], descending)


def test_the_zero_gradient_check_fails_a_step_with_a_hidden_shrinkage(monkeypatch):
    _zero_noise(monkeypatch)

    def shrinking(state, batch, generator, *, config, target):  # a prior's pull applied twice
        new, info = sghmc.step(state, batch, generator, config=config, target=target)
        return replace(new, params={k: (1 - 1e-4) * v for k, v in new.params.items()}), info

    with pytest.raises(AssertionError):
        check_still_without_gradient_or_noise(BY_NAME["sghmc"], shrinking)


def test_the_dtype_check_fails_a_step_that_casts_to_float32():
    def casting(state, batch, generator, *, config, target):
        new, info = sgld.step(state, batch, generator, config=config, target=target)
        return replace(new, params={k: v.float() for k, v in new.params.items()}), info

    with pytest.raises(AssertionError):
        check_shapes_and_dtypes(BY_NAME["sgld"], torch.float64, casting)


def test_the_drift_check_fails_sghmc_that_forgets_its_mass(monkeypatch):
    _zero_noise(monkeypatch)

    def massless(state, batch, generator, *, config, target):
        return sghmc.step(state, batch, generator, config=replace(config, mass=1.0), target=target)

    with pytest.raises(AssertionError):
        check_drift(BY_NAME["sghmc"], massless)


class NanTarget(QuadraticTarget):
    """A log posterior that is NaN wherever it is evaluated (its gradient stays finite)."""

    def log_prob_and_grad(self, params, batch):
        logp, grad = super().log_prob_and_grad(params, batch)
        return torch.full_like(logp, float("nan")), grad


def test_the_finite_info_check_fails_a_step_whose_log_posterior_is_nan():
    def broken(state, batch, generator, *, config, target):
        return sgld.step(state, batch, generator, config=config, target=NanTarget())

    with pytest.raises(AssertionError):
        check_finite_info(BY_NAME["sgld"], broken)


def test_hmc_rejects_a_proposal_whose_log_posterior_is_nan_and_reports_finite_values():
    """Where SGLD would report the NaN (above), HMC's Metropolis test counts a non-finite energy
    error as a divergence: the proposal is rejected and ``info`` keeps the last finite state's."""
    state = hmc.init(random_tree(), config=HMC_FIXED, target=QuadraticTarget())
    new, info = hmc.step(state, None, torch.Generator().manual_seed(0), config=HMC_FIXED, target=NanTarget())
    assert (info["divergent"] == 1).all()
    assert all(torch.isfinite(v).all() for v in info.values())
    assert all(torch.equal(new.params[k], v) for k, v in state.params.items())
