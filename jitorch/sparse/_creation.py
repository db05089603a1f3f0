"""Making sparse_coo tensors: ``sparse_coo_tensor`` (torch's checks and messages), ``dense.to_sparse()``, the legacy
``torch.sparse.FloatTensor``-style constructors, and the rebuild that pickling and ``jitorch.load`` call.

Unlike torch, whose invariant checks are off by default, the indices are always checked: no index is negative (whether
the size is given or inferred from the indices, as torch's message says) and none reaches past the size; such an entry
would be read by SciPy or written out of bounds on the GPU.

>>> import jitorch
>>> jitorch.sparse_coo_tensor([[0, 2]], [1.0, 5.0]).shape
jitorch.Size([3])
>>> jitorch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse().values()
tensor([1., 2.])
"""
from __future__ import annotations

from .. import _creation, _dtype
from .._tensor import Tensor
from ._coo import SparseCooTensor, make_sparse

__all__ = ["sparse_coo_tensor", "dense_to_sparse", "legacy_constructor", "rebuild_sparse_coo",
           "check_sparse_tensor_invariants"]


def _as_tensor(x, dtype=None):
    if isinstance(x, SparseCooTensor):
        raise TypeError("sparse_coo_tensor: indices and values must be dense tensors, got a sparse_coo tensor")
    return x if isinstance(x, Tensor) else _creation.tensor(x, dtype=dtype)


def _check_bounds(indices, size):
    if not indices.shape[1]:
        return
    low, high = indices.amin(1).tolist(), indices.amax(1).tolist()
    for d, (lo, hi, n) in enumerate(zip(low, high, size)):
        if lo < 0:
            raise RuntimeError(f"found negative index {lo} for dim {d}")
        if hi >= n:
            raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is {n} but found index {hi}")


def sparse_coo_tensor(indices, values=None, size=None, *, dtype=None, device=None, pin_memory=False,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """A sparse tensor in COO layout: ``values[k]`` at ``indices[:, k]`` (``indices``: ``(sparse_dim, nnz)``).

    ``size`` defaults to the smallest that holds the indices (and the values' trailing dims). The values are not
    copied (unless ``dtype``/``device`` ask for a conversion); the tensor's gradient reaches them.

    >>> import jitorch
    >>> s = sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    >>> s.to_dense()
    tensor([[0., 0., 3.],
            [4., 0., 5.]])
    """
    if values is None:  # torch's (size) overload: no entries
        size = tuple(indices)
        values = _creation.zeros(0, dtype=dtype, device=device)
        indices = _creation.zeros((len(size), 0), dtype=_dtype.int64, device=device)
    indices = _as_tensor(indices, dtype=_dtype.int64)
    values = _as_tensor(values, dtype=dtype)
    target = values.device if device is None else device
    values = values.to(device=target, dtype=dtype)
    indices = indices.to(device=values.device, dtype=_dtype.int64)
    if indices.dim() != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(indices.shape)}")
    sparse_dim, nnz = indices.shape
    if values.dim() == 0 or values.shape[0] != nnz:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: {nnz}, nnz from "
                           f"values: {values.shape[0] if values.dim() else 1}")
    dense_shape = tuple(values.shape[1:])
    if size is None:
        sparse_size = (indices.amax(1) + 1).tolist() if nnz else [0] * sparse_dim
        size = tuple(sparse_size) + dense_shape
    else:
        size = tuple(int(n) for n in size)
        if len(size) != sparse_dim + len(dense_shape):
            raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) = {len(size)}, "
                               f"sparse_dim = {sparse_dim}, dense_dim = {len(dense_shape)}")
        if size[sparse_dim:] != dense_shape:
            raise RuntimeError(f"values has incorrect size, expected {[nnz, *size[sparse_dim:]]}, got "
                               f"{list(values.shape)}")
    _check_bounds(indices, size)
    # An alias, so that requires_grad_ on the sparse tensor leaves the caller's values alone while a gradient
    # through the sparse tensor still reaches values that require one.
    values = values.view_as(values) if values.requires_grad else values.detach()
    if requires_grad:
        values.requires_grad_(True)
    coalesced = nnz <= 1 if is_coalesced is None else bool(is_coalesced)
    return make_sparse(indices, values, size, coalesced)


def dense_to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
    """``dense.to_sparse(sparse_dim=None)``: the nonzero entries (or, with ``sparse_dim``, the nonzero slices over the
    leading ``sparse_dim`` dims) as a coalesced sparse_coo tensor; differentiable in ``self``."""
    if layout not in (None, _dtype.sparse_coo):
        raise NotImplementedError(f"to_sparse: layout {layout} is not supported in jitorch (sparse_coo only)")
    if blocksize is not None or dense_dim is not None:
        raise NotImplementedError("to_sparse: blocksize and dense_dim apply to compressed layouts, which jitorch "
                                  "does not have")
    nd = self.dim()
    sd = nd if sparse_dim is None else sparse_dim
    if not isinstance(sd, int) or not 0 <= sd <= nd:
        raise RuntimeError(f"dense_to_sparse: sparse_dim argument must be in [0,{nd}] range, but {sd} is given")
    if sd == 0 and nd > 0:
        raise RuntimeError("dense_to_sparse: sparse_dim argument must be in >0 when self.dim()>0")
    nonzero = self != 0
    if sd < nd:
        nonzero = nonzero.reshape(tuple(self.shape[:sd]) + (-1,)).any(-1)
    if sd == 0:
        nnz = int(bool(nonzero))
        indices = _creation.zeros((0, nnz), dtype=_dtype.int64, device=self.device)
        return make_sparse(indices, self.unsqueeze(0)[:nnz], self.shape, True)
    indices = nonzero.nonzero().t()
    return make_sparse(indices, self[tuple(indices.unbind(0))], self.shape, True)


