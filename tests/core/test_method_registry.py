"""The method registry holds every fact about a method, and everything else reads them from it:
a method registered with a fact missing, a tier setting it does not have, or no test that runs
it and none that checks it against a known answer fails here."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import math
import os
import pkgutil
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import core.engine.inference
from core.commands import zoo_build, zoo_tiers
from core.engine import naming
from core.engine.inference import DEFAULT_METHOD, FAMILIES, METHODS
from core.engine.settings_help import has_own_words
from core.engine.training_words import TRACE_WORDS, method_item_text, trace_words

TESTS = Path(__file__).resolve().parents[1]

#: Per method, a test that runs its fit end to end (smoke) and one that checks what it computes
#: against an answer known independently (a closed form, quadrature, a Gaussian's moments, an
#: independent optimiser). A new method adds its two here.
PROOFS: dict[str, tuple[str, str]] = {
    "map": ("core/test_inference_core.py::test_map_softmax_learns_and_predicts_one_sample",
            "core/test_inference_core.py::test_map_penalty_is_the_gaussian_prior"),
    "mc_dropout": ("core/test_inference_core.py::test_mc_dropout_samples_differ_and_are_reproducible",
                   "core/test_variational_reproduce.py::test_mc_dropout_optimum_minimises_the_enumerated_dropout_objective"),
    "sgld": ("core/test_sampling_machinery.py::test_fit_is_reproducible_and_reports_progress",
             "core/test_samplers.py::test_gaussian_moments"),
    "sghmc": ("core/test_sampling_machinery.py::test_fit_is_reproducible_and_reports_progress",
              "core/test_samplers.py::test_gaussian_moments"),
    "dsghmc": ("core/test_sampling_machinery.py::test_fit_is_reproducible_and_reports_progress",
               "core/test_samplers.py::test_gaussian_moments"),
    "hmc": ("core/test_sampling_machinery.py::test_hmc_fit_reports_acceptance_divergences_and_step_size",
            "core/test_samplers.py::test_hmc_reference_matches_quadrature"),
    "ensemble": ("core/test_sampling_machinery.py::test_ensemble_members_are_independent_chains",
                 "core/test_method_registry.py::test_every_member_of_an_ensemble_reaches_the_unique_map_of_a_convex_problem"),
    "mfvi": ("core/test_variational_methods.py::test_variational_method_learns_reports_and_round_trips",
             "core/test_variational_reproduce.py::test_gaussian_fit_kl_falls_with_rank_and_vanishes_at_full_rank"),
    "snvi": ("core/test_variational_methods.py::test_variational_method_learns_reports_and_round_trips",
             "core/test_variational_reproduce.py::test_gaussian_fit_kl_falls_with_rank_and_vanishes_at_full_rank"),
    "sgmmvi": ("core/test_variational_methods.py::test_variational_method_learns_reports_and_round_trips",
               "core/test_variational_families.py::test_mixture_sampling_matches_the_mixture_moments"),
    "vdropout": ("core/test_variational_methods.py::test_variational_method_learns_reports_and_round_trips",
                 "core/test_variational_families.py::test_variational_dropout_kl_fit_tracks_the_exact_kl_differences"),
    "swag": ("core/test_swag.py::test_swag_trains_saves_loads_and_predicts",
             "core/test_swag.py::test_the_stored_gaussian_has_covariance_half_diagonal_plus_half_low_rank"),
    "laplace": ("core/test_laplace.py::test_laplace_fits_saves_loads_and_its_probit_variance_is_the_draws_variance",
                "core/test_laplace.py::test_laplace_predictive_matches_grid_quadrature_on_logistic_regression"),
}


def _test_names(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_has_every_fact(name):
    method = METHODS[name]
    assert method.label and "_" not in method.label, name
    assert method.description and not method.description.endswith("."), name  # it follows a label and a dash
    assert method.summary and method.family in FAMILIES, name
    assert 0.0 <= method.default_drop_rate < 1.0
    # a method that predicts with the network's dropout trains with it, and starts above 0
    assert not method.needs_dropout or (method.uses_model_dropout and method.default_drop_rate > 0), name
    assert method.default_drop_rate == 0.0 or method.uses_model_dropout, name
    assert method.tiers and set(method.tiers) <= set(zoo_tiers.TIERS), name
    for key in method.defaults():
        assert has_own_words(name, key), f"{name}.{key} has no words in core/engine/setting_words.py or method_setting_words.py"


@pytest.mark.parametrize("name", list(METHODS))
def test_every_tier_setting_of_a_method_is_one_it_has(name):
    """A tier's ``--set k=v`` parses as the method's own setting (a renamed one would only fail
    when ``zoo`` runs for hours)."""
    method = METHODS[name]
    for tier, args in method.tiers.items():
        assert "--method" not in args, (name, tier)  # zoo adds it
        sets = {args[i + 1].split("=", 1)[0]: args[i + 1].split("=", 1)[1]
                for i, a in enumerate(args) if a == "--set"}
        method.parse_settings(sets)  # raises on an unknown setting or a value of the wrong type
        assert zoo_tiers.TIERS[tier].methods[name] == ("--method", name, *args)
        assert shlex.join(args) == shlex.join(map(str, args))  # plain strings, as a command line


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_has_a_smoke_run_and_a_statistical_test(name):
    assert name in PROOFS, f"name {name}'s smoke run and statistical test in PROOFS"
    for node in PROOFS[name]:
        path, _, function = node.partition("::")
        assert function in _test_names(TESTS / path), f"{node} is not a test"


def test_no_proof_is_listed_for_a_method_that_is_not_registered():
    assert set(PROOFS) == set(METHODS)


def _package_modules() -> dict[str, object]:
    """Every module of core/engine/inference, imported."""
    return {info.name: importlib.import_module(f"core.engine.inference.{info.name}")
            for info in pkgutil.iter_modules(core.engine.inference.__path__)}


def test_the_registry_names_each_method_s_module_and_the_modules_agree():
    """The registry names each method's module, config class and ``fit_from`` without importing
    them; every module of the package, imported, agrees with it: the named config is a dataclass
    there, ``fit`` a function of it, ``fit_from`` there exactly when the entry says it starts
    from weights, and no module with a ``fit`` is left out of the registry."""
    modules = _package_modules()
    for name, method in METHODS.items():
        module = importlib.import_module(method.module)
        assert method.module == f"core.engine.inference.{name}", name  # one module per method, by its name
        assert dataclasses.is_dataclass(getattr(module, method.config_name)), name
        assert method.config_cls is getattr(module, method.config_name)
        assert callable(module.fit) and method.fit is module.fit, name
        assert hasattr(module, "fit_from") == method.starts_from_weights, name
        assert method.fit_from is getattr(module, "fit_from", None), name
    with_fit = {short for short, module in modules.items()
                if inspect.isfunction(getattr(module, "fit", None)) and module.fit.__module__ == module.__name__}
    assert with_fit == set(METHODS)


_KINDS_OF_THE_REGISTRY = """
import importlib, pkgutil, sys
import core.engine.inference as inference
from core.engine.inference.base import POSTERIOR_KINDS
inference.load_all_methods()
by_registry = set(POSTERIOR_KINDS)
for info in pkgutil.iter_modules(inference.__path__):
    importlib.import_module("core.engine.inference." + info.name)
