"""Decompositions: opaque rows of a joint graph rewritten into primitives the fusion pass can put in kernels.

Eager autograd runs ``native_layer_norm_backward`` as one NumPy row (several passes over the input). In a compiled
backward its input gradient is a two-reduction row pattern that fuses into ONE kernel together with the pointwise
rows around it (the residual gradients), and its weight and bias gradients are sums over the leading dimensions
of values that kernel writes anyway. ``nll_loss_backward`` (eager: a scatter into zeros) becomes a masked broadcast
that fuses into log_softmax's backward kernel. Training-mode batch norm and its backward become channel reductions
and pointwise rows (`decompose_batch_norm`), so the activation after it and its gradient fuse. Each decomposition
is a function of jitorch ops, recorded with `make_fx` at the node's shapes and inlined in place of the node;
outputs nobody reads are dropped. A split's gradient (one scatter into zeros per piece, then adds) becomes one
``cat``. A convolution's forward hands its window matrix to the backward's weight gradient, as eager autograd does,
instead of the backward copying the windows again.

>>> import jitorch
>>> from jitorch.fx.joint import make_joint
>>> x, w, b = jitorch.randn(4, 8, requires_grad=True), jitorch.ones(8, requires_grad=True), jitorch.zeros(8)
>>> gm = make_joint(lambda x, w: jitorch.nn.functional.layer_norm(x, (8,), w, b))(x, w, tangents=(jitorch.ones(4, 8),))
>>> from jitorch._compile.training import _annotate
>>> _annotate(gm, [x, w, jitorch.ones(4, 8)])
>>> decompose(gm)
1
>>> sorted({n.target.op.name for n in gm.graph.nodes if n.op == "call_function" and hasattr(n.target, "op")})[:4]
['div', 'mul', 'native_layer_norm', 'sub']
"""
from __future__ import annotations

import operator

import numpy as np

import jitorch

from .. import _tensor
from .._dispatch import apply
from ..fx.make_fx import Primitive, _primitive, make_fx
from ..fx.joint import BACKWARD, FORWARD
from ..fx.node import Node
from ..ops.conv_layouts import STASH
from ..ops.nn_fused import NLL_CHECK_TARGETS, norm_grads
from . import decompose_batch_norm

__all__ = ["decompose", "DECOMPOSITIONS"]


def _layer_norm_backward(g, x, mean, rstd, weight, *, k, eps):
    """(grad_input, grad_weight, grad_bias) from the saved row statistics."""
    nd = x.dim()
    return norm_grads(g, x, weight, tuple(range(nd - k, nd)), tuple(range(nd - k)), eps, (True, True, True),
                      stats=(mean, rstd))


def _nll_loss_backward(g, target, *, shape, ignore_index, reduction):
    """The gradient of nll_loss as a masked broadcast, which fuses into log_softmax's backward kernel (eager scatters
    into zeros). The forward already checked the targets' range on the same (saved, unchanged) targets."""
    if len(shape) != 2:
        raise _Keep
    n, c = shape
    t = target.reshape(n, 1)
    # (Boolean and integer arithmetic stays out of kernels: the mask is one comparison, counts are float sums.)
    # An ignored class inside the range must not match its column.
    hit = jitorch.arange(c) == (jitorch.where(t != ignore_index, t, -1) if 0 <= ignore_index < c else t)
    if reduction == "none":
        scale = -g.reshape(n, 1)
    elif reduction == "mean":
        one, zero = jitorch.ones((), dtype=g.dtype), jitorch.zeros((), dtype=g.dtype)
        count = jitorch.where(t != ignore_index, one, zero).sum()
        scale = -g / jitorch.maximum(count, one)  # all ignored: zero gradients, as eager
    else:
        scale = -g
    return jitorch.where(hit, scale, jitorch.zeros((), dtype=g.dtype))


