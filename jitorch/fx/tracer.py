"""Symbolic tracing: run user code on :class:`Proxy` inputs and record what it does into a :class:`Graph`.

Public jitorch functions and Tensor methods record themselves when handed a Proxy (the ``__jitorch_function__``
protocol of :mod:`jitorch._overrides`). What remains is patched while a trace runs, as torch.fx does:
``Module.__call__`` routes through :meth:`Tracer.call_module`; ``Module.__getattr__`` turns parameters and buffers
into ``get_attr`` nodes (through :meth:`Tracer.getattr`); functions named by :func:`wrap` and those of
``autowrap_modules`` (``math``) record a ``call_function``. Everything is restored when the trace ends, even on error.

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
import math
import sys

from ._concrete import PH, placeholders
from ._patching import Patcher, recording
from .graph import Graph
from .proxy import Attribute, Proxy, TraceError, _where, user_frame

__all__ = ["Tracer", "GraphAppendingTracer", "ParameterProxy", "symbolic_trace", "wrap", "PH"]

_WRAPPED: list[tuple[dict, str]] = []  # (module globals, function name) registered by ``wrap``
_TRACING = [False]  # whether a Tracer.trace is running: what ``fx._symbolic_trace.is_fx_tracing()`` reports


def is_fx_tracing() -> bool:
    """Whether symbolic tracing is running, for code that must skip checks a Proxy cannot take."""
    return _TRACING[0]


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
    stay opaque ``call_module`` nodes (default: the layers of ``jitorch.nn``, but not ``Sequential``), and the other
    hooks (:meth:`create_proxy`, :meth:`create_node`, :meth:`getattr`, :meth:`call_module`) to observe or change
    what is recorded: every node, placeholders and ``get_attr`` included, goes through them.

    With ``param_shapes_constant=True``, the shape of a parameter (``w.shape``, ``w.size()``, ``w.dim()``) is read as
    a constant instead of recorded.

    >>> from jitorch import nn
    >>> from jitorch.fx import Tracer
    >>> class Everything(Tracer):
    ...     def is_leaf_module(self, m, qualname):
    ...         return False
    """

    def __init__(self, autowrap_modules=(math,), autowrap_functions=(), param_shapes_constant=False):
        # Functions of these modules (``math.sqrt``...) and these functions are recorded as ``call_function`` when
        # called with a Proxy, instead of running (``math.sqrt(proxy)`` would otherwise need ``float(proxy)``).
        self._autowrap_modules = tuple(autowrap_modules)
        self._autowrap_functions = tuple(autowrap_functions)
        self.param_shapes_constant = param_shapes_constant
        self.graph = None
        self.root = None
        self._module_paths, self._tensor_names, self._attr_nodes = {}, {}, {}
        self._constant_count, self._keepalive = 0, []
        # The modules whose forward is running, innermost last: ``{key: (qualified name, type)}``, copied into each
        # node's ``meta["nn_module_stack"]`` (torch's format; a module's second call has the key ``name@1``).
        self.module_stack, self.num_calls = {}, {}

    # -- hooks users override ----------------------------------------------------------------------------------------
    def is_leaf_module(self, m, module_qualified_name: str) -> bool:
        from ..nn.modules.container import Sequential

        module = type(m).__module__
        return (module == "jitorch.nn" or module.startswith("jitorch.nn.")) and not isinstance(m, Sequential)

    def call_module(self, m, forward, args, kwargs):
        """Record ``m`` as a ``call_module`` node if it is a leaf, otherwise trace through ``forward``."""
        path = self.path_of_module(m)
        calls = self.num_calls.get(path, 0)
        key = f"{path}@{calls}" if calls else path
        self.module_stack[key] = (path, type(m))
        self.num_calls[path] = calls + 1
        try:
            if self.is_leaf_module(m, path):
                return self.create_proxy("call_module", path, args, kwargs)
            self._patcher.patch_globals(getattr(type(m).forward, "__globals__", {}))
            return forward(*args, **kwargs)
        finally:
            self.module_stack.pop(key, None)

    def getattr(self, attr: str, attr_val, parameter_proxy_cache: dict):
        """What traced code gets for ``module.attr`` (a submodule, parameter or buffer read through
        ``Module.__getattr__``): a Proxy of a ``get_attr`` node for the root's parameters and buffers, made once per
        name and kept in ``parameter_proxy_cache``; ``attr_val`` itself otherwise."""
        from .._tensor import Tensor
        from ..nn.parameter import Parameter

        if not isinstance(attr_val, Tensor) or id(attr_val) not in self._tensor_names:
            return attr_val
        name = self._tensor_names[id(attr_val)]
        if name not in parameter_proxy_cache:
            node = self._tensor_attr(attr_val)
            constant_shape = self.param_shapes_constant and isinstance(attr_val, Parameter)
            parameter_proxy_cache[name] = (ParameterProxy(node, self, attr_val) if constant_shape
                                           else self.proxy(node))
        return parameter_proxy_cache[name]

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
        if frame is not None and kind not in ("placeholder", "output"):
            node.meta["stack_trace"] = f'File "{frame.f_code.co_filename}", line {frame.f_lineno}'
        if self.module_stack:
            node.meta["nn_module_stack"] = dict(self.module_stack)
        return node

    def proxy(self, node) -> Proxy:
        return Proxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None) -> Proxy:
        """Record one node whose inputs are ``args``/``kwargs`` (Proxies become their nodes) and return its Proxy,
        made by ``proxy_factory_fn(node)`` when given."""
        args_, kwargs_ = self.create_arg(tuple(args)), self.create_arg(dict(kwargs))
        node = self.create_node(kind, target, args_, kwargs_, name, type_expr)
        return proxy_factory_fn(node) if proxy_factory_fn is not None else self.proxy(node)

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
        """The ``get_attr`` node of a tensor: a parameter or buffer of the root, or a constant stored on it."""
        name = self._tensor_names.get(id(t))
        if name is None:  # a tensor made in user code: store it on the root as a constant
            if self.root is None:
                raise TraceError(f"a tensor of shape {tuple(t.shape)} was passed with a Proxy ({_where()}), but this "
                                 "tracer has no root module to keep it on; register it on the module and read it "
                                 "with graph.get_attr")
            name = f"_tensor_constant{self._constant_count}"
            self._constant_count += 1
            self.root.__dict__[name] = t
            self._tensor_names[id(t)] = name
            self._keepalive.append(t)
        if name not in self._attr_nodes:
            self._attr_nodes[name] = self.create_proxy("get_attr", name, (), {}).node
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
        self.graph = Graph(tracer_cls=type(self))
        self._module_paths = {id(m): name for name, m in self.root.named_modules()}
        self._tensor_names = {id(t): n for n, t in (*self.root.named_parameters(), *self.root.named_buffers())}
        self._attr_nodes, self._constant_count, self._keepalive = {}, 0, []
        self.module_stack, self.num_calls = {}, {}
        self._patcher = Patcher()
        was_tracing, _TRACING[0] = _TRACING[0], True
        try:
            fn, args, kwargs = placeholders(self, fn, skip, concrete_args or {})
            if skip:
                args.insert(0, root)
            self._patch_everything(fn)
            result = fn(*args, **kwargs)
            self.create_node("output", "output", (self.create_arg(result),), {})
        finally:
            _TRACING[0] = was_tracing
            self._patcher.restore()
        return self.graph

    def _patch_everything(self, fn):
        """What a Proxy cannot take over by itself: functions named by ``wrap``, those of the autowrap modules
        (``math.sqrt`` is no jitorch function), and the Module attribute and call paths."""
        from ..nn.modules.module import Module

        patcher, tracer = self._patcher, self
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
        parameter_proxy_cache: dict = {}

        def module_call(mod, *args, **kwargs):
            forward = functools.partial(original_call, mod)
            return tracer.call_module(mod, forward, args, kwargs)

        def module_getattr(mod, name):
            return tracer.getattr(name, original_getattr(mod, name), parameter_proxy_cache)

        patcher.setattr(Module, "__call__", module_call)
        patcher.setattr(Module, "__getattr__", module_getattr)


