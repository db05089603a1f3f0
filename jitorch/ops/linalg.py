"""Linear algebra primitives: matmul, einsum and vector norms, and ``LinAlgError``.

Kernels call ``xp.matmul`` / ``xp.einsum`` (NumPy and CuPy share them). Backwards are the standard matrix-calculus
formulas written in jitorch ops, so second derivatives work. The LAPACK-backed rows (inverse, solve, determinants,
the factorizations) live in ``linalg_lapack.py`` and are re-exported here.

>>> import jitorch
>>> a = jitorch.ones(2, 3, requires_grad=True)
>>> (a @ jitorch.ones(3, 4)).sum().backward()
>>> a.grad
tensor([[4., 4., 4.],
        [4., 4., 4.]])
"""
from __future__ import annotations

import math
import string

import numpy as np

from .. import _dtype
from .half_cast import converted
from .._memory_format import row_major
from .einsum_matmul import einsum_as_matmul, parse_equation
from .host_matmul import matmul
from .table import Opaque, Reduction, defop

_F32 = np.dtype(np.float32)

_HALF = {"float16", "bfloat16"}
_HALF_DTYPES = _dtype.HALF_NP


class LinAlgError(RuntimeError):
    """A linear algebra failure (singular or non positive-definite input), PyTorch's ``torch.linalg.LinAlgError``."""


def _apply(op, *args, **attrs):
    from .._dispatch import apply

    return apply(op, *args, **attrs)


def _h(t):
    """Conjugate transpose of the last two dims (the plain transpose for real tensors)."""
    return t.mH if t.is_complex() else t.mT


def _in_float32(xp, fn, *arrays):
    """Run ``fn`` in float32 for half-precision inputs (NumPy has no half matmul kernels) and cast back."""
    dtype = arrays[0].dtype
    if dtype.name in _HALF:
        return converted(fn(*(converted(a, _F32) for a in arrays)), dtype)
    return fn(*arrays)


def _same_dtype(op, arrays):
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        names = " and ".join(str(a.dtype) for a in arrays)
        raise RuntimeError(f"{op}: expected all operands to have the same dtype, but got {names}")


# -- matmul -------------------------------------------------------------------------------------------------------
def _matmul_kernel(xp, a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"matmul: both arguments need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    k_a, k_b = a.shape[-1], b.shape[-2] if b.ndim > 1 else b.shape[0]
    if k_a != k_b:
        if a.ndim >= 2 and b.ndim == 2:  # torch folds the batch dims into mat1's rows and says so
            rows = math.prod(a.shape[:-1])
            raise RuntimeError(f"matmul: mat1 and mat2 shapes cannot be multiplied ({rows}x{k_a} and "
                               f"{b.shape[0]}x{b.shape[1]})")
        raise RuntimeError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied "
                           f"({k_a} != {k_b})")
    dtype = a.dtype
    if dtype != b.dtype:
        _same_dtype("matmul", (a, b))
    if dtype in _HALF_DTYPES:  # NumPy has no half-precision matmul kernels
        return row_major(converted(matmul(xp, converted(a, _F32), converted(b, _F32)), dtype))
    # The array modules lay a batched product out as its left operand's batch dims (a ``q`` transposed from
    # ``(B, L, H, D)`` gives permuted scores); torch's are row-major, and code views them so.
    return row_major(matmul(xp, a, b))


def _matmul_backward(ctx, g):
    a, b = ctx.inputs
    if a.dim() == 1 and b.dim() == 1:
        return (g * b.conj() if ctx.needs_grad(0) else None), (g * a.conj() if ctx.needs_grad(1) else None)
    # Lift vectors to matrices, as the forward did; the engine sums broadcast batch dims (``meta=True``).
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    g2 = g.unsqueeze(-2) if a.dim() == 1 else g
    g2 = g2.unsqueeze(-1) if b.dim() == 1 else g2
    ga = gb = None
    if ctx.needs_grad(0):
        ga = _apply(MATMUL, g2, _h(b2))
        ga = ga.squeeze(-2) if a.dim() == 1 else ga
    if ctx.needs_grad(1):
        if b.dim() == 2 and a2.dim() > 2:
            # A batch times one matrix is one matrix product over the flattened batch, as PyTorch folds it: one
            # GEMM, and halves accumulate b's gradient in float32 once instead of rounding per batch and summing.
            a2, g2 = a2.reshape(-1, a2.shape[-1]), g2.reshape(-1, g2.shape[-1])
        if b.dim() == 2 and _is_transposed(b) and not b.is_complex():
            # b is a transposed view (``x @ w.t()``): computing the gradient transposed too gives w's grad in w's
            # own contiguous layout, with no copy later.
            gb = _apply(MATMUL, g2.mT, a2).mT
        else:
            gb = _apply(MATMUL, _h(a2), g2)
        gb = gb.squeeze(-1) if b.dim() == 1 else gb
    return ga, gb


