"""A posterior file's records read without torch equal those of the posterior loaded with it."""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from core.engine import naming
from core.engine.resources import resources_dir
from core.engine.store import load_posterior, save_posterior
from core.engine.store_records import RecordsUnreadable, read_records

BUNDLED = sorted((resources_dir() / "models").glob("*.pt"))
ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_is_bundled():
    """The comparison below covers every kind the records describe."""
    kinds = {read_records(path).kind for path in BUNDLED}
    assert kinds == {"sampled", "input_dropout", "dropout", "variational", "laplace"}


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
def test_the_records_say_what_the_loaded_posterior_says(path):
    records, posterior = read_records(path), load_posterior(path)
    assert (records.kind, records.method, records.config, records.seed, records.dataset, records.info) == (
        posterior.kind, posterior.method, posterior.config, posterior.seed, posterior.dataset, posterior.info)
    assert records.arch.fields == posterior.arch.to_dict()
    assert records.num_classes == posterior.num_classes
    assert records.fixed_num_samples == posterior.fixed_num_samples
    for fact in ("num_chains", "num_draws"):
        assert getattr(records, fact, None) == getattr(posterior, fact, None)
    assert records.shapes == {k: tuple(v.shape) for k, v in posterior.state_tensors().items()}
    # the column's words, as its header shows them before and after the weights are in
    for requested in (1, 16, 100, 5000):
        assert naming.posterior_title(records, naming.samples_used(records, requested)) == naming.posterior_title(
            posterior, naming.samples_used(posterior, requested))
    assert naming.convergence_lines(records) == naming.convergence_lines(posterior)
    assert naming.fit_lines(records.method, records.info, records.config) == naming.fit_lines(
        posterior.method, posterior.info, posterior.config)
    assert not records.ready and not hasattr(records, "predict_proba")


def test_records_of_the_default_columns_are_read_without_torch():
    """In a fresh interpreter: the records, the titles and their words, and torch never imported."""
    script = (
        "import sys\n"
        "from app.settings import default_columns\n"
        "from core.engine.naming import METHOD_DESCRIPTIONS, convergence_lines, posterior_title\n"
        "from core.engine.store_records import read_records\n"
        "paths = default_columns()\n"
        "records = [read_records(p) for p in paths]\n"
        "titles = [posterior_title(r, 100) for r in records]\n"
        "words = [METHOD_DESCRIPTIONS[r.method] + ' '.join(convergence_lines(r)) for r in records]\n"
        "print(len(paths), 'torch' in sys.modules, titles[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    count, torch_imported, title = out.stdout.strip().split(" ", 2)
    assert int(count) >= 4 and torch_imported == "False" and title.startswith("HMC, softmax regression")


def _archive(tmp_path: Path, payload: bytes) -> Path:
    path = tmp_path / "x.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
    return path


class Boom:
    def __reduce__(self):
        return (print, ("executed",))


def test_a_pickle_naming_anything_else_is_refused_unexecuted(tmp_path, capsys):
    path = _archive(tmp_path, pickle.dumps({"format": "bayescope-posterior", "x": Boom()}))
    with pytest.raises(RecordsUnreadable):
        read_records(path)
    assert "executed" not in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"", b"not a zip at all", b"PK\x03\x04 broken"])
def test_a_damaged_or_foreign_file_is_left_to_the_engine(tmp_path, content):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(RecordsUnreadable):
        read_records(path)
    with pytest.raises(RecordsUnreadable):
        read_records(_archive(tmp_path, pickle.dumps({"format": "something else"})))
    with pytest.raises(RecordsUnreadable):
        read_records(tmp_path / "gone.pt")


def test_a_file_of_another_version_or_a_laplace_without_its_predictive_is_left_to_the_engine(tmp_path):
    source = next(p for p in BUNDLED if read_records(p).kind == "laplace")
    posterior = load_posterior(source)
    posterior.config = {k: v for k, v in posterior.config.items() if k != "predictive"}
    saved = save_posterior(posterior, tmp_path / "laplace.pt")
    with pytest.raises(RecordsUnreadable, match="told by its weights"):
        read_records(saved)
    buffer = io.BytesIO()
    pickle.dump({"format": "bayescope-posterior", "format_version": 1}, buffer)
    with pytest.raises(RecordsUnreadable, match="version-2"):
        read_records(_archive(tmp_path, buffer.getvalue()))