def _nll_loss(logp, target, *, ignore_index, reduction):
    """nll_loss as a masked sum that fuses with log_softmax's output; the targets' range check (eager's IndexError)
    stays a host step, moved before everything else so it does not split the native program."""
    if logp.dim() != 2:
        raise _Keep
    n, c = logp.shape
    t = apply(NLL_CHECK_TARGETS, target, classes=c, ignore_index=ignore_index).reshape(n, 1)
    hit = jitorch.arange(c) == (jitorch.where(t != ignore_index, t, -1) if 0 <= ignore_index < c else t)
    picked = jitorch.where(hit, logp, jitorch.zeros((), dtype=logp.dtype))
    if reduction == "none":
        return -picked.sum(1)
    total = -picked.sum()
    if reduction == "sum":
        return total
    one, zero = jitorch.ones((), dtype=logp.dtype), jitorch.zeros((), dtype=logp.dtype)
    return total / jitorch.where(t != ignore_index, one, zero).sum()  # all ignored: 0/0, nan as eager


class _Keep(Exception):
    """A decomposition declines this node (an unusual shape): it stays one row."""


DECOMPOSITIONS = {"native_layer_norm_backward": _layer_norm_backward, "nll_loss_backward": _nll_loss_backward,
                  "nll_loss": _nll_loss, "native_batch_norm": decompose_batch_norm.batch_norm,
                  "native_batch_norm_backward": decompose_batch_norm.batch_norm_backward}
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_CAT = _primitive("cat")
_CONV_COLS, _WEIGHT_COLS = _primitive("convolution_cols"), _primitive("convolution_weight_cols")


def _example(node):
    shape, dtype = node.meta["val"]
    return _tensor.Tensor._make(np.zeros(shape, dtype))


def _decomposable(node):
    if node.op != "call_function" or not isinstance(node.target, Primitive) or node.target.inplace:
        return False
    if node.target.op.name not in DECOMPOSITIONS:
        return False
    tensors = [a for a in node.args if isinstance(a, Node)]
    # (The leading operand is the gradient; others may be integer targets.)
    return bool(tensors) and all("val" in a.meta for a in tensors) and tensors[0].meta["val"][1] in _FLOATS and \
        not any(isinstance(a, (list, tuple)) for a in node.args)


def _inline(gm, node):
    """Replace ``node`` (and its ``getitem`` readers) by the recorded decomposition."""
    fn = DECOMPOSITIONS[node.target.op.name]
    if node.target.op.nout > 1 and \
            any(u.op != "call_function" or u.target is not operator.getitem for u in node.users):
        return False  # a reader of the whole tuple: keep the row
    positions = [i for i, a in enumerate(node.args) if isinstance(a, Node)]

    def call(*tensors):
        args = list(node.args)
        for i, t in zip(positions, tensors):
            args[i] = t
        return fn(*args, **node.kwargs)

    try:
        # The examples are zeros of the node's shapes: a decomposition reading values would read those; the
        # refusal of such reads is make_fx's public default, not this internal use's.
        sub = make_fx(call, _error_on_data_dependent_ops=False)(*[_example(node.args[i]) for i in positions])
    except _Keep:
        return False
    graph, env, added, recorded = gm.graph, {}, [], {}
    placeholders = iter(node.args[i] for i in positions)
    with graph.inserting_before(node):
        for m in sub.graph.nodes:
            if m.op == "placeholder":
                env[m] = next(placeholders)
            elif m.op == "get_attr":  # a constant the decomposition made (a scalar tensor): move it over
                name = f"_decomposed_{node.name}_{m.target}"
                setattr(gm, name, getattr(sub, m.target))
                env[m] = graph.get_attr(name)
                added.append(env[m])
            elif m.op == "call_function":
                env[m] = graph.node_copy(m, env.__getitem__)
                added.append(env[m])
                recorded[env[m]] = m.meta.get("val")
            else:
                outs = [env[a] for a in m.args[0]] if isinstance(m.args[0], (tuple, list)) else [env[m.args[0]]]
    for new in added:
        new.meta = {k: v for k, v in node.meta.items() if k == "phase"}
        if recorded.get(new) is not None:  # a later decomposition may read this node (stacked layer norms)
            new.meta["val"] = recorded[new]
        if new.op == "call_function" and isinstance(new.target, Primitive) and new.target.op is NLL_CHECK_TARGETS:
            # Host checks run first: placed later they would split the native program in two.
            inp = new.args[0]
            anchor = inp if inp.op != "placeholder" else [n for n in graph.nodes if n.op == "placeholder"][-1]
            if anchor.next is not new:  # (already there: constant targets, read right before the check)
                anchor.append(new)
    if node.target.op.nout == 1:
        node.replace_all_uses_with(outs[0])
    for user in list(node.users):
        if user.op == "call_function" and user.target is operator.getitem:
            user.replace_all_uses_with(outs[user.args[1]])
            graph.erase_node(user)
    graph.erase_node(node)
    for new in reversed(added):  # outputs nobody reads (a bias gradient of a layer without bias)
        if not new.users:
            graph.erase_node(new)
    return True


