"""The rows whose gradients are sparse_coo tensors or read them: ``sparse_mm`` and ``sparse_embedding``.

``sparse_embedding(weight, indices)`` is ``weight[indices]`` (``F.embedding``/``F.embedding_bag`` with
``sparse=True``); its backward gives the weight's gradient as torch's sparse_coo tensor (`_sparse_embedding_backward`).

The sparse-times-dense product row: ``sparse_mm(indices, values, dense)`` is ``A @ dense`` (or ``A.T @ dense``)
for the COO matrix ``A`` of shape ``(rows, cols)`` whose entries ``values[k]`` sit at ``indices[:, k]``.

The kernel hands the product to a sparse library: ``scipy.sparse`` for NumPy arrays, ``cupyx.scipy.sparse`` for
CuPy arrays (:func:`_sparse_module`, the one device-specific choice). Coalesced indices (row-major sorted, no
duplicates) become a CSR matrix without a sort; others go through COO -> CSR, which sums duplicates. The transposed
product uses the same matrix's transpose (CSC), so the backward never re-sorts. Half types compute in float32. Bool,
which SciPy lacks, takes a scatter-add over the entries; so does int32 on CUDA (cuSPARSE has no integer kernels;
CuPy's scatter-add has an atomic add for int32, not for int64, int16, int8, uint8 or bool), while CUDA's other integer
dtypes and bool are refused with torch's NotImplementedError.

The backward is written in jitorch ops: the dense operand's gradient is the transposed product (this row again, so
second derivatives work), the values' gradient ``g[r_k] . dense[c_k]`` a gather and a row sum.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> i = jitorch.tensor([[0, 1], [1, 0]])
>>> apply(SPARSE_MM, i, jitorch.tensor([2.0, 3.0]), jitorch.ones(2, 2), rows=2, cols=2, transpose=False,
...       coalesced=True)
tensor([[2., 2.],
        [3., 3.]])
"""
from __future__ import annotations

import numpy as np

from ..runtime import is_cupy, scatter_add
from .table import Opaque, defop

__all__ = ["SPARSE_MM", "SPARSE_EMBEDDING"]

_HALF = frozenset({"float16", "bfloat16"})  # computed in float32: the libraries have no half-precision kernels
_CUPY_DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))
_CUPY_SCATTER = np.dtype(np.int32)  # the integer dtype CUDA's products take, through CuPy's scatter_add


def _sparse_module(xp):
    """``scipy.sparse`` for NumPy arrays, ``cupyx.scipy.sparse`` for CuPy arrays (loaded on first use: SciPy's import
    is not paid by ``import jitorch``)."""
    if is_cupy(xp):
        import cupyx.scipy.sparse as sparse
    else:
        import scipy.sparse as sparse
    return sparse


def _matrix(xp, sparse, indices, values, rows, cols, coalesced):
    """The CSR matrix of the COO entries. cuSPARSE takes 32-bit indices; SciPy gets copies of the 64-bit ones
    (``astype`` copies), which it may downcast to 32 bits itself."""
    index_dtype = np.int32 if is_cupy(xp) else indices.dtype
    r, c = indices[0], indices[1]
    if coalesced:  # row-major sorted and unique: the row starts are a running count of the rows
        counts = xp.bincount(r, minlength=rows) if r.size else xp.zeros(rows, dtype=index_dtype)
        indptr = xp.concatenate([xp.zeros(1, dtype=index_dtype), xp.cumsum(counts).astype(index_dtype)])
        return sparse.csr_matrix((values, c.astype(index_dtype), indptr), shape=(rows, cols))
    return sparse.coo_matrix((values, (r.astype(index_dtype), c.astype(index_dtype))), shape=(rows, cols)).tocsr()


def _scatter_product(xp, indices, values, dense, rows, cols, transpose):
    # out[r_k] += v_k * dense[c_k] entry by entry (the transposed product swaps r and c).
    r, c = (indices[1], indices[0]) if transpose else (indices[0], indices[1])
    out = xp.zeros(((cols if transpose else rows),) + dense.shape[1:], dtype=dense.dtype)
    scatter_add(xp, out, (r,), values[:, None] * dense[c])
    return out


