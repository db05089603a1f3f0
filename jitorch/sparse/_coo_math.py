"""Arithmetic of sparse_coo tensors, installed with the products (``_coo_products.py``) as SparseCooTensor's methods
and operators; ``FUNCTIONS``: what a public function (``jitorch.mm``, ``F.linear``, ``jitorch.add``...) handed a sparse
tensor runs; ``ROUTED``: what a dense tensor's method handed one runs (``dense.add(s)``, ``dense.mul_(s)``).

Everything here is a composite over the values, so gradients reach them by the ordinary rows. torch's refusals are
kept (``sparse + dense``, division by a tensor), with its messages.

>>> import jitorch
>>> s = jitorch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
>>> jitorch.mm(s, jitorch.ones(2, 1)), (s * 2 + s).to_dense()
(tensor([[2.],
        [3.]]), tensor([[0., 6.],
        [9., 0.]]))
"""
from __future__ import annotations

import numbers

from .. import _dtype
from .._tensor import Tensor
from ._coo import SparseCooTensor, make_sparse
from ._coo_index import gather_dense, linear_index
from ._coo_products import addmm, linear, matmul, mm, mv, product

__all__ = ["sparse_sum", "add", "sub", "mul", "div", "FUNCTIONS", "PASS_THROUGH", "ROUTED"]


def _is_sparse(t):
    return isinstance(t, SparseCooTensor)


def _scalar_like(x):
    return isinstance(x, numbers.Number) or isinstance(x, Tensor) and not _is_sparse(x) and x.dim() == 0


# -- reductions -------------------------------------------------------------------------------------------------------
def sparse_sum(input, dim=None, keepdim=False, *, dtype=None):
    """Sum of a sparse_coo tensor: dense when every sparse dim is reduced (``dim=None``: a 0-d tensor), else a
    coalesced sparse_coo tensor over the sparse dims left, as torch's ``sparse.sum``.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [1.0, 2.0, 3.0], (2, 3))
    >>> sparse_sum(s), sparse_sum(s, 1).to_dense()
    (tensor(6.), tensor([1., 5.]))
    """
    values = input._sp_values if dtype is None else input._sp_values.to(dtype)
    if dim is None:
        return values.sum()
    wrapped = [input._wrap(d, "sum") for d in ((dim,) if isinstance(dim, int) else dim)]
    dims = sorted(set(wrapped))
    if len(dims) != len(wrapped):
        repeated = next(d for d in wrapped if wrapped.count(d) > 1)
        raise RuntimeError(f"dim {repeated} appears multiple times in the list of dims")  # torch's words
    sd = input.sparse_dim()
    sparse_dims, dense_dims = [d for d in dims if d < sd], [d - sd + 1 for d in dims if d >= sd]
    if dense_dims:
        values = values.sum(dense_dims, keepdim=keepdim)
    kept = [d for d in range(sd) if d not in sparse_dims]
    dense_shape = tuple(values.shape[1:])
    if not kept and not keepdim:  # nothing sparse left: the sum over the entries is dense
        return values.sum(0) if values.shape[0] else values.new_zeros(dense_shape)
    indices = input._sp_indices
    size = [n for d, n in enumerate(input.shape[:sd]) if d in kept]
    if keepdim:  # reduced sparse dims stay, of size 1, every entry at index 0
        indices = indices * _keep_mask(sd, sparse_dims, indices)
        kept, size = list(range(sd)), [1 if d in sparse_dims else n for d, n in enumerate(input.shape[:sd])]
    else:
        indices = indices[kept]
    return make_sparse(indices, values, tuple(size) + dense_shape, False).coalesce()


def _keep_mask(sd, reduced, like):
    from .. import _creation

    return _creation.tensor([[0] if d in reduced else [1] for d in range(sd)], dtype=_dtype.int64,
                            device=like.device)


# -- elementwise ------------------------------------------------------------------------------------------------------
def _same(s, values, coalesced=None):
    return make_sparse(s._sp_indices, values, s._sp_size, s._sp_coalesced if coalesced is None else coalesced)


def add(input, other, *, alpha=1):
    """``input + alpha * other``: sparse + sparse (same size) is sparse, its entries in torch's order (`_coo_add`);
    dense + sparse is dense (each entry added in turn, as ATen); sparse + dense is refused, as in torch."""
    if _is_sparse(input) and _is_sparse(other):
        from ._coo_add import add_sparse  # ATen's entry order (one merge walk over both lists)

        return add_sparse(input, other, alpha)
    if _is_sparse(other) and isinstance(input, Tensor):
        from ._coo_add import add_dense_sparse

        return add_dense_sparse(input, other, alpha)
    if _is_sparse(other):
        dense = other.to_dense()
        return input + (dense if alpha == 1 else dense * alpha)
    raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")


def sub(input, other, *, alpha=1):
    return add(input, other, alpha=-alpha)


