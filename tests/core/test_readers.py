"""The one reader of a person's images (issue 44, items 5-9, 12, 18, 20): folders, CSV manifests
and CIFAR binaries are validated as they are listed, and every refusal is one sentence that
names the file (and the line or record).

Each folder, manifest and CIFAR file is written here in tmp; what a test expects follows from
what it wrote (which file, which line, which label), never from the reader's own output.
"""

from __future__ import annotations

import os
import shutil
import string
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from core.commands.main import main
from core.engine.data.cifar import CIFAR_PIXELS, cifar_bytes
from core.engine.data.datasets import DatasetContentError, DatasetNotFoundError
from core.engine.data.folder import load_image_folder, read_image_folder
from core.engine.data.listing import image_folder, read_manifest

# ----------------------------------------------------------------------------- material


def _png(path: Path, value: int, side: int = 8) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((side, side), value % 256, np.uint8)).save(path)
    return path


def _classes(root: Path, counts: dict[str, int], first: int = 0) -> Path:
    """Class folders of small grey PNGs, each image a grey level of its own (from ``first`` on: two
    folders made with different ``first`` hold no copy of one another)."""
    value = first
    for name, count in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            value += 3
            _png(root / name / f"{i}.png", value)
    return root


def _manifest(root: Path, lines: list[str], name: str = "set.csv") -> Path:
    for i in range(6):
        _png(root / "img" / f"{i}.png", 20 * i + 5)
    path = root / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # one sentence (after any progress bar)
    assert last.startswith("error: ") and "Error" not in last
    return last


# ----------------------------------------------------------------------------- 5: links that loop


@pytest.mark.parametrize("target", ["..", "."])
def test_a_class_folder_linked_to_its_parent_or_itself_is_refused(tmp_path, target):
    root = _classes(tmp_path / "set", {"cat": 3, "dog": 3})
    os.symlink(target, root / "loop")
    with pytest.raises(DatasetContentError, match=r"set/loop is a link back to .*remove the link"):
        load_image_folder(root)


def test_a_link_deeper_inside_a_class_back_up_is_refused_not_followed_forever(tmp_path):
    root = _classes(tmp_path / "set", {"cat": 3, "dog": 3})
    os.symlink("../..", root / "cat" / "up")
    with pytest.raises(DatasetContentError, match=r"set/cat/up is a link back to a folder above it"):
        load_image_folder(root)


def test_one_image_linked_into_two_classes_is_refused(tmp_path):
    root = _classes(tmp_path / "set", {"cat": 3, "dog": 3})
    os.symlink(root / "cat" / "0.png", root / "dog" / "also.png")
    with pytest.raises(DatasetContentError, match=r"set/dog/also.png is the same image file as set/cat/0.png"):
        load_image_folder(root)


def test_a_class_folder_linked_from_elsewhere_is_read_once(tmp_path):
    elsewhere = _classes(tmp_path / "store", {"bird": 4})
    root = _classes(tmp_path / "set", {"cat": 4}, first=100)
    os.symlink(elsewhere / "bird", root / "bird")
    data = load_image_folder(root)
    assert data.train.class_names == ("bird", "cat")
    assert len(data.train) + len(data.test) == 8


# ----------------------------------------------------------------------------- 6, 8, 18: manifests


def test_a_file_listed_twice_under_one_label_is_refused_with_both_lines(tmp_path):
    path = _manifest(tmp_path, ["path,label", "img/0.png,a", "img/1.png,b", "img/2.png,a", "img/0.png,a"])
    with pytest.raises(DatasetContentError, match=r"set.csv, line 5 lists img/0.png again \(line 2 listed it\)"):
        load_image_folder(path)


def test_a_file_listed_under_two_labels_is_refused_naming_both(tmp_path):
    path = _manifest(tmp_path, ["img/0.png,a", "img/1.png,b", "./img/0.png,b"])
    with pytest.raises(DatasetContentError, match=r"line 3 lists ./img/0.png again \(line 1 listed it as a, "
                                                  r"this line as b\); an image has one class"):
        load_image_folder(path)


