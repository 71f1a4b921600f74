"""A person's own network (TorchScript, torch.export) imported, split at its last linear layer, its
features cached, and a feature tier built on them (``import --network``, ``zoo --tier features``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import core.engine.data.folder as folder_module
import core.engine.data.images as images_module
from core.analysis.conformal_run import calibration_of_record
from core.commands.main import main
from core.engine.calibration_file import read_calibration
from core.engine.data import features as features_module
from core.engine.data.features import folder_features, listing_stamp
from core.engine.data.listing import list_images
from core.engine.import_weights import import_own_network
from core.engine.networks import NetworkError, network_input, open_network
from core.engine.runner import drain
from core.engine.store import load_posterior

CLASSES = ["red", "green", "blue"]
SIDE = 12
MEAN, STD = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]
ROOT = Path(__file__).resolve().parents[2]


class TinyCNN(nn.Module):
    """A convolution, pooling to 2×2 and two linear layers: the last, ``fc``, is the head."""

    def __init__(self, aux: bool = False, after: str = "") -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.hidden = nn.Linear(16, 6)
        self.fc = nn.Linear(6, len(CLASSES))
        self.aux = nn.Linear(6, len(CLASSES)) if aux else None  # a second layer of the classes' width
        self.after = after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 2).flatten(1)
        h = torch.relu(self.hidden(h))
        out = self.fc(h)
        if self.after == "softmax":  # probabilities, not the last layer's outputs
            out = torch.softmax(out, 1)
        return out


class NoLinear(nn.Module):
    """A classifier whose last layer is a 1×1 convolution: nothing to split it at."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, len(CLASSES), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3))


def _sidecar(path: Path) -> Path:
    path.with_suffix(".json").write_text(json.dumps({"image_size": SIDE, "mean": MEAN, "std": STD,
                                                      "classes": CLASSES}))
    return path


def save_torchscript(model: nn.Module, path: Path, sidecar: bool = True) -> Path:
    with warnings.catch_warnings():  # torch 2.13 calls TorchScript deprecated; people still save networks so
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(model.eval()), str(path))
    return _sidecar(path) if sidecar else path


def save_export(model: nn.Module, path: Path, sidecar: bool = True) -> Path:
    torch.export.save(torch.export.export(model.eval(), (torch.rand(4, 3, SIDE, SIDE),)), path)
    return _sidecar(path) if sidecar else path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def colour_folder(root: Path, per_class: int = 8, seed: int = 0) -> Path:
    """Class folders of small photos, each class bright in its own colour channel."""
    rng = np.random.default_rng(seed)
    for k, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 90, (SIDE + 4, SIDE + 4, 3)).astype(np.uint8)
            pixels[..., k] += 140
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


