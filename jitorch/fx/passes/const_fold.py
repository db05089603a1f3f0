"""Constant folding: evaluate once every pure node that depends only on attributes and literals.

Each foldable value that a non-foldable node reads is computed at fold time, stored on the module as
``_folded_constant<i>``, and read back with a ``get_attr``; the chain that produced it becomes dead and is removed.
Attributes (parameters included) are treated as constants, so fold after training, not before.

>>> import jitorch
>>> from jitorch import nn
>>> from jitorch.fx import symbolic_trace
>>> from jitorch.fx.passes.const_fold import fold_constants
>>> class Scale(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.register_buffer("w", jitorch.zeros(2))
...     def forward(self, x):
...         return x * (self.w.exp() + 1)
>>> gm = symbolic_trace(Scale())
>>> fold_constants(gm)
1
>>> [n.op for n in gm.graph.nodes]
['placeholder', 'get_attr', 'call_function', 'output']
>>> gm(jitorch.ones(2))
tensor([2., 2.])
"""
from __future__ import annotations

from ..._tensor import Tensor
from ..graph import is_impure, maybe_written
from ..interpreter import Interpreter

__all__ = ["fold_constants"]


def fold_constants(gm) -> int:
    """Fold ``gm`` in place and recompile; returns how many values were folded into attributes."""
    graph = gm.graph
    written = maybe_written(graph)  # an attribute updated in place by forward is no constant
    foldable = set()
    for node in graph.nodes:
        if node in written:
            continue
        if node.op == "get_attr" or (node.op in ("call_function", "call_method", "call_module")
                                     and not is_impure(node)
                                     and all(i in foldable for i in node.all_input_nodes)):
            foldable.add(node)
    frontier = [n for n in graph.nodes if n in foldable and n.op != "get_attr"
                and any(u not in foldable for u in n.users)]
    if not frontier:
        return 0
    values = _evaluate(gm, foldable)
    existing = sum(1 for name in (*gm.__dict__, *gm._buffers) if name.startswith("_folded_constant"))
    for i, node in enumerate(frontier, start=existing):
        name = f"_folded_constant{i}"
        if isinstance(values[node], Tensor):
            # a buffer follows ``gm.to(...)``, as tensor constants do; detached, as a constant has no history
            gm.register_buffer(name, values[node].detach())
        else:
            gm.__dict__[name] = values[node]
        with graph.inserting_before(node):
            attr = graph.get_attr(name)
        node.replace_all_uses_with(attr)
    graph.eliminate_dead_code()
    gm.recompile()
    return len(frontier)


def _evaluate(gm, foldable):
    interp = Interpreter(gm, garbage_collect_values=False)
    for node in gm.graph.nodes:
        if node in foldable:
            interp.env[node] = interp.run_node(node)
    return interp.env
