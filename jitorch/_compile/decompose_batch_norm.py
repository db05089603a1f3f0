"""Training-mode batch norm and its backward as reductions and pointwise rows the fusion pass can put in kernels.

Eager runs ``native_batch_norm`` and ``native_batch_norm_backward`` as whole per-channel kernels, opaque to fusion:
the ReLU after a batch norm is a pass of its own, and so is its gradient before the backward. Decomposed in a joint
graph (`decompose` inlines them as it does layer norm's backward):

- the channel statistics are trailing reductions of the ``(C, N, *spatial)`` view of the input (a transpose, no
  copy): the mean, then the centred sum of squares, one two-pass kernel, ``rsqrt(var + eps)`` in its row space;
- the output ``(x - mean) * rstd * weight + bias`` is pointwise over the input's own shape, so the activation after
  it joins that kernel (one read of ``x``, one write of the activation);
- the backward's ``sum(g)`` and ``sum(g * xhat)`` are one reduction pass over the channels-first views, and the
  pointwise chain that made ``g`` (ReLU's ``threshold_backward``, the recomputed ReLU) is computed again in that
  layout (`sink_channel_transposes`), so ``g`` is never written: the input gradient's kernel computes it too;
- a backward sum over every dim but the channels (a convolution's bias gradient, which fusion cannot take: its
  reduced dims are not trailing) becomes a sum of the channels-first view's trailing dims.

The formulas are the lowered kernels' (`jitorch.cpu._lower_batch_norm`): the same passes and per-element operations;
only the order of the sums' additions differs. The running statistics are untouched: their update is the eager
code's, traced from the decomposed ``mean`` and ``var``. Evaluation mode needs nothing here: the functional form is
already pointwise (one pass over the activation, with the ReLU, after per-channel ``rsqrt(running_var + eps)``).

>>> import jitorch
>>> from jitorch._compile.training import compile_training
>>> bn = jitorch.nn.BatchNorm2d(3)
>>> plan = compile_training(lambda x: jitorch.relu(bn(x)), (jitorch.randn(4, 3, 5, 5, requires_grad=True),), {},
...                         bn, None)
>>> [g.ops for _, g in plan.fwd.steps if len(getattr(g, "shape", ())) == 4 and g.shape[0] > 1]
[['sum', 'div', 'sub', 'mul', 'sum', 'div', 'add', 'rsqrt'], ['sub', 'mul', 'mul', 'add', 'relu']]
"""
from __future__ import annotations

import numpy as np

from ..fx.joint import BACKWARD
from ..fx.make_fx import Primitive, _primitive
from ..fx.node import Node
from .fusion import fusible

__all__ = ["batch_norm", "batch_norm_backward", "fuse_channel_reductions", "sink_channel_transposes"]


def _channels_first(t):
    """The ``(C, N, *spatial)`` view of an ``(N, C, *spatial)`` tensor: channels are the rows the kernel reduces."""
    return t.transpose(0, 1)


def _rows(t, nd):
    """A per-channel value as a row of the channels-first space, ``(C, 1, ...)``."""
    return t.reshape((-1,) + (1,) * (nd - 1))


def _per_channel(t, nd):
    """A per-channel value broadcast over ``(N, C, *spatial)``: ``(1, C, 1, ...)``."""
    return t.reshape((1, -1) + (1,) * (nd - 2))


def batch_norm(x, weight, bias, *, eps):
    """``native_batch_norm(x, weight, bias) -> (out, mean, var)``, the statistics shaped ``(1, C, 1, ...)``."""
    nd, n = x.dim(), x.numel() // x.shape[1]
    dims = tuple(range(1, nd))
    xt = _channels_first(x)
    mean = xt.sum(dims, keepdim=True) / n
    centered = xt - mean
    var = (centered * centered).sum(dims, keepdim=True) / n
    rstd = (var + eps).rsqrt()
    out = (x - _per_channel(mean, nd)) * _per_channel(rstd, nd)
    if weight is not None:
        out = out * _per_channel(weight, nd)
    if bias is not None:
        out = out + _per_channel(bias, nd)
    return out, _per_channel(mean, nd), _per_channel(var, nd)


def batch_norm_backward(g, x, mean, var, weight, *, eps):
    """``native_batch_norm_backward(g, x, mean, var, weight) -> (gx, gw, gb)`` from the saved statistics."""
    nd, n = x.dim(), x.numel() // x.shape[1]
    dims = tuple(range(1, nd))
    rstd = (var + eps).rsqrt()
    gt = _channels_first(g)
    xhat_t = (_channels_first(x) - _rows(mean, nd)) * _rows(rstd, nd)
    sum_g = gt.sum(dims)
    sum_gxhat = (gt * xhat_t).sum(dims)
    xhat = (x - mean) * rstd
    gx = (g - xhat * _per_channel(sum_gxhat / n, nd) - _per_channel(sum_g / n, nd)) * rstd
    if weight is not None:
        gx = gx * _per_channel(weight, nd)
    return gx, sum_gxhat, sum_g


_PERMUTE = _primitive("permute")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_MAX_SUNK = 32  # pointwise rows copied per view: beyond that the kernel's expression outgrows what one pass saves


