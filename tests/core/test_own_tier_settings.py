"""The features tier's samplers run on settings of their own, counted in steps, not the paper
tier's epochs; ``zoo --tier features`` plans them so (issue 45)."""

from __future__ import annotations

import pytest

from core.commands.console import parse_settings
from core.commands.zoo_tiers import TIERS, tier_methods
from core.engine.inference import METHODS
from core.engine.inference.recipes import FEATURES_BATCH, FEATURES_TIER, PAPER
from core.engine.training_plan import planned_steps

SAMPLERS = ("sgld", "sghmc", "dsghmc", "hmc")


def _config(argv: tuple[str, ...]):
    method = argv[argv.index("--method") + 1]
    chosen = parse_settings([argv[i + 1] for i, a in enumerate(argv) if a == "--set"])
    return method, METHODS[method].parse_settings(chosen)


@pytest.mark.parametrize("method", SAMPLERS)
def test_the_features_tier_names_its_own_sampler_settings(method: str) -> None:
    assert FEATURES_TIER in METHODS[method].tiers
    planned = tier_methods(FEATURES_TIER, like=PAPER)[method]
    assert planned == ("--method", method, *METHODS[method].tiers[FEATURES_TIER])
    assert planned != tier_methods(PAPER)[method]
    assert TIERS[FEATURES_TIER].methods[method] == planned  # what zoo --tier features runs


@pytest.mark.parametrize("method", ["sgld", "sghmc"])
def test_a_features_sampler_runs_the_same_steps_on_any_folder(method: str) -> None:
    """Full batches on any folder up to FEATURES_BATCH training images: an epoch is one step,
    so a folder of 300 images and one of 40,000 get the same chain length (the mixing a step buys
    in the curvature metric's units does not depend on N), where the paper tier's settings made
    8,026 images one step an epoch and 60,000 six."""
    _, config = _config(tier_methods(FEATURES_TIER, like=PAPER)[method])
    assert config.batch_size >= FEATURES_BATCH >= 40_000
    steps = {planned_steps(method, config, n) for n in (300, 8_026, 40_000)}
    assert steps == {config.epochs}
    _, paper = _config(tier_methods(PAPER)[method])
    assert planned_steps(method, paper, 8_026) != planned_steps(method, paper, 60_000)


@pytest.mark.parametrize("method", SAMPLERS)
def test_features_samplers_move_by_the_curvature_from_spread_starts(method: str) -> None:
    _, config = _config(tier_methods(FEATURES_TIER, like=PAPER)[method])
    # HMC's is the same curvature as its level plus its main directions (recipes.FEATURES_HMC)
    assert config.metric == ("curvature-lowrank" if method == "hmc" else "curvature")
    assert config.init == "overdispersed"


def test_the_features_samplers_take_fewer_gradients_than_the_paper_epochs_gave() -> None:
    """The paper tier's epochs on 8,026 images were 6,717 SGLD steps, 4,550 SGHMC steps, 40,500
    D-SGHMC mini-batch steps and 950 × 12 HMC gradients: ~45 minutes here, against 15."""
    def gradients(argv: tuple[str, ...], n: int) -> int:
        method, config = _config(argv)
        leapfrog = getattr(config, "num_leapfrog", 1)
        return planned_steps(method, config, n) * leapfrog

    features = {m: gradients(tier_methods(FEATURES_TIER, like=PAPER)[m], 8_026) for m in SAMPLERS}
    paper_full_batch = {m: gradients(tier_methods(PAPER)[m], 8_026) for m in ("sgld", "sghmc", "hmc")}
    assert paper_full_batch == {"sgld": 6_717, "sghmc": 4_550, "hmc": 950 * 12}
    assert sum(features.values()) < sum(paper_full_batch.values())


def test_the_other_methods_keep_the_paper_tiers_settings() -> None:
    features, paper = tier_methods(FEATURES_TIER, like=PAPER), tier_methods(PAPER)
    assert set(features) == set(paper) == set(METHODS)
    assert {m for m in features if features[m] != paper[m]} == set(SAMPLERS)
