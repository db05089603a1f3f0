"""The glue between tensors and the code generator: ``jitorch.compile`` and ``jitorch.compiler``.

Modules: trace.py (record primitives with shapes), fusion.py (graph -> fused groups), lower.py (group -> IR ->
LLVM kernel), backend.py (run a partitioned graph), guards.py, api.py (`CompiledFunction`), entry.py (``compile``),
explain.py.
"""
from .api import CompiledFunction, OptimizedModule, config, reset  # noqa: F401
from .entry import compile  # noqa: F401
from .explain import ExplainOutput, explain  # noqa: F401
from .. import compiler, _dynamo  # noqa: F401,E402 - makes them attributes of the package
