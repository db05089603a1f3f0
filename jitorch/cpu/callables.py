"""``make_graphed_callables`` for forward-only CPU functions: warm up, capture once, then copy-in and replay.

>>> import jitorch
>>> from jitorch.cpu import make_graphed_callables
>>> f = make_graphed_callables(lambda x: x * 2 + 1, (jitorch.zeros(3),))
>>> f(jitorch.tensor([1.0, 2.0, 3.0]))
tensor([3., 5., 7.])
"""
from __future__ import annotations

from .._tensor import Tensor
from ..autograd.grad_mode import no_grad
from .graphs import CPUGraph, graph, graph_pool_handle

__all__ = ["make_graphed_callables"]


def _describe(t):
    return f"shape {list(t.shape)}, dtype {t.dtype}, device {t.device}, contiguous={t.is_contiguous()}"


def _check_input(i, static, new, name):
    """New inputs must match the captured one exactly: replay reads the static buffer's layout."""
    if isinstance(static, Tensor):
        if not isinstance(new, Tensor):
            raise TypeError(f"{name}: argument {i} must be a Tensor like the sample argument, got {type(new).__name__}")
        if (new.shape != static.shape or new.dtype != static.dtype or new.device != static.device
                or new.is_contiguous() != static.is_contiguous()):
            raise RuntimeError(f"{name}: argument {i} does not match the captured input: expected "
                               f"{_describe(static)}, got {_describe(new)}. Graphed callables replay on fixed "
                               "buffers; capture another graph for other shapes or layouts.")
    elif new is not static and new != static:
        raise RuntimeError(f"{name}: non-tensor argument {i} was {static!r} at capture and is baked into the graph; "
                           f"got {new!r}")


class _Graphed:
    """The callable returned for one function: checks and copies the inputs, replays, returns the static outputs."""

    def __init__(self, fn, static_args, cpu_graph, static_out):
        self.fn, self.static_args, self.graph, self.static_out = fn, static_args, cpu_graph, static_out
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *args):
        if len(args) != len(self.static_args):
            raise TypeError(f"{self.__name__}: expected {len(self.static_args)} arguments, got {len(args)}")
        for i, (static, new) in enumerate(zip(self.static_args, args)):
            _check_input(i, static, new, self.__name__)
        with no_grad():
            for static, new in zip(self.static_args, args):
                if isinstance(static, Tensor) and new is not static:
                    static.copy_(new)
        self.graph.replay()
        return self.static_out


def make_graphed_callables(callables, sample_args, num_warmup_iters=3):
    """Capture each callable on its sample arguments; return callables that replay (one, or a tuple like the input).

    Forward only in this version: inputs or parameters that require grad raise at capture (use ``no_grad`` or detach).
    The returned outputs are the graph's static tensors, overwritten by the next call.
    """
    single = callable(callables)
    fns = (callables,) if single else tuple(callables)
    all_args = (sample_args,) if single else tuple(sample_args)
    if len(fns) != len(all_args):
        raise ValueError(f"make_graphed_callables: {len(fns)} callables but {len(all_args)} sample_args tuples")
    pool = graph_pool_handle()
    graphed = []
    for fn, args in zip(fns, all_args):
        args = tuple(args)
        for _ in range(num_warmup_iters):  # as PyTorch: lazy initialisation happens before capture
            fn(*args)
        g = CPUGraph()
        with graph(g, pool=pool):
            out = fn(*args)
        graphed.append(_Graphed(fn, args, g, out))
    return graphed[0] if single else tuple(graphed)
