"""Cut the bundled sample sets from the full data sets, so that every tab works offline.

Regenerate with (from the checkout, the data folder beside it)::

    python resources/samples/make_samples.py ../shared/data

It writes, in MNIST's IDX layout (gzip, no time stamp, so the same input gives the same bytes):

- ``mnist/t10k-{images-idx3,labels-idx1}-ubyte.gz``: the first :data:`COUNT` MNIST test digits,
  in the official order (``t10k-*`` of http://yann.lecun.com/exdb/mnist/, checked against
  their published SHA-256 when read);
- ``notmnist/t10k-{images-idx3,labels-idx1}-ubyte.gz``: the first :data:`COUNT` notMNIST letters
  A–J of the data folder's notMNIST test sample (label 0..9 = letter A..J).

The licences are in ``LICENSE.md`` beside this script.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np

#: Images per sample set: enough for accuracy to ±1.5 % and a reliability diagram, small to ship.
COUNT = 1000
HERE = Path(__file__).resolve().parent


def _write(path: Path, array: np.ndarray) -> None:
    """``array`` (uint8) as a gzip IDX file with a fixed header time (reproducible bytes)."""
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes(), compresslevel=9, mtime=0))


def make(data_folder: Path, out: Path = HERE, count: int = COUNT) -> list[Path]:
    """Write both sample sets under ``out`` from ``data_folder`` (``mnist/``, ``notmnist/``)."""
    sys.path.insert(0, str(HERE.parents[1]))
    from core.engine.data.idx import read_idx

    written = []
    for name in ("mnist", "notmnist"):
        for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
            array = read_idx(data_folder / name / f"{stem}.gz")[:count]
            target = out / name / f"{stem}.gz"
            _write(target, array)
            written.append(target)
    return written


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else HERE.parents[1].parent / "shared" / "data")
    for path in make(folder):
        print(path, path.stat().st_size, "bytes")
