"""The engine's record of each running backward (``GraphTask``: which nodes it will run, callbacks queued for its
end) and what reads it: ``torch.autograd.graph.register_multi_grad_hook`` (one hook over the gradients of several
tensors, once per backward) and ``Variable._execution_engine.queue_callback``.

In ``mode="all"`` the hook gets a list with one gradient per tensor (None for a tensor this backward does not reach)
once every tensor it does reach has its gradient; in ``mode="any"`` it gets the first gradient computed.

>>> import jitorch
>>> a, b, c = (jitorch.ones(2, requires_grad=True) for _ in range(3))
>>> seen = []
>>> h = register_multi_grad_hook((a, b, c), lambda grads: seen.append([g is not None for g in grads]))
>>> (a * 2 + b).sum().backward()
>>> seen
[[True, True, False]]
"""
from __future__ import annotations

import itertools
import threading

__all__ = ["register_multi_grad_hook", "GraphTask", "current_graph_task_id", "queue_callback"]

_TASKS: list = []  # the backward calls running now, innermost last (a reentrant checkpoint nests one)
_task_ids = itertools.count()


class GraphTask:
    """One backward call as the engine sees it: its roots (nodes or leaf tensors) and, for ``grad``/``inputs=``, the
    nodes that must run and the inputs whose gradients are captured (torch's ``GraphTask.exec_info``)."""

    __slots__ = ("id", "roots", "needed", "wanted_nodes", "wanted_leaves", "accumulates", "_reached", "callbacks")

    def __init__(self, roots, needed, wanted_nodes, wanted_leaves, accumulates):
        self.id = next(_task_ids)
        self.roots, self.needed, self.accumulates = roots, needed, accumulates
        self.wanted_nodes, self.wanted_leaves = wanted_nodes, wanted_leaves
        self._reached = self.callbacks = None

    def run_callbacks(self):
        """Run the callbacks queued during this backward, in order (one may queue another), as its last step."""
        while self.callbacks:
            self.callbacks.pop(0)()

    def will_execute(self, target) -> bool:
        """Whether this backward runs ``target`` (a node, or a leaf tensor standing for its AccumulateGrad), as
        torch's ``_will_engine_execute_node``."""
        from .graph import Node

        is_node = isinstance(target, Node)
        if self.needed is not None:  # grad() or backward(inputs=...): the nodes that run and the captured inputs
            if is_node:
                return id(target) in self.needed or target in self.wanted_nodes
            if not self.accumulates:
                raise RuntimeError("A leaf node was passed to _will_engine_execute_node but we are currently running "
                                   "autograd.grad(). This is currently not supported.")
            return id(target) in self.wanted_leaves
        if self._reached is None:
            # Walked from the roots when first asked (the engine's pending table is consumed as the graph runs);
            # a node keeps its edges after it ran.
            self._reached = reached = set()
            stack = list(self.roots)
            while stack:
                node = stack.pop()
                if id(node) in reached:
                    continue
                reached.add(id(node))
                if isinstance(node, Node):
                    stack.extend(edge[0] for edge in node.next if edge is not None)
        return id(target) in self._reached


def current_graph_task_id() -> int:
    """The running backward's id (torch's ``_current_graph_task_id``); -1 outside a backward."""
    return _TASKS[-1].id if _TASKS else -1


def queue_callback(callback):
    """Run ``callback()`` when the running backward has finished (torch's ``Variable._execution_engine.
    queue_callback``, with which hooks defer work until every gradient is computed)."""
    if not _TASKS:
        raise RuntimeError("Final callbacks can only be installed during backward pass.")
    task = _TASKS[-1]
    if task.callbacks is None:
        task.callbacks = []
    task.callbacks.append(callback)


class _MultiHandle:
    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """Register ``fn`` over the gradients of ``tensors``; returns a handle whose ``remove()`` unregisters it.

    ``mode="all"``: ``fn(grads)`` runs once per backward, after the gradient of every tensor that backward reaches
    is computed (``grads[i]`` is None for the others). ``mode="any"``: ``fn(grad)`` runs once per backward, with the
    first of the tensors' gradients computed. ``fn``'s return value is ignored: it cannot replace gradients.
    """
    supported = ("all", "any")
    if mode not in supported:
        raise ValueError(f"Expects mode to be one of {supported} but got {mode}")
    lock = threading.Lock()
    if mode == "any":
        ran: set = set()

        def first(grad):
            task_id = current_graph_task_id()
            with lock:
                if task_id in ran:
                    return
                ran.add(task_id)
            fn(grad)

        return _MultiHandle(tuple(t.register_hook(first) for t in tensors if t.requires_grad))

    # The node each tensor's gradient comes out of, as torch keeps (a leaf stands for its AccumulateGrad).
    targets = [t.grad_fn if t.grad_fn is not None else t for t in tensors]
    count, expected, buffer = {}, {}, {}

    def inner_hook(idx):
        def hook(grad):
            task = _TASKS[-1]
            with lock:
                seen = count.get(task.id, 0)
                count[task.id] = seen + 1
                if seen == 0:  # on the first gradient: how many of the tensors this backward reaches
                    expected[task.id] = sum(task.will_execute(t) for t in targets)
                grads = buffer.setdefault(task.id, [None] * len(targets))
            grads[idx] = grad
            if seen == expected[task.id] - 1:
                del count[task.id], expected[task.id], buffer[task.id]
                fn(grads)

        return hook

    return _MultiHandle(tuple(t.register_hook(inner_hook(i)) for i, t in enumerate(tensors)))