@pytest.mark.parametrize("header", ["file,class", "filename,label", "image,path"])
def test_a_header_other_than_path_label_is_refused_not_read_as_a_class(tmp_path, header):
    path = _manifest(tmp_path, [header, "img/0.png,a", "img/1.png,b", "img/2.png,a", "img/3.png,b"])
    with pytest.raises(DatasetContentError, match=r"set.csv, line 1 reads as a header .* only header .* 'path,label'"):
        load_image_folder(path)


def test_a_repeated_header_is_refused(tmp_path):
    path = _manifest(tmp_path, ["path,label", "img/0.png,a", "img/1.png,b", "Path,Label", "img/2.png,a"])
    with pytest.raises(DatasetContentError, match=r"line 4 repeats the header 'path,label'"):
        load_image_folder(path)


def test_a_header_in_another_case_is_still_the_header(tmp_path):
    path = _manifest(tmp_path, ["Path,Label", "img/0.png,a", "img/1.png,b", "img/2.png,a", "img/3.png,b"])
    assert read_manifest(path).class_names == ("a", "b")


def test_a_manifest_written_on_windows_reads_its_backslashed_paths(tmp_path):
    path = _manifest(tmp_path, ["path,label"] + [f"img\\{i}.png,{'ab'[i % 2]}" for i in range(6)])
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))  # and its line ends
    data = load_image_folder(path)
    assert data.unreadable == [] and len(data.train) + len(data.test) == 6
    both = torch.cat([data.train.x, data.test.x])[:, 0, 0, 0]
    expected = sorted((20 * i + 5) / 255 for i in range(6))  # each written file's own grey
    np.testing.assert_allclose(sorted(both.tolist()), expected, atol=1e-6)


def test_a_windows_drive_path_is_refused_with_its_line(tmp_path):
    path = _manifest(tmp_path, ["path,label", "img/0.png,a", "C:\\data\\img\\1.png,b"])
    with pytest.raises(DatasetContentError, match=r"line 3: C:\\data\\img\\1.png is a Windows drive path"):
        load_image_folder(path)


def test_a_nul_character_names_the_line_not_an_embedded_null_byte(tmp_path):
    path = _manifest(tmp_path, ["path,label", "img/0.png,a", "img/1\0.png,b"])
    with pytest.raises(DatasetContentError, match=r"set.csv, line 3 holds a NUL character") as caught:
        load_image_folder(path)
    assert "embedded" not in str(caught.value)


def test_an_empty_manifest_is_told_to_list_rows_not_to_make_sub_folders(tmp_path, capsys):
    path = _manifest(tmp_path, ["path,label"])
    with pytest.raises(DatasetNotFoundError, match=r"set.csv lists no images: give one 'path,label' row") as caught:
        load_image_folder(path)
    assert "sub-folder" not in str(caught.value)
    out = tmp_path / "p.pt"
    assert main(["train", "--dataset", str(path), "--method", "map", "--out", str(out)]) == 2
    assert "lists no images" in _one_line_error(capsys) and not out.exists()


