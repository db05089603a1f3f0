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

import contextlib
import functools
import operator

from .. import _overrides
from .._dispatch import apply, apply_inplace, pop_mode, push_mode, run_below
from .._tensor import Tensor
from ..nn.modules.module import Module
from ..nn.parameter import Parameter
from ..ops.table import OPS
from .graph import Graph
from .graph_module import GraphModule
from ._created import noting_created
from .node import map_aggregate
from .passes.shape_prop import extract_tensor_metadata
from ..utils._pytree import tree_flatten

__all__ = ["make_fx", "Primitive", "bind_inputs", "record_graph", "OutsideWriteError"]


class OutsideWriteError(RuntimeError):
    """`record_graph(refuse_outside_writes=True)` met an in-place write into a tensor from outside the function.

    >>> import jitorch
    >>> w = jitorch.zeros(2)
    >>> record_graph(lambda x: w.add_(x), [jitorch.ones(2)], refuse_outside_writes=True)
    Traceback (most recent call last):
    jitorch.fx.make_fx.OutsideWriteError: add_ writes into a tensor from outside the traced function ...
    """

    op = None  # the in-place row's name
    target = None  # (graph node or None, tensor) of the tensor written (its base's node)
    operands = ()  # (graph node or None, tensor) of each tensor the write reads: vmap tells batched writes apart

TRACING_MODES = ("real", "fake", "symbolic")


class Primitive:
    """A callable for one op-table row, ``apply(op, *args, **attrs)``; ``inplace`` rows write into ``args[0]``."""

    def __init__(self, op, inplace=False):
        self.op, self.inplace = op, inplace
        self.__name__ = f"{op.name}_" if inplace else op.name

    def __call__(self, *args, **attrs):
        if _overrides._live:  # a Proxy among the arguments (symbolic_trace of a make_fx graph) records the call
            found = _overrides.find_override(args, attrs)
            if found is not None:
                return type(found).__jitorch_function__(self, args, attrs)
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

    def __init__(self, graph, root, decompositions=None, module=None, *, metadata=True, refuse_outside_writes=False,
                 strict_reads=False):
        self.graph, self.root = graph, root
        self.metadata = metadata  # ``meta["tensor_meta"]`` on every node (a caller that only runs the graph skips it)
        self.refuse_outside_writes = refuse_outside_writes  # see record_graph
        self.strict_reads = strict_reads  # input-validation reads of traced values refuse too (see record_graph)
        self.nodes: dict[int, object] = {}  # id(tensor) -> the node that produced its current value
        self.by_array: dict[int, object] = {}  # id(tensor._data) -> the same node
        self.bound_data: dict[int, object] = {}  # id(tensor) -> the array its node was bound with
        self._alive = []  # keep recorded tensors alive so their ids are not reused during the trace
        self._constants = self._params = 0
        self.created = {}  # tensors the function made (`_created.noting_created`)
        # make_fx's decomposition_table: op name or Primitive -> a function of jitorch ops run (and recorded) instead
        self.decompositions = dict(decompositions or {})
        self._decomposing: set = set()  # the rows whose decomposition is running: a call inside is the row itself
        self._buffers = {id(b) for b in module.buffers()} if module is not None else set()

    def bind(self, tensor, node):
        data = tensor._data
        node.meta["val"] = (tuple(data.shape), data.dtype)
        node.meta["stride"] = tuple(data.strides)
        if self.metadata:
            node.meta["tensor_meta"] = extract_tensor_metadata(tensor)
        self.nodes[id(tensor)] = node
        self.bound_data[id(tensor)] = data
        # ``detach()`` and similar wrap the same array without an op: they must still read from this node.
        self.by_array[id(tensor._data)] = node
        self._alive.append(tensor)

    def arg(self, a):
        if not isinstance(a, Tensor):
            return a
        node = self.nodes.get(id(a))
        if node is not None and self.bound_data.get(id(a)) is not a._data:
            # Its array was swapped without an op (t_, transpose_, unsqueeze_, squeeze_, resize_, set_, .data =):
            # the node holds the old geometry. A tensor now sharing another's array reads that one's node.
            node = self.by_array.get(id(a._data))
            if node is None:
                raise RuntimeError(
                    "make_fx: a traced tensor's data was replaced outside the recorded ops (an in-place view op such "
                    "as t_, transpose_, unsqueeze_, squeeze_ or resize_, set_, or `.data =`): the graph cannot follow "
                    "it; write the out-of-place form (t(), transpose(), unsqueeze() ...) in traced code")
            return node
        node = node or self.by_array.get(id(a._data))
        if node is None:  # made outside the recorded ops (a creation function, a captured tensor): a constant
            node = self._constant(a)
        return node

    def _constant(self, t):
        """A ``get_attr`` node for a tensor from outside the recorded ops. As torch's make_fx, a Parameter stays a
        parameter of the result (``_param_constant0``) and a buffer of the traced module a buffer; other tensors
        are plain attributes (``_tensor_constant0``)."""
        if isinstance(t, Parameter):
            name = f"_param_constant{self._params}"
            self._params += 1
            self.root.register_parameter(name, t)
        else:
            name = f"_tensor_constant{self._constants}"
            self._constants += 1
            if id(t) in self._buffers:
                self.root.register_buffer(name, t)
            else:
                self.root.__dict__[name] = t
        node = self.graph.get_attr(name)
        self.bind(t, node)
        return node

    _run = run_below  # ``self._run(fn, *args)``: fn runs with this mode popped

    def dispatch(self, op, args, attrs):
        if self.decompositions and op.name not in self._decomposing:
            decomposition = self.decompositions.get(op.name) or self.decompositions.get(_primitive(op.name))
            if decomposition is not None:
                self._decomposing.add(op.name)
                try:
                    return decomposition(*args, **attrs)  # its ops come back through this mode and are recorded
                finally:
                    self._decomposing.discard(op.name)
        out = self._run(apply, op, *args, **attrs)
        node = self.graph.call_function(_primitive(op.name), map_aggregate(args, self.arg),
                                        map_aggregate(attrs, self.arg))
        if isinstance(out, tuple):
            if self.metadata:
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

    def _refuse_outside_write(self, op, t, args=()):
        base = t if t._base is None else t._base
        node = self.nodes.get(id(base)) or self.by_array.get(id(base._data))
        if id(base) not in self.created and (node is None or node.op != "call_function"):
            error = OutsideWriteError(f"{op.name}_ writes into a tensor from outside the traced function (an input "
                                      "or a captured tensor): refused before the write")
            error.op, error.target = op.name, (node, t)
            error.operands = [(self.nodes.get(id(a)) or self.by_array.get(id(a._data)), a)
                              for a in tree_flatten(args)[0] if isinstance(a, Tensor)]
            raise error

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        if self.refuse_outside_writes:
            self._refuse_outside_write(op, self_tensor, args)
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


