"""Storages: the memory behind tensors, ``Tensor.untyped_storage()`` and ``Tensor.storage()`` (PyTorch's
``torch.UntypedStorage`` and ``torch.TypedStorage``).

A storage is a 1-D uint8 array (NumPy or CuPy) over the whole block of memory a tensor's array views, so every view of
one tensor reports the same ``data_ptr()``: the usual test of whether two tensors share memory, as after
``jitorch.load`` of tensors that were saved sharing a storage. Writes through a storage reach the tensors.

>>> import jitorch
>>> x = jitorch.arange(6.0).view(2, 3)
>>> x[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr(), x.untyped_storage().nbytes()
(True, 24)
"""
from __future__ import annotations

import warnings

import numpy as np

from . import _dtype
from ._device import device as _device
from ._tensor import Tensor
from .runtime import move_array
from .runtime.meta import MetaArray, dense_strides_like, empty as meta_empty

__all__ = ["UntypedStorage", "TypedStorage", "deepcopy_array"]


def _address(arr) -> int:
    return arr.__array_interface__["data"][0] if isinstance(arr, np.ndarray) else int(arr.data.ptr)


def _memory_root(arr):
    """The array owning ``arr``'s memory: the deepest array along the ``.base`` chain (through non-array holders)."""
    array_type = np.ndarray if isinstance(arr, np.ndarray) else type(arr)
    root, obj = arr, arr.base
    while obj is not None:
        if isinstance(obj, array_type):
            root = obj
        obj = getattr(obj, "base", None)
    return root


def _byte_view(arr):
    """The bytes of ``arr``'s whole memory block as a 1-D uint8 view (no copy), or None when no view spans it."""
    root = _memory_root(arr)
    if root.flags.c_contiguous:
        return root.reshape(-1).view(np.uint8)
    if root.flags.f_contiguous:
        return root.T.reshape(-1).view(np.uint8)
    return None


def deepcopy_array(arr, memo):
    """``arr``'s copy for ``copy.deepcopy``: the block of memory it views is copied once per deepcopy (``memo``), and
    the copy views it where ``arr`` viewed the original, so tensors sharing memory (a buffer that is a slice of
    another) still share it after ``copy.deepcopy(model)``, as torch's tensors sharing a storage do.

    >>> base = np.arange(4.0)
    >>> memo = {}
    >>> b2, v2 = deepcopy_array(base, memo), deepcopy_array(base[1:3], memo)
    >>> v2[0] = 100.0
    >>> b2.tolist(), base.tolist()
    ([0.0, 100.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0])
    """
    if not isinstance(arr, np.ndarray):
        return arr.copy()  # device arrays: a copy of their own
    if type(arr) is MetaArray:  # no memory to share (its root is the whole zero mapping): a clone, as torch's
        return meta_empty(arr.shape, arr.dtype, dense_strides_like(arr))
    root = _memory_root(arr)
    if not (root.flags.c_contiguous or root.flags.f_contiguous):
        return arr.copy()  # memory no byte view spans (rare): a copy of its own
    key = ("jitorch.deepcopy.memory", id(root))
    block = memo.get(key)
    if block is None:
        block = memo[key] = _byte_view(root.copy(order="K"))
        memo.setdefault(id(memo), []).append(root)  # the original stays alive while its id keys the memo
    return np.ndarray(arr.shape, arr.dtype, buffer=block, offset=_address(arr) - _address(root), strides=arr.strides)


class UntypedStorage:
    """Bytes of memory on one device, viewed by tensors.

    ``dtype`` is the element type a checkpoint declared for the storage (``uint8`` for untyped storages); indexing,
    ``tolist`` and ``size`` are in bytes, as PyTorch's.
    """

    def __init__(self, array, dtype=_dtype.uint8):
        self._array = array
        self.dtype = dtype

    @property
    def device(self):
        if type(self._array) is MetaArray:
            return _device("meta")
        return _device("cpu") if isinstance(self._array, np.ndarray) else _device("cuda", int(self._array.device.id))

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def data_ptr(self) -> int:
        # torch reports 0 for an empty storage, which allocated nothing, and for a meta one, which has no memory
        return _address(self._array) if self._array.size and type(self._array) is not MetaArray else 0

    def nbytes(self) -> int:
        return int(self._array.size)

    def size(self) -> int:
        return self.nbytes()

    __len__ = size

    def element_size(self) -> int:
        return 1

    def untyped(self):
        return self

    def is_shared(self) -> bool:
        return False

    def is_pinned(self, device="cuda") -> bool:
        return False

    def tolist(self):
        return self._host().tolist()

    def _host(self):
        return self._array if isinstance(self._array, np.ndarray) else self._array.get()

    def _check_index(self, idx):
        if isinstance(idx, slice):
            return idx
        n = self.nbytes()
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for storage of size {n}")
        return idx

    def __getitem__(self, idx):
        item = self._array[self._check_index(idx)]
        return UntypedStorage(item) if isinstance(idx, slice) else int(item)

    def __setitem__(self, idx, value):
        self._array[self._check_index(idx)] = value

    def fill_(self, value):
        self._array.fill(value)
        return self

    def copy_(self, source, non_blocking=None):
        if source.nbytes() != self.nbytes():
            raise RuntimeError(f"copy_: storages must have the same size, got {source.nbytes()} bytes into "
                               f"{self.nbytes()}")
        src = source._array
        self._array[...] = src if type(src) is type(self._array) else move_array(src, self.device.type,
                                                                                    self.device.index or 0)
        return self

    def clone(self):
        return UntypedStorage(self._array.copy(), self.dtype)

    def cpu(self):
        """This storage on the CPU (itself when it is there)."""
        return self if not self.is_cuda else UntypedStorage(move_array(self._array, "cpu"), self.dtype)

    def cuda(self, device=None, non_blocking=False):
        """This storage on a CUDA device (``device``: an index, a device or None for the current one)."""
        index = _device(device).index if isinstance(device, (str, _device)) else device
        return UntypedStorage(move_array(self._array, "cuda", index or 0), self.dtype)

    def to(self, *, device=None, non_blocking=False):
        dev = _device(device)
        return self.cpu() if dev.type == "cpu" else self.cuda(dev.index)

    def __repr__(self):
        return f"jitorch.UntypedStorage(nbytes={self.nbytes()}, device={self.device})"


