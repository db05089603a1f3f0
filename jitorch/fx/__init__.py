"""``jitorch.fx``: capture a program as a graph of Python-level calls, transform it, and generate code back.

The workflow of ``torch.fx``: :func:`symbolic_trace` records a :class:`Graph`, passes rewrite it, and
:class:`GraphModule` turns it back into a runnable ``nn.Module``; :class:`Interpreter` runs it node by node.

>>> import jitorch
>>> from jitorch import fx
>>> gm = fx.symbolic_trace(lambda x: jitorch.sigmoid(x) * x)
>>> gm.graph.lint()
>>> fx.Interpreter(gm).run(jitorch.zeros(1))
tensor([0.])
"""
from .graph import Graph
from .graph_module import GraphModule
from .interpreter import Interpreter, Transformer
from .node import Node, has_side_effect, map_arg
from .proxy import Attribute, Proxy, TraceError
from .tracer import PH, Tracer, symbolic_trace, wrap
from .joint import make_joint, make_joint_for_module
from .make_fx import make_fx
from ._fake import DataDependentOutputException, DynamicOutputShapeException
from . import passes, subgraph_rewriter  # noqa: F401
from .subgraph_rewriter import replace_pattern

__all__ = ["DataDependentOutputException", "DynamicOutputShapeException",
           "Graph", "GraphModule", "Interpreter", "Transformer", "Node", "map_arg", "has_side_effect", "Proxy",
           "Attribute", "TraceError",
           "PH", "Tracer", "symbolic_trace", "wrap", "make_fx", "make_joint", "make_joint_for_module", "passes",
           "subgraph_rewriter", "replace_pattern"]
