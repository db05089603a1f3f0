"""Writing into views of tensors that are part of a graph: PyTorch's ``CopySlices``.

``copy_slices(base, src, chain)`` is a functional op: a copy of ``base`` whose region selected by the view ``chain``
holds ``src``. When ``view.add_(x)`` runs on a view of a base, the base's history becomes ``copy_slices(old base,
new view values)``, and the view's history is the view chain replayed on the new base.

It is also the backward of every injective view op: the gradient of ``x[key]`` is ``copy_slices(zeros, g, chain)``.

>>> import jitorch
>>> x = jitorch.zeros(3, requires_grad=True)
>>> y = x * 1
>>> y[1:].mul_(2)
tensor([0., 0.], grad_fn=<SliceBackward0>)
>>> y.grad_fn.name()
'torch::autograd::CopySlices'
"""
from __future__ import annotations

from .._dispatch import apply, record
from .._dispatch_inplace import refuse_internal_overlap
from ..autograd.grad_mode import enable_grad
from .table import Opaque, defop

__all__ = ["copy_slices", "replay_view", "rebase_view", "view_backward", "writable_expanded", "move_retain_grad"]


def replay_view(chain, t):
    """Apply the view ops of ``chain`` to tensor ``t``."""
    for op, attrs in chain:
        t = apply(op, t, **attrs)
    return t


def _replay_arrays(xp, chain, arr):
    for op, attrs in chain:
        arr = op.kernel(xp, arr, **attrs)
    return arr


def _copy_slices_kernel(xp, base, src, chain):
    out = base.copy()
    _replay_arrays(xp, chain, out)[...] = src
    return out


def _copy_slices_backward(ctx, g):
    chain = ctx.attrs["chain"]
    if any(op.name == "as_strided" for op, _ in chain):
        # as_strided addresses memory, so it must see g laid out as the (contiguous) base, not an expanded g
        g = g.contiguous()
    g_src = replay_view(chain, g)
    g_base = copy_slices(g, g_src.new_zeros(()).expand(g_src.shape), chain) if ctx.needs_grad(0) else None
    return g_base, g_src


COPY_SLICES = defop("copy_slices", _copy_slices_kernel, _copy_slices_backward, Opaque("scatter into a view region"),
                    promotion="keep", grad_name="CopySlices", meta=True)


ZERO_GRAD = defop("zero_grad", lambda xp, a: a.copy(), lambda ctx, g: g * 0, Opaque("history of a non-differentiable "
                  "in-place result"), grad_name="ZeroGradBackward0")


def copy_slices(base, src, chain):
    """A copy of ``base`` with ``src`` written into the region that ``chain`` selects."""
    return apply(COPY_SLICES, base, src, chain=chain)


def view_backward(ctx, g):
    """Backward of an injective view op: scatter ``g`` into zeros shaped like the input."""
    shape, dtype = ctx.in_meta[0]
    zeros = g.new_zeros(()).expand(shape)
    return copy_slices(zeros, g, ((ctx.op, ctx.attrs),))


def rebase_view(view, result):
    """After ``view`` was overwritten in place by ``result`` (which has history), rebase ``view._base``'s history."""
    base = view._base
    old_base_fn, old_view_fn = base.grad_fn, view.grad_fn
    record(COPY_SLICES, (base, result), {"chain": view._view_chain}, [base])
    with enable_grad():
        regenerated = replay_view(view._view_chain, base)
    view.grad_fn, view._output_nr, view._requires_grad = regenerated.grad_fn, 0, True
    view._view_ver = view._ver_owner._ver
    for t, old_fn in ((base, old_base_fn), (view, old_view_fn)):
        if t._retains_grad:
            move_retain_grad(t, old_fn)


def move_retain_grad(t, old_fn):
    """After an in-place op gave ``t`` a new ``grad_fn``, its ``retain_grad`` follows, as torch's: ``t.grad`` is the
    gradient of ``t``'s final value, not of the value it had when ``retain_grad`` was called."""
    store = t._retains_grad
    if old_fn is None or not old_fn._retain_hooks or old_fn is t.grad_fn:
        return
    old_fn._retain_hooks = [h for h in old_fn._retain_hooks if h[1] is not store]
    t.grad_fn.add_retain_grad_hook(t._output_nr, store)


def writable_expanded(op, t):
    """Make ``t``'s read-only array (an expanded tensor, or a view of one) writable for in-place ``op``, or raise.

    As torch's internal-overlap check: only a dim of stride 0 and size > 1 is refused, and never for ``fill_`` (one
    value for every element); ``expanded[0]`` and the like share no element and take writes.
    """
    data = t._data
    if op.name == "fill" or not any(st == 0 and n > 1 for n, st in zip(data.shape, data.strides)):
        if t.is_meta:  # read-only for NumPy, but writes into a meta array are dropped, never made
            return
        data = data.view()
        try:
            data.flags.writeable = True
        except ValueError:  # memory that is read-only at its owner
            raise RuntimeError(f"{op.name}_: the tensor's memory is read-only (a non-writable NumPy array given to "
                               "from_numpy/as_tensor, or a DLPack capsule imported read-only); clone() the tensor "
                               "before writing to it, or make it from a writable array") from None
        else:
            t._data = data
            return
    refuse_internal_overlap(f"{op.name}_", data)
