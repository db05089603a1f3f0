"""``torch._dynamo``'s surface that training scripts touch: ``config`` knobs, ``reset``, ``explain``, ``disable``,
``mark_dynamic``/``mark_static``, ``allow_in_graph``.

``config.cache_size_limit`` and ``config.recompile_limit`` are jitorch's ``recompile_limit``; the other knobs
(``suppress_errors``, ``automatic_dynamic_shapes``, ...) are accepted and kept, and change nothing here.

>>> import jitorch
>>> jitorch._dynamo.config.cache_size_limit = 16
>>> jitorch.compiler.config.recompile_limit
16
>>> jitorch._dynamo.config.cache_size_limit = 8
"""
from __future__ import annotations

from ._compile.api import config as _compile_config
from .compiler import allow_in_graph, disable, explain, reset  # noqa: F401

__all__ = ["config", "reset", "explain", "disable", "allow_in_graph", "mark_dynamic", "mark_static",
           "maybe_mark_dynamic", "is_compiling"]

_LIMITS = ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit")


class _DynamoConfig:
    suppress_errors = False
    verbose = False
    automatic_dynamic_shapes = True
    assume_static_by_default = True
    capture_scalar_outputs = False
    optimize_ddp = True

    def __getattr__(self, name):
        if name in _LIMITS:
            return _compile_config.recompile_limit
        raise AttributeError(f"torch._dynamo.config has no setting {name!r} in jitorch")

    def __setattr__(self, name, value):
        if name in _LIMITS:
            _compile_config.recompile_limit = int(value)
        else:
            object.__setattr__(self, name, value)


config = _DynamoConfig()


def mark_dynamic(t, index, *, min=None, max=None):
    """A hint that ``t``'s dimension ``index`` varies. jitorch makes a dimension symbolic once its size changes
    (automatic dynamic shapes), so the hint changes nothing."""


mark_static = maybe_mark_dynamic = mark_dynamic


def is_compiling():
    from ._dispatch import is_compiling as compiling
    return compiling()
