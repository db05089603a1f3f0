"""Symbolic tracing: run user code on :class:`Proxy` inputs and record what it does into a :class:`Graph`.

jitorch has no ``__torch_function__``, so while a trace runs the tracer *patches* the entry points a Proxy can reach:
the functions of ``jitorch``, ``jitorch.nn.functional`` and ``jitorch.linalg`` (and the same objects bound in the
traced code's globals) record a ``call_function`` when any argument is a Proxy; ``Module.__call__`` routes through
:meth:`Tracer.call_module`; ``Module.__getattr__`` turns parameters and buffers into ``get_attr`` nodes; Tensor
operators defer to the Proxy. Everything is restored when the trace ends, even on error.

>>> import jitorch
>>> from jitorch.fx import symbolic_trace
>>> def f(x, y):
...     return jitorch.relu(x @ y.t()) * 2
>>> gm = symbolic_trace(f)
>>> print(gm.code.strip())
def forward(self, x, y):
    t = y.t();  y = None
    matmul = x @ t;  x = t = None
    relu = jitorch.relu(matmul);  matmul = None
    mul = relu * 2;  relu = None
    return mul
"""
from __future__ import annotations

import builtins
import functools
import inspect
import math
import sys
import types

from ._patching import CURRENT, FLAT_ORDER, Patcher, defer_to_proxy, recording, with_flat_signature
from .graph import Graph
from .proxy import Attribute, Proxy, TraceError, _where, user_frame

__all__ = ["Tracer", "symbolic_trace", "wrap", "PH"]

_NAMESPACES = ("jitorch", "jitorch.nn.functional", "jitorch.linalg")
# Functions that must keep running eagerly even when handed a Proxy (they inspect types, not values).
_NEVER_RECORD = {"is_tensor", "is_floating_point", "is_complex", "is_grad_enabled", "get_default_dtype", "typename"}
_TENSOR_OPERATORS = [f"__{p}{n}__" for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and",
                                              "or", "xor", "lshift", "rshift") for p in ("", "r")]
_TENSOR_OPERATORS += ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"]
_WRAPPED: list[tuple[dict, str]] = []  # (module globals, function name) registered by ``wrap``


class _PlaceholderMarker:
    def __repr__(self):
        return "PH"


PH = _PlaceholderMarker()  # in ``concrete_args``: keep this argument symbolic


def wrap(fn_or_name):
    """Record calls to a module-level function as one opaque ``call_function`` instead of tracing into it.

    Call it at module scope, with the function or its name (``wrap("len")`` also works for builtins).

    >>> import jitorch
    >>> from jitorch.fx import symbolic_trace, wrap
    >>> def scale(x, k):
    ...     return x * k if k > 0 else x   # Python control flow: cannot be traced through
    >>> _ = wrap("scale")
    >>> [n.op for n in symbolic_trace(lambda x: scale(x, 2)).graph.nodes]
    ['placeholder', 'call_function', 'output']
    """
    frame = sys._getframe(1)
    name = fn_or_name if isinstance(fn_or_name, str) else fn_or_name.__name__
    _WRAPPED.append((frame.f_globals, name))
    return fn_or_name


