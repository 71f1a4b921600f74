"""Networks imported or loaded are checked by their outputs, not only their weights (issue 44,
items 10, 11, 14 and 20's messages): finite weights whose probabilities overflow are refused at
import and at load, and a prediction never names the class of a NaN; a sparse weight is read; a
weight that is a view into a larger storage is saved as itself; a complex weight or a first
convolution of the wrong shape is called what it is.

The networks are LeNets built here and saved with torch.save, as a person's would be.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.analysis.predictive import ProbabilitiesNotFiniteError, predict_input
from core.commands.main import main
from core.engine.import_weights import NetworkImportError, import_network
from core.engine.inference.base import SampledPosterior
from core.engine.models import ArchSpec, build_model
from core.engine.store import OutputsNotFiniteError, load_posterior, save_posterior

NAMES = tuple(str(k) for k in range(10))


def _lenet_state(seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {k: v.clone() for k, v in build_model(ArchSpec("lenet", num_classes=10)).state_dict().items()}


def _save(tmp_path: Path, state: dict[str, torch.Tensor], name: str = "w.pt") -> Path:
    path = tmp_path / name
    torch.save(state, path)
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n")
    return path


def _import(tmp_path: Path, weights: Path, *extra: str) -> int:
    return main(["import", "--arch", "lenet", "--weights", str(weights), "--classes", str(tmp_path / "names.txt"),
                 "--out", str(tmp_path / "map.pt"), *extra])


def _last_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "Error" not in last
    return last


# ----------------------------------------------------------------------------- 10: outputs


def test_an_imported_network_scaled_by_1e30_is_refused_at_import(tmp_path, capsys):
    state = {k: v * 1e30 for k, v in _lenet_state().items()}
    assert all(torch.isfinite(v).all() for v in state.values())  # the weights themselves are finite
    assert _import(tmp_path, _save(tmp_path, state)) == 2
    assert "outputs on a plain grey image are not" in _last_error(capsys)
    assert not (tmp_path / "map.pt").exists()


def test_an_input_standardisation_dividing_by_1e_40_is_refused_at_import(tmp_path, capsys):
    weights = _save(tmp_path, _lenet_state())
    assert _import(tmp_path, weights, "--mean", "0.1", "--std", "1e-40") == 2
    assert "--std that divides by almost zero" in _last_error(capsys)
    assert _import(tmp_path, weights, "--mean", "0.1", "--std", "0.3") == 0  # the same network, sane


def _overflowing_file(tmp_path: Path) -> Path:
    """A MAP posterior file whose finite weights overflow: saved directly, as an old bayescope
    (or any other writer) could have."""
    arch = ArchSpec("lenet", num_classes=10)
    samples = {k: (v * 1e30).reshape(1, 1, *v.shape) for k, v in build_model(arch).named_parameters()}
    posterior = SampledPosterior("map", arch, {}, 0, "big", {k: v.detach() for k, v in samples.items()}, {})
    return save_posterior(posterior, tmp_path / "big.pt")


def test_a_posterior_file_whose_outputs_overflow_is_refused_at_load(tmp_path):
    path = _overflowing_file(tmp_path)
    with pytest.raises(OutputsNotFiniteError, match=r"big.pt: its weights are finite, but its class probabilities "
                                                    r"are not numbers on a plain grey image"):
        load_posterior(path)


def test_predict_and_evaluate_refuse_it_in_one_sentence(tmp_path, capsys, shared_data):
    from PIL import Image

    path = _overflowing_file(tmp_path)
    image = tmp_path / "bar.png"
    picture = Image.new("L", (28, 28), 255)
    picture.paste(0, (12, 4, 16, 24))  # a dark stroke: a digit 1
    picture.save(image)
    assert main(["predict", str(image), "--posterior", str(path)]) == 2
    assert "class probabilities are not numbers" in _last_error(capsys)
    assert main(["evaluate", "--posterior", str(path), "--dataset", "mnist-test", "--data-dir", str(shared_data),
                 "--limit", "20", "--out", str(tmp_path / "ev")]) == 2
    assert "class probabilities are not numbers" in _last_error(capsys)
    assert not (tmp_path / "ev").exists()


def test_a_prediction_never_names_the_class_of_a_nan(tmp_path):
    arch = ArchSpec("lenet", num_classes=10)
    params = {k: v.detach() for k, v in build_model(arch).named_parameters()}
    good = {k: v.reshape(1, 1, *v.shape) for k, v in params.items()}
    bad = {k: (v * 1e30).reshape(1, 1, *v.shape) for k, v in params.items()}
    both = {k: torch.cat([good[k], bad[k]], dim=1) for k in params}  # one sane draw, one that overflows
    posterior = SampledPosterior("sghmc", arch, {}, 0, "mixed", both, {})
    with pytest.raises(ProbabilitiesNotFiniteError, match=r"not numbers in 1 of its 2 samples"):
        predict_input(posterior, torch.full((1, 1, 28, 28), 0.5), seed=0)
    sane = SampledPosterior("sghmc", arch, {}, 0, "sane", good, {})
    assert predict_input(sane, torch.full((1, 1, 28, 28), 0.5), seed=0).summary.predicted_class in range(10)


# ----------------------------------------------------------------------------- 11, 14: sparse, views


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_a_sparse_weight_is_read_as_its_dense_values(tmp_path, capsys):
    state = _lenet_state()
    dense = import_network("lenet", _save(tmp_path, state, "dense.pt"), NAMES)
    pruned = dict(state)
    pruned["features.0.weight"] = state["features.0.weight"].to_sparse()
    pruned["classifier.1.weight"] = state["classifier.1.weight"].to_sparse_csr()
    assert _import(tmp_path, _save(tmp_path, pruned, "sparse.pt")) == 0
    loaded = load_posterior(tmp_path / "map.pt")
    for name, tensor in dense.samples.items():
        assert torch.equal(loaded.samples[name], tensor), name


def test_weights_that_are_views_into_one_large_storage_are_saved_as_themselves(tmp_path):
    state = _lenet_state()
    buffer = torch.zeros(5_000_000)  # 20 MB, the weights 1.7 MB of it
    at, views = 0, {}
    for name, tensor in state.items():
        views[name] = buffer[at:at + tensor.numel()].view(tensor.shape)
        views[name].copy_(tensor)
        at += tensor.numel()
    weights = _save(tmp_path, views)
    assert weights.stat().st_size > 19e6  # torch.save writes the whole storage of the views
    path = save_posterior(import_network("lenet", weights, NAMES), tmp_path / "map.pt")
    weight_bytes = 4 * sum(t.numel() for t in state.values())
    assert path.stat().st_size < weight_bytes + 200_000
    loaded = load_posterior(path)
    assert all(torch.equal(loaded.samples[k][0, 0], state[k]) for k in state)


# ----------------------------------------------------------------------------- 20: words


def test_complex_weights_are_called_complex_not_infinite(tmp_path, capsys):
    state = _lenet_state()
    state["features.0.weight"] = state["features.0.weight"].to(torch.complex64)
    assert _import(tmp_path, _save(tmp_path, state)) == 2
    err = _last_error(capsys)
    assert "features.0.weight holds complex numbers" in err and "finite" not in err


def test_integer_weights_are_called_integers(tmp_path):
    state = _lenet_state()
    state["classifier.4.bias"] = torch.zeros(10, dtype=torch.int64)
    with pytest.raises(NetworkImportError, match=r"classifier.4.bias holds int64 values, not floating-point"):
        import_network("lenet", _save(tmp_path, state), NAMES)


def test_a_first_convolution_of_the_wrong_shape_is_named_with_its_shape(tmp_path, capsys):
    state = _lenet_state()
    state["features.0.weight"] = state["features.0.weight"].transpose(0, 1).contiguous()  # (1, 20, 5, 5)
    assert _import(tmp_path, _save(tmp_path, state)) == 2
    err = _last_error(capsys)
    assert "features.0.weight, the first convolution, has shape (1, 20, 5, 5)" in err
    assert "got 20" not in err


def test_a_later_convolution_first_in_the_file_does_not_set_the_channels(tmp_path):
    state = _lenet_state()
    reordered = {"features.4.weight": state["features.4.weight"], **state}  # (50, 20, 5, 5) comes first
    posterior = import_network("lenet", _save(tmp_path, reordered), NAMES)
    assert posterior.arch.channels == 1


def test_evaluate_says_each_posterior_reads_not_the_posteriors_has(tmp_path, capsys, shared_data):
    torch.manual_seed(0)
    arch = ArchSpec("resnet", num_classes=10, channels=3, image_size=32)
    weights = _save(tmp_path, dict(build_model(arch).named_parameters()))
    save_posterior(import_network("resnet", weights, NAMES), tmp_path / "colour.pt")
    assert main(["evaluate", "--posterior", str(tmp_path / "colour.pt"), "--dataset", "mnist-test", "--data-dir",
                 str(shared_data), "--limit", "5", "--out", str(tmp_path / "ev")]) == 2
    err = _last_error(capsys)
    assert "has images of shape (1, 28, 28); each posterior reads (3, 32, 32)" in err and "posteriors" not in err


def test_any_posterior_whose_weights_are_views_is_saved_at_the_weights_size(tmp_path):
    """The writer itself (not only import) copies a view out of its larger storage."""
    state = _lenet_state()
    posterior = import_network("lenet", _save(tmp_path, state), NAMES)
    buffer = torch.zeros(5_000_000)  # 20 MB behind weights of 1.7 MB
    at = 0
    for name, tensor in posterior.samples.items():
        view = buffer[at:at + tensor.numel()].view(tensor.shape)
        view.copy_(tensor)
        posterior.samples[name] = view
        at += tensor.numel()
    path = save_posterior(posterior, tmp_path / "views.pt")
    assert path.stat().st_size < 4 * sum(t.numel() for t in state.values()) + 200_000
    loaded = load_posterior(path)
    assert all(torch.equal(loaded.samples[k][0, 0], state[k]) for k in state)


def test_the_evaluation_loop_refuses_probabilities_that_are_not_numbers(tmp_path):
    """The load probe sees a grey image and noise; an image whose outputs overflow is refused by
    the evaluation loop itself, in a sentence naming the images, never scored (argmax of NaN)."""
    from core.analysis.streaming import predict_dataset
    from core.engine.inference.base import Dataset
    from core.engine.runner import drain

    posterior = import_network("lenet", _save(tmp_path, _lenet_state()), NAMES)
    x = torch.rand(6, 1, 28, 28)
    x[4] = float("inf")  # one image whose outputs are not numbers
    data = Dataset(x, torch.zeros(6, dtype=torch.long), "odd", NAMES, {})
    with pytest.raises(ProbabilitiesNotFiniteError, match=r"not numbers for 1 of the images 1 to 6 of odd"):
        drain(predict_dataset(posterior, data))
