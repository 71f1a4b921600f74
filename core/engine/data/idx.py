"""Reader for the IDX format of MNIST-style data sets (plain or gzip-compressed).

Layout: two zero bytes, a type code, the number of dimensions d, then d big-endian uint32
sizes, then the data in C order, big-endian. Any deviation raises :class:`IdxFormatError`
naming the file and what is wrong.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.engine.files import file_sha256
from core.engine.memory import check_fits

_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


class IdxFormatError(ValueError):
    """An IDX file that is corrupt, truncated or not IDX at all."""


@dataclass(frozen=True)
class IdxFile:
    """An IDX file's array and its checksums.

    ``sha256`` is that of the file as stored (what ``sha256sum`` prints); ``content_sha256``
    that of the uncompressed IDX bytes, which is the same for a gzip and a plain copy and
    identifies the data (e.g. the official MNIST files).
    """

    path: Path
    array: np.ndarray
    sha256: str
    content_sha256: str


#: Bytes of float32 a loaded IDX byte turns into, plus the raw copy: what the loaders hold.
MEMORY_FACTOR = 6


def _header_size(head: bytes, name: str) -> int:
    if len(head) < 4:
        raise IdxFormatError(f"{name}: too short to be an IDX file ({len(head)} bytes)")
    return 4 + 4 * head[3]


def _declared_bytes(head: bytes, name: str) -> int | None:
    """Data bytes the header declares, or None when the header itself is malformed."""
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _TYPES or head[3] == 0:
        return None
    ndim = head[3]
    if len(head) < 4 + 4 * ndim:
        return None
    shape = [int.from_bytes(head[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return math.prod(shape) * _TYPES[head[2]].itemsize


def _check_memory(declared: int, name: str) -> None:
    check_fits(
        declared * MEMORY_FACTOR,
        f"reading {name} ({declared:,} bytes of data)",
        "the file's header is probably damaged, or the data set is too large for this computer",
    )


def _read_bytes(path: Path) -> tuple[bytes, bool]:
    """The uncompressed IDX bytes of a file, checked against its header before allocation,
    and whether the file is gzip-compressed.

    A plain file's header is compared with the file's real size first (a header that lies
    about a sparse 20 GB file is refused before a byte of data is read), then the declared
    size is checked against the free memory. A gzip stream is decompressed only as far as
    its header declares (plus one byte, to detect trailing data), after the same memory
    check, so a damaged header or a compression bomb is refused before it is unpacked.
    """
    name = str(path)
    with path.open("rb") as fh:
        compressed = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        if not compressed:
            head = fh.read(4)
            head += fh.read(_header_size(head, name) - len(head)) if len(head) == 4 else b""
            declared = _declared_bytes(head, name)
            if declared is None:  # malformed: let parse_idx name the problem
                return head + fh.read(64), False
            found = os.fstat(fh.fileno()).st_size - len(head)
            if found != declared:
                raise IdxFormatError(_size_mismatch(name, head, declared, found))
            _check_memory(declared, name)
            return head + fh.read(declared), False
    try:
        with gzip.GzipFile(path) as stream:
            head = stream.read(4)
            size = _header_size(head, name) if len(head) == 4 else 4
            head += stream.read(size - len(head))
            declared = _declared_bytes(head, name)
            if declared is None:  # malformed: let parse_idx name the problem
                return head + stream.read(64), True
            _check_memory(declared, name)
            return head + stream.read(declared + 1), True
    except (OSError, EOFError, zlib.error) as exc:
        raise IdxFormatError(f"{path}: corrupt or truncated gzip stream ({exc})") from exc


def _size_mismatch(name: str, head: bytes, expected: int, found: int) -> str:
    """parse_idx's sentence for data that does not have the size its header declares."""
    shape = tuple(int(s) for s in np.frombuffer(head, dtype=">u4", count=head[3], offset=4))
    if found < expected:
        return f"{name}: truncated: shape {shape} needs {expected} data bytes, found {found}"
    return f"{name}: {found - expected} unexpected bytes after the data of shape {shape}"


def same_content(compressed: str | os.PathLike, plain: str | os.PathLike) -> bool:
    """Whether a gzip file unpacks to exactly the bytes of a plain file.

    Both are streamed; unpacking stops as soon as it exceeds the plain file's size, so a
    compression bomb beside a small file costs no more than that file. A damaged gzip
    stream holds other content.
    """
    size = Path(plain).stat().st_size
    digest, unpacked = hashlib.sha256(), 0
    try:
        with gzip.GzipFile(compressed) as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                unpacked += len(block)
                if unpacked > size:
                    return False
                digest.update(block)
    except (OSError, EOFError, zlib.error):
        return False
    return unpacked == size and digest.hexdigest() == file_sha256(plain)


def parse_idx(raw: bytes, name: str = "<bytes>") -> np.ndarray:
    """Parse the bytes of an (uncompressed) IDX file into an array of its declared shape."""
    if len(raw) < 4:
        raise IdxFormatError(f"{name}: too short to be an IDX file ({len(raw)} bytes)")
    if raw[0] != 0 or raw[1] != 0:
        raise IdxFormatError(f"{name}: not an IDX file (bad magic number {raw[:4].hex()})")
    type_code, ndim = raw[2], raw[3]
    if type_code not in _TYPES:
        raise IdxFormatError(f"{name}: unknown IDX data type 0x{type_code:02x}")
    if ndim == 0:
        raise IdxFormatError(f"{name}: IDX file declares zero dimensions")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IdxFormatError(f"{name}: truncated header ({len(raw)} of {header} bytes)")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _TYPES[type_code]
    expected = math.prod(shape) * dtype.itemsize  # Python ints: no overflow on absurd headers
    found = len(raw) - header
    if found != expected:
        raise IdxFormatError(_size_mismatch(name, raw[:header], expected, found))
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=True)


def load_idx(path: str | os.PathLike) -> IdxFile:
    """Read an IDX file (``.gz`` or plain, detected by content) with its checksums."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    raw, compressed = _read_bytes(path)
    array = parse_idx(raw, str(path))
    content_sha = hashlib.sha256(raw).hexdigest()
    # a plain file is its content; a .gz is hashed as stored, streamed, once it has parsed
    file_sha = file_sha256(path) if compressed else content_sha
    return IdxFile(path, array, file_sha, content_sha)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (``.gz`` or plain, detected by content) into a NumPy array."""
    return load_idx(path).array


def write_idx(path: str | os.PathLike, array: np.ndarray, compress: bool | None = None) -> Path:
    """Write ``array`` as IDX (gzip when ``compress`` or when the name ends in ``.gz``)."""
    path = Path(path)
    array = np.asarray(array)
    codes = {v.newbyteorder("="): k for k, v in _TYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None:
        raise ValueError(f"dtype {array.dtype} has no IDX type code")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    raw = header + array.astype(_TYPES[code], copy=False).tobytes()
    if compress or (compress is None and path.suffix == ".gz"):
        raw = gzip.compress(raw, compresslevel=6)
    path.write_bytes(raw)
    return path