def mul(input, other):
    """``sparse * scalar``, ``sparse * dense`` of the same size (a sparse result on the sparse pattern), or
    ``sparse * sparse`` (the product where both have entries)."""
    if not _is_sparse(input):
        input, other = other, input
    if _scalar_like(other):
        return _same(input, input._sp_values * other)
    if _is_sparse(other):
        return _mul_sparse(input, other)
    if isinstance(other, Tensor) and other.shape == input.shape:  # linear in the values: duplicates may stay apart
        return _same(input, input._sp_values * gather_dense(other, input._sp_indices))
    raise RuntimeError(f"mul: a sparse_coo tensor multiplies a number, a sparse tensor or a dense tensor of its own "
                       f"size {list(input.shape)}, got {type(other).__name__}"
                       f"{list(other.shape) if isinstance(other, Tensor) else ''}")


def _mul_sparse(a, b):
    from .._sorting import searchsorted

    if a.shape != b.shape:
        raise RuntimeError(f"mul: expected sizes of 'self' and 'other' to match, but {list(a.shape)} != "
                           f"{list(b.shape)}")
    a, b = a.coalesce(), b.coalesce()
    sd = a.sparse_dim()
    la, lb = linear_index(a._sp_indices, a.shape[:sd]), linear_index(b._sp_indices, b.shape[:sd])
    if la.shape[0] == 0 or lb.shape[0] == 0:
        return make_sparse(b._sp_indices[:, :0], (a._sp_values[:0] * b._sp_values[:0]), a._sp_size, True)
    pos = searchsorted(la, lb).clamp(max=la.shape[0] - 1)
    found = la[pos] == lb
    keep = found.nonzero()[:, 0]
    values = a._sp_values.index_select(0, pos.index_select(0, keep)) * b._sp_values.index_select(0, keep)
    return make_sparse(b._sp_indices.index_select(1, keep), values, a._sp_size, True)


def div(input, other, *, rounding_mode=None):
    """``input / other`` for a number or 0-d ``other``; with a ``rounding_mode`` the duplicates are summed first (the
    rounding of a sum is not the sum of the roundings), and the result is coalesced, as torch's.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 0]], [1.5, 1.5], (2,))
    >>> (s / 2).to_dense(), jitorch.div(s, 2, rounding_mode="trunc").to_dense()
    (tensor([1.5000, 0.0000]), tensor([1., 0.]))
    """
    if not _scalar_like(other) or _is_sparse(other):
        got = f"shape {list(other.shape)}" if isinstance(other, Tensor) else type(other).__name__
        raise RuntimeError(f"div: Sparse division requires a scalar or zero-dim dense tensor divisor (got {got} for "
                           "divisor)")
    if rounding_mode is None:  # linear: duplicates may stay apart
        return _same(input, input._sp_values.div(other))
    c = input.coalesce()
    return _same(c, c._sp_values.div(other, rounding_mode=rounding_mode), True)


def neg(input):
    return _same(input, -input._sp_values)


def transpose(input, dim0, dim1):
    """Swap two sparse dims (the entries keep their values; the result is not marked coalesced, as torch's)."""
    d0, d1 = input._wrap(dim0, "transpose"), input._wrap(dim1, "transpose")
    sd = input.sparse_dim()
    if d0 >= sd or d1 >= sd:
        raise RuntimeError(f"sparse transpose: transposed dimensions must be sparse Got sparse_dim: {sd}, d0: {d0}, "
                           f"d1: {d1}")
    order = list(range(sd))
    order[d0], order[d1] = order[d1], order[d0]
    size = list(input.shape)
    size[d0], size[d1] = size[d1], size[d0]
    return make_sparse(input._sp_indices[order], input._sp_values, tuple(size), input._sp_coalesced and d0 == d1)


def t(input):
    if input.dim() > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.dim()}D")
    return transpose(input, 0, 1) if input.dim() == 2 else input


def conj(input):
    """The complex conjugate of each entry (the values conjugated; a real tensor is returned as is)."""
    return _same(input, input._sp_values.conj_physical()) if input.is_complex() else input


def adjoint(input):
    """``mH``: the conjugate transpose of the last two (sparse) dims, as torch's ``adjoint``.

    >>> import jitorch
    >>> jitorch.sparse_coo_tensor([[0], [1]], [2j], (2, 2)).mH.to_dense()
    tensor([[0.+0.j, 0.+0.j],
            [0.-2.j, 0.+0.j]])
    """
    return conj(transpose(input, -2, -1))


def _h(input):
    if input.dim() != 2:
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {input.dim()}-D tensor."
                           f"{' For batches of matrices, consider using tensor.mH' if input.dim() > 2 else ''}")
    return adjoint(input)


