"""Python source generation for a :class:`~jitorch.fx.Graph`: one line per node, as a ``forward`` method.

Operators print as infix expressions, attribute reads as ``x.attr``, module calls as ``self.path(...)``. A value is
set to ``None`` after its last use, so long graphs do not keep every intermediate alive::

    def forward(self, x):
        linear = self.linear(x);  x = None
        relu = jitorch.relu(linear);  linear = None
        return relu
"""
from __future__ import annotations

import builtins
import keyword
import math
import operator
from dataclasses import dataclass, field

from ._naming import Namespace, global_path
from .node import Node

__all__ = ["PythonCode", "python_code"]

BINARY = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
          operator.mod: "%", operator.pow: "**", operator.matmul: "@", operator.and_: "&", operator.or_: "|",
          operator.xor: "^", operator.lshift: "<<", operator.rshift: ">>", operator.lt: "<", operator.le: "<=",
          operator.eq: "==", operator.ne: "!=", operator.gt: ">", operator.ge: ">="}
UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}
# Roots of paths generated code may spell out; each is bound in the code's globals.
_ROOTS = ("jitorch", "operator", "math")


@dataclass
class PythonCode:
    """Generated ``src`` and the ``globals`` it must be executed with."""

    src: str
    globals: dict = field(default_factory=dict)


def attr_path(root: str, qualified: str) -> str:
    """``self.layer1`` for ``"layer1"``; ``getattr(self.seq, "0")`` for ``"seq.0"``, whose atom is no identifier."""
    expr = root
    for atom in qualified.split("."):
        expr = f"{expr}.{atom}" if atom.isidentifier() and not keyword.iskeyword(atom) else f'getattr({expr}, "{atom}")'
    return expr


# Names generated code spells out bare: a parameter of that name would shadow them, so it is called by its node name.
_BARE = frozenset({"self", "jitorch", "operator", "math", "getattr", "slice", "float"})


def parameter_name(node: Node) -> str:
    """The name of a placeholder in the signature: its target (the traced function's own parameter name, so keyword
    calls work) unless that cannot be a parameter here; then its node name."""
    name = node.target.lstrip("*") if isinstance(node.target, str) else ""
    if not name.isidentifier() or keyword.iskeyword(name) or name in _BARE:
        return node.name
    return name


