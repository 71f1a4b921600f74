"""Chains, the sample store, diagnostics, reproducibility and the sampler posteriors."""

from __future__ import annotations

import pytest
import torch

from core.engine.inference import METHODS, dsghmc, ensemble, hmc, sghmc, sgld
from core.engine.inference.chains import ChainGenerators, chain_rand
from core.engine.inference.dsghmc import InputDropoutPosterior
from core.engine.inference.sample_store import SampleBudgetError, SampleBudgetWarning, plan_storage
from core.engine.inference.sampling import FunctionTarget, SamplerDivergedError
from core.engine.models import ArchSpec
from core.engine.runner import drain
from core.engine.store import load_posterior, save_posterior
from tests.conftest import toy_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")


ARCH = ArchSpec("softmax", num_classes=2, image_size=4)
SMALL = {"num_chains": 3, "epochs": 4, "batch_size": 20, "burn_in_epochs": 1, "thin": 3}


# ------------------------------------------------------------------------- registry


def test_methods_registered_with_their_configs():
    for name, cls in [("sgld", sgld.SgldConfig), ("sghmc", sghmc.SghmcConfig),
                      ("dsghmc", dsghmc.DsghmcConfig), ("hmc", hmc.HmcConfig),
                      ("ensemble", ensemble.EnsembleConfig)]:
        assert METHODS[name].config_cls is cls
    with pytest.raises(ValueError, match="no setting"):
        METHODS["sghmc"].make_config(leapfrog=3)


@pytest.mark.parametrize("bad", [{"friction": 0.0}, {"friction": 0.1, "noise_estimate": 0.2},
                                 {"step_size": -1.0}, {"burn_in_epochs": 20}])
def test_sghmc_config_rejects_nonsense(bad):
    with pytest.raises(ValueError):
        sghmc.SghmcConfig(**bad)


# --------------------------------------------------------------------- sample store


def test_storage_plan_refuses_over_budget_with_numbers():
    with pytest.raises(SampleBudgetError, match="over the sample budget of 1 MB"):
        plan_storage(10_000, 0, 1, draw_bytes=4 * 10_000, budget_mb=1.0, policy="refuse")


def test_storage_plan_thins_to_fit():
    plan = plan_storage(10_000, 1_000, 1, draw_bytes=4 * 10_000, budget_mb=1.0, policy="thin")
    assert plan.num_draws * 4 * 10_000 <= 2**20
    assert plan.thin > 1 and "thinning by" in plan.message


def test_fit_thins_with_a_warning_and_respects_the_budget():
    # 3 draws of 3 chains x 34 weights take 1224 bytes; 1e-3 MB holds 1048
    config = sgld.SgldConfig(**SMALL, step_size=1e-3, memory_budget_mb=1e-3, on_budget="thin")
    with pytest.warns(SampleBudgetWarning, match="thinning by"):
        post = drain(sgld.fit(config, ARCH, toy_data(), 0))
    stored = sum(v.numel() for v in post.samples.values()) * 4
    assert 0 < stored <= 1e-3 * 2**20
    assert "thinning" in post.info["sample_store"]


def test_fit_refuses_over_budget():
    config = sgld.SgldConfig(**SMALL, step_size=1e-3, memory_budget_mb=1e-3)
    with pytest.raises(SampleBudgetError):
        drain(sgld.fit(config, ARCH, toy_data(), 0))


# ---------------------------------------------------------- fit, progress, reproducibility


@pytest.mark.parametrize("name", ["sgld", "sghmc", "dsghmc"])
def test_fit_is_reproducible_and_reports_progress(name):
    method = METHODS[name]
    config = method.make_config(**SMALL, step_size=1e-3 if name == "sgld" else 1e-4)
    records = []
    first = drain(method.fit(config, ARCH, toy_data(), 7), records.append)
    second = drain(method.fit(config, ARCH, toy_data(), 7))
    other = drain(method.fit(config, ARCH, toy_data(), 8))
    for k, v in first.samples.items():
        assert torch.equal(v, second.samples[k])
        assert not torch.equal(v, other.samples[k])
    assert first.num_chains == 3 and first.num_draws == (4 - 1) * 3 // 3
    assert records and {"log_posterior", "step_size"} <= set(records[-1].values)
    assert records[-1].step == records[-1].total == 12
    assert {"rhat_log_posterior", "ess_log_posterior"} <= set(first.info)
    assert len(first.info["traces"]["log_posterior"]) == 3
    probs = first.predict_proba(toy_data().x[:5])
    assert probs.shape == (first.num_samples, 5, 2)