def _zero_base(gm, node):
    """Whether ``node`` is a zero tensor broadcast (a view backward's ``zeros.expand(shape)``)."""
    while node.op == "call_function" and isinstance(node.target, Primitive) and node.target.op.name == "expand":
        node = node.args[0]
    if node.op != "get_attr":
        return False
    value = getattr(gm, node.target, None)
    return isinstance(value, _tensor.Tensor) and value._data.size == 1 and not value._data.any()


def _slab(gm, node):
    """``(dim, start, stop, src)`` when ``node`` is ``copy_slices(zeros, src, [slice along one dim])``, else None."""
    if node.op != "call_function" or not isinstance(node.target, Primitive) or \
            node.target.op.name != "copy_slices" or not _zero_base(gm, node.args[0]):
        return None
    chain = node.kwargs.get("chain", ())
    if len(chain) != 1 or chain[0][0].name != "slice":
        return None
    key, shape = chain[0][1].get("key"), node.meta["val"][0]
    if not isinstance(key, tuple) or len(key) != len(shape) or not all(isinstance(k, slice) for k in key):
        return None
    cut = [(d, k.indices(shape[d])) for d, k in enumerate(key) if k.indices(shape[d]) != (0, shape[d], 1)]
    if len(cut) != 1 or cut[0][1][2] != 1:
        return None
    d, (start, stop, _) = cut[0]
    return d, start, stop, node.args[1]


def _slabs(gm, node, root=True):
    """The slabs a tree of adds sums (inner adds read once), or None."""
    if node.op == "call_function" and isinstance(node.target, Primitive) and node.target.op.name == "add" and \
            not node.kwargs and len(node.args) == 2 and all(isinstance(a, Node) for a in node.args) and \
            (root or len(node.users) == 1):
        parts = [_slabs(gm, a, False) for a in node.args]
        return None if None in parts else parts[0] + parts[1]
    if not root and len(node.users) == 1:
        slab = _slab(gm, node)
        return None if slab is None else [slab]
    return None


def _cat_slice_sums(gm):
    """``copy_slices(zeros, a, [.., 0:16]) + copy_slices(zeros, b, [.., 16:48])`` (a split's or chunk's gradient,
    one scatter per piece and adds, five full-size passes) as ``cat([a, b], dim)``: one write."""
    graph, done = gm.graph, 0
    for node in list(graph.nodes):
        slabs = _slabs(gm, node) if "val" in node.meta else None
        if not slabs or len({d for d, *_ in slabs}) != 1:
            continue
        slabs.sort(key=lambda s: s[1])
        dim, size = slabs[0][0], node.meta["val"][0][slabs[0][0]]
        if [s[1] for s in slabs] != [0] + [s[2] for s in slabs[:-1]] or slabs[-1][2] != size or \
                any(s[3].meta.get("val", (None, None))[1] != node.meta["val"][1] for s in slabs):
            continue  # gaps, overlaps or a dtype change: keep the adds
        with graph.inserting_before(node):
            cat = graph.call_function(_CAT, tuple(s[3] for s in slabs), {"dim": dim})
        cat.meta = {k: v for k, v in node.meta.items() if k == "phase"}
        node.replace_all_uses_with(cat)
        dead = [node]
        while dead:
            n = dead.pop()
            if not n.users and n.op in ("call_function", "get_attr"):
                dead.extend(n.all_input_nodes)
                graph.erase_node(n)
        done += 1
    return done


_KEEP_WINDOWS_BYTES = 16 << 20  # as eager conv2d: beyond this the backward copies the windows again


def _geometry(node):
    return tuple(node.kwargs.get(k) for k in ("stride", "padding", "dilation", "groups"))


