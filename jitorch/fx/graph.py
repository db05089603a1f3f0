"""``Graph``: an ordered, doubly linked list of :class:`Node`, with builders, surgery, checks and printing.

>>> import operator
>>> from jitorch.fx import Graph
>>> g = Graph()
>>> x = g.placeholder("x")
>>> y = g.call_function(operator.add, (x, 1))
>>> _ = g.output(y)
>>> g.lint()
>>> print(g.python_code("self").src.strip())
def forward(self, x):
    add = x + 1;  x = None
    return add
"""
from __future__ import annotations

import contextlib
import inspect

from ._naming import Namespace, target_basename
from .node import _SIDE_EFFECTFUL, OPCODES, Node, map_arg

__all__ = ["Graph"]

# Targets with side effects or fresh randomness: dead-code elimination and CSE must keep each call.
_IMPURE_WORDS = ("rand", "dropout", "bernoulli", "multinomial", "normal_", "uniform_", "manual_seed", "print",
                 "_assert", "copy_", "backward")


def is_impure(node: Node) -> bool:
    """Whether removing or merging ``node`` could change behaviour (placeholders, outputs, in-place, random ops)."""
    if node.op in ("placeholder", "output"):
        return True
    if node.op == "call_module":
        return False if node.graph.owning_module is None else _module_is_random(node)
    if node.op == "call_function" and _registered_side_effect(node.target):
        return True
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return mutates_input(node) or any(w in name for w in _IMPURE_WORDS)


def mutates_input(node: Node) -> bool:
    """Whether the call writes into its first argument: an in-place tensor method (``x.add_``) or function
    (``jitorch.relu_``), or ``inplace=True``."""
    if node.op not in ("call_method", "call_function"):
        return False
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or _inplace_flag(node)


def maybe_written(graph) -> set:
    """The nodes an in-place call writes into, and everything they were computed from (a view shares memory with
    its source; telling views apart is not attempted)."""
    stack = [n.args[0] for n in graph.nodes if mutates_input(n) and n.args and isinstance(n.args[0], Node)]
    found: set = set()
    while stack:
        node = stack.pop()
        if node not in found:
            found.add(node)
            stack.extend(node.all_input_nodes)
    return found


def _inplace_flag(node) -> bool:
    """Whether a call passes ``inplace=True``, by keyword or by position (``F.relu(x, True)``)."""
    if node.kwargs.get("inplace", False) is True:
        return True
    if node.op != "call_function" or not any(a is True for a in node.args[1:]):
        return False
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):  # a builtin without signature, or a call that does not bind
        return False
    return bound.arguments.get("inplace") is True


def _registered_side_effect(target) -> bool:
    try:
        return target in _SIDE_EFFECTFUL
    except TypeError:  # an unhashable callable
        return False


def _module_is_random(node):
    try:
        mod = node.graph.owning_module.get_submodule(node.target)
    except AttributeError:
        return True
    return "Dropout" in type(mod).__name__


class _NodeList:
    """A live view of a graph's nodes: iterable (forwards or ``reversed``), sized, and safe to erase from."""

    def __init__(self, graph, reverse=False):
        self._graph, self._reverse = graph, reverse

    def __len__(self):
        return self._graph._len

    def __iter__(self):
        root = self._graph._root
        step = "_prev" if self._reverse else "_next"
        cur = getattr(root, step)
        while cur is not root:
            nxt = getattr(cur, step)  # read first: the caller may erase ``cur``
            if not cur._erased:
                yield cur
            cur = nxt

    def __reversed__(self):
        return iter(_NodeList(self._graph, not self._reverse))


