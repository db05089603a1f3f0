"""Fused rows for the hot composites of ``nn.functional`` (PyTorch's ``_softmax``, ``_log_softmax``,
``native_layer_norm``, ``nll_loss`` (in `nn_nll`) and their ``*_backward`` rows).

As composites, softmax, log_softmax and layer_norm cost 5 to 12 dispatches and autograd nodes each, forward and
backward, and allocate a temporary per step; as rows they are one kernel pass over the data and one node. Each
backward is itself a row (one dispatch in the backward pass) whose own backward is written in jitorch ops, so double
backward keeps working.

The rows take float32/float64 only; ``nn.functional`` keeps the composites for other dtypes and layouts.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> x = jitorch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
>>> y = apply(SOFTMAX, x, dim=1)
>>> y
tensor([[0.0900, 0.2447, 0.6652]], grad_fn=<SoftmaxBackward0>)
>>> (y * jitorch.tensor([[1.0, 0.0, 0.0]])).sum().backward()
>>> x.grad
tensor([[ 0.0819, -0.0220, -0.0599]])
"""
from __future__ import annotations

import numpy as np

from .. import _dispatch
from .._dispatch_fast import nothing_records, plain_arrays, plain_tensor
from ..autograd.grad_mode import GradState
from . import native_rows
from .cascade_sum import sum_rows
from .norm_moments import shifted_moments
from .._memory_format import row_major
from .table import Opaque, defop

__all__ = ["SOFTMAX", "SOFTMAX_BACKWARD", "LOG_SOFTMAX", "LOG_SOFTMAX_BACKWARD", "LAYER_NORM", "LAYER_NORM_BACKWARD",
           "NLL_LOSS", "NLL_LOSS_BACKWARD", "FUSED_DTYPES", "layer_norm_output", "softmax_output"]

FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _apply(op, *args, **attrs):
    # The module, bound once (it is loaded before the nn rows): an import statement here cost a microsecond a call.
    return _dispatch.apply(op, *args, **attrs)


# -- softmax / log_softmax --------------------------------------------------------------------------------------------
# The softmax rows compute on ``x.contiguous()`` into row-major results, as ATen's (a transposed input's softmax is
# row-major in torch: ``.view`` works on it).
def _softmax_kernel(xp, x, dim):
    if x.ndim == 0:  # one element (the in-place steps below need an array)
        return _softmax_kernel(xp, x.reshape(1), 0).reshape(())
    x = row_major(x)
    out = native_rows.softmax(x, dim)  # CPU, last dim: one generated kernel of three passes
    if out is not None:
        return out
    out = x - x.max(axis=dim, keepdims=True)  # a fresh array: the rest works in place on it
    xp.exp(out, out=out)
    out /= out.sum(axis=dim, keepdims=True)
    return out


def _plain_row_backward(kernel, ctx, g):
    """A softmax row's backward kernel on the arrays of ``g`` and the saved output, as a tensor, when nothing records
    (`plain_arrays`: one float dtype and shape), else None: the backward row's dispatch cost as long as its kernel on
    32 x 32."""
    y = ctx.out
    arrays = plain_arrays(g, y)
    return None if arrays is None else plain_tensor(kernel(np, arrays[0], arrays[1], ctx.attrs["dim"]))


def _softmax_backward(ctx, g):
    out = _plain_row_backward(_softmax_backward_kernel, ctx, g)
    return _apply(SOFTMAX_BACKWARD, g, ctx.out, dim=ctx.attrs["dim"]) if out is None else out


def _softmax_backward_kernel(xp, g, y, dim):
    g, y = row_major(g), row_major(y)
    out = native_rows.softmax_backward(g, y, dim)
    if out is not None:
        return out
    gy = g * y
    s = gy.sum(axis=dim, keepdims=True)
    gy -= y * s  # y * (g - sum(g * y))
    return gy


def _softmax_backward_backward(ctx, gg):
    # out = y * (g - s), s = sum(g * y): d/dg is the same map of gg; d/dy = gg * (g - s) - g * sum(gg * y).
    g, y = ctx.inputs
    dim = ctx.attrs["dim"]
    gg_g = _apply(SOFTMAX_BACKWARD, gg, y, dim=dim) if ctx.needs_grad(0) else None
    gg_y = None
    if ctx.needs_grad(1):
        gg_y = gg * (g - (g * y).sum(dim, keepdim=True)) - g * (gg * y).sum(dim, keepdim=True)
    return gg_g, gg_y


def _log_softmax_kernel(xp, x, dim):
    x = row_major(x)
    out = native_rows.log_softmax(x, dim)
    if out is not None:
        return out
    out = x - x.max(axis=dim, keepdims=True)
    out -= xp.log(xp.exp(out).sum(axis=dim, keepdims=True))
    return out


