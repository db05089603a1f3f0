"""The backward engine: dependency-counted topological execution of the recorded graph.

Gradients for leaves are summed out of place while the graph runs and stored once at the end, so no gradient tensor is
ever shared between two ``.grad`` fields or with a tensor the user passed in.

>>> import jitorch
>>> x = jitorch.tensor([1.0, 2.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad
tensor([2., 4.])
"""
from __future__ import annotations

import contextlib

from .anomaly_mode import AnomalyState, check_gradients
from .._tensor import Tensor
from .._memory_format import contiguous_format, is_contiguous_as, suggest_memory_format
from .graph import Node
from .grad_mode import GradState


def _edge_of(t):
    if t._base is not None and t._view_ver != t._ver_owner._ver:
        from .._dispatch import sync_view

        sync_view(t)
    if t.grad_fn is not None:
        return (t.grad_fn, t._output_nr)
    if t._requires_grad:
        return (t, 0)
    return None


def _accumulate(a, b):
    return b if a is None else a + b


def _collect_dependencies(roots):
    """For every node reachable from the roots, its pending entry: one gradient slot per output (summed into as the
    graph runs), then how many edges point at the node (counted down as they deliver)."""
    pending = {}
    stack = []
    for n in roots:  # in order: sums are reproducible
        if isinstance(n, Node) and n not in pending:
            pending[n] = _entry(n, 0)
            stack.append(n)
    get = pending.get
    while stack:  # a root reachable from another root has its entry already: every node is expanded once
        for edge in stack.pop().next:
            if edge is not None:
                target = edge[0]
                entry = get(target)
                if entry is not None:
                    entry[-1] += 1
                elif isinstance(target, Node):  # leaves (tensors) are never counted
                    pending[target] = [None, 1] if target._out_meta is None else _entry(target, 1)
                    stack.append(target)
    return pending


def _entry(node, count):
    return [None] * (len(node._out_meta) if node._out_meta is not None else 1) + [count]


def _needed_nodes(roots, wanted_nodes, wanted_leaves):
    """Nodes that must run: some wanted input lies below them (the others need not run; a wanted non-leaf's own
    node only has its gradient captured)."""
    memo = {}

    def visit(node):
        key = id(node)
        if key in memo:
            return memo[key]
        memo[key] = False
        stack = [(node, iter(node.next))]
        order = []
        # Iterative post-order DFS: deep graphs (RNNs over long sequences) must not hit the recursion limit.
        while stack:
            cur, it = stack[-1]
            advanced = False
            for edge in it:
                if edge is None:
                    continue
                target = edge[0]
                if isinstance(target, Node) and id(target) not in memo:
                    memo[id(target)] = False
                    stack.append((target, iter(target.next)))
                    advanced = True
                    break
            if not advanced:
                stack.pop()
                order.append(cur)
        for cur in order:
            below = False
            for edge in cur.next:
                if edge is None:
                    continue
                target = edge[0]
                if isinstance(target, Node):
                    below = below or memo[id(target)]
                else:
                    below = below or id(target) in wanted_leaves
            runs[id(cur)] = below
            memo[id(cur)] = below or cur in wanted_nodes
        return memo[key]

    # memo: a wanted input is this node's output or lies below it; runs: one lies below it, so the node must run.
    # A wanted non-leaf's own node only has its gradient captured: running it would free its history, which
    # ``grad(y, h)`` must leave for a later backward through ``h``.
    runs = {}
    for r in roots:
        if isinstance(r, Node):
            visit(r)
    return {k for k, v in runs.items() if v}


def _hook_name(fn):
    return getattr(fn, "__name__", type(fn).__name__)


def _checked(fn, old, new):
    """A hook's replacement gradient, refused as torch refuses it: a gradient of another size or type would reach a
    backward (or a leaf's .grad) that cannot take it."""
    if not isinstance(new, Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(new).__name__}'")
    if old is None:
        return new
    if new._data.shape != old._data.shape:
        raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the size of value")
    if new.dtype is not old.dtype or new.device != old.device:
        raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the type of value (was {old.type()} got "
                           f"{new.type()})")
    return new


def _checked_tuple(fn, old, new):
    new = tuple(new)
    if len(new) != len(old):
        raise RuntimeError(f"hook '{_hook_name(fn)}' returned an incorrect number of values (got {len(new)}, but "
                           f"expected {len(old)})")
    return tuple(n if n is None else _checked(fn, o, n) for o, n in zip(old, new))


