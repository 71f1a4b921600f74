"""Data-set evaluation of one or more posteriors, side by side: the numbers of ``bayescope-cli evaluate``.

:func:`evaluate` is a generator (progress records, then an :class:`Evaluation`) that the
GUI can run in a worker; :func:`evaluation_tables` turns the result into long-format tables
(both in :mod:`core.analysis.evaluation_results`, exported here too).
Data sets are given as a known name (``mnist-test``, ``mnist-train``, ``notmnist``) or the
path of any folder with the IDX files in MNIST layout; ``data_dir`` points the known names at
a folder holding them in sub-folders named after each data set (``<data_dir>/mnist``,
``<data_dir>/notmnist``), or at the data set's own folder (one named after it).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.analysis.evaluation_results import Evaluation, PosteriorEvaluation
from core.analysis.metrics import ECE_BINS, rotation_angles, rotation_sweep
from core.analysis.streaming import (
    SAMPLE_BUDGET,
    DatasetPredictions,
    chain_ids,
    evaluation_step_bytes,
    merge_predictions,
    predict_dataset,
    result_bytes,
)
from core.analysis.uncertainty import UNCERTAIN_THRESHOLD
from core.engine.data.datasets import DatasetNotFoundError, load_split
from core.engine.data.folder import load_image_split
from core.engine.data.identity import check_not_trained_on, match_classes, read_test_split
from core.engine.data.listing import image_folder
from core.engine.data.locate import (
    DOWNLOAD_ON_COMMAND_LINE,
    DatasetMissingError,
    download_dataset,
    find_dataset,
)
from core.engine.data.ood import OOD_SETS, ood_set
from core.engine.data.preprocess import image_to_input, load_image
from core.engine.inference.base import Dataset, Posterior, ProgressRecord, check_data_fits
from core.engine.memory import check_fits
from core.engine.runner import Executor, RemoteTask
from core.engine.store import load_posterior

#: Known data-set names → (data set, split).
DATASET_NAMES: dict[str, tuple[str, str]] = {
    "mnist-test": ("mnist", "test"),
    "mnist-train": ("mnist", "train"),
    "notmnist": ("notmnist", "test"),
    "notmnist-test": ("notmnist", "test"),
}

#: The faces test split (UTKFace, descriptors cached by core.engine.faces): for face heads only.
FACE_TEST_SET = "utkface-test"


def resolve_dataset(
    spec: str,
    data_dir: str | os.PathLike | None = None,
    split: str = "test",
    download: bool = False,
    *,
    image_size: int | None = None,
    channels: int | None = None,
    trained_on: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> Dataset:
    """Load a data set given by a known name (:data:`DATASET_NAMES`), an IDX folder, or a
    person's images (class folders, a CSV manifest, CIFAR binaries: :mod:`core.engine.data.folder`),
    these read at ``image_size`` and ``channels`` (the model's) and split as training split them.

    For a known name, the data set's own folder is found by
    :func:`core.engine.data.locate.find_dataset`: ``data_dir/<name>``, ``data_dir`` itself
    when it is named after the data set, then the user cache (where ``download`` fetches
    MNIST when missing); never ``data_dir`` itself when it is named otherwise, as it may hold
    another data set's files. A folder is read as its ``split`` (default the ``t10k-*`` test
    files). ``trained_on`` (posterior name → its ``info["training_data"]``) reads a person's
    images as those posteriors split them, leaving out images they trained on
    (:func:`core.engine.data.identity.read_test_split`; ``source["data_check"]`` says what changed).

    Raises
    ------
    DatasetNotFoundError
        When the files are nowhere to be found, or the name is neither known nor a folder.
    """
    if spec == FACE_TEST_SET:  # descriptors read from the cache, or computed without progress
        from core.engine.faces.testset import load_face_test_set, utkface_location
        from core.engine.runner import drain

        return drain(load_face_test_set(utkface_location(data_dir))).data
    if spec in DATASET_NAMES:
        return _load_known(spec, data_dir, download)
    if spec in OOD_SETS:  # a set derived from one we have (core.engine.data.ood)
        return ood_set(spec, data_dir, download)
    if image_folder(spec):
        if trained_on:
            return read_test_split(spec, trained_on, image_size, channels, split)
        return load_image_split(spec, split, image_size, channels)
    folder = Path(spec)
    if not folder.is_dir():
        known = ", ".join([*DATASET_NAMES, *OOD_SETS, FACE_TEST_SET])
        raise DatasetNotFoundError(f"data set {spec!r} is neither a known name ({known}) nor a folder")
    return load_split(str(folder), split)


def _load_known(spec: str, data_dir: str | os.PathLike | None, download: bool) -> Dataset:
    """A known data set, found by the one resolver (:func:`core.engine.data.locate.find_dataset`)."""
    name, split = DATASET_NAMES[spec]
    hint = None if download else DOWNLOAD_ON_COMMAND_LINE
    try:
        folder = find_dataset(name, data_dir, split, download_hint=hint)
    except DatasetMissingError as exc:
        if not (download and exc.downloadable):
            raise
        folder = download_dataset(name, split)
    return load_split(name, split, root=folder)


_IMAGE_REF = re.compile(r"^(?P<set>.+):(?P<index>\d+)$")


def resolve_image(spec: str, data_dir: str | os.PathLike | None = None) -> tuple[str, torch.Tensor]:
    """An image for the rotation sweep: an image file, or ``SET:INDEX`` (e.g. ``mnist-test:0``).

    Returns ``(label, image (1, 1, 28, 28))``.
    """
    path = Path(spec)
    match = _IMAGE_REF.match(spec)
    if not path.exists() and match:
        data = resolve_dataset(match["set"], data_dir)
        index = int(match["index"])
        if index >= len(data):
            raise ValueError(f"{spec}: {match['set']} has only {len(data)} images")
        label = data.class_names[int(data.y[index])] if data.class_names else str(int(data.y[index]))
        return f"{data.name}[{index}] (class {label})", data.x[index : index + 1]
    return path.name, image_to_input(load_image(path))


def load_posteriors(paths: Sequence[str | os.PathLike], device: torch.device | None = None) -> dict[str, Posterior]:
    """Load posterior files keyed by a unique display name (the file stem, numbered if repeated),
    each moved to ``device`` (None: the CPU), where its predictions then run.

    Raises ``ValueError`` when they disagree on the number of classes or the image size.
    """
    out: dict[str, Posterior] = {}
    for path in paths:
        posterior = load_posterior(path, device=device)
        stem = Path(path).stem
        name, i = stem, 2
        while name in out:
            name, i = f"{stem}-{i}", i + 1
        out[name] = posterior
    if not out:
        raise ValueError("no posterior given")
    kinds = {(p.num_classes, p.arch.image_size, p.arch.input_dim) for p in out.values()}
    if len(kinds) > 1:
        listing = ", ".join(f"{n}: {p.num_classes} classes, "
                            + (f"{p.arch.input_dim}-d descriptors" if p.arch.input_dim else f"{p.arch.image_size}px")
                            for n, p in out.items())
        raise ValueError(f"posteriors cannot be compared: they disagree on classes or image size ({listing})")
    return out


def _check_data(posteriors: dict[str, Posterior], data: Dataset, role: str) -> None:
    p = next(iter(posteriors.values()))
    if p.arch.input_dim and data.x.ndim == 2 and "descriptor" in data.source:
        from core.engine.faces.descriptor import DescriptorInfo
        from core.engine.faces.heads import check_descriptor

        for posterior in posteriors.values():  # a head over face descriptors: the same descriptor
            check_descriptor(posterior, DescriptorInfo.from_dict(data.source["descriptor"]))
    check_data_fits(p.arch, data, role, "each posterior", labels=role == "data set")
    if role == "data set":
        check_not_trained_on(posteriors, data)


#: The sets of an evaluation, in order: each draws from generators of its own (further OOD
#: sets follow the first as 2, 3, …).
SETS = ("data", "ood")


def ood_list(ood: Dataset | Sequence[Dataset] | None) -> list[Dataset]:
    """``evaluate``'s ``ood`` as a list: None → [], one set → [it]."""
    if ood is None:
        return []
    return [ood] if isinstance(ood, Dataset) else list(ood)


