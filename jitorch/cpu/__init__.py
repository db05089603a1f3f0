"""``jitorch.cpu``: CPU graphs, capture and replay of a sequence of CPU ops (issue 6), with PyTorch's graph API.

>>> import jitorch
>>> g = jitorch.cpu.CPUGraph(); x = jitorch.ones(2)
>>> with jitorch.cpu.graph(g):
...     y = x.exp()
>>> g.replay(); y.shape
jitorch.Size([2])
"""
from __future__ import annotations

from .callables import make_graphed_callables
from .graphs import CaptureInvalidated, CPUGraph, graph, graph_pool_handle

__all__ = ["CPUGraph", "CaptureInvalidated", "graph", "graph_pool_handle", "make_graphed_callables"]
