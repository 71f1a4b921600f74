"""The modules split by what they do still answer by the names files and pickles hold.

``core/engine/inference/variational.py`` became ``param_layout``, ``gaussian_family``, ``elbo``,
``local_reparam`` and ``variational``; ``core/engine/data/folder.py`` became ``listing``,
``images``, ``cifar`` and ``folder``. A posterior file records its kind by name (``variational``),
not a class path, and is read with ``weights_only``; a posterior pickled whole (sent to a cluster
worker, or kept by an older bayescope) records its classes by module path. Both must still load.
"""

from __future__ import annotations

import importlib
import io
import pickle

import pytest
import torch

from core.engine.inference.base import POSTERIOR_KINDS
from core.engine.resources import bundled_face_posteriors, bundled_posteriors
from core.engine.store import load_posterior

BUNDLED = [*bundled_posteriors(), *bundled_face_posteriors()]
#: The modules that were core/engine/inference/variational.py.
SPLIT_FROM_VARIATIONAL = tuple(f"core.engine.inference.{m}" for m in
                               ("param_layout", "gaussian_family", "elbo", "local_reparam", "variational"))


def _input(arch) -> torch.Tensor:
    if arch.input_dim:
        return torch.rand(2, arch.input_dim, generator=torch.Generator().manual_seed(0))
    return torch.rand(2, arch.channels, arch.image_size, arch.image_size, generator=torch.Generator().manual_seed(0))


def _globals(data: bytes) -> set[tuple[str, str]]:
    """The (module, name) pairs a pickle refers to, as unpickling looks them up."""
    found: set[tuple[str, str]] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            found.add((module, name))
            return super().find_class(module, name)

    Recording(io.BytesIO(data)).load()
    return found


def test_every_kind_of_posterior_file_resolves_by_its_class_path():
    assert POSTERIOR_KINDS["variational"].__module__ == "core.engine.inference.variational"
    for kind, cls in POSTERIOR_KINDS.items():
        assert getattr(importlib.import_module(cls.__module__), cls.__qualname__) is cls, kind


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
def test_every_bundled_posterior_loads_and_predicts(path):
    posterior = load_posterior(path)
    proba = posterior.predict_proba(_input(posterior.arch), 4, torch.Generator().manual_seed(1))
    assert proba.shape[-2:] == (2, posterior.num_classes)
    torch.testing.assert_close(proba.sum(-1), torch.ones(proba.shape[:-1]))


def test_a_pickled_variational_posterior_names_resolvable_classes_and_old_paths_still_resolve():
    path = next(p for p in BUNDLED if p.name == "paper_softmax_mfvi.pt")
    posterior = load_posterior(path)
    data = pickle.dumps(posterior)
    for module, name in _globals(data):
        assert getattr(importlib.import_module(module), name) is not None
    again = pickle.loads(data)
    x = _input(posterior.arch)
    torch.testing.assert_close(again.predict_proba(x, 4, torch.Generator().manual_seed(2)),
                               posterior.predict_proba(x, 4, torch.Generator().manual_seed(2)))
    # a pickle written before the split named every class it holds by the old module: each still
    # resolves there (a pickle's names are module paths, so the old names are what it holds)
    old = importlib.import_module("core.engine.inference.variational")
    moved = [(m, n) for m, n in _globals(data) if m in SPLIT_FROM_VARIATIONAL]
    assert ("core.engine.inference.param_layout", "ParamLayout") in moved
    for module, name in moved:
        assert getattr(old, name) is getattr(importlib.import_module(module), name)
