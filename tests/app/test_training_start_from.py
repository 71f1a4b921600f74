"""The training dialog's run from a saved MAP on a folder keeps the MAP's outputs' names (issue 44,
item 4, in the window): the folder's labels are taken to the outputs of the same names."""

from __future__ import annotations

import numpy as np
from PIL import Image

from app.views.training.runs import folder_training_run
from core.commands.main import main
from core.engine.data.folder import load_image_folder
from core.engine.data.idx import read_idx
from core.engine.inference import get_method
from core.engine.runner import drain
from core.engine.store import load_posterior, save_posterior


def test_a_run_from_a_map_whose_outputs_are_in_another_order_keeps_their_names(tmp_path, shared_data):
    x = read_idx(shared_data / "mnist" / "t10k-images-idx3-ubyte.gz")[:600]
    y = read_idx(shared_data / "mnist" / "t10k-labels-idx1-ubyte.gz")[:600]
    root = tmp_path / "d"
    for c in (7, 8):
        (root / str(c)).mkdir(parents=True)
        for i, image in enumerate(x[y == c][:15]):
            Image.fromarray(image).save(root / str(c) / f"{i:03d}.png")
    assert main(["train", "--dataset", str(root), "--method", "map", "--set", "epochs=3", "--set", "batch_size=16",
                 "--out", str(tmp_path / "map.pt")]) == 0
    trained = load_posterior(tmp_path / "map.pt")
    for k in [k for k in trained.samples if trained.samples[k].shape[2] == 2][-2:]:  # last layer: swap the outputs
        trained.samples[k] = trained.samples[k].flip(2)
    trained.info["class_names"] = list(reversed(trained.info["class_names"]))
    save_posterior(trained, tmp_path / "reversed.pt")
    start = load_posterior(tmp_path / "reversed.pt")
    config = get_method("laplace").make_config()
    data = load_image_folder(root, 28, 1)
    path = drain(folder_training_run("laplace", start.arch, config, data, 0, tmp_path / "laplace.pt", start=start))
    laplace = load_posterior(path)
    assert laplace.info["class_names"] == ["8", "7"]
    # the same network on the same test images: the MAP's accuracy, not one minus it (outputs renamed)
    accuracy = load_posterior(tmp_path / "map.pt").info["test_accuracy"]
    assert laplace.info["test_accuracy"] > 0.7 and abs(laplace.info["test_accuracy"] - accuracy) < 0.25
    assert np.isfinite(laplace.info["test_accuracy"])
