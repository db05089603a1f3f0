"""``jitorch.compiler``: ``reset()``, ``explain(fn)(*args)`` and ``config`` (``recompile_limit``).

>>> import jitorch
>>> jitorch.compiler.config.recompile_limit
8
"""
from ._compile.api import config, reset  # noqa: F401
from ._compile.explain import ExplainOutput, explain  # noqa: F401

__all__ = ["config", "explain", "reset", "ExplainOutput"]
