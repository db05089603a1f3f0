"""``SparseCooTensor``: PyTorch's ``sparse_coo`` layout as a Tensor subclass holding two dense jitorch tensors.

``indices`` (int64, ``(sparse_dim, nnz)``) says where the entries sit, ``values`` (``(nnz, *dense_shape)``) what they
are. Autograd runs on ``values``: a sparse tensor requires grad when its values do, every op here is a composite of
rows over ``values`` (or the ``sparse_mm`` row, jitorch/ops/sparse_ops.py), and ``S.grad`` is the values' gradient
laid out as torch's sparse gradient (S's coalesced pattern, ``is_coalesced() == False``, as torch reports it; hooks
and ``autograd.grad`` likewise: ``_coo_grad.py``).

There is no strided memory: ``_data`` is a placeholder whose every use raises, the dispatcher refuses it naming the
op (``_dispatch.NO_STRIDED_DATA``) or, for the rows a dense tensor's methods reach with a sparse operand
(``dense.add(S)``, ``dense.mul_(S)``), answers with the sparse form (`_coo_refusals._answer`), and every inherited
Tensor method this class does not define raises ``NotImplementedError`` naming the method and the layout
(`_coo_refusals._refuse_inherited`).
Public functions handed a sparse tensor come to ``__jitorch_function__`` (jitorch/_overrides.py, acquired without
method wrappers), which runs the sparse form (`_coo_math.FUNCTIONS`) or refuses. The reflected operators win over
the dense ones (Python asks a subclass first), so ``dense @ S`` and ``dense + S`` reach this class too.

>>> import jitorch
>>> s = jitorch.sparse_coo_tensor([[0, 1, 0], [2, 0, 2]], [1.0, 2.0, 3.0], (2, 3))
>>> s.is_coalesced(), s.coalesce().values(), s.to_dense()
(False, tensor([4., 2.]), tensor([[0., 0., 4.],
        [2., 0., 0.]]))
"""
from __future__ import annotations

from .. import _dtype, _overrides
from .._tensor import Size, Tensor
from ._coo_print import sparse_repr
from ._coo_refusals import _NO_MEMORY, _OWN, _refuse_inherited, sparse_refusal

__all__ = ["SparseCooTensor", "make_sparse", "sparse_refusal"]


def make_sparse(indices, values, size, coalesced):
    """A ``SparseCooTensor`` over ``indices``/``values`` as given (no checks, no copies)."""
    t = object.__new__(SparseCooTensor)
    t._sp_indices, t._sp_values, t._sp_size, t._sp_coalesced = indices, values, Size(size), bool(coalesced)
    _overrides.acquire(methods=False)  # public functions handed one come to __jitorch_function__
    t._sp_counted = True
    if not SparseCooTensor._refusals_installed:
        _refuse_inherited()
    return t


