"""``Proxy``: the stand-in value symbolic tracing passes through user code, recording each use as a graph node.

Operators record ``call_function`` nodes on ``operator.*``, attribute reads record ``getattr``, method calls record
``call_method``. Python control flow cannot be recorded: ``bool(proxy)`` raises :class:`TraceError`.

A Proxy passed to any public jitorch function (``jitorch.relu``, ``F.gelu``, ``jitorch.special.expit``...) records a
``call_function`` on that function, and one passed to a Tensor method records a ``call_method``, through the
``__jitorch_function__`` protocol (:mod:`jitorch._overrides`), PyTorch's ``__torch_function__``: the function may be
reached through any name or container. ``Proxy(node)`` made outside a trace appends to ``node.graph`` through a
:class:`GraphAppendingTracer`.

>>> import jitorch
>>> from jitorch.fx import symbolic_trace
>>> gm = symbolic_trace(lambda x: (x + 1).relu())
>>> [n.op for n in gm.graph.nodes]
['placeholder', 'call_function', 'call_method', 'output']
"""
from __future__ import annotations

import dis
import operator
import os
import sys

from .. import _overrides
from .node import Node

__all__ = ["Proxy", "Attribute", "TraceError"]  # and GraphAppendingTracer, from tracer.py (see __getattr__)

_FX_DIR = os.path.dirname(os.path.abspath(__file__))
_JITORCH_DIR = os.path.dirname(_FX_DIR)


class TraceError(ValueError):
    """Raised when symbolic tracing meets Python that depends on tensor values (``if``, ``bool``, iteration)."""


def user_frame(frame=None):
    """The innermost frame outside jitorch itself, from ``frame`` (default: the caller's) outwards: the line of user
    code that triggered the current event."""
    frame = sys._getframe(1) if frame is None else frame
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_JITORCH_DIR + os.sep):
        frame = frame.f_back
    return frame


def _where():
    frame = user_frame()
    return f'File "{frame.f_code.co_filename}", line {frame.f_lineno}' if frame is not None else "unknown location"


class Proxy:
    """A traced value: every operation on it appends a node to ``self.tracer.graph`` and returns a new Proxy."""

    def __init__(self, node: Node, tracer=None):
        _count(self)
        if tracer is None:  # made outside a trace: one tracer per graph, so its Proxies can meet in one call
            from .tracer import GraphAppendingTracer

            tracer = node.graph.__dict__.get("_appending_tracer") or GraphAppendingTracer(node.graph)
            node.graph.__dict__["_appending_tracer"] = tracer
        self.node = node
        self.tracer = tracer

    def __del__(self):
        if id(self) in _COUNTED:  # a copy made without __init__ (copy.copy) was never counted
            _COUNTED.discard(id(self))
            _overrides.release()

    @classmethod
    def __jitorch_function__(cls, func, args, kwargs):
        """A public function or Tensor method called with a Proxy among its arguments: record it."""
        tracers = {id(p.tracer): p.tracer for p in _proxies((args, kwargs))}
        if len(tracers) > 1:
            raise RuntimeError(f"{getattr(func, '__name__', func)} was called with Proxies of {len(tracers)} different "
                               f"tracers ({_where()}); values of different traces cannot be mixed")
        tracer = next(iter(tracers.values()))
        method = _overrides.tensor_method_name(func)
        if method is not None:
            return tracer.create_proxy("call_method", method, args, kwargs)
        return tracer.create_proxy("call_function", func, args, kwargs)

    def __repr__(self):
        return f"Proxy({self.node.name})"

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # copy/pickle probes must not become graph nodes
        return Attribute(self, name)

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", "__call__", (self, *args), kwargs)

    def __getitem__(self, index):
        return self.tracer.create_proxy("call_function", operator.getitem, (self, index), {})

    def __bool__(self):
        return self.tracer.to_bool(self)

    def __len__(self):
        raise RuntimeError("'len' is not supported in symbolic tracing by default. If you want this call to be "
                           "recorded, please call jitorch.fx.wrap('len') at module scope")

    def __iter__(self):
        # ``a, b = proxy`` compiles to UNPACK_SEQUENCE n, whose n we read from the caller's bytecode, as torch.fx does.
        frame = sys._getframe(1)
        inst = next((i for i in dis.get_instructions(frame.f_code) if i.offset >= frame.f_lasti), None)
        if inst is not None and inst.opname == "UNPACK_SEQUENCE":
            return (self[k] for k in range(inst.argval))
        return self.tracer.iter(self)

    def keys(self):
        return self.tracer.keys(self)

    def __int__(self):
        raise TraceError(f"int() of a traced value depends on data ({_where()}); use concrete_args or wrap()")

    def __float__(self):
        raise TraceError(f"float() of a traced value depends on data ({_where()}); use concrete_args or wrap()")

    def __index__(self):
        raise TraceError(f"a traced value cannot be used as a Python index ({_where()}); use concrete_args or wrap()")


class Attribute(Proxy):
    """``proxy.name``: becomes ``call_method`` when called, or a ``getattr`` node when used as a value."""

    def __init__(self, root: Proxy, attr: str):
        _count(self)
        self.root, self.attr, self.tracer = root, attr, root.tracer
        self._node = None

    @property
    def node(self):
        # Created lazily: ``x.relu()`` should record one call_method, not a getattr plus a call.
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", getattr, (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", self.attr, (self.root, *args), kwargs)


_COUNTED: set = set()  # ids of the live Proxies counted by _overrides.acquire (__del__ releases each once)


def _count(proxy):
    # While any Proxy is alive, public functions and Tensor methods look for Proxies among their arguments.
    _overrides.acquire()
    _COUNTED.add(id(proxy))


def _proxies(a):
    if isinstance(a, Proxy):
        yield a
    elif isinstance(a, (tuple, list)):
        for x in a:
            yield from _proxies(x)
    elif isinstance(a, dict):
        for x in a.values():
            yield from _proxies(x)


def __getattr__(name):
    if name == "GraphAppendingTracer":  # defined with Tracer, which imports this module
        from .tracer import GraphAppendingTracer

        return GraphAppendingTracer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _install_operators():
    binary = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor", "lshift",
              "rshift"]
    compare = ["lt", "le", "eq", "ne", "gt", "ge"]
    unary = ["neg", "pos", "invert", "abs"]

    def forward(fn):
        return lambda self, other: self.tracer.create_proxy("call_function", fn, (self, other), {})

    def reflected(fn):
        return lambda self, other: self.tracer.create_proxy("call_function", fn, (other, self), {})

    for name in binary + compare:
        fn = getattr(operator, name)
        dunder = name.rstrip("_")
        setattr(Proxy, f"__{dunder}__", forward(fn))
        if name in binary:
            setattr(Proxy, f"__r{dunder}__", reflected(fn))
    for name in unary:
        fn = getattr(operator, name)
        setattr(Proxy, f"__{name}__", lambda self, fn=fn: self.tracer.create_proxy("call_function", fn, (self,), {}))
    Proxy.__hash__ = object.__hash__  # __eq__ records a node; proxies still need to be dict keys


_install_operators()