class Graph:
    """The IR of :mod:`jitorch.fx`. Builders append at the insertion point (the end, unless moved).

    >>> from jitorch.fx import Graph
    >>> g = Graph(); x = g.placeholder("x"); _ = g.output(g.call_method("sum", (x,)))
    >>> print(g)
    graph():
        %x : [num_users=1] = placeholder[target=x]
        %sum_1 : [num_users=1] = call_method[target=sum](args = (%x,), kwargs = {})
        return sum_1
    """

    def __init__(self, owning_module=None, tracer_cls=None, tracer_extras=None):
        self._root = Node(self, "", "placeholder", "", (), {})  # sentinel of the circular list
        self._insert = self._root.prepend
        self._len = 0
        self._namespace = Namespace()
        self.owning_module = owning_module
        self._tracer_cls, self._tracer_extras = tracer_cls, tracer_extras  # the tracer that recorded it, if any
        self._body_transformer = None  # see on_generate_code

    @property
    def nodes(self) -> _NodeList:
        return _NodeList(self)

    # -- building ----------------------------------------------------------------------------------------------------
    def create_node(self, op, target, args=(), kwargs=None, name=None, type_expr=None) -> Node:
        """Create a node at the insertion point; ``name`` is a hint, made unique."""
        name = self._namespace.create_name(name or target_basename(target))
        node = Node(self, name, op, target, args, kwargs or {}, type_expr)
        self._insert(node)
        self._len += 1
        return node

    def placeholder(self, name, type_expr=None, default_value=inspect.Parameter.empty) -> Node:
        """An input of the graph; ``default_value`` becomes the generated signature's default."""
        args = () if default_value is inspect.Parameter.empty else (default_value,)
        return self.create_node("placeholder", name, args, name=name, type_expr=type_expr)

    def get_attr(self, qualified_name, type_expr=None) -> Node:
        return self.create_node("get_attr", qualified_name, type_expr=type_expr)

    def call_function(self, the_function, args=(), kwargs=None, type_expr=None, name=None) -> Node:
        return self.create_node("call_function", the_function, args, kwargs, name=name, type_expr=type_expr)

    def call_method(self, method_name, args=(), kwargs=None, type_expr=None) -> Node:
        return self.create_node("call_method", method_name, args, kwargs, type_expr=type_expr)

    def call_module(self, module_name, args=(), kwargs=None, type_expr=None) -> Node:
        return self.create_node("call_module", module_name, args, kwargs, type_expr=type_expr)

    def output(self, result, type_expr=None) -> Node:
        return self.create_node("output", "output", (result,), name="output", type_expr=type_expr)

    @contextlib.contextmanager
    def inserting_before(self, n: Node | None = None):
        """Within the block, builders insert before ``n`` (default: at the start of the graph)."""
        saved = self._insert
        self._insert = (n if n is not None else self._root._next).prepend
        try:
            yield
        finally:
            self._insert = saved

    @contextlib.contextmanager
    def inserting_after(self, n: Node | None = None):
        """Within the block, builders insert after ``n`` (default: at the start of the graph), in call order."""
        saved = self._insert
        anchor = [n if n is not None else self._root]

        def insert(node):
            anchor[0].append(node)
            anchor[0] = node
        self._insert = insert
        try:
            yield
        finally:
            self._insert = saved

    def erase_node(self, to_erase: Node):
        """Remove a node that nothing uses any more."""
        if to_erase.users:
            raise RuntimeError(f"Tried to erase Node {to_erase} but it still had {len(to_erase.users)} users in the "
                               f"graph: {list(to_erase.users)}!")
        if to_erase.graph is not self:
            raise RuntimeError(f"Tried to erase Node {to_erase} from a graph it does not belong to")
        to_erase._remove_from_list()
        to_erase._erased = True
        to_erase._update_args_kwargs((), {})
        self._len -= 1

    def node_copy(self, node: Node, arg_transform=lambda n: n) -> Node:
        """Copy ``node`` (maybe from another graph) to the insertion point; ``arg_transform`` maps its inputs."""
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        new = self.create_node(node.op, node.target, args, kwargs, name=node.name, type_expr=node.type)
        new.meta = dict(node.meta)
        return new

    def graph_copy(self, g: Graph, val_map: dict, return_output_node=False):
        """Append the nodes of ``g`` (except its output) to this graph; ``val_map`` maps old nodes to new ones and is
        filled in. Returns the value ``g`` outputs, in terms of the new nodes."""
        for node in g.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                out = map_arg(node.args[0], val_map.__getitem__)
                return (out, node) if return_output_node else out
            val_map[node] = self.node_copy(node, val_map.__getitem__)
        return None

    def __deepcopy__(self, memo):
        """A copy with new nodes (same names, targets and a copy of each ``meta``); argument values are shared."""
        new = Graph(tracer_cls=self._tracer_cls, tracer_extras=self._tracer_extras)
        memo[id(self)] = new
        out = new.graph_copy(self, {}, return_output_node=True)
        if out is not None:
            value, old_output = out
            new.output(value, type_expr=old_output.type).meta = dict(old_output.meta)
        return new

    def eliminate_dead_code(self, is_impure_node=None) -> bool:
        """Erase nodes whose results are unused and that have no side effects; returns whether anything changed.

        ``is_impure_node(node)`` overrides which nodes count as having side effects.
        """
        impure = is_impure_node or is_impure
        changed = False
        for node in reversed(self.nodes):
            if not node.users and not impure(node):
                self.erase_node(node)
                changed = True
        return changed

    def output_node(self) -> Node:
        """The graph's ``output`` node, which must be its last."""
        last = next(iter(reversed(self.nodes)), None)
        if last is None or last.op != "output":
            raise AssertionError(f"Expected output node, got op={getattr(last, 'op', None)}")
        return last

    def find_nodes(self, *, op, target=None, sort=True):  # always in graph order, so ``sort`` changes nothing
        return [n for n in self.nodes if n.op == op and (target is None or n.target == target)]

    # -- checking ----------------------------------------------------------------------------------------------------
    def lint(self):
        """Check the invariants; the error names the offending node.

        Every node belongs to this graph and has a known opcode and a unique name; arguments are defined earlier;
        ``users`` agrees with the arguments; there is at most one output and nothing follows it; ``get_attr`` and
        ``call_module`` targets exist on the owning module.
        """
        seen, names = set(), set()
        output_seen = None
        for node in self.nodes:
            where = f"Node '{node.name}' ({node.op}, target={node.target!r})"
            if node.graph is not self:
                raise RuntimeError(f"{where} does not belong to this Graph")
            if node.op not in OPCODES:
                raise RuntimeError(f"{where} has unknown opcode {node.op!r}")
            if node.name in names:
                raise RuntimeError(f"{where}: name '{node.name}' is used twice")
            if output_seen is not None:
                raise RuntimeError(f"{where} comes after the output node '{output_seen.name}'")
            for arg in node.all_input_nodes:
                if arg.graph is not self:
                    raise RuntimeError(f"{where} has argument '{arg}' from a different Graph")
                if arg not in seen:
                    raise RuntimeError(f"Argument '{arg}' of {where} was used before it has been defined!")
                if node not in arg.users:
                    raise RuntimeError(f"{where} reads '{arg}', but is missing from '{arg}'.users")
            for user in node.users:
                if user._erased or node not in user._input_nodes:
                    raise RuntimeError(f"{where} lists '{user}' as a user, but '{user}' does not read it")
            if node.op in ("call_method",) and not isinstance(node.target, str):
                raise RuntimeError(f"{where}: a call_method target must be a method name (str)")
            if node.op == "call_function" and not callable(node.target):
                raise RuntimeError(f"{where}: a call_function target must be callable")
            if node.op in ("get_attr", "call_module") and self.owning_module is not None:
                self._check_target(node, where)
            if node.op == "output":
                output_seen = node
            seen.add(node)
            names.add(node.name)

    def _check_target(self, node, where):
        obj = self.owning_module
        for atom in node.target.split("."):
            if not hasattr(obj, atom):
                raise RuntimeError(f"{where} references nonexistent attribute '{atom}' of {type(obj).__name__}")
            obj = getattr(obj, atom)
        if node.op == "call_module" and not callable(obj):
            raise RuntimeError(f"{where}: target '{node.target}' is not a callable module")

    # -- printing ----------------------------------------------------------------------------------------------------
    def __str__(self):
        return "\n".join(["graph():"] + [f"    {n.format_node()}" for n in self.nodes])

    def print_tabular(self):
        """Print one row per node: opcode, name, target, args, kwargs."""
        from .node import _fmt, _target_name

        rows = [("opcode", "name", "target", "args", "kwargs")]
        rows += [(n.op, n.name, _target_name(n.target), _fmt(n.args), _fmt(n.kwargs)) for n in self.nodes]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        print("\n".join(lines))

    def on_generate_code(self, make_transformer):
        """Transform the generated code: ``make_transformer(current)`` returns a function from the list of the body's
        lines to a new list (``current`` is the transformer registered before, or None). It stays registered; used as
        a context manager, it is undone at the end of the block.

        >>> import jitorch
        >>> from jitorch.fx import symbolic_trace
        >>> gm = symbolic_trace(lambda x: x + 1)
        >>> with gm.graph.on_generate_code(lambda old: lambda body: ["print('hi')\\n", *body]):
        ...     print(gm.recompile().src.splitlines()[1].strip())
        print('hi')
        """
        old = self._body_transformer
        self._body_transformer = make_transformer(old)

        @contextlib.contextmanager
        def restore_on_exit():
            try:
                yield
            finally:
                self._body_transformer = old
        return restore_on_exit()

    def python_code(self, root_module: str = "self", **kwargs):
        """The generated source: a :class:`~jitorch.fx.codegen.PythonCode` with ``src`` and ``globals``. torch's
        formatting switches (``verbose``, ``include_stride``...) are accepted and change nothing here."""
        from .codegen import python_code

        return python_code(self, root_module)

    def to_dot(self, name: str = "graph") -> str:
        """The graph in Graphviz DOT syntax, one box per node, edges from inputs to users."""
        from ._dot import graph_to_dot

        return graph_to_dot(self, name)

    def to_svg(self, name: str = "graph") -> str:
        """The graph drawn as SVG by Graphviz's ``dot`` program; RuntimeError when it is not installed."""
        from ._dot import dot_to_svg

        return dot_to_svg(self.to_dot(name))
