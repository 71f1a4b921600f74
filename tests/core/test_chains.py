"""Per-chain random streams: a chain is the same run alone, with others, or merged from parts.

Chain c of a fit with seed s draws everything about itself from the stream
``chain_seed(s, c)``. The checks below run chains (0, 1, 2, 3) together, one at a time, and
as two subsets merged with ``merge_chains``, and compare the stored draws with
``torch.equal``: bit for bit. That is the right tolerance here, not an allowance: every
random number of chain c comes from its own generator with the shape of one chain, the
model is a softmax regression whose batched matrix products compute each chain's rows with
the same kernel whatever the batch of chains, and all the per-element updates (noise,
momentum, preconditioner, Adam) are elementwise, so nothing in the arithmetic depends on
which other chains are in the batch. A coupling between chains (a shared generator, a mean
over chains) changes the draws at the first step and fails these checks outright.

On LeNet the same holds only to float rounding: under ``vmap`` the chains' convolutions
become one grouped convolution, whose sums depend on the number of groups. Measured once
(MNIST, 200 images, too slow for this suite): 3 SGLD chains together and one at a time
differ by at most 3.7e-9 after 8 steps; 3 ensemble members side by side and one by one by
2.8e-5 after 4 Adam steps (lr 1e-3), because Adam divides by |g| and so magnifies the
last-bit differences of gradients near zero.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from core.engine.inference import METHODS
from core.engine.inference.chain_merge import merge_chains
from core.engine.inference.chains import (
    ChainGenerators,
    chain_seed,
    chains_in_words,
    resolve_chains,
)
from core.engine.models import ArchSpec
from core.engine.runner import drain, fit_posterior
from tests.conftest import toy_data

pytestmark = pytest.mark.usefixtures("one_torch_thread")


ARCH = ArchSpec("softmax", num_classes=2, image_size=4)
SMALL = {"num_chains": 4, "epochs": 4, "batch_size": 20, "burn_in_epochs": 1, "thin": 3}
CONFIGS = {
    "sgld": {**SMALL, "step_size": 1e-3, "precondition": True},
    "sghmc": {**SMALL, "step_size": 1e-4, "resample_every": 2},
    "dsghmc": {**SMALL, "step_size": 1e-4, "drop_rate": 0.5},
    "hmc": {"num_chains": 4, "num_warmup": 30, "num_samples": 10, "num_leapfrog": 3},
    "ensemble": {"num_members": 4, "epochs": 2, "batch_size": 20, "lr": 1e-2},
}
SEED = 7


def fit(name: str, chains=None, seed: int = SEED, arch: ArchSpec = ARCH, **overrides):
    method = METHODS[name]
    config = method.make_config(**{**CONFIGS[name], **overrides})
    return drain(fit_posterior(method, config, arch, toy_data(), seed, chains=chains))


def assert_same_chains(a, b) -> None:
    assert set(a.samples) == set(b.samples)
    for k in a.samples:
        assert torch.equal(a.samples[k], b.samples[k]), k


# ------------------------------------------------------------------------ chain_seed


def test_chain_seed_is_the_documented_hash():
    """Recomputed here from its definition (SHA-256 of the text), and pinned: it must never
    change, or every saved seed would name different chains."""
    for seed, chain in [(0, 0), (7, 3), (-1, 12), (2**40, 1)]:
        digest = hashlib.sha256(f"bayescope-chain:{seed}:{chain}".encode()).digest()
        assert chain_seed(seed, chain) == int.from_bytes(digest[:8], "big") % 2**63
    assert chain_seed(0, 0) == int(hashlib.sha256(b"bayescope-chain:0:0").hexdigest()[:16], 16) % 2**63
    seeds = {chain_seed(s, c) for s in range(20) for c in range(20)}
    assert len(seeds) == 400  # neighbouring seeds share no chain (unlike seed + chain)
    with pytest.raises(ValueError):
        chain_seed(0, -1)


def test_chain_generators_draw_each_chain_from_its_own_stream():
    both = ChainGenerators(3, (0, 5))
    alone = ChainGenerators(3, (5,))
    a = both.randn((2, 7))
    b = alone.randn((1, 7))
    assert torch.equal(a[1], b[0])
    expected = torch.Generator().manual_seed(chain_seed(3, 0))
    assert torch.equal(a[0], torch.empty(7).normal_(generator=expected))
    with pytest.raises(ValueError, match="2 chains"):
        both.randn((3, 7))


def test_chains_are_named_in_words():
    assert [chains_in_words(c) for c in ([], [2], [1, 3], [0, 1, 3])] == [
        "no chain", "chain 2", "chains 1 and 3", "chains 0, 1 and 3"]


def test_resolve_chains_refuses_what_is_not_a_subset():
    assert resolve_chains(None, 3) == (0, 1, 2)
    assert resolve_chains([2, 0], 3) == (0, 2)
    for bad, words in [((), "empty"), ((1, 1, 2, 2), "names chains 1 and 2 twice"),
                       ((3,), "chain 3 lies outside the run's 3 chains")]:
        with pytest.raises(ValueError, match=words):
            resolve_chains(bad, 3)


# --------------------------------------------------------------- together = alone = merged


@pytest.mark.parametrize("name", list(CONFIGS))
def test_chains_run_together_alone_or_merged_are_the_same(name):
    full = fit(name)
    assert full.num_chains == 4 and full.info["chain_ids"] == [0, 1, 2, 3]
    alone = [fit(name, chains=(c,)) for c in range(4)]
    for c, one in enumerate(alone):
        assert one.num_chains == 1 and one.info["chain_ids"] == [c]
        for k in full.samples:
            assert torch.equal(one.samples[k][0], full.samples[k][c]), (c, k)
    assert_same_chains(full, merge_chains(alone[::-1]))  # any order of parts
    merged = merge_chains([fit(name, chains=(3, 1)), fit(name, chains=(0, 2))])
    assert_same_chains(full, merged)
    assert merged.info["chain_ids"] == [0, 1, 2, 3]
    assert type(merged) is type(full)
    if "traces" in full.info:
        assert merged.info["traces"] == full.info["traces"]
    for key in ("num_chains", "num_members", "num_draws", "step_size", "divergences"):
        if key in full.info:
            assert merged.info[key] == full.info[key], key
    diagnosed = [k for k in full.info if k.startswith(("rhat_", "ess_"))]
    assert bool(diagnosed) is (name != "ensemble")  # an ensemble has no traces to diagnose
    for key in diagnosed:  # short runs (< 500 steps) keep every step: R̂ and ESS are the run's
        assert merged.info[key] == pytest.approx(full.info[key], rel=1e-9), key
    if "acceptance_rate" in full.info:
        assert merged.info["acceptance_rate"] == pytest.approx(full.info["acceptance_rate"], rel=1e-6)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_fixed_seed_reproduces_and_another_differs(name):
    first, again, other = fit(name), fit(name), fit(name, seed=SEED + 1)
    assert_same_chains(first, again)
    for k in first.samples:
        assert not torch.equal(first.samples[k], other.samples[k])
    w = first.samples["linear.weight"]
    assert not torch.equal(w[0], w[1])  # chains differ from one another


def test_prior_initialisation_is_per_chain_too():
    full = fit("sgld", init="prior")
    assert_same_chains(full, merge_chains([fit("sgld", chains=(c,), init="prior") for c in range(4)]))


def test_curvature_hmc_chains_alone_equal_chains_together():
    """The mode and M are found from zero, the same for any subset; the dense products are
    taken chain by chain, so a chain does the same arithmetic alone as beside others."""
    kw = {"metric": "curvature", "init": "overdispersed", "step_size": 0.3}
    full = fit("hmc", **kw)
    assert_same_chains(full, merge_chains([fit("hmc", chains=(c,), **kw) for c in (2, 0, 3, 1)]))


def test_dsghmc_merge_keeps_the_input_dropout_posterior():
    from core.engine.inference.dsghmc import InputDropoutPosterior

    merged = merge_chains([fit("dsghmc", chains=(0,)), fit("dsghmc", chains=(1, 2, 3))])
    assert isinstance(merged, InputDropoutPosterior) and merged.input_drop_rate == 0.5


def test_a_subset_thins_as_the_whole_run_does():
    """The memory budget is for all chains: a subset that alone would fit thins the same."""
    # one draw of 4 chains × 34 weights is 544 bytes; 9 draws are 4896 > 4e-3 MB = 4194 bytes
    kw = {"memory_budget_mb": 4e-3, "on_budget": "thin", "thin": 1}
    with pytest.warns(UserWarning, match="thinning"):
        full = fit("sgld", **kw)
    with pytest.warns(UserWarning, match="thinning"):
        part = fit("sgld", chains=(1,), **kw)
    assert part.info["thin"] == full.info["thin"] > 1
    for k in full.samples:
        assert torch.equal(part.samples[k][0], full.samples[k][1])


# ------------------------------------------------------------------------------ merging


def test_merge_refuses_parts_of_different_runs():
    a = fit("sgld", chains=(0,))
    for other, words in [
        (fit("sgld", chains=(1,), seed=SEED + 1), f"differ in their seed: {SEED}, {SEED + 1}$"),
        (fit("sgld", chains=(1,), step_size=2e-3), "differ in their settings: step_size [0-9.e-]+, 0.002$"),
        (fit("sghmc", chains=(1,)), "differ in their method: sgld, sghmc$"),
        (fit("sgld", chains=(0,)), "hold chain 0 twice$"),
    ]:
        with pytest.raises(ValueError, match=words):
            merge_chains([a, other])
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_chains([])


def test_subsets_are_refused_by_methods_without_chains():
    method = METHODS["map"]
    with pytest.raises(ValueError, match="does not run independent chains"):
        drain(fit_posterior(method, method.make_config(epochs=1), ARCH, toy_data(), 0, chains=(0,)))


# ------------------------------------------------------------- ensemble members side by side


def _members(arch: ArchSpec, seed: int, ids=(0, 1, 2)):
    streams = ChainGenerators(seed, ids)
    return streams.models(arch), streams.generators


@pytest.mark.parametrize("drop_rate", [0.0, 0.3])
def test_members_side_by_side_equal_members_one_by_one(drop_rate):
    """allclose(atol=1e-6), not torch.equal: each member's gradient is a sum over its
    mini-batch, and the batched matrix product under vmap may add in another order than the
    single one for some batch sizes (here the 10-image last batch of 50; with batches of 16
    or 20 both are bit for bit equal). Those last-bit differences, carried by Adam through
    9 steps, stay below 1e-7 (1.5e-8 measured); a member that got another member's batch, masks or update
    differs by about the learning rate (1e-2), as the swapped streams below show."""
    from core.engine.inference import ensemble

    arch = ArchSpec("softmax", num_classes=2, image_size=4, drop_rate=drop_rate)
    data = toy_data(n=50)
    kw = {"epochs": 3, "batch_size": 20, "lr": 1e-2, "penalty": 1e-3}
    models, gens = _members(arch, 5)
    together = drain(ensemble.train_side_by_side(models, data, gens, **kw))
    models, gens = _members(arch, 5)
    alone = drain(ensemble.train_one_by_one(models, data, gens, **kw))
    for k in together:
        assert torch.allclose(together[k], alone[k], rtol=0, atol=1e-6), k
    assert not torch.allclose(together["linear.weight"][0], together["linear.weight"][1], atol=1e-3)
    models, gens = _members(arch, 5)
    swapped = drain(ensemble.train_side_by_side(models, data, gens[::-1], **kw))
    assert (swapped["linear.weight"][0] - alone["linear.weight"][0]).abs().max() > 1e-3


def test_ensemble_fit_trains_side_by_side_unless_memory_is_short(monkeypatch):
    from core.engine.inference import ensemble

    config = METHODS["ensemble"].make_config(**CONFIGS["ensemble"])
    together = drain(ensemble.fit(config, ARCH, toy_data(), SEED))
    assert together.info["trained"] == "side by side"
    monkeypatch.setattr(ensemble, "available_bytes", lambda: 1000)
    alone = drain(ensemble.fit(config, ARCH, toy_data(), SEED))
    assert alone.info["trained"] == "one by one"
    for k in together.samples:
        assert torch.allclose(together.samples[k], alone.samples[k], rtol=0, atol=1e-6)


def test_parts_saved_on_other_machines_merge_after_loading(tmp_path):
    """What a cluster does: each part saved to a file, loaded elsewhere, merged."""
    from core.engine.store import load_posterior, save_posterior

    arch = ArchSpec("softmax", num_classes=2)  # 28×28: the only image size a posterior file may read
    method = METHODS["dsghmc"]
    config = method.make_config(**CONFIGS["dsghmc"])
    data = toy_data(side=28)
    full = drain(fit_posterior(method, config, arch, data, SEED))
    paths = [save_posterior(drain(fit_posterior(method, config, arch, data, SEED, chains=part)),
                            tmp_path / f"part{i}.pt") for i, part in enumerate([(0, 3), (1,), (2,)])]
    merged = merge_chains([load_posterior(p) for p in paths])
    assert_same_chains(full, merged)
    again = load_posterior(save_posterior(merged, tmp_path / "merged.pt"))
    assert_same_chains(full, again)
    assert again.info["chain_ids"] == [0, 1, 2, 3]


def test_a_preconditioned_fit_records_whether_its_preconditioner_was_fixed_before_the_draws():
    """The file says how the sampler moved, and the column's words follow: fixed during the burn-in
    (the draws target the posterior) or still adapting (approximate, Li et al.'s Γ term left out)."""
    from core.engine.naming import fit_lines

    steps_per_epoch = 60 // SMALL["batch_size"]  # toy_data holds 60 examples
    fixed = fit("sgld", rms_adapt_steps=steps_per_epoch)  # burn-in is one epoch
    assert fixed.info["preconditioner"] == {"kind": "rmsprop", "adapt_steps": steps_per_epoch,
                                            "fixed_before_draws": True}
    (line,) = fit_lines("sgld", fixed.info)
    assert "held fixed" in line and "same posterior" in line
    adapting = fit("sgld")  # rms_adapt_steps = -1: adapts throughout
    assert adapting.info["preconditioner"]["fixed_before_draws"] is False
    assert "approximate" in fit_lines("sgld", adapting.info)[0]
    assert "preconditioner" not in fit("sghmc").info and fit_lines("sghmc", fit("sghmc").info) == []
