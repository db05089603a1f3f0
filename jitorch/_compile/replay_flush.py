"""Flushing a `replay.Replay`: the deferred ops of a segment computed by one compiled graph.

At a break, on a read of a deferred tensor's values, or when the call leaves the record, `_Flush.flush` computes every
pending lazy tensor that is still alive: one `CompiledGraph` (`_compile_outputs`: only the requested values' ancestors,
in-place steps and random draws) per segment, set of requested values and cut point, cached on the segment; under
training, `segment_training.SegmentRun` for values that require grad. Deferred buffer writes are stored into the
buffer's own memory, last write last.

>>> import jitorch
>>> from jitorch._compile.segments import record
>>> from jitorch._compile.replay import Replay
>>> def f(x):
...     y = x * 2
...     return y + 1 if y.sum() > 0 else y
>>> run = Replay(record(f, (jitorch.ones(2),), {}).root, budget=lambda: True)
>>> run.call(f, (jitorch.ones(2),), {}), len(run.kernel_log)  # a compiled graph on each side of the break
(tensor([3., 3.]), 2)
>>> run.call(f, (jitorch.ones(2),), {}), len(run.kernel_log)  # cached on the segments
(tensor([3., 3.]), 2)
"""
from __future__ import annotations

from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..nn.modules.module import Module
from .backend import CompiledGraph
from .functionalize import is_random
from .lazy import LazyTensor, realize
from .segment_training import SegmentRun
from .training import Unsupported


def _compile_outputs(seg, nodes, upto):
    """A `CompiledGraph` of ``seg`` computing ``nodes``: only their ancestors and the in-place steps before
    ``upto`` (a write into a buffer that a requested view shares must still happen)."""
    needed, stack = set(), list(nodes)
    # Random rows draw even when nothing reads their values: the generator advances as in eager mode.
    stack += [n for n, _ in seg.steps[:upto] if getattr(n.target, "inplace", False) or is_random(n)]
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(n.all_input_nodes)
    graph, env = Graph(), {}
    for n in seg.graph.nodes:
        if n.op == "placeholder" or n in needed:
            env[n] = graph.node_copy(n, env.__getitem__)
    graph.output(tuple(env[n] for n in nodes))
    return CompiledGraph(GraphModule(Module(), graph))


class _Flush:
    """The flushing half of `replay.Replay` (a base class of it)."""

    def materialize(self, arr, why="a deferred tensor's values were read outside a recorded break"):
        """A `LazyArray`'s values were needed outside a break: compute what is pending; the rest runs eagerly."""
        if self.live and arr.owner is self:
            self._bail(why)
        else:
            self.flush(upto=self.pos)
        if arr.real is None:
            raise RuntimeError("jitorch.compile: internal error: a deferred tensor outlived its graph")

    def flush(self, upto=None):
        """Compute every pending lazy tensor that is still alive with one compiled graph of the segment (under
        training, the compiled stages of `SegmentRun` when some of them require grad)."""
        pending, self.pending = self.pending, []
        live = [(a, t) for a, t in ((ra(), rt()) for ra, rt in pending) if a is not None and a.real is None]
        seg = self.seg
        upto = len(seg.steps) if upto is None else upto
        # Deferred draws whose values all died still advance the generator, as eager's did.
        if live or pending and any(is_random(n) for n, _ in seg.steps[:upto]):
            nodes = list(dict.fromkeys(a.node for a, _ in live))
            flat = [self.bound.get(p) for p in seg.placeholders]
            key = (tuple(n.name for n in nodes), upto)
            if self.training and any(n.meta.get("rg") for n in nodes):
                key += (tuple(None if v is None else v._requires_grad for v in flat),)
            graph = seg.compiled.get(key)
            if graph is None:
                graph = seg.compiled[key] = self._plan(seg, nodes, upto, len(key) == 3)
                self.kernel_log.append((seg, graph))
            outs = self._run(graph, flat)
            index = {n: i for i, n in enumerate(nodes)}
            writes = []
            for a, _ in live:
                out = outs[index[a.node]]
                if out._data.shape != a.shape or out._data.dtype != a.dtype:
                    # Python already saw the recorded geometry: refuse rather than continue with a wrong shape.
                    raise RuntimeError(f"jitorch.compile: {a.node.target.__name__}() produced shape "
                                       f"{tuple(out._data.shape)} but the recorded graph has {a.shape}; its output "
                                       "shape depends on tensor values. Run this function without jitorch.compile.")
                if a in self.written:
                    writes.append((a, out))
                else:
                    a.set_real(out._data, out)
            order = {n: i for i, n in enumerate(seg.graph.nodes)}
            for a, out in sorted(writes, key=lambda w: order[w[0].node]):  # the last write's values stay
                buf, memory = self.written[a]
                memory[...] = out._data
                a.set_real(memory)
                buf._bump_version()
            own = {id(a.source): t for a, t in live if type(t) is LazyTensor and "_lazy_alias" not in t.__dict__}
            for _, t in live:
                if t is not None:
                    realize(t)
            for t in own.values():
                # A view of another live value: its base is the user's tensor (the one in-place writes rebase),
                # not the graph's copy of it.
                base = t.__dict__.get("_base")
                if base is not None and id(base) in own:
                    t._base = own[id(base)]

    @staticmethod
    def _plan(seg, nodes, upto, training):
        if not training:
            return _compile_outputs(seg, nodes, upto)
        try:
            return SegmentRun(seg, nodes, upto)
        except Unsupported as err:  # a training replay never defers in-place ops, so this is a bug, not a fallback
            raise RuntimeError(f"jitorch.compile: internal error: {err}") from err
