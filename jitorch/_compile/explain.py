"""``jitorch.compiler.explain(fn)(*args)``: compile and run once, then report what happened.

>>> import jitorch
>>> report = explain(lambda x: (x * 2).exp() + 1)(jitorch.ones(4))
>>> report.graph_count, report.graph_break_count, report.kernels
(1, 0, [['mul', 'exp', 'add']])
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..nn.modules.module import Module
from .api import CompiledFunction
from .explain_capture import capture_report, reduce_overhead_of
from .guards import call_hooks

__all__ = ["ExplainOutput", "explain"]


@dataclass
class ExplainOutput:
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list = field(default_factory=list)  # "file:line: reason (source line)"
    ops_per_graph: list = field(default_factory=list)  # each graph's primitives (None: not recorded)
    kernel_count: int = 0
    kernels: list = field(default_factory=list)  # the row names each (forward) kernel fuses
    backward_kernels: list = field(default_factory=list)  # a training graph's backward kernels
    ops_fused: int = 0
    guards: list = field(default_factory=list)  # "name == value" strings
    trace_s: float = 0.0
    compile_s: float = 0.0  # LLVM time (kernels already in the cache cost nothing)
    dynamic: list = field(default_factory=list)  # "arg0.shape[0] -> s0" per dynamic specialization
    static_reasons: list = field(default_factory=list)  # why sizes that changed (or dynamic=True) stay specialized
    replay_reasons: list = field(default_factory=list)  # why a graph without breaks runs in replay mode
    number_inputs: list = field(default_factory=list)  # number arguments a graph takes as inputs (number_inputs.py)
    reduce_overhead: list = field(default_factory=list)  # mode="reduce-overhead": capture and replay (or why not)

    def __str__(self):
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}"]
        lines += [f"  break reason: {r}" for r in self.break_reasons]
        lines += [f"  graph {i}: {len(ops)} ops" for i, ops in enumerate(self.ops_per_graph) if ops is not None]
        lines.append(f"Kernel count: {self.kernel_count} ({self.ops_fused} ops fused)")
        lines += [f"  kernel {i}: {' -> '.join(ops)}" for i, ops in enumerate(self.kernels)]
        if self.backward_kernels:
            lines.append(f"Backward kernel count: {len(self.backward_kernels)}")
            lines += [f"  backward kernel {i}: {' -> '.join(ops)}" for i, ops in enumerate(self.backward_kernels)]
        lines += [f"Dynamic sizes: {d} (each >= 2)" for d in self.dynamic]
        lines += [f"Sizes kept static: {r}" for r in self.static_reasons]
        lines += [f"Replay mode: {r}" for r in self.replay_reasons]
        lines += [f"Number input: {n} (any value, no recompile)" for n in self.number_inputs]
        lines += [f"Reduce-overhead: {r}" for r in self.reduce_overhead]
        lines.append(f"Guards ({len(self.guards)}):")
        lines += [f"  {g}" for g in self.guards]
        lines.append(f"Compile time: trace {self.trace_s * 1e3:.1f} ms, LLVM {self.compile_s * 1e3:.1f} ms")
        return "\n".join(lines)


def _graphs(entry):
    """``[op names]`` of each graph an entry compiled: its segments (graph breaks), or its one graph."""
    if entry.replay is not None:
        return [[n.target.__name__ for n, _ in seg.steps] for seg in entry.replay.root.walk() if seg.steps]
    if entry.run is None:
        return []
    if entry.plan is not None:
        return [[n.target.__name__ for n in entry.plan.fwd.gm.graph.nodes if n.op == "call_function"]]
    return [None]  # a graph handed to a callable backend, or compiled whole


def explain(fn, **compile_kwargs):
    """``explain(fn)(*args, **kwargs)`` compiles ``fn`` afresh, runs it once and returns an `ExplainOutput`.

    Each graph break is reported as ``file:line: reason (source line)``; a break on a value read adds the guard
    on that value (``file:line: Tensor.__bool__() == True``) to ``guards``. ``explain(fn, dynamic=True)`` shows
    which sizes became symbols (``dynamic``) or why they stay static (``static_reasons``). ``replay_reasons``: the
    Python state a call changes (``self.feats.append(h)``), for which its Python reruns on every call (side_effects.py).
    A ``mode="reduce-overhead"`` function (or ``explain(fn, mode="reduce-overhead")``) reports the graphs of the
    default mode, as torch's explain does, and in ``reduce_overhead`` whether its steps are captured and replayed.
    """
    compile_kwargs = dict(compile_kwargs)
    mode = compile_kwargs.pop("mode", None)
    captured = reduce_overhead_of(fn)  # the graphs are its function's, compiled in the default mode
    target, module = (captured.fn, captured.module) if captured is not None else \
        (fn, fn if isinstance(fn, Module) else None)

    def run(*args, **kwargs):
        cf = CompiledFunction(target, module=module, **compile_kwargs)
        cf(*args, **kwargs)
        out = ExplainOutput()
        for e in cf.entries + cf.train_entries:
            graphs = _graphs(e)
            out.graph_count += len(graphs)
            out.ops_per_graph += graphs
            for b in e.breaks:
                out.graph_break_count += 1
                out.break_reasons.append(b.describe())
                out.guards += [f"{b.where}: Tensor.{b.name}() == {_key_text(k)}" for k in b.children]
            if e.run is None and not e.breaks and e.break_reason:  # a whole specialization that runs eagerly
                out.graph_break_count += 1
                out.break_reasons.append(e.break_reason)
            out.kernels += CompiledFunction.segment_kernels(e)
            out.backward_kernels += e.backward_kernel_ops
            out.guards = [_guard_text(name, value, e.guards) for name, value in e.guards] + out.guards
            if e.dynamic is not None:
                out.dynamic.append(e.dynamic.describe())
            if e.dynamic_reason is not None:
                out.static_reasons.append(e.dynamic_reason)
            if e.side_effects is not None:
                out.replay_reasons.append(e.side_effects)
            out.number_inputs += [n for n in e.number_inputs if n not in out.number_inputs]
            out.trace_s += e.trace_s
            out.compile_s += e.compile_s
        if not cf.entries and not cf.train_entries and isinstance(fn, Module):
            reason = _eager_module_reason(fn)
            if reason is not None:  # the call ran eagerly before any entry was made: say why
                out.graph_break_count += 1
                out.break_reasons.append(reason)
        out.kernel_count = len(out.kernels)
        out.ops_fused = sum(len(k) for k in out.kernels)
        if captured is not None or mode == "reduce-overhead":
            out.reduce_overhead = capture_report(cf, captured)
        return out
    return run


def _eager_module_reason(module):
    """Why ``compile(module)`` runs every call eagerly, as `CompiledFunction._call` decides, or None."""
    mods = list(module.modules())
    if call_hooks(mods):
        return (f"{type(module).__name__}: its module tree has forward or backward hooks (register_forward_hook, "
                "nn.utils.spectral_norm, ...), which a trace would run once: every call runs eagerly")
    if any(b.is_sparse for b in module.buffers()):
        return f"{type(module).__name__}: a sparse buffer has no strided memory to trace: every call runs eagerly"
    return None


def _guard_text(name, value, guards):
    """``name == value``; a tensor's strides in elements, as torch's (the guards hold NumPy's byte strides), or
    ``strides of memory order ... (copied to ...)`` for an input whose strides changed before (stride_relayout.py)."""
    if name.endswith(".stride") and type(value) is tuple:
        try:
            size = np.dtype(dict(guards).get(name[:-len(".stride")] + ".dtype")).itemsize
            value = tuple(s // size for s in value)
        except TypeError:
            return f"{name} == {value!r} (bytes)"
    return f"{name} == {value!r}"


def _key_text(key):
    if isinstance(key, bool):
        return repr(key)
    kind, value = key
    return repr(float.fromhex(value)) if kind == "float" else str(value)
