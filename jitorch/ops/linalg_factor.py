"""LU, triangular solves and general (non-Hermitian) eigen decompositions as rows, with PyTorch's backwards in
jitorch ops.

The LU kernel is partial-pivoting Gaussian elimination vectorized over the batch (NumPy and CuPy share it) and, like
LAPACK's ``getrf``, it never raises: a zero pivot is reported in ``info`` (1-based, 0 when the factorization is
regular), so ``inv_ex``/``solve_ex``/``lu_factor_ex`` can return it and the raising spellings can name the batch
element.

>>> import jitorch
>>> lu, piv = jitorch.linalg.lu_factor(jitorch.tensor([[1.0, 2.0], [3.0, 4.0]]))
>>> piv
tensor([2, 2], dtype=jitorch.int32)
"""
from __future__ import annotations

import numpy as np

from ..runtime import is_cupy
from .linalg import _h
from .linalg_lapack import _lapack
from .table import Opaque, defop


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


# -- LU -----------------------------------------------------------------------------------------------------------
def _lu_kernel(xp, a):
    _lapack(xp, "linalg.lu_factor", lambda x: x, a)  # the dtype check and its message
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    count = int(np.prod(batch, dtype=np.int64))
    lu = xp.array(a, copy=True).reshape((count, m, n))
    pivots = xp.zeros((count, k), dtype=np.int32)
    info = xp.zeros((count,), dtype=np.int32)
    if xp is np and lu.dtype.char in "fdFD" and lu.size:
        # LAPACK's own getrf, one call per matrix: the elimination below runs a Python step per column (a 500 x 500
        # factorization took 180 ms against torch's 2). Same pivots (i?amax, first maximum) and info.
        from scipy.linalg import lapack

        getrf = lapack.get_lapack_funcs("getrf", (lu,))
        for i in range(count):
            lu[i], piv, status = getrf(lu[i])
            pivots[i], info[i] = piv[:k] + 1, max(int(status), 0)
        return lu.reshape(a.shape), pivots.reshape(batch + (k,)), info.reshape(batch)
    rows = xp.arange(count)
    for j in range(k):
        col = lu[:, j:, j]
        # LAPACK's i?amax ranks complex entries by |re| + |im|; the first maximum wins, as argmax's.
        size = xp.abs(col.real) + xp.abs(col.imag) if col.dtype.kind == "c" else xp.abs(col)
        p = j + xp.argmax(size, axis=1) if count else xp.zeros((0,), dtype=np.int64)
        pivots[:, j] = p + 1
        top, chosen = lu[rows, j].copy(), lu[rows, p].copy()
        lu[rows, j], lu[rows, p] = chosen, top
        pivot = lu[:, j, j]
        zero = pivot == 0
        info = xp.where((info == 0) & zero, np.int32(j + 1), info)
        # A zero pivot has only zeros below it (it is the largest): leave them, as getrf does.
        lu[:, j + 1:, j] /= xp.where(zero, 1, pivot)[:, None]
        lu[:, j + 1:, j + 1:] -= lu[:, j + 1:, j:j + 1] * lu[:, j:j + 1, j + 1:]
    return lu.reshape(a.shape), pivots.reshape(batch + (k,)), info.reshape(batch)


def permutation(pivots, m, like):
    """The permutation matrix ``P`` of LAPACK's 1-based row swaps (``A = P L U``), as a tensor like ``like``."""
    from .. import _creation
    from .._tensor import Tensor

    if type(pivots._data) is np.ndarray:
        # The swaps on host integers, all batch elements at once per step: as tensor ops each of a 500 x 500
        # factorization's 500 steps cost a few dispatches (lu and lu_solve took 30 ms around a 3 ms getrf).
        count = int(np.prod(pivots.shape[:-1], dtype=np.int64))
        swaps = pivots._data.reshape(count, pivots.shape[-1]).astype(np.int64) - 1
        order = np.tile(np.arange(m), (count, 1))
        rows = np.arange(count)
        for j in range(swaps.shape[1]):
            target = swaps[:, j]
            order[rows, j], order[rows, target] = order[rows, target], order[rows, j].copy()
        eye = _creation.eye(m, dtype=like.dtype, device=like.device)
        return eye[Tensor._make(order.reshape(tuple(pivots.shape[:-1]) + (m,)))].mT
    perm = _creation.arange(m, device=like.device).expand(pivots.shape[:-1] + (m,)).clone()
    swaps = (pivots.long() - 1).detach()
    for j in range(swaps.shape[-1]):
        target = swaps.narrow(-1, j, 1)
        here, there = perm.narrow(-1, j, 1).clone(), perm.gather(-1, target)
        perm.narrow(-1, j, 1).copy_(there)
        perm.scatter_(-1, target, here)
    # perm[i] is the original row now at position i: P^T has ones at (i, perm[i]).
    eye = _creation.eye(m, dtype=like.dtype, device=like.device)
    return eye[perm].mT


