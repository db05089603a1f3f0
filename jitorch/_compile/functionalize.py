"""Side effects a compiled graph keeps: random draws and in-place updates of module buffers and arguments.

- A *random node* runs a row that draws on every run (``ops.random_ops.RANDOM_ROWS``, dropout's mask). Compiled code
  runs each one exactly once per call, in program order, so it consumes the generator as eager code does.
- A *buffer write* (BatchNorm's ``running_mean.copy_(...)``, ``num_batches_tracked.add_(1)``) is recorded
  functionally: the new value is a node (``copy(old, op(old, ...))``, or the ``copy``/``fill`` row itself), later
  reads of the buffer read that node, the graph returns the buffer's last value, and ``backend.write_back`` stores
  it into the buffer's own memory after each run. Writes into views, into tensors that require grad, or with
  arguments that require grad are not functionalized (the callers keep their eager handling of those). An
  inference call's writes into its own arguments are recorded the same way (`writable_input`).
- `CompileState`: compiling runs the function more than once (trace, joint trace, shape annotation, the first
  compiled run); the generators' states and the module's buffers are put back so a call draws and updates once.

>>> import jitorch
>>> from jitorch.fx import make_fx
>>> buf = jitorch.zeros(2)
>>> gm = make_fx(lambda x: buf.add_(x) * 2)(jitorch.ones(2))
>>> writes = functionalize(gm, [buf])
>>> [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"], writes[0][0] is buf
(['add', 'copy', 'mul'], True)
"""
from __future__ import annotations

import operator

import numpy as np

from .. import _random
from .._dispatch import apply, apply_inplace
from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..fx.make_fx import Primitive, _primitive
from ..fx.node import Node, map_aggregate
from ..ops.random_ops import RANDOM_ROWS
from ..runtime import memory_owner
from .backend import _fetch

__all__ = ["is_random", "functional_ops", "functional_write_ok", "writable_input", "shares_memory", "overlapping_write",
           "record_buffer_write", "functionalize",
           "functionalize_intermediates",
           "CompileState", "rng_state", "set_rng_state"]

# Rows whose out-of-place kernel already returns the written tensor's shape and dtype: no trailing copy.
_SELF_SHAPED = ("copy", "fill")


def is_random(node):
    """Whether ``node`` runs a row that draws random numbers on every run."""
    target = node.target
    return node.op == "call_function" and isinstance(target, Primitive) and target.op in RANDOM_ROWS


def functional_ops(op):
    """The rows that compute ``op_``'s written value out of place: ``[op]``, then ``copy`` into the old value's
    shape and dtype unless ``op``'s kernel already gives them."""
    return [op.name] if op.name in _SELF_SHAPED else [op.name, "copy"]


def functional_write_ok(t, args):
    """Whether an in-place write into the buffer ``t`` may be recorded functionally: not into a view, and nothing
    in it records autograd (eager would give the buffer a history)."""
    if t._base is not None:
        return False
    if not GradState.enabled:
        return True
    return not t._requires_grad and not any(isinstance(a, Tensor) and a._requires_grad for a in args)


def writable_input(info, t):
    """Whether an in-place write into ``t`` may be recorded as a functional write into one of the call's arguments
    (``x.add_(1)``, ``o.copy_(y)``, ``out=o``), written back after each run as a buffer's is: ``t`` is an argument
    of a recording that allows it (``info.inputs``: an inference call's), on the host, sharing no memory with
    another argument or buffer (the graph would read that one's old values; the recorder checks the tensors it
    holds, `overlapping_write` the ones it meets later). The argument's values before its first write are kept
    in ``info.input_snapshots``: compiling runs the call more than once, each run from them.

    >>> import jitorch
    >>> from jitorch._compile.segments import RecordInfo
    >>> x, y = jitorch.zeros(3), jitorch.zeros(3)
    >>> info = RecordInfo(False)
    >>> info.inputs = {id(x): x, id(y): y}
    >>> writable_input(info, x), writable_input(info, x[1:])
    (True, False)
    >>> v = y.view(3)  # f(y, y.view(3)): the graph would read v's values from before the write
    >>> info.inputs[id(v)] = v
    >>> writable_input(info, y)
    False
    """
    if id(t) not in info.inputs or type(t._data) is not np.ndarray:
        return False
    if id(t) in info.input_snapshots:
        return True
    if (t._inference and not GradState.inference) or shares_memory(t, [*info.inputs.values(),
                                                                       *info.buffers.values()]):
        return False  # (an inference tensor: eager's write raises, so the break runs it)
    info.input_snapshots[id(t)] = (t, t._data.copy(), t._version)
    return True


