"""Dynamic strides: a call that misses a compiled entry only in some inputs' strides (same shapes, dtypes, devices,
every other guard holding) compiles once more, for dense copies of those inputs laid out in their own memory order
(ATen's ``infer_dense_strides``: a transposed input stays transposed), with guards that accept any strides of that
memory order; each later call copies such an input to that dense layout when its strides differ (a beam search's
``seqs[:, -1]``, whose stride grows each step, would otherwise recompile every step and reach ``recompile_limit``).
The copies keep the memory order so that the outputs get eager's layout: ``x.t() * 2`` of a column-major ``x`` is
row-major, as torch's (a row-major copy would make it column-major). Another memory order compiles once more.
``torch.compile`` with ``dynamic=None`` recompiles once with symbolic strides too; ``dynamic=False`` keeps strides
static there and here.

A copy stands for the input only when the call cannot tell them apart, so the entry that missed must be one whole
graph writing into no input, no input copied may be a module buffer, and the trace on the copies
must give the same graph up to ``contiguous`` nodes (a value read from ``stride()`` or ``is_contiguous()`` changes
it), with no ``as_strided`` (which reads the storage around the input) and no output sharing a copy's memory (eager
returns a view of the input itself). Otherwise the entry is marked and strides stay exact for it. The copy is an op
(``permute``/``contiguous``), so an input that requires grad gets its gradient through it.

>>> import jitorch
>>> f = jitorch.compile(lambda t: t * 2 + 1)
>>> outs = [f(jitorch.arange(3 * n).view(3, n).float()[:, -1]) for n in range(2, 12)]
>>> outs[-1], f._compiles(), f.entries[-1].guards[3]
(tensor([21., 43., 65.]), 2, ('arg0.stride', strides of memory order (0,) (copied to (1,))))
"""
from __future__ import annotations

from .._memory_format import dense_order
from .._tensor import Tensor
from ..fx.node import Node, map_aggregate
from .guards import argument_names, first_failure
from .output_layout import in_order, root_array

__all__ = ["DenseLayout", "dense_strides", "Relayout", "stride_only_miss", "compile_relaid", "refused_relayout",
           "static_strides_note", "relaid_runner", "RelaidPlan"]