def _to_dense(self, dtype=None, *, masked_grad=None):
    return self if dtype is None else self.to(dtype)


def legacy_constructor(name, dtype):
    """``torch.sparse.FloatTensor`` and its siblings: ``(indices, values[, size])`` builds a sparse_coo tensor as
    ``sparse_coo_tensor`` does (the values keep their dtype, as in torch 2), ``(*sizes)`` an empty one of ``dtype``."""
    def construct(*args, device=None):
        if args and isinstance(args[0], Tensor):
            return sparse_coo_tensor(*args, device=device)
        size = tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)
        size = size or (0,)  # no sizes: torch's empty 1-D tensor
        indices = _creation.zeros((len(size), 0), dtype=_dtype.int64, device=device)
        return make_sparse(indices, _creation.zeros(0, dtype=dtype, device=device), size, True)
    construct.__name__ = construct.__qualname__ = name
    construct.__doc__ = f"""torch.sparse.{name}: the legacy constructor of {dtype} sparse_coo tensors.

    >>> import jitorch
    >>> jitorch.sparse.{name}(2, 3).shape, jitorch.sparse.{name}().shape
    (jitorch.Size([2, 3]), jitorch.Size([0]))
    """
    return construct


class check_sparse_tensor_invariants:  # noqa: N801 - torch's name
    """``torch.sparse.check_sparse_tensor_invariants``: a context manager and decorator (``enable=True``) and the
    global flag it sets (``enable()``, ``disable()``, ``is_enabled()``, False by default as torch's). jitorch checks
    the invariants of every sparse_coo tensor it makes whatever the flag says (an index out of bounds would be read
    out of memory); the flag only keeps code that sets and reads it working.

    >>> import jitorch
    >>> with jitorch.sparse.check_sparse_tensor_invariants():
    ...     jitorch.sparse.check_sparse_tensor_invariants.is_enabled()
    True
    >>> jitorch.sparse.check_sparse_tensor_invariants.is_enabled()
    False
    """

    _enabled = False

    def __init__(self, enable=True):
        self.state = bool(enable)
        self.saved = []

    @staticmethod
    def is_enabled():
        return check_sparse_tensor_invariants._enabled

    @staticmethod
    def enable():
        check_sparse_tensor_invariants._enabled = True

    @staticmethod
    def disable():
        check_sparse_tensor_invariants._enabled = False

    def __enter__(self):
        self.saved.append(check_sparse_tensor_invariants._enabled)
        check_sparse_tensor_invariants._enabled = self.state
        return self

    def __exit__(self, *exc):
        check_sparse_tensor_invariants._enabled = self.saved.pop()

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with check_sparse_tensor_invariants(self.state):
                return fn(*args, **kwargs)
        return wrapper


def rebuild_sparse_coo(indices, values, size, is_coalesced=None, requires_grad=False):
    """The tensor pickling and checkpoints describe (torch's ``_rebuild_sparse_tensor`` for the sparse_coo layout)."""
    t = sparse_coo_tensor(indices, values, size, is_coalesced=is_coalesced)
    return t.requires_grad_(True) if requires_grad else t


Tensor.to_sparse = dense_to_sparse
Tensor.to_sparse_coo = dense_to_sparse
Tensor.to_dense = _to_dense


def _compressed_refusal(name):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{name}: the compressed sparse layouts (CSR, CSC, BSR, BSC) are not supported in "
                                  "jitorch, which has sparse_coo tensors only; build one with sparse_coo_tensor (CSR "
                                  "row pointers convert with _convert_indices_from_csr_to_coo) or keep a dense "
                                  "tensor")
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"``{name}``: refused with a NotImplementedError (jitorch has sparse_coo tensors only)."
    return refuse


sparse_csr_tensor = _compressed_refusal("sparse_csr_tensor")
sparse_csc_tensor = _compressed_refusal("sparse_csc_tensor")
sparse_bsr_tensor = _compressed_refusal("sparse_bsr_tensor")
sparse_bsc_tensor = _compressed_refusal("sparse_bsc_tensor")
sparse_compressed_tensor = _compressed_refusal("sparse_compressed_tensor")
for _method in ("to_sparse_csr", "to_sparse_csc", "to_sparse_bsr", "to_sparse_bsc"):
    setattr(Tensor, _method, _compressed_refusal(_method))