def select(input, dim, index):
    """The slice at ``index`` of ``dim`` (``s[i]`` for dim 0): the entries there, one dim fewer; a dense tensor when
    no sparse dim is left, as torch's.

    >>> import jitorch
    >>> s = jitorch.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [1.0, 2.0, 3.0], (2, 3))
    >>> select(s, 0, 1).to_dense(), s[1][2]
    (tensor([2., 0., 3.]), tensor(3.))
    """
    d = input._wrap(dim, "select")
    n = input.shape[d]
    if not isinstance(index, int) or not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(input.shape)} at "
                         f"dimension {d}")
    index %= n
    sd = input.sparse_dim()
    size = tuple(s for k, s in enumerate(input.shape) if k != d)
    if d >= sd:
        return make_sparse(input._sp_indices, input._sp_values.select(d - sd + 1, index), size, input._sp_coalesced)
    keep = (input._sp_indices[d] == index).nonzero()[:, 0]
    if sd == 1:  # no sparse dim left: torch gives the dense slice, the entries there summed
        return input._sp_values.index_select(0, keep).sum(0, dtype=input.dtype)
    rows = [k for k in range(sd) if k != d]
    return make_sparse(input._sp_indices[rows].index_select(1, keep), input._sp_values.index_select(0, keep), size,
                       False)


def _getitem(self, key):
    if isinstance(key, int) and not isinstance(key, bool):
        return select(self, 0, key)
    raise NotImplementedError(f"index: a sparse_coo tensor takes an integer index on dim 0 only (s[i]), got {key!r}; "
                              "convert with .to_dense() first")


# Zero stays zero under these, so they act on the values; all but the linear ones sum duplicates first, as torch.
_ZERO_PRESERVING = ("abs", "sqrt", "sin", "tan", "tanh", "asin", "atan", "sinh", "asinh", "expm1", "log1p", "sign",
                    "sgn", "ceil", "floor", "round", "trunc", "frac", "relu", "square", "erf", "deg2rad", "rad2deg")


def _unary(name):
    def op(self):
        c = self.coalesce()
        return _same(c, getattr(c._sp_values, name)(), True)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"``{name}`` of each entry (zero stays zero): a coalesced sparse_coo tensor."
    return op


def pow(input, exponent):
    if not isinstance(exponent, numbers.Number):
        raise RuntimeError("pow: a sparse_coo tensor is raised to a number only")
    if exponent == 0:
        raise RuntimeError("pow: cannot raise to zeroth power on sparse tensor; it would make the result tensor "
                           "dense")
    c = input.coalesce()
    return _same(c, c._sp_values.pow(exponent), True)


def _reflected(fn):
    def reflected(self, other):
        return fn(other, self)
    return reflected


def _operator(fn):
    def operator(self, other):
        if not isinstance(other, (Tensor, numbers.Number)):
            return NotImplemented
        return fn(self, other)
    return operator


def _install():
    methods = {
        "mm": mm, "matmul": matmul, "mv": mv, "spmm": mm, "sum": sparse_sum, "add": add, "sub": sub, "mul": mul,
        "multiply": mul, "div": div, "divide": div, "true_divide": div, "neg": neg, "negative": neg,
        "transpose": transpose, "swapdims": transpose, "swapaxes": transpose, "t": t, "pow": pow,
        "select": select, "__getitem__": _getitem,
        "__matmul__": _operator(matmul), "__rmatmul__": _operator(_reflected(matmul)),
        "__add__": _operator(add), "__radd__": _operator(_reflected(add)), "__sub__": _operator(sub),
        "__rsub__": _operator(_reflected(sub)), "__mul__": _operator(mul), "__rmul__": _operator(mul),
        "__truediv__": _operator(div), "__neg__": neg, "__pow__": _operator(pow),
        "__floordiv__": _operator(lambda s, o: div(s, o, rounding_mode="floor")),
        "T": property(lambda self: t(self)), "mT": property(lambda self: transpose(self, -2, -1)),
        "mH": property(adjoint), "H": property(_h), "adjoint": adjoint, "conj": conj, "conj_physical": conj,
    }
    for name in _ZERO_PRESERVING:
        methods[name] = _unary(name)
    for name, fn in methods.items():
        setattr(SparseCooTensor, name, fn)


_install()


# Public functions (by name) handed a sparse tensor; the Tensor methods SparseCooTensor defines answer their
# namesakes (``jitorch.t(s)`` is ``s.t()``), and the functions below only inspect or pickle their argument.
FUNCTIONS = {
    "mm": mm, "spmm": lambda input, mat2: product(input, mat2, "spmm"), "matmul": matmul, "addmm": addmm,
    "linear": linear, "add": add, "sub": sub,
    "subtract": sub, "mul": mul, "multiply": mul, "div": div, "divide": div, "true_divide": div,
    "mv": mv,
}
# The rows (by name) a dense tensor's methods reach with a sparse operand (``dense.add(s)``, ``dense.mul_(s)``): the
# dispatcher's refusal path hands them here (`_coo_refusals._answer`).
ROUTED = {"add": add, "sub": sub, "mul": mul, "div": div, "matmul": matmul}
PASS_THROUGH = frozenset({"save", "numel", "is_same_size", "typename", "is_nonzero"})
