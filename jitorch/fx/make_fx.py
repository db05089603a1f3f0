"""``make_fx``: record the jitorch *primitives* a function runs on real tensors, through the dispatcher's mode hook.

Unlike :func:`symbolic_trace`, nothing is symbolic: the function runs eagerly on the example inputs while a mode on
``jitorch._dispatch.MODES`` sees every ``apply`` and appends one ``call_function`` per op-table row. Python control
flow is therefore resolved by the example values, and composites appear as the primitives they are built from.

>>> import jitorch
>>> from jitorch.fx import make_fx
>>> gm = make_fx(lambda x: jitorch.sigmoid(x) * 2)(jitorch.zeros(3))
>>> [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
['sigmoid', 'mul']
>>> gm(jitorch.zeros(3))
tensor([1., 1., 1.])
"""
from __future__ import annotations

import functools
import operator

from .._dispatch import apply, apply_inplace, pop_mode, push_mode
from .._tensor import Tensor
from ..nn.modules.module import Module
from ..ops.table import OPS
from .graph import Graph
from .graph_module import GraphModule
from .node import map_aggregate

__all__ = ["make_fx", "Primitive"]


class Primitive:
    """A callable for one op-table row, ``apply(op, *args, **attrs)``; ``inplace`` rows write into ``args[0]``."""

    def __init__(self, op, inplace=False):
        self.op, self.inplace = op, inplace
        self.__name__ = f"{op.name}_" if inplace else op.name

    def __call__(self, *args, **attrs):
        if self.inplace:
            return apply_inplace(self.op, args[0], *args[1:], **attrs)
        return apply(self.op, *args, **attrs)

    def __reduce__(self):
        return _primitive, (self.op.name, self.inplace)

    def __eq__(self, other):
        return isinstance(other, Primitive) and (other.op, other.inplace) == (self.op, self.inplace)

    def __hash__(self):
        return hash((self.op.name, self.inplace))

    def __repr__(self):
        return f"Primitive({self.__name__})"


@functools.lru_cache(maxsize=None)
def _primitive(name, inplace=False):
    return Primitive(OPS[name], inplace)


class _RecordingMode:
    """The dispatcher mode: run each op eagerly (with the mode popped) and append a node for it."""

    def __init__(self, graph, root):
        self.graph, self.root = graph, root
        self.nodes: dict[int, object] = {}  # id(tensor) -> the node that produced its current value
        self.by_array: dict[int, object] = {}  # id(tensor._data) -> the same node
        self._alive = []  # keep recorded tensors alive so their ids are not reused during the trace
        self._constants = 0

    def bind(self, tensor, node):
        self.nodes[id(tensor)] = node
        # ``detach()`` and similar wrap the same array without an op: they must still read from this node.
        self.by_array[id(tensor._data)] = node
        self._alive.append(tensor)

    def arg(self, a):
        if not isinstance(a, Tensor):
            return a
        node = self.nodes.get(id(a)) or self.by_array.get(id(a._data))
        if node is None:  # made outside the recorded ops (a creation function, a captured tensor): a constant
            name = f"_tensor_constant{self._constants}"
            self._constants += 1
            self.root.__dict__[name] = a
            node = self.graph.get_attr(name)
            self.bind(a, node)
        return node

    def _run(self, fn, *args, **attrs):
        pop_mode()
        try:
            return fn(*args, **attrs)
        finally:
            push_mode(self)

    def dispatch(self, op, args, attrs):
        out = self._run(apply, op, *args, **attrs)
        node = self.graph.call_function(_primitive(op.name), map_aggregate(args, self.arg),
                                        map_aggregate(attrs, self.arg))
        if isinstance(out, tuple):
            for i, o in enumerate(out):
                if isinstance(o, Tensor):
                    self.bind(o, self.graph.call_function(operator.getitem, (node, i)))
        else:
            self.bind(out, node)
        return out

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        target = self.arg(self_tensor)
        out = self._run(apply_inplace, op, self_tensor, *args, **attrs)
        node = self.graph.call_function(_primitive(op.name, True), (target, *map_aggregate(args, self.arg)),
                                        map_aggregate(attrs, self.arg))
        self.bind(self_tensor, node)  # later readers of the tensor see the updated value
        return out


def make_fx(fn, joint=False, tracing_mode="real"):
    """``make_fx(fn)(*example_args)``: run ``fn`` once on the examples and return a GraphModule of primitives.

    Tensor arguments become placeholders; other arguments are baked in as constants. As torch's default
    ``tracing_mode="real"``, the ops run on the examples' values (the only mode jitorch has). With ``joint=True`` the
    backward is recorded too (see :func:`jitorch.fx.joint.make_joint`): ``make_fx(fn, joint=True)(*args,
    tangents=None)`` returns a module computing ``(*outputs, *grads of the args that require grad)``.

    >>> import jitorch
    >>> w = jitorch.ones(2, requires_grad=True)
    >>> make_fx(lambda w: (w * 3).sum(), joint=True)(w)(jitorch.zeros(2))
    (tensor(0.), tensor([3., 3.]))
    """
    if tracing_mode != "real":
        raise NotImplementedError(f"make_fx(tracing_mode={tracing_mode!r}): jitorch records on the real example "
                                  "tensors only (tracing_mode='real'); it has no fake or symbolic tensors yet")
    if joint:
        from .joint import make_joint  # joint.py builds on this module's recording mode

        return make_joint(fn)

    @functools.wraps(fn)
    def record(*args):
        graph, root = Graph(), Module()
        mode = _RecordingMode(graph, root)
        for i, a in enumerate(args):
            node = graph.placeholder(f"arg{i}")
            if isinstance(a, Tensor):
                mode.bind(a, node)
        push_mode(mode)
        try:
            result = fn(*args)
        finally:
            pop_mode()
        graph.output(map_aggregate(result, mode.arg))
        return GraphModule(root, graph)
    return record
