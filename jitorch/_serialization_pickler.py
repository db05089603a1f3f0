"""The pickler behind ``jitorch.save``: it writes tensors exactly as ``torch.save`` does, so PyTorch can read them.

A tensor pickles as ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)`` whose
storage is a persistent id ``('storage', torch.FloatStorage, key, location, numel)``; the storage bytes go to their
own record. jitorch dtypes, devices and sizes pickle as ``torch.float32``, ``torch.device`` and ``torch.Size``.
jitorch never imports torch, so those globals are written by name: stand-in objects that the pickler emits as
``GLOBAL 'torch._utils _rebuild_tensor_v2'`` without looking the name up. That needs the pure-Python pickler
(``pickle._Pickler``): the C one insists on importing every global it writes.

Tensors that view one block of memory share one storage (the whole block is saved, as PyTorch saves a view's whole
storage), so views come back as views.

>>> import io, jitorch
>>> table = StorageTable()
>>> buf = io.BytesIO()
>>> make_pickler(buf, 2, table).dump(jitorch.ones(2))
>>> [key for key, _, _ in table.records]
['0']
"""
from __future__ import annotations

import pickle
from collections import OrderedDict

import numpy as np

from . import _dtype
from ._shape import _contiguous_strides
from ._storage import _address, _memory_root  # noqa: F401 - safetensors imports _memory_root from here
from ._device import device as _device
from ._tensor import Size, Tensor

__all__ = ["TorchGlobal", "StorageTable", "make_pickler", "STORAGE_NAMES", "tensor_user_state"]

# torch's legacy typed-storage class per dtype: the storage type in a persistent id names the element type.
STORAGE_NAMES = {
    "float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage", "bfloat16": "BFloat16Storage",
    "int64": "LongStorage", "int32": "IntStorage", "int16": "ShortStorage", "int8": "CharStorage",
    "uint8": "ByteStorage", "bool": "BoolStorage", "complex64": "ComplexFloatStorage",
    "complex128": "ComplexDoubleStorage",
}


class TorchGlobal:
    """A global of another module (``torch``), pickled by name alone; one instance per name so the memo shares it."""

    __slots__ = ("module", "name")
    _cache: dict = {}

    def __new__(cls, module: str, name: str):
        key = (module, name)
        hit = cls._cache.get(key)
        if hit is None:
            hit = object.__new__(cls)
            hit.module, hit.name = module, name
            cls._cache[key] = hit
        return hit

    def __call__(self, *args, **kwargs):  # pickle's save_reduce insists that reduce functions be callable
        raise TypeError(f"{self.module}.{self.name} is a name written into checkpoints, not a function")

    def __repr__(self):
        return f"<global {self.module}.{self.name}>"


REBUILD_TENSOR_V2 = TorchGlobal("torch._utils", "_rebuild_tensor_v2")
REBUILD_TENSOR_V3 = TorchGlobal("torch._utils", "_rebuild_tensor_v3")
UNTYPED_STORAGE = TorchGlobal("torch.storage", "UntypedStorage")
REBUILD_PARAMETER = TorchGlobal("torch._utils", "_rebuild_parameter")
REBUILD_PARAMETER_WITH_STATE = TorchGlobal("torch._utils", "_rebuild_parameter_with_state")
REBUILD_FROM_TYPE_V2 = TorchGlobal("torch._tensor", "_rebuild_from_type_v2")
TORCH_TENSOR = TorchGlobal("torch", "Tensor")
TORCH_DEVICE = TorchGlobal("torch", "device")
TORCH_SIZE = TorchGlobal("torch", "Size")
TORCH_GET_LAYOUT = TorchGlobal("torch.serialization", "_get_layout")
REBUILD_SPARSE = TorchGlobal("torch._utils", "_rebuild_sparse_tensor")
REBUILD_META = TorchGlobal("torch._utils", "_rebuild_meta_tensor_no_storage")


def _save_torch_global(pickler, obj):
    # What pickle's own save_global writes for a global, minus the import that would verify it.
    if pickler.proto >= 4:
        pickler.save(obj.module)
        pickler.save(obj.name)
        pickler.write(pickle.STACK_GLOBAL)
    else:
        pickler.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
    pickler.memoize(obj)


