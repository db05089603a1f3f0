"""``make_fx``: record the jitorch *primitives* a function runs, through the dispatcher's mode hook.

Unlike :func:`symbolic_trace`, nothing is symbolic: the function runs eagerly while a mode on
``jitorch._dispatch.MODES`` sees every ``apply`` and appends one ``call_function`` per op-table row, so composites
appear as the primitives they are built from. With ``tracing_mode="real"`` it runs on the example inputs and Python
control flow is resolved by their values; with ``tracing_mode="fake"`` it runs on fake twins that have only the
inputs' shapes, dtypes and strides (see :mod:`jitorch.fx._fake`), and anything that needs a value raises.

Every tensor-valued node gets ``meta["val"] = (shape, numpy dtype)`` and ``meta["stride"]`` (byte strides), as the
compiler's traces do, and ``meta["tensor_meta"]`` (a :class:`~jitorch.fx.passes.TensorMetadata`, as ShapeProp).

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

from .._dispatch import apply, apply_inplace, pop_mode, push_mode, run_below
from .._tensor import Tensor
from ..nn.modules.module import Module
from ..ops.table import OPS
from .graph import Graph
from .graph_module import GraphModule
from ._created import noting_created
from .node import map_aggregate
from .passes.shape_prop import extract_tensor_metadata

__all__ = ["make_fx", "Primitive"]

TRACING_MODES = ("real", "fake", "symbolic")


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


def view_nodes(graph, node, chain):
    """The nodes that take the view ``chain`` (a tensor's ``_view_chain``: ``((op, attrs), ...)``) of ``node``, in
    order; the last is the view."""
    out = []
    for op, attrs in chain:
        node = graph.call_function(_primitive(op.name), (node,), dict(attrs))
        out.append(node)
    return out


class _RecordingMode:
    """The dispatcher mode: run each op eagerly (with the mode popped) and append a node for it."""

    compiling = True  # ``jitorch.compiler.is_compiling()`` while a graph is traced

    def __init__(self, graph, root):
        self.graph, self.root = graph, root
        self.nodes: dict[int, object] = {}  # id(tensor) -> the node that produced its current value
        self.by_array: dict[int, object] = {}  # id(tensor._data) -> the same node
        self._alive = []  # keep recorded tensors alive so their ids are not reused during the trace
        self._constants = 0
        self.created = {}  # tensors the function made (`_created.noting_created`)

    def bind(self, tensor, node):
        data = tensor._data
        node.meta["val"] = (tuple(data.shape), data.dtype)
        node.meta["stride"] = tuple(data.strides)
        node.meta["tensor_meta"] = extract_tensor_metadata(tensor)
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

    _run = run_below  # ``self._run(fn, *args)``: fn runs with this mode popped

    def dispatch(self, op, args, attrs):
        out = self._run(apply, op, *args, **attrs)
        node = self.graph.call_function(_primitive(op.name), map_aggregate(args, self.arg),
                                        map_aggregate(attrs, self.arg))
        if isinstance(out, tuple):
            node.meta["tensor_meta"] = tuple(extract_tensor_metadata(o) if isinstance(o, Tensor) else None
                                             for o in out)
            for i, o in enumerate(out):
                if isinstance(o, Tensor):
                    self.bind(o, self.graph.call_function(operator.getitem, (node, i)))
        else:
            self.bind(out, node)
        return out

    def _own_constant(self, t):
        """Before a write into a tensor the function made (a ``get_attr`` constant, or a view of one): the constant
        keeps the value from before the write, and the graph writes into a clone of it, so running the graph twice
        does not write twice (``m = zeros(2); m.add_(1)``). A tensor from outside stays the constant written: that
        write is the function's side effect."""
        base = t if t._base is None else t._base
        if id(base) not in self.created or (t._base is not None and t._view_chain is None):
            return
        node = self.arg(base)
        if node.op != "get_attr":
            return
        self.root.__dict__[node.target] = Tensor._make(base._data.copy())
        clone = self.graph.call_function(_primitive("clone"), (node,))
        self.bind(base, clone)
        if t is not base:
            self.bind(t, view_nodes(self.graph, clone, t._view_chain)[-1])

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        self._own_constant(self_tensor)
        target = self.arg(self_tensor)
        out = self._run(apply_inplace, op, self_tensor, *args, **attrs)
        saved = getattr(self_tensor.grad_fn, "_saved_in", None)
        if saved and isinstance(saved[0], Tensor) and saved[0] is not self_tensor and id(saved[0]) not in self.nodes:
            # apply_inplace saved a copy of the old value for the backward (``mask.mul_(x)``: x's gradient reads
            # it): that copy is the value before this write, not a constant of the trace.
            old = saved[0]
            self.nodes[id(old)], self.by_array[id(old._data)] = target, target
            self._alive.append(old)
        node = self.graph.call_function(_primitive(op.name, True), (target, *map_aggregate(args, self.arg)),
                                        map_aggregate(attrs, self.arg))
        self.bind(self_tensor, node)  # later readers of the tensor see the updated value
        return out


def make_fx(fn, joint=False, tracing_mode="real"):
    """``make_fx(fn)(*example_args)``: run ``fn`` once on the examples and return a GraphModule of primitives.

    Tensor arguments become placeholders; other arguments are baked in as constants, and tensors the function
    closes over (a module's parameters and buffers) or creates become ``get_attr`` constants. With ``joint=True``
    the backward is recorded too (see :func:`jitorch.fx.joint.make_joint`): ``make_fx(fn, joint=True)(*args,
    tangents=None)`` returns a module computing ``(*outputs, *grads of the args that require grad)``.

    ``tracing_mode="real"`` (torch's default) runs the ops on the examples' values. ``tracing_mode="fake"`` never
    reads nor writes the example tensors: it runs on zero-filled twins with the same shapes, dtypes, strides and
    ``requires_grad`` (pages nobody touches cost no memory), and raises
    :class:`~jitorch.fx._fake.DataDependentOutputException` (a ``RuntimeError``) where the graph would depend on
    values: a host read such as ``.item()`` or ``if t.sum() > 0``, or an op whose output shape depends on values
    (``nonzero``, ``unique``, boolean-mask indexing). ``tracing_mode="symbolic"`` (symbolic sizes) is not
    implemented.

    >>> import jitorch
    >>> w = jitorch.ones(2, requires_grad=True)
    >>> make_fx(lambda w: (w * 3).sum(), joint=True)(w)(jitorch.zeros(2))
    (tensor(0.), tensor([3., 3.]))
    >>> gm = make_fx(lambda x: x.reshape(-1, 4).sum(0), tracing_mode="fake")(jitorch.full((2, 8), float("nan")))
    >>> gm.graph.find_nodes(op="placeholder")[0].meta["val"], gm(jitorch.ones(2, 8))
    (((2, 8), dtype('float32')), tensor([4., 4., 4., 4.]))
    """
    if tracing_mode not in TRACING_MODES:
        raise AssertionError(f"tracing_mode must be real/fake/symbolic, got {tracing_mode}")
    if tracing_mode == "symbolic":
        raise NotImplementedError("make_fx(tracing_mode='symbolic'): jitorch has no symbolic sizes yet; use "
                                  "tracing_mode='fake' (shapes and dtypes of the examples, no data) or 'real'")
    if joint:
        from .joint import make_joint  # joint.py builds on this module's recording mode

        record = make_joint(fn)
    else:
        record = _make_record(fn)
    if tracing_mode == "fake":
        return _faked(record)
    return record


def _make_record(fn):
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
            with noting_created(mode.created):
                result = fn(*args)
        finally:
            pop_mode()
        graph.output(map_aggregate(result, mode.arg))
        return GraphModule(root, graph)
    return record


def _faked(record):
    """``record`` run on fake twins of its tensor arguments (and tangents), under :class:`FakeTensorMode`."""
    from ._fake import FakeTensorMode

    @functools.wraps(record)
    def run(*args, **kwargs):
        with FakeTensorMode() as fake:
            args = map_aggregate(args, lambda a: fake.from_real(a) if isinstance(a, Tensor) else a)
            kwargs = map_aggregate(kwargs, lambda a: fake.from_real(a) if isinstance(a, Tensor) else a)
            return record(*args, **kwargs)
    return run