sys.exit(0 if by_registry == set(POSTERIOR_KINDS) else f"{sorted(set(POSTERIOR_KINDS) - by_registry)} are "
         "registered only by a module no method's module imports")
"""


def test_every_posterior_kind_is_registered_by_the_methods_modules():
    """The store imports a file's method's module (or, for another kind, every method's): every
    kind a module of the package registers must be reached so (a fresh process: here all are in)."""
    done = subprocess.run([sys.executable, "-c", _KINDS_OF_THE_REGISTRY], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


_IMPORTED_AT_A_LAUNCH = """
import sys
from core.engine.inference import METHODS
def methods_in():
    return sorted(name for name, method in METHODS.items() if method.module in sys.modules)
import core.engine.store
print(" ".join(methods_in()) or "-")
import core.analysis.predictive
from core.engine.resources import resources_dir
from core.engine.store import load_posterior
print(" ".join(methods_in()))
for method in ("hmc", "sghmc", "mc_dropout", "mfvi"):
    assert load_posterior(resources_dir() / "models" / f"paper_softmax_{method}.pt").method == method
print(" ".join(methods_in()))
"""


def test_a_launch_imports_only_the_modules_of_the_methods_it_reads():
    """The window's engine import and its four default columns (as the launcher does them, in a
    fresh process): the engine's import brings in no method's module; the predictive brings in
    D-SGHMC's (its input dropout) with SGHMC's and SGLD's (which it builds on); reading the four
    files adds HMC's, MC dropout's and mean-field VI's, and no other method's (all thirteen were
    imported before)."""
    done = subprocess.run([sys.executable, "-c", _IMPORTED_AT_A_LAUNCH], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    after_store, after_predictive, after_files = (line.split() for line in done.stdout.splitlines()[-3:])
    assert after_store == ["-"]
    assert after_predictive == ["dsghmc", "sghmc", "sgld"]
    assert after_files == ["dsghmc", "hmc", "mc_dropout", "mfvi", "sghmc", "sgld"]


def test_names_words_and_zoo_read_the_registry():
    assert DEFAULT_METHOD in METHODS
    assert set(TRACE_WORDS) == set(FAMILIES)
    for name, method in METHODS.items():
        assert naming.METHOD_LABELS[name] == naming.method_label(name) == method.label
        assert naming.METHOD_DESCRIPTIONS[name] == method.description
        assert method_item_text(name).startswith(f"{method.label} — ")
        assert trace_words(name) == TRACE_WORDS[method.family]
    assert list(naming.METHOD_LABELS) == list(METHODS)
    for tier_name, tier in zoo_tiers.TIERS.items():
        # a tier on a person's own network takes the paper tier's settings for the methods that name none
        assert set(tier.methods) == {m for m, method in METHODS.items()
                                     if tier_name in method.tiers or (tier.own and "paper" in method.tiers)}
        if tier.reference is not None:
            assert next(iter(tier.methods)) == tier.reference  # built first: the others are measured against it
    assert set(zoo_tiers.TIERS["paper"].methods) == set(METHODS)  # the paper tier holds every method


def test_every_member_of_an_ensemble_reaches_the_unique_map_of_a_convex_problem():
    """Softmax regression under a Gaussian prior has one mode: each member, trained by Adam from
    its own start, must end at the mode an independent optimiser (L-BFGS) finds, and the members
    must be far from it after one pass (else nothing is shown). Measured: 0.9-1.05 of the mode's
    norm away after one pass, under 0.0006 after 200 (full batches, 2 s)."""
    from core.engine.inference import ensemble
    from core.engine.inference.base import Dataset
    from core.engine.models import ArchSpec, build_model
    from core.engine.runner import drain

    torch.manual_seed(0)
    n, sigma = 64, 0.5
    arch = ArchSpec("softmax", num_classes=3, image_size=4)
    x = torch.randn(n, 1, 4, 4)
    y = (x[:, 0, 0, :2].sum(-1) > 0).long() + (x[:, 0, 3, 3] > 1).long()
    data = Dataset(x, y, "toy")
    model = build_model(arch)
    for p in model.parameters():
        torch.nn.init.zeros_(p)
    opt = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=500, tolerance_grad=1e-10, tolerance_change=1e-12,
                            line_search_fn="strong_wolfe")

    def objective():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y) + sum(
            p.pow(2).sum() for p in model.parameters()) / (2 * n * sigma**2)
        loss.backward()
        return loss

    opt.step(objective)
    mode = torch.cat([p.detach().flatten() for p in model.parameters()])

    def members(epochs: int) -> torch.Tensor:
        config = ensemble.EnsembleConfig(num_members=3, prior_std=sigma, epochs=epochs, batch_size=n, lr=0.05,
                                         optimiser="adam")  # the network path: Newton would end at the mode at once
        post = drain(ensemble.fit(config, arch, data, 0))
        names = [name for name, _ in model.named_parameters()]
        return torch.cat([post.samples[k][:, 0].flatten(1) for k in names], dim=1)

    far = (members(1) - mode).norm(dim=1) / mode.norm()
    near = (members(200) - mode).norm(dim=1) / mode.norm()
    assert math.isfinite(mode.norm().item()) and mode.norm() > 0.5
    assert (far > 0.2).all(), far  # the negative control: one pass leaves every member away from the mode
    assert (near < 0.01).all(), near


#: The face tier's training faces (UTKFace's fixed split, docs/faces.md): what its samplers' epochs
#: are counted in.
FACE_TRAINING_FACES = 18_966


def _sets(args: tuple[str, ...]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--set")


def test_the_face_tier_holds_every_method_under_one_prior_and_parses_as_train_arguments():
    """Every method is in the face tier (HMC first, its reference), on the face descriptors, with the
    tier's one Gaussian prior wherever it has one (MC dropout's at length-scale 1/σ; variational
    dropout's log-uniform has no scale), and its command line is one ``train`` accepts."""
    import argparse

    from core.commands import train
    from core.engine.inference.recipes import FACE_PRIOR_STD

    tier = zoo_tiers.TIERS["faces"]
    assert set(tier.methods) == set(METHODS) and tier.reference == "hmc" == next(iter(tier.methods))
    assert tier.rhat_target == 1.01 and tier.file_name("hmc") == "faces_softmax_hmc.pt"
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    args = argparse.Namespace(data_dir=None, limit=None, seed=0, cluster=None)
    for name, argv in tier.methods.items():
        config = METHODS[name].parse_settings(_sets(argv))
        if name == "mc_dropout":
            assert config.length_scale == pytest.approx(1 / FACE_PRIOR_STD, rel=1e-5)
        elif name != "vdropout":
            assert config.prior_std == FACE_PRIOR_STD, name
        given = [tier.file_name("map") if a == zoo_build.MAP_FILE else a for a in argv]  # the tier's MAP beside x.pt
        line = [*tier.model, *given, "--seed", "0", "--out", "x.pt"]
        parsed = parser.parse_args(line)
        assert (parsed.dataset, parsed.model, parsed.method) == ("utkface", "softmax", name)
        assert zoo_build.train_arguments(tier, name, Path("x.pt"), args)[1:] == line


def test_the_face_tiers_samplers_keep_100_draws_and_measure_4000():
    """Each sampled file keeps at least 100 draws; R̂ is measured on at least 4 × 1,000 draws of the
    run (over fewer, the largest of the probe's 8,000 R̂ values lies above 1.01 even for perfectly
    mixed chains: docs/zoo.md)."""
    for name, argv in zoo_tiers.TIERS["faces"].methods.items():
        config = METHODS[name].parse_settings(_sets(argv))
        if not hasattr(config, "num_chains"):
            continue
        kept = int(argv[argv.index("--keep-draws") + 1])
        assert config.num_chains >= 4 and config.num_chains * kept >= 100, name
        if name == "hmc":
            measured = config.num_samples // config.thin
        else:
            per_epoch = math.ceil(FACE_TRAINING_FACES / config.batch_size)
            measured = (config.epochs - config.burn_in_epochs) * per_epoch // config.thin
        assert measured >= 1000 and kept <= measured, name
