"""A GGUF file's header, checked before anything else reads the file.

GGUF (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) starts with the magic
`GGUF`, a version (2 or 3 here), the tensor count and the metadata count (u64 each), then the
metadata (key string, u32 type, value; arrays carry an element type and a u64 count) and the
tensor infos (name, u32 dims, u64 sizes, u32 type, u64 offset). Readers trust these numbers: a
file with the magic alone, or a count of 2**60, ends in a `struct.error` or a huge allocation.
`check_gguf` walks the header with every count and length checked against the bytes the file
has left, reading in bounded steps, and returns the scalar metadata; a bad header is one
ModelLoadError naming the file and what is wrong.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

from ..errors import InputError, ModelLoadError
from ..files import open_regular

# value type -> (struct format, bytes) of GGUF's fixed-size types; 8 is a string, 9 an array.
_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
          11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 4  # arrays of arrays


class _BadHeader(Exception):
    """What is wrong with a header, said where it was found."""


class _Reader:
    def __init__(self, handle, size: int):
        self.handle, self.size, self.at = handle, size, 0

    def left(self) -> int:
        return self.size - self.at

    def take(self, n: int, what: str) -> bytes:
        if n > self.left():
            raise _BadHeader(f"{what} needs {n} bytes at offset {self.at}, but the file has "
                             f"{self.left()} left")
        data = self.handle.read(n)
        self.at += n
        return data

    def number(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what: str, each: int) -> int:
        """A u64 count of items of at least `each` bytes, checked against what is left."""
        n = self.number("<Q", what)
        if n * each > self.left():
            raise _BadHeader(f"{what} is {n}, more than the {self.left()} bytes left could hold")
        return n

    def string(self, what: str) -> bytes:
        return self.take(self.count(f"the length of {what}", 1), what)

    def value(self, kind: int, what: str, depth: int = 0):
        if kind in _FIXED:
            return self.number(_FIXED[kind], what)
        if kind == _STRING:
            return self.string(what).decode("utf-8", "replace")
        if kind != _ARRAY or depth >= _MAX_NESTING:
            raise _BadHeader(f"{what} has the unknown value type {kind}")
        item = self.number("<I", f"the element type of {what}")
        size = struct.calcsize(_FIXED[item]) if item in _FIXED else 8
        n = self.count(f"the array length of {what}", size)
        if item in _FIXED:  # skipped in one bounded read
            self.take(n * size, what)
        else:
            for _ in range(n):
                self.value(item, what, depth + 1)
        return None  # arrays are checked, not kept


def check_gguf(path: str | Path) -> dict:
    """The scalar metadata of the GGUF file `path` (`general.architecture`, ...), once its
    whole header is checked against the file's size; ModelLoadError naming the file and what
    is wrong otherwise (not a regular file, no magic, a count or length past the end)."""
    path = Path(path)
    try:
        handle = open_regular(path)
    except InputError as err:
        raise ModelLoadError(f"{err}; pass a .gguf model file") from None
    with handle:
        reader = _Reader(handle, os.fstat(handle.fileno()).st_size)
        try:
            return _walk(reader)
        except _BadHeader as err:
            raise ModelLoadError(f"{path} is not a usable GGUF file: {err}; pass a complete "
                                 ".gguf model file (re-download it if it was cut short)") from None


def _walk(reader: _Reader) -> dict:
    if reader.take(4, "the magic") != b"GGUF":
        raise _BadHeader("it does not start with the magic bytes GGUF")
    version = reader.number("<I", "the version")
    if version not in (2, 3):
        raise _BadHeader(f"version {version} is not read here (GGUF 2 or 3)")
    tensors = reader.number("<Q", "the tensor count")
    entries = reader.count("the metadata count", 8 + 4 + 1)
    if tensors * (8 + 4 + 8 + 4 + 8) > reader.left():
        raise _BadHeader(f"the tensor count is {tensors}, more than the {reader.left()} bytes "
                         "left could hold")
    metadata = {}
    for i in range(entries):
        key = reader.string(f"metadata key {i}").decode("utf-8", "replace")
        value = reader.value(reader.number("<I", f"the type of {key!r}"), repr(key))
        if value is not None:
            metadata[key] = value
    extents = {}
    for i in range(tensors):
        name = reader.string(f"the name of tensor {i}").decode("utf-8", "replace")
        dims = reader.number("<I", f"the dimensions of tensor {name!r}")
        if not 0 < dims <= _MAX_DIMS:
            raise _BadHeader(f"tensor {name!r} has {dims} dimensions (1 to {_MAX_DIMS})")
        shape = struct.unpack(f"<{dims}Q", reader.take(8 * dims, f"the shape of tensor {name!r}"))
        kind = reader.number("<I", f"the type of tensor {name!r}")
        offset = reader.number("<Q", f"the offset of tensor {name!r}")
        extents[name] = (offset, _nbytes(shape, kind))
    align = metadata.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0:
        raise _BadHeader(f"general.alignment is {align!r}, not a positive integer")
    start = -(-reader.at // align) * align  # the tensor data follow the header, aligned
    for name, (offset, nbytes) in extents.items():
        if start + offset >= reader.size:
            raise _BadHeader(f"tensor {name!r} starts past the end of the file")
        if nbytes is not None and start + offset + nbytes > reader.size:
            raise _BadHeader(f"tensor {name!r} needs {nbytes} bytes at offset {start + offset}, "
                             f"but the file ends at {reader.size}")
    return metadata


def _nbytes(shape: tuple, kind: int) -> int | None:
    """Bytes of a tensor of `shape` in ggml type `kind` (None for a type not known here)."""
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ImportError, ValueError, KeyError):
        return None
    count = 1
    for n in shape:
        count *= n
    return -(-count // block) * size