class SparseCooTensor(Tensor):
    """A tensor in torch's ``sparse_coo`` layout (``jitorch.sparse_coo_tensor``, ``dense.to_sparse()``)."""

    _data = _NO_MEMORY
    _refusals_installed = False

    def __new__(cls, *args, **kwargs):
        raise TypeError("sparse_coo tensors are made by jitorch.sparse_coo_tensor(indices, values, size) or "
                        "dense.to_sparse()")

    def __del__(self):
        if self.__dict__.pop("_sp_counted", False) and _overrides is not None:  # (None at interpreter exit)
            _overrides.release(methods=False)

    # -- what it is ---------------------------------------------------------------------------------------------
    is_sparse = property(lambda self: True)
    layout = property(lambda self: _dtype.sparse_coo)
    shape = property(lambda self: self._sp_size)
    dtype = property(lambda self: self._sp_values.dtype)
    device = property(lambda self: self._sp_values.device)
    is_cuda = property(lambda self: self._sp_values.is_cuda)
    is_cpu = property(lambda self: self._sp_values.is_cpu)
    is_meta = property(lambda self: False)
    ndim = property(lambda self: len(self._sp_size))
    itemsize = property(lambda self: self._sp_values.itemsize)

    def size(self, dim=None):
        if dim is None:
            return self._sp_size
        return self._sp_size[self._wrap(dim, "size")]

    def _wrap(self, dim, op):
        n = len(self._sp_size)
        if not isinstance(dim, int) or not -max(n, 1) <= dim < max(n, 1):
            raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{-max(n, 1)}, "
                             f"{max(n, 1) - 1}], but got {dim})")
        return dim % n if n else 0

    def dim(self):
        return len(self._sp_size)

    def numel(self):
        return self._sp_size.numel()

    nelement = numel

    def element_size(self):
        return self._sp_values.element_size()

    def is_floating_point(self):
        return self._sp_values.is_floating_point()

    def is_complex(self):
        return self._sp_values.is_complex()

    def is_signed(self):
        return self.dtype.is_signed

    def get_device(self):
        return self._sp_values.get_device()

    def is_contiguous(self, memory_format=None):
        return False

    def __len__(self):
        if not self._sp_size:
            raise TypeError("len() of a 0-d tensor")
        return self._sp_size[0]

    # -- the COO parts ------------------------------------------------------------------------------------------
    def sparse_dim(self):
        return self._sp_indices.shape[0]

    def dense_dim(self):
        return self._sp_values.dim() - 1

    def _nnz(self):
        return self._sp_indices.shape[1]

    def is_coalesced(self):
        return self._sp_coalesced

    def _coalesced_(self, coalesced):
        self._sp_coalesced = bool(coalesced)
        return self

    def _rebind(self, indices, values, coalesced):
        """Hold other indices and values: an in-place result keeps the object (``.grad``, a momentum buffer)."""
        self._sp_indices, self._sp_values, self._sp_coalesced = indices, values, bool(coalesced)
        return self

    def _indices(self):
        return self._sp_indices.detach()

    def _values(self):  # not differentiable, as torch's
        return self._sp_values.detach()

    def indices(self):
        if not self._sp_coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call .coalesce() first")
        return self._sp_indices.detach()

    def values(self):
        if not self._sp_coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call .coalesce() first")
        return self._sp_values.view_as(self._sp_values)  # an alias that carries the values' gradient

    def coalesce(self):
        """The same tensor with its duplicates summed and its entries in row-major order (``self`` if it is)."""
        if self._sp_coalesced:
            return self
        from ._coo_index import coalesced_pattern, group_sums

        indices, inverse, count = coalesced_pattern(self._sp_indices, self._sp_size)
        return make_sparse(indices, group_sums(self._sp_values, inverse, count), self._sp_size, True)

    def to_dense(self, dtype=None, *, masked_grad=None):
        """The dense tensor; its gradient reaches the values at their positions (torch's ``masked_grad``)."""
        if dtype is not None:
            raise RuntimeError("dtype argument is not supported by sparse_to_dense")
        from ._coo_index import scatter_dense

        return scatter_dense(self._sp_indices, self._sp_values, self._sp_size)

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        if layout not in (None, _dtype.sparse_coo):
            raise NotImplementedError(f"to_sparse: conversion to {layout} is not supported in jitorch (sparse_coo "
                                      "tensors only)")
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise RuntimeError("to_sparse: conversion from Sparse to Sparse with sparse_dim argument "
                               "!=self.sparse_dim() is not supported")
        return self

    to_sparse_coo = to_sparse

    # -- autograd -----------------------------------------------------------------------------------------------
    @property
    def requires_grad(self):
        return self._sp_values.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self._sp_values.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        self._sp_values.requires_grad_(requires_grad)
        return self

    grad_fn = property(lambda self: self._sp_values.grad_fn)

    def copy_(self, src, non_blocking=False):
        """``self`` becomes a copy of the sparse_coo ``src`` of its size (``load_state_dict`` into a sparse buffer):
        ``src``'s indices, values (in ``self``'s dtype and device) and coalesced flag, as torch's sparse ``copy_``."""
        from ..autograd.grad_mode import GradState

        if not isinstance(src, SparseCooTensor):
            raise RuntimeError(f"copy_() between dense and sparse Tensors is not implemented! Found self type = "
                               f"{self.type()} and src type = {src.type()}; convert with .to_sparse() first")
        if src.shape != self.shape:
            raise RuntimeError(f"copy_: a sparse_coo tensor of size {list(self.shape)} takes a copy of one of the same "
                               f"size in jitorch, got {list(src.shape)}; make a new one with sparse_coo_tensor")
        leaf = self.requires_grad and self.is_leaf
        if leaf and GradState.enabled:
            raise RuntimeError("copy_: a leaf Variable that requires grad is being used in an in-place operation.")
        grad = self.grad  # kept across the new pattern, as torch keeps .grad
        values = src._sp_values.to(device=self.device, dtype=self.dtype).clone()
        self._rebind(src._sp_indices.to(self.device).clone(), values.detach().requires_grad_(True) if leaf else values,
                     src._sp_coalesced)
        self.grad = grad
        return self

    def detach(self):
        return make_sparse(self._sp_indices, self._sp_values.detach(), self._sp_size, self._sp_coalesced)

    @property
    def data(self):
        return self.detach()

    def clone(self, *, memory_format=None):
        return make_sparse(self._sp_indices.clone(), self._sp_values.clone(), self._sp_size, self._sp_coalesced)

    # -- conversions --------------------------------------------------------------------------------------------
    def to(self, *args, **kwargs):
        """``to(dtype)``, ``to(device)``, ``to(other)``..., as the dense ``to``: applied to the values (and the indices'
        device); ``self`` when nothing changes."""
        values = self._sp_values.to(*args, **kwargs)
        if values is self._sp_values:
            return self
        indices = self._sp_indices.to(values.device)
        return make_sparse(indices, values, self._sp_size, self._sp_coalesced)

    def type(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None:
            return "torch.sparse." + self._sp_values.type().rsplit(".", 1)[-1]
        return self.to(dtype)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None, non_blocking=False):
        return self.to("cuda" if device is None else device)

    float = lambda self: self.to(_dtype.float32)  # noqa: E731 - the dtype shorthands, as Tensor's
    double = lambda self: self.to(_dtype.float64)  # noqa: E731
    half = lambda self: self.to(_dtype.float16)  # noqa: E731
    bfloat16 = lambda self: self.to(_dtype.bfloat16)  # noqa: E731
    long = lambda self: self.to(_dtype.int64)  # noqa: E731
    int = lambda self: self.to(_dtype.int32)  # noqa: E731
    bool = lambda self: self.to(_dtype.bool)  # noqa: E731

    # -- reads torch refuses ------------------------------------------------------------------------------------
    def stride(self, dim=None):
        raise RuntimeError("stride: sparse_coo tensors do not have strides")

    def data_ptr(self):
        raise RuntimeError("Cannot access data pointer of Tensor that doesn't have storage")

    def tolist(self):
        raise RuntimeError("tolist: sparse_coo tensors have no storage to read (Cannot access data pointer of "
                           "Tensor that doesn't have storage); use .to_dense().tolist()")

    def untyped_storage(self):
        raise NotImplementedError("Cannot access storage of SparseTensorImpl")

    storage = untyped_storage

    def numpy(self, *, force=False):
        raise TypeError("can't convert Sparse layout tensor to numpy. Use Tensor.to_dense() first.")

    def __array__(self, dtype=None, copy=None):
        raise TypeError("can't convert Sparse layout tensor to numpy. Use Tensor.to_dense() first.")

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self.to_dense().item()

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.to_dense().item())

    @property
    def nbytes(self):
        raise RuntimeError("nbytes is not defined for sparse tensors.  If you want the size of the constituent "
                           "tensors, add the nbytes of the indices and values.  If you want the size of the  "
                           "equivalent dense tensor, multiply numel() by element_size()")

    def _scalar_for(self, kind):
        if self.numel() != 1:
            raise RuntimeError(f"{kind}: a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self.to_dense().item()

    # -- printing and pickling ----------------------------------------------------------------------------------
    def __repr__(self, *, tensor_contents=None):
        return sparse_repr(self)

    __str__ = __repr__

    def __format__(self, spec):
        if spec:
            raise TypeError(f"unsupported format string passed to {type(self).__name__}.__format__")
        return repr(self)

    def __reduce_ex__(self, protocol):
        from . import _rebuild_sparse_coo

        return (_rebuild_sparse_coo, (self._sp_indices.detach(), self._sp_values.detach(), tuple(self._sp_size),
                                      self._sp_coalesced, self.requires_grad))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        new = make_sparse(self._sp_indices.clone(), self._sp_values.detach().clone(), self._sp_size,
                          self._sp_coalesced)
        new.requires_grad_(self.requires_grad and self.is_leaf)
        memo[id(self)] = new
        return new

    # -- public functions handed a sparse tensor ----------------------------------------------------------------
    # Public functions come here; Tensor methods of a dense tensor handed one (dense.add_(s)) handle it themselves,
    # also while a user's Tensor subclass keeps the method wrappers on.
    __jitorch_methods__ = False

    @classmethod
    def __jitorch_function__(cls, func, args, kwargs):
        from ._coo_math import FUNCTIONS, PASS_THROUGH

        name = _overrides.tensor_method_name(func) or getattr(func, "__name__", str(func))
        impl = FUNCTIONS.get(name)
        if impl is not None:
            return impl(*args, **kwargs)
        if name in PASS_THROUGH:
            original = getattr(func, "__jitorch_original__", None) or getattr(func, "__wrapped__", func)
            return original(*args, **kwargs)
        if args and isinstance(args[0], SparseCooTensor) and name in _OWN:
            return getattr(args[0], name)(*args[1:], **kwargs)
        raise sparse_refusal(name)
