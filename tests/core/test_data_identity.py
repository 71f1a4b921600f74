"""A data set's identity travels with the posterior (issue 44, items 1-4, 15, 16).

Folders are built in tmp from MNIST test digits (the shared data). Expected values come from
the split rule's words in docs/data.md (computed here with hashlib), from the folder as written
(which files were added, copied or removed), or from what a trained posterior recorded at
training, never from the comparison's own output.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from core.commands.main import main
from core.engine.data.folder import load_image_folder
from core.engine.data.identity import compare_folder
from core.engine.data.idx import read_idx
from core.engine.data.images import read_image
from core.engine.resources import bundled_posteriors, resources_dir
from core.engine.store import load_posterior, save_posterior

RULE_WORDS = "bayescope-split"


def hashed_test(rel: str, fraction: float = 0.2, seed: int = 0) -> bool:
    """docs/data.md's rule, from its words: the first 8 bytes of SHA-256 of ("bayescope-split",
    seed, class name, path) over 2^64 below the fraction → a test image."""
    key = f"{rel.split('/')[0]}\0{rel}"
    digest = hashlib.sha256(f"{RULE_WORDS}\0{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < fraction


@pytest.fixture(scope="module")
def digits(shared_data) -> tuple[np.ndarray, np.ndarray]:
    x = read_idx(shared_data / "mnist" / "t10k-images-idx3-ubyte.gz")[:600]
    y = read_idx(shared_data / "mnist" / "t10k-labels-idx1-ubyte.gz")[:600]
    return x, y


def digit_folder(root: Path, digits, classes=(7, 8, 9), per_class=15, names=None) -> Path:
    x, y = digits
    for c in classes:
        folder = root / (names or {}).get(c, str(c))
        folder.mkdir(parents=True, exist_ok=True)
        for i, image in enumerate(x[y == c][:per_class]):
            Image.fromarray(image).save(folder / f"{i:03d}.png")
    return root


def files_of(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.png"))


def name_hashed_to(root: Path, cls: str, test: bool, stem: str = "new") -> str:
    """A file name in class ``cls`` that the rule puts in test (or in training)."""
    for i in range(1000):
        rel = f"{cls}/{stem}{i}.png"
        if hashed_test(rel) == test and not (root / rel).exists():
            return rel
    raise AssertionError("no such name in 1000 tries")


def train_map(folder: Path, out: Path, *extra: str) -> dict:
    assert main(["train", "--dataset", str(folder), "--method", "map", "--set", "epochs=3", "--set",
                 "batch_size=16", "--out", str(out), *extra]) == 0
    return load_posterior(out).info


def evaluate(posterior: Path, dataset: Path | str, out: Path, capsys) -> tuple[int, str, str, dict]:
    code = main(["evaluate", "--posterior", str(posterior), "--dataset", str(dataset), "--out", str(out)])
    said = capsys.readouterr()
    summary = json.loads((out / "evaluation.json").read_text()) if code == 0 else {}
    return code, said.out, said.err, summary


# ----------------------------------------------------------------------------- item 1: the split


@st.composite
def folder_and_change(draw):
    classes = draw(st.integers(2, 3))
    sizes = [draw(st.integers(1, 7)) for _ in range(classes)]
    names = [draw(st.lists(st.text("abcxyz019_", min_size=1, max_size=6), min_size=n, max_size=n, unique=True))
             for n in sizes]
    cls = draw(st.integers(0, classes - 1))
    add = draw(st.booleans()) or len(names[cls]) < 2
    if add:
        new = draw(st.text("abcxyz019_", min_size=1, max_size=6).filter(lambda s: s not in names[cls]))
        return names, ("add", cls, new)
    return names, ("remove", cls, draw(st.sampled_from(names[cls])))


def _write(path: Path, number: int) -> None:
    """A small grey PNG unlike every other one written (its pixels spell the number)."""
    pixels = np.zeros((8, 8), dtype=np.uint8)
    pixels.reshape(-1)[:16] = [(number >> b & 1) * 255 for b in range(16)]
    pixels[7, 7] = 128
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)


def _splits(root: Path, data) -> dict[str, str]:
    """file → "train"/"test", by matching every file's pixels (each is unique) with the splits'."""
    test = {bytes((img * 255).round().to(torch.uint8).numpy().tobytes()) for img in data.test.x}
    train = {bytes((img * 255).round().to(torch.uint8).numpy().tobytes()) for img in data.train.x}
    out = {}
    for rel in files_of(root):
        pixels = read_image(root / rel, 28, 1).tobytes()
        assert (pixels in test) != (pixels in train)
        out[rel] = "test" if pixels in test else "train"
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(folder_and_change())
def test_one_file_more_or_less_moves_no_other_file_and_the_evaluation_says_so(case):
    from core.analysis.evaluation import resolve_dataset

    names, (op, cls, name) = case
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "d"
        number = 0
        for c, files in enumerate(names):
            for f in files:
                number += 1
                _write(root / f"class{c}" / f"{f}.png", number)
        # need_train=False: a class of one or two files may fall wholly in test, which train refuses
        # (tests/core/test_readers.py); the property here is the split itself
        before = load_image_folder(root, need_train=False)
        split_before = _splits(root, before)
        record = before.train.source  # what a posterior trained on it records
        changed = f"class{cls}/{name}.png"
        if op == "add":
            _write(root / changed, number + 1)
        else:
            (root / changed).unlink()
        after = load_image_folder(root, need_train=False)
        split_after = _splits(root, after)
        moved = {f for f in set(split_before) & set(split_after) if split_before[f] != split_after[f]}
        assert moved == set()  # every other file keeps its split
        # and each file's split is the documented rule's
        assert all((s == "test") == hashed_test(f) for f, s in split_after.items())
        # an evaluation of the changed folder for that posterior says what changed
        try:
            data = resolve_dataset(str(root), trained_on={"the posterior": record}, image_size=28, channels=1)
        except ValueError as exc:  # only a folder with no test image left is refused, in words
            assert "test" in str(exc)
            return
        note = data.source["data_check"]["note"]
        word = "added" if op == "add" else "removed"
        assert note is not None and f"1 file {word}" in note and "changed since the posterior" in note


def test_an_unchanged_folder_gives_no_note_and_the_same_split(tmp_path, digits):
    root = digit_folder(tmp_path / "d", digits, per_class=10)
    record = load_image_folder(root).train.source
    check = compare_folder(root, record, "p")
    assert check.same_listing is True and check.note is None and check.leave_out == frozenset()
    assert check.split.test_fraction == 0.2 and check.split.seed == 0


def test_a_copy_of_a_training_image_under_a_test_name_is_left_out_and_named(tmp_path, digits):
    root = digit_folder(tmp_path / "d", digits, per_class=10)
    record = load_image_folder(root).train.source
    trained = next(rel for rel in files_of(root) if not hashed_test(rel))
    copy = name_hashed_to(root, "8", test=True, stem="copy")  # another class, another name
    shutil.copy(root / trained, root / copy)
    check = compare_folder(root, record, "p")
    assert check.seen == (copy,) and check.added == 1 and check.removed == 0
    assert f"1 test image was among p's training images and is left out: {copy}" in check.note
    from core.analysis.evaluation import resolve_dataset

    data = resolve_dataset(str(root), trained_on={"p": record}, image_size=28, channels=1)
    expected = [rel for rel in files_of(root) if hashed_test(rel) and rel != copy]
    assert len(data) == len(expected)


def test_a_folder_whose_every_test_image_was_trained_on_is_refused(tmp_path, digits):
    root = digit_folder(tmp_path / "d", digits, classes=(7, 8), per_class=10)
    record = load_image_folder(root).train.source
    for rel in files_of(root):  # every test image replaced by a training image's bytes
        if hashed_test(rel):
            shutil.copy(root / next(r for r in files_of(root) if not hashed_test(r)), root / rel)
    check = compare_folder(root, record, "p")
    assert check.refusal and "every test image" in check.refusal


def test_an_older_file_keeps_its_drawn_split_and_refuses_a_changed_folder(tmp_path, digits):
    root = digit_folder(tmp_path / "d", digits, per_class=10)
    record = dict(load_image_folder(root).train.source)
    record.pop("identity")  # as a file written before the identity was recorded
    record["split_rule"] = "seeded per-class split, 0.3 of each class to test (seed 0)"
    from core.analysis.evaluation import resolve_dataset

    data = resolve_dataset(str(root), trained_on={"old": record}, image_size=28, channels=1)
    # the older rule: round(0.3 × 10) = 3 of each class
    assert sorted(torch.bincount(data.y).tolist()) == [3, 3, 3]
    _write(root / "7" / "extra.png", 99)
    with pytest.raises(ValueError, match="changed since old was trained on it"):
        resolve_dataset(str(root), trained_on={"old": record}, image_size=28, channels=1)


def test_evaluate_after_adding_an_image_keeps_the_test_images_and_says_so(tmp_path, digits, capsys):
    root = digit_folder(tmp_path / "d", digits, per_class=12)
    info = train_map(root, tmp_path / "map.pt")
    recorded_images, recorded_accuracy = info["test_data"]["images"], info["test_accuracy"]
    assert recorded_images == sum(hashed_test(rel) for rel in files_of(root))
    capsys.readouterr()
    # one image more, in training by the rule: the test images and the accuracy are those of training
    x, y = digits
    new = name_hashed_to(root, "7", test=False)
    Image.fromarray(x[y == 7][20]).save(root / new)
    code, out, err, _ = evaluate(tmp_path / "map.pt", root, tmp_path / "e1", capsys)
    assert code == 0
    assert f"d-test: {recorded_images} images" in out
    assert f"{recorded_accuracy * 100:7.2f}" in out
    assert "note: d changed since map was trained on it (1 file added)" in err


# ----------------------------------------------------------------------------- item 2: the fraction


def test_evaluate_uses_the_test_fraction_train_was_given(tmp_path, digits, capsys):
    root = digit_folder(tmp_path / "d", digits, per_class=12)
    info = train_map(root, tmp_path / "map.pt", "--test-fraction", "0.5")
    expected = sum(hashed_test(rel, 0.5) for rel in files_of(root))
    assert info["test_data"]["images"] == expected
    assert info["training_data"]["identity"]["split"]["test_fraction"] == 0.5
    capsys.readouterr()
    code, out, err, _ = evaluate(tmp_path / "map.pt", root, tmp_path / "e", capsys)
    assert code == 0 and f"d-test: {expected} images" in out
    assert f"{info['test_accuracy'] * 100:7.2f}" in out and "note:" not in err


# ----------------------------------------------------------------------------- item 3: class names


def test_a_digit_posterior_reads_folders_7_8_9_as_its_outputs_7_8_9(tmp_path, digits, capsys):
    bundled = resources_dir() / "models" / "network_lenet5_map.pt"
    root = digit_folder(tmp_path / "d", digits, per_class=30)
    code, out, err, summary = evaluate(bundled, root, tmp_path / "e", capsys)
    assert code == 0, err
    accuracy = float(out.split("\n")[2].split()[3])
    assert accuracy > 80.0  # by position (0, 1, 2) it was 0 %
    assert summary["class_names"] == [str(d) for d in range(10)]


def test_a_manifest_with_labels_7_8_9_is_read_by_name(tmp_path, digits, capsys):
    bundled = resources_dir() / "models" / "network_lenet5_map.pt"
    root = digit_folder(tmp_path / "images", digits, per_class=30)
    manifest = tmp_path / "labels.csv"
    manifest.write_text("path,label\n" + "".join(f"images/{rel},{rel.split('/')[0]}\n" for rel in files_of(root)))
    code, out, err, _ = evaluate(bundled, manifest, tmp_path / "e", capsys)
    assert code == 0, err
    assert float(out.split("\n")[2].split()[3]) > 80.0


def test_a_class_the_posterior_does_not_know_is_refused_in_a_sentence(tmp_path, digits, capsys):
    bundled = resources_dir() / "models" / "network_lenet5_map.pt"
    root = digit_folder(tmp_path / "d", digits, classes=(7, 8), per_class=10, names={8: "cat"})
    code, _, err, _ = evaluate(bundled, root, tmp_path / "e", capsys)
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "cat" in line and "Traceback" not in err


def test_info_names_the_classes_in_output_order(capsys):
    bundled = resources_dir() / "models" / "network_lenet5_map.pt"
    assert main(["info", str(bundled)]) == 0
    assert "classes       0, 1, 2, 3, 4, 5, 6, 7, 8, 9 (in output order)" in capsys.readouterr().out
    assert main(["info", str(bundled), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["class_names"] == [str(d) for d in range(10)]


# ----------------------------------------------------------------------------- item 4: --start-from


def _reversed_map(source: Path, out: Path) -> None:
    """The MAP of ``source`` with its two outputs swapped and named so: output 0 is the second class."""
    posterior = load_posterior(source)
    last = [k for k in posterior.samples if posterior.samples[k].shape[2] == 2][-2:]  # the last layer's W and b
    for k in last:
        posterior.samples[k] = posterior.samples[k].flip(2)
    posterior.info["class_names"] = list(reversed(posterior.info["class_names"]))
    save_posterior(posterior, out)


def test_start_from_a_map_whose_outputs_are_in_another_order_keeps_their_names(tmp_path, digits, capsys):
    root = digit_folder(tmp_path / "d", digits, classes=(7, 8), per_class=15)
    info = train_map(root, tmp_path / "map.pt")
    _reversed_map(tmp_path / "map.pt", tmp_path / "reversed.pt")
    assert main(["train", "--dataset", str(root), "--method", "laplace", "--start-from", str(tmp_path / "reversed.pt"),
                 "--out", str(tmp_path / "laplace.pt")]) == 0
    laplace = load_posterior(tmp_path / "laplace.pt")
    assert laplace.info["class_names"] == ["8", "7"]
    # the same network judged on the same test images: its accuracy is the MAP's, not 1 − it
    assert abs(laplace.info["test_accuracy"] - info["test_accuracy"]) < 0.25
    assert laplace.info["test_accuracy"] > 0.7


def test_start_from_a_map_of_other_classes_is_refused_in_a_sentence(tmp_path, digits, capsys):
    root = digit_folder(tmp_path / "d", digits, classes=(7, 8), per_class=15)
    train_map(root, tmp_path / "map.pt")
    other = digit_folder(tmp_path / "o", digits, classes=(7, 9), per_class=15)
    capsys.readouterr()
    assert main(["train", "--dataset", str(other), "--method", "laplace", "--start-from", str(tmp_path / "map.pt"),
                 "--out", str(tmp_path / "laplace.pt")]) == 2
    err = capsys.readouterr().err
    assert "tells apart 7, 8" in err and "no images of 8" in err and "Traceback" not in err
    assert not (tmp_path / "laplace.pt").exists()


# ----------------------------------------------------------------------------- item 15: join


def test_parts_of_a_run_on_a_folder_join(tmp_path, digits, capsys):
    root = digit_folder(tmp_path / "d", digits, classes=(7, 8), per_class=15)
    common = ["train", "--dataset", str(root), "--method", "sgld", "--set", "num_chains=2", "--set", "epochs=2",
              "--set", "batch_size=10", "--set", "burn_in_epochs=1", "--set", "thin=2"]
    for c in (0, 1):
        assert main([*common, "--chains", str(c), "--out", str(tmp_path / f"part{c}.pt")]) == 0
    assert main(["join", str(tmp_path / "part0.pt"), str(tmp_path / "part1.pt"), "--out",
                 str(tmp_path / "joined.pt")]) == 0, capsys.readouterr().err
    joined = load_posterior(tmp_path / "joined.pt")
    assert joined.info["test_data"]["images"] == sum(hashed_test(rel) for rel in files_of(root))
    assert joined.info["class_names"] == ["7", "8"]


# ----------------------------------------------------------------------------- item 16: CIFAR


def test_a_cifar_folder_holding_only_its_test_batch_is_evaluated(tmp_path, capsys):
    from core.engine.inference.base import SampledPosterior
    from core.engine.models import ArchSpec, build_model

    rng = np.random.default_rng(0)
    records = np.concatenate([np.arange(20, dtype=np.uint8)[:, None] % 10,
                              rng.integers(0, 256, (20, 3072), dtype=np.uint8)], axis=1)
    (tmp_path / "c").mkdir()
    records.tofile(tmp_path / "c" / "test_batch.bin")
    arch = ArchSpec("resnet", num_classes=10, image_size=32, channels=3, mean=(0.5,) * 3, std=(0.25,) * 3)
    torch.manual_seed(0)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    posterior = SampledPosterior("map", arch, {}, 0, "c-train", samples)
    save_posterior(posterior, tmp_path / "p.pt")
    code, out, err, _ = evaluate(tmp_path / "p.pt", tmp_path / "c", tmp_path / "e", capsys)
    assert code == 0, err
    assert "c-test: 20 images" in out


def test_old_bundled_posteriors_still_load_and_evaluate_on_mnist_names(tmp_path):
    for path in bundled_posteriors():
        posterior = load_posterior(path)
        from core.engine.data.identity import class_names_of

        assert class_names_of(posterior) == tuple(str(d) for d in range(10))


def test_parts_that_join_could_not_measure_are_refused_before_training(tmp_path, capsys):
    assert main(["train", "--dataset", "utkface", "--method", "sgld", "--set", "num_chains=2", "--chains", "0",
                 "--out", str(tmp_path / "part.pt")]) == 2
    err = capsys.readouterr().err
    assert "train the whole run at once" in err and "Traceback" not in err
    assert not (tmp_path / "part.pt").exists()


def test_the_dataset_tabs_evaluation_splits_as_training_did_and_says_what_changed(tmp_path, digits):
    """The generator the Dataset tab runs (run_evaluation) reads a changed folder as evaluate does:
    the test images training measured, and a note naming the change (it refused before, since
    its read of the folder carried no record and the last guard found training images in it)."""
    from core.analysis.dataset import EvaluationItem
    from core.engine.runner import drain
    from core.outputs.evaluation_cache import run_evaluation

    root = digit_folder(tmp_path / "d", digits, per_class=12)
    info = train_map(root, tmp_path / "map.pt")
    x, y = digits
    Image.fromarray(x[y == 8][30]).save(root / name_hashed_to(root, "8", test=False))
    item = EvaluationItem("map", load_posterior(tmp_path / "map.pt"), tmp_path / "map.pt")
    views = drain(run_evaluation([item], str(root), image_size=28, channels=1, use_cache=False))
    assert len(views.data) == info["test_data"]["images"]
    assert views.columns[0].summary["accuracy"] == pytest.approx(info["test_accuracy"])
    assert "1 file added" in views.data.source["data_check"]["note"]



def test_the_training_dialogs_check_matches_a_maps_classes_by_name(tmp_path, digits):
    """The window's check before a run (core.engine.training_words.folder_refusal) matches classes by
    name as train --start-from does: the same classes in another output order pass (the run maps
    them, tests/app/test_training_start_from.py), a folder of other classes is refused in words."""
    from core.engine.inference import get_method
    from core.engine.training_words import folder_refusal

    root = digit_folder(tmp_path / "d", digits, classes=(7, 8), per_class=15)
    train_map(root, tmp_path / "map.pt")
    _reversed_map(tmp_path / "map.pt", tmp_path / "reversed.pt")
    start = load_posterior(tmp_path / "reversed.pt")
    config = get_method("laplace").make_config()
    assert folder_refusal(load_image_folder(root, 28, 1), "laplace", start.arch, config, start) is None
    other = load_image_folder(digit_folder(tmp_path / "o", digits, classes=(7, 9), per_class=15), 28, 1)
    refusal = folder_refusal(other, "laplace", start.arch, config, start)
    assert refusal is not None and "tells apart 8, 7" in refusal and "no images of 8" in refusal