def _save_dtype(pickler, obj):
    pickler.save(TorchGlobal("torch", obj.name))


# -- memory and storages -----------------------------------------------------------------------------------------------
def _is_numpy(arr) -> bool:
    return isinstance(arr, np.ndarray)


def _raw_bytes(root):
    """The bytes of a contiguous array in memory order, as a 1-D uint8 host array (a view for NumPy arrays)."""
    if root.size == 0:
        return np.empty(0, dtype=np.uint8)
    flat = root.reshape(-1) if root.flags.c_contiguous else root.T.reshape(-1)
    flat = flat.view(np.uint8)
    return flat if _is_numpy(flat) else flat.get()


class _StorageRef:
    """What a tensor's reduce passes as its storage; the pickler turns it into a persistent id."""

    __slots__ = ("pid",)

    def __init__(self, pid):
        self.pid = pid


class _Block:
    """A block of memory saved as one storage: its owning array, and the storage once a tensor has used it."""

    __slots__ = ("root", "start", "nbytes", "ref", "dtype")

    def __init__(self, root):
        self.root, self.start, self.nbytes = root, _address(root), root.nbytes
        self.ref = self.dtype = None


class StorageTable:
    """The storages of one checkpoint: one per block of memory, keyed ``'0'``, ``'1'``... in first-use order.

    ``records`` lists ``(key, owning array, dtype)`` to write; ``legacy`` adds the sixth persistent-id field (view
    metadata, always ``None``) that the pre-zip format has.
    """

    def __init__(self, legacy: bool = False):
        self.legacy = legacy
        self.records = []
        self._blocks = {}  # id(owning array) -> _Block; the block keeps the array alive, so ids stay unique

    def _new_storage(self, root, dtype, location, nbytes):
        key = str(len(self.records))
        if dtype.name in STORAGE_NAMES:
            pid = ("storage", TorchGlobal("torch", STORAGE_NAMES[dtype.name]), key, location, nbytes // dtype.itemsize)
        else:  # torch's untyped storage, counted in bytes; the tensor names its dtype (_rebuild_tensor_v3)
            pid = ("storage", UNTYPED_STORAGE, key, location, nbytes)
        self.records.append((key, root, dtype))
        return _StorageRef(pid + (None,) if self.legacy else pid)

    def _block_for(self, arr, item):
        root = _memory_root(arr)
        block = self._blocks.get(id(root))
        if block is None and (root.flags.c_contiguous or root.flags.f_contiguous) and root.nbytes % item == 0:
            block = self._blocks[id(root)] = _Block(root)
        return block

    def reference(self, arr):
        """``(storage ref, storage offset, size, stride)`` of an array, in elements as ``_rebuild_tensor_v2`` takes."""
        dtype = _dtype.FROM_NP[arr.dtype]
        item = dtype.itemsize
        location = "cpu" if _is_numpy(arr) else f"cuda:{arr.device.id}"
        block = self._block_for(arr, item)
        if block is not None:
            offset, strides = _address(arr) - block.start, arr.strides
            span = sum((n - 1) * s for n, s in zip(arr.shape, strides)) + item if arr.size else 0
            if (offset % item == 0 and all(s % item == 0 and s >= 0 for s in strides)
                    and 0 <= offset and offset + span <= block.nbytes):
                if block.ref is None:
                    block.ref, block.dtype = self._new_storage(block.root, dtype, location, block.nbytes), dtype
                elif block.dtype is not dtype:
                    raise RuntimeError("Cannot save multiple tensors or storages that view the same data as "
                                       "different types")
                elems = tuple(s // item for s in strides)
                if arr.size == 0 and not any(elems):  # NumPy zeroes an empty array's strides; torch's are (3, 1)
                    elems = _contiguous_strides(arr.shape)
                return block.ref, offset // item, tuple(arr.shape), elems
        # Negative or misaligned strides, or memory no tensor geometry can describe: a compact copy of its own.
        compact = arr.copy(order="C")
        ref = self._new_storage(compact, dtype, location, compact.nbytes)
        return ref, 0, tuple(arr.shape), _contiguous_strides(arr.shape)

    def raw_records(self):
        """Yield ``(key, 1-D uint8 host array, dtype)`` per storage in key order (device storages copied one by one)."""
        for key, root, dtype in self.records:
            yield key, _raw_bytes(root), dtype


# -- tensors ----------------------------------------------------------------------------------------------------------
_INTERNAL_FIELDS = None


def tensor_user_state(t) -> dict:
    """The Python attributes a user set on a tensor (what PyTorch pickles as the tensor's state)."""
    global _INTERNAL_FIELDS
    if _INTERNAL_FIELDS is None:
        from .nn.parameter import _TENSOR_FIELDS

        # Instance fields that autograd and views keep on tensors: class-level defaults, the parameter module's
        # list, and the weak reference to a leaf's AccumulateGrad node.
        _INTERNAL_FIELDS = frozenset(_TENSOR_FIELDS) | {k for k in vars(Tensor) if k.startswith("_")} | {"_acc_ref"}
    return {k: v for k, v in t.__dict__.items() if k not in _INTERNAL_FIELDS}


def _reduce_tensor(table, t):
    from .nn.parameter import Parameter

    if t.is_sparse:  # as torch: the layout, then (indices, values, size, coalesced), pickled as tensors of their own
        return REBUILD_SPARSE, (t.layout, (t._indices(), t._values(), t.size(), t.is_coalesced()))
    if isinstance(t, Parameter):
        data = Tensor._make(t._data)
        state = tensor_user_state(t)
        args = (data, t._requires_grad, OrderedDict())
        if type(t) is Parameter:
            if state:
                return REBUILD_PARAMETER_WITH_STATE, args + (state,)
            return REBUILD_PARAMETER, args
        return REBUILD_FROM_TYPE_V2, (REBUILD_PARAMETER, type(t), args, state)
    if t.is_meta:  # as torch: the geometry alone (a meta tensor's storage is the whole zero mapping)
        rebuild, args = REBUILD_META, (t.dtype, tuple(t.shape), t.stride(), t._requires_grad)
    else:
        ref, offset, size, stride = table.reference(t._data)
        args = (ref, offset, size, stride, t._requires_grad, OrderedDict())
        rebuild = REBUILD_TENSOR_V2
        if t.dtype.name not in STORAGE_NAMES:  # an untyped storage: torch's v3 names the dtype
            rebuild, args = REBUILD_TENSOR_V3, args + (t.dtype,)
    state = tensor_user_state(t)
    if type(t) is Tensor and not state:
        return rebuild, args
    new_type = TORCH_TENSOR if type(t) is Tensor else type(t)
    return REBUILD_FROM_TYPE_V2, (rebuild, new_type, args, state)


def make_pickler(stream, protocol: int, table: StorageTable, pickle_module=pickle):
    """A pickler writing torch's tensor format into ``stream``; storages are collected into ``table``."""
    base = pickle._Pickler if pickle_module is pickle else pickle_module.Pickler
    if not isinstance(getattr(base, "dispatch", None), dict):
        raise TypeError(f"jitorch.save needs a pickle module whose Pickler is written in Python (a subclass of "
                        f"pickle._Pickler) to write torch's global names; {pickle_module!r} has none")

    class TorchFormatPickler(base):
        dispatch = dict(base.dispatch)
        dispatch[TorchGlobal] = _save_torch_global
        dispatch[_dtype.dtype] = _save_dtype

        def persistent_id(self, obj):
            return obj.pid if type(obj) is _StorageRef else None

        def reducer_override(self, obj):
            if isinstance(obj, Tensor):
                return _reduce_tensor(table, obj)
            cls = type(obj)
            if cls is _device:
                return TORCH_DEVICE, (obj.type,) if obj.index is None else (obj.type, obj.index)
            if cls is Size:
                return TORCH_SIZE, (tuple(int(s) for s in obj),)
            if cls is _dtype.layout:  # as torch.save writes torch.strided
                return TORCH_GET_LAYOUT, (f"torch.{obj.name}",)
            return NotImplemented

    return TorchFormatPickler(stream, protocol)

