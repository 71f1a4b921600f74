"""The work a training run does in its worker: read the images, fit, check whether the chains
agree and on the images kept aside, save. Plain generators of
:class:`~core.engine.inference.base.ProgressRecord` (no Qt), wrapped by :mod:`app.workers`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.analysis.diagnostics import PROBE_SIZE, diagnose_progress, not_applicable
from core.engine.data.datasets import load_split
from core.engine.data.folder import FolderData
from core.engine.data.identity import start_classes
from core.engine.data.locate import DatasetMissingError, download_dataset, find_dataset
from core.engine.inference import get_method
from core.engine.inference.base import Posterior, ProgressRecord, accuracy_progress
from core.engine.models import ArchSpec
from core.engine.naming import samples_used
from core.engine.runner import fit_posterior
from core.engine.store import save_posterior
from core.engine.training_words import DOWNLOAD_HINT

#: Samples a posterior of one's own images is checked with on the images kept aside (the
#: command line's ``--eval-samples`` default).
EVAL_SAMPLES = 30


def training_run(
    method_name: str, arch: ArchSpec, config: Any, data_dir: str, download: bool, seed: int, out: Path,
    name: str = "", start: Posterior | None = None, start_source: dict[str, Any] | None = None,
    device: Any = None,
):
    """Generator run in the worker: load data, fit, save; yields ProgressRecords. ``name``, the
    one typed under “Save as”, is kept in the posterior's ``info["name"]``: its column's title.
    ``start``: a MAP posterior that Laplace or SWAG starts from instead of training its own.
    The fit runs on ``device`` (View ▸ Compute on; None: the CPU)."""
    yield ProgressRecord(0, 0, {}, phase="loading data")
    folder = mnist_training_folder(data_dir, download)
    train = load_split("mnist", "train", root=folder)
    posterior = yield from fit_posterior(get_method(method_name), config, arch, train, seed, start, start_source,
                                         device=device)
    posterior.info["diagnostics"] = yield from convergence_run(posterior, folder, seed)
    if name.strip():
        posterior.info["name"] = name.strip()
    yield ProgressRecord(1, 1, {}, phase="saving")
    return save_posterior(posterior, out)


def folder_training_run(
    method_name: str, arch: ArchSpec, config: Any, data: FolderData, seed: int, out: Path, name: str = "",
    start: Posterior | None = None, start_source: dict[str, Any] | None = None, device: Any = None,
):
    """:func:`training_run` for a person's images, already read (:func:`read_image_folder`): fit
    on their training split, record the class names (the folder names) as ``bayescope-cli train
    --dataset FOLDER`` does, check convergence on the first test images, save."""
    train, test = data.train, data.test
    if start is not None:  # the folder's labels taken to the saved posterior's outputs of the same names
        train, test = start_classes(start, "the saved posterior", train, test, "this folder")
    posterior = yield from fit_posterior(get_method(method_name), config, arch, train, seed, start,
                                         start_source, device=device)
    posterior.info["class_names"] = list(train.class_names)
    if len(test):  # the images kept aside, as the command line measures them (before saving here)
        import torch

        try:
            acc = yield from accuracy_progress(posterior, test, EVAL_SAMPLES, torch.Generator().manual_seed(seed))
        except (ValueError, MemoryError) as exc:
            posterior.info["test_accuracy_not_measured"] = str(exc)
        else:
            posterior.info.update({"test_accuracy": acc, "eval_samples": samples_used(posterior, EVAL_SAMPLES),
                                   "test_data": {"name": test.name, "images": len(test), **test.source}})
    try:
        probe = test if len(test) else None
        posterior.info["diagnostics"] = yield from diagnose_progress(posterior, probe, seed)
    except (OSError, ValueError) as exc:  # no test image to compare the chains on: the fit is kept
        posterior.info["diagnostics"] = {"status": "not measured", "reason": str(exc)}
    if name.strip():
        posterior.info["name"] = name.strip()
    yield ProgressRecord(1, 1, {}, phase="saving")
    return save_posterior(posterior, out)


def convergence_run(posterior, folder: Path, seed: int):
    """Whether the chains agree, on the first MNIST test images beside the training files
    (:mod:`core.analysis.diagnostics`); a test set that cannot be read leaves it "not measured"."""
    if not_applicable(posterior) is not None:
        return (yield from diagnose_progress(posterior, None, seed))
    yield ProgressRecord(0, 0, {}, phase="convergence")
    try:
        probe = load_split("mnist", "test", root=folder).first(PROBE_SIZE)
    except (OSError, ValueError) as exc:  # missing or damaged test files: the fit is kept all the same
        return {"status": "not measured", "reason": f"the test images could not be read ({exc})"}
    return (yield from diagnose_progress(posterior, probe, seed))


def mnist_training_folder(data_folder: str | Path | None, download: bool = False) -> Path:
    """The folder of MNIST's training files, found in the one data folder (or the user cache);
    downloaded into the user cache when missing and ``download`` is set."""
    try:
        return find_dataset("mnist", data_folder or None, "train", download_hint=DOWNLOAD_HINT)
    except DatasetMissingError:
        if not download:
            raise
        return download_dataset("mnist", "train")
