"""``jitorch.Tensor``: an array of the device's array module (NumPy or CuPy) plus autograd fields.

Views are array views: they share memory with their base, and writes through them reach it. The version counter lives
on the root tensor that owns the memory, so views and ``detach()`` aliases share it, as in PyTorch.
Operators and most methods are bound by the op modules (``jitorch/ops``); this file holds the tensor's own state.

>>> import jitorch
>>> x = jitorch.arange(6.0).view(2, 3)
>>> x.t().is_contiguous(), x.stride(), x.shape
(False, (3, 1), jitorch.Size([2, 3]))
"""
from __future__ import annotations

import copy
import numpy as np

from . import _dtype
from ._device import device as _device_cls
from ._shape import _contiguous_strides
from ._grad_state import GradState
from ._memory_format import is_contiguous_as
from .runtime import array_device
from .runtime.host_pointer import data_address
from .runtime.meta import MetaArray, offset_of as meta_offset

__all__ = ["Tensor", "Size"]

_SCALAR_OF_GRAD_WARNED = []  # torch's float()/complex() warning is TORCH_WARN_ONCE: once per process


def _warn_scalar_of_grad(t):
    if t._requires_grad and GradState.enabled and not _SCALAR_OF_GRAD_WARNED:
        import warnings

        _SCALAR_OF_GRAD_WARNED.append(True)
        warnings.warn("Converting a tensor with requires_grad=True to a scalar may lead to unexpected behavior.\n"
                      "Consider using tensor.detach() first.", UserWarning, stacklevel=3)


# ``jitorch.autograd.backward``, bound at the first ``Tensor.backward``: autograd imports this module, so it cannot be
# imported here, and an import statement in the method cost half a microsecond per call.
_AUTOGRAD_BACKWARD = None


def _bind_autograd_backward():
    global _AUTOGRAD_BACKWARD
    from .autograd import backward

    _AUTOGRAD_BACKWARD = backward
    return backward


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

    def __getitem__(self, item):
        out = tuple.__getitem__(self, item)
        return Size(out) if isinstance(item, slice) else out

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