def set_names(sets: Sequence[Dataset]) -> list[str]:
    """The sets' names, a repeated one numbered (``["test", "test (2)"]``): two folders may share a name."""
    out: list[str] = []
    for subset in sets:
        candidate, i = subset.name, 2
        while candidate in out:
            candidate, i = f"{subset.name} ({i})", i + 1
        out.append(candidate)
    return out


def batch_seed(seed: int, set_index: int, batch: int) -> int:
    """The seed of batch ``batch`` of set ``set_index`` (0: the data set, 1: the first OOD set,
    2, 3, …: the others; a set keeps its seeds whatever sets follow it).

    Every batch draws its masks or weights from its own generator, so an evaluation split
    over machines by whole batches (:func:`predict_batches`) draws exactly what the same
    evaluation draws in one process.
    """
    state = np.random.SeedSequence([int(seed), int(set_index), int(batch)]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])  # below 2^63: a torch seed


def batch_generator(seed: int, set_index: int, first_batch: int = 0) -> Any:
    """``i ↦`` the generator of batch ``first_batch + i`` of a set (see :func:`batch_seed`)."""
    return lambda i: torch.Generator().manual_seed(batch_seed(seed, set_index, first_batch + i))


def predict_batches(
    posterior: Posterior, data: Dataset, set_index: int, first_batch: int, stop_batch: int,
    batch_size: int, num_samples: int | None, seed: int,
) -> Generator[ProgressRecord, None, DatasetPredictions]:
    """Batches ``first_batch`` … ``stop_batch − 1`` of ``data`` (batches of ``batch_size``),
    predicted as :func:`evaluate` predicts them: one part of a sharded evaluation."""
    part = data.subset(slice(first_batch * batch_size, stop_batch * batch_size))
    return (yield from predict_dataset(posterior, part, num_samples, batch_size=batch_size,
                                       batch_generator=batch_generator(seed, set_index, first_batch)))


