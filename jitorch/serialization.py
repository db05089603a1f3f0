"""``jitorch.save`` and ``jitorch.load``: PyTorch's checkpoint format, read and written without PyTorch.

``save`` writes the zip archive ``torch.save`` writes (``<name>/data.pkl``, ``<name>/data/<key>`` storage records,
``byteorder``, ``version``...), so ``torch.load`` reads jitorch checkpoints, with its default ``weights_only=True``
included; ``load`` reads files written by either library. Tensors that share memory share one storage in the file
and share memory again after loading.

``load`` defaults to ``weights_only=True``: the unpickler accepts only tensors, primitive containers, dtypes,
devices, ``Size``, ``OrderedDict`` and globals registered with :func:`add_safe_globals`, so a checkpoint from an
untrusted source cannot run code. Whole pickled modules need ``weights_only=False``.

>>> import io, jitorch
>>> from jitorch.serialization import load, save
>>> buf = io.BytesIO()
>>> x = jitorch.arange(6.0)
>>> save({"x": x, "view": x[2:4]}, buf)
>>> _ = buf.seek(0)
>>> out = load(buf)
>>> out["view"].tolist(), out["view"].data_ptr() == out["x"].data_ptr() + 2 * 4
([2.0, 3.0], True)
"""
from __future__ import annotations

import io
import os
import pickle
import sys
import warnings

import numpy as np

from ._device import device as _device
from ._serialization_legacy import byteswap, legacy_load, legacy_save
from ._serialization_pickler import StorageTable, make_pickler
from ._serialization_rebuild import UntypedStorage, restore_location_fn
from ._serialization_unpickler import (add_safe_globals, check_storage_pid, clear_safe_globals, get_safe_globals,
                                       is_allowed_global, make_unpickler, safe_globals, weights_only_message)
from .runtime.meta import empty as meta_empty
from ._torch_zip import STORAGE_ALIGNMENT, TorchArchive, ZipWriter, archive_name_for

__all__ = ["save", "load", "add_safe_globals", "get_safe_globals", "clear_safe_globals", "safe_globals",
           "get_unsafe_globals_in_checkpoint", "DEFAULT_PROTOCOL"]

DEFAULT_PROTOCOL = 2
_FILE_FORMAT_VERSION = "3\n"


def _is_path(f) -> bool:
    return isinstance(f, (str, os.PathLike))


def save(obj, f, pickle_module=pickle, pickle_protocol=DEFAULT_PROTOCOL, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False) -> None:
    """Save ``obj`` (tensors, state dicts, nested containers, optimizer state, whole modules) to ``f``.

    ``f`` is a path (``str`` or ``os.PathLike``) or a binary file object with ``write``. The file is PyTorch's zip
    format (``_use_new_zipfile_serialization=False``: its legacy format), readable by ``torch.load``.
    ``pickle_module`` must have a pure-Python ``Pickler`` (the standard ``pickle`` does).
    """
    if not _is_path(f) and not hasattr(f, "write"):
        raise AttributeError("expected 'f' to be string, path, or a file-like object with a 'write' attribute")
    if not _is_path(f) and not callable(f.write):
        raise TypeError(f"Buffer of {str(type(f)).strip('<>')} has no callable attribute 'write'")
    if not _use_new_zipfile_serialization:
        # The legacy format interleaves pickles and storage bytes; pickle into memory first so a failure
        # leaves an existing file untouched.
        buf = io.BytesIO()
        legacy_save(obj, buf, pickle_module, pickle_protocol)
        _write_out(f, lambda stream: stream.write(buf.getbuffer()))
        return
    table = StorageTable()
    buf = io.BytesIO()
    make_pickler(buf, pickle_protocol, table, pickle_module).dump(obj)

    def write_archive(stream):
        writer = ZipWriter(stream, archive_name_for(f) if _is_path(f) else "archive")
        writer.write_record("data.pkl", buf.getbuffer())
        writer.write_record(".format_version", "1")
        writer.write_record(".storage_alignment", str(STORAGE_ALIGNMENT))
        if not _disable_byteorder_record:
            writer.write_record("byteorder", sys.byteorder)
        for key, raw, _ in table.raw_records():
            writer.write_record(f"data/{key}", raw)
        writer.write_record("version", _FILE_FORMAT_VERSION)
        writer.write_record(".data/serialization_id", f"{int.from_bytes(os.urandom(16), 'little'):040d}")
        writer.finish()

    _write_out(f, write_archive)


