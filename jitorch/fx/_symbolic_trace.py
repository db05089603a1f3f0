"""torch's import path for symbolic tracing, ``torch.fx._symbolic_trace``: ``PH``, ``Tracer``, ``symbolic_trace``,
``wrap``, ``is_fx_tracing`` (defined in :mod:`jitorch.fx.tracer` and :mod:`jitorch.fx._concrete`).

>>> from jitorch.fx._symbolic_trace import PH
>>> PH
PH
"""
from ._concrete import PH
from .tracer import GraphAppendingTracer, Tracer, is_fx_tracing, symbolic_trace, wrap

__all__ = ["PH", "Tracer", "GraphAppendingTracer", "symbolic_trace", "wrap", "is_fx_tracing",
           "is_fx_symbolic_tracing"]

is_fx_symbolic_tracing = is_fx_tracing  # torch's differ only under torch.compile
