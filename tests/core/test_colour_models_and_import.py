"""Colour models (channels, standardisation, the ResNet-8) and ``bayescope-cli import``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.commands.main import main
from core.engine.inference import METHODS, get_method
from core.engine.inference.base import Dataset
from core.engine.models import ArchSpec, build_model, num_parameters
from core.engine.runner import drain, fit_posterior
from core.engine.store import load_posterior, save_posterior

BUNDLED_MAP = Path(__file__).resolve().parents[2] / "resources" / "models" / "paper_softmax_map.pt"
COLOUR = ArchSpec("resnet", num_classes=3, image_size=16, channels=3, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))


def test_grey_records_are_written_as_before_and_old_files_load():
    assert ArchSpec().to_dict() == {"name": "lenet", "num_classes": 10, "drop_rate": 0.0, "hidden": 100,
                                    "image_size": 28}
    bundled = load_posterior(BUNDLED_MAP)
    assert bundled.arch.channels == 1 and bundled.arch.mean == ()


@pytest.mark.parametrize("spec", [COLOUR, ArchSpec("resnet", num_classes=7, image_size=40, channels=1),
                                  ArchSpec("lenet", channels=3, image_size=32), ArchSpec("mlp", channels=3, image_size=8),
                                  ArchSpec("lenet5"), ArchSpec("lenet5", channels=3, image_size=32, num_classes=4)])
def test_the_weight_count_formula_counts_the_built_model(spec):
    assert spec.parameter_count() == num_parameters(build_model(spec))
    assert build_model(spec)(torch.rand(2, *spec.input_shape)).shape == (2, spec.num_classes)


def test_the_model_standardises_its_input_with_the_recorded_statistics():
    torch.manual_seed(0)
    plain = build_model(dataclasses.replace(COLOUR, mean=(), std=()))
    standardised = build_model(COLOUR)
    standardised.load_state_dict(plain.state_dict())
    x = torch.rand(4, 3, 16, 16)
    mean = torch.tensor(COLOUR.mean).reshape(1, 3, 1, 1)
    std = torch.tensor(COLOUR.std).reshape(1, 3, 1, 1)
    torch.testing.assert_close(standardised(x), plain((x - mean) / std))


@pytest.mark.parametrize("bad", [dict(mean=(0.5,), std=(0.2,)), dict(mean=(0.1, 0.2, 0.3), std=(0.2, 0.0, 0.1)),
                                 dict(channels=2), dict(mean=(0.1, 0.2, float("nan")), std=(1.0, 1.0, 1.0))])
def test_a_bad_colour_record_is_refused(bad):
    with pytest.raises(ValueError):
        dataclasses.replace(COLOUR, **bad)


def test_a_colour_posterior_round_trips_through_its_file(tmp_path):
    torch.manual_seed(1)
    model = build_model(COLOUR)
    from core.engine.inference.base import SampledPosterior

    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in model.named_parameters()}
    posterior = SampledPosterior("map", COLOUR, {}, 0, "faces-train", samples, {"class_names": ["a", "b", "c"]})
    loaded = load_posterior(save_posterior(posterior, tmp_path / "p.pt"))
    assert loaded.arch == COLOUR
    x = torch.rand(3, 3, 16, 16)
    torch.testing.assert_close(loaded.predict_proba(x)[0], torch.softmax(model(x), -1))


@pytest.mark.parametrize("method", sorted(set(METHODS) - {"hmc"}))  # HMC's full-batch leapfrog: minutes on CPU
def test_every_method_trains_and_predicts_the_colour_net(method):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(24, 3, 8, 8, generator=g)
    y = (x[:, 0].mean((1, 2)) > x[:, 2].mean((1, 2))).long()
    m = get_method(method)
    config = m.parse_settings({})
    names = {f.name for f in dataclasses.fields(config)}
    small = dict(epochs=1, burn_in_epochs=0, num_members=2, num_chains=2, num_samples=3, swa_epochs=1, rank=2,
                 batch_size=12, predict_samples=3, thin=1)
    config = dataclasses.replace(config, **{k: v for k, v in small.items() if k in names})
    arch = ArchSpec("resnet", num_classes=2, image_size=8, channels=3, drop_rate=0.25 if m.needs_dropout else 0.0,
                    mean=(0.5,) * 3, std=(0.29,) * 3)
    posterior = drain(fit_posterior(m, config, arch, Dataset(x, y, "toy", ("a", "b")), 0))
    p = posterior.predict_proba(x[:5], num_samples=3, generator=torch.Generator().manual_seed(1))
    assert p.shape[1:] == (5, 2) and torch.allclose(p.sum(-1), torch.ones(()))


# ----------------------------------------------------------------------------- import


def _names(tmp_path: Path, names: list[str]) -> Path:
    (tmp_path / "names.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    return tmp_path / "names.txt"


@pytest.mark.parametrize("spec", [ArchSpec("resnet", num_classes=3, image_size=32, channels=3),
                                  ArchSpec("lenet", num_classes=4), ArchSpec("mlp", num_classes=3, hidden=17)])
def test_an_imported_state_dict_predicts_as_the_network_did(tmp_path, spec, capsys):
    torch.manual_seed(2)
    model = build_model(spec)
    torch.save(model.state_dict(), tmp_path / "w.pt")
    names = [f"class {i} é" for i in range(spec.num_classes)]
    args = ["import", "--arch", spec.name, "--weights", str(tmp_path / "w.pt"),
            "--classes", str(_names(tmp_path, names)), "--out", str(tmp_path / "map.pt")]
    assert main(args) == 0
    posterior = load_posterior(tmp_path / "map.pt")
    assert posterior.method == "map" and posterior.arch.channels == spec.channels  # read from the weights
    assert posterior.arch.hidden == spec.hidden if spec.name == "mlp" else True
    assert posterior.info["class_names"] == names
    x = torch.rand(5, *spec.input_shape)
    with torch.no_grad():
        expected = torch.softmax(model(x), -1)  # the network's own forward pass
    torch.testing.assert_close(posterior.predict_proba(x)[0], expected)


def test_laplace_starts_from_an_imported_network_and_predict_names_its_classes(tmp_path, capsys):
    spec = ArchSpec("softmax", num_classes=2, image_size=16, channels=3)
    torch.manual_seed(3)
    torch.save(build_model(spec).state_dict(), tmp_path / "w.pt")
    assert main(["import", "--arch", "softmax", "--weights", str(tmp_path / "w.pt"), "--channels", "3",
                 "--image-size", "16", "--classes", str(_names(tmp_path, ["red", "blue"])),
                 "--mean", "0.5,0.5,0.5", "--std", "0.3,0.3,0.3", "--out", str(tmp_path / "map.pt")]) == 0
    for colour, name in (((220, 20, 20), "red"), ((20, 20, 220), "blue")):
        (tmp_path / "set" / name).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (20 + i, 18), tuple(c + 3 * i for c in colour)).save(tmp_path / "set" / name / f"{i}.png")
    out = tmp_path / "laplace.pt"
    assert main(["train", "--dataset", str(tmp_path / "set"), "--method", "laplace", "--start-from",
                 str(tmp_path / "map.pt"), "--eval-samples", "5", "--out", str(out)]) == 0
    laplace = load_posterior(out)
    assert laplace.method == "laplace" and laplace.arch.mean == (0.5, 0.5, 0.5)
    assert laplace.info["started_from"]["method"] == "map"
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "set" / "red" / "0.png"), "--posterior", str(tmp_path / "map.pt"),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [c["class"] for c in result["classes"]] == ["red", "blue"]


def test_weights_that_do_not_fit_are_refused_in_one_line(tmp_path, capsys):
    torch.save(build_model(ArchSpec("lenet", num_classes=10)).state_dict(), tmp_path / "w.pt")
    names = _names(tmp_path, ["a", "b", "c"])
    assert main(["import", "--arch", "lenet", "--weights", str(tmp_path / "w.pt"), "--classes", str(names),
                 "--out", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: w.pt: classifier.4.weight has shape (10, 500)") and "--classes" in err
    torch.save(build_model(ArchSpec("lenet")), tmp_path / "whole.pt")  # a pickled module, not a state_dict
    assert main(["import", "--arch", "lenet", "--weights", str(tmp_path / "whole.pt"), "--classes", str(names),
                 "--out", str(tmp_path / "m.pt")]) == 2
    assert "not a readable file of weights" in capsys.readouterr().err
    assert main(["import", "--arch", "mlp", "--weights", str(tmp_path / "w.pt"), "--classes", str(names),
                 "--out", str(tmp_path / "m.pt")]) == 2
    assert "is not a mlp state_dict: it lacks" in capsys.readouterr().err
    assert not (tmp_path / "m.pt").exists()


def _batch_norm_twin(spec: ArchSpec, seed: int = 4) -> torch.nn.Module:
    """A ResNet-18 with real batch norms where the folded one has biases, every batch norm with random
    statistics, in inference mode: its state_dict is laid out as torchvision's resnet18's is."""
    from core.engine.models import ChannelBias

    torch.manual_seed(seed)
    model = build_model(spec)
    for name, module in list(model.named_modules()):
        if isinstance(module, ChannelBias):
            norm = torch.nn.BatchNorm2d(module.bias.numel())
            norm.weight.data.uniform_(0.5, 1.5)
            norm.bias.data.normal_(0, 0.2)
            norm.running_mean.normal_(0, 0.3)
            norm.running_var.uniform_(0.5, 2.0)
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, norm)
    return model.eval()


def test_a_resnet18_with_batch_norms_is_imported_folded_and_predicts_as_it_did(tmp_path, capsys):
    spec = ArchSpec("resnet18", num_classes=3, image_size=32, channels=3)
    twin = _batch_norm_twin(spec)
    torch.save(twin.state_dict(), tmp_path / "w.pt")
    assert main(["import", "--arch", "resnet18", "--weights", str(tmp_path / "w.pt"), "--image-size", "32",
                 "--classes", str(_names(tmp_path, ["cat", "dog", "fox"])), "--out", str(tmp_path / "map.pt")]) == 0
    # torchvision's resnet18 has 11,689,512 weights at 1,000 classes; folded, each of the 4,800 batch-norm
    # channels keeps its shift and loses its scale, and the output layer has 3 classes
    assert f"imported a resnet18 of {11_689_512 - 513 * 1000 - 4800 + 513 * 3:,} weights" in capsys.readouterr().out
    posterior = load_posterior(tmp_path / "map.pt")
    assert posterior.arch.name == "resnet18" and posterior.info["imported"]["batch_norms_folded"] == 20
    assert not any("running" in k for k in posterior.samples)  # weights only: the statistics are folded in
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        expected = torch.softmax(twin(x), -1)
    torch.testing.assert_close(posterior.predict_proba(x)[0], expected, atol=1e-5, rtol=1e-4)


def test_torchvision_resnet18_weights_are_imported_and_predict_as_torchvision_does(tmp_path, capsys):
    torchvision = pytest.importorskip("torchvision", reason="torchvision does not import beside this torch")
    twin = _batch_norm_twin(ArchSpec("resnet18", num_classes=2, image_size=64, channels=3))
    network = torchvision.models.resnet18(num_classes=2)
    assert set(network.state_dict()) == set(twin.state_dict())  # the same layout, name for name
    network.load_state_dict(twin.state_dict())
    torch.save(network.eval().state_dict(), tmp_path / "w.pt")
    assert main(["import", "--arch", "resnet18", "--weights", str(tmp_path / "w.pt"), "--image-size", "64",
                 "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225",
                 "--classes", str(_names(tmp_path, ["a", "b"])), "--out", str(tmp_path / "map.pt")]) == 0
    posterior = load_posterior(tmp_path / "map.pt")
    x = torch.rand(3, 3, 64, 64)
    standardised = (x - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)) / torch.tensor(
        [0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = torch.softmax(network(standardised), -1)
    torch.testing.assert_close(posterior.predict_proba(x)[0], expected, atol=1e-5, rtol=1e-4)


def test_laplace_and_swag_start_from_an_imported_resnet18_and_a_photo_is_judged(tmp_path, capsys):
    spec = ArchSpec("resnet18", num_classes=2, image_size=32, channels=3)
    torch.save(_batch_norm_twin(spec).state_dict(), tmp_path / "w.pt")
    assert main(["import", "--arch", "resnet18", "--weights", str(tmp_path / "w.pt"), "--image-size", "32",
                 "--classes", str(_names(tmp_path, ["red", "blue"])), "--out", str(tmp_path / "map.pt")]) == 0
    for colour, name in (((220, 20, 20), "red"), ((20, 20, 220), "blue")):
        (tmp_path / "set" / name).mkdir(parents=True)
        for i in range(5):
            Image.new("RGB", (40, 36), tuple(c + 3 * i for c in colour)).save(tmp_path / "set" / name / f"{i}.png")
    for method, extra in (("laplace", []), ("swag", ["--set", "epochs=1", "--set", "swa_epochs=1", "--set", "rank=2",
                                                     "--set", "batch_size=4"])):
        out = tmp_path / f"{method}.pt"
        assert main(["train", "--dataset", str(tmp_path / "set"), "--method", method, "--start-from",
                     str(tmp_path / "map.pt"), "--eval-samples", "3", *extra, "--out", str(out)]) == 0, method
        posterior = load_posterior(out)
        assert posterior.arch.name == "resnet18" and posterior.info["started_from"]["method"] == "map"
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "set" / "red" / "0.png"), "--posterior", str(tmp_path / "laplace.pt"),
                 "--samples", "4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(c["class"] for c in result["classes"]) == ["blue", "red"] and result["num_samples"] == 4


def test_other_torchvision_networks_and_dropout_on_resnet18_are_refused(tmp_path, capsys):
    torch.save({"fc.weight": torch.zeros(2, 512)}, tmp_path / "w.pt")
    names = str(_names(tmp_path, ["a", "b"]))
    assert main(["import", "--arch", "resnet50", "--weights", str(tmp_path / "w.pt"), "--classes", names,
                 "--out", str(tmp_path / "m.pt")]) == 2
    assert "resnet50 is not built in; of torchvision's networks resnet18 is" in capsys.readouterr().err
    assert main(["import", "--arch", "resnet18", "--weights", str(tmp_path / "w.pt"), "--classes", names,
                 "--drop-rate", "0.5", "--out", str(tmp_path / "m.pt")]) == 2
    assert "ResNet-18 has no dropout layers" in capsys.readouterr().err
    assert main(["import", "--arch", "resnet18", "--weights", str(tmp_path / "w.pt"), "--classes", names,
                 "--out", str(tmp_path / "m.pt")]) == 2
    assert "not a torchvision resnet18 state_dict with its batch norms" in capsys.readouterr().err
    assert not (tmp_path / "m.pt").exists()


def test_class_names_must_be_two_or_more_and_distinct(tmp_path, capsys):
    torch.save(build_model(ArchSpec("softmax", num_classes=2)).state_dict(), tmp_path / "w.pt")
    for names, words in ((["only"], "names 1 class(es)"), (["a", "a"], "more than once (a)")):
        assert main(["import", "--arch", "softmax", "--weights", str(tmp_path / "w.pt"),
                     "--classes", str(_names(tmp_path, names)), "--out", str(tmp_path / "m.pt")]) == 2
        assert words in capsys.readouterr().err


def test_the_rotation_sweep_refuses_a_posterior_of_ones_own_images_and_compare_reads_a_photo(tmp_path, capsys):
    from core.engine.inference.base import SampledPosterior

    arch = ArchSpec("resnet", num_classes=2, image_size=16, channels=3, mean=(0.5,) * 3, std=(0.25,) * 3)
    samples = {k: v.detach().reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    path = save_posterior(SampledPosterior("map", arch, {}, 0, "set-train", samples, {"class_names": ["blue", "red"]}),
                          tmp_path / "p.pt")
    for colour, name in (((220, 20, 20), "red"), ((20, 20, 220), "blue")):
        (tmp_path / "set" / name).mkdir(parents=True)
        for i in range(5):  # distinct shades: byte copies would be left out of the test side
            Image.new("RGB", (16, 16), tuple(c + 3 * i for c in colour)).save(tmp_path / "set" / name / f"{i}.png")
    image = tmp_path / "mark.png"  # a light square on a dark ground: not an empty drawing
    Image.fromarray(np.pad(np.full((8, 8, 3), 230, np.uint8), ((4, 4), (4, 4), (0, 0)))).save(image)
    # compare reads the picture as a photo for it (not as a digit), as predict does
    assert main(["compare", str(image), "--posterior", str(path), "--out", str(tmp_path / "c")]) == 0
    assert "colour" in (tmp_path / "c" / "index.html").read_text()
    assert main(["evaluate", "--posterior", str(path), "--dataset", str(tmp_path / "set"), "--rotate", str(image),
                 "--out", str(tmp_path / "e")]) == 2
    assert "the rotation sweep turns a digit" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_a_network_trained_with_dropout_imports_as_mc_dropout(tmp_path, capsys):
    spec = ArchSpec("resnet", num_classes=2, image_size=16, channels=3, drop_rate=0.3)
    torch.manual_seed(5)
    model = build_model(spec)
    torch.save(model.state_dict(), tmp_path / "w.pt")
    names = str(_names(tmp_path, ["wet", "dry"]))
    args = ["import", "--arch", "resnet", "--weights", str(tmp_path / "w.pt"), "--classes", names,
            "--image-size", "16", "--out", str(tmp_path / "mcd.pt"), "--mc-dropout"]
    assert main(args) == 2  # without its drop rate there is no MC dropout
    assert "give the rate it was trained with (--drop-rate" in capsys.readouterr().err
    assert main([*args, "--drop-rate", "0.3"]) == 0
    assert "as an MC dropout posterior" in capsys.readouterr().out
    posterior = load_posterior(tmp_path / "mcd.pt", expect_method="mc_dropout")
    assert posterior.arch.drop_rate == 0.3 and posterior.info["class_names"] == ["wet", "dry"]
    x = torch.rand(3, 3, 16, 16)
    draws = posterior.predict_proba(x, num_samples=50, generator=torch.Generator().manual_seed(0))
    assert draws.shape == (50, 3, 2) and float(draws.std(0).max()) > 1e-3  # the masks differ between draws
    with torch.no_grad():  # with dropout off it is the network as trained
        torch.testing.assert_close(torch.softmax(model(x), -1), torch.softmax(posterior.model(x), -1))


def test_lenet5_has_lecuns_widths_and_every_hidden_layer_drops():
    from core.engine.models.dropout import split_before_dropout

    # 5×5 convolutions 1→6 and 6→16 (with biases), then 16·4·4 → 120 → 84 → 10
    assert ArchSpec("lenet5").parameter_count() == (25 * 6 + 6) + (150 * 16 + 16) + (256 * 120 + 120) + (
        120 * 84 + 84) + (84 * 10 + 10) == 44_426
    model = build_model(ArchSpec("lenet5", drop_rate=0.5))
    assert sum(isinstance(m, torch.nn.Dropout) for m in model.modules()) == 4  # after each conv block and hidden layer
    shared, rest = split_before_dropout(model)  # MC dropout runs the first block once per input
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(rest(shared(x)), model(x))