def _write_out(f, write) -> None:
    if _is_path(f):
        parent = os.path.dirname(os.path.abspath(os.fspath(f)))
        if not os.path.isdir(parent):
            raise RuntimeError(f"Parent directory {parent} does not exist.")
        with open(f, "wb") as stream:
            write(stream)
    else:
        write(f)
        if hasattr(f, "flush"):
            f.flush()


def _resolve_weights_only(weights_only, pickle_module) -> bool:
    truthy = ("1", "y", "yes", "true")
    force = os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in truthy
    force_not = os.getenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in truthy
    if force and force_not:
        raise RuntimeError("Only one of `TORCH_FORCE_WEIGHTS_ONLY_LOAD` or `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD` should "
                           "be set, but both were set.")
    if force:
        return True
    if weights_only is None:
        if force_not:
            warnings.warn("Environment variable TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD detected, since the `weights_only` "
                          "argument was not explicitly passed to `torch.load`, forcing weights_only=False.",
                          UserWarning, stacklevel=3)
            return False
        return pickle_module is None  # as PyTorch: passing a pickle module means trusting the file
    return bool(weights_only)


def _check_seekable(f) -> None:
    try:
        f.seek(f.tell())
    except (io.UnsupportedOperation, AttributeError) as e:
        raise type(e)(f"{e}. You can only torch.load from a file that is seekable. Please pre-load the data into a "
                      "buffer like io.BytesIO and try to load from it instead.") from None


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args):
    """Load an object saved with ``jitorch.save`` or ``torch.save`` from a path or a seekable binary file object.

    ``weights_only`` (default True, or False when a ``pickle_module`` is given) restricts unpickling to tensors,
    primitive containers, dtypes, devices and :func:`add_safe_globals` entries. ``map_location`` is None (each
    storage goes back to the device it was saved from), a device or its name, a dict of location tags
    (``{'cuda:0': 'cpu'}``) or a callable ``(storage, location) -> storage or None``. ``mmap=True`` maps the file
    (copy-on-write) instead of reading storages into memory; ``f`` must then be a path. A path ending in
    ``.safetensors`` is read with :func:`jitorch.safetensors.load_file`.
    """
    weights_only = _resolve_weights_only(weights_only, pickle_module)
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    if pickle_load_args and weights_only:
        warnings.warn("pickle_load_args only works if `weights_only=False`.", stacklevel=2)
    pickle_load_args.setdefault("encoding", "utf-8")
    if _is_path(f) and os.fspath(f).endswith(".safetensors"):
        return _load_safetensors(f, map_location)
    if _is_path(f):
        with open(f, "rb") as stream:
            return _load_stream(stream, f, map_location, pickle_module, weights_only, bool(mmap), pickle_load_args)
    if not hasattr(f, "read"):
        raise AttributeError(f"expected 'f' to be string, path, or a file-like object with a 'read' attribute, got "
                             f"{type(f).__name__}")
    _check_seekable(f)
    return _load_stream(f, None, map_location, pickle_module, weights_only, bool(mmap), pickle_load_args)


def _load_safetensors(f, map_location):
    from .safetensors import load_file

    if isinstance(map_location, dict) or (callable(map_location) and not isinstance(map_location, str)):
        kind = "dict" if isinstance(map_location, dict) else "callable"
        raise RuntimeError(f"Loading safetensors file with {kind} map_location is not supported. Use a device string "
                           "or torch.device instead.")
    return load_file(f, device="cpu" if map_location is None else str(map_location))


