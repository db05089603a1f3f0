"""A custom Function's ``jvp`` under forward AD, which jitorch runs as the double-vjp trick (`forward_ad.py`).

The trick takes ``J^T u`` for a zero cotangent ``u`` with ``create_graph`` and differentiates it against the tangent.
While it takes ``J^T u`` (`transposed_jvps`), a custom Function's node answers with the vjp of its own ``jvp``
(linear in the tangents) at ``u`` instead of its ``backward``: differentiated against the tangent, that is the
user's ``jvp``, as torch computes it. A user's Function without ``jvp`` is refused with torch's error; jitorch's own
Functions standing in for ops torch differentiates natively (module hooks, compiled regions, samplers) keep their
``backward``.

>>> import jitorch
>>> import jitorch.autograd.forward_ad as fwAD
>>> class Exp(jitorch.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         y = x.exp()
...         ctx.save_for_forward(y)
...         return y
...     @staticmethod
...     def jvp(ctx, t):
...         (y,) = ctx.saved_tensors
...         return t * y
>>> with fwAD.dual_level():
...     x = fwAD.make_dual(jitorch.tensor([0.0, 1.0]), jitorch.tensor([1.0, 2.0]))
...     fwAD.unpack_dual(Exp.apply(x)).tangent
tensor([1.0000, 5.4366])
"""
from __future__ import annotations

import contextlib

__all__ = ["JVP_MISSING", "active", "native", "transposed_jvp", "transposed_jvps"]

JVP_MISSING = "You must implement the jvp function for custom autograd.Function to use it with forward mode AD."

_ACTIVE = [False]


def active():
    return _ACTIVE[0]


@contextlib.contextmanager
def transposed_jvps(on=True):
    """While on, custom Function nodes run the transpose of their ``jvp`` (forward AD's ``J^T u``)."""
    prev, _ACTIVE[0] = _ACTIVE[0], on
    try:
        yield
    finally:
        _ACTIVE[0] = prev


def native(fn):
    """Whether ``fn`` is one of jitorch's own Functions without a ``jvp``: forward AD keeps treating it as the ops it
    stands for (its forward's shadows, its ``backward``), not as a user's Function."""
    from .function import Function

    return fn.jvp is Function.jvp and fn.__module__.partition(".")[0] == "jitorch"


def transposed_jvp(ctx, fn, grads):
    """The gradients ``backward`` would return, computed as the vjp of ``fn.jvp`` at the cotangents ``grads``."""
    from .. import _creation
    from .._tensor import Tensor
    from . import grad as autograd_grad
    from .function import Function
    from .grad_mode import enable_grad

    if fn.jvp is Function.jvp:
        raise NotImplementedError(JVP_MISSING)
    tangents = [None] * ctx._num_args
    leaves = {}
    for i, pos in enumerate(ctx._positions):
        shape, dtype, device = ctx._arg_meta[i]
        t = _creation.zeros(shape, dtype=dtype, device=device)
        if ctx.next[i] is not None:  # differentiable: the tangent whose vjp is the input's gradient
            t.requires_grad_(True)
            leaves[pos] = t
        tangents[pos] = t
    with transposed_jvps(False), enable_grad():
        ctx._jvp_running = True
        try:
            out = fn.jvp(ctx, *tangents)
        finally:
            ctx._jvp_running = False
        out = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(out, grads) if isinstance(o, Tensor) and o.requires_grad and g is not None]
        positions = sorted(leaves)
        found = autograd_grad([o for o, _ in pairs], [leaves[p] for p in positions], [g for _, g in pairs],
                              create_graph=True, allow_unused=True) if pairs and positions else ()
    result = [None] * ctx._num_args
    for pos, g in zip(positions, found):
        result[pos] = g
    return tuple(result)
