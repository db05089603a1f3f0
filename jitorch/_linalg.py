"""Public matrix products (``matmul``, ``mm``, ``addmm``, ``tensordot``, ``kron``, ``cdist``, ...) and the Tensor
methods of the whole family.

Products are composites of the ``matmul`` row of ``ops/linalg.py``. ``einsum`` (its equation normalized before its
row) lives in ``_einsum.py``, the legacy ``torch.*`` spellings of decompositions (``torch.inverse``, ``torch.svd``,
...) in ``_linalg_legacy.py``; both are re-exported here.

>>> import jitorch
>>> a, b = jitorch.ones(2, 3), jitorch.ones(3, 4)
>>> (a @ b).shape, jitorch.einsum("ij,jk->ik", a, b).sum().item(), jitorch.kron(jitorch.eye(2), a).shape
(jitorch.Size([2, 4]), 24.0, jitorch.Size([4, 6]))
"""
from __future__ import annotations

import math

from . import _dtype
from ._dispatch import TORCH_TYPE_NAMES, apply, fast_binary
from ._grad_state import GradState
from .amp._cast_mode import autocast_lower
from ._pointwise import _write_out
from .amp._cast_mode import autocast_policy
from ._shape import broadcast_shapes, wrap_dim, wrap_dims
from ._tensor import Tensor
from .autograd.graph import named
from .ops import linalg as L
from .ops.cdist_ops import CDIST

__all__ = [
    "matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "ger", "addmm", "addmv", "addbmm", "baddbmm",
    "addr", "einsum", "tensordot", "kron", "cross", "cdist", "chain_matmul", "inverse", "det", "logdet", "slogdet",
    "cholesky", "cholesky_solve", "cholesky_inverse", "svd", "qr", "pinverse", "matrix_power", "geqrf", "ormqr",
]


def _check_tensors(op, *tensors):
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}(): argument must be Tensor, not {type(t).__name__}")


def _check_dim(op, name, t, ndim):
    if t._data.ndim != ndim:
        kind = {1: "vector", 2: "matrix", 3: "3D tensor"}[ndim]
        raise RuntimeError(f"{op}: {name} must be a {kind}, but got a {t._data.ndim}-D tensor of shape "
                           f"{tuple(t.shape)}")


def _check_inner(op, a, b, k_a, k_b):
    if k_a != k_b:
        raise RuntimeError(f"{op}: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied ({k_a} != {k_b})")


def _sparse_product(name, *operands):
    """The sparse form of the product ``name`` when an operand is a sparse_coo tensor (``dense.mm(sparse)``: Tensor
    methods reach here unwrapped), else None. Its ``_data`` is no array: checked before any shape is read."""
    for t in operands:
        if type(t) is not Tensor and getattr(t, "is_sparse", False):
            from .sparse._coo_math import FUNCTIONS

            return FUNCTIONS[name](*operands)
    return None


_fast_matmul = fast_binary(L.MATMUL)


def matmul(input, other, *, out=None):
    """Matrix product with NumPy/PyTorch semantics: vectors are promoted and removed, batch dims broadcast."""
    _check_tensors("matmul", input, other)
    sparse = _sparse_product("matmul", input, other)
    if sparse is not None:
        return _write_out(sparse, out)
    if out is not None:
        return _write_out(apply(L.MATMUL, input, other), out)
    return _product_named(_fast_matmul(input, other), input, other)


def _product_named(result, a, b):
    # torch records a vector product as dot or mv, not mm.
    if b._data.ndim == 1 and a._data.ndim <= 2 and result._requires_grad:
        return named(result, "DotBackward0" if a._data.ndim == 1 else "MvBackward0")
    return result


def _matmul_operator(self, other):
    # ``a @ b`` is the hottest linear-algebra call in small loops (RNN cells): straight to the fast path.
    if isinstance(other, Tensor):
        return _product_named(_fast_matmul(self, other), self, other)
    return matmul(self, other)


def mm(input, mat2, *, out=None):
    """Product of two matrices (no broadcasting)."""
    sparse = _sparse_product("mm", input, mat2)
    if sparse is not None:
        return _write_out(sparse, out)
    _check_dim("mm", "self", input, 2)
    _check_dim("mm", "mat2", mat2, 2)
    if input._data.shape[1] != mat2._data.shape[0]:  # torch's wording, which users search for
        (n, k), (k2, m) = input._data.shape, mat2._data.shape
        raise RuntimeError(f"mm: mat1 and mat2 shapes cannot be multiplied ({n}x{k} and {k2}x{m})")
    return matmul(input, mat2, out=out)