class DenseLayout:
    """The guard value of an input whose strides a relaid entry accepts: any strides whose dense layout in their
    memory order (`dense_strides`) is ``strides``, the layout the entry was compiled for."""

    __slots__ = ("shape", "itemsize", "strides", "order")

    def __init__(self, shape, itemsize, strides):
        self.shape, self.itemsize, self.strides = shape, itemsize, strides
        self.order = tuple(dense_order(shape, strides))

    def __eq__(self, other):
        return other == self.strides or (type(other) is tuple and len(other) == len(self.shape) and
                                         dense_strides(self.shape, other, self.itemsize) == self.strides)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = None

    def __repr__(self):
        elements = tuple(s // self.itemsize for s in self.strides)
        return f"strides of memory order {self.order} (copied to {elements})"


def dense_strides(shape, strides, itemsize):
    """The byte strides of a dense array of ``shape`` laid out in the memory order of ``strides`` (ATen's
    ``infer_dense_strides``).

    >>> dense_strides((3, 4), (4, 24), 4), dense_strides((3, 4), (40, 4), 4)
    ((4, 12), (16, 4))
    """
    out, step = [0] * len(shape), itemsize
    for d in reversed(dense_order(shape, strides)):
        out[d] = step
        step *= max(shape[d], 1)
    return tuple(out)


_STRIDE = ".stride"


def stride_only_miss(entries, guards, args, kwargs, buffers=()):
    """``(entry, names)``: the latest entry whose guards differ from ``guards`` (the call's, over ``args`` and
    ``kwargs``) only in the strides of the arguments ``names`` (with the entry's own relaid ones), when that entry
    may be relaid and none of them is one of the module ``buffers`` (written back by the graph); else None."""
    for entry in reversed(entries):
        if len(entry.guards) != len(guards) or not _relayable(entry):
            continue
        changed = []
        for (name, want), (name2, have) in zip(entry.guards, guards):
            if name != name2:
                break
            if want != have:
                if not name.endswith(_STRIDE):
                    break
                changed.append(name[:-len(_STRIDE)])
        else:
            if changed:
                names = sorted(set(changed) | set(entry.relayout))
                if buffers:
                    named = dict(zip(argument_names(args, kwargs), (*args, *kwargs.values())))
                    buffer_ids = {id(b) for b in buffers}
                    if any(id(named.get(n)) in buffer_ids for n in names):
                        return None
                return entry, names
    return None


def _relayable(entry):
    """One whole graph compiled (no graph break), writing into no input, not refused before."""
    return entry.run is not None and entry.replay is None and not entry.breaks and entry.dynamic is None and \
        entry.graph_signature is not None and entry.relayout_refused is None and not entry.writes_inputs


class Relayout:
    """One relaid compile: the call's arguments with ``names`` copied to dense arrays in their memory order, the
    guards accepting any strides of that order for them, and the check of the trace made on the copies
    (`accepts`)."""

    def __init__(self, entry, names, guards, args, kwargs):
        self.missed, self.names = entry, tuple(names)
        self.guards, self.args, self.kwargs = guards, args, kwargs  # the call's own, for a refused relayout
        flat = list(args) + list(kwargs.values())
        all_names = argument_names(args, kwargs)
        self.positions = tuple(all_names.index(n) for n in names)
        copied = _relaid(flat, self.positions, None)
        self.copies = [copied[i] for i in self.positions]
        self.strides = tuple(c._data.strides for c in self.copies)
        layouts = {f"{n}{_STRIDE}": DenseLayout(c._data.shape, c._data.itemsize, c._data.strides)
                   for n, c in zip(names, self.copies)}
        self.relaid_guards = [(name, layouts.get(name, value)) for name, value in guards]
        self.new_args, self.new_kwargs = tuple(copied[:len(args)]), dict(zip(kwargs, copied[len(args):]))

    def accepts(self, traced):
        """Why the trace on the copies cannot stand for the call's (a reason), or None when it can."""
        if traced.gm is None:
            return "the call breaks the graph on dense copies of its inputs"
        if traced.writes_inputs:
            return "the call writes into its inputs in place (a copy would take the write)"
        if any(_target(n) == "as_strided" for n in traced.gm.graph.nodes):
            return "as_strided reads the storage around the input"
        if graph_signature(traced.gm) != self.missed.graph_signature:
            return "the function's graph depends on its inputs' strides (stride(), is_contiguous(), a view)"
        roots = {id(root_array(c._data)) for c in self.copies}
        aliased = []
        map_aggregate(traced.result, lambda a: aliased.append(a) if isinstance(a, Tensor) and
                      id(root_array(a._data)) in roots else a)
        if aliased:
            return "an output is a view of the input (eager returns the input's own memory)"
        return None

    def refuse(self, reason):
        self.missed.relayout_refused = reason

    def install(self, entry, params_count):
        """Make ``entry`` (compiled on the copies) copy those inputs on each call whose strides differ."""
        entry.relayout = self.names
        if entry.run is not None:
            entry.run = relaid_runner(entry.run, self.positions, self.strides)
        if entry.plan is not None:
            entry.plan = RelaidPlan(entry.plan, tuple(p + params_count for p in self.positions), self.strides)


def compile_relaid(cf, site, relayout, training, params_count):
    """Compile ``relayout``'s call on its dense copies through the `CompiledFunction` ``cf``; the entry copies
    those inputs on each later call. A trace that shows the copies cannot stand for the inputs compiles the call's
    own strides instead (`refused_relayout`)."""
    entries, compile = cf._entries_and_compile(training)
    out = compile(site, relayout.relaid_guards, relayout.new_args, relayout.new_kwargs, relayout=relayout)
    if relayout.missed.relayout_refused is None and entries and entries[-1].guards is relayout.relaid_guards:
        relayout.install(entries[-1], params_count)
    return out


def refused_relayout(cf, site, relayout, traced, before, training):
    """``(result,)`` of the call compiled with its own strides when ``traced`` (the trace on the copies) cannot
    stand for it, else None; ``before`` (a `CompileState`) undoes the trace's buffer updates and draws first."""
    reason = relayout.accepts(traced)
    if reason is None:
        return None
    before.restore()
    relayout.refuse(reason)
    entries, compile = cf._entries_and_compile(training)
    out = compile(site, relayout.guards, relayout.args, relayout.kwargs)
    if entries and entries[-1].guards is relayout.guards:
        entries[-1].relayout_refused = reason  # the same function: later stride changes need not trace it again
    return (out,)


def static_strides_note(cf, last, guards, args=(), kwargs=None):
    """Why a miss on strides alone did not make them dynamic, or why a changing size of a strided argument stayed
    static, for the recompile-limit warning ('' otherwise)."""
    failing = first_failure(last.guards, guards).split(":")[0]
    if failing.endswith(".shape") and cf.dynamic is not False:
        named = dict(zip(argument_names(args, kwargs or {}), list(args) + list((kwargs or {}).values())))
        t = named.get(failing[:-len(".shape")])
        if isinstance(t, Tensor) and not t._data.flags.c_contiguous:
            return (" (the sizes of a non-contiguous argument, such as a slice x[:, :t] of a larger tensor, stay "
                    "static: pass x[:, :t].contiguous() to let them become dynamic)")
    if not failing.endswith(_STRIDE):
        return ""
    if cf.dynamic is False:
        return " (dynamic=False keeps strides static, as torch.compile; dynamic=None accepts them after a change)"
    if last.relayout_refused is not None:
        return f" (strides stay static for this function: {last.relayout_refused})"
    return ""


def _target(node):
    return getattr(node.target, "__name__", str(node.target)) if node.op == "call_function" else None


def graph_signature(gm):
    """The ops of ``gm`` with their arguments, ``contiguous`` nodes skipped (a dense input has none): equal for
    two traces that compute the same thing from the inputs."""
    index, out, forward = {}, [], {}

    def ref(a):
        if isinstance(a, Node):
            a = forward.get(a, a)
            return ("node", index[a]) if a in index else ("node", a.name)
        return repr(a)
    for n in gm.graph.nodes:
        if _target(n) == "contiguous" and not n.kwargs and len(n.args) == 1:
            forward[n] = forward.get(n.args[0], n.args[0])
            continue
        index[n] = len(out)
        out.append((n.op, _target(n) or str(n.target), tuple(ref(a) for a in _flat(n.args)),
                    tuple((k, tuple(ref(a) for a in _flat((v,)))) for k, v in n.kwargs.items())))
    return tuple(out)


def _flat(values):
    out = []
    map_aggregate(values, out.append)
    return out


def _relaid(flat, positions, strides):
    """``flat`` with the tensors at ``positions`` copied to dense arrays in their memory order when their strides
    are not ``strides`` (one copy per tensor object, so an argument passed twice stays one tensor)."""
    flat = list(flat)
    copies = {}
    for k, i in enumerate(positions):
        t = flat[i]
        if not isinstance(t, Tensor) or (strides is not None and t._data.strides == strides[k]):
            continue
        if id(t) not in copies:
            copies[id(t)] = _dense_copy(t)
        flat[i] = copies[id(t)]
    return flat


def _dense_copy(t):
    """A dense copy of ``t`` in its memory order (strides `dense_strides`); gradients reach ``t``."""
    return in_order(t, dense_order(t._data.shape, t._data.strides))


def relaid_runner(run, positions, strides):
    """``run(args, kwargs)`` with the tensors at the flat ``positions`` copied to the dense ``strides``."""
    def call(args, kwargs):
        n = len(args)
        flat = _relaid((*args, *kwargs.values()), positions, strides)
        return run(tuple(flat[:n]), dict(zip(kwargs, flat[n:])) if kwargs else kwargs)
    return call


class RelaidPlan:
    """A training plan (``plan(params + args + kwargs)``) whose inputs at ``positions`` are copied first; its other
    attributes (kernels, graphs) are the plan's."""

    def __init__(self, plan, positions, strides):
        self._plan, self._positions, self._strides = plan, positions, strides

    def __call__(self, flat):
        return self._plan(tuple(_relaid(flat, self._positions, self._strides)))

    def __getattr__(self, name):
        return getattr(self._plan, name)
