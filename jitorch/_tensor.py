"""``jitorch.Tensor``: an array of the device's array module (NumPy or CuPy) plus autograd fields.

Views are array views: they share memory with their base, and writes through them reach it. The version counter lives
on the root tensor that owns the memory, so views and ``detach()`` aliases share it, as in PyTorch.
Operators and most methods are bound by the op modules (``jitorch/ops``); this file holds the tensor's own state,
and binds the methods of ``_tensor_autograd.py``, ``_tensor_values.py`` and ``_tensor_pickle.py`` as its own.

>>> import jitorch
>>> x = jitorch.arange(6.0).view(2, 3)
>>> x.t().is_contiguous(), x.stride(), x.shape
(False, (3, 1), jitorch.Size([2, 3]))
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from . import _subclass, _tensor_autograd, _tensor_pickle, _tensor_values
from ._device import device as _device_cls
from ._shape import _contiguous_strides
from ._grad_state import GradState
from ._memory_format import is_contiguous_as
from .runtime import array_device
from .runtime.host_pointer import data_address
from .runtime.meta import MetaArray, offset_of as meta_offset

__all__ = ["Tensor", "Size"]


_tuple_item = tuple.__getitem__
_CPU = _device_cls("cpu")
_ELEMENT_STRIDES: dict = {}  # (byte strides, itemsize) -> element strides


class Size(tuple):
    """``jitorch.Size``: a tuple of ints with PyTorch's repr."""

    def __repr__(self):
        return f"jitorch.Size([{', '.join(str(int(s)) for s in self)}])"

    @classmethod
    def _from_leaves(cls, values):
        """A pytree map's result: a Size of ints, else a tuple (as torch's)."""
        return cls(values) if all(type(d) is int for d in values) else tuple(values)

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, item):  # (``x.shape[0]`` in every loop: a global read, not ``tuple``'s attribute)
        if type(item) is slice:
            return Size(_tuple_item(self, item))
        return _tuple_item(self, item)

    # Concatenation and repetition stay Sizes, as torch's (``batch_shape + event_shape``, ``shape[:-1] + (n,)``).
    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(other, self))

    def __mul__(self, n):
        return Size(tuple.__mul__(self, n))

    __rmul__ = __mul__