def make_fx(f, decomposition_table=None, tracing_mode="real", _allow_non_fake_inputs=False, *, pre_dispatch=False,
            record_module_stack=False, _allow_fake_constant=False, _error_on_data_dependent_ops=True,
            record_stack_traces=False, proxy_module_inputs=False, joint=False):
    """``make_fx(f)(*example_args)``: run ``f`` once on the examples and return a GraphModule of primitives.

    The signature is torch's. Tensor arguments become placeholders, and so do lists, tuples and dicts holding
    tensors (the graph reads their tensors with ``getitem``); other arguments are baked in as constants. Tensors
    the function closes over or creates become ``get_attr`` constants: a Parameter stays a parameter of the result
    (``_param_constant0``), a buffer of a traced module a buffer. ``decomposition_table`` maps an op-table row (its
    name or :class:`Primitive`) to a function of jitorch ops recorded in its place.

    ``tracing_mode="real"`` (torch's default) runs the ops on the examples' values, and, as torch, refuses to read
    a value computed from the inputs (``.item()``, ``if t.sum() > 0``): the graph would keep what the examples chose
    (:class:`~jitorch.fx._fake.DataDependentOutputException`; ``_error_on_data_dependent_ops=False`` lets the value
    be read and baked in). ``tracing_mode="fake"`` never reads nor writes the example tensors: it runs on
    zero-filled twins with the same shapes, dtypes, strides and ``requires_grad`` (pages nobody touches cost no
    memory), and raises :class:`~jitorch.fx._fake.DataDependentOutputException` (a ``RuntimeError``) where the
    graph would depend on values: a host read, or an op whose output shape depends on values (``nonzero``,
    ``unique``, boolean-mask indexing). ``tracing_mode="symbolic"`` (symbolic sizes) is not implemented.

    With ``joint=True`` (jitorch's, keyword-only) the backward is recorded too (see
    :func:`jitorch.fx.joint.make_joint`): ``make_fx(f, joint=True)(*args, tangents=None)`` returns a module
    computing ``(*outputs, *grads of the args that require grad)``. ``_allow_non_fake_inputs``,
    ``record_module_stack``, ``_allow_fake_constant``, ``record_stack_traces`` and ``proxy_module_inputs`` are
    accepted for torch's callers and change nothing here.

    >>> import jitorch
    >>> w = jitorch.ones(2, requires_grad=True)
    >>> make_fx(lambda w: (w * 3).sum(), joint=True)(w)(jitorch.zeros(2))
    (tensor(0.), tensor([3., 3.]))
    >>> gm = make_fx(lambda x: x.reshape(-1, 4).sum(0), tracing_mode="fake")(jitorch.full((2, 8), float("nan")))
    >>> gm.graph.find_nodes(op="placeholder")[0].meta["val"], gm(jitorch.ones(2, 8))
    (((2, 8), dtype('float32')), tensor([4., 4., 4., 4.]))
    >>> gm = make_fx(lambda xs: xs[0] * xs[1])([jitorch.ones(2), jitorch.ones(2)])
    >>> gm([jitorch.ones(2), jitorch.full((2,), 3.0)])
    tensor([3., 3.])
    """
    if tracing_mode not in TRACING_MODES:
        raise AssertionError(f"tracing_mode must be real/fake/symbolic, got {tracing_mode}")
    if tracing_mode == "symbolic":
        raise NotImplementedError("make_fx(tracing_mode='symbolic'): jitorch has no symbolic sizes yet; use "
                                  "tracing_mode='fake' (shapes and dtypes of the examples, no data) or 'real'")
    if pre_dispatch:
        raise NotImplementedError("make_fx(pre_dispatch=True): jitorch records op-table primitives after its "
                                  "dispatcher, with autograd already applied; there is no pre-dispatch graph")
    options = {"decompositions": decomposition_table,
               "refuse_value_reads": tracing_mode == "real" and _error_on_data_dependent_ops}
    if joint:
        from .joint import make_joint  # joint.py builds on this module's recording mode

        record = make_joint(f, **options)
    else:
        record = _make_record(f, **options)
    if tracing_mode == "fake":
        return _faked(record)
    return record