_BAD_ROWS = {
    "one cell": ("img/5.png", r"expected 'path,label'"),
    "three cells": ("img/5.png,a,extra", r"expected 'path,label'"),
    "empty label": ("img/5.png,", r"expected 'path,label'"),
    "repeated header": ("path,label", r"repeats the header"),
    "repeated file": ("img/0.png,a", r"lists img/0.png again"),
    "conflicting label": ("img/0.png,b", r"lists img/0.png again .* as a, this line as b"),
    "drive path": ("D:/img/5.png,a", r"is a Windows drive path"),
    "NUL": ("img/5\0.png,a", r"holds a NUL character"),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(good=st.integers(2, 5), bad=st.sampled_from(sorted(_BAD_ROWS)), at=st.integers(0, 5),
       blanks=st.lists(st.integers(0, 6), max_size=2), header=st.booleans())
def test_any_manifest_with_a_bad_row_is_refused_naming_that_line(tmp_path_factory, good, bad, at, blanks, header):
    """Wherever a bad row sits among good rows (after the first, which lists img/0.png as a;
    blank lines anywhere), the manifest is refused and the sentence names that row's line."""
    root = tmp_path_factory.mktemp("m")
    rows = [(f"img/{i}.png,{'ab'[i % 2]}", False) for i in range(good)]
    row, pattern = _BAD_ROWS[bad]
    rows.insert(1 + min(at, len(rows) - 1), (row, True))
    lines = ([("path,label", False)] if header else []) + rows
    for b in sorted(blanks, reverse=True):
        lines.insert(min(b, len(lines)), ("", False))
    path = _manifest(root, [text for text, _ in lines])
    number = next(i for i, (_, is_bad) in enumerate(lines, start=1) if is_bad)
    with pytest.raises(DatasetContentError, match=rf"set.csv, line {number}\b.*{pattern}"):
        read_manifest(path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labels=st.lists(st.text(string.ascii_letters + " éß", min_size=1, max_size=5).map(str.strip)
                       .filter(bool), min_size=6, max_size=6),
       windows=st.booleans(), header=st.booleans())
def test_any_well_formed_manifest_keeps_each_rows_label(tmp_path_factory, labels, windows, header):
    root = tmp_path_factory.mktemp("m")
    sep = "\\" if windows else "/"
    lines = (["path,label"] if header else []) + [f'"img{sep}{i}.png",{label}' for i, label in enumerate(labels)]
    listing = read_manifest(_manifest(root, lines))
    assert listing.class_names == tuple(sorted(set(labels)))
    for i, label in enumerate(labels):  # row i's file, under row i's label
        assert listing.paths[i] == root / "img" / f"{i}.png"
        assert listing.class_names[listing.labels[i]] == label


# ----------------------------------------------------------------------------- 7: empty classes


def test_an_empty_class_folder_is_refused_naming_it(tmp_path):
    root = _classes(tmp_path / "set", {"cat": 3, "dog": 3})
    (root / "eel").mkdir()
    with pytest.raises(DatasetContentError, match=r"class folder set/eel holds nothing, so the network would have "
                                                  r"an output it never saw"):
        load_image_folder(root)


def test_a_class_folder_of_non_images_only_is_refused(tmp_path):
    root = _classes(tmp_path / "set", {"cat": 3, "dog": 3})
    (root / "eel").mkdir()
    (root / "eel" / "notes.txt").write_text("x")
    (root / "eel" / "list.csv").write_text("x")
    with pytest.raises(DatasetContentError, match=r"set/eel holds only 2 file\(s\) that are not images"):
        load_image_folder(root)


def test_a_class_whose_files_are_all_damaged_is_refused(tmp_path):
    root = _classes(tmp_path / "set", {"cat": 3, "dog": 3})
    (root / "eel").mkdir()
    (root / "eel" / "a.png").write_bytes(b"not a png")
    with pytest.raises(DatasetContentError, match=r"class eel has no training image: none of its 1 image file\(s\) "
                                                  r"could be read \(the first: eel/a.png"):
        load_image_folder(root)


def test_a_manifest_class_whose_only_file_is_missing_is_refused(tmp_path):
    path = _manifest(tmp_path, ["path,label", "img/0.png,a", "img/1.png,b", "img/2.png,a", "img/gone.png,c"])
    with pytest.raises(DatasetContentError, match=r"class c has no training image.*img/gone.png: no such file"):
        load_image_folder(path)


def test_a_class_folder_deleted_while_it_is_read_is_refused(tmp_path):
    """The reader decodes 64 files at a time: the last class goes after the first batch."""
    root = _classes(tmp_path / "set", {"a": 65, "b": 5})
    reading = read_image_folder(root, report_every=1)
    next(reading)  # listed nothing yet
    next(reading)  # listed, first batch decoded
    shutil.rmtree(root / "b")
    with pytest.raises(DatasetContentError, match=r"class b has no training image: none of its 5 image file"):
        for _ in reading:
            pass


def test_an_empty_test_class_folder_beside_train_is_no_class_of_its_own(tmp_path):
    _classes(tmp_path / "set" / "train", {"cat": 3, "dog": 3})
    _classes(tmp_path / "set" / "test", {"cat": 2}, first=100)
    (tmp_path / "set" / "test" / "dog").mkdir()
    data = load_image_folder(tmp_path / "set")
    assert data.train.class_names == ("cat", "dog") and len(data.test) == 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(["images", "empty", "text"]), min_size=2, max_size=4),
       loop=st.sampled_from([None, ".", ".."]))
