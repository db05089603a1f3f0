"""``Interpreter`` runs a graph node by node; ``Transformer`` re-records it into a new graph while doing so.

Both dispatch each node to the method named after its opcode, so instrumenting a run means overriding one method.

>>> import jitorch, operator
>>> from jitorch.fx import Interpreter, symbolic_trace
>>> class NegateAdds(Interpreter):
...     def call_function(self, target, args, kwargs):
...         out = super().call_function(target, args, kwargs)
...         return -out if target is operator.add else out
>>> gm = symbolic_trace(lambda x: x + 1)
>>> NegateAdds(gm).run(jitorch.tensor([1.0]))
tensor([-2.])
"""
from __future__ import annotations

import inspect

from .graph import Graph
from .node import Node, map_aggregate, map_arg
from .proxy import Proxy

__all__ = ["Interpreter", "Transformer"]


def fetch_attr(module, target: str):
    obj = module
    for i, atom in enumerate(target.split(".")):
        if not hasattr(obj, atom):
            raise RuntimeError(f"Node referenced nonexistent target {'.'.join(target.split('.')[:i + 1])}")
        obj = getattr(obj, atom)
    return obj


class Interpreter:
    """Execute ``module.graph`` (or ``graph``) on real values; the reference semantics of a graph.

    With ``garbage_collect_values`` a value is dropped after its last use, as generated code does.
    """

    def __init__(self, module, garbage_collect_values: bool = True, graph: Graph | None = None):
        self.module = module
        self.submodules = dict(module.named_modules())  # torch's; Transformers look targets up in it
        self.name, self.extra_traceback = "Interpreter", True
        self.graph = graph if graph is not None else module.graph
        self.garbage_collect_values = garbage_collect_values
        self.env: dict[Node, object] = {}
        last_use: dict[Node, Node] = {}
        for node in self.graph.nodes:
            for inp in node.all_input_nodes:
                last_use[inp] = node
        self.user_to_last_uses: dict[Node, list] = {}
        for value, user in last_use.items():
            self.user_to_last_uses.setdefault(user, []).append(value)

    def run(self, *args, initial_env: dict | None = None, enable_io_processing: bool = True):
        """Run the graph on ``args`` and return what its output node returns.

        ``initial_env`` maps nodes to values they are not recomputed for. ``enable_io_processing`` is torch's switch
        for graphs whose code flattens inputs (pytree codegen); jitorch's graphs take their inputs as they are."""
        self.env = dict(initial_env or {})
        self.args_iter = iter(args)
        for node in self.graph.nodes:
            if node in self.env:
                continue
            try:
                self.env[node] = self.run_node(node)
            except Exception as e:
                # Only the innermost interpreter notes the node (a call_module may run a nested one).
                if not any(n.startswith("While executing") for n in getattr(e, "__notes__", ())):
                    trace = node.meta.get("stack_trace")
                    e.add_note(f"While executing {node.format_node()}" + (f"\nOriginal traceback: {trace}"
                                                                           if trace else ""))
                raise
            if self.garbage_collect_values:
                for dead in self.user_to_last_uses.get(node, ()):
                    self.env.pop(dead, None)
            if node.op == "output":
                return self.env[node]
        return None

    def boxed_run(self, args_list: list):
        """``run`` on the values of ``args_list``, which is emptied first, so the caller's references to the inputs
        do not keep them alive while the graph runs (the boxed calling convention)."""
        env, values = {}, iter(args_list)
        for node in self.graph.find_nodes(op="placeholder"):
            env[node] = next(values)
        args_list.clear()
        return self.run(initial_env=env)

    def run_node(self, n: Node):
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    # -- one method per opcode -----------------------------------------------------------------------------------------
    def placeholder(self, target, args, kwargs):
        if target.startswith("**"):
            return {}  # ``run`` takes positional values only
        if target.startswith("*"):
            return tuple(self.args_iter)  # ``*args`` takes every remaining value
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]  # the signature's default
            raise RuntimeError(f"Expected positional argument for parameter {target}, but one was not passed in!")

    def get_attr(self, target, args, kwargs):
        return self.fetch_attr(target)

    def call_function(self, target, args, kwargs):
        return target(*args, **kwargs)

    def call_method(self, target, args, kwargs):
        self_obj, *rest = args
        return getattr(self_obj, target)(*rest, **kwargs)

    def call_module(self, target, args, kwargs):
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target, args, kwargs):
        return args[0]

    # -- helpers -------------------------------------------------------------------------------------------------------
    def fetch_attr(self, target: str):
        return fetch_attr(self.module, target)

    def fetch_args_kwargs_from_env(self, n: Node):
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args, n: Node):
        def load(node):
            if node not in self.env:
                raise RuntimeError(f"Node {n} referenced nonexistent value {node}! Run Graph.lint() to diagnose")
            return self.env[node]
        return map_arg(args, load)


class Transformer(Interpreter):
    """Rebuild the graph by running it on Proxies; ``transform()`` returns the new GraphModule.

    Override an opcode method to rewrite: return a Proxy built from ``self.tracer``.

    >>> import jitorch, operator
    >>> from jitorch.fx import Transformer, symbolic_trace
    >>> class AddToMul(Transformer):
    ...     def call_function(self, target, args, kwargs):
    ...         return super().call_function(operator.mul if target is operator.add else target, args, kwargs)
    >>> AddToMul(symbolic_trace(lambda x: x + 3)).transform()(jitorch.tensor([2.0]))
    tensor([6.])
    """

    def __init__(self, module):
        super().__init__(module, garbage_collect_values=False)
        from .tracer import Tracer

        self.new_graph = Graph()
        self.tracer = Tracer()
        self.tracer.graph = self.new_graph
        self.tracer.root = module

    def placeholder(self, target, args, kwargs):
        default = args[0] if args else inspect.Parameter.empty
        if target.startswith("*"):
            return Proxy(self.new_graph.create_node("placeholder", target, name=target.lstrip("*")), self.tracer)
        return Proxy(self.new_graph.placeholder(target, default_value=default), self.tracer)

    def get_attr(self, target, args, kwargs):
        return Proxy(self.new_graph.get_attr(target), self.tracer)

    def call_function(self, target, args, kwargs):
        return self.tracer.create_proxy("call_function", target, args, kwargs)

    def call_method(self, target, args, kwargs):
        return self.tracer.create_proxy("call_method", target, args, kwargs)

    def call_module(self, target, args, kwargs):
        return self.tracer.create_proxy("call_module", target, args, kwargs)

    def transform(self):
        from .graph_module import GraphModule

        self.tracer.create_node = lambda *a, **k: self.new_graph.create_node(*a, **k)
        result = self.run(*(object() for _ in self.graph.find_nodes(op="placeholder")))
        self.new_graph.output(map_aggregate(result, lambda x: x.node if isinstance(x, Proxy) else x))
        self.env = {}  # drop the Proxies: while one is alive, every Tensor method call looks for Proxies
        return GraphModule(self.module, self.new_graph)
