"""Autograd recording at dispatch: the node an op's outputs get (`record`), views' marks (`_mark_view`), and the lazy
regeneration of a view's history after its base changed in place (`sync_view`).

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True)
>>> y = x * 2
>>> type(y.grad_fn).__name__, y.grad_fn.next[0][0] is x
('MulBackward0', True)
"""
from __future__ import annotations

import numpy as np

from . import _device, _dtype
from ._tensor import Tensor
from .autograd.grad_mode import GradState
from .autograd.graph import _record as _record_in_region, _recording as _RECORDING, named
from .autograd.view_creation import INFERENCE_VIEW, NO_GRAD_VIEW

__all__ = ["record", "sync_view", "sync_views", "view_result"]

_FROM_NP = _dtype.FROM_NP
_new = object.__new__
_CPU = _device.device("cpu")


def _edge(a):
    if isinstance(a, Tensor) and a._requires_grad:
        return (a.grad_fn, a._output_nr) if a.grad_fn is not None else (a, 0)
    return None


def sync_views(args):
    """`sync_view` every argument that is a view whose base changed in place since it was taken."""
    for a in args:
        if isinstance(a, Tensor) and a._base is not None and a._view_ver != a._ver_owner._ver:
            sync_view(a)


def sync_view(v):
    """Regenerate a view's history when its base changed in place since (PyTorch does this lazily, as here).

    Without it, ``v = y[:2]; y.mul_(2); v.sum().backward()`` would skip the ``mul_``.
    """
    root = v._ver_owner
    base = v._base
    if v._nograd_view is not None:
        # A view made without history (or by a custom Function), or a view of one: torch never regenerates its
        # history, and refuses it once its base changed in place while gradients are being recorded.
        if GradState.enabled and (base._requires_grad or v.grad_fn is not None):
            raise v._nograd_view.error(indirect=True)
        return
    v._view_ver = root._ver
    if base._requires_grad or v.grad_fn is not None:
        from .autograd.grad_mode import enable_grad
        from .ops.inplace_views import replay_view

        with enable_grad():
            regenerated = replay_view(v._view_chain, base)
        v.grad_fn, v._output_nr, v._requires_grad = regenerated.grad_fn, 0, regenerated._requires_grad


def _only_saved(op, args, edges):
    if len(args) == 2:  # the common binary case, without generators
        k0, k1 = op.save_if((edges[0] is not None, edges[1] is not None))
        return (args[0] if k0 else None, args[1] if k1 else None)
    keep = op.save_if(tuple([e is not None for e in edges]))
    return tuple([a if k else None for a, k in zip(args, keep)])


def _mark_view(out, src, op, attrs):
    if src._base is None:  # (a view of a plain tensor: its chain is this one step)
        out._base = src
        root = out._ver_owner = src if src._ver_owner is None else src._ver_owner
        out._view_chain = ((op, attrs),)
    else:
        out._base = src._base
        root = out._ver_owner = src._ver_owner if src._ver_owner is not None else src
        # A view of a dtype view (no chain to replay) has none either.
        chain = src._view_chain
        out._view_chain = None if chain is None else chain + ((op, attrs),)
    out._view_ver = root._ver
    if out._inference is not src._inference:  # a view is an inference tensor when its base is, whatever the mode
        out._inference = src._inference
    if not GradState.enabled:
        out._nograd_view = INFERENCE_VIEW if GradState.inference else NO_GRAD_VIEW
    elif src._nograd_view is not None:
        out._nograd_view = src._nograd_view.of_view(op.grad_name.removesuffix("Backward0"))


def view_result(op, src, out, attrs, name=None):
    """`eager`'s one-tensor path for the view row ``op`` whose array ``out`` (the row's kernel on ``src``'s NumPy
    array) the caller computed, after its own argument checks and with no mode active: the Tensor, marked a view of
    ``src``, with the row's node when ``src`` requires grad, shown as torch's ``name`` for the composite (`named`).
    What the movement and indexing functions call on small tensors, where apply's generic path cost more than the
    view itself."""
    if src._base is not None and src._view_ver != src._ver_owner._ver:
        sync_view(src)
    t = _new(Tensor)
    t._data = out
    _mark_view(t, src, op, attrs)  # (which sets the inference flag: a view's is its base's)
    if src._requires_grad and GradState.enabled and op.differentiable:
        if op.saves is not None or out.dtype.kind in "iub":
            record(op, (src,), attrs, (t,))
        else:  # `record` for one input that requires grad, a view row saving nothing: the node inline
            node = _new(op.node_cls)
            fn = src.grad_fn
            node.next = ((fn, src._output_nr) if fn is not None else (src, 0),)
            node.attrs = attrs
            if _RECORDING:
                _record_in_region(node)
            if op.meta:
                data = src._data
                node.in_meta = ((data.shape, data.dtype),)
            t.grad_fn = node
            t._requires_grad = True
        if name is not None:
            named(t, name)
    return t


# Reductions whose ``dtype=`` may ask for an integer result from a tensor that requires grad.
_INTEGER_RESULT_REFUSED = frozenset({"sum", "prod", "cumsum", "cumprod"})


def record(op, args, attrs, outs):
    """Attach an autograd node for ``op`` to the output tensors ``outs``."""
    edges = []
    for a in args:
        if isinstance(a, Tensor) and a._requires_grad:
            fn = a.grad_fn
            edges.append((fn, a._output_nr) if fn is not None else (a, 0))
        else:
            edges.append(None)
    node = _new(op.node_cls)  # Node.__init__, inline (as in _record_pointwise)
    node.next = tuple(edges)
    node.attrs = attrs
    if _RECORDING:
        _record_in_region(node)
    saves = op.saves
    if saves == "inputs" or saves == "both":
        node.save_inputs(args if op.save_if is None else _only_saved(op, args, edges))
    if op.meta:
        # Input shapes and dtypes; pointwise rows skip them when no broadcast or promotion happened (the common case).
        metas = []
        differs = not op.pointwise
        out = outs[0]._data
        for a in args:
            if isinstance(a, Tensor):
                d = a._data
                metas.append((d.shape, d.dtype))
                differs = differs or d.shape != out.shape or d.dtype != out.dtype
            else:
                metas.append(None)
        if differs:
            node.in_meta = tuple(metas)
    if op.nout == 1:
        o = outs[0]
        if o._data.dtype.kind in "iub":  # integer and bool results are not differentiable
            if op.name in _INTEGER_RESULT_REFUSED:
                # torch refuses a differentiable reduction asked for an integer dtype rather than drop the graph.
                from ._dispatch import TORCH_TYPE_NAMES

                raise RuntimeError(f"Autograd not support dtype: {TORCH_TYPE_NAMES[o._data.dtype.name]}")
            return node
        # _output_nr too: a CopySlices recorded on output 1 of a multi-output node must not keep pointing at slot 1.
        o.grad_fn, o._output_nr = node, 0
        o._requires_grad = True
    else:
        node._out_meta = out_metas(outs)
        for nr, o in enumerate(outs):
            if nr not in op.nondiff_outputs and o._data.dtype.kind not in "iub":
                o.grad_fn = node
                o._output_nr = nr
                o._requires_grad = True
    if saves == "outputs" or saves == "both":
        node.save_output(outs)
    return node


def out_metas(outs):
    """``(shape, dtype, device)`` of each output of a node (the engine makes zeros from them for outputs that get no
    gradient), without Tensor.device's lookup for host arrays."""
    return tuple((o._data.shape, _FROM_NP[o._data.dtype], _CPU if type(o._data) is np.ndarray else o.device)
                 for o in outs)