def _run_pre_hooks(node, grads):
    for output_nr, fn in list(node._pre_hooks):
        if output_nr is None:
            new = fn(grads)
            if new is not None:
                grads = _checked_tuple(fn, grads, new)
        else:
            new = fn(grads[output_nr])
            if new is not None:
                grads = grads[:output_nr] + (_checked(fn, grads[output_nr], new),) + grads[output_nr + 1:]
    return grads


def _prepare(node, grads, wanted_nodes, captured, needed):
    """What runs before a node with hooks, or in a ``grad`` call: its pre-hooks and retain_grad hooks, the capture of
    a wanted non-leaf's gradient. Returns the gradients to run the node with, or None when it need not run."""
    if node._pre_hooks:
        grads = _run_pre_hooks(node, tuple(grads))
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


def _fix_meta(grad, meta):
    """Reduce a broadcast gradient to the input's shape and cast it to the input's dtype."""
    shape, dtype = meta
    if grad._data.shape != shape:
        grad = grad.sum_to_size(shape)
    if grad._data.dtype != dtype:
        grad = grad.to(dtype)
    return grad


# Per backward running now (innermost last): whether it was asked for the gradients of given inputs (``grad``,
# ``backward(inputs=...)``), which a reentrant checkpoint's inner backward cannot honour.
_WITH_INPUTS: list = []


def is_checkpoint_valid():
    """torch's ``autograd._is_checkpoint_valid``: False inside a backward that was given ``inputs``."""
    return not _WITH_INPUTS or not _WITH_INPUTS[-1]


def run_backward(roots, root_grads, retain_graph, create_graph, inputs=None, accumulate_into_grad=True,
                 allow_unused=False):
    """Propagate ``root_grads`` from ``roots`` (tensors). Returns the gradients of ``inputs`` when given."""
    root_edges = []
    for i, t in enumerate(roots):
        edge = _edge_of(t)
        if edge is None:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        root_edges.append(edge)

    wanted_nodes, wanted_leaves, captured = {}, {}, {}
    if inputs is not None:
        for i, t in enumerate(inputs):
            if t.grad_fn is not None:
                wanted_nodes.setdefault(t.grad_fn, []).append((t._output_nr, i))
            else:
                if not t._requires_grad:
                    raise RuntimeError("One of the differentiated Tensors does not require grad")
                wanted_leaves.setdefault(id(t), []).append(i)

    nodes = [e[0] for e in root_edges]
    pending = _collect_dependencies(nodes)
    needed = _needed_nodes(nodes, wanted_nodes, wanted_leaves) if inputs is not None else None
    special = bool(wanted_nodes) or needed is not None

    leaf_grads = {}  # id(leaf) -> [leaf, grad]
    user_grad_ids = {id(g) for g in root_grads}
    for (target, nr), g in zip(root_edges, root_grads):
        if isinstance(target, Node):
            entry = pending[target]
            entry[nr] = _accumulate(entry[nr], g)
        else:
            entry = leaf_grads.setdefault(id(target), [target, None])
            entry[1] = _accumulate(entry[1], g)
    ready = [target for target in dict.fromkeys(e[0] for e in root_edges if isinstance(e[0], Node))
             if not pending[target][-1]]

    prev_enabled = GradState.enabled
    GradState.enabled = bool(create_graph)
    _WITH_INPUTS.append(inputs is not None)
    try:
        while ready:
            node = ready.pop()
            grads = pending.pop(node)
            del grads[-1]  # the count, now 0: what remains is one gradient per output
            if special or node._hooked:
                grads = _prepare(node, grads, wanted_nodes, captured, needed)
                if grads is None:
                    continue
            if node._out_meta is not None:
                grads = node.materialize(grads)
            # A node reached only by "no gradient" (a row's None, as floor_divide's to its divisor) passes none on:
            # its backward would get None where it expects a tensor.
            if grads[0] is not None or any(g is not None for g in grads):
                if node.row_backward:  # Node.apply, inline
                    in_grads = node.op.backward(node, *grads)
                    if type(in_grads) is not tuple:
                        in_grads = (in_grads,)
                else:
                    in_grads = node.apply(grads)
            else:
                in_grads = (None,) * len(node.next)
            if AnomalyState.enabled:
                check_gradients(node, in_grads)
            if node._hooks:
                for hook in node._hooks:
                    new = hook(in_grads, grads)
                    if new is not None:
                        in_grads = _checked_tuple(hook, in_grads, new)
            if not retain_graph:
                node.release()
            meta = node.in_meta
            for i, (edge, g) in enumerate(zip(node.next, in_grads)):
                if edge is None:
                    continue
                target, nr = edge
                if g is not None and meta is not None and meta[i] is not None:
                    g = _fix_meta(g, meta[i])
                if isinstance(target, Node):
                    entry = pending[target]
                    if g is not None:
                        prev = entry[nr]
                        entry[nr] = g if prev is None else prev + g
                    entry[-1] -= 1
                    if not entry[-1]:
                        ready.append(target)
                elif g is not None:
                    entry = leaf_grads.get(id(target))
                    if entry is None:
                        leaf_grads[id(target)] = [target, g]
                    else:
                        entry[1] = g if entry[1] is None else entry[1] + g
        return _finish_leaves(leaf_grads, wanted_leaves, captured, inputs, accumulate_into_grad, create_graph,
                              user_grad_ids, allow_unused)
    finally:
        _WITH_INPUTS.pop()
        GradState.enabled = prev_enabled


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