class _Emitter:
    def __init__(self, graph):
        import jitorch

        self.globals = {"jitorch": jitorch, "operator": operator, "math": math}
        self._names = Namespace()
        self.shadowed = set()  # parameter names that hide a builtin of the same name (``input``, ``max``)
        for n in graph.nodes:
            self._names.reserve(n.name)
            if n.op == "placeholder":
                self._names.reserve(parameter_name(n))
                self.shadowed.add(parameter_name(n))
        self._by_id: dict[int, str] = {}

    def global_name(self, obj, hint) -> str:
        """Bind ``obj`` in the globals, reusing its name when the same object is bound twice."""
        if id(obj) not in self._by_id:
            name = self._names.create_name(f"_{hint}")
            self.globals[name] = obj
            self._by_id[id(obj)] = name
        return self._by_id[id(obj)]

    def callable_expr(self, fn) -> str:
        path = global_path(fn)
        if path and path.isidentifier() and getattr(builtins, path, None) is fn and path not in self.shadowed:
            return path
        if path and path.split(".")[0] in _ROOTS and _follow(self.globals, path) is fn:
            return path  # spelled out only when attribute access really reaches it (a module can be shadowed)
        return self.global_name(fn, getattr(fn, "__name__", "fn"))

    def arg(self, a) -> str:
        if isinstance(a, Node):
            return a.name
        if isinstance(a, tuple) and hasattr(a, "_fields"):  # a NamedTuple, such as jitorch.return_types.max
            return f"{self.callable_expr(type(a))}({', '.join(self.arg(x) for x in a)})"
        if isinstance(a, tuple):
            items = [self.arg(x) for x in a]
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if isinstance(a, list):
            return f"[{', '.join(self.arg(x) for x in a)}]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self.arg(v)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self.arg(a.start)}, {self.arg(a.stop)}, {self.arg(a.step)})"
        if a is Ellipsis:
            return "..."
        if isinstance(a, float) and not math.isfinite(a):
            return f"float('{a}')"
        if a is None or isinstance(a, (bool, int, float, str, complex)):
            return repr(a)
        if type(a).__name__ == "dtype" and global_path_of_value(a):
            return global_path_of_value(a)
        if type(a).__name__ == "device":
            return f"jitorch.device({str(a)!r})"
        if callable(a) and not hasattr(a, "_data"):
            return self.callable_expr(a)
        return self.global_name(a, type(a).__name__.lower())

    def args(self, args, kwargs) -> str:
        parts = [self.arg(a) for a in args] + [f"{k} = {self.arg(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)

    def expr(self, node: Node, root: str) -> str:
        op, target, args, kwargs = node.op, node.target, node.args, node.kwargs
        if op == "get_attr":
            return attr_path(root, target)
        if op == "call_module":
            return f"{attr_path(root, target)}({self.args(args, kwargs)})"
        if op == "call_method":
            return f"{self.arg(args[0])}.{target}({self.args(args[1:], kwargs)})"
        if target in BINARY and len(args) == 2 and not kwargs:
            return f"{self.arg(args[0])} {BINARY[target]} {self.arg(args[1])}"
        if target in UNARY and len(args) == 1 and not kwargs:
            return f"{UNARY[target]}{self.arg(args[0])}"
        if target is operator.getitem and len(args) == 2 and not kwargs:
            return f"{self.arg(args[0])}[{self.arg(args[1])}]"
        if target is getattr and len(args) == 2 and isinstance(args[1], str) and args[1].isidentifier():
            return f"{self.arg(args[0])}.{args[1]}"
        return f"{self.callable_expr(target)}({self.args(args, kwargs)})"


def _follow(namespace, path):
    parts = path.split(".")
    obj = namespace[parts[0]]
    for atom in parts[1:]:
        obj = getattr(obj, atom, None)
    return obj


def global_path_of_value(value) -> str | None:
    import jitorch

    name = getattr(value, "name", None) or str(value).rsplit(".", 1)[-1]
    return f"jitorch.{name}" if getattr(jitorch, name, None) is value else None


def python_code(graph, root_module: str = "self") -> PythonCode:
    """Generate ``def forward(self, ...)`` for ``graph``; see the module docstring for its shape."""
    emit = _Emitter(graph)
    nodes = list(graph.nodes)
    last_use: dict[Node, Node] = {}
    for node in nodes:
        for inp in node.all_input_nodes:
            last_use[inp] = node
    freed_at: dict[Node, list] = {}
    for value, user in last_use.items():
        if user.op != "output":
            freed_at.setdefault(user, []).append(value.name)

    params, body = [root_module], []
    after_default = keyword_only = False
    for node in nodes:
        if node.op == "placeholder":
            star = node.target[:2].count("*") if isinstance(node.target, str) else 0
            name = parameter_name(node)
            if name in params:  # two placeholders of one target (a hand-built graph): the unique node names
                name = node.name
            if star:  # ``*args`` / ``**kwargs``: the Proxy stood for the whole tuple or dict
                params.append("*" * star + name)
                keyword_only = True
            elif node.args:
                params.append(f"{name} = {emit.arg(node.args[0])}")
                after_default = True
            else:
                if after_default and not keyword_only:
                    params.append("*")  # a keyword-only parameter without default, after one with a default
                    keyword_only = True
                params.append(name)
            if name != node.name:  # ``def forward(self, input)`` keeps the caller's keyword; the body uses input_1
                body.append(f"{node.name} = {name}")
            continue
        if node.op == "output":
            body.append(f"return {emit.arg(node.args[0])}")
            continue
        line = f"{node.name} = {emit.expr(node, root_module)}"
        if node in freed_at:
            line += ";  " + " = ".join(freed_at[node]) + " = None"
        body.append(line)
    if not body or not body[-1].startswith("return"):
        body.append("return None")
    lines = [line + "\n" for line in body]
    if graph._body_transformer is not None:  # Graph.on_generate_code
        lines = graph._body_transformer(lines)
    src = f"def forward({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in "".join(lines).splitlines())
    return PythonCode(src, emit.globals)