class GraphAppendingTracer(Tracer):
    """The tracer of a Proxy made outside symbolic tracing, ``Proxy(node)``: what is done with it is appended to
    ``graph`` (torch.fx's recipe for decompositions and hand-built graphs).

    >>> import jitorch
    >>> from jitorch.fx import Graph, GraphModule, Proxy
    >>> g = Graph()
    >>> x = Proxy(g.placeholder("x"))
    >>> _ = g.output(jitorch.relu(x * 2).node)
    >>> GraphModule(jitorch.nn.Module(), g)(jitorch.tensor([-1.0, 1.0]))
    tensor([0., 2.])
    """

    def __init__(self, graph: Graph):
        super().__init__()
        self.graph = graph


class ParameterProxy(Proxy):
    """The Proxy of a parameter under ``Tracer(param_shapes_constant=True)``: its shape is read, not recorded."""

    def __init__(self, node, tracer, param):
        super().__init__(node, tracer)
        self.__dict__["param"] = param

    @property
    def shape(self):
        return self.param.shape

    @property
    def ndim(self):
        return self.param.ndim

    def size(self, dim=None):
        return self.param.size(dim) if dim is not None else self.param.size()

    def dim(self):
        return self.param.dim()

    def numel(self):
        return self.param.numel()

    def nelement(self):
        return self.param.numel()


def _source_line(filename, lineno):
    import linecache

    return linecache.getline(filename, lineno).strip()


def symbolic_trace(root, concrete_args: dict | None = None):
    """Trace ``root`` (an ``nn.Module`` or function) into a :class:`~jitorch.fx.GraphModule`.

    ``concrete_args`` maps parameter names to fixed values, specializing the graph (for flags that steer ``if``); the
    graph checks that later calls pass the same values. ``PH`` leaves stay symbolic (``{"d": {"a": PH}}``).

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