def test_divergence_is_a_clear_error():
    config = sgld.SgldConfig(**SMALL, step_size=1e6)
    with pytest.raises(SamplerDivergedError, match="lower the step size"):
        drain(sgld.fit(config, ARCH, toy_data(), 0))


def test_a_chain_whose_log_posterior_collapses_while_finite_is_stopped():
    """SGHMC on LeNet-5 went from −1.5e5 to −1e14 with finite numbers and ran on to the end."""
    from types import SimpleNamespace

    from core.engine.inference.chains import ChainGenerators
    from core.engine.inference.sample_store import StoragePlan
    from core.engine.inference.sampling import DIVERGED_FALL, sample_chains

    def run(values, generator=None):
        falls = iter(values)

        def step(state, batch, generator, config, target):
            return state, {"log_posterior": torch.tensor([-2.0e4, next(falls)])}

        state = SimpleNamespace(params={"w": torch.zeros(2, 3)})
        gen = sample_chains(step, state, config=None, target=None, batches=iter(lambda: None, 1),
                            num_steps=len(values), plan=StoragePlan(0, 1, len(values)),
                            generator=generator or torch.Generator())
        return drain(gen)

    # a chain started far off climbs (its early values far below its later best are no fall) and
    # wobbles; a target whose log density peaks near 0 wobbles below it by far more than 10⁶ times
    run([-5.0e9, -1.0e5, -1.5e4, -3.0e4, -1.4e4])
    run([-3.0, -4.0e-6, -4.5, -12.0])
    with pytest.raises(SamplerDivergedError, match=r"of chain 1 fell from -1\.5e\+05 to -1e\+14 at step 3"):
        run([-2.0e5, -1.5e5, -1.0e14, -2.0e14])
    # a subset's second row is the run's chain 3 (train --chains 2,3), and the message names it so
    with pytest.raises(SamplerDivergedError, match=r"of chain 3 became non-finite at step 2"):
        run([-2.0e5, float("nan")], ChainGenerators(0, (2, 3)))
    assert -1.5e5 - DIVERGED_FALL * 1.5e5 > -1.0e14


# ---------------------------------------------------------------------------- D-SGHMC


def test_input_dropout_keeps_the_expected_input():
    g = torch.Generator().manual_seed(0)
    x = torch.full((200, 1000), 2.0)
    masked = dsghmc.input_dropout(x, 0.3, g)
    assert (masked == 0).float().mean() == pytest.approx(0.3, abs=0.005)
    assert masked[masked != 0].unique().tolist() == pytest.approx([2.0 / 0.7])
    assert masked.mean() == pytest.approx(2.0, rel=0.01)


@pytest.mark.parametrize("per_chain", [False, True])
@pytest.mark.parametrize("drop_rate", [0.5, 0.3])
def test_input_dropout_is_the_mask_of_its_uniform_draws_bit_for_bit(per_chain, drop_rate):
    """The in-place mask is ``x * (u < keep) / keep`` of the same uniform draws u, bit for bit
    (the formula it replaced), on inputs of both signs and for one generator or per-chain ones."""
    x = torch.randn(3, 40, 17, generator=torch.Generator().manual_seed(1))

    def generator():
        return ChainGenerators(5, [0, 2, 3]) if per_chain else torch.Generator().manual_seed(5)

    u = chain_rand(x.shape, generator())
    keep = 1.0 - drop_rate
    expected = x * (u < keep) / keep
    assert torch.equal(dsghmc.input_dropout(x, drop_rate, generator()), expected)
    assert not torch.equal(expected, x)  # the mask dropped something


def test_dsghmc_step_masks_each_iteration_afresh():
    seen = []

    def log_prob(params, batch):
        x, _ = batch
        seen.append(x.clone())
        return -0.5 * params["theta"].pow(2).sum(1)

    config = dsghmc.DsghmcConfig(step_size=1e-3, friction=0.1, drop_rate=0.5)
    g = torch.Generator().manual_seed(0)
    state = dsghmc.init({"theta": torch.zeros(2, 3)}, config=config, generator=g)
    batch = (torch.ones(2, 50, 10), torch.zeros(2, 50))
    target = FunctionTarget(log_prob)
    for _ in range(2):
        state, _ = dsghmc.step(state, batch, g, config=config, target=target)
    assert not torch.equal(seen[0], seen[1])
    assert set(seen[0].unique().tolist()) == {0.0, 2.0}