def _channel_swap(dims):
    return tuple(dims[:2]) == (1, 0) and tuple(dims[2:]) == tuple(range(2, len(dims)))


def _channel_reduction(node):
    """A ``sum`` of a channels-first view over every dim but the channels (what `batch_norm_backward` makes)."""
    if node.op != "call_function" or not isinstance(node.target, Primitive) or node.target.inplace or \
            node.target.op.name != "sum" or not node.args or not isinstance(node.args[0], Node):
        return False
    nd = len(node.args[0].meta["val"][0]) if "val" in node.args[0].meta else 0
    return nd > 1 and tuple(node.kwargs.get("dims") or ()) == tuple(range(1, nd))


def _sinkable(view):
    """The pointwise rows behind ``view`` (a backward channels-first permute read by channel reductions and the
    pointwise rows they reduce), producers first, when every leaf they read has the view's rank or none; else None."""
    readers, root = list(view.users), view.args[0]
    if view.meta.get("phase") != BACKWARD or not fusible(root) or \
            not any(_channel_reduction(u) for u in readers) or \
            not all(_channel_reduction(u) or fusible(u) for u in readers):
        return None
    if not all(u is view or fusible(u) for u in root.users):
        return None  # written out anyway for another reader (a convolution's backward): reduce what it writes
    nd, chain, stack = len(view.meta["val"][0]), {}, [view.args[0]]
    while stack:
        n = stack.pop()
        if n in chain:
            continue
        if len(chain) == _MAX_SUNK:
            return None
        chain[n] = None
        for a in n.all_input_nodes:
            if fusible(a):
                stack.append(a)
            elif "val" not in a.meta or len(a.meta["val"][0]) not in (0, nd):
                return None
    order = {n: i for i, n in enumerate(view.graph.nodes)}
    return sorted(chain, key=order.__getitem__)


def _channel_sums_as_rows(gm):
    """A backward sum over every dim but the channels (a convolution's bias gradient), which fusion cannot take
    (its reduced dims are not trailing), as a sum of trailing dims of the channels-first view: one kernel."""
    graph, done = gm.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, Primitive) or node.target.inplace or \
                node.target.op.name != "sum" or node.meta.get("phase") != BACKWARD or node.kwargs.get("keepdim") or \
                len(node.args) != 1 or not isinstance(node.args[0], Node) or "val" not in node.args[0].meta:
            continue
        shape, dtype = node.args[0].meta["val"]
        nd = len(shape)
        dims = node.kwargs.get("dims")
        # (nd > 2: a linear layer's bias gradient, ``g.sum(0)``, comes from its backward row already.)
        if nd < 3 or dims is None or sorted(d % nd for d in dims) != [0] + list(range(2, nd)) or \
                dtype not in _FLOATS or node.kwargs.get("dtype") not in (None, dtype):
            continue
        with graph.inserting_before(node):
            view = graph.call_function(_PERMUTE, (node.args[0],), {"dims": (1, 0) + tuple(range(2, nd))})
            rows = graph.call_function(node.target, (view,), {**node.kwargs, "dims": tuple(range(1, nd))})
        view.meta = {"phase": BACKWARD, "val": ((shape[1], shape[0]) + tuple(shape[2:]), dtype)}
        rows.meta = dict(node.meta)
        node.replace_all_uses_with(rows)
        graph.erase_node(node)
        done += 1
    return done


def fuse_channel_reductions(gm):
    """Rewrite a joint graph's backward channel reductions so that they fuse: channel sums as rows of the
    channels-first view (`_channel_sums_as_rows`), and the pointwise chains such views read computed again in that
    layout (`sink_channel_transposes`). Returns how many rewrites were made."""
    return _channel_sums_as_rows(gm) + sink_channel_transposes(gm)


def sink_channel_transposes(gm):
    """Compute the pointwise chain a backward channel reduction reads through its channels-first view again, in
    that layout, from the chain's transposed leaves: the reduction's kernel then fuses the chain (ReLU's gradient
    before a batch norm's backward) instead of reading it written out. Returns how many views were replaced."""
    graph, done = gm.graph, 0
    for view in [n for n in graph.nodes if n.op == "call_function" and n.target == _PERMUTE]:
        if "val" not in view.meta or not _channel_swap(view.kwargs.get("dims", ())):
            continue
        chain = _sinkable(view)
        if chain is None:
            continue
        dims, copies, added = view.kwargs["dims"], {}, []

        def transposed(a):
            if not isinstance(a, Node):
                return a
            if a in copies:
                return copies[a]
            if len(a.meta["val"][0]) == 0:
                return a
            copies[a] = graph.call_function(_PERMUTE, (a,), {"dims": dims})
            added.append(copies[a])
            return copies[a]

        with graph.inserting_before(view):
            for n in chain:
                copies[n] = graph.call_function(n.target, tuple(transposed(a) for a in n.args), dict(n.kwargs))
                added.append(copies[n])
        for new in added:
            new.meta = {"phase": view.meta["phase"]}
        view.replace_all_uses_with(copies[view.args[0]])
        graph.erase_node(view)
        for n in reversed(chain):  # the chain in its own layout, if nothing else reads it (no input gradient)
            if not n.users:
                graph.erase_node(n)
        done += 1
    return done
