"""torch's import path for symbolic tracing, ``torch.fx._symbolic_trace``: ``PH``, ``Tracer``, ``symbolic_trace``,
``wrap`` (defined in :mod:`jitorch.fx.tracer` and :mod:`jitorch.fx._concrete`).

>>> from jitorch.fx._symbolic_trace import PH
>>> PH
PH
"""
from ._concrete import PH
from .tracer import GraphAppendingTracer, Tracer, symbolic_trace, wrap

__all__ = ["PH", "Tracer", "GraphAppendingTracer", "symbolic_trace", "wrap"]