def _plans(posteriors: dict[str, Posterior], num_samples: int | None, batch_size: int | None,
           ) -> tuple[list[tuple[str, Posterior, int]], dict[str, torch.Tensor]]:
    """Each posterior's name, itself and its draw block, and the chain of each of its draws
    (:func:`chain_ids`, found once a run for the block, the memory check and the prediction)."""
    plans, chains = [], {}
    for name, posterior in posteriors.items():
        chains[name] = chain_ids(posterior, num_samples)
        plans.append((name, posterior, batch_size or max(1, SAMPLE_BUDGET // len(chains[name]))))
    return plans, chains


def evaluate(
    posteriors: dict[str, Posterior],
    data: Dataset,
    ood: Dataset | Sequence[Dataset] | None = None,
    rotate_image: torch.Tensor | None = None,
    *,
    rotate_label: str | None = None,
    num_samples: int | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    angles: Sequence[float] | np.ndarray | None = None,
    level: float = 0.9,
    executor: Executor | None = None,
    weighed: bool = False,
) -> Generator[ProgressRecord, None, Evaluation]:
    """Evaluate every posterior on ``data`` (and ``ood``: one set or several, and a rotation sweep of one image).

    Yields one :class:`ProgressRecord` per batch over all posteriors and sets (phase names
    the posterior and set) and returns an :class:`Evaluation`. Each batch of each set draws
    from its own generator (:func:`batch_seed`), the rotation sweep from one seeded with
    ``seed``, so results depend neither on the order the posteriors are given in nor on
    where the batches run. With an ``executor`` (a Ray cluster) the sets are cut into runs
    of whole batches that its workers predict side by side; the result is the same. The data
    set's classes are matched with the posteriors' outputs by name whenever both have names.
    ``weighed``: the caller has weighed this run's memory as part of a larger one
    (:func:`check_run_memory`, e.g. the Dataset tab for all its columns at once), so it is not
    weighed again here.
    """
    _check_data(posteriors, data, "data set")  # what the images are (shape, descriptor) before their names
    data = match_classes(posteriors, data)
    if rotate_image is not None:
        from core.analysis.comparison import refuse_own_images

        refuse_own_images(list(posteriors.values()), "the rotation sweep turns a digit (28×28, grey)")
    oods = ood_list(ood)
    for other in oods:
        _check_data(posteriors, other, "OOD set")
    ood_names = set_names(oods)
    plans, chains = _plans(posteriors, num_samples, batch_size)
    sets = [(i, subset) for i, subset in enumerate((data, *oods))]
    if not weighed:
        check_run_memory(plans, [subset for _, subset in sets], num_samples, chains)  # before the first image
    if rotate_image is not None:
        angles = rotation_angles() if angles is None else np.asarray(angles, dtype=np.float64)
    sweeps = len(plans) if rotate_image is not None else 0  # one step each, after the sets
    if executor is None:
        run = _predict_here(plans, sets, num_samples, seed, chains)
    else:
        run = _predict_on(executor, plans, sets, num_samples, seed)
    done = 0
    rate = ImageRate(sum(len(subset) for _, subset in sets) * len(plans))
    try:
        while True:
            record = next(run)
            done = record.total
            values = {**record.values, **rate.update(record.values.get("images", 0.0))}
            yield ProgressRecord(record.step, record.total + sweeps, values, record.phase)
    except StopIteration as stop:
        predictions = stop.value
    finally:
        run.close()  # a cancel reaches the cluster's tasks
    results: dict[str, PosteriorEvaluation] = {}
    for name, posterior, _ in plans:
        sweep = None
        if rotate_image is not None:
            sweep = rotation_sweep(posterior, rotate_image, angles, num_samples,
                                   torch.Generator().manual_seed(seed), level)
            done += 1
            yield ProgressRecord(done, done + sweeps - len(results) - 1, {}, f"{name} · rotation")
        outputs = predictions[name]
        results[name] = PosteriorEvaluation(posterior, outputs[0], outputs.get(1), sweep,
                                            {set_name: outputs[1 + j] for j, set_name in enumerate(ood_names)})
    images = None
    if rotate_image is not None:
        from core.engine.data.preprocess import rotate

        image = torch.as_tensor(rotate_image, dtype=torch.float32)
        image = image.reshape(1, 1, *image.shape[-2:])
        batch = image.expand(len(angles), -1, -1, -1)
        images = rotate(batch, torch.as_tensor(angles, dtype=torch.float32))[:, 0].numpy()
    # One name per class of the posteriors: a folder's names only reach its largest label.
    k = next(iter(posteriors.values())).num_classes
    given = tuple(data.class_names[:k])
    class_names = given + tuple(str(j) for j in range(len(given), k))
    return Evaluation(
        dataset=data.name,
        class_names=tuple(class_names),
        results=results,
        rotation_label=rotate_label,
        rotation_images=images,
        settings={"num_samples": num_samples, "seed": seed, "level": level,
                  "ece_bins": ECE_BINS, "uncertain_threshold": UNCERTAIN_THRESHOLD},
        data_source={"name": data.name, "images": len(data), **data.source},
        **ood_fields(oods, ood_names),
    )


def ood_fields(oods: Sequence[Dataset], names: Sequence[str]) -> dict[str, Any]:
    """The OOD fields of an :class:`Evaluation` (``ood_dataset``, ``ood_source``, ``ood_datasets``,
    ``ood_sources``) for these sets under these names."""
    sources = [{**other.source, "name": set_name, "images": len(other)}
               for other, set_name in zip(oods, names, strict=True)]
    return {"ood_dataset": names[0] if names else None, "ood_source": sources[0] if sources else None,
            "ood_datasets": tuple(names), "ood_sources": sources}


Predictions = dict[str, dict[int, DatasetPredictions]]


def _predict_here(
    plans: list[tuple[str, Posterior, int]], sets: list[tuple[int, Dataset]],
    num_samples: int | None, seed: int, chains: Mapping[str, torch.Tensor],
) -> Generator[ProgressRecord, None, Predictions]:
    """Every posterior on every set, batch after batch, in this process (``chains``: each
    posterior's :func:`chain_ids`)."""
    total = sum(len(subset) for _, subset in sets) * len(plans)  # progress counts images
    done = 0
    out: Predictions = {}
    for name, posterior, b in plans:
        out[name] = {}
        for index, subset in sets:
            run = predict_dataset(posterior, subset, num_samples, batch_size=b,
                                  batch_generator=batch_generator(seed, index), chains=chains[name])
            try:
                while True:
                    record = next(run)
                    images = done + int(record.values["examples"])
                    yield ProgressRecord(images, total, {**record.values, "images": float(images)},
                                         f"{name} · {subset.name}")
            except StopIteration as stop:
                out[name][index] = stop.value
            done += len(subset)
    return out


def _predict_on(
    executor: Executor, plans: list[tuple[str, Posterior, int]], sets: list[tuple[int, Dataset]],
    num_samples: int | None, seed: int,
) -> Generator[ProgressRecord, None, Predictions]:
    """Every posterior on every set, each set cut into runs of whole batches, one task each.

    Each set is cut into as many parts as the cluster runs tasks at once (never finer than
    a batch); the posteriors and sets are copied to the cluster once and shared by tasks.
    """
    shared_sets = {index: executor.share(subset) for index, subset in sets}
    tasks, keys = [], []
    for name, posterior, b in plans:
        handle = executor.share(posterior)
        for index, subset in sets:
            batches = math.ceil(len(subset) / b)
            parts = min(batches, executor.parallelism)
            edges = [round(j * batches / parts) for j in range(parts + 1)]
            for first, stop in zip(edges[:-1], edges[1:], strict=True):
                tasks.append(RemoteTask(predict_batches, (handle, shared_sets[index], index, first, stop, b,
                                                          num_samples, seed),
                                        label=f"{name} · {subset.name} · batches {first + 1}-{stop}"))
                keys.append((name, index))
    results = yield from executor.run(tasks, "evaluate on the cluster")
    out: Predictions = {name: {} for name, _, _ in plans}
    for name, _, _ in plans:
        for index, _ in sets:
            out[name][index] = merge_predictions([r for r, key in zip(results, keys, strict=True)
                                                  if key == (name, index)])
    return out


class ImageRate:
    """Images per second and the time left of an evaluation of ``total`` images, from the
    images done so far (the Dataset tab's and the command line's progress)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started = time.perf_counter()

    def update(self, images: float) -> dict[str, float]:
        """``images_per_s`` and ``seconds_left`` once some images are done, else nothing."""
        elapsed = time.perf_counter() - self.started
        if images <= 0 or elapsed <= 0:
            return {}
        rate = images / elapsed
        return {"images_per_s": rate, "seconds_left": max(self.total - images, 0.0) / rate}


def progress_in_words(images_done: float, images_total: float, values: dict[str, float]) -> str:
    """"1,200 of 20,000 images · 850 images a second · about 20 s left" (the rate once known)."""
    words = f"{int(images_done):,} of {int(images_total):,} images"
    rate = values.get("images_per_s")
    if rate:
        words += f" · {rate:,.0f} images a second" if rate >= 10 else f" · {rate:.1f} images a second"
        left = values.get("seconds_left")
        if left is not None:
            words += f" · {_duration(left)} left"
    return words


def _duration(seconds: float) -> str:
    """A time left in round words: "under a second", "about 20 s", "about 3 min", "about 1.5 h"."""
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 90 * 60:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


def run_bytes(plans: Sequence[tuple[str, Posterior, int]], sizes: Sequence[int], num_samples: int | None,
              ) -> tuple[float, str]:
    """Peak bytes of a whole evaluation, and the posterior whose step needs the most.

    The posteriors run one after the other, so the largest step counts once; every
    posterior's per-image results on every set are kept to the end.
    """
    nbytes, name, _ = _run_bytes(plans, sizes, num_samples)
    return nbytes, name


def _run_bytes(plans: Sequence[tuple[str, Posterior, int]], sizes: Sequence[int], num_samples: int | None,
               chains: Mapping[str, torch.Tensor] | None = None) -> tuple[float, str, int]:
    """:func:`run_bytes`, and the draws of the posterior whose step needs the most
    (``chains``: each posterior's :func:`chain_ids` where the caller has them)."""
    step, largest, draws, kept = -1.0, plans[0][0], 0, 0.0
    for name, posterior, block in plans:
        ids = chains[name] if chains is not None else chain_ids(posterior, num_samples)
        s = len(ids)
        need = evaluation_step_bytes(posterior, s, block, max(sizes, default=1))
        if need > step:
            step, largest, draws = need, name, s
        num_chains = len(set(ids.tolist()))  # torch.unique took 17-26 µs for 5 to 800 draws, this 2-25
        kept += sum(result_bytes(n, posterior.num_classes, num_chains) for n in sizes)
    return step + kept, largest, draws


#: A run estimated below this many bytes is not weighed against the machine's memory: the
#: check would refuse it only with less than 20 MB available, when the process (about 280 MB
#: of interpreter and torch before its first image: ``bench_evaluate.py``'s peak memory less
#: the run's own) is short of memory whatever it runs. Reading the kernel's three memory
#: files took 31-125 µs of CPU time (the most right after a forward pass), up to a third of
#: what the face MAP's evaluation spends besides its forward pass and its scoring; the face
#: MAP's and ensemble's runs are estimated at 6 and 12 MB.
UNWEIGHED_RUN_BYTES = 16 << 20


def check_run_memory(plans: Sequence[tuple[str, Posterior, int]], sets: Sequence[Dataset],
                     num_samples: int | None, chains: Mapping[str, torch.Tensor] | None = None) -> None:
    """Refuse, before the first image, an evaluation whose whole run would not fit in memory:
    one sentence naming the images and draws and what to lower (``chains``: each posterior's
    :func:`chain_ids` where the caller has them). A run below :data:`UNWEIGHED_RUN_BYTES` is let through."""
    if not plans or not sets:
        return
    sizes = [len(subset) for subset in sets]
    nbytes, name, s = _run_bytes(plans, sizes, num_samples, chains)
    if nbytes < UNWEIGHED_RUN_BYTES:
        return
    posterior = next(p for n, p, _ in plans if n == name)
    images = " and ".join(f"{size:,} images of {subset.name}" for size, subset in zip(sizes, sets, strict=True))
    what = (f"evaluating {len(plans)} posterior{'s' if len(plans) > 1 else ''} on {images} "
            f"({s:,} draws of {name} at a time)")
    check_fits(nbytes, what, "ask for fewer draws or fewer images", posterior.device)


def check_memory(
    posteriors: dict[str, Posterior],
    num_samples: int | None,
    num_angles: int,
    rotate: bool,
) -> None:
    """Refuse, before anything is loaded, a sample count that cannot fit: one draw block's
    prediction (``SAMPLE_BUDGET // S`` images) of each posterior, and the rotation sweep, which
    sends all A angles through the posterior at once and keeps S·A·K probabilities (float64,
    with their quantile copies). The whole run, once the sets' sizes are known, is weighed by
    :func:`check_run_memory` as :func:`evaluate` starts.
    """
    for name, posterior in posteriors.items():
        s = posterior.check_prediction(num_samples, batch_size=1)
        posterior.check_prediction(s, batch_size=max(1, SAMPLE_BUDGET // s))
        if rotate:
            k = posterior.num_classes
            side = posterior.arch.image_size
            nbytes = posterior.prediction_bytes(s, num_angles) + 8.0 * 4 * s * num_angles * k
            nbytes += 4.0 * 2 * num_angles * side * side
            check_fits(nbytes, f"a rotation sweep of {num_angles} angles with {s} samples of {name}",
                       "use a larger --angle-step or fewer --samples", posterior.device)
