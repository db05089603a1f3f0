"""``Tensor.set_``: point a tensor at other memory (another tensor's, a storage's, or none), as torch's. Weight-sharing
and parameter-swapping code calls it under ``no_grad``; views taken before keep the old memory, as in torch.

>>> import jitorch
>>> a, b = jitorch.zeros(3), jitorch.arange(6.).reshape(2, 3)
>>> a.set_(b) is a, a.shape, a.data_ptr() == b.data_ptr()
(True, jitorch.Size([2, 3]), True)
"""
from __future__ import annotations

from ._grad_state import GradState
from ._storage import TypedStorage, UntypedStorage
from ._tensor import Tensor

__all__ = []


def _dtype_word(dtype):
    """torch's C type word for a dtype in this message ("float", "double", "long"...)."""
    words = {"float32": "float", "float64": "double", "int64": "long", "int32": "int", "int16": "short",
             "int8": "char", "uint8": "unsigned char", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
             "bool": "bool", "complex64": "c10::complex<float>", "complex128": "c10::complex<double>"}
    name = str(dtype).rpartition(".")[2]
    return words.get(name, name)


def _scalar_type_name(dtype):
    """torch's ScalarType name of a dtype ("Float", "Long", "BFloat16"...)."""
    names = {"float32": "Float", "float64": "Double", "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
             "uint8": "Byte", "float16": "Half", "bfloat16": "BFloat16", "bool": "Bool", "complex64": "ComplexFloat",
             "complex128": "ComplexDouble"}
    name = str(dtype).rpartition(".")[2]
    return names.get(name, name)


def _strided(flat, offset, size, stride, xp):
    itemsize = flat.itemsize
    needed = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    if offset < 0 or any(s < 0 for s in stride) or needed > flat.size:
        raise RuntimeError(f"set_: storage of {flat.size} elements is too small for size {list(size)}, stride "
                           f"{list(stride)} and storage offset {offset}")
    return xp.lib.stride_tricks.as_strided(flat[offset:] if flat.size else flat, tuple(size),
                                           tuple(s * itemsize for s in stride))


def _from_storage(self, storage, offset, size, stride):
    from ._dispatch import _xp_of

    if isinstance(storage, TypedStorage):
        if storage.dtype != self.dtype:
            raise RuntimeError(f"Expected a Storage of type {_dtype_word(self.dtype)} or an UntypedStorage, but got "
                               f"type {_scalar_type_name(storage.dtype)} for argument 1 'storage'")
        storage = storage.untyped()
    raw = storage._array
    if str(storage.device) != str(self.device):
        raise RuntimeError(f"set_: the storage is on {storage.device} and the tensor on {self.device}; move one of "
                           "them first")
    dt = self._data.dtype
    usable = raw.size - raw.size % dt.itemsize
    flat = raw[:usable].view(dt)
    size = (flat.size,) if size is None else tuple(int(n) for n in size)
    if stride is None:
        stride, running = [], 1
        for n in reversed(size):
            stride.insert(0, running)
            running *= max(n, 1)
    return _strided(flat, int(offset), size, tuple(int(s) for s in stride), _xp_of(raw))


def _set_(self, source=None, storage_offset=0, size=None, stride=None):
    """Makes ``self`` view ``source``'s memory (a Tensor: its sizes and strides too; a storage: ``size``/``stride``
    from ``storage_offset``, the whole storage as 1-D by default), or no memory with no argument.

    >>> import jitorch
    >>> x = jitorch.zeros(2)
    >>> x.set_().shape
    jitorch.Size([0])
    """
    if self.requires_grad and GradState.enabled:
        if self.is_leaf:
            raise RuntimeError("set_: a leaf Variable that requires grad is being used in an in-place operation.")
        raise RuntimeError("set_: not supported on a tensor with autograd history; detach it or call set_ under "
                           "jitorch.no_grad()")
    offset = 0
    if source is None:
        new = self._data[:0].reshape(0) if self._data.size else self._data.reshape(0)
        new = new.copy()
    elif isinstance(source, Tensor):
        if source.dtype != self.dtype:
            raise RuntimeError(f"Could not set tensor of type {_dtype_word(source.dtype)} to a tensor of type "
                               f"{_dtype_word(self.dtype)}")
        if source.device != self.device:
            raise RuntimeError(f"set_: the source is on {source.device} and the tensor on {self.device}; move one "
                               "of them first")
        new, offset = source._data, source.storage_offset()
    elif isinstance(source, (UntypedStorage, TypedStorage)):
        new, offset = _from_storage(self, source, storage_offset, size, stride), int(storage_offset)
    else:
        raise TypeError(f"set_(): expected a Tensor or a storage as source, got {type(source).__name__}")
    self._bump_version()
    version = self._version
    # As the .data setter: the tensor now views new memory, so it is no longer a view of its old base; a former
    # view takes its own counter on from the shared one's value.
    self._data = new
    if self._ver_owner is not None:
        self._ver, self._vc = version, None
    self._base = self._ver_owner = self._view_chain = None
    self._own_offset = offset
    return self


def _as_strided_(self, size, stride, storage_offset=None):
    """``as_strided`` in place: ``self`` becomes that view of its own memory.

    >>> import jitorch
    >>> t = jitorch.arange(6.)
    >>> t.as_strided_((2, 2), (1, 2)).tolist()
    [[0.0, 2.0], [1.0, 3.0]]
    """
    if self.requires_grad and GradState.enabled:
        raise RuntimeError("as_strided_: a leaf Variable that requires grad is being used in an in-place operation."
                           if self.is_leaf else "as_strided_: not supported on a tensor with autograd history")
    offset = self.storage_offset() if storage_offset is None else int(storage_offset)
    view = self.as_strided(size, stride, offset)
    self._data = view._data
    if self._base is None and self._ver_owner is None:   # a view's offset follows from its base's memory
        self._own_offset = offset
    self._bump_version()   # saved copies of the old geometry must not be read as if unchanged
    return self


Tensor.set_ = _set_
Tensor.as_strided_ = _as_strided_