"""PyTorch's pre-1.6 checkpoint format (``torch.save(..., _use_new_zipfile_serialization=False)``).

The file is a run of pickles: a magic number, the protocol version, a ``sys_info`` dict, the object itself (its
storages as persistent ids ``('storage', torch.FloatStorage, key, location, numel, None)``), the sorted list of
storage keys, and then each storage's element count (int64) and raw bytes. The storage bytes come after the pickle
that uses them, so loading creates each storage empty, lets tensors view it, and fills it in place afterwards.

>>> import io, jitorch
>>> from jitorch.serialization import load, save
>>> buf = io.BytesIO()
>>> save(jitorch.arange(3), buf, _use_new_zipfile_serialization=False)
>>> _ = buf.seek(0)
>>> load(buf).tolist()
[0, 1, 2]
"""
from __future__ import annotations

import pickle
import struct
import sys

import numpy as np

from ._serialization_pickler import StorageTable, make_pickler
from ._serialization_rebuild import UntypedStorage, restore_location_fn
from ._serialization_unpickler import check_storage_pid, make_unpickler, refuse_frames

__all__ = ["legacy_save", "legacy_load", "MAGIC_NUMBER", "PROTOCOL_VERSION"]

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001


def legacy_save(obj, stream, pickle_module, protocol: int) -> None:
    """Write ``obj`` to ``stream`` in the legacy (non-zip) format."""
    table = StorageTable(legacy=True)
    sys_info = dict(protocol_version=PROTOCOL_VERSION, little_endian=sys.byteorder == "little",
                    type_sizes=dict(short=2, int=4, long=4))
    for header in (MAGIC_NUMBER, PROTOCOL_VERSION, sys_info):
        pickle.dump(header, stream, protocol=protocol)
    make_pickler(stream, protocol, table, pickle_module).dump(obj)
    records = sorted(table.raw_records(), key=lambda record: record[0])
    pickle.dump([key for key, _, _ in records], stream, protocol=protocol)
    for _, raw, dtype in records:
        stream.write(struct.pack("<q", raw.size // dtype.itemsize))
        stream.write(memoryview(raw))


def _read_exactly(stream, out: np.ndarray) -> None:
    view, done = memoryview(out), 0
    while done < out.size:
        n = stream.readinto(view[done:]) if hasattr(stream, "readinto") else None
        if n is None:
            chunk = stream.read(out.size - done)
            n = len(chunk)
            view[done:done + n] = chunk
        if not n:
            raise RuntimeError("unexpected end of file while reading a storage")
        done += n


def legacy_load(stream, map_location, *, weights_only: bool, pickle_module, pickle_load_args: dict):
    """Read an object written in the legacy format."""

    def unpickler(persistent_load=None):
        return make_unpickler(stream, weights_only=weights_only, persistent_load=persistent_load,
                              pickle_module=pickle_module, **pickle_load_args)

    if weights_only:
        refuse_frames(stream)
    if unpickler().load() != MAGIC_NUMBER:
        raise RuntimeError("Invalid magic number; corrupt file?")
    protocol_version = unpickler().load()
    if protocol_version != PROTOCOL_VERSION:
        raise RuntimeError(f"Invalid protocol version: {protocol_version}")
    sys_info = unpickler().load()
    little = sys_info.get("little_endian", True) if isinstance(sys_info, dict) else True

    restore = restore_location_fn(map_location)
    storages = {}
    here = stream.tell()
    file_size = stream.seek(0, 2)
    stream.seek(here)

    def persistent_load(pid):
        typename, data = check_storage_pid(pid, weights_only)
        if typename == "module":
            return data[0]
        storage_type, key, location, numel = data[:4]
        key = str(key.decode() if isinstance(key, bytes) else key)
        if key not in storages:
            location = location.decode() if isinstance(location, bytes) else location
            nbytes = int(numel) * storage_type.dtype.itemsize
            if not 0 <= nbytes <= file_size:  # sizes come from the file: check before allocating
                raise RuntimeError(f"storage {key!r} claims {nbytes} bytes, more than the whole file holds")
            empty = UntypedStorage(np.empty(nbytes, dtype=np.uint8), storage_type.dtype)
            storages[key] = restore(empty, location)
        return storages[key]

    result = unpickler(persistent_load).load()
    keys = unpickler().load()
    for key in keys:
        key = str(key.decode() if isinstance(key, bytes) else key)
        if key not in storages:
            raise RuntimeError(f"the checkpoint lists storage {key!r} that no object uses")
        storage = storages[key]
        (numel,) = struct.unpack("<q", stream.read(8))
        if numel * storage.dtype.itemsize != storage.nbytes():
            raise RuntimeError(f"storage {key!r} holds {numel} elements but the checkpoint describes "
                               f"{storage.nbytes() // storage.dtype.itemsize}")
        on_host = isinstance(storage._array, np.ndarray)
        host = storage._array if on_host else np.empty(storage.nbytes(), dtype=np.uint8)
        _read_exactly(stream, host)
        if little != (sys.byteorder == "little"):
            byteswap(host, storage.dtype)
        if not on_host:
            storage._array.set(host)
    return result


def byteswap(raw: np.ndarray, dtype) -> None:
    """Reverse the byte order of each element (each half of a complex) of ``dtype`` in the uint8 array ``raw``."""
    unit = dtype.itemsize // (2 if dtype.is_complex else 1)
    if unit > 1:
        raw.view(f"u{unit}").byteswap(inplace=True)