def shares_memory(t, others):
    """Whether a tensor among ``others`` other than ``t`` itself (None entries skipped) may share ``t``'s memory: its
    array, or a view of the array that owns ``t``'s memory (cheap: the recorder asks on every functional write
    about every tensor it holds)."""
    data = t._data
    if type(data) is not np.ndarray:
        return False
    root = memory_owner(data)
    for o in others:
        if o is None or o is t or type(o._data) is not np.ndarray:
            continue
        d = o._data
        if d is data or d is root or (d.base is not None and memory_owner(d) is root):
            return True
    return False


def overlapping_write(info, t):
    """Why a graph that reads the outside tensor ``t`` would be wrong: it shares memory with a buffer or argument
    the call wrote functionally (the graph reads ``t``'s values from before the write), else None."""
    for written in info.written.values():
        if shares_memory(t, [written]):
            return (f"a tensor of shape {tuple(t.shape)} read after an in-place write into a tensor of shape "
                    f"{tuple(written.shape)} shares its memory")
    return None


def record_buffer_write(rec, op, t, args, attrs):
    """The segment recorder ``rec`` records ``op_`` into the module buffer ``t`` as functional nodes: the new value
    is a node, later reads of ``t`` read it, and the graph's runner writes it back (``Segment.writes``)."""
    # ``functional``: the replay matches this step against the in-place call that made it.
    rec.seg.writes[id(t)] = (t, record_functional_write(rec, op, t, rec.arg(t), args, attrs, functional=True))
    return t


def record_functional_write(rec, op, t, old, args, attrs, functional=False):
    """Run ``op_(t, *args)`` (the write itself, with eager's checks) and record it as the out-of-place node(s) of
    its written value from ``old`` (``t``'s node before the write); later reads of ``t`` read the last of them,
    which is returned. ``functional`` marks the step for the replay to match against the in-place call."""
    rec._pos, rec._detached = 0, []
    args_n, attrs_n = map_aggregate(args, rec.arg), map_aggregate(attrs, rec.arg)
    value = rec._run(apply, op, t, *args, **attrs)  # the written value, while ``t`` still holds the old one
    rec._run(apply_inplace, op, t, *args, **attrs)
    seg = rec.seg
    names = functional_ops(op)
    node = seg.graph.call_function(_primitive(names[0]), (old, *args_n), attrs_n)
    data = value._data
    node.meta.update(val=(tuple(data.shape), data.dtype), stride=tuple(data.strides), rg=value._requires_grad,
                     step=len(seg.steps), grad=GradState.enabled)
    if functional:
        node.meta["functional"] = True
    last = node if len(names) == 1 else seg.graph.call_function(_primitive("copy"), (old, node))
    rec.bind(t, last)
    seg.steps.append((node, last))
    return last


def functionalize(gm, buffers):
    """Rewrite the forward in-place writes of ``gm`` into the tensors ``buffers`` (its ``get_attr`` constants) as
    functional nodes; returns ``[(buffer, node of its last value)]`` in the order of first write.

    Later readers of a written buffer read the new node (the recording already made them read the in-place node).
    """
    ids = {id(b) for b in buffers}
    if not ids:
        return []
    owner = {}  # node -> the buffer whose current value it is
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            obj = _fetch(gm, node.target)
            if id(obj) in ids:
                owner[node] = obj
    writes = {}
    graph = gm.graph
    for node in list(graph.nodes):
        target = node.target
        if not (node.op == "call_function" and isinstance(target, Primitive) and target.inplace
                and node.meta.get("phase", "forward") == "forward" and node.args and node.args[0] in owner):
            continue
        buf, old = owner[node.args[0]], node.args[0]
        with graph.inserting_before(node):
            names = functional_ops(target.op)
            new = graph.call_function(_primitive(names[0]), node.args, dict(node.kwargs))
            if len(names) > 1:
                new.meta = dict(node.meta)
                new = graph.call_function(_primitive("copy"), (old, new))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        owner[new] = buf
        writes[id(buf)] = (buf, new)
    return list(writes.values())


