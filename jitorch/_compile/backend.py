"""The "jitorch" backend: run a traced graph with its fused groups as LLVM kernels and everything else eagerly.

Groups whose inputs live on a CUDA device run as CUDA kernels instead (`lower_cuda`: NVRTC cubins launched through
CuPy on the current stream); the choice is made per call from the input arrays.

>>> import jitorch
>>> from jitorch._compile.trace import trace
>>> t = trace(lambda x: (x * 2 + 1).sum(), (jitorch.ones(3),), {})
>>> cg = CompiledGraph(t.gm)
>>> cg.kernel_ops, cg((jitorch.ones(3),))
([['mul', 'add', 'sum']], tensor(9.))
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..fx.make_fx import Primitive
from ..fx.node import Node, map_aggregate
from ..ops.indexing import IndexOutOfBounds
from ..ops.random_ops import CONSTANT_DRAWS, RANDOM_ROWS
from . import lower_cuda, native_runner
from .fusion import FusedGroup, partition
from .lower import GroupKernel
from ..runtime import memory_owner
from ..runtime.threads import get_num_threads

__all__ = ["CompiledGraph", "ArgumentSlot", "write_back", "whole_call_runner"]


def draws_first(graph):
    """Move the random rows that read only inputs and constants (dropout's mask, ``rand``) ahead of all computation,
    in their order: no other node consumes the generator, so the numbers stay eager's, and a draw no longer splits
    the native program between the ops around it. A draw that reads a computed value (``bernoulli(probs)``) stays,
    and so do the draws after it. Returns whether a node moved.

    >>> import jitorch
    >>> from jitorch.fx import make_fx
    >>> gm = make_fx(lambda x: (x * 2) + jitorch.rand(3))(jitorch.ones(3))
    >>> draws_first(gm.graph), [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
    (True, ['uniform_sample', 'mul', 'add'])
    """
    nodes = list(graph.nodes)
    at = next((i for i, n in enumerate(nodes) if n.op not in ("placeholder", "get_attr")), len(nodes))
    moved = False
    if any(n.op == "placeholder" for n in nodes[at:]) and any(
            n.op == "call_function" and isinstance(n.target, Primitive) and n.target.op in CONSTANT_DRAWS
            for n in nodes[at:]):
        # A replayed segment binds a tensor as a placeholder where its first op reads it: the placeholders go
        # ahead first, in their order (the arguments' order), so a draw that reads one moves with it in place.
        for n in nodes[at:]:
            if n.op in ("placeholder", "get_attr"):
                nodes[at].prepend(n)
        nodes, moved = list(graph.nodes), True
        at = next(i for i, n in enumerate(nodes) if n.op not in ("placeholder", "get_attr"))
    before, first = set(nodes[:at]), nodes[at] if at < len(nodes) else None
    for node in nodes[at:]:
        if node.op != "call_function" or not isinstance(node.target, Primitive) or node.target.op not in RANDOM_ROWS:
            continue
        if node.target.op not in CONSTANT_DRAWS or \
                not all(a.op in ("placeholder", "get_attr") for a in node.all_input_nodes):
            break  # a draw that must wait for its operands: later draws stay after it
        for a in [*node.all_input_nodes, node]:  # a constant recorded next to its draw moves with it
            if a in before:
                continue
            if a is first:
                first = a.next
            else:
                first.prepend(a)
                moved = True
            before.add(a)
    return moved


class CompiledGraph:
    """A plan over ``gm.graph``: a list of steps (a `GroupKernel` with its group, or one node run eagerly)."""

    def __init__(self, gm):
        self.gm = gm
        graph = gm.graph
        if draws_first(graph):
            gm.recompile()
        self.placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self.constants = {n: _fetch(gm, n.target) for n in graph.nodes if n.op == "get_attr"}
        self.output = next(n for n in graph.nodes if n.op == "output")
        self.units = partition(graph)
        self.steps = [(GroupKernel(u), u) if isinstance(u, FusedGroup) else (None, u) for u in self.units]
        # Free each intermediate after its last reader so large chains do not hold every temporary.
        last_use = {}
        for i, (_, u) in enumerate(self.steps):
            for n in (u.inputs if isinstance(u, FusedGroup) else u.all_input_nodes):
                last_use[n] = i
        keep = set(self.output.all_input_nodes)
        self.frees = [[] for _ in self.steps]
        for n, i in last_use.items():
            if n not in keep and n.op == "call_function":
                self.frees[i].append(n)
        # The native runner (`native_runner`): planned on the second host call, used from the third on.
        self.native, self.native_reason, self._calls = None, None, 0

    @property
    def kernel_ops(self):
        """The row names each fused kernel computes, one list per kernel."""
        return [u.ops for k, u in self.steps if k is not None]

    def __call__(self, args):
        if self.native is not None and self._native_threads != get_num_threads():
            # The plan chose per kernel between one native call and a thread split for the old thread count.
            self.native, self.native_reason, self._calls = None, None, 0
        if self.native is not None:
            out = self.native(args)
            if out is not native_runner.FALLBACK:
                return out
        elif self.native_reason is None and native_runner.ENABLED:
            self._calls += 1
            if self._calls >= 2:
                self._native_threads = get_num_threads()
                out = native_runner.attach(self, args)
                if out is not native_runner.FALLBACK:
                    return out
        return self.run_steps(args)[0]

    def run_steps(self, args, keep_values=False):
        """Run the steps in Python: ``(outputs, env)``; values are dropped after their last use unless
        ``keep_values`` (the native runner records every value's layout from such a run)."""
        env = dict(self.constants)
        for n, a in zip(self.placeholders, args):
            env[n] = a
        for (kernel, unit), frees in zip(self.steps, self.frees):
            if kernel is not None:
                arrays = [env[p]._data for p in unit.inputs]
                outs = lower_cuda.run(kernel, arrays) if lower_cuda.on_device(arrays) else kernel(arrays)
                for m, o in zip(unit.outputs, outs):
                    env[m] = Tensor._make(o)
            else:
                fn_args = map_aggregate(unit.args, lambda a: env[a] if isinstance(a, Node) else a)
                fn_kwargs = map_aggregate(unit.kwargs, lambda a: env[a] if isinstance(a, Node) else a)
                env[unit] = unit.target(*fn_args, **fn_kwargs)
            if not keep_values:
                for n in frees:
                    env.pop(n, None)
        return map_aggregate(self.output.args[0], lambda a: env[a] if isinstance(a, Node) else a), env


@dataclass(frozen=True)
class ArgumentSlot:
    """A write-back target that is the call's ``index``-th flat argument, whichever tensor a call passes there (a
    traced call's in-place writes into its arguments: `functionalize.writable_input`)."""

    index: int


def write_back(buffers, values, counts=None):
    """Store each graph value into its buffer's own memory after a run, bumping its version as many times as the
    call's eager in-place updates did (``counts``, one each by default): a compiled call's functional buffer
    updates (see `functionalize`)."""
    for i, (buf, value) in enumerate(zip(buffers, values)):
        buf._data[...] = value._data
        buf._bump_version(counts[i] if counts else 1)


def whole_call_runner(graph, writes, eager=None, counts=None):
    """``run(args, kwargs)`` of a whole-call `CompiledGraph`; with buffer ``writes`` the graph returns ``(result,
    *new values)`` and each value is written back into its buffer (an `ArgumentSlot`: that argument of the call)
    before the result is returned (``counts``: version bumps each, see `write_back`). ``eager(args, kwargs)`` runs
    instead for a call where memory is shared across a write: an argument written that shares memory with another
    argument or with a tensor the graph holds, or an argument sharing a written buffer's memory (the graph would read
    old values where eager reads the write); for an inference tensor written outside inference mode (eager raises);
    and for one where an index row found an index out of bounds: eager's functions word that error per op (gather's
    RuntimeError, index_select's "index out of range in self"), and nothing was written yet (writes follow the run)."""
    def graph_or_eager(flat, args, kwargs):
        """``(True, eager's result)`` after an index error, else ``(False, the graph's outputs)``."""
        try:
            return False, graph(flat)
        except IndexOutOfBounds:
            if eager is None:
                raise
            return True, eager(args, kwargs)

    if not writes:
        return lambda args, kwargs: graph_or_eager(tuple(args) + tuple(kwargs.values()), args, kwargs)[1]
    slots = [w.index for w in writes if isinstance(w, ArgumentSlot)]
    # Memory owners of what the graph holds (constants, module buffers) and of the buffers it writes.
    held = {id(memory_owner(c._data)) for c in graph.constants.values() if isinstance(c, Tensor)
            and type(c._data) is np.ndarray}
    written = {id(memory_owner(w._data)) for w in writes if isinstance(w, Tensor) and type(w._data) is np.ndarray}

    def run(args, kwargs):
        flat = tuple(args) + tuple(kwargs.values())
        if eager is not None and _memory_crosses_a_write(flat, slots, held, written):
            return eager(args, kwargs)
        ran_eagerly, out = graph_or_eager(flat, args, kwargs)
        if ran_eagerly:
            return out
        targets = [flat[w.index] if isinstance(w, ArgumentSlot) else w for w in writes] if slots else writes
        write_back(targets, out[1:], counts)
        # A buffer the call returns (``return y, bn.running_mean``) is the buffer itself, as in eager mode, not the
        # graph's copy of its new value.
        buffer_of = {id(v): b for b, v in zip(targets, out[1:])}
        return map_aggregate(out[0], lambda a: buffer_of.get(id(a), a) if isinstance(a, Tensor) else a)
    return run


def _memory_crosses_a_write(flat, slots, held, written):
    """Whether this call's arguments share memory across a functional write (see `whole_call_runner`): an argument
    at one of ``slots`` with another tensor argument (one passed twice is fine: the guards send ``f(x, x)`` to an
    entry traced that way, whose graph reads one input), with memory ``held`` by the graph, or an inference tensor;
    any tensor argument with a ``written`` buffer's memory."""
    for i in slots:
        mine = flat[i]
        if mine._inference and not GradState.inference or id(memory_owner(mine._data)) in held:
            return True
        for j, a in enumerate(flat):
            if j != i and isinstance(a, Tensor) and a is not mine and np.may_share_memory(mine._data, a._data):
                return True
    if written:
        for a in flat:
            if isinstance(a, Tensor) and type(d := a._data) is np.ndarray and \
                    id(d if d.base is None else memory_owner(d)) in written:
                return True
    return False


def _fetch(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
