"""A small folder's defaults (issue 47, item 5): enough steps a pass and in all, chosen from the
folder's size in core, kept where the person set them; a held-out accuracy near chance is said,
with what to try."""

from __future__ import annotations

import math
import re
from dataclasses import asdict

import pytest

from core.commands.main import main
from core.engine.inference import METHODS, get_method
from core.engine.store import load_posterior
from core.engine.training_plan import (
    MIN_DRAWS_PER_CHAIN,
    MIN_STEPS_PER_PASS,
    MIN_TRAINING_STEPS,
    small_folder_settings,
)
from core.engine.training_words import chance_words, near_chance, small_folder_words
from tests.core.test_folder_data import _digit_folder, digits  # noqa: F401 (fixture)

MINI_BATCH = [name for name in METHODS if hasattr(get_method(name).make_config(), "batch_size")]


@pytest.mark.parametrize("name", MINI_BATCH)
def test_96_images_get_several_steps_a_pass_and_enough_steps(name):
    config = get_method(name).make_config()
    changes = small_folder_settings(config, 96)
    fitted = get_method(name).make_config(**{**asdict(config), **changes})  # a config the method accepts
    per_pass = math.ceil(96 / fitted.batch_size)
    assert per_pass >= MIN_STEPS_PER_PASS and fitted.epochs * per_pass >= MIN_TRAINING_STEPS
    if hasattr(fitted, "thin"):  # a sampler keeps draws, its burn-in the same share of the run
        kept = (fitted.epochs - fitted.burn_in_epochs) * per_pass
        assert kept // fitted.thin >= MIN_DRAWS_PER_CHAIN
        assert fitted.burn_in_epochs / fitted.epochs == pytest.approx(config.burn_in_epochs / config.epochs,
                                                                     abs=0.02)


@pytest.mark.parametrize("name", MINI_BATCH)
def test_mnist_s_size_keeps_every_default(name):
    assert small_folder_settings(get_method(name).make_config(), 60_000) == {}


def test_settings_the_person_chose_are_kept_and_hmc_is_full_batch():
    config = get_method("map").make_config(batch_size=64)
    changes = small_folder_settings(config, 96, chosen={"batch_size"})
    assert "batch_size" not in changes and changes["epochs"] * math.ceil(96 / 64) >= MIN_TRAINING_STEPS
    assert small_folder_settings(get_method("map").make_config(epochs=3), 96, chosen={"epochs"}) == {
        "batch_size": 12}
    assert small_folder_settings(get_method("hmc").make_config(), 96) == {}


def test_the_changes_are_said_in_one_sentence():
    words = small_folder_words({"batch_size": 12, "epochs": 50}, 96)
    assert words.startswith("For 96 training images, 12 images per step and 50 passes over them")
    assert small_folder_words({}, 96) == ""


def test_near_chance_is_within_noise_of_guessing():
    assert near_chance(0.55, 2, 24) and not near_chance(0.95, 2, 24)
    assert near_chance(0.12, 10, 1000) and not near_chance(0.5, 10, 1000)
    assert "1 in 10" in chance_words(0.11, 10, 1000) and "more passes" in chance_words(0.11, 10, 1000)
    assert chance_words(0.9, 10, 1000) == ""


def test_train_on_a_small_folder_takes_enough_steps_unless_told(tmp_path, digits, capsys):  # noqa: F811
    folder = tmp_path / "digits"
    _digit_folder(folder, digits, classes=(0, 1), per_class=20)
    out = tmp_path / "map.pt"
    assert main(["train", "--dataset", str(folder), "--method", "map", "--model", "mlp", "--out", str(out)]) == 0
    said = capsys.readouterr()
    train = int(re.search(r"(\d+) training and \d+ test images", said.out).group(1))
    config = load_posterior(out).config
    assert f"note: For {train} training images, {config['batch_size']} images per step" in said.err
    assert math.ceil(train / config["batch_size"]) >= MIN_STEPS_PER_PASS
    assert config["epochs"] * math.ceil(train / config["batch_size"]) >= MIN_TRAINING_STEPS
    # set by hand: kept; a network that has not moved from its start is said to be near chance
    assert main(["train", "--dataset", str(folder), "--method", "map", "--model", "mlp", "--set", "epochs=1",
                 "--set", "batch_size=64", "--set", "lr=1e-12", "--out", str(out)]) == 0
    said = capsys.readouterr()
    posterior = load_posterior(out)
    assert posterior.config["batch_size"] == 64 and posterior.config["epochs"] == 1 and "note: For " not in said.err
    assert near_chance(posterior.info["test_accuracy"], 2, posterior.info["test_data"]["images"])
    assert "note: That is hardly better than guessing, which gets 1 in 2 right" in said.out