def functionalize_intermediates(gm):
    """Forward in-place ops on values the graph itself made (``nn.ReLU(inplace=True)``, ``h += b``) as out-of-place
    nodes; returns how many. Only where nothing else can see the old value: the base is not an input, a constant, a
    view or a random draw, has no view taken of it, and no node after the write reads it (a read there would be an
    alias made without an op, such as ``detach()``, which shares the base's node).
    """
    graph, order, done = gm.graph, {n: i for i, n in enumerate(gm.graph.nodes)}, 0
    for node in list(graph.nodes):
        target = node.target
        if not (node.op == "call_function" and isinstance(target, Primitive) and target.inplace
                and node.meta.get("phase", "forward") == "forward" and node.args):
            continue
        base = node.args[0]
        if not _made_here(base) or target.op in RANDOM_ROWS:
            continue
        if any(isinstance(u.target, Primitive) and u.target.op.view for u in base.users) or \
                any(order.get(u, -1) > order[node] for u in base.users):
            continue
        if any(isinstance(a, Node) and _dtype(a) != _dtype(base) for a in node.args[1:]):
            continue  # (``h.add_(x32)`` of a half ``h`` computes in float32 and rounds as it writes: kept in place)
        names = functional_ops(target.op)
        with graph.inserting_before(node):
            new = graph.call_function(_primitive(names[0]), node.args, dict(node.kwargs))
            if len(names) > 1:  # the written tensor's shape and dtype, as the in-place op keeps them
                new.meta = dict(node.meta)
                new = graph.call_function(_primitive("copy"), (base, new))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        done += 1
    return done


def _dtype(node):
    val = node.meta.get("val")
    return val[1] if isinstance(val, tuple) and len(val) == 2 else None


def _made_here(node):
    """Whether ``node`` is a fresh value of this graph: a non-view, non-random row's result, or one output of a
    multi-output row (batch norm's ``out``, read through ``getitem``)."""
    if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], Node):
        node = node.args[0]
    return node.op == "call_function" and isinstance(node.target, Primitive) and not node.target.op.view and \
        not node.target.inplace and not is_random(node)


class CompileState:
    """The generators' states and copies of ``buffers`` now; `restore` puts them back.

    >>> import jitorch
    >>> buf = jitorch.zeros(1)
    >>> state = CompileState([buf])
    >>> _ = buf.add_(1), jitorch.rand(1)
    >>> state.restore(); buf
    tensor([0.])
    """

    def __init__(self, buffers=()):
        self.rng = rng_state()
        self.buffers = [(b, b._data.copy()) for b in buffers if isinstance(b, Tensor)]
        self.versions = []

    def add_snapshots(self, snapshots):
        """Also put back these ``(tensor, values, version)`` (arguments a trace wrote: `writable_input`), their
        version counters too (the compiled run bumps them as the call's own writes)."""
        for t, data, version in snapshots:
            self.buffers.append((t, data))
            self.versions.append((t._root(), version))

    def restore(self):
        set_rng_state(self.rng)
        for buf, data in self.buffers:
            # NOTE: a read-only array (an expanded buffer: Hugging Face's ``position_ids``) took no write since: an
            # in-place op on it first swaps in a writable view (`writable_expanded`) or raises.
            if getattr(buf._data.flags, "writeable", True):
                buf._data[...] = data
        for root, version in self.versions:
            root._ver = version
            if root._vc is not None:
                root._vc[0] = version


def rng_state(cuda=True):
    """Every generator's stream position: the CPU default's and (``cuda``) each CUDA default's made so far."""
    gens = [_random.default_generator] + (list(_random._cuda_generators.values()) if cuda else [])
    return [(g, g._rng, g._rng.bit_generator.state if not g._on_device else g.get_state()) for g in gens]


def set_rng_state(state):
    for gen, stream, value in state:
        gen._rng = stream  # a manual_seed since replaced the CPU stream object
        if gen._on_device:
            gen.set_state(value)
        else:
            stream.bit_generator.state = value
