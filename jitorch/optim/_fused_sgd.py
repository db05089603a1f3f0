"""SGD's ``fused=True`` update (``FusedSGDKernel.cpp``): the kernel's IR and `fused_sgd`, which runs it once per
parameter with `_fused`'s machinery (compiled-kernel cache, scalar slots, domain and shape checks). Split from
``_fused.py``, which re-exports `fused_sgd`.
"""
from __future__ import annotations

import numpy as np

from ..codegen.ir import FLOAT_IR_DTYPES, Store, load, op
from .._tensor import Tensor
from ._fused import (_Scalars, _amp, _build, _check_shapes, _grad_terms, _kernel, _scalar, _scalar_tail, _usable,
                     launch_split)


_SGD_SCALARS = ("weight_decay", "momentum", "one_minus_dampening", "lr", "grad_scale")
# Buffers: 0 param, 1 grad, 2 momentum_buffer (a placeholder without momentum), 3.. scalars.


def _sgd_ir(dt, maximize, decay, momentum, first, nesterov, scaled, scalar_tail=False):
    s = _Scalars(_SGD_SCALARS, 3, dt)
    p, g = load(0, dt), load(1, dt)
    stores = []
    if scaled:
        g = op("div", g, s("grad_scale"))
        stores.append(Store(1, g))
    # Each ``add(x, y, alpha=a)`` of torch's SGD is ATen's ``fma(y, a, x)`` (its fused kernel's too, but for the
    # scalar tail): weight decay, the momentum update, Nesterov's step, the parameter step.
    p, g = _grad_terms(s, p, g, maximize, "l2" if decay else None)
    if momentum:
        if first:
            buf = g
        elif scalar_tail:  # torch's fused scalar loop contracts ``buf * momentum + g * (1 - dampening)`` the other way
            buf = op("fma", load(2, dt), s("momentum"), op("mul", g, s("one_minus_dampening")))
        else:
            buf = op("fma", g, s("one_minus_dampening"), op("mul", load(2, dt), s("momentum")))
        stores.append(Store(2, buf))
        g = op("fma", buf, s("momentum"), g) if nesterov else buf
    stores.append(Store(0, op("fma", g, op("neg", s("lr")), p)))
    return _build(dt, 3, s, stores)


def fused_sgd(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov, maximize,
              grad_scale=None, found_inf=None, as_fused=False):
    """SGD with one fused kernel call per parameter; ``False`` (nothing changed) outside the kernel's domain.
    ``as_fused``: torch's ``fused=True`` values (its scalar loop's momentum update at the end of each parameter);
    else those of its per-op update.

    As ``torch._fused_sgd_``: when every momentum buffer is ``None`` this is the first step, the buffers are created
    (``empty_like(grad)``) and filled with the gradient; ``None`` entries of ``momentum_buffer_list`` are replaced.
    """
    if not _usable(params, grads, [b for b in momentum_buffer_list if b is not None]):
        return False
    weight_decay, momentum, lr, dampening = map(_scalar, (weight_decay, momentum, lr, dampening))
    # Without momentum torch's _init_group leaves momentum_buffer_list empty: nothing there to check.
    _check_shapes("sgd", params, grads, *([momentum_buffer_list] if momentum != 0 else []))
    skip, scale = _amp(grad_scale, found_inf)
    if skip:
        return True
    first = momentum != 0 and all(b is None for b in momentum_buffer_list)
    if momentum != 0 and not first and any(b is None for b in momentum_buffer_list):
        return False  # a partly initialized list (parameters that got gradients late): the unfused rule handles it
    dtype = params[0]._data.dtype if params else None
    key = ("sgd", FLOAT_IR_DTYPES.get(dtype), maximize, weight_decay != 0, momentum != 0, first, nesterov,
           scale is not None)
    scalars = np.array([weight_decay, momentum, 1.0 - dampening, lr, 1.0 if scale is None else scale],
                       dtype=dtype)
    scalar_arrays = (scalars,) * len(_SGD_SCALARS)
    ck = _kernel(key, lambda: _sgd_ir(key[1], *key[2:])) if params else None
    tail_ck = _kernel(key + (True,), lambda: _sgd_ir(key[1], *key[2:], True)) if params and as_fused else None
    for i, param_t in enumerate(params):
        grad = grads[i]._data
        if first:
            momentum_buffer_list[i] = Tensor._make(np.empty_like(grad))
        buf = momentum_buffer_list[i]._data if momentum != 0 else grad
        arrays = [param_t._data, grad, buf]
        launch_split(ck, tail_ck, arrays, scalar_arrays,
                     _scalar_tail(grad.size, dtype.itemsize) if as_fused and momentum != 0 and not first else 0)
        param_t._bump_version()
        if momentum != 0:
            momentum_buffer_list[i]._bump_version()
        if scale is not None:
            grads[i]._bump_version()
    return True