def _log_softmax_backward(ctx, g):
    out = _plain_row_backward(_log_softmax_backward_kernel, ctx, g)
    return _apply(LOG_SOFTMAX_BACKWARD, g, ctx.out, dim=ctx.attrs["dim"]) if out is None else out


def _log_softmax_backward_kernel(xp, g, y, dim):
    g, y = row_major(g), row_major(y)
    out = native_rows.log_softmax_backward(g, y, dim)
    if out is not None:
        return out
    out = xp.exp(y)
    out *= g.sum(axis=dim, keepdims=True)
    return g - out  # g - softmax * sum(g)


def _log_softmax_backward_backward(ctx, gg):
    # out = g - exp(y) * sum(g): d/dg = gg - sum(gg * exp(y)); d/dy = -gg * exp(y) * sum(g).
    g, y = ctx.inputs
    dim = ctx.attrs["dim"]
    p = y.exp()
    gg_g = gg - (gg * p).sum(dim, keepdim=True) if ctx.needs_grad(0) else None
    gg_y = -gg * p * g.sum(dim, keepdim=True) if ctx.needs_grad(1) else None
    return gg_g, gg_y


def softmax_output(op, input, dim):
    """``apply(op, input, dim=dim)`` of `SOFTMAX` or `LOG_SOFTMAX` over the last dim of a C-contiguous float32 or
    float64 CPU tensor with no mode active (eager ``softmax``): the native kernel straight away; None where the row's
    general path is needed (the dispatcher's checks and wrapping took as long as the kernel on 32 x 32).

    >>> import jitorch
    >>> softmax_output(SOFTMAX, jitorch.tensor([[0.0, 0.0]], requires_grad=True), -1)
    tensor([[0.5000, 0.5000]], grad_fn=<SoftmaxBackward0>)
    """
    d = _dispatch
    if d.MODES or d.CPU_XP is not np or type(input) not in d.TENSOR_TYPES:
        return None
    x = input._data
    if type(x) is not np.ndarray or x.dtype not in FUSED_DTYPES or not x.flags.c_contiguous:
        return None
    last = x.ndim - 1
    if dim != last and dim != -1:
        return None
    out_data = (native_rows.softmax if op is SOFTMAX else native_rows.log_softmax)(x, last)
    if out_data is None:
        return None
    if input._base is not None and input._view_ver != input._ver_owner._ver:
        d.sync_view(input)  # (the history only: the array stays)
    out = d._new(d.Tensor)
    out._data = out_data
    if GradState.inference:
        out._inference = True
    if input._requires_grad and GradState.enabled:
        d.record(op, (input,), {"dim": last}, [out])
    return out


SOFTMAX = defop("softmax", _softmax_kernel, _softmax_backward, Opaque("max, exp and sum passes"), saves="outputs",
                row_major_out=True)
SOFTMAX_BACKWARD = defop("softmax_backward_data", _softmax_backward_kernel, _softmax_backward_backward,
                         Opaque("a reduction and a pointwise pass"), promotion="promote", saves="inputs",
                         row_major_out=True)
LOG_SOFTMAX = defop("log_softmax", _log_softmax_kernel, _log_softmax_backward, Opaque("max, exp and sum passes"),
                    saves="outputs", row_major_out=True)
LOG_SOFTMAX_BACKWARD = defop("log_softmax_backward_data", _log_softmax_backward_kernel,
                             _log_softmax_backward_backward, Opaque("a reduction and a pointwise pass"),
                             promotion="promote", saves="inputs", row_major_out=True)


# -- layer_norm: (out, mean, rstd); mean and rstd are non-differentiable extras the backward reuses -------------------
def _axes(ndim, k):
    return tuple(range(ndim - k, ndim))


# Row statistics as BLAS products (``rows @ ones``) and einsum dot products instead of NumPy's reductions along the
# last axis, which run one short row at a time (5-10x slower for rows of a few hundred). Their float32 accumulation is
# sequential per SIMD lane, so longer rows keep NumPy's pairwise sums.
_BLAS_ROW_MAX = 4096


def _rows_of(a, n):
    return a.reshape(-1, n)


def _layer_norm_kernel(xp, x, weight, bias, k, eps):
    native = native_rows.layer_norm(x, weight, bias, k, eps)
    if native is not None:
        return native
    stat_shape = x.shape[:x.ndim - k] + (1,) * k
    n = 1
    for a in _axes(x.ndim, k):
        n *= x.shape[a]
    mean, out, var = shifted_moments(xp, x, k, n <= _BLAS_ROW_MAX)  # as the row kernels: exact on constant rows
    mean, rstd = mean.reshape(stat_shape), (1 / xp.sqrt(var + eps)).reshape(stat_shape)
    out = out.reshape(x.shape)
    out *= rstd
    if weight is not None:
        out *= weight
    if bias is not None:
        out += bias
    return out, mean, rstd.astype(x.dtype, copy=False)


