"""``jitorch.compiler``: ``torch.compiler``'s API over jitorch.compile.

``reset()``, ``explain(fn)(*args)``, ``is_compiling()``, ``config`` (``recompile_limit``), ``disable`` (a function
kept out of compiled graphs), ``set_stance`` (run compiled functions eagerly, or refuse recompiles), and the hints
that change nothing here (``allow_in_graph``, ``assume_constant_result``, ``cudagraph_mark_step_begin``).

>>> import jitorch
>>> jitorch.compiler.config.recompile_limit
8
>>> with jitorch.compiler.set_stance("force_eager"):
...     jitorch.compile(lambda x: x + 1)(jitorch.ones(2))
tensor([2., 2.])
"""
from __future__ import annotations

import functools

from ._compile.api import config, reset  # noqa: F401
from ._compile.explain import ExplainOutput, explain  # noqa: F401
from ._compile.segments import RecordInfo
from ._dispatch import MODES, is_compiling  # noqa: F401

__all__ = ["config", "explain", "reset", "is_compiling", "is_dynamo_compiling", "ExplainOutput", "disable",
           "set_stance", "allow_in_graph", "assume_constant_result", "cudagraph_mark_step_begin"]

is_dynamo_compiling = is_compiling
_STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")


def disable(fn=None, recursive=True, *, reason=None):
    """``fn`` kept out of compiled graphs: a compiled function that calls it runs eagerly (torch breaks the graph
    around the call; jitorch runs that specialization eagerly, which computes the same). Usable as a decorator.

    >>> import jitorch
    >>> @disable
    ... def log(x):
    ...     return x
    >>> f = jitorch.compile(lambda x: log(x) * 2)
    >>> f(jitorch.ones(2)), f.entries[0].break_reason.startswith("calls log")
    (tensor([2., 2.]), True)
    """
    if fn is None:
        return lambda f: disable(f, recursive, reason=reason)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))

    @functools.wraps(fn)
    def eagerly(*args, **kwargs):
        for mode in MODES:
            info = getattr(mode, "info", None)
            if isinstance(info, RecordInfo) and info.hidden_write is None:
                why = f"calls {name}, which torch.compiler.disable keeps out of compiled graphs" + (
                    f" ({reason})" if reason else "")
                if info.fullgraph:
                    raise RuntimeError(f"jitorch.compile(fullgraph=True): the function {why}")
                info.hidden_write = why
        return fn(*args, **kwargs)
    return eagerly


class set_stance:
    """``torch.compiler.set_stance(stance)``: ``"force_eager"`` runs compiled functions eagerly,
    ``"eager_on_recompile"`` runs calls that no compiled entry matches eagerly, ``"fail_on_recompile"`` raises on
    them, ``"default"`` compiles. Takes effect at once; as a context manager or decorator it restores the previous
    stance afterwards."""

    def __init__(self, stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
        if stance not in _STANCES:
            raise ValueError(f"set_stance: unknown stance {stance!r}; expected one of {_STANCES}")
        self.previous, config.stance = config.stance, stance
        self.stance = stance

    def __enter__(self):
        config.stance = self.stance
        return self

    def __exit__(self, *exc):
        config.stance = self.previous

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with set_stance(self.stance):
                return fn(*args, **kwargs)
        config.stance = self.previous  # as a decorator it applies inside the function only
        return wrapped


def allow_in_graph(fn):
    """A hint for TorchDynamo; jitorch's tracer already records every jitorch op a function calls."""
    return fn


def assume_constant_result(fn):
    """A hint for TorchDynamo; jitorch's trace runs Python once, and the plain values a function reads by name are
    guarded (see ``jitorch._compile.named_values``)."""
    return fn


def cudagraph_mark_step_begin():
    """A hint for CUDA-graph trees: jitorch's captured outputs raise when used after a later call rewrote them."""