class TypedStorage:
    """A storage seen as elements of one dtype (``Tensor.storage()``, deprecated in PyTorch for ``UntypedStorage``)."""

    def __init__(self, untyped, dtype):
        self._untyped_storage = untyped
        self.dtype = dtype

    @property
    def device(self):
        return self._untyped_storage.device

    @property
    def is_cuda(self) -> bool:
        return self._untyped_storage.is_cuda

    def _elements(self):
        raw = self._untyped_storage._array
        usable = raw.size - raw.size % self.dtype.itemsize
        return raw[:usable].view(self.dtype.np)

    def untyped(self):
        return self._untyped_storage

    def data_ptr(self) -> int:
        return self._untyped_storage.data_ptr()

    def nbytes(self) -> int:
        return self._untyped_storage.nbytes()

    def element_size(self) -> int:
        return self.dtype.itemsize

    def size(self) -> int:
        return self.nbytes() // self.dtype.itemsize

    __len__ = size

    def tolist(self):
        return Tensor._make(self._elements()).tolist()

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            raise RuntimeError("slices are only supported in UntypedStorage.__getitem__")
        elements = self._elements()
        n = self.size()
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for storage of size {n}")
        # through a one-element tensor, so bfloat16 and CUDA elements come back as Python numbers too
        return Tensor._make(elements[idx:idx + 1 or None]).tolist()[0]

    def __setitem__(self, idx, value):
        self._elements()[idx] = value

    def fill_(self, value):
        self._elements().fill(value)
        return self

    def __repr__(self):
        return f"jitorch.TypedStorage(dtype={self.dtype}, device={self.device}) of size {self.size()}"


_TYPED_STORAGE_WARNING = ("TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the "
                          "only storage class. This should only matter to you if you are using storages directly.  To "
                          "access UntypedStorage directly, use tensor.untyped_storage() instead of tensor.storage()")
_warned_typed_storage = False


def _untyped_storage(self):
    """The storage of this tensor's memory block (shared by all its views).

    It starts ``storage_offset()`` elements before the tensor, as in PyTorch: at the block's start for views of a
    tensor, at the array's own start for ``from_numpy`` of a sliced array (which PyTorch cannot see past).
    """
    if type(self._data) is MetaArray:
        # No memory block to find (every meta array views the same zero mapping): as many bytes as the geometry of
        # the tensor this one views reaches, which is what torch allocated for it.
        base = self._root()
        span = 1 + sum((n - 1) * st for n, st in zip(base.shape, base.stride())) if base.numel() else 0
        return UntypedStorage(meta_empty(((base.storage_offset() + span) * base.element_size(),), np.uint8))
    raw = _byte_view(self._data)
    if raw is None:  # memory no single view spans (an unusual NumPy base): this tensor's own bytes
        raw = self._data.reshape(-1).view(np.uint8) if self._data.flags.c_contiguous else None
        if raw is None:
            raise RuntimeError(f"untyped_storage: the tensor of shape {tuple(self.shape)} and strides "
                               f"{self.stride()} views memory that no storage can describe")
        return UntypedStorage(raw)
    start = self.data_ptr() - self.storage_offset() * self.element_size() - _address(raw) if self._data.size else 0
    return UntypedStorage(raw[start:] if 0 < start <= raw.size else raw)


def _storage(self):
    """The storage as elements of this tensor's dtype; PyTorch warns (once) that ``TypedStorage`` is deprecated."""
    global _warned_typed_storage
    if not _warned_typed_storage:
        warnings.warn(_TYPED_STORAGE_WARNING, UserWarning, stacklevel=2)
        _warned_typed_storage = True
    return TypedStorage(_untyped_storage(self), self.dtype)


Tensor.untyped_storage = _untyped_storage
Tensor.storage = _storage
