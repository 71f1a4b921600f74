"""``bayescope --self-test``: check that this copy of bayescope works, in plain words.

Runs the same way from the source tree and from the packaged app (the resources are found
through :func:`core.engine.resources.resources_dir`, which follows the ``resources`` package):

1. every bundled posterior loads;
2. each of them reads every bundled example digit (``resources/examples/digit-<class>.png``)
   as that class, with finite probabilities that sum to one;
3. the face descriptor describes a face-sized patch, every bundled face head reads it, and two
   worker processes extract the descriptors of two pictures (the path the Dataset tab's face
   sets take: a packaged build whose worker processes cannot start fails here);
4. the main window opens, shows, handles its first events and closes (offscreen when there
   is no display), with no error raised inside Qt's event loop. It reads and writes its
   settings in a temporary file: the person's window size and columns are left alone.

One line per check, ``ok   ...`` or ``FAIL ...`` followed by the reason; exit status 1 if any
check failed. No network and no user files are needed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

#: How long the window gets to handle its first events (first prediction, layout, paint).
WINDOW_SETTLE_SECONDS = 1.0


class CheckFailed(Exception):
    """A check found something wrong; the message is for a person."""


def _say(line: str) -> None:
    print(line, flush=True)


def _check(results: list[bool], label: str, check: Callable[[], str | None]) -> object:
    """Run one check, print its line, remember whether it passed."""
    start = time.perf_counter()
    try:
        detail = check()
    except CheckFailed as exc:
        _say(f"FAIL {label}: {exc}")
        results.append(False)
        return None
    except Exception as exc:  # a self-test reports every failure instead of stopping
        reason = f"{exc.__class__.__name__}: {exc}".strip().splitlines()[0]
        _say(f"FAIL {label}: {reason}")
        if os.environ.get("BAYESCOPE_SELFTEST_TRACEBACK"):
            traceback.print_exc()
        results.append(False)
        return None
    seconds = time.perf_counter() - start
    extra = f" ({detail}; {seconds:.2f} s)" if detail else f" ({seconds:.2f} s)"
    _say(f"ok   {label}{extra}")
    results.append(True)
    return detail


def example_digits() -> list[tuple[Path, int]]:
    """The bundled example inputs and the class each shows (from the file name)."""
    from core.engine.resources import resources_dir

    found = []
    for path in sorted((resources_dir() / "examples").glob("digit-*.png")):
        label = path.stem.rsplit("-", 1)[-1]
        if label.isdigit():
            found.append((path, int(label)))
    return found


def _environment_line() -> str:
    import numpy
    import torch

    from core.engine.resources import resources_dir

    frozen = "packaged app" if getattr(sys, "frozen", False) else "source tree"
    try:
        from PySide6 import __version__ as pyside_version
    except ImportError:  # reported by the window check
        pyside_version = "missing"
    return (f"bayescope self-test: {frozen}, Python {sys.version.split()[0]}, torch {torch.__version__}, "
            f"NumPy {numpy.__version__}, PySide6 {pyside_version}; resources in {resources_dir()}")


def check_posteriors(results: list[bool]) -> None:
    import torch

    from core.analysis.predictive import predict_image
    from core.engine.data.preprocess import load_image
    from core.engine.naming import ARCH_LABELS, method_label, plural
    from core.engine.resources import bundled_posteriors
    from core.engine.store import load_posterior

    paths = bundled_posteriors()
    if not paths:
        _check(results, "find bundled posteriors", lambda: _fail("no posterior files in the resources folder"))
        return
    examples = example_digits()
    if not examples:
        _check(results, "find example digits", lambda: _fail("no digit-<class>.png files in resources/examples"))
    images = [(path, label, load_image(path)) for path, label in examples]

    for path in paths:
        start = time.perf_counter()
        try:
            posterior = load_posterior(path)
        except Exception as exc:
            _say(f"FAIL load posterior: {path.name}: {exc}")
            results.append(False)
            continue
        name = f"{method_label(posterior.method)}, {ARCH_LABELS.get(posterior.arch.name, posterior.arch.name)}"
        _say(f"ok   load posterior: {name} ({path.name}; {time.perf_counter() - start:.2f} s)")
        results.append(True)

        def predict(posterior=posterior) -> str:
            read = []
            for image_path, label, image in images:
                prediction = predict_image(posterior, image, num_samples=None, seed=0)
                samples = prediction.samples
                if samples.ndim != 2 or samples.shape[1] != posterior.num_classes:
                    raise CheckFailed(f"{image_path.name}: samples of shape {tuple(samples.shape)}")
                if not torch.isfinite(samples).all():
                    raise CheckFailed(f"{image_path.name}: probabilities that are not finite numbers")
                if not torch.allclose(samples.sum(dim=1), torch.ones(samples.shape[0]), atol=1e-4):
                    raise CheckFailed(f"{image_path.name}: probabilities that do not sum to one")
                guess = prediction.summary.predicted_class
                confidence = float(prediction.summary.mean[guess])
                if guess != label:
                    raise CheckFailed(f"{image_path.name} read as {guess} (mean probability {confidence:.2f}), expected {label}")
                read.append(f"{label} as {guess} ({confidence:.2f})")
            return f"{plural(len(samples), 'sample')}; " + ", ".join(read)

        _check(results, f"predict example digits: {name}", predict)


def check_faces(results: list[bool]) -> None:
    """The face descriptor's models load and describe a face-sized patch; every bundled face
    head reads that descriptor and gives eight finite age-group probabilities summing to one."""
    import numpy as np

    from core.engine.resources import bundled_face_posteriors

    described: dict[str, object] = {}

    def describe() -> str:
        from core.engine.faces import FaceBox, align_and_describe, descriptor_info

        rng = np.random.default_rng(0)
        image = rng.integers(0, 256, (200, 200, 3), dtype=np.uint8)  # no face needed to run the network
        chip, descriptor = align_and_describe(image, FaceBox(40, 40, 160, 160))
        if descriptor.ndim != 1 or not np.isfinite(descriptor).all():
            _fail(f"the descriptor has shape {descriptor.shape} or non-finite values")
        described.update(info=descriptor_info(), descriptor=descriptor)
        return f"{described['info'].name}, {descriptor.shape[0]} numbers"

    _check(results, "describe a face with the bundled face models", describe)
    if not described:
        return
    for path in bundled_face_posteriors():
        def predict(path=path) -> str:
            from core.engine.faces.heads import predict_age
            from core.engine.naming import method_label
            from core.engine.store import load_posterior

            posterior = load_posterior(path)
            p = predict_age(posterior, described["descriptor"], described["info"], num_samples=8)
            if p.shape[-1] != 8 or not bool(np.isfinite(p.numpy()).all()) or not np.allclose(p.sum(-1).numpy(), 1, atol=1e-4):
                _fail(f"age-group probabilities of shape {tuple(p.shape)} are not valid")
            return method_label(posterior.method)

        _check(results, f"face head {path.stem}", predict)


class GeneratedPictures:
    """Pictures of noise for the worker processes to describe (an image source of
    :func:`core.engine.faces.extract.extract_descriptors`): no face is needed to run them,
    the assumed box is described."""

    def __init__(self, count: int) -> None:
        import numpy as np
        from PIL import Image

        rng = np.random.default_rng(0)
        self.blobs: list[bytes] = []
        for _ in range(count):
            buffer = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (160, 160, 3), dtype=np.uint8)).save(buffer, format="PNG")
            self.blobs.append(buffer.getvalue())
        self.names = tuple(f"picture-{i}.png" for i in range(count))
        self.key = hashlib.sha256(b"".join(self.blobs)).hexdigest()[:16]

    def read(self, wanted: set[int]):
        for i in sorted(wanted):
            yield i, self.blobs[i]

    def describe(self) -> str:
        return "the self-test's generated pictures"


#: Worker processes (and pictures, one chunk each) of the multi-process extraction check.
EXTRACTION_WORKERS = 2


def check_face_workers(results: list[bool]) -> None:
    """Two worker processes describe two pictures, as the Dataset tab's face sets are described."""

    def extract() -> str:
        import numpy as np

        from core.engine.faces.extract import extract_descriptors
        from core.engine.runner import drain

        source = GeneratedPictures(EXTRACTION_WORKERS)
        with tempfile.TemporaryDirectory(prefix="bayescope-self-test-") as root:
            table = drain(extract_descriptors(source, root=Path(root), workers=EXTRACTION_WORKERS, chunk_size=1,
                                              assumed_box=(0.1, 0.1, 0.9, 0.9)))
        if table.computed != len(source.names) or not np.isfinite(table.descriptors).all():
            _fail(f"the workers described {int(table.usable().sum())} of {len(source.names)} pictures")
        return f"{EXTRACTION_WORKERS} worker processes, {len(source.names)} pictures"

    _check(results, "extract face descriptors in worker processes", extract)


