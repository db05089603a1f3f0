"""What ``jitorch.load`` turns torch's pickled names into: storages, ``map_location``, and the tensor rebuild functions.

A checkpoint names ``torch._utils._rebuild_tensor_v2``, ``torch.FloatStorage``, ``torch.float32``, ``torch.device``
and so on; :func:`torch_name` maps each such dotted name to the jitorch object that plays its part, so files written
by PyTorch load without PyTorch. A storage is one 1-D uint8 array (NumPy or CuPy); every tensor built on it is a
strided view of it, so tensors that shared a storage when saved share memory again.

>>> import numpy as np
>>> s = UntypedStorage(np.arange(8, dtype=np.uint8), dtype=torch_name("torch.uint8"))
>>> _rebuild_tensor_v2(s, 2, (2, 2), (1, 2), False, None).tolist()
[[2, 4], [3, 5]]
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from ._device import device as _device
from ._storage import UntypedStorage
from ._tensor import Size, Tensor
from .runtime import array_module_for, cuda_available, device_count, strided_view
from .runtime.meta import MetaArray, empty as meta_empty

__all__ = ["UntypedStorage", "StorageType", "restore_location_fn", "torch_name", "TORCH_ONLY_DTYPES"]


class StorageType:
    """A legacy typed-storage class such as ``torch.FloatStorage``: only its element type matters when loading."""

    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype

    def __repr__(self):
        return f"StorageType(dtype={self.dtype})"


# -- map_location ------------------------------------------------------------------------------------------------------
def _validate_cuda(location: str) -> int:
    index = _device(location).index or 0
    if not cuda_available():
        raise RuntimeError("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. "
                           "If you are running on a CPU-only machine, please use torch.load with "
                           "map_location=torch.device('cpu') to map your storages to the CPU.")
    count = device_count()
    if index >= count:
        raise RuntimeError(f"Attempting to deserialize object on CUDA device {index} but torch.cuda.device_count() is "
                           f"{count}. Please use torch.load with map_location to map your storages to an existing "
                           "device.")
    return index


def default_restore_location(storage, location: str):
    """Move ``storage`` to the device a location tag (``'cpu'``, ``'cuda:1'``) names, as PyTorch does."""
    location = str(location)
    if location == "cpu":
        return storage.cpu()
    if location == "meta":  # the size alone: a meta storage holds no bytes
        return UntypedStorage(meta_empty((storage.nbytes(),), np.uint8), storage.dtype)
    if location.startswith("cuda"):
        return storage.cuda(_validate_cuda(location))
    raise RuntimeError(f"don't know how to restore data location of torch.storage.UntypedStorage (tagged with "
                       f"{location})")


def restore_location_fn(map_location):
    """``(storage, location) -> storage`` for a ``map_location`` (None, a device or its name, a dict or a callable)."""
    if map_location is None:
        return default_restore_location
    if isinstance(map_location, dict):
        return lambda storage, location: default_restore_location(storage, str(map_location.get(location, location)))
    if isinstance(map_location, bytes):
        map_location = map_location.decode()
    if isinstance(map_location, (str, _device)):
        return lambda storage, location: default_restore_location(storage, str(map_location))
    if not callable(map_location):
        raise TypeError(f"map_location must be None, a str, a device, a dict or a callable, got "
                        f"{type(map_location).__name__}")

    def restore(storage, location):
        result = map_location(storage, location)
        if result is None:
            return default_restore_location(storage, location)
        if isinstance(result, (str, _device)):  # a device is a common slip for a storage: honour it
            return default_restore_location(storage, str(result))
        if not isinstance(result, UntypedStorage):
            raise TypeError(f"map_location must return a storage or None, got {type(result).__name__}")
        return result

    return restore


# -- tensor rebuild functions (the names torch.save writes) -------------------------------------------------------
def _view(storage, dtype, storage_offset, size, stride):
    if not isinstance(storage, UntypedStorage):
        raise RuntimeError(f"expected a storage to rebuild a tensor from, got {type(storage).__name__}")
    if not isinstance(dtype, _dtype.dtype):
        raise RuntimeError(f"expected a dtype to rebuild a tensor with, got {dtype!r}")
    raw = storage._array
    if raw.size % dtype.itemsize:
        raise RuntimeError(f"a storage of {raw.size} bytes cannot hold {dtype} elements")
    if type(raw) is MetaArray:  # map_location="meta": the geometry, checked against the storage's size
        span = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if 0 not in size else 0
        fits = int(storage_offset) + span <= raw.size // dtype.itemsize
        if any(s < 0 for s in size) or any(s < 0 for s in stride) or not fits:
            raise RuntimeError(f"a tensor of size {tuple(size)}, stride {tuple(stride)} and offset {storage_offset} "
                               f"lies outside its storage of {raw.size} bytes")
        return Tensor._make(meta_empty(size, dtype.np, stride, int(storage_offset)))
    typed = raw.view(dtype.np)
    xp = np if isinstance(raw, np.ndarray) else array_module_for("cuda")
    # strided_view checks the geometry against the storage: a corrupt or hostile file cannot reach other memory.
    t = Tensor._make(strided_view(xp, typed, tuple(size), tuple(stride), int(storage_offset)))
    t._own_offset = int(storage_offset)  # a view of the storage, as torch's set_: storage_offset() reports it
    return t


def _apply_metadata(t, metadata):
    # torch records lazily conjugated / negated tensors as flags over unchanged storage.
    if metadata:
        if metadata.get("conj"):
            t = Tensor._make(t._data.conj())
        if metadata.get("neg"):
            t = Tensor._make(-t._data)
    return t


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _view(storage, storage.dtype, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    t = _apply_metadata(_view(storage, storage.dtype, storage_offset, size, stride), metadata)
    return t.requires_grad_(bool(requires_grad)) if requires_grad else t


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    t = _apply_metadata(_view(storage, dtype, storage_offset, size, stride), metadata)
    return t.requires_grad_(bool(requires_grad)) if requires_grad else t


def _set_obj_state(obj, state):
    if isinstance(state, tuple):
        if len(state) != 2:
            raise RuntimeError(f"Invalid serialized state: {state}")
        dict_state, slots_state = state
    else:
        dict_state, slots_state = state, None
    for part in (dict_state, slots_state):
        for k, v in (part or {}).items():
            setattr(obj, k, v)
    return obj


def _rebuild_parameter(data, requires_grad, backward_hooks):
    from .nn.parameter import Parameter

    return Parameter(data, requires_grad)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    return _set_obj_state(_rebuild_parameter(data, requires_grad, backward_hooks), state)


def _as_subclass(t, cls):
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise RuntimeError(f"cannot rebuild a tensor as {cls!r}: it is not a Tensor subclass")
    sub = object.__new__(cls)
    sub.__dict__.update(t.__dict__)
    from ._subclass import note_instance

    note_instance(cls)  # (a user's subclass takes calls over from its first instance on)
    return sub


def _rebuild_from_type_v2(func, new_type, args, state):
    ret = func(*args)
    if type(ret) is not new_type:
        ret = _as_subclass(ret, new_type)
    setstate = getattr(type(ret), "__setstate__", None)
    if setstate is not None and setstate is not getattr(Tensor, "__setstate__", None):
        ret.__setstate__(state)
        return ret
    return _set_obj_state(ret, state)


def _rebuild_device_tensor_from_cpu_tensor(data, dtype, device, requires_grad):
    t = data.to(dtype=dtype, device=_device(device))
    return t.requires_grad_(True) if requires_grad else t


def _get_layout(name):
    """``torch.serialization._get_layout('torch.strided')``: how torch pickles a layout, read as jitorch's."""
    prefix, _, short = str(name).partition(".")
    known = _dtype.layout._by_name.get(short)
    if prefix != "torch" or known is None:
        raise RuntimeError(f"jitorch.load: the checkpoint names the layout {name!r}, which torch does not have")
    return known