def _load_stream(stream, path, map_location, pickle_module, weights_only, mmap, pickle_load_args):
    start = stream.tell()
    is_zip = stream.read(4) == b"PK\x03\x04"
    stream.seek(start)
    try:
        if is_zip:
            if mmap and path is None:
                raise ValueError("f must be a file path in order to use the mmap argument")
            archive = TorchArchive(stream, path)
            try:
                return _load_archive(archive, map_location, pickle_module, weights_only, mmap, pickle_load_args)
            finally:
                archive.close()
        if mmap:
            name = f"{path}, " if isinstance(path, str) else ""
            raise RuntimeError(f"mmap can only be used with files saved with `torch.save({name}"
                               "_use_new_zipfile_serialization=True), please torch.save your checkpoint with this "
                               "option in order to use mmap.")
        return legacy_load(stream, map_location, weights_only=weights_only, pickle_module=pickle_module,
                           pickle_load_args=pickle_load_args)
    except pickle.UnpicklingError as e:
        if not weights_only:
            raise
        raise pickle.UnpicklingError(weights_only_message(str(e))) from None


def _load_archive(archive, map_location, pickle_module, weights_only, mmap, pickle_load_args):
    if archive.has_record("constants.pkl"):  # how torch.load recognizes a TorchScript archive
        raise RuntimeError("jitorch.load cannot read TorchScript archives (torch.jit.save): they hold compiled "
                           "TorchScript code; save the module's state_dict with torch.save instead")
    byteorder = archive.read_record("byteorder").decode() if archive.has_record("byteorder") else "little"
    if byteorder not in ("little", "big"):
        raise ValueError("Unknown endianness type: " + byteorder)
    restore = restore_location_fn(map_location)
    # As torch: loading onto the meta device reads no tensor data (a checkpoint's shapes, without its bytes).
    to_meta = isinstance(map_location, (str, _device)) and str(map_location) == "meta"
    loaded = {}

    def persistent_load(pid):
        typename, data = check_storage_pid(pid, weights_only)
        if typename == "module":
            return data[0]
        storage_type, key, location, numel = data[:4]
        key = key.decode() if isinstance(key, bytes) else str(key)
        dtype = storage_type.dtype
        if key not in loaded:
            location = location.decode() if isinstance(location, bytes) else str(location)
            nbytes = int(numel) * dtype.itemsize
            name = f"data/{key}"
            if archive.record_size(name) != nbytes:  # checked before allocating: sizes come from the file
                raise RuntimeError(f"PytorchStreamReader failed reading file {name}: the record holds "
                                   f"{archive.record_size(name)} bytes but the checkpoint describes {nbytes}")
            if to_meta:
                raw = meta_empty((nbytes,), np.uint8)
            elif mmap:
                raw = archive.map_record(name, nbytes)
            else:
                raw = np.empty(nbytes, dtype=np.uint8)
                archive.read_into(name, raw)
            if byteorder != sys.byteorder and not to_meta:
                byteswap(raw, dtype)
            loaded[key] = restore(UntypedStorage(raw, dtype), location)
        storage = loaded[key]
        # One storage read as two element types (an untyped storage under two dtypes) keeps one buffer.
        return storage if storage.dtype is dtype else UntypedStorage(storage._array, dtype)

    unpickler = make_unpickler(io.BytesIO(archive.read_record("data.pkl")), weights_only=weights_only,
                               persistent_load=persistent_load, pickle_module=pickle_module, **pickle_load_args)
    return unpickler.load()


def get_unsafe_globals_in_checkpoint(f) -> list:
    """The globals a checkpoint's pickle names that a ``weights_only`` load would refuse (read without loading)."""
    import pickletools

    if _is_path(f):
        with open(f, "rb") as stream:
            return get_unsafe_globals_in_checkpoint(stream)
    archive = TorchArchive(f)
    try:
        data = archive.read_record("data.pkl")
    finally:
        archive.close()
    names, strings = set(), []
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            module, name = arg.split(" ", 1)
            names.add(f"{module}.{name}")
        elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
            names.add(f"{strings[-2]}.{strings[-1]}")
        elif isinstance(arg, str) and "UNICODE" in opcode.name:
            strings.append(arg)
    from ._serialization_unpickler import _python3_name

    unsafe = []
    for path in sorted(names):
        module, _, name = path.rpartition(".")
        module, name = _python3_name(module, name)
        if not is_allowed_global(f"{module}.{name}"):
            unsafe.append(f"{module}.{name}")
    return unsafe
