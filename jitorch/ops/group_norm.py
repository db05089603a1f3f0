"""``native_group_norm`` rows: group norm with its per-channel affine as one row (out, mean, rstd) and its backward
row (gx, gw, gb), as ATen's ``native_group_norm``/``native_group_norm_backward``.

For float32/float64 NumPy arrays (made C-contiguous) each is generated kernels: the forward one kernel over the
``(N, G, C/G, spatial)`` space reducing the last two dims (layer norm's row lowering, `jitorch._compile.lower_rows`,
the weight and bias read per channel through their strides), two passes over the input where layer norm's row
kernel and a separate affine multiply and add took four and two temporaries (2.7x torch's time for
``GroupNorm(8, 64)`` at 16x64x32x32, forward and backward); the backward ATen's: per-channel sums of ``g * x`` and
``g`` in one pass, the small per-group algebra in NumPy, then ``gx = g * a + x * b + c`` in one pass. Other arrays
(CuPy) take the same formulas in array ops.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> out, mean, rstd = apply(GROUP_NORM, jitorch.arange(8.0).reshape(1, 4, 2), None, None, groups=2, eps=1e-5)
>>> mean
tensor([[1.5000, 5.5000]])
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from ..autograd.grad_mode import GradState
from ..codegen.ir import FLOAT_IR_DTYPES
from .native_eager import launch_arrays
from .nn_fused import norm_backward_backward, norm_grads
from .norm_moments import shifted_moments
from .table import Opaque, defop

__all__ = ["GROUP_NORM", "GROUP_NORM_BACKWARD"]

_MAX_KERNELS = 128
_HALF = (np.dtype(_dtype.float16.np), np.dtype(_dtype.bfloat16.np))  # computed in float32, rounded as ATen's
_kernels: dict = {}


def _space(x, groups):
    n, c = x.shape[0], x.shape[1]
    return n, groups, c // groups, x.size // max(n * c, 1)


def _build(name, dt, space, present, eps):
    """The kernel ``name`` over ``space = (N, G, C/G, S)``. ``forward``: buffers (out, mean, rstd, x, [weight],
    [bias], x read at each group's first element), reducing ``(C/G, S)``; ``sums``: (ds, db, g, x) with
    ``ds = sum(g * x)`` and ``db = sum(g)`` per (sample, channel); ``grad_input``: (gx, g, x, a, b, c) with
    ``gx = g * a + x * b + c``, ``a``/``b``/``c`` per (sample, channel)."""
    from ..codegen.ir import Buffer, Kernel, Store, load, op, simplify
    from ..codegen.llvm_compile import compile_kernel
    from ..codegen.llvm_objcache import default_cache
    from .._compile import lower_rows  # the compiler package imports the op rows: load it on first use
    from .._compile.lower import Passes

    n, g, cpg, s = space
    b = Passes()
    if name == "forward":
        full = Buffer(dt, (g * cpg * s, cpg * s, s, 1))
        row = Buffer(dt, (g, 1, 0, 0))  # one value per (sample, group)
        channel = Buffer(dt, (0, cpg, 1, 0))  # one value per channel
        params, slot = [], 4
        for p in present:
            params.append(load(slot, dt) if p else None)
            slot += p
        first = Buffer(dt, full.strides[:2] + (0, 0))  # x again, at each group's first element
        out, mean, rstd = lower_rows.layer_norm(b, load(3, dt), load(slot, dt), cpg * s, *params, eps)
        stores = list(b.stores) + [Store(0, out, phase=b._phase(out)), Store(1, mean, row=True),
                                   Store(2, rstd, row=True)]
        shape, buffers, reduce_axes = space, [full, row, row, full] + [channel] * sum(present) + [first], 2
    else:
        full, row = Buffer(dt, (s, 1)), Buffer(dt, (1, 0))  # over (N * C, S): a value per element, per channel
        shape = (n * g * cpg, s)
        if name == "sums":
            grad, x = load(2, dt), load(3, dt)
            ds, db = b.reduce("sum", op("mul", grad, x)), b.reduce("sum", grad)
            stores = list(b.stores) + [Store(0, ds, row=True), Store(1, db, row=True)]
            buffers, reduce_axes = [row, row, full, full], 1
        else:
            value = op("add", op("add", op("mul", load(1, dt), load(3, dt)), op("mul", load(2, dt), load(4, dt))),
                       load(5, dt))
            stores, buffers, reduce_axes = [Store(0, value)], [full, full, full, row, row, row], 0
    b.stores = simplify(stores)
    b._stash()
    return compile_kernel(Kernel(shape, tuple(buffers), tuple(b.stores), reduce_axes), cache=default_cache())


def _kernel(name, x, groups, present, eps):
    """The cached kernel for ``x`` (None where the native path does not take it)."""
    if type(x) is not np.ndarray or x.dtype not in FLOAT_IR_DTYPES or not x.size:
        return None
    key = (name, x.dtype, x.shape, groups, present, eps)
    kernel = _kernels.get(key)
    if kernel is None:
        if len(_kernels) >= _MAX_KERNELS:
            _kernels.clear()
        kernel = _kernels[key] = _build(name, FLOAT_IR_DTYPES[x.dtype], _space(x, groups), present, eps)
    return kernel


def _native_params(params, dtype):
    return all(p is None or (type(p) is np.ndarray and p.dtype == dtype) for p in params)


def _grain(x):
    return max(1, (1 << 15) // (x.size // x.shape[0]))


def _half_params(x, weight, bias):
    """ATen's parameter type for a half ``x``: the input's, or float32 where a weight or bias is (is_mixed_type)."""
    return np.dtype(np.float32) if any(p is not None and p.dtype != x.dtype for p in (weight, bias)) else x.dtype


def _forward_kernel(xp, x, weight, bias, groups, eps):
    if x.dtype in _HALF:
        # ATen's reduced-type kernel computes in float32 and rounds the output; it keeps the statistics in the
        # parameters' type, which its backward reads.
        wide = [None if p is None else p.astype(np.float32) for p in (x, weight, bias)]
        out, mean, rstd = _forward_kernel(xp, *wide, groups, eps)
        param = _half_params(x, weight, bias)
        return out.astype(x.dtype), mean.astype(param), rstd.astype(param)
    n = x.shape[0]
    kernel = _kernel("forward", x, groups, (weight is not None, bias is not None), float(eps)) \
        if _native_params((weight, bias), x.dtype) else None
    if kernel is not None:
        x = np.ascontiguousarray(x)
        out, mean, rstd = np.empty(x.shape, x.dtype), np.empty((n, groups), x.dtype), np.empty((n, groups), x.dtype)
        launch_arrays(kernel, [out, mean, rstd, x] + [np.ascontiguousarray(p) for p in (weight, bias)
                                                       if p is not None] + [x], x.size, _grain(x))
        return out, mean, rstd
    mean, centered, var = shifted_moments(xp, x.reshape(n, groups, -1), 1, False)  # as the kernel's statistics
    rstd = 1 / xp.sqrt(var + eps)
    out = (centered * rstd).reshape(x.shape)
    mean, rstd = mean.reshape(n, groups), rstd.reshape(n, groups)
    view = (1, -1) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(view)
    if bias is not None:
        out = out + bias.reshape(view)
    return out.astype(x.dtype, copy=False), mean, rstd


def _half_backward(g, x, mean, rstd, weight, groups):
    """ATen's reduced-type backward: per-channel sums of ``g * x`` and ``g`` in float32, the per-group algebra in
    float32 from the statistics as the forward saved them (rounded to the parameters' type), ``gx = c1 * g + c2 * x
    + c3`` rounded once; the parameter gradients summed over the batch in float32, rounded to the parameters' type.
    (The float32 row's backward read unrounded statistics: one half step off on 30-60% of the gradients.)"""
    f32 = np.float32
    n, c = x.shape[:2]
    cpg = c // groups
    xf, gf = x.reshape(n, c, -1).astype(f32), g.reshape(n, c, -1).astype(f32)
    ds = (gf * xf).sum(axis=2, dtype=np.float64).astype(f32)  # float32 sums in ATen, rounded once here
    db = gf.sum(axis=2, dtype=np.float64).astype(f32)
    param = mean.dtype
    gamma = np.ones(c, f32) if weight is None else weight.astype(f32)
    mean, rstd = mean.astype(f32), rstd.astype(f32)
    ds_g = (ds * gamma).reshape(n, groups, cpg).sum(axis=2, dtype=np.float64).astype(f32)
    db_g = (db * gamma).reshape(n, groups, cpg).sum(axis=2, dtype=np.float64).astype(f32)
    s = f32(1) / f32(xf.shape[2] * cpg)
    c2 = (db_g * mean - ds_g) * rstd * rstd * rstd * s
    c3 = -c2 * mean - db_g * rstd * s
    per_channel = lambda v: np.repeat(v, cpg, axis=1)[:, :, None]  # noqa: E731 - (N, G) -> (N, C, 1)
    c1 = per_channel(rstd) * gamma[None, :, None]
    gx = (c1 * gf + per_channel(c2) * xf + per_channel(c3)).reshape(x.shape).astype(x.dtype)
    mean_c, rstd_c = per_channel(mean)[..., 0], per_channel(rstd)[..., 0]
    gw = ((ds - db * mean_c) * rstd_c).sum(axis=0, dtype=np.float64).astype(f32).astype(param)
    gb = db.sum(axis=0, dtype=np.float64).astype(f32).astype(param)
    return gx, gw, gb


def _backward_kernel(xp, g, x, mean, rstd, weight, groups, eps, needs):
    if x.dtype in _HALF:
        if type(x) is np.ndarray:
            return _half_backward(g, x, mean, rstd, weight, groups)
        wide = [None if a is None else a.astype(np.float32) for a in (g, x, mean, rstd, weight)]
        grads = _backward_kernel(xp, *wide, groups, eps, needs)
        return grads[0].astype(x.dtype), grads[1].astype(mean.dtype), grads[2].astype(mean.dtype)
    n, c = x.shape[:2]
    cpg = c // groups
    count = x.size // (n * groups)  # elements per group
    native = _native_params((g, mean, rstd, weight), x.dtype) and _kernel("sums", x, groups, (), None) is not None
    if native:  # ATen's: per-channel sums of g * x and g in one pass, then gx as one pointwise pass
        g, x = np.ascontiguousarray(g), np.ascontiguousarray(x)
        ds, db = np.empty((n, c), x.dtype), np.empty((n, c), x.dtype)
        launch_arrays(_kernel("sums", x, groups, (), None), [ds, db, g, x], x.size, _grain(x))
    else:
        ds = (g * x).reshape(n, c, -1).sum(axis=2)
        db = g.reshape(n, c, -1).sum(axis=2)
    empty = xp.zeros((0,), dtype=x.dtype)  # placeholder for a gradient nobody asked for
    mean_c, rstd_c = xp.repeat(mean, cpg, axis=1), xp.repeat(rstd, cpg, axis=1)  # (N, C)
    gw = ((ds - db * mean_c) * rstd_c).sum(axis=0) if needs[1] else empty
    gb = db.sum(axis=0) if needs[2] else empty
    gx = empty
    if needs[0]:
        gamma = weight[None, :] if weight is not None else xp.ones((1, c), dtype=x.dtype)
        ds_g = (ds * gamma).reshape(n, groups, cpg).sum(axis=2)
        db_g = (db * gamma).reshape(n, groups, cpg).sum(axis=2)
        c2 = (db_g * mean - ds_g) * rstd * rstd * rstd / count
        c3 = -c2 * mean - db_g * rstd / count
        a = gamma * rstd_c
        b, c_ = xp.repeat(c2, cpg, axis=1), xp.repeat(c3, cpg, axis=1)
        if native:
            gx = np.empty(x.shape, x.dtype)
            coefficients = [np.ascontiguousarray(v, dtype=x.dtype) for v in (a, b, c_)]
            launch_arrays(_kernel("grad_input", x, groups, (), None), [gx, g, x] + coefficients, x.size, _grain(x))
        else:
            view = (n, c) + (1,) * (x.ndim - 2)
            gx = (g * a.reshape(view) + x * b.reshape(view) + c_.reshape(view)).astype(x.dtype, copy=False)
    return gx, gw, gb


def _grads(g, x, weight, needs, groups, eps):
    """(gx, gw, gb) in jitorch ops, the statistics recomputed from ``x``: differentiable to any order."""
    n, c = x.shape[:2]
    if x.dtype in (_dtype.float16, _dtype.bfloat16):  # in float32, as the half kernels compute
        grads = _grads(g.float(), x.float(), None if weight is None else weight.float(), needs, groups, eps)
        dtypes = (x.dtype,) + (x.dtype if weight is None else weight.dtype,) * 2
        return tuple(None if t is None else t.to(dt) for t, dt in zip(grads, dtypes))
    shape = (n, groups, c // groups, -1)
    gx, gw, gb = norm_grads(g.reshape(shape), x.reshape(shape), weight, (2, 3), (0, 3), eps, needs,
                            lambda w: w.reshape(1, groups, c // groups, 1))
    return (None if gx is None else gx.reshape(x.shape), None if gw is None else gw.reshape(c),
            None if gb is None else gb.reshape(c))


def _backward(ctx, g, _g_mean, _g_rstd):
    x, weight, _bias = ctx.inputs
    groups, eps = ctx.attrs["groups"], ctx.attrs["eps"]
    needs = (ctx.needs_grad(0), ctx.needs_grad(1), ctx.needs_grad(2))
    if GradState.enabled:  # create_graph: the composite formula, so the gradients have a graph of their own
        return _grads(g, x, weight, needs, groups, eps)
    from .._dispatch import apply

    mean, rstd = ctx.output(1), ctx.output(2)  # ``out`` itself may since have been changed in place
    gx, gw, gb = apply(GROUP_NORM_BACKWARD, g, x, mean, rstd, weight, groups=groups, eps=eps,
                       needs=needs)
    return (gx if needs[0] else None), (gw if needs[1] else None), (gb if needs[2] else None)


def _backward_backward(ctx, ggx, ggw, ggb):
    groups, eps = ctx.attrs["groups"], ctx.attrs["eps"]
    grads = lambda g, x, w, needs: _grads(g, x, w, needs, groups, eps)  # noqa: E731 - norm_backward_backward's form
    return norm_backward_backward(ctx, grads, ctx.inputs[4], (ggx, ggw, ggb))


GROUP_NORM = defop("native_group_norm", _forward_kernel, _backward, Opaque("group statistics and an affine pass"),
                   nout=3, saves="both", nondiff_outputs=(1, 2), grad_name="NativeGroupNormBackward0")
GROUP_NORM_BACKWARD = defop("native_group_norm_backward", _backward_kernel, _backward_backward,
                            Opaque("group reductions and a pointwise pass"), nout=3, saves="inputs",
                            grad_name="NativeGroupNormBackwardBackward0")