def unpack(lu, pivots, m, n):
    """``(P, L, U)`` of a packed LU factorization."""
    from .. import _creation

    k = min(m, n)
    lower = lu.narrow(-1, 0, k).tril(-1) + _creation.eye(m, k, dtype=lu.dtype, device=lu.device)
    upper = lu.narrow(-2, 0, k).triu()
    return permutation(pivots, m, lu), lower, upper


def _tri_solve(a, b, upper, left=True, unitriangular=False):
    from ..linalg import solve_triangular

    return solve_triangular(a, b, upper=upper, left=left, unitriangular=unitriangular)


def lu_backward(p, lower, upper, g_lower, g_upper):
    """PyTorch's ``linalg_lu_backward``: the gradient of ``A = P L U`` given those of ``L`` (unit lower) and ``U``."""
    from .. import _movement

    m, n = lower.shape[-2], upper.shape[-1]
    k = min(m, n)
    if m == n:
        g = _apply_mm(_h(lower), g_lower).tril(-1) + _apply_mm(g_upper, _h(upper)).triu()
        g = _tri_solve(_h(upper), g, upper=False, left=False)
        g = _tri_solve(_h(lower), g, upper=True, unitriangular=True)
    elif m < n:
        u1, u2 = upper.narrow(-1, 0, k), upper.narrow(-1, k, n - k)
        g = _apply_mm(_h(lower), g_lower) - _apply_mm(g_upper.triu(), _h(upper))
        g = _tri_solve(_h(u1), g.tril(-1), upper=False, left=False)
        g = _movement.cat([g + g_upper.narrow(-1, 0, k).triu(), g_upper.narrow(-1, k, n - k)], -1)
        g = _tri_solve(_h(lower), g, upper=True, unitriangular=True)
        del u2
    else:
        l1 = lower.narrow(-2, 0, k)
        g = _apply_mm(g_upper, _h(upper)) - _apply_mm(_h(lower), g_lower.tril(-1))
        g = _tri_solve(_h(l1), g.triu(), upper=True, unitriangular=True)
        g = _movement.cat([g + g_lower.narrow(-2, 0, k).tril(-1), g_lower.narrow(-2, k, m - k)], -2)
        g = _tri_solve(_h(upper), g, upper=False, left=False)
    return _apply_mm(p, g)


def _apply_mm(a, b):
    from .linalg import MATMUL

    return _apply(MATMUL, a, b)


def _lu_factor_backward(ctx, g_lu, *_):
    lu, pivots, _info = ctx.outputs
    m, n = lu.shape[-2:]
    k = min(m, n)
    p, lower, upper = unpack(lu, pivots, m, n)
    return lu_backward(p, lower, upper, g_lu.narrow(-1, 0, k).tril(-1), g_lu.narrow(-2, 0, k).triu())


LU_FACTOR = defop("linalg_lu_factor", _lu_kernel, _lu_factor_backward, Opaque("pivoted elimination"), nout=3,
                  saves="outputs", nondiff_outputs=(1, 2), grad_name="LinalgLuFactorExBackward0")


# -- triangular solve -----------------------------------------------------------------------------------------------
def _triangular_kernel(xp, a, b, upper, unitriangular):
    """``X`` with ``tri(A) X = B``, batch dims already equal: BLAS ``trsm`` per matrix, as ATen, reading only the
    selected triangle and never refusing a zero on the diagonal (the solution holds inf/nan there, not an error)."""
    if a.dtype.name in ("float16", "bfloat16"):
        from .._dispatch import TORCH_TYPE_NAMES

        raise NotImplementedError(f'"triangular_solve_cpu" not implemented for '
                                  f"'{TORCH_TYPE_NAMES[a.dtype.name]}'")
    out = xp.empty(b.shape, dtype=b.dtype)
    if not out.size:
        return out
    n = a.shape[-1]
    if int(np.prod(a.shape[:-2], dtype=np.int64)) > 4 * n:
        # Many small matrices: substitution row by row, vectorized over the batch (a call per matrix costs more)
        with np.errstate(divide="ignore", invalid="ignore"):
            for i in (range(n - 1, -1, -1) if upper else range(n)):
                done = slice(i + 1, n) if upper else slice(0, i)
                row = b[..., i, :] - xp.matmul(a[..., i:i + 1, done], out[..., done, :])[..., 0, :]
                out[..., i, :] = row if unitriangular else row / a[..., i, i:i + 1]
        return out
    if not is_cupy(xp):
        from scipy.linalg.blas import get_blas_funcs

        trsm = get_blas_funcs("trsm", (a, b))
        for i in np.ndindex(a.shape[:-2]):
            out[i] = trsm(1.0, a[i], b[i], lower=not upper, diag=int(unitriangular))
    else:
        from cupyx.scipy.linalg import solve_triangular

        for i in np.ndindex(a.shape[:-2]):
            out[i] = solve_triangular(a[i], b[i], lower=not upper, unit_diagonal=unitriangular, check_finite=False)
    return out