def _network_probabilities(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    with torch.no_grad():
        return torch.softmax(model((images - mean) / std), 1)


@pytest.mark.parametrize("save", [save_torchscript, save_export], ids=["torchscript", "export"])
def test_both_formats_import_their_head_is_found_and_the_posterior_is_the_network(tmp_path, cache, save):
    torch.manual_seed(0)
    model = TinyCNN().eval()
    suffix = ".pt" if save is save_torchscript else ".pt2"
    network = save(model, tmp_path / f"net{suffix}")
    out = tmp_path / "imported.pt"
    assert main(["import", "--network", str(network), "--out", str(out)]) == 0
    posterior = load_posterior(out)
    assert posterior.arch.name == "features" and posterior.arch.head == "fc" and posterior.arch.features == 6
    record = posterior.info["network"]
    assert record["sha256"] == posterior.arch.network and record["head"] == "fc"
    assert (record["image_size"], record["mean"], record["std"], record["class_names"]) == (SIDE, MEAN, STD, CLASSES)
    # the head's weights are the network's own: on images the posterior is the network itself
    assert torch.equal(posterior.samples["linear.weight"][0, 0], model.fc.weight.detach())
    images = torch.rand(5, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(1))
    probs = posterior.predict_proba(images)
    assert probs.shape == (1, 5, 3)
    torch.testing.assert_close(probs[0], _network_probabilities(model, images), atol=1e-5, rtol=1e-4)
    # the network is kept under its checksum: the posterior predicts with the original gone
    network.unlink()
    from core.engine import networks

    networks._OPEN.clear()
    torch.testing.assert_close(load_posterior(out).predict_proba(images), probs)


def test_options_win_over_the_sidecar_and_a_missing_piece_is_named(tmp_path, cache):
    network = save_torchscript(TinyCNN(), tmp_path / "net.pt", sidecar=False)
    with pytest.raises(NetworkError, match=r"--image-size or \"image_size\" in net.json.*--classes"):
        import_own_network(network)
    names = tmp_path / "names.txt"
    names.write_text("\n".join(CLASSES))
    assert main(["import", "--network", str(network), "--out", str(tmp_path / "x.pt"), "--mean", "0.5,0.5,0.5",
                 "--std", "0.25,0.25,0.25", "--classes", str(names)]) == 2  # no image size anywhere
    assert main(["import", "--network", str(network), "--out", str(tmp_path / "x.pt"), "--mean", "0.5,0.5,0.5",
                 "--std", "0.25,0.25,0.25", "--classes", str(names), "--image-size", str(SIDE)]) == 0


@pytest.mark.parametrize("save", [save_torchscript, save_export], ids=["torchscript", "export"])
def test_several_candidates_need_head_and_head_chooses(tmp_path, cache, save, capsys):
    torch.manual_seed(0)
    network = save(TinyCNN(aux=True), tmp_path / ("net.pt" if save is save_torchscript else "net.pt2"))
    if save is save_export:  # an unused layer leaves the exported graph: one candidate is left
        assert import_own_network(network)[1].head == "fc"
        return
    assert main(["import", "--network", str(network), "--out", str(tmp_path / "a.pt")]) == 2
    said = capsys.readouterr().err
    assert said.startswith("error: ") and "fc, aux" in said and "--head" in said and "Traceback" not in said
    assert main(["import", "--network", str(network), "--head", "fc", "--out", str(tmp_path / "b.pt")]) == 0
    assert load_posterior(tmp_path / "b.pt").arch.head == "fc"
    # the other one is a linear layer of the right width, but the network's outputs are not its
    with pytest.raises(NetworkError, match="splitting net.pt at aux does not give the network's own outputs"):
        import_own_network(network, head="aux")
    with pytest.raises(NetworkError, match="no linear layer named 'nope'; its linear layers are hidden, fc, aux"):
        import_own_network(network, head="nope")


@pytest.mark.parametrize("model", [TinyCNN(after="softmax"), NoLinear()], ids=["softmax-after", "no-linear"])
@pytest.mark.parametrize("save", [save_torchscript, save_export], ids=["torchscript", "export"])
def test_a_network_that_cannot_be_split_is_told_how_to_export_it(tmp_path, cache, capsys, model, save):
    network = save(model, tmp_path / ("net.pt" if save is save_torchscript else "net.pt2"))
    assert main(["import", "--network", str(network), "--out", str(tmp_path / "a.pt")]) == 2
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0 and said.startswith("error: ")
    assert "export it so that its last layer is an nn.Linear submodule whose outputs it returns" in said
    assert not (tmp_path / "a.pt").exists()


def _counting_reads(monkeypatch) -> list[str]:
    """Every image decoded (read_image, from a path or from bytes read once and hashed) or whose
    bytes are hashed on their own (content_fingerprint), by name."""
    import core.engine.data.split as split_module

    reads: list[str] = []
    for module, name in ((images_module, "read_image"), (split_module, "content_fingerprint")):
        real = getattr(module, name)

        def counted(path, *args, _real=real, **kwargs):
            reads.append(str(kwargs.get("name") or path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return reads


def _open(network: Path):
    return open_network(network, lambda shape: network_input(network), None)


def test_features_are_cached_reused_and_invalidated(tmp_path, cache, monkeypatch):
    torch.manual_seed(0)
    network = save_torchscript(TinyCNN(), tmp_path / "net.pt")
    photos = colour_folder(tmp_path / "photos")
    split = _open(network)
    reads = _counting_reads(monkeypatch)
    first = drain(folder_features(split, photos), lambda r: None)
    decoded = [r for r in reads if r.endswith(".png")]
    # each image read once: decoded and hashed from the same bytes
    assert first.computed and len(decoded) == 24 and len(first.train) + len(first.test) == 24
    assert first.train.x.shape[1] == 6 and first.train.source["split_rule"].startswith("0.2 of the images to test")
    assert first.stamp == listing_stamp(list_images(photos))
    assert isinstance(np.load(first.cache / "features.npy", mmap_mode="r"), np.memmap)
    # the cached features are the network's own on each image
    picture = images_module.read_image(photos / "red" / "0.png", SIDE, 3)
    one = split.features(torch.from_numpy(picture.astype(np.float32) / 255).unsqueeze(0))[0]
    assert any(torch.allclose(one, row, atol=1e-5) for row in torch.cat([first.train.x, first.test.x]))
    # a second build reads no image (neither decodes nor hashes one) and gives the same features
    reads.clear()
    second = drain(folder_features(split, photos), lambda r: None)
    assert not second.computed and reads == [] and second.cache == first.cache
    assert torch.equal(second.train.x, first.train.x) and torch.equal(second.test.y, first.test.y)
    assert second.train.source["identity"] == first.train.source["identity"]
    # a changed folder: one image more is another key, and every image is read again
    Image.open(photos / "red" / "0.png").save(photos / "red" / "extra.png")
    third = drain(folder_features(split, photos), lambda r: None)
    assert third.computed and third.cache != first.cache and len(reads) == 25 and third.stamp != first.stamp
    # an edited image (same name, new contents and time) is another key as well
    reads.clear()
    Image.fromarray(np.zeros((SIDE + 4, SIDE + 4, 3), dtype=np.uint8)).save(photos / "green" / "3.png")
    os.utime(photos / "green" / "3.png", ns=(10**18, 10**18))
    fourth = drain(folder_features(split, photos), lambda r: None)
    assert fourth.computed and fourth.cache not in (first.cache, third.cache) and len(reads) == 25
    # a changed network (other weights, same file name) is another key
    reads.clear()
    torch.manual_seed(1)
    other = _open(save_torchscript(TinyCNN(), tmp_path / "net.pt"))
    assert other.sha256 != split.sha256
    fifth = drain(folder_features(other, photos), lambda r: None)
    assert fifth.computed and fifth.cache != fourth.cache and len(reads) == 25
    assert not torch.equal(fifth.train.x, fourth.train.x)


def test_the_split_is_the_projects_hash_split(tmp_path, cache):
    from core.engine.data.folder import load_image_folder
    from core.engine.data.split import file_key, split_draw

    network = save_torchscript(TinyCNN(), tmp_path / "net.pt")
    photos = colour_folder(tmp_path / "photos", per_class=10)
    # a training image copied into another class under a name the rule draws to test: left out of
    # the test images by both readers alike (the one rule of split.leave_out_copies), and named
    trained = next(i for i in range(10) if split_draw(file_key("red", f"red/{i}.png"), 0) >= 0.2)
    copy = next(f"copy{i}.png" for i in range(200) if split_draw(file_key("green", f"green/copy{i}.png"), 0) < 0.2)
    (photos / "green" / copy).write_bytes((photos / "red" / f"{trained}.png").read_bytes())
    split = import_own_network(network)[1]
    data = drain(folder_features(split, photos), lambda r: None)
    pixels = load_image_folder(photos, SIDE, 3)
    assert data.train.source["identity"]["train_images"] == pixels.train.source["identity"]["train_images"]
    assert data.test.source["identity"]["test_images"] == pixels.test.source["identity"]["test_images"]
    assert len(data.test) == len(pixels.test) and len(data.train) == len(pixels.train)
    assert data.test.source["copies"] == pixels.test.source["copies"]
    assert data.test.source["copies"]["training_photos"] == [f"green/{copy}"]
    assert data.notes() == [data.copies] and f"(the same bytes: green/{copy} and red/{trained}.png)" in data.copies


def test_a_tiny_feature_tier_end_to_end(tmp_path, cache, monkeypatch):
    torch.manual_seed(0)
    model = TinyCNN().eval()
    network = save_export(model, tmp_path / "net.pt2")
    photos = colour_folder(tmp_path / "photos", per_class=10)
    out = tmp_path / "tier"
    quick = ["--set", "epochs=2", "--set", "num_chains=2", "--set", "num_warmup=10", "--set", "num_samples=20",
             "--set", "num_leapfrog=4"]  # a few steps: what is checked is the way through, not the numbers
    argv = ["zoo", "--tier", "features", "--network", str(network), "--dataset", str(photos), "--out", str(out),
            "--methods", "hmc,map,laplace", *quick]
    assert main(argv) == 0
    rows = {r["method"]: r for r in json.loads((out / "zoo.json").read_text())["rows"]}
    assert set(rows) == {"hmc", "map", "laplace", "network"}  # the network's own head is a column
    assert rows["network"]["label"] == "your network (net.pt2)"
    assert rows["hmc"]["chains"] == 2 and rows["map"]["to_hmc_kl"] is not None
    assert "--set num_leapfrog=4" in rows["hmc"]["command"] and "num_leapfrog" not in rows["map"]["command"]
    hmc = load_posterior(out / "features_hmc.pt")
    assert hmc.info["zoo"]["tier"] == "features" and hmc.info["network"]["sha256"] == hmc.arch.network
    assert hmc.info["class_names"] == sorted(CLASSES) and hmc.arch.image_size == SIDE and list(hmc.arch.mean) == MEAN
    assert hmc.info["training_data"]["split_rule"].startswith("0.2 of the images to test, each by a hash")
    # the posteriors judge photos: images through the network, then the head
    picture = torch.from_numpy(images_module.read_image(photos / "blue" / "1.png", SIDE, 3).astype(np.float32) / 255)
    probs = hmc.predict_proba(picture.unsqueeze(0), num_samples=8)
    assert probs.shape == (8, 1, 3) and torch.allclose(probs.sum(-1), torch.ones(8, 1))
    # the network's own column: its classes (red, green, blue) in the folder's order (blue, green, red)
    own = load_posterior(out / "features_network.pt")
    assert own.info["class_names"] == ["blue", "green", "red"] and own.info["network"]["class_names"] == CLASSES
    torch.testing.assert_close(own.predict_proba(picture.unsqueeze(0))[0],
                               _network_probabilities(model, picture[None]).flip(1), atol=1e-5, rtol=1e-4)
    # every file comes calibrated for the window's conformal sets, from the tier's own evaluation
    # on the test half the split chose, against the file as it was last written
    for method in rows:
        record = read_calibration(out / f"features_{method}.pt")  # refused if made for another file
        assert record is not None and 0 < calibration_of_record(record).n < record["identity"]["of_images"]
    # the files record the folder's listing, as listed once for the features
    assert hmc.info["zoo"]["listing"] == listing_stamp(list_images(photos))
    # a second build keeps every file, reads no image and lists the folder once
    reads = _counting_reads(monkeypatch)
    listed = []
    for module in (features_module, folder_module):
        monkeypatch.setattr(module, "list_images",
                            lambda *a, _real=module.list_images, **k: listed.append(1) or _real(*a, **k))
    assert main(argv) == 0 and reads == [] and len(listed) == 1


def test_nothing_imports_torchvision(tmp_path, cache):
    network = save_torchscript(TinyCNN(), tmp_path / "net.pt")
    exported = save_export(TinyCNN(), tmp_path / "net2.pt2")
    script = f"""
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            raise ImportError("torchvision is not installed")
sys.meta_path.insert(0, Refuse())
from core.commands.main import main
assert main(["import", "--network", {str(network)!r}, "--out", {str(tmp_path / 'a.pt')!r}]) == 0
assert main(["import", "--network", {str(exported)!r}, "--out", {str(tmp_path / 'b.pt')!r}]) == 0
import core.engine.data.features, core.commands.zoo
assert not any(m.startswith("torchvision") for m in sys.modules), [m for m in sys.modules if "vision" in m]
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_feature_tier_is_named_after_its_network():
    """Two people's networks make two tiers: the Add-posterior group names the network's file."""
    from core.engine.tiers import tier_words

    info = {"zoo": {"tier": "features"}, "network": {"file": "/somewhere/colours.pt", "sha256": "ab" * 32}}
    assert tier_words(info) == "softmax-regression head on the features of a network of your own (colours.pt)"
    assert tier_words({"zoo": {"tier": "paper"}}) == "softmax regression (the D-SGHMC paper's model)"
    assert tier_words({}) is None
