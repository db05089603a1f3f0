"""Reading safetensors files: the header checked as safetensors checks it, entries read into writable arrays, and
``safe_open``, safetensors' lazy reader (``safe_open(path, framework="pt")``) returning jitorch tensors.

``get_tensor`` reads one entry straight into a new writable array; ``get_slice(name)[...]`` maps the entry read-only
and copies only the indexed part (shards of a large embedding read their rows alone).
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np

from . import _dtype
from ._tensor import Tensor

__all__ = ["safe_open"]

_CODES = {"F64": _dtype.float64, "F32": _dtype.float32, "F16": _dtype.float16, "BF16": _dtype.bfloat16,
          "I64": _dtype.int64, "I32": _dtype.int32, "I16": _dtype.int16, "I8": _dtype.int8, "U8": _dtype.uint8,
          "U16": _dtype.uint16, "U32": _dtype.uint32, "U64": _dtype.uint64, "BOOL": _dtype.bool,
          "C64": _dtype.complex64}
_MAX_HEADER = 100 * 1024 * 1024  # the format's own limit on the JSON header


def _lib():
    try:
        import safetensors
    except ImportError as e:
        raise ImportError("jitorch.safetensors needs the safetensors package: pip install safetensors") from e
    return safetensors


def _finish(arrays: dict, device) -> dict:
    out = {}
    for name, arr in arrays.items():
        t = Tensor._make(arr)
        out[name] = t if device is None or str(device) == "cpu" else t.to(device)
    return out


def _dtype_of(code: str):
    if code not in _CODES:
        raise TypeError(f"safetensors dtype {code} has no jitorch counterpart")
    return _CODES[code]


def _invalid(message: str):
    error = getattr(_lib(), "SafetensorError", ValueError)
    return error(message)


def _read_header(f):
    """``(tensor entries, metadata or None, data start)`` of an open file, checked as safetensors does."""
    size = os.fstat(f.fileno()).st_size
    head = f.read(8)
    if len(head) != 8:
        raise _invalid("Error while deserializing header: HeaderTooSmall")
    (n,) = struct.unpack("<Q", head)
    if n > _MAX_HEADER or n > size - 8:
        raise _invalid("Error while deserializing header: InvalidHeaderLength")
    try:
        header = json.loads(f.read(n))
    except ValueError as e:
        raise _invalid(f"Error while deserializing header: InvalidHeaderDeserialization ({e})") from None
    if not isinstance(header, dict):
        raise _invalid("Error while deserializing header: InvalidHeaderDeserialization")
    metadata = header.pop("__metadata__", None)
    data_start, data_len = 8 + n, size - 8 - n
    for name, info in header.items():
        shape, offsets = info.get("shape"), info.get("data_offsets")
        dtype = _dtype_of(info.get("dtype"))
        if (not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_len
                or offsets[1] - offsets[0] != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize):
            raise _invalid(f"Error while deserializing header: InvalidTensorView for {name!r}")
    return header, metadata, data_start


def _read_tensor(f, name, info, data_start):
    """The entry's values as a new writable array, read straight from the file."""
    arr = np.empty(info["shape"], dtype=_dtype_of(info["dtype"]).np)
    f.seek(data_start + info["data_offsets"][0])
    if arr.nbytes and f.readinto(memoryview(arr.reshape(-1).view(np.uint8))) != arr.nbytes:
        raise _invalid(f"Error while deserializing {name!r}: the file is truncated")
    return arr


_FRAMEWORKS = {"pt": "tensor", "torch": "tensor", "jitorch": "tensor", "np": "numpy", "numpy": "numpy"}


class safe_open:  # noqa: N801 - safetensors' spelling
    """``with safe_open(path, framework="pt", device="cpu") as f: f.get_tensor(name)``, as ``safetensors.safe_open``.

    ``framework`` is ``"pt"`` (or ``"torch"``, ``"jitorch"``) for jitorch tensors, ``"numpy"`` for arrays.

    >>> import os, tempfile, jitorch
    >>> from jitorch.safetensors import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "t.safetensors")
    >>> save_file({"w": jitorch.arange(6.0).reshape(2, 3)}, path)
    >>> with safe_open(path, framework="pt") as f:
    ...     f.keys(), f.get_slice("w")[:, 1]
    (['w'], tensor([1., 4.]))
    """

    def __init__(self, filename, framework="pt", device="cpu"):
        if framework not in _FRAMEWORKS:
            raise _invalid(f"framework {framework} is invalid")
        self._kind = _FRAMEWORKS[framework]
        self._device = f"cuda:{device}" if isinstance(device, int) else device
        self._filename = filename
        self._file = open(filename, "rb")
        try:
            self._header, self._metadata, self._data_start = _read_header(self._file)
        except BaseException:
            self._file.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()

    def _open(self):
        if self._file.closed:
            raise _invalid("File is closed")

    def _entry(self, name):
        self._open()
        if name not in self._header:
            raise _invalid(f"File does not contain tensor {name}")
        return self._header[name]

    def _wrap(self, arr):
        if self._kind == "numpy":
            return arr
        return _finish({"t": arr}, self._device)["t"]

    def keys(self) -> list:
        self._open()
        return sorted(self._header)

    def offset_keys(self) -> list:
        """The names in the order of their bytes in the file."""
        self._open()
        return sorted(self._header, key=lambda name: self._header[name]["data_offsets"][0])

    def metadata(self):
        self._open()
        return self._metadata

    def get_tensor(self, name):
        return self._wrap(_read_tensor(self._file, name, self._entry(name), self._data_start))

    def get_slice(self, name) -> _Slice:
        return _Slice(self, self._entry(name))


class _Slice:
    """safetensors' ``PySafeSlice``: the shape and dtype code of an entry, and its parts by basic indexing."""

    def __init__(self, owner, info):
        self._owner, self._info = owner, info

    def get_shape(self) -> list:
        return list(self._info["shape"])

    def get_dtype(self) -> str:
        return self._info["dtype"]

    def __getitem__(self, index):
        self._owner._open()
        info = self._info
        shape, dtype = tuple(info["shape"]), _dtype_of(info["dtype"]).np
        if 0 in shape:
            whole = np.empty(shape, dtype=dtype)
        else:
            whole = np.memmap(self._owner._filename, dtype=dtype, mode="r", shape=shape,
                              offset=self._owner._data_start + info["data_offsets"][0])
        if isinstance(index, tuple) and len([i for i in index if i is not Ellipsis and i is not None]) > len(shape):
            raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
        part = np.array(whole[index])  # a copy: the result must not keep the file mapped
        return self._owner._wrap(part)
