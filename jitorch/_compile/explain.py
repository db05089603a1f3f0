"""``jitorch.compiler.explain(fn)(*args)``: compile and run once, then report what happened.

>>> import jitorch
>>> report = explain(lambda x: (x * 2).exp().sum())(jitorch.ones(4))
>>> report.graph_count, report.kernel_count, report.kernels
(1, 1, [['mul', 'exp']])
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..nn.modules.module import Module
from .api import CompiledFunction

__all__ = ["ExplainOutput", "explain"]


@dataclass
class ExplainOutput:
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list = field(default_factory=list)
    kernel_count: int = 0
    kernels: list = field(default_factory=list)  # the row names each (forward) kernel fuses
    backward_kernels: list = field(default_factory=list)  # a training graph's backward kernels
    ops_fused: int = 0
    guards: list = field(default_factory=list)  # "name == value" strings
    trace_s: float = 0.0
    compile_s: float = 0.0  # LLVM time (kernels already in the cache cost nothing)

    def __str__(self):
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}"]
        lines += [f"  break reason: {r}" for r in self.break_reasons]
        lines.append(f"Kernel count: {self.kernel_count} ({self.ops_fused} ops fused)")
        lines += [f"  kernel {i}: {' -> '.join(ops)}" for i, ops in enumerate(self.kernels)]
        if self.backward_kernels:
            lines.append(f"Backward kernel count: {len(self.backward_kernels)}")
            lines += [f"  backward kernel {i}: {' -> '.join(ops)}" for i, ops in enumerate(self.backward_kernels)]
        lines.append(f"Guards ({len(self.guards)}):")
        lines += [f"  {g}" for g in self.guards]
        lines.append(f"Compile time: trace {self.trace_s * 1e3:.1f} ms, LLVM {self.compile_s * 1e3:.1f} ms")
        return "\n".join(lines)


def explain(fn, **compile_kwargs):
    """``explain(fn)(*args, **kwargs)`` compiles ``fn`` afresh, runs it once and returns an `ExplainOutput`."""
    def run(*args, **kwargs):
        cf = CompiledFunction(fn, module=fn if isinstance(fn, Module) else None, **compile_kwargs)
        cf(*args, **kwargs)
        out = ExplainOutput()
        for e in cf.entries + cf.train_entries:
            if e.break_reason is not None:
                out.graph_break_count += 1
                out.break_reasons.append(e.break_reason)
            else:
                out.graph_count += 1
            out.kernels += e.kernel_ops
            out.backward_kernels += e.backward_kernel_ops
            out.guards += [f"{name} == {value!r}" for name, value in e.guards]
            out.trace_s += e.trace_s
            out.compile_s += e.compile_s
        out.kernel_count = len(out.kernels)
        out.ops_fused = sum(len(k) for k in out.kernels)
        return out
    return run