@pytest.mark.parametrize("mask", [True, False])
def test_input_dropout_posterior_round_trip(tmp_path, mask):
    config = dsghmc.DsghmcConfig(**SMALL, step_size=1e-4, drop_rate=0.5, mask_at_prediction=mask)
    arch = ArchSpec("softmax", num_classes=2)  # 28×28: the only image size a posterior file may read
    post = drain(dsghmc.fit(config, arch, toy_data(side=28), 0))
    assert isinstance(post, InputDropoutPosterior)
    loaded = load_posterior(save_posterior(post, tmp_path / "d.pt"))
    assert isinstance(loaded, InputDropoutPosterior) and loaded.mask_at_prediction is mask
    x = toy_data(side=28).x[:4]
    a = loaded.predict_proba(x, generator=torch.Generator().manual_seed(1))
    b = loaded.predict_proba(x, generator=torch.Generator().manual_seed(2))
    assert a.shape == (post.num_samples, 4, 2)
    assert torch.equal(a, b) is (not mask)
    if not mask:
        assert torch.allclose(a, post.predict_proba(x))


# -------------------------------------------------------------------------------- HMC


def test_hmc_adapts_to_the_target_acceptance():
    """Dual averaging holds the warm-up iterates at δ; sampling uses the averaged ε̄.

    ε̄ is the geometric mean of oscillating iterates, and the acceptance is concave in ε,
    so the sampling acceptance lands at or above δ (as with Stan's adapt_delta).
    """
    var = torch.logspace(-2, 2, 50)

    def log_prob(params, batch):
        return -0.5 * (params["theta"].pow(2) / var).sum(1)

    config = hmc.HmcConfig(num_chains=8, num_warmup=500, num_samples=100, num_leapfrog=5,
                           step_size=1.0, target_accept=0.75)
    g = torch.Generator().manual_seed(0)
    result = drain(hmc.run({"theta": torch.randn(8, 50, generator=g)}, config=config,
                           target=FunctionTarget(log_prob), batch=None, generator=g))
    info = hmc.summary(result, config.num_warmup)
    warm = result.traces["acceptance"][:, 250:500].mean()
    assert abs(float(warm) - 0.75) < 0.03
    assert 0.72 < info["acceptance_rate"] < 0.97
    # mass adaptation learns the scales: M⁻¹ ≈ the marginal variances (within a factor 2)
    ratio = result.state.metric.inv_mass["theta"].mean(0) / var
    assert ((ratio > 0.5) & (ratio < 2.0)).all(), ratio.tolist()
    assert info["divergences"] == 0


def test_hmc_fit_reports_acceptance_divergences_and_step_size():
    config = hmc.HmcConfig(num_chains=2, num_warmup=30, num_samples=10, num_leapfrog=3)
    records = []
    post = drain(hmc.fit(config, ARCH, toy_data(), 0), records.append)
    assert {"acceptance_rate", "divergences", "step_size"} <= set(post.info)
    assert {r.phase for r in records} == {"warmup", "sampling"}
    assert "acceptance" in records[-1].values
    assert post.num_chains == 2 and post.num_draws == 10


def test_hmc_windows_follow_stan():
    assert hmc.adaptation_windows(1000) == [100, 150, 250, 450, 950]
    assert hmc.adaptation_windows(10) == []


# --------------------------------------------------------------------------- ensemble


def test_ensemble_members_are_independent_chains():
    config = ensemble.EnsembleConfig(num_members=3, epochs=2, batch_size=20, lr=1e-2)
    post = drain(ensemble.fit(config, ARCH, toy_data(), 0))
    assert post.num_chains == 3 and post.num_draws == 1
    w = post.samples["linear.weight"][:, 0]
    assert not torch.allclose(w[0], w[1])
    again = drain(ensemble.fit(config, ARCH, toy_data(), 0))
    assert torch.equal(w, again.samples["linear.weight"][:, 0])


# -------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("method", ["sghmc", "dsghmc"])
def test_cli_trains_a_sampler(shared_data, tmp_path, method, capsys):
    from core.commands.main import main

    out = tmp_path / f"{method}.pt"
    code = main([
        "train", "--method", method, "--model", "softmax", "--data-dir", str(shared_data / "mnist"),
        "--limit", "500", "--set", "epochs=2", "--set", "burn_in_epochs=1", "--set", "thin=2",
        "--set", "num_chains=2", "--set", "step_size=1e-5", "--eval-samples", "4",
        "--out", str(out),
    ])
    assert code == 0
    post = load_posterior(out, expect_method=method)
    assert post.num_chains == 2 and post.num_draws == 2
    assert "test accuracy" in capsys.readouterr().out