def _is_transposed(t):
    flags = t._data.flags
    return flags.f_contiguous and not flags.c_contiguous


MATMUL = defop("matmul", _matmul_kernel, _matmul_backward, Opaque("BLAS"), saves="inputs", meta=True,
               grad_name="MmBackward0")


# -- einsum (the equation is explicit: no ellipsis, no broadcasting; jitorch.einsum normalizes it) -----------------
def _einsum_kernel(xp, *arrays, equation):
    _same_dtype("einsum()", arrays)
    if len(arrays) == 1:  # one operand: a view (permutation, diagonal) or a reduction, as torch
        return _in_float32(xp, lambda arr: xp.einsum(equation, arr), *arrays)
    # (dtype objects compared, not dtype.name: 2 us a call in NumPy 2.4; products too small to gain are not parsed)
    if len(arrays) == 2 and arrays[0].dtype not in _HALF_DTYPES and arrays[0].size * arrays[1].size >= 4096:
        product = einsum_as_matmul(xp, equation, *arrays)
        if product is not None:
            return product
    # A contraction's result is a new contiguous tensor in torch; NumPy's may come back transposed.
    return _in_float32(xp, lambda *arrs: _c_order(xp.einsum(equation, *arrs, optimize=True)), *arrays)


def _c_order(out):
    return out if out.flags.c_contiguous else out.copy()


def _einsum_backward(ctx, g):
    from .. import _creation

    terms, out = parse_equation(ctx.attrs["equation"])
    operands = ctx.inputs
    used = set(ctx.attrs["equation"])
    fresh = (c for c in string.ascii_letters if c not in used)
    grads = []
    for i, subs in enumerate(terms):
        if not ctx.needs_grad(i):
            grads.append(None)
            continue
        parts = [(out, g)] + [(s, t.conj()) for j, (s, t) in enumerate(zip(terms, operands)) if j != i]
        available = set("".join(s for s, _ in parts))
        target, seen = [], set()
        for pos, ch in enumerate(subs):
            size = operands[i].shape[pos]
            if ch in seen:
                # A repeated label is a diagonal: the gradient lives on it, placed there by an identity factor.
                new = next(fresh)
                parts.append((ch + new, _creation.eye(size, dtype=g.dtype, device=g.device)))
                target.append(new)
                continue
            seen.add(ch)
            target.append(ch)
            if ch not in available:  # summed away in the forward: the gradient is constant along it
                parts.append((ch, _creation.ones(size, dtype=g.dtype, device=g.device)))
                available.add(ch)
        eq = ",".join(s for s, _ in parts) + "->" + "".join(target)
        grads.append(_apply(EINSUM, *(t for _, t in parts), equation=eq))
    return tuple(grads)


EINSUM = defop("einsum", _einsum_kernel, _einsum_backward, Opaque("tensor contraction"), saves="inputs")


# -- vector norm --------------------------------------------------------------------------------------------------
_SQUARES_SPECS: dict = {}  # (ndim, dims) -> the einsum subscripts of `_sum_of_squares`
# NumPy's einsum without its Python layers (the ``__array_function__`` dispatch, the ``optimize`` parsing): what
# ``np.einsum(spec, a, a)`` calls, and half of a small norm's kernel.
try:
    from numpy._core.multiarray import c_einsum as _c_einsum
except ImportError:  # (another NumPy layout: its public einsum)
    _c_einsum = np.einsum