def norm_grads(g, x, weight, dims, param_dims, eps, needs, weight_view=lambda w: w, stats=None):
    """(gx, gw, gb) of a normalization over ``dims`` with an affine ``weight`` (broadcast by ``weight_view``) whose
    gradients sum over ``param_dims``, in jitorch ops. Layer norm: the trailing dims, and the leading ones for the
    parameters; batch norm: all but dim 1. The statistics are recomputed from ``x`` (differentiable to any order)
    unless ``stats=(mean, rstd)`` are given (a compiled backward's decomposition: jitorch._compile.decompose)."""
    if stats is None:
        # Shifted by each slice's first element as the forward kernels (`norm_moments`): exact on constant slices.
        # The shift is detached: the statistics do not depend on it, so neither do their derivatives.
        reduced = {d % x.dim() for d in dims}
        offset = x - x[tuple(slice(0, 1) if d in reduced else slice(None) for d in range(x.dim()))].detach()
        centered = offset - offset.mean(dims, keepdim=True)
        rstd = ((centered * centered).mean(dims, keepdim=True) + eps).rsqrt()
    else:
        mean, rstd = stats
        centered = x - mean
    xhat = centered * rstd
    gw = ((g * xhat).sum(param_dims) if param_dims else g * xhat) if needs[1] else None
    gb = (g.sum(param_dims) if param_dims else g) if needs[2] else None
    gx = None
    if needs[0]:
        gxh = g * weight_view(weight) if weight is not None else g
        gx = rstd * (gxh - gxh.mean(dims, keepdim=True) - xhat * (gxh * xhat).mean(dims, keepdim=True))
    return gx, gw, gb


def norm_backward_backward(ctx, grads, weight, ggs):
    """The vector-Jacobian product of ``grads(g, x, weight, needs)`` (a `norm_grads` composite; the statistics are
    recomputed from x, so they get no edge) for a backward row with inputs ``(g, x, stat, stat, weight)``."""
    from ..autograd import grad as autograd_grad
    from ..autograd.grad_mode import enable_grad

    g, x = ctx.inputs[:2]
    with enable_grad():
        leaves = [t.detach().requires_grad_() if t is not None else None for t in (g, x, weight)]
        outs = grads(leaves[0], leaves[1], leaves[2], (True, weight is not None, True))
        pairs = [(o, gg) for o, gg in zip(outs, ggs) if gg is not None and o is not None]
        wrt = [t for t in leaves if t is not None]
        got = list(autograd_grad([o for o, _ in pairs], wrt, [gg for _, gg in pairs], allow_unused=True,
                                 create_graph=GradState.enabled)) + [None]
    gg_w = got[2] if weight is not None else None
    return (got[0] if ctx.needs_grad(0) else None), (got[1] if ctx.needs_grad(1) else None), None, None, \
        (gg_w if ctx.needs_grad(4) else None)


def _layer_norm_grads(g, x, weight, k, eps, needs):
    return norm_grads(g, x, weight, tuple(range(-k, 0)), tuple(range(x.dim() - k)), eps, needs)


def _layer_norm_backward(ctx, g, _g_mean, _g_rstd):
    x, weight, _bias = ctx.inputs
    k, eps = ctx.attrs["k"], ctx.attrs["eps"]
    needs = (ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2))
    if GradState.enabled:
        # create_graph: the composite formula, so the gradients have a graph of their own.
        return _layer_norm_grads(g, x, weight, k, eps, needs)
    mean, rstd = ctx.output(1), ctx.output(2)  # ``out`` itself may since have been changed in place
    if nothing_records() and type(g) in _dispatch.TENSOR_TYPES:
        # Nothing to record: the backward row's kernel on the arrays (`fast_keep`'s call) without the dispatch.
        arrays = g._data, x._data, mean._data, rstd._data, None if weight is None else weight._data
        if type(arrays[0]) is type(arrays[1]) is type(arrays[2]) is type(arrays[3]) is np.ndarray and \
                (weight is None or type(arrays[4]) is np.ndarray):
            gx, gw, gb = _layer_norm_backward_kernel(np, *arrays, k, eps)
            return plain_tensor(gx) if needs[0] else None, plain_tensor(gw) if needs[1] else None, \
                plain_tensor(gb) if needs[2] else None
    gx, gw, gb = _apply(LAYER_NORM_BACKWARD, g, x, mean, rstd, weight, k=k, eps=eps)
    return (gx if needs[0] else None), (gw if needs[1] else None), (gb if needs[2] else None)