def _sparse_mm_kernel(xp, indices, values, dense, *, rows, cols, transpose, coalesced):
    dtype = dense.dtype
    work = np.dtype(np.float32) if dtype.name in _HALF else dtype
    if is_cupy(xp) and work not in _CUPY_DTYPES:  # cuSPARSE has no integer kernels
        if work != _CUPY_SCATTER:
            from .._dispatch import TORCH_TYPE_NAMES

            raise NotImplementedError(f'"addmm_sparse_cuda" not implemented for \'{TORCH_TYPE_NAMES[work.name]}\' '
                                      "(sparse.mm on CUDA takes floating, complex or int32 values; compute in one of "
                                      "those with .to(dtype), or on the CPU)")
        return _scatter_product(xp, indices, values, dense, rows, cols, transpose)
    if work.kind == "b":  # SciPy has integer kernels, not bool ones
        return _scatter_product(xp, indices, values, dense, rows, cols, transpose)
    v, d = values.astype(work, copy=False), dense.astype(work, copy=False)
    a = _matrix(xp, _sparse_module(xp), indices, v, rows, cols, coalesced)
    out = (a.T if transpose else a) @ d
    return xp.ascontiguousarray(out).astype(dtype, copy=False)


def _sparse_mm_backward(ctx, g):
    from .._dispatch import apply

    indices, values, dense = ctx.inputs
    attrs = ctx.attrs
    complex_ = values.is_complex()
    g_values = g_dense = None
    if ctx.needs_grad(1):
        # d out[r] / d v_k = dense[c] for the entry k at (r, c): g[r] . dense[c] (conjugated as torch's g @ D^H).
        r, c = indices[0], indices[1]
        if attrs["transpose"]:
            r, c = c, r
        other = dense.conj() if complex_ else dense
        g_values = (g.index_select(0, r) * other.index_select(0, c)).sum(1)
    if ctx.needs_grad(2):
        v = values.conj() if complex_ else values
        g_dense = apply(SPARSE_MM, indices, v, g, rows=attrs["rows"], cols=attrs["cols"],
                        transpose=not attrs["transpose"], coalesced=attrs["coalesced"])
    return None, g_values, g_dense


SPARSE_MM = defop("sparse_mm", _sparse_mm_kernel, _sparse_mm_backward, Opaque("sparse library product"),
                  saves="inputs", grad_name="MmBackward0")


def _sparse_embedding_kernel(xp, weight, indices, *, num_weights, padding_idx, scale_grad_by_freq):
    # The callers hand indices the check_range row has checked (F.embedding, F.embedding_bag).
    return xp.take(weight, indices, axis=0)


def _sparse_embedding_backward(ctx, g):
    """torch's ``embedding_sparse_backward``: one entry per index in the order looked up (``padding_idx`` entries
    left out), holding its row of ``g``; uncoalesced, as torch's."""
    from ..sparse._coo import make_sparse
    from .indexing import _saved_indices

    attrs = ctx.attrs
    if attrs["scale_grad_by_freq"]:
        raise RuntimeError("embedding_backward: scale_grad_by_freq not supported with sparse gradients")
    (indices,) = _saved_indices(ctx, 1)
    dim = g.shape[-1]
    flat = indices.reshape(-1)
    values = g.reshape(-1, dim)
    if attrs["padding_idx"] is not None:
        keep = (flat != attrs["padding_idx"]).nonzero().reshape(-1)
        flat, values = flat.index_select(0, keep), values.index_select(0, keep)
    else:
        flat = flat.clone()  # the gradient owns its indices: the caller may refill its index tensor
    grad = make_sparse(flat.long().reshape(1, -1), values, (attrs["num_weights"], dim), flat.shape[0] < 2)
    return grad, None


SPARSE_EMBEDDING = defop("sparse_embedding", _sparse_embedding_kernel, _sparse_embedding_backward,
                         Opaque("gather of rows"), saves="inputs", save_if=lambda needs: (False, True),
                         grad_name="EmbeddingBackward0")
