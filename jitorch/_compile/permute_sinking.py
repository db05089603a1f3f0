"""Elementwise outputs of permuted operands computed in their operands' memory order, the permute applied last.

``x.t() * 2`` eagerly writes its result in ``x``'s memory order (strides ``(1, 3)``: ATen's TensorIterator follows
its operands' layout), as torch.compile does; a fused kernel writes its output row-major over the shape it
computes. Rewriting the graph's output ``mul(permute(x), 2)`` into ``permute(mul(x, 2))`` makes the kernel read
and write row-major memory and the output the permuted view eager returns: eager's strides at no extra pass (a
copy afterwards, `output_layout`, costs one more pass over the output).

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> t = trace(lambda x: (x.t() * 2).relu(), (jitorch.ones(2, 3),), {})
>>> sink_permutes(t.gm, (jitorch.ones(2, 3),))
1
>>> [(n.target.__name__, n.kwargs) for n in t.gm.graph.nodes if n.op == "call_function"]
[('mul', {}), ('relu', {}), ('permute', {'dims': (1, 0)})]
"""
from __future__ import annotations

import numpy as np

from .._tensor import Tensor
from ..fx.make_fx import Primitive
from ..fx.node import Node, map_aggregate
from ..ops.movement import PERMUTE
from .fusion import fusible
from .output_layout import memory_order

__all__ = ["sink_permutes"]


def _row_major(shape, itemsize):
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _dense_row_major(node, flat):
    """Whether ``node``'s value (an argument, or a computed value per its traced strides) is row-major."""
    if node.op == "placeholder":
        i = int(node.name[3:]) if node.name.startswith("arg") and node.name[3:].isdigit() else -1
        a = flat[i] if 0 <= i < len(flat) else None
        return isinstance(a, Tensor) and type(a._data) is np.ndarray and a._data.flags.c_contiguous
    if "val" not in node.meta or "stride" not in node.meta:
        return False
    shape, dtype = node.meta["val"]
    return all(s == r for s, r, n in zip(node.meta["stride"], _row_major(shape, np.dtype(dtype).itemsize), shape)
               if n > 1)


class _Chain:
    """One output's elementwise chain, rebuilt over the permuted operands' sources (`sink_permutes`)."""

    def __init__(self, graph, flat, out):
        self.graph, self.flat, self.out = graph, flat, out
        self.dims = None
        self.made = {}  # old node -> its value in the sources' order
        self.visiting = set()

    def source(self, node):
        """``node``'s value in the sources' memory order (a new node, a source, a 0-d value), or None."""
        if node in self.made:
            return self.made[node]
        if "val" in node.meta and node.meta["val"] and node.meta["val"][0] == ():
            return node  # a 0-d value broadcasts the same in any order
        if node.op == "placeholder":
            return self._argument(node)
        if node.op != "call_function" or "val" not in node.meta:
            return None
        if isinstance(node.target, Primitive) and node.target.op is PERMUTE and not node.args[1:]:
            dims = tuple(node.kwargs.get("dims", ()))
            if (self.dims is None or dims == self.dims) and _dense_row_major(node.args[0], self.flat):
                self.dims = dims
                return node.args[0]
            return None
        if not fusible(node) or node.meta["val"][0] != self.out.meta["val"][0]:
            return None
        if node is not self.out and any(u not in self.visiting and u not in self.made for u in node.users):
            return None  # read elsewhere in this order too: left as it is
        self.visiting.add(node)
        args = []
        for a in node.args:
            if isinstance(a, Node):
                s = self.source(a)
                if s is None:
                    return None
                args.append(s)
            else:
                args.append(a)
        return self._copy(node, tuple(args))

    def _argument(self, node):
        """A tensor argument dense in another order than row-major (``x.t()`` passed in, channels-last): its
        row-major view ``permute(x, order)``, the chain's permute then being the inverse order."""
        i = int(node.name[3:]) if node.name.startswith("arg") and node.name[3:].isdigit() else -1
        a = self.flat[i] if 0 <= i < len(self.flat) else None
        order = memory_order(a._data) if isinstance(a, Tensor) else None
        if order is None:
            return None
        dims = tuple(int(d) for d in np.argsort(order))
        if self.dims is not None and dims != self.dims:
            return None
        self.dims = dims
        key = ("argument", node)
        if key not in self.made:
            with self.graph.inserting_before(self.out):
                view = self.graph.call_function(Primitive(PERMUTE), (node,), {"dims": order})
            shape, dtype = node.meta["val"]
            view.meta = {"val": (tuple(shape[d] for d in order), dtype),
                         "stride": _row_major(tuple(shape[d] for d in order), np.dtype(dtype).itemsize)}
            self.made[key] = view
        return self.made[key]

    def _copy(self, node, args):
        with self.graph.inserting_before(self.out):
            new = self.graph.call_function(node.target, args, dict(node.kwargs))
        shape, dtype = node.meta["val"]
        inverse = np.argsort(self.dims)
        new.meta = {k: v for k, v in node.meta.items() if k not in ("val", "stride")}
        new.meta["val"] = (tuple(shape[d] for d in inverse), dtype)
        new.meta["stride"] = _row_major(new.meta["val"][0], np.dtype(dtype).itemsize)
        self.made[node] = new
        return new


def sink_permutes(gm, flat):
    """Rewrite each graph output that is an elementwise chain over permutes (one ``dims``) of row-major values,
    every value of the chain read by the chain only, as that chain over the values then one permute; ``flat``: the
    call's arguments (their strides). Returns how many outputs changed (``gm`` recompiled when any did)."""
    graph = gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    changed = 0
    for out in {a: None for a in _output_nodes(output)}:
        if out.op != "call_function" or not fusible(out) or len(out.users) != 1:
            continue
        chain = _Chain(graph, flat, out)
        base = chain.source(out)
        if base is None or chain.dims is None or base is out or sorted(chain.dims) == list(chain.dims):
            for new in reversed(list(chain.made.values())):
                graph.erase_node(new)
            continue
        with graph.inserting_before(output):
            view = graph.call_function(Primitive(PERMUTE), (base,), {"dims": chain.dims})
        view.meta = dict(out.meta)
        out.replace_all_uses_with(view)
        for old in reversed([n for n in graph.nodes if n in chain.made and n.op != "placeholder"]):
            if not old.users:
                graph.erase_node(old)
        _drop_unused_permutes(graph)
        changed += 1
    if changed:
        gm.recompile()
    return changed


def _output_nodes(output):
    found = []
    map_aggregate(output.args, lambda a: found.append(a) if isinstance(a, Node) else None)
    return found


def _drop_unused_permutes(graph):
    for n in reversed(list(graph.nodes)):
        if n.op == "call_function" and isinstance(n.target, Primitive) and n.target.op is PERMUTE and not n.users:
            graph.erase_node(n)
