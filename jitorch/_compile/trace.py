"""Trace a call into a primitive graph with shapes and dtypes, and notice what no single graph can hold.

`trace` runs the function once under the segment recorder (segments.py). Each node gets ``meta["val"] = (shape,
numpy dtype)`` of the value it produced on the example inputs (the fusion pass needs iteration spaces and dtypes).
When the call had no graph break and drew no random numbers outside an op (random rows such as dropout's mask are
nodes that draw on every run), ``Trace.gm`` is the whole call as one GraphModule taking the flat arguments (tensors
created inside the function become constants, as in ``make_fx``; module buffers it updates are returned for
write-back); otherwise ``gm`` is ``None``, ``break_reason`` says why (with the user's file:line), and ``Trace.info``
holds the recorded segments for a replay.

>>> import jitorch
>>> t = trace(lambda x: x * 2 if x.sum() > 0 else x, (jitorch.ones(2),), {})
>>> t.gm is None, t.break_reason.endswith("(data-dependent control flow) (t = trace(lambda x: x * 2 if x.sum() > 0 "
...                                       "else x, (jitorch.ones(2),), {}))")
(True, True)
>>> [n.target.__name__ for n in trace(lambda x: x.exp() + 1, (jitorch.ones(2),), {}).gm.graph.nodes
...  if n.op == "call_function"]
['exp', 'add']
"""
from __future__ import annotations

from dataclasses import dataclass

from .._tensor import Tensor
from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.make_fx import Primitive
from ..ops.movement import CLONE
from ..fx.node import Node, map_aggregate
from ..nn.modules.module import Module
from .backend import ArgumentSlot
from .segments import RecordInfo, record

__all__ = ["Trace", "trace", "full_graph"]

RANDOM_REASON = "random sampling inside the function (a compiled graph would replay fixed numbers)"


@dataclass
class Trace:
    gm: GraphModule | None
    result: object
    break_reason: str | None
    info: RecordInfo | None = None
    writes: tuple = ()  # buffers the call updates in place: ``gm`` returns ``(result, *their new values)``
    write_counts: tuple = ()  # in-place writes each of them took (eager bumps its version counter for each)

    @property
    def writes_inputs(self):
        """Whether the call writes into its own arguments (an `ArgumentSlot` among ``writes``)."""
        return any(isinstance(w, ArgumentSlot) for w in self.writes)


def full_graph(info, flat):
    """The root segment of a break-free recording as one GraphModule over the flat arguments ``arg0..argN``.

    When the call wrote module buffers (``seg.writes``) the graph returns ``(result, *new buffer values)``.
    """
    seg = info.root
    graph, root, env = Graph(), Module(), {}
    args = []
    for i, a in enumerate(flat):
        node = graph.placeholder(f"arg{i}")
        if isinstance(a, Tensor):
            node.meta["val"] = (tuple(a._data.shape), a._data.dtype)
        args.append(node)
    for p, obj in zip(seg.placeholders, info.externals):
        hit = next((i for i, a in enumerate(flat) if a is obj), None)
        if hit is not None:
            env[p] = args[hit]
        else:  # made outside the recorded ops (a creation function, a captured tensor): a constant
            name = f"_tensor_constant{len(root.__dict__)}"
            root.__dict__[name] = obj
            env[p] = graph.get_attr(name)
            env[p].meta = dict(p.meta)
    for n in seg.graph.nodes:
        if n.op != "placeholder":
            env[n] = graph.node_copy(n, env.__getitem__)
    made = {}  # a tensor the call made (``jitorch.zeros``) returned as it is: a fresh copy on every run

    def result(a):
        node = env[a]
        if node.op == "get_attr" and id(root.__dict__[node.target]) in info.created:
            if node not in made:
                made[node] = graph.call_function(Primitive(CLONE), (node,))
                made[node].meta = dict(node.meta)
            return made[node]
        return node
    out = map_aggregate(info.output, lambda a: result(a) if isinstance(a, Node) else a)
    if seg.writes:
        out = (out, *(env[n] for _, n in seg.writes.values()))
    graph.output(out)
    return GraphModule(root, graph)


def trace(fn, args, kwargs, fullgraph=False, buffers=(), write_inputs=False):
    """Run ``fn(*args, **kwargs)`` once under the recorder; keyword arguments become trailing placeholders.

    ``fullgraph=True`` raises ``RuntimeError`` at the first graph break, naming the user's source line. In-place
    updates of ``buffers`` (a compiled module's), and with ``write_inputs`` of the arguments themselves, are
    recorded functionally: ``Trace.writes`` lists the buffers written (an argument as its `ArgumentSlot`), in the
    order of the values ``gm`` returns after the result.
    """
    keys = tuple(kwargs)
    flat = tuple(args) + tuple(kwargs[k] for k in keys)
    nargs = len(args)
    info = record(lambda *a: fn(*a[:nargs], **dict(zip(keys, a[nargs:]))), flat, {}, fullgraph=fullgraph,
                  buffers=buffers, write_inputs=write_inputs)
    breaks = info.graph_breaks
    if breaks:
        return Trace(None, info.result, breaks[0].describe(), info)
    if info.random:
        return Trace(None, info.result, RANDOM_REASON, info)
    slots = {id(a): ArgumentSlot(i) for i, a in reversed(list(enumerate(flat)))}
    written = list(info.root.writes.values())
    writes = tuple(slots[id(b)] if id(b) in info.inputs else b for b, _ in written)
    counts = tuple(info.write_counts.get(id(b), 1) for b, _ in written)
    return Trace(full_graph(info, flat), info.result, None, info, writes, counts)