class Tensor:
    """A multi-dimensional array with autograd, PyTorch's ``torch.Tensor``.

    ``Tensor(data)`` and ``Tensor(*sizes)`` are the legacy constructors (default float dtype).
    """

    # Class-level defaults keep tensor creation to one attribute store (``_data``) on the hot path.
    grad_fn = None
    _output_nr = 0
    _requires_grad = False
    _grad = None
    _base = None  # the tensor this one is a view of (PyTorch's ``._base``)
    _own_offset = 0  # storage offset of a tensor that views no tensor (nonzero when rebuilt over a loaded storage)
    _ver_owner = None  # the tensor holding the version counter, when it is not this one
    _ver = 0
    _vc = None  # the version as a shared list, created when a saved output needs it (see _version_counter)
    _view_chain = None  # ((op, attrs), ...) that rebuilds this view from ``_base``
    _view_ver = 0  # the base's version when this view's history was last built
    _nograd_view = None  # autograd.view_creation.ViewCreation of a view made without history (or by a Function)
    _hooks = None
    _post_acc_hooks = None
    _acc_node = None  # the leaf's AccumulateGrad node, kept once it has hooks
    _retains_grad = False
    _inference = False  # made inside inference_mode (set where tensors are made: _make and the dispatcher)
    # ``ndarray + Tensor`` reaches ``Tensor.__radd__``: NumPy defers a binary operator to an operand of higher
    # priority. A NumPy function of a tensor (``np.exp(t)``) computes on its array and hands the result to
    # ``__array_wrap__``, a tensor again, as torch's does.
    __array_priority__ = 1000

    # torch's protocol for the user's subclasses (_subclass.py): run ``func``, its results made ``cls`` instances
    __torch_function__ = classmethod(_subclass.torch_function)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _subclass.register(cls)  # a user's subclass hears calls from now on

    def __new__(cls, *args, device=None):
        t = cls._legacy_new(*args, device=device)
        if cls is Tensor:
            return t
        sub = object.__new__(cls)  # ``MyTensor(data)`` is a MyTensor (and Python then runs its __init__), as torch's
        sub.__dict__.update(t.__dict__)
        return sub

    @staticmethod
    def _legacy_new(*args, device=None):
        from . import _creation

        if not args:  # torch.Tensor() is an empty 1-D tensor, the start of ``preds = torch.cat([preds, p])`` loops
            return _creation.empty(0, dtype=_dtype.get_default_dtype(), device=device)
        if len(args) == 1 and not isinstance(args[0], (int, Size)):  # a Size is sizes, not data
            data = args[0]
            if isinstance(data, Tensor):  # torch's alias: the same memory and dtype, AliasBackward0 in the graph
                return data[...]
            return _creation.tensor(data, dtype=_dtype.get_default_dtype(), device=device)
        return _creation.empty(*args, dtype=_dtype.get_default_dtype(), device=device)

    @staticmethod
    def _make(data):
        t = object.__new__(Tensor)
        t._data = data
        if GradState.inference:
            t._inference = True
        return t

    # -- storage and geometry ---------------------------------------------------------------------------------
    def _root(self):
        return self._ver_owner if self._ver_owner is not None else self

    @property
    def _version(self):
        return (self._ver_owner if self._ver_owner is not None else self)._ver

    def _bump_version(self, times=1):
        root = self._ver_owner if self._ver_owner is not None else self
        root._ver += times
        if root._vc is not None:
            root._vc[0] = root._ver

    def _version_counter(self):
        """A shared one-element list tracking the version, for holders that must not keep the tensor alive."""
        root = self._ver_owner if self._ver_owner is not None else self
        if root._vc is None:
            root._vc = [root._ver]
        return root._vc

    @property
    def shape(self):
        return Size(self._data.shape)

    def size(self, dim=None):
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[self._size_dim(dim, "size")]

    def _size_dim(self, dim, op):
        if not self._data.ndim and isinstance(dim, (int, np.integer)):  # a 0-d tensor has no size or stride to give
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        return self._wrap_dim(dim, op)

    def _wrap_dim(self, dim, op):
        nd = self._data.ndim
        if type(dim) is int and -nd <= dim < nd:  # the common case; 0-d tensors and the rest check below
            return dim + nd if dim < 0 else dim
        lo, hi = (-1, 0) if nd == 0 else (-nd, nd - 1)
        if not isinstance(dim, (int, np.integer)) or not lo <= dim <= hi:
            raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
        return dim % nd if nd else 0

    @property
    def dtype(self):
        return _dtype.FROM_NP[self._data.dtype]

    @property
    def device(self):
        if type(self._data) is np.ndarray:  # ``device=x.device`` in every forward: one type check, no lookup
            return _CPU
        kind, index = array_device(self._data)
        return _device_cls(kind, index)

    @property
    def is_cuda(self):
        return type(self._data) is not np.ndarray and type(self._data) is not MetaArray

    is_cpu = property(lambda self: type(self._data) is np.ndarray)
    is_meta = property(lambda self: type(self._data) is MetaArray)
    is_xpu = is_sparse = is_sparse_csr = is_quantized = is_mkldnn = property(lambda self: False)
    is_nested = False

    def dim(self):
        return self._data.ndim

    ndim = property(dim)

    def numel(self):
        return int(self._data.size)

    nelement = numel

    def element_size(self):
        return self._data.itemsize

    itemsize = property(element_size)
    nbytes = property(lambda self: int(self._data.nbytes))

    def stride(self, dim=None):
        data = self._data
        key = (data.strides, data.itemsize)
        strides = _ELEMENT_STRIDES.get(key)
        if strides is None:
            item = data.itemsize
            strides = tuple([s // item for s in data.strides])
            if len(_ELEMENT_STRIDES) < 4096:  # a model has a few hundred layouts; the cap bounds odd workloads
                _ELEMENT_STRIDES[key] = strides
        if not data.size and not any(strides):
            # NumPy zeroes every stride of an empty array; torch keeps the contiguous ones: zeros(0, 3) is (3, 1).
            strides = _contiguous_strides(data.shape)
        return strides if dim is None else strides[self._size_dim(dim, "stride")]

    def data_ptr(self):
        data = self._data
        if type(data) is np.ndarray:
            return data_address(data)
        if type(data) is MetaArray:
            return 0
        return int(data.data.ptr)

    def storage_offset(self):
        if type(self._data) is MetaArray:  # every meta storage starts where the array's address space does
            return meta_offset(self._data)
        root = self._base if self._base is not None else self._root()
        if root is self:
            return self._own_offset
        if _views_other_memory(self._data, root._data):  # the base was pointed elsewhere since (set_, .data =)
            return (self.data_ptr() - _memory_address(self._data)) // self._data.itemsize
        return root.storage_offset() + (self.data_ptr() - root.data_ptr()) // self._data.itemsize

    def is_contiguous(self, memory_format=None):
        if memory_format is None:  # the common call: no layout lookup
            return bool(self._data.flags.c_contiguous)
        return is_contiguous_as(self._data, memory_format)

    def is_floating_point(self):
        return self._data.dtype.kind == "f" or self.dtype is _dtype.bfloat16

    def is_complex(self):
        return self._data.dtype.kind == "c"

    def is_signed(self):
        return self.dtype.is_signed

    # -- autograd state (_tensor_autograd.py) -----------------------------------------------------------------------
    requires_grad = _tensor_autograd.requires_grad
    requires_grad_ = _tensor_autograd.requires_grad_
    is_leaf = _tensor_autograd.is_leaf
    grad = _tensor_autograd.grad
    output_nr = _tensor_autograd.output_nr
    data = _tensor_autograd.data
    _make_subclass = _subclass.make_subclass
    as_subclass = _subclass.as_subclass
    detach = _tensor_autograd.detach
    detach_ = _tensor_autograd.detach_
    retains_grad = _tensor_autograd.retains_grad
    retain_grad = _tensor_autograd.retain_grad
    register_hook = _tensor_autograd.register_hook
    register_post_accumulate_grad_hook = _tensor_autograd.register_post_accumulate_grad_hook
    backward = _tensor_autograd.backward
    _inplace_accumulate = _tensor_autograd._inplace_accumulate
    is_inference = _tensor_autograd.is_inference

    # -- values read out and the printed form (_tensor_values.py) ---------------------------------------------------
    item = _tensor_values.item
    tolist = _tensor_values.tolist
    _host = _tensor_values._host
    numpy = _tensor_values.numpy
    __array__ = _tensor_values.__array__
    __array_wrap__ = _tensor_values.__array_wrap__
    __dlpack__ = _tensor_values.__dlpack__
    __dlpack_device__ = _tensor_values.__dlpack_device__
    __cuda_array_interface__ = _tensor_values.__cuda_array_interface__
    record_stream = _tensor_values.record_stream
    __len__ = _tensor_values.__len__
    __iter__ = _tensor_values.__iter__
    __contains__ = _tensor_values.__contains__
    _scalar_for = _tensor_values._scalar_for
    __bool__ = _tensor_values.__bool__
    __int__ = _tensor_values.__int__
    __float__ = _tensor_values.__float__
    __complex__ = _tensor_values.__complex__
    __index__ = _tensor_values.__index__
    __format__ = _tensor_values.__format__
    __repr__ = _tensor_values.__repr__
    __str__ = _tensor_values.__str__

    # -- pickling and deepcopy (_tensor_pickle.py) ------------------------------------------------------------------
    __reduce_ex__ = _tensor_pickle.__reduce_ex__
    __deepcopy__ = _tensor_pickle.__deepcopy__
    __hash__ = object.__hash__


# Methods defined in the helper files name themselves as Tensor's own, as before the split: pickle and fx find them
# through ``jitorch._tensor.Tensor``, and bound methods repr as "<bound method Tensor.item of ...>".
for _name, _value in list(vars(Tensor).items()):
    for _fn in (_value.fget, _value.fset, _value.fdel) if isinstance(_value, property) else (
            getattr(_value, "__func__", _value),):
        if getattr(_fn, "__module__", None) in (_tensor_autograd.__name__, _tensor_values.__name__,
                                                      _tensor_pickle.__name__):
            _fn.__module__, _fn.__qualname__ = __name__, f"Tensor.{_name}"
_tensor_autograd.Tensor = _tensor_values.Tensor = _tensor_pickle.Tensor = Tensor
del _name, _value, _fn



def _views_other_memory(arr, base_arr):
    """Whether ``arr`` lies outside the memory block ``base_arr`` views (NumPy arrays; others are assumed inside)."""
    if not (isinstance(arr, np.ndarray) and isinstance(base_arr, np.ndarray)):
        return False
    from ._storage import _memory_root

    return _memory_root(arr) is not _memory_root(base_arr)


def _memory_address(arr):
    from ._storage import _address, _memory_root

    return _address(_memory_root(arr))