def _finish_leaves(leaf_grads, wanted_leaves, captured, inputs, accumulate_into_grad, create_graph, user_grad_ids,
                   allow_unused):
    stored = set()
    for leaf, g in leaf_grads.values():
        if g is None:
            continue
        for hook in (leaf._hooks or ()) if _LeafHooks.enabled else ():
            new = hook(g)
            if new is not None:
                g = _checked(hook, g, new)
        for i in wanted_leaves.get(id(leaf), ()):
            captured[i] = g
        if inputs is not None and not accumulate_into_grad:
            continue
        if inputs is not None and id(leaf) not in wanted_leaves:
            continue
        acc = leaf._acc_node
        if acc is not None and acc._pre_hooks:
            g = _run_pre_hooks(acc, (g,))[0]
        if not create_graph and g._requires_grad:
            g = g.detach()
        if leaf._grad is None:
            leaf_c = leaf._data.flags.c_contiguous
            if leaf_c and g._data.flags.c_contiguous:
                fmt = dense = None  # the common case: both row-major, nothing to lay out
            else:
                fmt = contiguous_format if leaf_c else suggest_memory_format(leaf)
                if (fmt is contiguous_format) != leaf_c or is_contiguous_as(g._data, fmt):
                    fmt = None
                dense = None if fmt is not None or leaf_c else _dense_order(leaf._data)
            if fmt is not None:
                # PyTorch's layout contract: .grad has the parameter's layout (a transposed gradient from
                # ``x @ w.t()`` would make every optimizer pass over it strided and slow), channels-last included.
                g = g.contiguous(memory_format=fmt)
            elif dense is not None and _strides(g._data) != _strides(leaf._data):
                # Any other dense permuted leaf (a transposed parameter): its .grad gets the same strides, as
                # torch's ``clone_obey_contract``, so ``p.grad`` and ``p`` can be walked together.
                inverse = [0] * len(dense)
                for i, d in enumerate(dense):
                    inverse[d] = i
                g = g.permute(dense).contiguous().permute(inverse)
            elif id(g) in user_grad_ids or id(g) in stored or g._ver_owner is not None:
                # A gradient that may alias another .grad, a user tensor or a view is copied before a leaf owns it.
                g = g.clone()
            stored.add(id(g))
            leaf._grad = g
        elif create_graph:
            leaf._grad = leaf._grad + g
        else:
            leaf._grad._inplace_accumulate(g)
        for hook in leaf._post_acc_hooks or ():
            hook(leaf)
        if acc is not None and acc._hooks:
            for hook in list(acc._hooks):
                hook((), (g,))
    if inputs is None:
        return None
    if accumulate_into_grad:
        for i, t in enumerate(inputs):
            g = captured.get(i)
            if t.grad_fn is not None and g is not None:
                g = g if create_graph else g.detach()
                t._grad = g.clone() if t._grad is None else t._grad + g
        return None
    result = []
    for i, t in enumerate(inputs):
        g = captured.get(i)
        if g is None and not allow_unused and not accumulate_into_grad:
            raise RuntimeError(
                f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                "Set allow_unused=True if this is the desired behavior."
            )
        result.append(g)
    return result