def test_any_folder_of_classes_is_read_whole_or_refused_naming_the_class_or_link(tmp_path_factory, kinds, loop):
    """Class folders of images, empty ones, ones of text files only, and perhaps a link back: read
    (every image once, under its folder's name) only when every class has images and no link loops."""
    root = tmp_path_factory.mktemp("f") / "set"
    root.mkdir()
    counts = {}
    for i, kind in enumerate(kinds):
        name = f"c{i}"
        (root / name).mkdir()
        if kind == "images":
            counts[name] = 2 + i
            for j in range(counts[name]):
                _png(root / name / f"{j}.png", 10 * i + j)
        elif kind == "text":
            (root / name / "read me.txt").write_text("x")
    if loop:
        os.symlink(loop, root / "zz")
    if loop:
        with pytest.raises(DatasetContentError, match=r"set/zz is a link back to"):
            load_image_folder(root)
    elif not counts:
        with pytest.raises(DatasetNotFoundError, match="holds no images"):
            load_image_folder(root)
    elif len(counts) < len(kinds):
        first = next(f"c{i}" for i, kind in enumerate(kinds) if kind != "images")
        with pytest.raises(DatasetContentError, match=rf"class folder set/{first} holds"):
            load_image_folder(root)
    else:
        data = load_image_folder(root)
        assert data.train.class_names == tuple(sorted(counts))
        labels = torch.cat([data.train.y, data.test.y]).tolist()
        assert {name: labels.count(k) for k, name in enumerate(data.train.class_names)} == counts


# ----------------------------------------------------------------------------- 20: layouts in words


def test_a_folder_with_only_train_is_told_what_is_missing_not_called_one_class(tmp_path, capsys):
    _classes(tmp_path / "set" / "train", {"cat": 3, "dog": 3})
    with pytest.raises(DatasetContentError, match=r"holds a train/ folder of classes but no test/ folder") as caught:
        load_image_folder(tmp_path / "set")
    assert "one class" not in str(caught.value)
    assert main(["train", "--dataset", str(tmp_path / "set"), "--method", "map", "--out",
                 str(tmp_path / "p.pt")]) == 2
    assert "no test/ folder" in _one_line_error(capsys)


def test_an_empty_ood_folder_is_told_it_holds_no_images_not_which_idx_files_it_lacks(tmp_path, capsys,
                                                                                      shared_data):
    from core.engine.resources import default_posterior_path

    (tmp_path / "empty").mkdir()
    assert main(["evaluate", "--posterior", str(default_posterior_path()), "--dataset", "mnist-test", "--data-dir",
                 str(shared_data), "--ood", str(tmp_path / "empty"), "--limit", "10", "--out",
                 str(tmp_path / "ev")]) == 2
    err = _one_line_error(capsys)
    assert "empty holds no images" in err and "t10k" not in err and "idx3" not in err
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "t10k-images-idx3-ubyte.gz").write_bytes(b"")
    assert not image_folder(tmp_path / "idx")  # a folder of IDX files is still answered as one


# ----------------------------------------------------------------------------- 9, 12: CIFAR


def _cifar(folder: Path, train_labels: list[tuple[int, ...]], test_labels: list[tuple[int, ...]],
           hundred: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)

    def records(labels):
        return b"".join(bytes(label) + rng.integers(0, 256, CIFAR_PIXELS, dtype=np.uint8).tobytes()
                        for label in labels)

    names = ("train.bin", "test.bin") if hundred else ("data_batch_1.bin", "test_batch.bin")
    (folder / names[0]).write_bytes(records(train_labels))
    (folder / names[1]).write_bytes(records(test_labels))
    return folder


def test_a_cifar_10_label_out_of_range_is_refused_with_its_record(tmp_path):
    folder = _cifar(tmp_path / "c", [(0,), (1,), (200,), (3,)], [(0,), (1,)])
    with pytest.raises(DatasetContentError, match=r"data_batch_1.bin, record 3: label 200 is not a CIFAR-10 class "
                                                  r"\(0 to 9\)"):
        load_image_folder(folder)