def _sum_of_squares(xp, a, dims, keepdim):
    """``(a * a).sum(dims)`` as one einsum pass: no squared temporary, and no abs of a real input. It was 6x slower
    than torch's 2-norm over the rows of a 1000 x 1000 matrix; einsum's sum is as accurate as ``sum``'s."""
    spec = _SQUARES_SPECS.get((a.ndim, dims))
    if spec is None:  # (built once per layout: the string work took a fifth of a small norm's kernel)
        letters = "abcdefghijklmnopqrstuvwxyz"[:a.ndim]
        kept = "".join(c for i, c in enumerate(letters) if i not in dims)
        if len(_SQUARES_SPECS) >= 256:
            _SQUARES_SPECS.clear()
        spec = _SQUARES_SPECS[(a.ndim, dims)] = f"{letters},{letters}->{kept}"
    out = _c_einsum(spec, a, a) if xp is np and type(a) is np.ndarray else xp.einsum(spec, a, a)
    return out.reshape(tuple(1 if i in dims else n for i, n in enumerate(a.shape))) if keepdim else out


def _vector_norm_kernel(xp, a, ord, dims, keepdim):
    # Row-major results whatever the input's layout, as ATen's reductions (a kept dim must not make them permuted).
    if ord == 2 and a.dtype.kind == "f" and a.dtype.itemsize >= 4 and 0 < a.ndim <= 26:
        dims = tuple(range(a.ndim)) if dims is None else tuple(d % a.ndim for d in dims)
        out = xp.sqrt(_sum_of_squares(xp, a, dims, keepdim))
        if isinstance(out, np.generic):  # (a whole-array norm of a NumPy array: a scalar of the input's dtype)
            return np.asarray(out) if out.dtype == a.dtype else np.asarray(out, a.dtype)
        return row_major(out.astype(a.dtype, copy=False))
    x = xp.abs(a.astype(np.float32) if a.dtype.name in _HALF else a)
    if ord == math.inf:
        out = xp.amax(x, axis=dims, keepdims=keepdim)
    elif ord == -math.inf:
        out = xp.amin(x, axis=dims, keepdims=keepdim)
    elif ord == 0:
        out = (x != 0).sum(axis=dims, keepdims=keepdim)
    elif ord == 1:
        out = x.sum(axis=dims, keepdims=keepdim)
    elif ord == 2:
        out = xp.sqrt((x * x).sum(axis=dims, keepdims=keepdim))
    else:
        out = (x ** ord).sum(axis=dims, keepdims=keepdim) ** (1.0 / ord)
    real = a.real.dtype if a.dtype.kind == "c" else a.dtype
    return row_major(xp.asarray(out).astype(real, copy=False))


def _nonzero(norm):
    # A zero norm means a zero slice: its (sub)gradient is 0. Dividing by 1 there keeps double backward finite.
    return norm.where(norm != 0, 1.0)


def _vector_norm_backward(ctx, g):
    (x,) = ctx.inputs
    ord, dims, keepdim = ctx.attrs["ord"], ctx.attrs["dims"], ctx.attrs["keepdim"]
    from .reduction import _keep

    norm = _keep(ctx.out, x.shape, dims, keepdim)
    g = _keep(g, x.shape, dims, keepdim)
    if ord == 0:
        return x * 0
    if ord == 2:  # (before the sign, which it does not use: one dispatch fewer)
        return g * x / _nonzero(norm)
    sign = x.sgn()
    if ord == 1:
        return g * sign
    if math.isinf(ord):
        hit = x.abs() == norm
        return g * sign * hit / hit.sum(dims, keepdim=True)
    scaled = sign * x.abs() ** (ord - 1)
    if ord < 1:  # |x|^(p-1) is infinite at 0; PyTorch zeroes those entries and scales by norm^(1-p)
        return g * scaled.where(x != 0, 0.0) * norm ** (1 - ord)
    return g * scaled / _nonzero(norm) ** (ord - 1)


VECTOR_NORM = defop("vector_norm", _vector_norm_kernel, _vector_norm_backward, Reduction("norm"),
                    saves="both", grad_name="LinalgVectorNormBackward0", row_major_out=True)


from .linalg_lapack import (  # noqa: E402,F401 - split for size; the rows re-exported here
    CHOLESKY, DET, EIGH, EIGVALSH, INV, PINV, QR, SLOGDET, SOLVE, SVD, SVDVALS,
)
