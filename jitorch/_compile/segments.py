"""Record a call as a tree of graph *segments* separated by graph breaks.

The recorder is a dispatcher mode: every op runs eagerly (the first call's answer is eager's) and is appended to
the current segment's graph. Tensors that were not produced inside the segment (arguments, parameters, tensors made
by creation functions, earlier segments' values) become the segment's placeholders, bound by position at replay, so
nothing is frozen into a constant. A segment ends at a *break*:

- ``host``: a tensor value read into Python (``bool(t)`` in an ``if``, ``.item()``, ``.tolist()``, ``int(t)``...).
  The value is the guard of the next segment: ``Break.children`` maps each value seen to the segment recorded after
  it, so a later call whose value differs records (or reuses) another branch.
- ``eager``: an op the graph cannot hold (a data-dependent output shape such as ``nonzero``; an in-place write into a
  tensor from outside the segment or into a view), run eagerly at that point on every call. A compiled module's
  buffers are the exception, and so are an inference call's arguments: their in-place updates are recorded as
  functional nodes (``Segment.writes``; see `functionalize`), which the whole-call graph returns for write-back and
  a replay defers like any value.
- ``escape``: ``.numpy()`` / ``np.asarray(t)`` hands out memory Python may write; the rest of the call runs eagerly.
- ``return``: the end of the function.

Python side effects are never replayed from a record: every call reruns the function's Python (see replay.py), so
prints, appends and counters happen exactly as in eager mode; only tensor work is deferred and compiled.

>>> import jitorch
>>> def f(x):
...     y = x * 2
...     return y + 1 if y.sum() > 0 else y - 1
>>> rec = record(f, (jitorch.ones(2),), {}, fullgraph=False)
>>> rec.result, [b.kind for b in rec.breaks]
(tensor([3., 3.]), ['host', 'return'])
"""
from __future__ import annotations

import operator
import weakref

import numpy as np

from .._dispatch import apply, apply_inplace, pop_mode, push_mode
from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..fx.graph import Graph
from ..fx.make_fx import _primitive
from ..fx.node import map_aggregate
from ..ops.table import Opaque
from .functionalize import functional_write_ok, overlapping_write, record_buffer_write, shares_memory, writable_input
from .segment_training import TrainingNotes
from ..fx._created import noting_created
from .view_writes import NOT_FUNCTIONAL, functional_write
from .segment_watch import ESCAPES, _ModeBase, host_reason, user_location, value_key, watching

__all__ = ["Segment", "Break", "Recorder", "record", "watching", "user_location", "value_key"]


class Break:
    """How a segment ends; ``children`` (host) or ``next`` (eager) is the segment that follows."""

    def __init__(self, kind, name, reason, where="", source=""):
        self.kind, self.name, self.reason, self.where, self.source = kind, name, reason, where, source
        self.children = {}  # host: value key -> Segment
        self.next = None  # eager: the Segment after the op

    def describe(self):
        at = f"{self.where}: " if self.where else ""
        line = f" ({self.source})" if self.source else ""
        return f"{at}{self.reason}{line}"


class Segment:
    """One graph: placeholders for outside tensors, one node per recorded op (``steps``), and its `Break`."""

    def __init__(self):
        self.graph = Graph()
        self.placeholders = []
        self.steps = []  # (node, output nodes) in dispatch order; the replay matches calls against them
        self.end = None
        self.record_outputs = []  # the nodes whose tensors were alive at the break when recorded
        self.compiled = {}  # (names of the requested outputs, steps, [grad flags]) -> CompiledGraph or SegmentRun
        self.untrainable = None  # why autograd through this segment's graph would differ from eager autograd
        self.writes = {}  # id(buffer) -> (buffer, node of its last value): module buffers written functionally

    def walk(self):
        """This segment and every segment after it, depth first."""
        yield self
        if self.end is not None:
            for child in list(self.end.children.values()) + ([self.end.next] if self.end.next else []):
                yield from child.walk()


def data_dependent(op, args):
    """Whether the output shape of ``op`` depends on tensor values (a replay could not know it in advance)."""
    if isinstance(op.fusion, Opaque) and "data-dependent" in op.fusion.why or op.name == "bincount":
        return True
    # Indexing with a boolean mask keeps as many elements as the mask has True values.
    return op.name == "index" and any(isinstance(a, Tensor) and a._data.dtype == np.bool_ for a in args[1:])