def _conv_windows(gm):
    """Give a compiled backward the forward's window matrix, as eager autograd does: ``convolution(x, w, b)`` in the
    forward becomes ``convolution_cols`` (its output and window matrix), and the backward's
    ``convolution_weight(x, g)`` (a second im2col of ``x``) becomes ``convolution_weight_cols(cols, g)``, whose
    second output also replaces the bias gradient's ``g.sum((0, 2, ...))``."""
    graph, done = gm.graph, 0
    convs = [n for n in graph.nodes if _row(n, "convolution") and n.meta.get("phase") == FORWARD]
    for w_node in [n for n in graph.nodes if _row(n, "convolution_weight") and n.meta.get("phase") == BACKWARD]:
        x, g = w_node.args[:2]
        conv = next((c for c in convs if c.args[0] is x and _geometry(c) == _geometry(w_node)
                     and tuple(c.args[1].meta["val"][0][2:]) == tuple(w_node.kwargs.get("kernel", ()))), None)
        if conv is None or "val" not in x.meta or x.meta["val"][1] not in _FLOATS:
            continue
        shape, dtype = x.meta["val"]
        kernel = tuple(w_node.kwargs["kernel"])
        if int(np.prod(shape)) * int(np.prod(kernel)) * np.dtype(dtype).itemsize > _KEEP_WINDOWS_BYTES:
            continue
        layout = _window_layout(conv)
        if layout is None:  # the direct kernel (`ops.conv_direct`): no window matrix to keep
            continue
        with graph.inserting_before(conv):
            both = graph.call_function(_CONV_COLS, conv.args, dict(conv.kwargs))
            out = graph.call_function(operator.getitem, (both, 0))
            cols = graph.call_function(operator.getitem, (both, 1))
        for n in (both, out, cols):
            n.meta = {"phase": FORWARD}
        if "val" in conv.meta:  # the output's shape, for the decompositions that read it (a batch norm after it)
            out.meta["val"] = conv.meta["val"]
        conv.replace_all_uses_with(out)
        graph.erase_node(conv)
        convs.remove(conv)
        frame = {"frame": layout[1]} if len(layout) > 1 else {}
        with graph.inserting_before(w_node):
            attrs = dict(layout=layout[0], kernel=kernel, channels=shape[1], groups=w_node.kwargs["groups"], **frame)
            grads = graph.call_function(_WEIGHT_COLS, (cols, g), attrs)
            gw = graph.call_function(operator.getitem, (grads, 0))
        for n in (grads, gw):
            n.meta = {"phase": BACKWARD}
        w_node.replace_all_uses_with(gw)
        graph.erase_node(w_node)
        bias_dims = (0,) + tuple(range(2, len(shape)))
        for user in list(g.users):
            if _row(user, "sum") and tuple(user.kwargs.get("dims") or ()) == bias_dims and \
                    not user.kwargs.get("keepdim") and user.kwargs.get("dtype") in (None, np.dtype(dtype)):
                with graph.inserting_after(gw):
                    gb = graph.call_function(operator.getitem, (grads, 1))
                gb.meta = {"phase": BACKWARD}
                user.replace_all_uses_with(gb)
                graph.erase_node(user)
                break
        done += 1
    return done


def _window_layout(conv):
    """``(layout,)`` or ``("k_major", frame)`` of the window matrix ``conv`` makes: the forward run once on zeros.
    None when it makes none (a direct convolution)."""
    arrays = [np.zeros(a.meta["val"][0], a.meta["val"][1]) if isinstance(a, Node) else a for a in conv.args]
    STASH.want = True
    try:
        conv.target.op.kernel(np, *arrays, **conv.kwargs)
    finally:
        STASH.want = False
        stash, STASH.cols = STASH.cols, None
    if stash is None:
        return None
    return (stash[0],) if stash[0] != "k_major" else (stash[0], stash[2])


def _row(node, name):
    return node.op == "call_function" and isinstance(node.target, Primitive) and not node.target.inplace and \
        node.target.op.name == name


def decompose(gm):
    """Inline every decomposable node of ``gm`` (nodes need ``meta["val"]``) and turn sums of slice scatters into
    ``cat``; returns how many rewrites were made. The caller re-annotates the graph: new nodes carry only their
    phase."""
    done = _cat_slice_sums(gm) + _conv_windows(gm)
    for node in [n for n in gm.graph.nodes if _decomposable(n)]:
        done += _inline(gm, node)
    done += decompose_batch_norm.fuse_channel_reductions(gm)  # batch norm's and bias gradients' channel sums
    if done:
        gm.graph.lint()
        gm.recompile()
    return done