def _triangular_backward(ctx, g):
    a, _ = ctx.inputs
    upper, unit = ctx.attrs["upper"], ctx.attrs["unitriangular"]
    gb = _apply(TRIANGULAR_SOLVE, _h(a), g, upper=not upper, unitriangular=unit)
    ga = None
    if ctx.needs_grad(0):  # only the triangle the kernel read (without the diagonal if taken as ones) has one
        ga = -_apply_mm(gb, _h(ctx.out))
        ga = ga.triu(int(unit)) if upper else ga.tril(-int(unit))
    return ga, gb if ctx.needs_grad(1) else None


TRIANGULAR_SOLVE = defop("linalg_solve_triangular", _triangular_kernel, _triangular_backward, Opaque("BLAS trsm"),
                         saves="both", grad_name="LinalgSolveTriangularBackward0")


# -- eig ----------------------------------------------------------------------------------------------------------
def _eig_kernel(xp, a):
    complex_dtype = np.result_type(a.dtype, np.complex64)
    if not hasattr(xp.linalg, "eig"):  # CuPy has no general eigensolver: LAPACK on the host, as PyTorch's CUDA path
        import cupy

        values, vectors = _eig_kernel(np, cupy.asnumpy(a))
        return cupy.asarray(values), cupy.asarray(vectors)
    values, vectors = _lapack(xp, "linalg.eig", xp.linalg.eig, a)
    return values.astype(complex_dtype, copy=False), vectors.astype(complex_dtype, copy=False)


def _eig_backward(ctx, g_values, g_vectors):
    (a,) = ctx.inputs
    values, vectors = ctx.outputs
    vh = _h(vectors)
    lconj = values.conj()
    gap = lconj.unsqueeze(-2) - lconj.unsqueeze(-1)
    from .linalg_lapack import _eye_mask, flows

    eye = _eye_mask(values.shape[-1], values.real)
    inner = g_values.diag_embed()
    if flows(g_vectors):
        vhgv = _apply_mm(vh, g_vectors)
        diag = vhgv.diagonal(0, -2, -1)
        if bool((diag.imag.abs() > 1e-2).any()):
            raise RuntimeError("linalg_eig_backward: The eigenvectors in the complex case are specified up to "
                               "multiplication by e^{i phi}. The specified loss function depends on this quantity, "
                               "so it is ill-defined.")
        # Project onto the tangent space of the unit-norm eigenvectors LAPACK returns.
        vhgv = vhgv - _apply_mm(vh, vectors * diag.real.unsqueeze(-2))
        inner = inner + (vhgv / gap.where(~eye, 1.0)).where(~eye, 0.0)
    from ..linalg import solve

    grad = solve(vh, _apply_mm(inner, vh))
    return grad if a.is_complex() else grad.real


EIG = defop("linalg_eig", _eig_kernel, _eig_backward, Opaque("LAPACK geev"), nout=2, saves="both",
            grad_name="LinalgEigBackward0")


# -- PyTorch's failure messages ------------------------------------------------------------------------------------
def _batch_prefix(a, index):
    if a.ndim <= 2:
        return ""
    return f"(Batch element {index}): "


def failure_info(xp, op, a):
    """Per-matrix ``info`` of the factorization behind ``op`` (LAPACK's: 0 when it succeeds), flattened over the
    batch: the zero pivot of LU for inv/solve, the order of the first non-positive-definite leading minor for
    Cholesky."""
    flat = a.reshape((int(np.prod(a.shape[:-2], dtype=np.int64)),) + a.shape[-2:])
    if "cholesky" not in op:
        return _lu_kernel(xp, flat)[2]
    info = []
    for matrix in flat:
        order = 0
        try:
            xp.linalg.cholesky(matrix)
        except np.linalg.LinAlgError:
            order = next((k for k in range(1, matrix.shape[-1] + 1) if not _positive_definite(xp, matrix[:k, :k])),
                         matrix.shape[-1])
        info.append(order)
    return xp.asarray(info, dtype=np.int32)


def _positive_definite(xp, matrix):
    try:
        xp.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return False
    return True


def failure_message(op, a, index, order):
    prefix = _batch_prefix(a, index)
    if "cholesky" in op:
        return (f"{op}: {prefix}The factorization could not be completed because the input is not positive-definite "
                f"(the leading minor of order {order} is not positive-definite).")
    if "solve" in op:
        return f"torch.{op}: {prefix}The solver failed because the input matrix is singular."
    return (f"{op}: {prefix}The diagonal element {order} is zero, the inversion could not be completed because the "
            "input matrix is singular.")


def explain_failure(xp, op, a):
    """PyTorch's ``LinAlgError`` for a failed inv/solve/cholesky, naming the first failing batch element; None for
    other ops (or when the failure is not one of a zero pivot or a non-positive-definite minor)."""
    if not any(name in op for name in ("inv", "solve", "cholesky")):
        return None
    from .linalg import LinAlgError

    info = np.asarray(failure_info(xp, op, a).tolist())
    failed = np.flatnonzero(info)
    if not failed.size:
        return None
    error = LinAlgError(failure_message(op, a, int(failed[0]), int(info[failed[0]])))
    error.info = info.reshape(a.shape[:-2])  # cholesky_ex reads it back
    return error