def _meta_read_error(what):
    """torch's refusal to read a meta tensor's value (``item()``, ``numpy()``)."""
    if what == "item":
        return RuntimeError("Tensor.item() cannot be called on meta tensors")
    return TypeError("can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
                     "memory first.")


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

    def __new__(cls, *args, device=None):
        from . import _creation

        if not args:  # torch.Tensor() is an empty 1-D tensor, the start of ``preds = torch.cat([preds, p])`` loops
            return _creation.empty(0, dtype=_dtype.get_default_dtype(), device=device)
        if len(args) == 1 and not isinstance(args[0], (int, Size)):  # a Size is sizes, not data
            data = args[0]
            if isinstance(data, Tensor):
                return data.to(_dtype.get_default_dtype()) if data.dtype.category == _dtype.FLOAT else data.float()
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

    def _bump_version(self):
        root = self._ver_owner if self._ver_owner is not None else self
        root._ver += 1
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
        return self._data.shape[self._wrap_dim(dim, "size")]

    def _wrap_dim(self, dim, op):
        nd = self._data.ndim
        lo, hi = (-1, 0) if nd == 0 else (-nd, nd - 1)
        if not isinstance(dim, (int, np.integer)) or not lo <= dim <= hi:
            raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
        return dim % nd if nd else 0

    @property
    def dtype(self):
        return _dtype.FROM_NP[self._data.dtype]

    @property
    def device(self):
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
        item = self._data.itemsize
        strides = tuple(s // item for s in self._data.strides)
        if self._data.size == 0 and not any(strides):
            # NumPy zeroes every stride of an empty array; torch keeps the contiguous ones: zeros(0, 3) is (3, 1).
            strides = _contiguous_strides(self._data.shape)
        return strides if dim is None else strides[self._wrap_dim(dim, "stride")]

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

    # -- autograd state ---------------------------------------------------------------------------------------
    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        if self.grad_fn is not None:
            if requires_grad:
                return self
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a computed variable in "
                "a subgraph that doesn't require differentiation use var_no_grad = var.detach()."
            )
        if requires_grad and self._data.dtype.kind not in "fc" and self.dtype is not _dtype.bfloat16:
            raise RuntimeError("only Tensors of floating point and complex dtype can require gradients")
        if requires_grad and self._inference and not GradState.inference:
            raise RuntimeError("Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.")
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def is_leaf(self):
        return self.grad_fn is None

    @property
    def grad(self):
        if self.grad_fn is not None and not self._retains_grad and self._grad is None:
            import warnings

            warnings.warn("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
                          "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
                          "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor.",
                          UserWarning, stacklevel=2)
        return self._grad

    @property
    def output_nr(self):
        return self._output_nr

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of {type(value).__name__}")
            if (value.shape if value.is_sparse else value._data.shape) != self._data.shape:  # a sparse .grad: as torch
                raise RuntimeError(f"assigned grad has data of a different size: {tuple(value.shape)} vs "
                                   f"{tuple(self.shape)}")
            if value.dtype is not self.dtype:
                raise RuntimeError(f"assigned grad has data of a different type: {value.dtype} vs {self.dtype}")
        self._grad = value

    @grad.deleter
    def grad(self):
        self._grad = None

    @property
    def data(self):
        """An alias of the values with no autograd history and its own version counter (PyTorch's ``.data``)."""
        return Tensor._make(self._data)

    @data.setter
    def data(self, value):
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        # The tensor now owns new memory: it is no longer a view, and its old base must not be kept alive.
        self._data = value._data
        self._base = self._ver_owner = self._view_chain = None

    @staticmethod
    def _make_subclass(cls, data, require_grad=False, dispatch_strides=False, dispatch_device=False,
                       device_for_backend_keys=None):
        """torch's constructor helper for ``Tensor`` subclasses (``Parameter`` subclasses call it from ``__new__``):
        a ``cls`` leaf over ``data``'s memory, requiring grad as asked."""
        if not (isinstance(cls, type) and issubclass(cls, Tensor)):
            raise TypeError(f"_make_subclass(): argument 'cls' must be a subclass of Tensor, not {cls!r}")
        sub = object.__new__(cls)
        sub._data = data._data
        sub.requires_grad_(bool(require_grad))
        return sub

    def as_subclass(self, cls):
        """``self``'s data as a ``cls`` instance (a ``Tensor`` subclass), sharing memory and attached to the autograd
        graph, as torch's (``__init__`` is not called)."""
        if not (isinstance(cls, type) and issubclass(cls, Tensor)):
            raise TypeError(f"as_subclass(): argument 'cls' must be a subclass of Tensor, not {cls!r}")
        alias = self.view_as(self)
        if cls is Tensor:
            return alias
        sub = object.__new__(cls)
        sub.__dict__.update(alias.__dict__)
        return sub

    def detach(self):
        t = Tensor._make(self._data)
        t._ver_owner = self._root()
        return t

    def detach_(self):
        if self._base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead. If you are using "
                               "DistributedDataParallel (DDP) for training, and gradient_as_bucket_view is set as "
                               "True, gradients are views of DDP buckets, and hence detach_() cannot be called on "
                               "these gradients. To fix this error, please refer to the Optimizer.zero_grad() "
                               "function in torch/optim/optimizer.py as the solution.")
        self.grad_fn = None
        self._requires_grad = False
        return self

    @property
    def retains_grad(self):
        return bool(self._retains_grad)

    def retain_grad(self):
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is None or self._retains_grad:
            return
        import weakref

        ref = weakref.ref(self)

        def store(grad):
            t = ref()
            if t is not None:
                t._grad = grad.detach().clone() if t._grad is None else t._grad + grad.detach()

        self.grad_fn.add_retain_grad_hook(self._output_nr, store)
        self._retains_grad = store  # truthy; kept so an in-place op can move the hook to the new grad_fn

    def register_hook(self, hook):
        """``hook(grad)`` runs when this tensor's gradient is computed; it may return a replacement."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            return self.grad_fn.add_output_hook(self._output_nr, hook)
        if self._hooks is None:
            self._hooks = []
        from .autograd.graph import _RemovableHandle

        self._hooks.append(hook)
        return _RemovableHandle(self._hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = []
        from .autograd.graph import _RemovableHandle

        self._post_acc_hooks.append(hook)
        return _RemovableHandle(self._post_acc_hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (``gradient`` is required for non-scalars)."""
        run = _AUTOGRAD_BACKWARD
        if run is None:
            run = _bind_autograd_backward()
        run(self, gradient, retain_graph, create_graph, inputs=inputs)

    def _inplace_accumulate(self, other):
        # The engine's in-place ``grad += g``: counts as a version bump like any in-place op.
        self._data += other._data.astype(self._data.dtype, copy=False)
        self._bump_version()

    # -- conversion to Python and NumPy --------------------------------------------------------------------------
    def item(self):
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        if type(self._data) is MetaArray:
            raise _meta_read_error("item")
        return self._host().reshape(()).item()

    def tolist(self):
        return self._host().tolist()

    def _host(self):
        data = self._data
        if type(data) is not np.ndarray:
            data = data.get()
        return data

    def numpy(self, *, force=False):
        if self._requires_grad and not force and GradState.enabled:  # as torch: fine under no_grad (op kernels)
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if type(self._data) is not np.ndarray:
            if type(self._data) is MetaArray:
                raise _meta_read_error("numpy")
            if not force:
                raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                                "to host memory first.")
            return self._data.get()
        return self._data

    def __array__(self, dtype=None, copy=None):
        # NumPy 2 hands ``copy`` over and trusts the answer: ``np.array(t)`` (copy=True) must not return the
        # tensor's own memory, or later in-place updates of the tensor would show through the "copy".
        if self._requires_grad and GradState.enabled:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if type(self._data) is MetaArray:  # torch's __array__ is numpy(): its refusal, not a failed host copy
            raise _meta_read_error("numpy")
        arr = self._host()
        if copy is False and (arr is not self._data or dtype is not None and np.dtype(dtype) != arr.dtype):
            raise ValueError(f"Unable to avoid copy while creating an array from a {self.device.type} tensor of "
                             f"dtype {self.dtype} as requested (dtype={dtype}).")
        if dtype is not None:
            arr = arr.astype(dtype, copy=bool(copy) and arr is self._data)
        elif copy and arr is self._data:
            arr = arr.copy()
        return arr

    def __array_wrap__(self, array, context=None, return_scalar=False):
        # torch turns a boolean result (np.isnan(t)) into uint8, and 0-d results stay tensors.
        from ._creation import from_numpy

        array = np.asarray(array)
        return from_numpy(array.astype(np.uint8) if array.dtype == np.bool_ else array)

    def __dlpack__(self, *args, **kwargs):
        if self._requires_grad:
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    @property
    def __cuda_array_interface__(self):
        """CUDA tensors only (an AttributeError otherwise, so ``hasattr`` tells them apart), as in torch."""
        if type(self._data) is np.ndarray:
            raise AttributeError(f"Can't get __cuda_array_interface__ on non-CUDA tensor type: {self.type()} If CUDA "
                                 "data is required use tensor.cuda() to copy tensor to device memory.")
        if self._requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad. If gradients "
                               "aren't required, use var.detach() to get Variable that doesn't require grad.")
        return self._data.__cuda_array_interface__

    def record_stream(self, stream):
        """Mark this CUDA tensor's memory as in use by ``stream`` (see ``jitorch.cuda.streams.record_stream``)."""
        from .cuda.streams import record_stream

        record_stream(self, stream)

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __contains__(self, element):
        # Without it, ``in`` iterates rows and asks each for a bool: ambiguous past 1-D. torch compares elementwise.
        if isinstance(element, (Tensor, int, float, complex, np.number, np.bool_)):
            return bool((self == element).any())
        raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed in a {type(element)}.")

    def is_inference(self):
        return self._inference

    def _scalar_for(self, kind):
        n = self._data.size
        if n != 1 and kind in ("int", "float", "complex"):
            raise ValueError(f"only one element tensors can be converted to Python scalars (a Tensor with {n} "
                             "elements cannot be converted)")
        if n != 1:
            raise RuntimeError(f"{kind}: a Tensor with {n} elements cannot be converted to Scalar" if n else
                               f"{kind}: a Tensor with 0 elements cannot be converted to Scalar")
        if type(self._data) is MetaArray:
            raise _meta_read_error("item")
        return self._host().reshape(()).item()

    def __bool__(self):
        n = self._data.size
        if n != 1:
            raise RuntimeError(f"Boolean value of Tensor with {'more than one value' if n else 'no values'} is "
                               "ambiguous")
        return bool(self._scalar_for("bool"))

    def __int__(self):
        return int(self._scalar_for("int"))

    def __float__(self):
        _warn_scalar_of_grad(self)
        return float(self._scalar_for("float"))

    def __complex__(self):
        _warn_scalar_of_grad(self)
        return complex(self._scalar_for("complex"))

    def __index__(self):
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self._scalar_for("index"))

    def __format__(self, spec):
        # Only a plain tensor formats as its number: a Parameter prints whole, as torch's (a distribution's repr).
        # A compiled step's deferred tensor (LazyTensor) stands for a plain one.
        plain = type(self) is Tensor or getattr(type(self), "_stands_for_plain_tensor", False)
        if plain and (self._data.ndim == 0 or (spec and self._data.size == 1)):
            return format(self._scalar_for("format"), spec)
        if spec:  # object.__format__'s refusal, as torch's
            raise TypeError(f"unsupported format string passed to {type(self).__name__}.__format__")
        return repr(self)

    __hash__ = object.__hash__

    def __repr__(self, *, tensor_contents=None):
        from ._printing import format_tensor

        suffixes = []
        if type(self._data) is MetaArray:
            suffixes = ["requires_grad=True"] if self._requires_grad and self.grad_fn is None else \
                [f"grad_fn=<{type(self.grad_fn).__name__}>"] if self.grad_fn is not None else []
            from ._meta import meta_repr

            return meta_repr(self, suffixes)
        if self.is_cuda:
            suffixes.append(f"device='{self.device}'")
        if self.grad_fn is not None:
            suffixes.append(f"grad_fn=<{type(self.grad_fn).__name__}>")  # as torch: <CopySlices>, not its name()
        elif self._requires_grad:
            suffixes.append("requires_grad=True")
        return format_tensor(self._host(), dtype_name=self.dtype.name,
                             default_float=_dtype.get_default_dtype().name, suffixes=suffixes)

    __str__ = __repr__

    def __reduce_ex__(self, protocol):
        from ._serialization_pickler import tensor_user_state
        from ._serialization_support import rebuild_meta_tensor, rebuild_tensor

        state = tensor_user_state(self)
        if type(self._data) is MetaArray:  # no data to pickle: the geometry alone, as torch's
            args = (self.dtype.name, tuple(self.shape), self.stride(), self._requires_grad, type(self))
            return (rebuild_meta_tensor, args + (state,) if state else args)
        args = (self._host(), self._requires_grad, str(self.device), type(self))
        # Attributes a user set on the tensor (or a subclass instance) travel with it, as with torch's pickling.
        return (rebuild_tensor, args + (state,) if state else args)

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                               "because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        from ._serialization_pickler import tensor_user_state
        from ._storage import deepcopy_array

        new = Tensor._make(deepcopy_array(self._data, memo))
        memo[id(self)] = new
        new._requires_grad = self._requires_grad
        if self._grad is not None:
            new._grad = self._grad.__deepcopy__(memo)
        state = tensor_user_state(self)
        if state:  # attributes a user set on the tensor travel with it, as in torch
            new.__dict__.update(copy.deepcopy(state, memo))
        return new