def _layer_norm_backward_kernel(xp, g, x, mean, rstd, weight, k, eps):
    native = native_rows.layer_norm_backward(g, x, mean, rstd, weight, k)
    if native is not None:
        return native
    axes = _axes(x.ndim, k)
    n = 1
    for a in axes:
        n *= x.shape[a]
    # Everything as (rows, n) matrices: reshapes of the contiguous inputs, not copies.
    g2, xhat = _rows_of(g, n), _rows_of(x, n) - _rows_of(mean, 1)
    rstd2 = _rows_of(rstd, 1)
    xhat *= rstd2
    gxh = g2 * weight.reshape(-1) if weight is not None else g2.copy()  # updated in place below; g is the caller's
    if n > _BLAS_ROW_MAX:
        gw = sum_rows(xp, g2 * xhat)  # a cascade over many rows, as the native path's
        gb = sum_rows(xp, g2)
        c2 = (gxh * xhat).sum(axis=1, keepdims=True)
        c1 = gxh.sum(axis=1, keepdims=True)
    else:
        gw = xp.einsum("ij,ij->j", g2, xhat)
        gb = xp.matmul(xp.ones(g2.shape[0], dtype=g.dtype), g2)
        c2 = xp.einsum("ij,ij->i", gxh, xhat)[:, None]
        c1 = xp.matmul(gxh, xp.ones(n, dtype=g.dtype))[:, None]
    c2 /= n
    c1 /= n
    # gx = rstd * (gxh - mean(gxh) - xhat * mean(gxh * xhat))
    xhat *= c2
    gxh -= xhat
    gxh -= c1
    gxh *= rstd2
    shape = x.shape[x.ndim - k:]
    return gxh.reshape(x.shape), gw.reshape(shape).astype(x.dtype, copy=False), \
        gb.reshape(shape).astype(x.dtype, copy=False)


def _layer_norm_backward_backward(ctx, ggx, ggw, ggb):
    k, eps = ctx.attrs["k"], ctx.attrs["eps"]
    return norm_backward_backward(ctx, lambda g, x, w, needs: _layer_norm_grads(g, x, w, k, eps, needs),
                                  ctx.inputs[4], (ggx, ggw, ggb))


LAYER_NORM = defop("native_layer_norm", _layer_norm_kernel, _layer_norm_backward,
                   Opaque("row statistics and an affine pass"), nout=3, saves="both", nondiff_outputs=(1, 2),
                   grad_name="NativeLayerNormBackward0")
LAYER_NORM_BACKWARD = defop("native_layer_norm_backward", _layer_norm_backward_kernel, _layer_norm_backward_backward,
                            Opaque("row reductions and a pointwise pass"), nout=3, saves="inputs",
                            grad_name="NativeLayerNormBackwardBackward0")


def layer_norm_output(input, weight, bias, k, eps):
    """``apply(LAYER_NORM, input, weight, bias, k=k, eps=eps)[0]`` with no mode active (eager ``F.layer_norm``): the
    native kernel straight away, mean and rstd made tensors only for the autograd node (on 8 x 32 the dispatcher's
    checks and three tensors cost about as long as the kernel); None where the row's general path is needed.

    >>> import jitorch
    >>> layer_norm_output(jitorch.tensor([[1.0, 3.0]], requires_grad=True), None, None, 1, 0.0)
    tensor([[-1.,  1.]], grad_fn=<NativeLayerNormBackward0>)
    """
    d = _dispatch
    types = d.TENSOR_TYPES
    if d.MODES or d.CPU_XP is not np or type(input) not in types:
        return None
    x, w, b, grad = input._data, None, None, input._requires_grad
    if weight is not None:
        if type(weight) not in types:
            return None
        w, grad = weight._data, grad or weight._requires_grad
    if bias is not None:
        if type(bias) not in types:
            return None
        b, grad = bias._data, grad or bias._requires_grad
    grad = grad and GradState.enabled
    res = native_rows.layer_norm(x, w, b, k, eps, grad)  # None unless every array is a plain NumPy one it takes
    if res is None:
        return None
    args = (input, weight, bias)
    if input._base is not None or weight is not None and weight._base is not None or \
            bias is not None and bias._base is not None:
        for t in args:
            if t is not None and t._base is not None and t._view_ver != t._ver_owner._ver:
                d.sync_view(t)  # (the history only: the arrays stay)
    out = d._new(d.Tensor)
    out._data = res[0]
    inference = GradState.inference
    if inference:
        out._inference = True
    if grad:
        mean, rstd = d._new(d.Tensor), d._new(d.Tensor)
        mean._data, rstd._data = res[1], res[2]
        if inference:
            mean._inference = rstd._inference = True
        d.record(LAYER_NORM, args, {"k": k, "eps": eps}, [out, mean, rstd])
    return out


from .nn_nll import NLL_CHECK_TARGETS, NLL_LOSS, NLL_LOSS_BACKWARD, _nll_targets  # noqa: E402,F401 - split for size