class Recorder(_ModeBase, TrainingNotes):
    """The recording mode; ``info`` collects what the specialization needs to know (breaks, random draws)."""

    def __init__(self, info, segment):
        self.info = info
        self.live = True
        self._pos, self._detached, self.produced = 0, [], {}  # see TrainingNotes
        self._start(segment)

    def _start(self, segment):
        self.seg = segment
        self.nodes, self.by_array, self.externals, self._refs = {}, {}, {}, {}
        self.ext_objs = []  # strong references: an outside tensor's id must not be reused while recording
        if segment is self.info.root:
            self.info.externals = self.ext_objs

    # -- binding tensors to nodes -------------------------------------------------------------------------------------
    def _forget(self, table, key, ref):
        if self._refs.get((table, key)) is ref:
            del self._refs[(table, key)]
            getattr(self, table).pop(key, None)

    def bind(self, t, node):
        node.meta["val"] = (tuple(t._data.shape), t._data.dtype)
        node.meta["stride"] = tuple(t._data.strides)
        node.meta["rg"] = t._requires_grad
        self.produced[id(t)] = self.produced[id(t._data)] = node
        for table, obj in (("nodes", t), ("by_array", t._data)):
            key = id(obj)
            getattr(self, table)[key] = node
            self._refs[(table, key)] = weakref.ref(obj, lambda r, k=key, tb=table: self._forget(tb, k, r))

    def local(self, t):
        return self.nodes.get(id(t)) or self.by_array.get(id(t._data))

    def arg(self, a):
        if not isinstance(a, Tensor):
            return a
        node = self.local(a) or self.externals.get(id(a))
        if node is None:
            unsound = self.info.unsound is None and overlapping_write(self.info, a)
            if unsound:
                self.info.unsound = unsound
            node = self.seg.graph.placeholder(f"in{len(self.seg.placeholders)}")
            node.meta["val"] = (tuple(a._data.shape), a._data.dtype)
            node.meta["stride"] = tuple(a._data.strides)
            node.meta["rg"] = a._requires_grad
            self.seg.placeholders.append(node)
            self.externals[id(a)] = node
            self.ext_objs.append(a)
            self.use(a)
        self._check_identity(a, node)
        return node

    # -- the mode --------------------------------------------------------------------------------------------------
    def dispatch(self, op, args, attrs):
        if not self.live:
            return self._run(apply, op, *args, **attrs)
        if data_dependent(op, args):
            return self._eager(op, False, f"{op.name}() has a data-dependent output shape", args, attrs)
        out = self._run(apply, op, *args, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        if not all(isinstance(o, Tensor) for o in outs):
            self.use(args)
            self._end(Break("eager", op.name, f"{op.name}() returns Python values", *user_location()))
            self._start(Segment())
            return out
        self._note_grad(op, outs)
        graph = self.seg.graph
        self._pos, self._detached = 0, []
        node = graph.call_function(_primitive(op.name), map_aggregate(args, self.arg), map_aggregate(attrs, self.arg))
        node.meta["step"], node.meta["grad"] = len(self.seg.steps), GradState.enabled
        if self._detached:
            node.meta["detach"] = frozenset(self._detached)
        if isinstance(out, tuple):
            got = tuple(graph.call_function(operator.getitem, (node, i)) for i in range(len(out)))
            for o, n in zip(out, got):
                self.bind(o, n)
        else:
            got = node
            self.bind(out, node)
        self.seg.steps.append((node, got))
        return out

    def dispatch_inplace(self, op, t, args, attrs):
        if not self.live:
            return self._run(apply_inplace, op, t, *args, **attrs)
        if self._functional_target(t, args):
            return self._write_buffer(op, t, args, attrs)
        if self.nodes.get(id(t)) is None or t._base is not None:
            out = functional_write(self, op, t, args, attrs)  # a view of the graph's own tensors, or one it made
            if out is not NOT_FUNCTIONAL:
                return out
            why = f"in-place {op.name}_() writes into a tensor from outside the graph (an input, a view or an " \
                  "earlier graph's value)"
            return self._eager(op, True, why, (t,) + tuple(args), attrs)
        out = self._run(apply_inplace, op, t, *args, **attrs)
        self._note_grad(op, (t,))
        # A training replay runs in-place ops eagerly, so how their tensors require grad is not checked.
        self._pos, self._detached, untrainable = 0, [], self.seg.untrainable
        node = self.seg.graph.call_function(_primitive(op.name, True), (self.arg(t), *map_aggregate(args, self.arg)),
                                            map_aggregate(attrs, self.arg))
        self.seg.untrainable = untrainable
        node.meta["step"], node.meta["grad"] = len(self.seg.steps), GradState.enabled
        self.bind(t, node)
        self.seg.steps.append((node, node))
        return out

    def _functional_target(self, t, args):
        """Whether the write into ``t`` is recorded functionally: a module buffer or (`writable_input`) an argument,
        of which the graph holds no other tensor yet (a view taken before the write, ``detach()``): that one's node
        would keep the old values."""
        info = self.info
        if not (id(t) in info.buffers or id(t) in info.inputs) or not functional_write_ok(t, args):
            return False
        # On every write: a view taken between two writes holds the first one's value.
        held = [ref() for (table, _), ref in list(self._refs.items()) if table == "nodes"]
        if shares_memory(t, [*held, *self.ext_objs]):
            return False
        if id(t) not in info.written:
            if not (id(t) in info.buffers or writable_input(info, t)):
                return False
            info.written[id(t)] = t
        info.write_counts[id(t)] = info.write_counts.get(id(t), 0) + 1
        return True

    def _write_buffer(self, op, t, args, attrs):
        return record_buffer_write(self, op, t, args, attrs)

    def _note_grad(self, op, outs):
        if self.info.unsound is None and any(o._requires_grad for o in outs):
            self.info.unsound = f"{op.name}() produced a tensor that requires grad (an inference graph has no backward)"

    def _eager(self, op, inplace, why, args, attrs):
        self.use(args)
        brk = self._end(Break("eager", op.name + ("_" if inplace else ""), why, *user_location()))
        out = self._run(apply_inplace if inplace else apply, op, *args, **attrs)
        brk.next = Segment()
        self._start(brk.next)
        return out

    def host_read(self, name, t, fn, args, kwargs):
        if not self.live:
            return fn(t, *args, **kwargs)
        kind = "escape" if name in ESCAPES else "host"
        self.use(t)
        brk = self._end(Break(kind, name, host_reason(name), *user_location()))
        value = self._run(fn, t, *args, **kwargs)
        if kind == "escape":
            self.live = False
        else:
            brk.children[value_key(name, value)] = Segment()
            self._start(next(iter(brk.children.values())))
        return value

    def random_draw(self):
        self.info.random = True

    def python_output(self, what):
        if self.info.output_call is None:
            self.info.output_call = what

    def hidden_write(self):
        if self.live and self.info.hidden_write is None:
            self.info.hidden_write = ("a tensor was written outside the traced ops (an in-place update of raw arrays, "
                                      "as an optimizer's step makes): a compiled graph would not repeat the write")

    def _end(self, brk):
        if brk.kind != "return" and self.info.fullgraph:
            raise RuntimeError(f"jitorch.compile(fullgraph=True): graph break at {brk.describe()}. Remove the "
                               "break or call jitorch.compile without fullgraph=True to run that part eagerly.")
        self.seg.end = brk
        # What is alive here is what a replay will most likely need: the segment is compiled for it up front.
        alive = set(self.nodes.values()) | set(self.by_array.values())
        self.seg.record_outputs = [n for n in self.seg.graph.nodes if n in alive]
        if any(n.meta["rg"] for n in self.seg.record_outputs):  # a training specialization compiles them ahead
            self.info.examples[self.seg] = self.ext_objs
        self.info.breaks.append(brk)
        return brk

    def finish(self, result=None):
        self.use(result)
        if self.live:
            if self.seg is self.info.root:  # no break: the whole call is one graph; map its outputs
                self.info.output = map_aggregate(result, self.arg)
            self._end(Break("return", "return", "end of the function"))


class RecordInfo:
    """What one recording saw."""

    def __init__(self, fullgraph, buffers=()):
        self.fullgraph = fullgraph
        self.breaks = []  # every Break in recording order (the last is the return)
        self.random = False  # a random draw outside an op (a creation function): the graph cannot bake it
        self.buffers = {id(b): b for b in buffers}  # module buffers whose in-place writes are recorded functionally
        self.unsound = None  # a reason the inference graph would be wrong (an output requires grad)
        self.hidden_write = None  # a reason no graph may replace the call: memory written outside every op
        self.result = None
        self.root = None
        self.output = None  # without breaks: the result with tensors replaced by nodes of the root segment
        self.externals = []  # the root segment's outside tensors, in placeholder order
        self.examples = {}  # Segment -> its outside tensors, in placeholder order (to compile ahead on)
        self.created = {}  # id -> tensor made by a creation function during the call (view_writes.py)
        self.output_call = None  # the first ``print()`` or logging call of the user's code: a side effect
        self.inputs = {}  # id -> argument tensor whose in-place writes may be recorded functionally (`writable_input`)
        self.input_snapshots = {}  # id -> (argument, its values and version before the call's first write into it)
        self.written = {}  # id -> buffer or argument written functionally (`overlapping_write`)
        self.write_counts = {}  # id -> how many in-place writes it took (eager bumps its version for each)

    @property
    def graph_breaks(self):
        return [b for b in self.breaks if b.kind != "return"]


def record(fn, args, kwargs, *, fullgraph=False, segment=None, buffers=(), write_inputs=False):
    """Run ``fn`` once under a `Recorder` and return its `RecordInfo` (``result`` is the eager answer).

    In-place writes into ``buffers`` (a module's buffers) become functional nodes, not graph breaks (see
    `functionalize`); so do writes into the arguments themselves with ``write_inputs`` (an inference call's: see
    `writable_input`), else they stay breaks.
    """
    flat = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
    info = RecordInfo(fullgraph, [b for b in buffers if not any(b is a for a in flat)])
    if write_inputs:
        info.inputs = {id(a): a for a in flat}
    info.root = segment or Segment()
    mode = Recorder(info, info.root)
    with watching(mode), noting_created(info.created):
        push_mode(mode)
        try:
            info.result = fn(*args, **kwargs)
        finally:
            pop_mode()
    mode.finish(info.result)
    return info
