from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist's workers (scripts/test.sh runs two on CI's two cores): one torch thread each,
    # set before torch is imported, and inherited by the fresh interpreters tests start. Two
    # threads per worker oversubscribe the cores, and torch's threads then wait on each other.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The development copies of the data sets (../shared/data beside the checkout)."""
    if not (SHARED_DATA / "mnist").is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_ray_at_a_time():
    """The module's Ray clusters alone on this machine: under pytest-xdist's two workers (or
    beside another checkout's suite) a second module's clusters wait for them. A local Ray looks
    for a running cluster to join, and two at once crowd two cores past their health checks.
    (A lock file, not xdist's groups: ``--dist loadgroup`` ignores them under pytest 9.2,
    pytest-xdist issue 1386.)"""
    import tempfile

    try:
        import fcntl
    except ImportError:  # Windows: one suite at a time there
        yield
        return
    with open(Path(tempfile.gettempdir()) / "bayescope-tests-ray.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _two_halves(n: int, rng) -> tuple:
    """Two classes a model learns in a few steps: class 0 bright on the left half, 1 on the right."""
    import numpy as np

    y = rng.integers(0, 2, n).astype(np.uint8)
    x = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
    x[y == 0, :, :14] += 150
    x[y == 1, :, 14:] += 150
    return x, y


@pytest.fixture
def tiny_mnist(tmp_path) -> Path:
    """An MNIST-layout folder of two-halves digits: 300 training and 100 test images."""
    import numpy as np

    from core.engine.data.idx import write_idx

    rng = np.random.default_rng(0)
    folder = tmp_path / "mnist"
    folder.mkdir()
    for split, n in (("train", 300), ("t10k", 100)):
        x, y = _two_halves(n, rng)
        write_idx(folder / f"{split}-images-idx3-ubyte.gz", x)
        write_idx(folder / f"{split}-labels-idx1-ubyte.gz", y)
    return folder


@pytest.fixture
def two_halves():
    """The same two classes as a training set in memory (256 images, floats in [0, 1])."""
    import numpy as np
    import torch

    from core.engine.inference.base import Dataset

    x, y = _two_halves(256, np.random.default_rng(1))
    return Dataset(torch.from_numpy(x).float().div(255).unsqueeze(1), torch.from_numpy(y).long(), "two-halves",
                   class_names=("left", "right"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a module (samplers' exact-equality tests, timing-free)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def toy_data(n: int = 60, seed: int = 0, side: int = 4):
    """A two-class toy set of n side×side images: is the first half of the pixels brighter?"""
    import torch

    from core.engine.inference.base import Dataset

    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, side, side, generator=g)
    half = side * side // 2
    y = (x.flatten(1)[:, :half].sum(1) > x.flatten(1)[:, half:].sum(1)).long()
    return Dataset(x, y, "toy")


def pretend_cuda(monkeypatch, count: int) -> None:
    """torch as it is on a CUDA build with ``count`` GPUs (the calls the device choice makes)."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA Test GPU")


def grey_shapes(root: Path, classes: tuple[str, ...] = ("bar", "column", "square"), per_class: int = 12,
                seed: int = 0) -> Path:
    """A folder of 16×16 grey images, one class per subfolder, told apart by a bright shape: a
    bar (rows 6-9), a column (columns 6-9) or a square (the middle 8×8). Each file is distinct
    (seeded noise), since a test image whose bytes are a training image's is left out of the test side."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 60, (16, 16))
            if name == "bar":
                pixels[6:10, :] += 180
            elif name == "column":
                pixels[:, 6:10] += 180
            else:
                pixels[4:12, 4:12] += 150
            Image.fromarray(pixels.astype(np.uint8), "L").save(root / name / f"{i}.png")
    return root


def train_at_eight(folder: Path) -> Path:
    """A MAP softmax regression that ``bayescope-cli train`` fits on ``folder`` read at 8×8, saved beside it."""
    from core.commands.main import main

    out = folder.parent / f"{folder.name}-8.pt"
    assert main(["train", "--dataset", str(folder), "--image-size", "8", "--model", "softmax", "--method", "map",
                 "--set", "epochs=20", "--seed", "0", "--out", str(out)]) == 0
    return out
