"""The one autograd node that all the views of a ``split``/``chunk``/``unbind`` call share, as torch's
``SplitBackward0``, ``SplitWithSizesBackward0`` and ``UnbindBackward0``: its backward builds the input's gradient in
one pass, a ``cat`` (``stack`` for unbind) of the outputs' gradients along the split dim, zeros only for outputs that
got none. With a node per view, each output's backward was a zero tensor of the whole input with its gradient copied
in, and the engine summed the n full-size results (unbind of n rows: O(n^2) memory traffic).

The views themselves stay ``slice`` rows (``_movement.split``): each keeps a one-step view chain that the in-place
machinery, the tracers and the compiler replay; only their history is replaced by the shared node.

>>> import jitorch
>>> x = jitorch.ones(4, 6, requires_grad=True)
>>> q, k, v = x.split(2, dim=-1)
>>> q.grad_fn is v.grad_fn, q.grad_fn.name(), (q.output_nr, v.output_nr)
(True, 'SplitBackward0', (0, 2))
>>> (q * 2).sum().backward(); x.grad[0].tolist()
[2.0, 2.0, 0.0, 0.0, 0.0, 0.0]
"""
from __future__ import annotations


from ._dispatch_record import _edge, out_metas
from ._tensor import Tensor
from .autograd.grad_mode import GradState
from .autograd.graph import Node

__all__ = ["share_grad_fn"]


class _JoinBackward(Node):
    """Backward of a multi-view split: the outputs' gradients (the engine fills zeros for missing ones, from
    ``_out_meta``) joined along ``attrs["dim"]``, in jitorch ops so ``create_graph`` differentiates it."""

    stacks = False

    def apply(self, grads):
        from ._movement_copy import cat, stack

        dim = self.attrs["dim"]
        return (stack(list(grads), dim) if self.stacks else cat(list(grads), dim),)


class SplitBackward0(_JoinBackward):
    pass


class SplitWithSizesBackward0(_JoinBackward):
    pass


class UnbindBackward0(_JoinBackward):
    stacks = True


_NODES = {cls.__name__: cls for cls in (SplitBackward0, SplitWithSizesBackward0, UnbindBackward0)}


def share_grad_fn(views, input, dim, grad_name):
    """Give ``views`` (the pieces of ``input`` along ``dim``, in order) one ``grad_name`` node as their history, each
    as its own output of it. Nothing to do when no history is recorded, and for a deferred (compiled) input, whose
    history is made when it is flushed."""
    if not (views and GradState.enabled and input._requires_grad):
        return
    for v in views:
        if type(v) is not Tensor or v.grad_fn is None:
            return
    node = _NODES[grad_name]((_edge(input),), {"dim": dim})
    node._out_meta = out_metas(views)
    for nr, v in enumerate(views):
        v.grad_fn, v._output_nr = node, nr