def _rebuild_sparse_tensor(layout, data):
    """torch's pickled sparse tensor: a sparse_coo one from ``(indices, values, size[, is_coalesced])``."""
    if layout is not _dtype.sparse_coo:
        raise RuntimeError(f"jitorch.load cannot rebuild {layout} tensors: jitorch has sparse_coo ones only")
    from .sparse import _rebuild_sparse_coo

    return _rebuild_sparse_coo(*data)


def _rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad):
    """How torch pickles a meta tensor: its geometry, no storage (so views of one come back unshared)."""
    from ._creation import empty_strided

    return empty_strided(size, stride, dtype=dtype, device="meta", requires_grad=bool(requires_grad))


def _unsupported(kind):
    def rebuild(*args, **kwargs):
        raise RuntimeError(f"jitorch.load cannot rebuild {kind} tensors: jitorch has none")

    rebuild.__name__ = f"_rebuild_{kind.replace(' ', '_')}"
    return rebuild


def _torch_names():
    names = {
        "torch._utils._rebuild_tensor": _rebuild_tensor,
        "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
        "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
        "torch._utils._rebuild_parameter": _rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
        "torch._utils._rebuild_device_tensor_from_cpu_tensor": _rebuild_device_tensor_from_cpu_tensor,
        "torch._utils._rebuild_qtensor": _unsupported("quantized"),
        "torch._utils._rebuild_sparse_tensor": _rebuild_sparse_tensor,
        "torch._utils._rebuild_nested_tensor": _unsupported("nested"),
        "torch._utils._rebuild_meta_tensor_no_storage": _rebuild_meta_tensor_no_storage,
        "torch._utils._rebuild_wrapper_subclass": _unsupported("wrapper subclass"),
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
        "torch.Tensor": Tensor,
        "torch._tensor.Tensor": Tensor,
        "torch.Size": Size,
        "torch.device": _device,
        "torch.serialization._get_layout": _get_layout,
        "torch.storage.UntypedStorage": StorageType("UntypedStorage", _dtype.uint8),
        "torch.UntypedStorage": StorageType("UntypedStorage", _dtype.uint8),
    }
    from ._serialization_pickler import STORAGE_NAMES

    for d in _dtype.ALL:
        names[f"torch.{d.name}"] = d
        storage = STORAGE_NAMES.get(d.name)
        if storage is None:  # uint16/32/64 have no legacy storage class: torch saves them untyped, with v3
            continue
        # Legacy (pre-zip) files name CUDA storages torch.cuda.FloatStorage; the location tag says the device.
        names[f"torch.{storage}"] = names[f"torch.cuda.{storage}"] = StorageType(storage, d)
    return names


_TORCH_NAMES = _torch_names()

# torch dtypes that jitorch has no counterpart for: a checkpoint using one fails with a clear message.
TORCH_ONLY_DTYPES = frozenset(
    ["complex32", "chalf", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
     "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
     "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16"]
    + [f"int{n}" for n in range(1, 8)] + [f"uint{n}" for n in range(1, 8)])


def torch_name(path: str):
    """The jitorch object standing for the torch global ``path`` (``'torch._utils._rebuild_tensor_v2'``), or None."""
    hit = _TORCH_NAMES.get(path)
    if hit is None and path in ("torch.nn.parameter.Parameter", "torch.nn.Parameter"):
        from .nn.parameter import Parameter

        hit = Parameter
    return hit
