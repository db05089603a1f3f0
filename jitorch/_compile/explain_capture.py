"""What ``explain`` says about ``mode="reduce-overhead"``: the graphs are the default mode's (torch's explain reports
those for every mode), and whether the call's steps are captured as a CPU graph and replayed, from the default
compile's findings on this call and the compiled function's own state when it ran before.

>>> import jitorch
>>> f = jitorch.compile(lambda x: (x * 2).relu(), mode="reduce-overhead")
>>> for _ in range(3):
...     _ = f(jitorch.ones(3))
>>> report = jitorch.compiler.explain(f)(jitorch.ones(3))
>>> report.graph_count, report.reduce_overhead[-1]
(1, 'so far: 3 calls, captured (1 capture), replayed 1 time')
"""
from __future__ import annotations

__all__ = ["reduce_overhead_of", "capture_report"]

PLAN = ("the first call runs eagerly (a warm-up), the second captures the call's tensor work as one CPU graph, "
        "later calls replay it (new inputs by pointer, outputs copied); a changed argument, attribute or "
        "optimizer hyperparameter captures again")


def reduce_overhead_of(fn):
    """The `ReduceOverheadFunction` behind ``fn`` (itself, or a compiled module's), or None."""
    from .optimized_module import OptimizedModule
    from .reduce_overhead import ReduceOverheadFunction

    if isinstance(fn, OptimizedModule):
        fn = fn.__dict__.get("_compiled_call", fn)
    return fn if isinstance(fn, ReduceOverheadFunction) else None


def capture_report(cf, captured):
    """Lines on capture and replay: the plan, what this call's default compile found that keeps it uncaptured
    (``cf``: the explain's `CompiledFunction`), and ``captured``'s history (a `ReduceOverheadFunction`, or None)."""
    from . import reduce_overhead as ro

    lines = [PLAN]
    entries = cf.entries + cf.train_entries
    if cf.train_entries:
        lines.append(f"not captured: {ro._AUTOGRAD}")
    elif any(e.side_effects for e in entries):
        effects = "; ".join(e.side_effects for e in entries if e.side_effects)
        lines.append(f"not captured: {ro._SIDE_EFFECTS.format(effects)}")
    elif any(e.breaks for e in entries):
        lines.append(f"not captured: {ro._HOST_READS}")
    elif any(e.run is None for e in entries):
        lines.append("not captured: the call runs eagerly (" + "; ".join(
            e.break_reason for e in entries if e.run is None and e.break_reason) + ")")
    if captured is not None and captured.calls:
        state = "captured" if captured.graph is not None else "not captured"
        if captured.fallback_reason:
            state += f" ({captured.fallback_reason})"
        captures = captured.recaptures + (captured.graph is not None)
        if captures:
            state += f" ({captures} capture{'s' * (captures != 1)})"
        replays = max(captured.generation - captures, 0)  # ``generation`` counts the capture's own run too
        lines.append(f"so far: {captured.calls} call{'s' * (captured.calls != 1)}, {state}, replayed {replays} "
                     f"time{'s' * (replays != 1)}")
    return lines
