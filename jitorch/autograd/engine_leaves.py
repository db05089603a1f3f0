"""The backward engine's last step: the summed gradient of each leaf, through its hooks, into its ``.grad``.

A stored ``.grad`` is never shared with another ``.grad``, a tensor the user passed in or a view, and has the leaf's
layout (PyTorch's ``AccumulateGrad`` contract). A sparse_coo gradient (``sparse=True`` embeddings) is stored as one,
and sums with the next as torch's ``AccumulateGrad`` sums them (`jitorch.sparse._coo_add.accumulate_grad`).
"""
from __future__ import annotations

import contextlib

import numpy as np

from .._grad_state import GradState
from .._tensor import Tensor
from .._memory_format import contiguous_format, is_contiguous_as, suggest_memory_format
from .engine_hooks import checked, run_pre_hooks


class _LeafHooks:
    """Whether leaf tensors' hooks run: off while a compiler records a joint forward/backward graph from real
    parameters and inputs (`jitorch.fx.joint`). A hook baked into that graph would run again from the engine when the
    compiled backward hands its gradients to the leaves: twice per step."""

    enabled = True


@contextlib.contextmanager
def leaf_hooks_suppressed():
    previous, _LeafHooks.enabled = _LeafHooks.enabled, False
    try:
        yield
    finally:
        _LeafHooks.enabled = previous


def grad_sum(old, new):
    """``old + new`` for two gradients of one input met in the graph (the engine's sums that cannot add in place:
    under ``create_graph``, while a mode records, or of arrays NumPy does not add in place); a sparse one joins the
    other as torch's input buffer joins them: ``new + old`` with grad mode off (the new one's entries first where
    ATen concatenates), ``old + new`` while the backward records (``create_graph``)."""
    if (type(old) is not Tensor or type(new) is not Tensor) and (old.is_sparse or new.is_sparse):
        from ..sparse._coo_add import sparse_grad_sum

        return sparse_grad_sum(old, new) if GradState.enabled else sparse_grad_sum(new, old)
    return old + new


def _strides(a):
    return tuple(st for st, n in zip(a.strides, a.shape) if n > 1)


def _dense_order(a):
    """The dimension order (outermost first) that makes ``a`` a permuted contiguous array, or None when it overlaps
    or has gaps (an expanded or sliced tensor: its .grad is simply contiguous)."""
    order = sorted(range(a.ndim), key=lambda d: (-a.strides[d], d))
    expected = a.itemsize
    for d in reversed(order):
        if a.shape[d] != 1:
            if a.strides[d] != expected:
                return None
            expected *= a.shape[d]
    return order


def _host_copy(g, plain):
    """A row-major copy of ``g``: straight from NumPy when nothing records it (``plain``: no graph is being built,
    no mode is active), else through the op so a recording sees it."""
    if plain and type(g) is Tensor and type(g._data) is np.ndarray:
        return Tensor._make(np.array(g._data, order="C"))
    return g.clone(memory_format=contiguous_format)


def _is_one_of(g, tensors):
    for t in tensors:
        if t is g:
            return True
    return False


def _layout_for(leaf, g, plain, user_grads, stored):
    """``g`` as the first ``.grad`` of ``leaf``: copied where it could alias, laid out as the leaf."""
    leaf_c = leaf._data.flags.c_contiguous
    if leaf_c and g._data.flags.c_contiguous:
        fmt = dense = None  # the common case: both row-major, nothing to lay out
    else:
        fmt = contiguous_format if leaf_c else suggest_memory_format(leaf)
        if (fmt is contiguous_format) != leaf_c or is_contiguous_as(g._data, fmt):
            fmt = None
        dense = None if fmt is not None or leaf_c else _dense_order(leaf._data)
        if fmt is None and dense is None and not leaf_c and not g._data.flags.c_contiguous:
            fmt = contiguous_format  # an overlapping or gapped leaf (expanded, sliced): torch's .grad is row-major
    if fmt is not None:
        # PyTorch's layout contract: .grad has the parameter's layout (a transposed gradient from ``x @ w.t()``
        # would make every optimizer pass over it strided and slow), channels-last included.
        return _host_copy(g, plain) if fmt is contiguous_format else g.contiguous(memory_format=fmt)
    if dense is not None and _strides(g._data) != _strides(leaf._data):
        # Any other dense permuted leaf (a transposed parameter): its .grad gets the same strides, as torch's
        # ``clone_obey_contract``, so ``p.grad`` and ``p`` can be walked together.
        inverse = [0] * len(dense)
        for i, d in enumerate(dense):
            inverse[d] = i
        return g.permute(dense).contiguous().permute(inverse)
    if g._ver_owner is not None or id(g) in stored or _is_one_of(g, user_grads):
        # A gradient that may alias another .grad, a user tensor or a view is copied before a leaf owns it.
        return _host_copy(g, plain) if leaf_c else g.clone()
    return g


def finish_leaves(leaf_grads, wanted_leaves, captured, inputs, accumulate_into_grad, create_graph, user_grads,
                  allow_unused, plain):
    """Run each leaf's hooks on its summed gradient and store it (``.grad``, or the result of ``grad``).
    ``plain``: no graph is built and no mode records, so copies may bypass the ops."""
    stored = set()
    hooks_on = _LeafHooks.enabled
    for leaf, g in leaf_grads.values():
        if g is None or (inputs is not None and id(leaf) not in wanted_leaves):
            continue  # (as torch: a leaf not among ``inputs`` has no AccumulateGrad run, so no hooks)
        if hooks_on and leaf._hooks:
            for hook in leaf._hooks:
                new = hook(g)
                if new is not None:
                    g = checked(hook, g, new)
        if inputs is not None:
            for i in wanted_leaves[id(leaf)]:
                captured[i] = g
            if not accumulate_into_grad:
                continue
        acc = leaf._acc_node
        if acc is not None and acc._pre_hooks:
            g = run_pre_hooks(acc, (g,))[0]
        if not create_graph and g._requires_grad:
            g = g.detach()
        grad = leaf._grad
        if grad is None:
            if type(g) is not Tensor and g.is_sparse:
                from ..sparse._coo_add import owned_grad

                g = owned_grad(g, user_grads, create_graph)
            else:
                g = _layout_for(leaf, g, plain, user_grads, stored)
            stored.add(id(g))
            leaf._grad = g
        elif type(grad) is Tensor and type(g) is Tensor:
            if create_graph:
                leaf._grad = grad + g
            else:
                grad._inplace_accumulate(g)
        else:  # a sparse gradient on either side (or a Tensor subclass)
            from ..sparse._coo_add import accumulate_grad

            leaf._grad = accumulate_grad(grad, g, create_graph)
        if leaf._post_acc_hooks:
            for hook in leaf._post_acc_hooks:
                if hook(leaf) is not None:
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
        if acc is not None and acc._hooks:
            for hook in list(acc._hooks):
                hook((), (g,))
    if inputs is None:
        return None
    if accumulate_into_grad:
        for i, t in enumerate(inputs):
            g = captured.get(i)
            # (a non-leaf that retains its grad got it from its retain hook already: once, as torch)
            if t.grad_fn is not None and g is not None and not t._retains_grad:
                g = g if create_graph else g.detach()
                t._grad = g.clone() if t._grad is None else t._grad + g
        return None
    result = []
    for i, t in enumerate(inputs):
        g = captured.get(i)
        if g is None and not allow_unused:
            raise RuntimeError(
                f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                "Set allow_unused=True if this is the desired behavior."
            )
        result.append(g)
    return result