def _fail(message: str) -> None:
    raise CheckFailed(message)


def check_window(results: list[bool]) -> None:
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    def open_and_close() -> str:
        from PySide6.QtCore import QCoreApplication, QEventLoop
        from PySide6.QtWidgets import QApplication

        from app.settings import separate_settings

        app = QApplication.instance() or QApplication(["bayescope"])
        errors: list[str] = []
        previous_hook = sys.excepthook

        # Qt calls Python slots from its event loop; an exception there only reaches excepthook.
        def record(kind, value, tb) -> None:
            errors.append(f"{kind.__name__}: {value}".splitlines()[0])

        sys.excepthook = record
        with contextlib.ExitStack() as stack:
            # The window's settings go to a file of its own: never the person's.
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bayescope-self-test-"))
            stack.enter_context(separate_settings(Path(folder) / "bayescope.ini"))
            stack.callback(setattr, sys, "excepthook", previous_hook)
            from app.main import MainWindow

            window = MainWindow()
            window.show()
            deadline = time.perf_counter() + WINDOW_SETTLE_SECONDS
            while time.perf_counter() < deadline:
                app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
                time.sleep(0.01)
            if not window.isVisible():
                raise CheckFailed("the window did not stay open")
            size = f"{window.width()}×{window.height()}"
            if not window.close():
                raise CheckFailed("the window refused to close")
            for _ in range(20):
                app.processEvents()
            window.deleteLater()
            QCoreApplication.sendPostedEvents(None, 0)
            app.processEvents()
        if errors:
            raise CheckFailed("error inside the window: " + errors[0])
        return f"{app.platformName()} platform, {size}"

    _check(results, "open and close the main window", open_and_close)


def run_self_test() -> int:
    """Run every check; return 0 if all passed, else 1."""
    results: list[bool] = []
    try:
        _say(_environment_line())
    except Exception as exc:  # torch or NumPy missing: say so and stop
        _say(f"FAIL import the engine: {exc.__class__.__name__}: {exc}")
        return 1
    check_posteriors(results)
    check_faces(results)
    check_face_workers(results)
    check_window(results)
    failed = results.count(False)
    if failed:
        _say(f"self-test FAILED: {failed} of {len(results)} checks failed")
        return 1
    _say(f"self-test passed: {len(results)} checks")
    return 0
