"""The worker wrappers and the training dialog: progress, cancel, error path."""

from __future__ import annotations

import numpy as np
import pytest

from app.views.training import TrainingDialog
from app.workers import ComputationError, function_worker, generator_worker
from core.data.idx import write_idx
from core.inference.base import ProgressRecord


def counting(n, fail_at=None):
    for i in range(n):
        if i == fail_at:
            raise RuntimeError(f"boom at step {i}")
        yield ProgressRecord(i + 1, n, {"loss": 1.0 / (i + 1)})
    return "done"


def test_generator_worker_reports_progress_and_result(qtbot):
    worker = generator_worker(counting(5))
    seen = []
    worker.yielded.connect(lambda r: seen.append(r.step))
    with qtbot.waitSignal(worker.returned, timeout=5000) as result:
        worker.start()
    assert result.args == ["done"] and seen == [1, 2, 3, 4, 5]


def test_runtime_error_reaches_errored(qtbot):
    # superqt alone would turn a RuntimeError into a warning; the wrapper must not.
    worker = generator_worker(counting(5, fail_at=2))
    with qtbot.waitSignal(worker.errored, timeout=5000) as error:
        worker.start()
    assert isinstance(error.args[0], ComputationError) and "boom at step 2" in str(error.args[0])


def test_function_worker_error(qtbot):
    def fail():
        raise ValueError("bad input")

    worker = function_worker(fail)
    with qtbot.waitSignal(worker.errored, timeout=5000) as error:
        worker.start()
    assert isinstance(error.args[0], ValueError)


def test_cancel_stops_between_steps_and_closes_the_generator(qtbot):
    closed = []

    def endless():
        try:
            i = 0
            while True:
                i += 1
                yield ProgressRecord(i, 0)
        finally:
            closed.append(True)

    gen = endless()
    worker = generator_worker(gen)
    worker.yielded.connect(lambda r: r.step == 3 and worker.quit())
    with qtbot.waitSignal(worker.aborted, timeout=5000):
        worker.start()
    qtbot.waitSignal(worker.finished, timeout=5000)
    gen.close()
    assert closed == [True]


@pytest.fixture
def tiny_mnist(tmp_path):
    """A 200-image MNIST-layout folder: class 0 bright on the left, class 1 on the right."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200).astype(np.uint8)
    x = rng.integers(0, 60, (200, 28, 28)).astype(np.uint8)
    x[y == 0, :, :14] += 150
    x[y == 1, :, 14:] += 150
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", x)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", y)
    return tmp_path


def test_training_dialog_trains_and_saves(qtbot, tiny_mnist):
    dialog = TrainingDialog()
    qtbot.addWidget(dialog)
    dialog.data_dir.setText(str(tiny_mnist))
    dialog.method.setCurrentText("map")
    dialog.model.setCurrentText("softmax")
    dialog.set_setting("epochs", 3)
    dialog.name.setText("tiny map")
    with qtbot.waitSignal(dialog.posterior_saved, timeout=30_000) as saved:
        dialog.start()
    assert saved.args[0].name == "tiny_map.pt" and saved.args[0].is_file()
    assert len(dialog._trace_y) >= 1 and dialog.progress.maximum() == 1
    qtbot.waitUntil(lambda: not dialog.running)


def test_training_dialog_cancel_saves_nothing(qtbot, tiny_mnist):
    dialog = TrainingDialog()
    qtbot.addWidget(dialog)
    dialog.data_dir.setText(str(tiny_mnist))
    dialog.method.setCurrentText("map")
    dialog.model.setCurrentText("softmax")
    dialog.set_setting("epochs", 1000)
    dialog.name.setText("cancelled")
    saved = []
    dialog.posterior_saved.connect(saved.append)

    def cancel_when_running(record):
        if record.step > 0:
            dialog.cancel()

    dialog.start()
    dialog._worker.yielded.connect(cancel_when_running)
    qtbot.waitUntil(lambda: not dialog.running, timeout=30_000)
    assert saved == [] and "Cancelled" in dialog.status.text()


def test_training_dialog_error_path(qtbot, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr("app.views.training.QMessageBox.critical", lambda *a: shown.append(a[2]))
    dialog = TrainingDialog()
    qtbot.addWidget(dialog)
    dialog.data_dir.setText(str(tmp_path / "empty"))
    dialog.download.setChecked(False)
    dialog.start()
    qtbot.waitUntil(lambda: not dialog.running, timeout=10_000)
    assert shown and "train-images-idx3-ubyte" in shown[0]


def test_settings_form_follows_the_method_and_rejects_bad_values(qtbot, monkeypatch):
    shown = []
    monkeypatch.setattr("app.views.training.QMessageBox.warning", lambda *a: shown.append(a[2]))
    dialog = TrainingDialog()
    qtbot.addWidget(dialog)
    dialog.method.setCurrentText("sghmc")
    assert {"step_size", "friction", "burn_in_epochs", "num_chains"} <= set(dialog.setting_edits)
    dialog.set_setting("friction", "sticky")
    dialog.start()
    assert not dialog.running and "friction='sticky' is not a valid float" in shown[0]
    dialog.method.setCurrentText("map")
    assert "friction" not in dialog.setting_edits and "prior_std" in dialog.setting_edits


@pytest.mark.parametrize(
    ("method", "settings", "trace"),
    [
        ("sghmc", {"num_chains": 2, "epochs": 2, "burn_in_epochs": 1, "thin": 1, "step_size": 1e-4}, "log_posterior"),
        ("mfvi", {"epochs": 2}, "elbo"),
    ],
)
def test_training_dialog_runs_samplers_and_vi_with_their_trace(qtbot, tiny_mnist, method, settings, trace):
    from core.io import load_posterior

    dialog = TrainingDialog()
    qtbot.addWidget(dialog)
    dialog.data_dir.setText(str(tiny_mnist))
    dialog.method.setCurrentText(method)
    dialog.model.setCurrentText("softmax")
    dialog.drop_rate.setValue(0.0)
    for key, value in settings.items():
        dialog.set_setting(key, value)
    dialog.name.setText(f"tiny {method}")
    with qtbot.waitSignal(dialog.posterior_saved, timeout=60_000) as saved:
        dialog.start()
    qtbot.waitUntil(lambda: not dialog.running)
    assert dialog.trace.getPlotItem().getAxis("left").labelText == trace
    assert len(dialog._trace_y) >= 1
    assert load_posterior(saved.args[0]).method == method