def bind_inputs(mode, node, value):
    """Bind the tensors of the argument ``value`` (a tensor, or a list, tuple or dict holding some) to ``node``, its
    placeholder: a tensor inside a container is read from it by ``getitem`` nodes, so the graph takes the same
    structure again and computes on the new tensors in it (torch flattens such inputs too)."""
    if isinstance(value, Tensor):
        mode.bind(value, node)
        return
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        if _holds_tensor(item):
            bind_inputs(mode, mode.graph.call_function(operator.getitem, (node, key)), item)


def _holds_tensor(value):
    if isinstance(value, Tensor):
        return True
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_holds_tensor(v) for v in value)


def value_reads_guard(mode, refuse):
    """The context that makes host reads of values computed from the inputs raise, when ``refuse``."""
    from ._value_reads import refusing_value_reads

    return refusing_value_reads(mode) if refuse else contextlib.nullcontext()


def record_graph(fn, args, decompositions=None, refuse_value_reads=False, metadata=True, refuse_outside_writes=False,
                 strict_reads=False):
    """``(graph, root)``: the primitives ``fn(*args)`` runs and the module holding its constants, without the
    generated code of a GraphModule (callers that only walk the nodes: ``vmap``'s batched path, which also skips
    the nodes' ``tensor_meta`` with ``metadata=False``, and with ``refuse_outside_writes`` stops the trace with
    `OutsideWriteError` before an in-place op writes into an input or a captured tensor: a trace it then discards
    must leave no trace in the caller's tensors; ``strict_reads``: the library's input-validation reads refuse too,
    since a check that passed on the example is not made for other inputs).

    >>> import jitorch
    >>> graph, root = record_graph(lambda x: (x * 2).sum(), [jitorch.ones(3)])
    >>> [n.op for n in graph.nodes]
    ['placeholder', 'call_function', 'call_function', 'output']
    """
    graph, root = Graph(), Module()
    mode = _RecordingMode(graph, root, decompositions, fn if isinstance(fn, Module) else None, metadata=metadata,
                          refuse_outside_writes=refuse_outside_writes, strict_reads=strict_reads)
    for i, a in enumerate(args):
        bind_inputs(mode, graph.placeholder(f"arg{i}"), a)
    push_mode(mode)
    try:
        with noting_created(mode.created), value_reads_guard(mode, refuse_value_reads):
            result = fn(*args)
    finally:
        pop_mode()
    graph.output(map_aggregate(result, mode.arg))
    return graph, root


def _make_record(fn, decompositions=None, refuse_value_reads=False):
    @functools.wraps(fn)
    def record(*args):
        return GraphModule(*reversed(record_graph(fn, args, decompositions, refuse_value_reads)))
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