def bmm(input, mat2, *, out=None):
    """Batched product of ``(b, n, m)`` and ``(b, m, p)`` tensors (no broadcasting)."""
    _check_dim("bmm", "batch1", input, 3)
    _check_dim("bmm", "batch2", mat2, 3)
    expected = [input._data.shape[0], input._data.shape[2]]
    if list(mat2._data.shape[:2]) != expected:  # torch's words (word2vec's bmm of (B, K, D) by (B, D, 1))
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: {expected} but got: "
                           f"{list(mat2._data.shape[:2])}.")
    if input.dtype != mat2.dtype:
        from ._dispatch import TORCH_TYPE_NAMES

        raise RuntimeError(f"expected scalar type {TORCH_TYPE_NAMES[input.dtype.name]} but found "
                           f"{TORCH_TYPE_NAMES[mat2.dtype.name]}")
    return named(matmul(input, mat2, out=out), "BmmBackward0")


@autocast_policy(cpu="unlisted")
def mv(input, vec, *, out=None):
    """Matrix-vector product."""
    sparse = _sparse_product("mv", input, vec)
    if sparse is not None:
        return _write_out(sparse, out)
    _check_dim("mv", "self", input, 2)
    _check_dim("mv", "vec", vec, 1)
    _check_inner("mv", input, vec, input._data.shape[1], vec._data.shape[0])
    return matmul(input, vec, out=out)


@autocast_policy(cpu="unlisted", cuda="promote")
def dot(input, other, *, out=None):
    """Inner product of two 1-D tensors of the same size and dtype."""
    _check_dim("dot", "self", input, 1)
    _check_dim("dot", "other", other, 1)
    if input._data.shape != other._data.shape:
        raise RuntimeError(f"dot: inconsistent tensor size, expected tensor {list(input.shape)} and src "
                           f"{list(other.shape)} to have the same number of elements")
    if input.dtype is not other.dtype:
        raise RuntimeError(f"dot: expected both vectors to have same dtype, but found {input.dtype} and {other.dtype}")
    if input.dtype is _dtype.bool:
        raise NotImplementedError('"dot" not implemented for \'Bool\'')
    return matmul(input, other, out=out)


@autocast_policy(cpu="unlisted", cuda="promote")
def vdot(input, other, *, out=None):
    """``dot(input.conj(), other)``."""
    return dot(input.conj(), other, out=out)


def inner(input, other, *, out=None):
    """Sum over the last dims of both tensors (a product when either is 0-d)."""
    if input._data.ndim == 0 or other._data.ndim == 0:
        return _write_out(input * other, out)
    if input._data.shape[-1] != other._data.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    return _write_out(tensordot(input, other, ([-1], [-1])), out)


def outer(input, vec2, *, out=None):
    """Outer product of two vectors."""
    _check_dim("outer", "self", input, 1)
    _check_dim("outer", "vec2", vec2, 1)
    return _write_out(input.unsqueeze(1) * vec2, out)


ger = outer


def _scaled_sum(input, product, beta, alpha):
    """``beta * input + alpha * product``; with ``beta == 0`` the input is ignored (its NaNs do not propagate)."""
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        if input.requires_grad and GradState.enabled:  # torch keeps the input in the graph with a zero gradient
            return product + input.where(input.new_zeros((), dtype=_dtype.bool), 0)
        return product
    return (input if beta == 1 else input * beta) + product


def add_product(input, product, operands, beta=1, alpha=1):
    """``beta * input + alpha * product(*operands)``. For float16/bfloat16 operands PyTorch's BLAS calls (addmm,
    baddbmm, addmv, and linear through addmm) compute product, scaling and sum in float32 and round once; rounding the
    product first and the sum again is one ulp off for about a fifth of the outputs."""
    dt = operands[0].dtype
    if dt not in (_dtype.float16, _dtype.bfloat16):
        return _scaled_sum(input, product(*operands), beta, alpha)
    wide = product(*(t.float() for t in operands))
    result = _dtype.promote_types(input.dtype, dt)
    return _scaled_sum(input.float() if input.dtype is dt else input, wide, beta, alpha).to(result)


@autocast_lower
def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * (mat1 @ mat2)``."""
    return _write_out(add_product(input, mm, (mat1, mat2), beta, alpha), out)


def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * (mat @ vec)``."""
    return _write_out(add_product(input, mv, (mat, vec), beta, alpha), out)


@autocast_lower
def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * sum_b batch1[b] @ batch2[b]``."""
    return _write_out(add_product(input, lambda a, b: bmm(a, b).sum(0), (batch1, batch2), beta, alpha), out)


@autocast_lower
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * bmm(batch1, batch2)``."""
    return _write_out(add_product(input, bmm, (batch1, batch2), beta, alpha), out)


