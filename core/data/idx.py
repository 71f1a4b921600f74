"""Reader for the IDX format of MNIST-style data sets (plain or gzip-compressed).

Layout: two zero bytes, a type code, the number of dimensions d, then d big-endian uint32
sizes, then the data in C order, big-endian. Any deviation raises :class:`IdxFormatError`
naming the file and what is wrong.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

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


def _read_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise IdxFormatError(f"{path}: corrupt or truncated gzip stream ({exc})") from exc
    return raw


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
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header
    if found < expected:
        raise IdxFormatError(
            f"{name}: truncated: shape {shape} needs {expected} data bytes, found {found}"
        )
    if found > expected:
        raise IdxFormatError(
            f"{name}: {found - expected} unexpected bytes after the data of shape {shape}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (``.gz`` or plain, detected by content) into a NumPy array."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return parse_idx(_read_bytes(path), str(path))


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