def test_epoch_batches_give_each_chain_every_example_once_an_epoch_in_reused_tensors():
    """Example i holds the value i: each chain's batches of an epoch are a permutation of the
    data with their own labels, the short last batch included; the two tensors are filled in
    place step after step (no 25 MB allocation a step for the mini-batches of long runs)."""
    from core.engine.inference.base import Dataset
    from core.engine.inference.sampling import epoch_batches

    n = 23
    data = Dataset(torch.arange(n, dtype=torch.float32).reshape(n, 1, 1, 1), torch.arange(n) % 5, "counting")
    batches = epoch_batches(data, num_chains=3, batch_size=5, generator=torch.Generator().manual_seed(0))
    seen, reused = [], None
    for _ in range(5):  # four of 5, one of 3
        x, y = next(batches)
        assert torch.equal(y, x.reshape(*y.shape).long() % 5)
        seen.append(x.reshape(3, -1).long().clone())
        if reused is None:
            reused = x
    epoch = torch.cat(seen, dim=1)
    for chain in epoch:
        assert sorted(chain.tolist()) == list(range(n))
    assert next(batches)[0] is reused  # the next epoch's first batch lands in the same tensor


def test_a_runs_traces_hold_every_step_in_one_tensor_that_does_not_grow_by_objects():
    """The traces of a run are what each step said, in order, one tensor per name; while the
    run goes on, no object is kept per step (a small tensor kept per step, allocated between
    the step's large temporaries, fragmented the heap until a 300,000-step run reached 24 GB)."""
    import gc
    from types import SimpleNamespace

    from core.engine.inference.sample_store import StoragePlan
    from core.engine.inference.sampling import constant_batches, sample_chains

    def step(state, batch, generator, *, config, target):
        t = state.t + 1
        return SimpleNamespace(t=t, params=state.params), {"log_posterior": torch.full((2,), -float(t)),
                                                           "step_size": 0.5 * t}

    def live_tensors() -> int:
        gc.collect()
        return sum(type(o) is torch.Tensor for o in gc.get_objects())

    run = sample_chains(step, SimpleNamespace(t=0, params={"theta": torch.zeros(2, 3)}), config=None, target=None,
                        batches=constant_batches(), num_steps=2_000, generator=torch.Generator(), report_every=100,
                        plan=StoragePlan(burn_in=1_000, thin=100, num_draws=10))
    counts = []
    while True:
        try:
            record = next(run)
        except StopIteration as done:
            traces = done.value.traces
            break
        if record.step in (200, 1_900):
            counts.append(live_tensors())
    assert counts[1] - counts[0] < 50  # 1,700 steps more, and no tensor kept for each
    expected = torch.arange(1, 2_001, dtype=torch.float32)
    assert torch.equal(traces["log_posterior"], -expected.expand(2, -1))
    assert torch.equal(traces["step_size"], 0.5 * expected)


def test_input_dropout_prediction_masks_as_the_formula_does_bit_for_bit():
    """The masks are made in place from the uniform draws; each draw must still see exactly
    x * (u < keep) / keep with u the generator's draws in the same order (negative inputs, whose
    masked zeros are -0.0, included), so that a seed gives the same predictions as before."""
    from torch.func import functional_call, vmap

    arch = ArchSpec("softmax", num_classes=3, input_dim=6)
    g = torch.Generator().manual_seed(4)
    samples = {"linear.weight": torch.randn(2, 5, 3, 6, generator=g), "linear.bias": torch.randn(2, 5, 3, generator=g)}
    post = InputDropoutPosterior("dsghmc", arch, {"drop_rate": 0.3, "mask_at_prediction": True}, 0, "toy", samples)
    x = torch.randn(7, 6, generator=g)
    got = post.predict_logits(x, generator=torch.Generator().manual_seed(9))
    u = torch.rand((10, 7, 6), generator=torch.Generator().manual_seed(9))
    masked = x.unsqueeze(0) * (u < 0.7) / 0.7
    params = {k: v.reshape(10, *v.shape[2:]) for k, v in samples.items()}
    with torch.no_grad():
        want = vmap(lambda p, xs: functional_call(post._model, p, (xs,)))(params, masked)
    assert torch.equal(got, want)