class Tracer:
    """Turns a module or function into a :class:`Graph`. Override :meth:`is_leaf_module` to choose which submodules
    stay opaque ``call_module`` nodes (default: the layers of ``jitorch.nn``, but not ``Sequential``).

    >>> from jitorch import nn
    >>> from jitorch.fx import Tracer
    >>> class Everything(Tracer):
    ...     def is_leaf_module(self, m, qualname):
    ...         return False
    """

    def __init__(self, autowrap_modules=(math,), autowrap_functions=()):
        # Functions of these modules (``math.sqrt``...) and these functions are recorded as ``call_function`` when
        # called with a Proxy, instead of running (``math.sqrt(proxy)`` would otherwise need ``float(proxy)``).
        self._autowrap_modules = tuple(autowrap_modules)
        self._autowrap_functions = tuple(autowrap_functions)
        self.graph = None
        self.root = None
        self._module_paths, self._tensor_names, self._attr_nodes = {}, {}, {}
        self._constant_count, self._keepalive = 0, []

    # -- hooks users override ----------------------------------------------------------------------------------------
    def is_leaf_module(self, m, module_qualified_name: str) -> bool:
        from ..nn.modules.container import Sequential

        module = type(m).__module__
        return (module == "jitorch.nn" or module.startswith("jitorch.nn.")) and not isinstance(m, Sequential)

    def call_module(self, m, forward, args, kwargs):
        """Record ``m`` as a ``call_module`` node if it is a leaf, otherwise trace through ``forward``."""
        path = self.path_of_module(m)
        if self.is_leaf_module(m, path):
            return self.create_proxy("call_module", path, args, kwargs)
        self._patcher.patch_globals(getattr(type(m).forward, "__globals__", {}))
        return forward(*args, **kwargs)

    def to_bool(self, obj: Proxy):
        frame = user_frame()
        where = "an unknown location"
        if frame is not None:
            line = _source_line(frame.f_code.co_filename, frame.f_lineno)
            where = f'File "{frame.f_code.co_filename}", line {frame.f_lineno}' + (f": {line}" if line else "")
        raise TraceError(
            f"symbolically traced variables cannot be used as inputs to control flow\n  at {where}\n"
            f"The condition depends on the traced value {obj.node.name!r}. Either pass concrete_args to specialize the "
            "argument it depends on, move the branch into a function marked with jitorch.fx.wrap (or a leaf "
            "module), or use jitorch.compile, which falls back to eager execution for data-dependent code.")

    def iter(self, obj: Proxy):
        """Called when a Proxy is iterated other than by unpacking into a fixed number of names; raises TraceError."""
        raise TraceError("Proxy object cannot be iterated. This can be attempted when the Proxy is used in a loop or "
                         f"as a *args or **kwargs function argument ({_where()}). Unpack it into a fixed number of "
                         "names, pass concrete_args, or make the code a leaf module or a jitorch.fx.wrap'ed function.")

    def keys(self, obj: Proxy):
        """Called for ``**proxy``; the default records ``proxy.keys()``, as torch.fx does."""
        return Attribute(obj, "keys")()

    # -- recording ---------------------------------------------------------------------------------------------------
    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        node = self.graph.create_node(kind, target, args, kwargs, name, type_expr)
        frame = user_frame()
        if frame is not None:
            node.meta["stack_trace"] = f'File "{frame.f_code.co_filename}", line {frame.f_lineno}'
        return node

    def proxy(self, node) -> Proxy:
        return Proxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None) -> Proxy:
        """Record one node whose inputs are ``args``/``kwargs`` (Proxies become their nodes) and return its Proxy."""
        args_, kwargs_ = self.create_arg(tuple(args)), self.create_arg(dict(kwargs))
        return self.proxy(self.create_node(kind, target, args_, kwargs_, name, type_expr))

    def create_arg(self, a):
        """Map a Python value to a node argument: Proxies to nodes, module tensors to ``get_attr`` nodes."""
        from .._tensor import Tensor
        from ..nn.modules.module import Module

        if isinstance(a, Proxy):
            return a.node
        if isinstance(a, tuple):
            items = [self.create_arg(x) for x in a]
            return type(a)(*items) if hasattr(a, "_fields") else tuple(items)
        if isinstance(a, list):
            return [self.create_arg(x) for x in a]
        if isinstance(a, dict):
            return {k: self.create_arg(v) for k, v in a.items()}
        if isinstance(a, slice):
            return slice(self.create_arg(a.start), self.create_arg(a.stop), self.create_arg(a.step))
        if isinstance(a, Tensor):
            return self._tensor_attr(a)
        if isinstance(a, Module):
            return self.graph.get_attr(self.path_of_module(a))
        return a

    def _tensor_attr(self, t):
        name = self._tensor_names.get(id(t))
        if name is None:  # a tensor made in user code: store it on the root as a constant
            name = f"_tensor_constant{self._constant_count}"
            self._constant_count += 1
            self.root.__dict__[name] = t
            self._tensor_names[id(t)] = name
            self._keepalive.append(t)
        if name not in self._attr_nodes:
            self._attr_nodes[name] = self.create_node("get_attr", name, (), {})
        return self._attr_nodes[name]

    def path_of_module(self, mod) -> str:
        path = self._module_paths.get(id(mod))
        if path is None:
            raise NameError(f"module {type(mod).__name__} is not installed as a submodule of the traced root")
        return path

    # -- the trace ---------------------------------------------------------------------------------------------------
    def trace(self, root, concrete_args: dict | None = None) -> Graph:
        """Run ``root`` (a Module or a function) on Proxies and return the recorded Graph."""
        from ..nn.modules.module import Module

        if isinstance(root, Module):
            self.root, fn, skip = root, type(root).forward, 1
        else:
            self.root, fn, skip = Module(), root, 0
        self.graph = Graph()
        self._module_paths = {id(m): name for name, m in self.root.named_modules()}
        self._tensor_names = {id(t): n for n, t in (*self.root.named_parameters(), *self.root.named_buffers())}
        self._attr_nodes, self._constant_count, self._keepalive = {}, 0, []
        fn, args, kwargs = self._placeholders(fn, skip, concrete_args or {})
        if skip:
            args.insert(0, root)
        self._patcher = Patcher()
        CURRENT.append(self)
        try:
            self._patch_everything(fn)
            result = fn(*args, **kwargs)
            self.create_node("output", "output", (self.create_arg(result),), {})
        finally:
            CURRENT.pop()
            self._patcher.restore()
        return self.graph

    def _placeholders(self, fn, skip, concrete_args):
        """One placeholder per parameter of ``fn`` (after ``skip``); returns the function to call and its inputs.

        Keyword-only parameters are passed by keyword. ``*args`` and ``**kwargs`` each become one placeholder (target
        ``"*args"`` / ``"**kwargs"``) whose Proxy stands for the whole tuple or dict; to bind a Proxy to them, ``fn`` is
        called through a copy whose code treats them as ordinary positional parameters.
        """
        params = list(inspect.signature(fn).parameters.values())[skip:]
        unknown = set(concrete_args) - {p.name for p in params}
        if unknown:
            raise TraceError(f"concrete_args names {sorted(unknown)}, which are not parameters of {fn.__name__}")
        star = [p for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        args, kwargs = [], {}
        for p in params:
            value = concrete_args.get(p.name, PH)
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                if value is not PH:
                    raise TraceError(f"concrete_args cannot specialize {p} of {fn.__name__}: bind it with "
                                     "functools.partial, or give the function named parameters")
                prefix = "*" if p.kind is p.VAR_POSITIONAL else "**"
                proxy = self.proxy(self.graph.create_node("placeholder", prefix + p.name, name=p.name))
            elif value is PH:
                proxy = self.proxy(self.graph.placeholder(p.name, default_value=p.default))
            else:
                # The input stays in the signature (callers may still pass it) but the graph is specialized to it.
                self.graph.placeholder(p.name, default_value=value)
                proxy = value
            if p.kind is p.KEYWORD_ONLY and not star:
                kwargs[p.name] = proxy
            else:
                args.append((FLAT_ORDER[p.kind], len(args), proxy))
        args = [a for *_, a in sorted(args, key=lambda t: t[:2])]  # the flat code's order: see with_flat_signature
        if star:
            fn = with_flat_signature(fn)
        return fn, args, kwargs

    def _patch_everything(self, fn):
        from .._tensor import Tensor
        from ..nn.modules.module import Module

        patcher, tracer = self._patcher, self
        for modname in _NAMESPACES:
            __import__(modname)
            module = sys.modules[modname]
            for name, value in list(vars(module).items()):
                if isinstance(value, types.FunctionType) and not name.startswith("_") and name not in _NEVER_RECORD:
                    wrapper = patcher.by_original.get(value) or recording(value)
                    patcher.by_original[value] = wrapper
                    patcher.setattr(module, name, wrapper)
        for g, name in _WRAPPED:
            original = g.get(name, getattr(builtins, name, None))
            if original is not None:
                patcher.setitem(g, name, recording(original))
        for module in self._autowrap_modules:
            for name, value in list(vars(module).items()):
                if callable(value) and not isinstance(value, type) and not name.startswith("_"):
                    wrapper = patcher.by_original.get(value) or recording(value)
                    patcher.by_original[value] = wrapper
                    patcher.setattr(module, name, wrapper)
        for f in self._autowrap_functions:
            patcher.by_original[f] = recording(f)
        patcher.patch_globals(getattr(fn, "__globals__", {}))

        original_call, original_getattr = Module.__call__, Module.__getattr__

        def module_call(mod, *args, **kwargs):
            forward = functools.partial(original_call, mod)
            return tracer.call_module(mod, forward, args, kwargs)

        def module_getattr(mod, name):
            value = original_getattr(mod, name)
            if isinstance(value, Tensor) and id(value) in tracer._tensor_names:
                return tracer.proxy(tracer._tensor_attr(value))
            return value

        patcher.setattr(Module, "__call__", module_call)
        patcher.setattr(Module, "__getattr__", module_getattr)
        for name in _TENSOR_OPERATORS:
            method = getattr(Tensor, name, None)
            if method is not None:
                patcher.setattr(Tensor, name, defer_to_proxy(method))


def _source_line(filename, lineno):
    import linecache

    return linecache.getline(filename, lineno).strip()


def symbolic_trace(root, concrete_args: dict | None = None):
    """Trace ``root`` (an ``nn.Module`` or function) into a :class:`~jitorch.fx.GraphModule`.

    ``concrete_args`` maps parameter names to fixed values, specializing the graph (for flags that steer ``if``).

    >>> import jitorch
    >>> from jitorch import nn
    >>> from jitorch.fx import symbolic_trace
    >>> def f(x, negate):
    ...     return -x if negate else x + 1
    >>> gm = symbolic_trace(f, concrete_args={"negate": True})
    >>> gm(jitorch.tensor([1.0, 2.0]))
    tensor([-1., -2.])
    """
    from ..nn.modules.module import Module
    from .graph_module import GraphModule

    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    name = type(root).__name__ if isinstance(root, Module) else getattr(root, "__name__", "GraphModule")
    if not name.isidentifier():
        name = "GraphModule"
    return GraphModule(tracer.root, graph, name)
