"""``jitorch.compiler``: ``reset()``, ``explain(fn)(*args)``, ``is_compiling()`` and ``config`` (``recompile_limit``).

>>> import jitorch
>>> jitorch.compiler.config.recompile_limit
8
"""
from ._compile.api import config, reset  # noqa: F401
from ._compile.explain import ExplainOutput, explain  # noqa: F401
from ._dispatch import is_compiling  # noqa: F401

__all__ = ["config", "explain", "reset", "is_compiling", "ExplainOutput"]
