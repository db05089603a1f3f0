"""The backward engine's general path for one node: user hooks (pre-hooks, retain_grad, post-hooks) and the
replacement gradients they return, checked as torch checks them; gradient capture for ``grad``/``inputs=``;
anomaly checks. The engine's loop runs a plain row node (one output, no hooks) inline and hands every other node to
`run_node`.
"""
from __future__ import annotations

from .._tensor import Tensor
from .anomaly_mode import AnomalyState, check_gradients, warn_forward_stack


def _hook_name(fn):
    return getattr(fn, "__name__", type(fn).__name__)


def checked(fn, old, new):
    """A hook's replacement gradient, refused as torch refuses it: a gradient of another size or type would reach a
    backward (or a leaf's .grad) that cannot take it."""
    if not isinstance(new, Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(new).__name__}'")
    if old is None:
        return new
    if (type(new) is not Tensor or type(old) is not Tensor) and (new.is_sparse or old.is_sparse):
        return _checked_sparse(fn, old, new)
    if new._data.shape != old._data.shape:
        raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the size of value")
    if new.dtype is not old.dtype or new.device != old.device:
        raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the type of value (was {old.type()} got "
                           f"{new.type()})")
    return new


def _checked_sparse(fn, old, new):
    # A sparse gradient (sparse=True embeddings) must stay sparse, as torch's hooks check it.
    if new.is_sparse != old.is_sparse or new.dtype is not old.dtype or new.device != old.device:
        raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the type of value (was {old.type()} got "
                           f"{new.type()})")
    if tuple(new.shape) != tuple(old.shape):
        raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the size of value")
    return new


def checked_tuple(fn, old, new):
    new = tuple(new)
    if len(new) != len(old):
        raise RuntimeError(f"hook '{_hook_name(fn)}' returned an incorrect number of values (got {len(new)}, but "
                           f"expected {len(old)})")
    return tuple(n if n is None else checked(fn, o, n) for o, n in zip(old, new))


def run_pre_hooks(node, grads):
    for output_nr, fn in list(node._pre_hooks):
        if output_nr is None:
            new = fn(grads)
            if new is not None:
                grads = checked_tuple(fn, grads, new)
        else:
            new = fn(grads[output_nr])
            if new is not None:
                grads = grads[:output_nr] + (checked(fn, grads[output_nr], new),) + grads[output_nr + 1:]
    return grads


def _prepare(node, grads, wanted_nodes, captured, needed):
    """What runs before a node with hooks, or in a ``grad`` call: its pre-hooks and retain_grad hooks, the capture of
    a wanted non-leaf's gradient. Returns the gradients to run the node with, or None when it need not run."""
    if needed is not None and id(node) not in needed and node not in wanted_nodes:
        return None  # as torch: a node that neither runs nor has its gradient captured runs no hooks either
    if node._pre_hooks:
        grads = run_pre_hooks(node, tuple(grads))
    if node._retain_hooks:
        for output_nr, fn in node._retain_hooks:
            if grads[output_nr] is not None:
                fn(grads[output_nr])
    if wanted_nodes:
        for output_nr, i in wanted_nodes.get(node, ()):
            captured[i] = grads[output_nr]
    if needed is not None and id(node) not in needed:
        return None
    return grads


def _backward(node, grads):
    # A node reached only by "no gradient" (a row's None, as floor_divide's to its divisor) passes none on:
    # its backward would get None where it expects a tensor.
    if not any(g is not None for g in grads):
        return (None,) * len(node.next)
    if node.row_backward:  # Node.apply, inline
        in_grads = node.op.backward(node, *grads)
        return in_grads if type(in_grads) is tuple else (in_grads,)
    return node.apply(grads)


def run_node(node, grads, wanted_nodes, captured, needed, retain_graph):
    """Run one node the general way: hooks, capture, zeros for multi-output nodes, custom Functions, anomaly checks.
    ``grads``: one per output. Returns its input gradients (one per edge), or None when it must not run."""
    if wanted_nodes or needed is not None or node._hooked:
        grads = _prepare(node, grads, wanted_nodes, captured, needed)
        if grads is None:
            return None
    if node._out_meta is not None:
        grads = node.materialize(grads)
    if AnomalyState.enabled:
        try:
            in_grads = _backward(node, grads)
            check_gradients(node, in_grads)
        except Exception:
            warn_forward_stack(node)
            raise
    else:
        in_grads = _backward(node, grads)
    if node._hooks:
        for hook in node._hooks:
            new = hook(in_grads, grads)
            if new is not None:
                in_grads = checked_tuple(hook, in_grads, new)
    if not retain_graph:
        node.release()
    return in_grads