def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * outer(vec1, vec2)``."""
    return _write_out(_scaled_sum(input, outer(vec1, vec2), beta, alpha), out)


def _inplace_scaled(fn):
    def method(self, *args, beta=1, alpha=1):
        product = fn(self.detach(), *args, beta=0, alpha=alpha)
        if beta == 0:
            self.zero_()
        elif beta != 1:
            self.mul_(beta)
        return self.add_(product)
    method.__name__ = fn.__name__ + "_"
    return method


# -- other products ----------------------------------------------------------------------------------------------
def tensordot(a, b, dims=2, out=None):
    """Contract ``dims`` (a count of trailing/leading dims, or two lists of dims) of ``a`` and ``b``."""
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        dims_a, dims_b = list(range(a._data.ndim - dims, a._data.ndim)), list(range(dims))
    else:
        dims_a, dims_b = dims
        dims_a = [dims_a] if isinstance(dims_a, int) else list(dims_a)
        dims_b = [dims_b] if isinstance(dims_b, int) else list(dims_b)
    if len(dims_a) != len(dims_b):
        raise RuntimeError(f"both dimension lists should have same length, got {dims_a} and {dims_b}")
    dims_a = list(wrap_dims(dims_a, a._data.ndim, "tensordot"))
    dims_b = list(wrap_dims(dims_b, b._data.ndim, "tensordot"))
    for da, db in zip(dims_a, dims_b):
        if a._data.shape[da] != b._data.shape[db]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {a._data.shape[da]} in dim "
                               f"{da} and second has size {b._data.shape[db]} in dim {db}")
    free_a = [d for d in range(a._data.ndim) if d not in dims_a]
    free_b = [d for d in range(b._data.ndim) if d not in dims_b]
    shape_a = tuple(a._data.shape[d] for d in free_a)
    shape_b = tuple(b._data.shape[d] for d in free_b)
    k = math.prod(a._data.shape[d] for d in dims_a)
    if not free_a and not free_b:  # a full contraction: ATen sums products (no mm), so autocast leaves it alone
        return _write_out(_full_contraction(a.permute(dims_a), b.permute(dims_b)), out)
    left = a.permute(free_a + dims_a).reshape(math.prod(shape_a), k)
    right = b.permute(dims_b + free_b).reshape(k, math.prod(shape_b))
    return _write_out(matmul(left, right).reshape(shape_a + shape_b), out)


@autocast_policy(cpu="unlisted")
def _full_contraction(a, b):
    return matmul(a.reshape(-1), b.reshape(-1))


def kron(input, other, *, out=None):
    """Kronecker product (block ``input[i] * other``) over the dims of both tensors."""
    nd = max(input._data.ndim, other._data.ndim)
    a = input.reshape((1,) * (nd - input._data.ndim) + input._data.shape)
    b = other.reshape((1,) * (nd - other._data.ndim) + other._data.shape)
    a_shape, b_shape = [], []
    for sa, sb in zip(a._data.shape, b._data.shape):
        a_shape += [sa, 1]
        b_shape += [1, sb]
    product = a.reshape(a_shape) * b.reshape(b_shape)
    return _write_out(product.reshape(tuple(sa * sb for sa, sb in zip(a._data.shape, b._data.shape))), out)


def cross(input, other, dim=None, *, out=None):
    """Cross product of 3-vectors along ``dim`` (default: the first dim of size 3), broadcasting the inputs."""
    from ._movement import broadcast_tensors, stack

    if input._data.ndim != other._data.ndim:
        raise RuntimeError(f"linalg.cross: inputs must have the same number of dimensions, got shapes "
                           f"{tuple(input.shape)} and {tuple(other.shape)}")
    a, b = broadcast_tensors(input, other)
    if dim is None:
        dim = next((d for d, s in enumerate(a._data.shape) if s == 3), None)
        if dim is None:
            raise RuntimeError(f"cross: no dimension of size 3 in input of shape {tuple(a.shape)}")
    d = wrap_dim(dim, a._data.ndim, "cross")
    if a._data.shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {input.shape[d]} and "
                           f"{other.shape[d]}")
    a0, a1, a2 = a.unbind(d)
    b0, b1, b2 = b.unbind(d)
    return _write_out(stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d), out)


_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


_C_TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}


def _check_cdist_dtypes(x1, x2, use_mm):
    """torch refuses mixed dtypes (no promotion), and half types on CPU outside the matrix-product path."""
    if not use_mm and x1.dtype in (_dtype.float16, _dtype.bfloat16) and x1.device.type == "cpu":
        raise NotImplementedError(f'"cdist" not implemented for \'{TORCH_TYPE_NAMES[x1.dtype.name]}\'')
    if x1.dtype is not x2.dtype:
        if use_mm:
            raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_C_TYPE_NAMES[x1.dtype.name]} "
                               f"!= {_C_TYPE_NAMES[x2.dtype.name]}")
        raise RuntimeError(f"expected scalar type {TORCH_TYPE_NAMES[x1.dtype.name]} but found "
                           f"{TORCH_TYPE_NAMES[x2.dtype.name]}")


@autocast_policy(cpu="fp32", cuda="fp32")
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """p-norm distances between the rows of ``x1`` (..., P, M) and ``x2`` (..., R, M)."""
    from .linalg import vector_norm

    if x1._data.ndim < 2 or x2._data.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1._data.ndim}D, X2 got: "
                           f"{x2._data.ndim}D")
    if x1._data.shape[-1] != x2._data.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1._data.shape[-1]} X2: "
                           f"{x2._data.shape[-1]}")
    for name, x in (("X1", x1), ("X2", x2)):
        if not x.is_floating_point():
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: "
                               f"{TORCH_TYPE_NAMES[x.dtype.name]}")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    rows = max(x1._data.shape[-2], x2._data.shape[-2])
    use_mm = compute_mode == "use_mm_for_euclid_dist" or (
        compute_mode == "use_mm_for_euclid_dist_if_necessary" and rows > 25)
    if x1.numel() and x2.numel():  # ATen's kernels check the dtypes; an empty result runs none
        _check_cdist_dtypes(x1, x2, p == 2 and use_mm)
    if p == 2 and use_mm:
        # |a - b|^2 = |a|^2 - 2 a.b + |b|^2: one matrix product instead of a (P, R, M) difference tensor.
        from ._pointwise import where

        sq1, sq2 = (x1 * x1).sum(-1, keepdim=True), (x2 * x2).sum(-1, keepdim=True)
        sq = sq1 - 2 * matmul(x1, x2.mT) + sq2.mT
        # ATen clamps at 0 (a distance of exactly 0, not sqrt of a floor) and its backward passes no gradient
        # where the distance is 0; the inner where keeps sqrt's infinite slope at 0 out of the graph.
        positive = sq > 0
        return where(positive, where(positive, sq, 1.0).sqrt(), 0.0)
    if x1.dtype is x2.dtype and x1.dtype in (_dtype.float32, _dtype.float64) and x1._data.ndim == x2._data.ndim:
        if x1._data.shape[:-2] != x2._data.shape[:-2]:
            batch = tuple(broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2])))
            x1, x2 = x1.expand(batch + tuple(x1.shape[-2:])), x2.expand(batch + tuple(x2.shape[-2:]))
        return apply(CDIST, x1, x2, p=float(p))
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if math.isinf(p):
        # torch's cdist hands every coordinate tied for the maximum the whole gradient (an inf-norm splits it):
        # the value is the maximum, the graph the sum of the tied coordinates' (zero-valued) offsets.
        d = diff.abs()
        if not d._data.shape[-1]:  # no coordinates: distance 0, as torch (a max over nothing would raise)
            return d.sum(-1)
        m = d.amax(-1, keepdim=True).detach()
        return (m + ((d - d.detach()) * (d == m)).sum(-1, keepdim=True)).squeeze(-1)
    return vector_norm(diff, p, -1)


def chain_matmul(*matrices, out=None):
    """Product of a chain of matrices (``linalg.multi_dot``)."""
    from .linalg import multi_dot

    return _write_out(multi_dot(list(matrices)), out)


from ._einsum import einsum  # noqa: E402 - split for size; re-exported here
from ._linalg_legacy import (  # noqa: E402 - split for size; re-exported here
    cholesky, cholesky_inverse, cholesky_solve, det, geqrf, inverse, logdet, matrix_power, ormqr, pinverse, qr, slogdet,
    svd,
)

_METHODS = {name: globals()[name] for name in __all__ if name not in ("einsum", "tensordot", "cdist", "chain_matmul",
                                                                     "cholesky_solve")}
_METHODS.update(
    __matmul__=_matmul_operator, __rmatmul__=lambda self, other: matmul(other, self),
    cholesky_solve=lambda self, input2, upper=False: cholesky_solve(self, input2, upper),
    addmm_=_inplace_scaled(addmm), addmv_=_inplace_scaled(addmv), addbmm_=_inplace_scaled(addbmm),
    baddbmm_=_inplace_scaled(baddbmm), addr_=_inplace_scaled(addr),
)
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