def test_cifar_100_records_under_a_cifar_10_name_are_refused(tmp_path):
    """3 CIFAR-100 records (3074 bytes each) are exactly 3073 + 3073 + 3076: a CIFAR-10 reader
    finds 'records' whose label bytes are pixels (any of 0-255: 256 classes)."""
    rows = _cifar(tmp_path / "src", [(4, 57), (1, 3)], [(2, 99)], hundred=True)
    folder = tmp_path / "c"
    folder.mkdir()
    data = (rows / "train.bin").read_bytes() + (rows / "test.bin").read_bytes()
    usable = len(data) // (CIFAR_PIXELS + 1) * (CIFAR_PIXELS + 1)
    data = data[:usable]
    data = bytearray(data)
    data[CIFAR_PIXELS + 1] = 250  # the second "record"'s label byte, a pixel of the first image
    (folder / "data_batch_1.bin").write_bytes(bytes(data))
    (folder / "test_batch.bin").write_bytes(bytes(data))
    with pytest.raises(DatasetContentError, match=r"record 2: label 250 is not a CIFAR-10 class"):
        load_image_folder(folder)


def test_a_cifar_100_fine_label_out_of_range_is_refused(tmp_path):
    folder = _cifar(tmp_path / "c", [(4, 57), (1, 130)], [(2, 99)], hundred=True)
    with pytest.raises(DatasetContentError, match=r"train.bin, record 2: fine label 130 is not a CIFAR-100 class "
                                                  r"\(0 to 99\)"):
        load_image_folder(folder)


def test_a_cifar_names_file_naming_a_class_twice_is_refused(tmp_path):
    folder = _cifar(tmp_path / "c", [(0,), (1,), (2,)], [(0,)])
    (folder / "batches.meta.txt").write_text("cat\ndog\n\ncat\n")
    with pytest.raises(DatasetContentError, match=r"batches.meta.txt, line 4 names the class cat again \(line 1"):
        load_image_folder(folder)
    (folder / "batches.meta.txt").write_text("cat\ndog\n")
    with pytest.raises(DatasetContentError, match=r"batches.meta.txt names 2 classes, but the records' labels run "
                                                  r"to 2"):
        load_image_folder(folder)
    (folder / "batches.meta.txt").write_text("cat\ndog\neel\n")
    assert load_image_folder(folder).train.class_names == ("cat", "dog", "eel")


def test_cifar_is_estimated_before_it_is_read_and_refused_with_the_estimate(tmp_path, monkeypatch):
    import core.engine.memory as memory
    from core.engine.memory import MemoryEstimateError

    folder = _cifar(tmp_path / "c", [(0,), (1,), (2,)] * 4, [(0,), (1,)])
    # 14 records: their bytes (1x), float32 at 32 px (4x), and one chunk's float32 copies
    assert cifar_bytes({"train": 12, "test": 2}, 3, 32) == 14 * 3072 * 5 + 14 * 4 * (3072 + 2 * 3072)
    assert cifar_bytes({"train": 50_000, "test": 10_000}, 3, 32) < 1.1e9  # CIFAR-10 whole: was ~2.8 GB
    read = []
    monkeypatch.setattr("core.engine.data.cifar.read_cifar_files", lambda *a: read.append(a))
    monkeypatch.setattr(memory, "available_bytes", lambda: 100_000)
    with pytest.raises(MemoryEstimateError, match=r"reading the 14 CIFAR images of c would need about 731.1 kB"):
        load_image_folder(folder)
    assert not read  # refused before a byte was read


def test_cifar_is_read_at_about_five_times_its_size_not_seventeen(tmp_path):
    """Peak memory of reading 16,000 CIFAR-10 records (49 MB), measured in a fresh process by its
    peak resident size less the size before reading (issue 44: 17x before)."""
    import subprocess
    import sys

    folder = _cifar(tmp_path / "c", [(i % 10,) for i in range(14_000)], [(i % 10,) for i in range(2_000)])
    size = sum(f.stat().st_size for f in folder.iterdir())
    script = (  # small chunks, so that what is measured is what the images take, not one chunk's copies
        "import resource, sys; import core.engine.data.cifar as c; import core.engine.data.folder as f;"
        "c.CIFAR_CHUNK = 64;"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
        "data = f.load_image_folder(sys.argv[1]);"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)")
    out = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    peak = int(out.stdout.split()[-1])
    assert peak < 7 * size, (peak, size)  # float32 (4x) + uint8 (1x) + one chunk; was ~17x
