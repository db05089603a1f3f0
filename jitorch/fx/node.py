"""``Node``: one instruction of a :class:`~jitorch.fx.Graph`, with use-def edges kept up to date automatically.

A node has one of six opcodes (``placeholder``, ``get_attr``, ``call_function``, ``call_method``, ``call_module``,
``output``), a ``target`` (a name or a callable), ``args``/``kwargs`` that may contain other nodes, and ``users``:
the nodes that read it. Assigning ``node.args`` rewires ``users`` on both ends.

>>> from jitorch.fx import Graph
>>> g = Graph()
>>> x = g.placeholder("x")
>>> y = g.call_method("relu", (x,))
>>> list(x.users)
[relu]
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import Any, Callable, Optional, Union

__all__ = ["Node", "map_arg", "map_aggregate", "has_side_effect", "OPCODES", "Argument", "Target"]

OPCODES = ("placeholder", "get_attr", "call_function", "call_method", "call_module", "output")
# The types of ``node.target`` and of what ``node.args``/``kwargs`` hold, as torch.fx.node names them.
Target = Union[Callable[..., Any], str]
Argument = Optional[Union[tuple, list, dict, slice, range, "Node", str, int, float, bool, complex, Any]]

_SIDE_EFFECTFUL: set = set()  # functions registered by has_side_effect


def has_side_effect(fn):
    """Mark ``fn`` so dead-code elimination keeps its ``call_function`` nodes even when their result is unused;
    returns ``fn`` (usable as a decorator)."""
    _SIDE_EFFECTFUL.add(fn)
    return fn


def map_aggregate(a, fn):
    """Apply ``fn`` to every leaf of ``a``, rebuilding tuples, lists, dicts and slices around the results."""
    if type(a) in _LEAVES:  # most calls: a node, a number, a string (one lookup before four isinstance tests)
        return fn(a)
    if isinstance(a, tuple):
        mapped = tuple(map_aggregate(x, fn) for x in a)
        # NamedTuples (torch.return_types-like) are rebuilt with their own constructor.
        return type(a)(*mapped) if hasattr(a, "_fields") else mapped
    if isinstance(a, list):
        return [map_aggregate(x, fn) for x in a]
    if isinstance(a, dict):
        mapped = {k: map_aggregate(v, fn) for k, v in a.items()}
        kind = type(a)
        if kind is OrderedDict:  # a compiled function returns the kind of mapping eager's returns
            return OrderedDict(mapped)
        return defaultdict(a.default_factory, mapped) if kind is defaultdict else mapped
    if isinstance(a, slice):
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn), map_aggregate(a.step, fn))
    return fn(a)


def map_arg(a, fn):
    """Apply ``fn`` to every :class:`Node` inside ``a``; other leaves are kept."""
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


class Node:
    """One instruction. Create nodes through :class:`Graph` builders, not directly."""

    def __init__(self, graph, name, op, target, args, kwargs, type=None):
        if op not in OPCODES:
            raise ValueError(f"Node '{name}': unknown opcode {op!r}; expected one of {OPCODES}")
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self.type = type
        self.users: dict[Node, None] = {}  # an insertion-ordered set
        self.meta: dict = {}
        self._input_nodes: dict[Node, None] = {}
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._prev = self._next = self
        self._erased = False
        self._update_args_kwargs(tuple(args), dict(kwargs))

    # -- linked list -------------------------------------------------------------------------------------------------
    @property
    def next(self):
        return self._next

    @property
    def prev(self):
        return self._prev

    def prepend(self, x: Node):
        """Move or insert ``x`` immediately before this node."""
        if x is self:
            raise ValueError("Cannot prepend a node to itself")
        x._remove_from_list()
        p = self._prev
        p._next, x._prev = x, p
        x._next, self._prev = self, x

    def append(self, x: Node):
        """Move or insert ``x`` immediately after this node."""
        self._next.prepend(x)

    def _remove_from_list(self):
        p, n = self._prev, self._next
        p._next, n._prev = n, p
        self._prev = self._next = self

    # -- arguments and use-def edges ---------------------------------------------------------------------------------
    @property
    def args(self) -> tuple:
        return self._args

    @args.setter
    def args(self, value):
        self._update_args_kwargs(tuple(value), self._kwargs)

    @property
    def kwargs(self) -> dict:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value):
        self._update_args_kwargs(self._args, dict(value))

    @property
    def all_input_nodes(self) -> list:
        """The distinct nodes this node reads, in order of first appearance."""
        return list(self._input_nodes)

    def _update_args_kwargs(self, args, kwargs):
        for old in self._input_nodes:
            old.users.pop(self, None)
        self._args, self._kwargs = args, kwargs
        self._input_nodes = {}
        map_arg((args, kwargs), self._input_nodes.setdefault)
        for new in self._input_nodes:
            new.users.setdefault(self)

    def update_arg(self, idx, arg):
        args = list(self._args)
        args[idx] = arg
        self.args = args

    def insert_arg(self, idx, arg):
        """Insert ``arg`` into ``args`` before position ``idx``."""
        if not 0 <= idx <= len(self._args):
            raise AssertionError(f"insert_args index must be between 0 and len(self.args), got {idx}")
        self.args = (*self._args[:idx], arg, *self._args[idx:])

    def update_kwarg(self, key, arg):
        self.kwargs = {**self._kwargs, key: arg}

    def replace_all_uses_with(self, replace_with: Node, delete_user_cb=lambda user: True, *, propagate_meta=False):
        """Make every user of this node read ``replace_with`` instead; returns the users that changed.

        >>> from jitorch.fx import Graph
        >>> g = Graph(); x = g.placeholder("x"); a = g.call_method("relu", (x,)); b = g.call_method("neg", (a,))
        >>> a.replace_all_uses_with(x)
        [neg]
        >>> b.args
        (x,)
        """
        if propagate_meta:
            for k, v in self.meta.items():
                replace_with.meta.setdefault(k, v)
        changed = [u for u in list(self.users) if delete_user_cb(u)]
        for user in changed:
            user.replace_input_with(self, replace_with)
        return changed

    def replace_input_with(self, old_input: Node, new_input: Node):
        """Substitute ``new_input`` for every occurrence of ``old_input`` in this node's args and kwargs."""
        swap = lambda n: new_input if n is old_input else n
        self._update_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    @property
    def stack_trace(self) -> str | None:
        """Where tracing recorded this node: ``File "...", line N`` of the user's code, or None."""
        return self.meta.get("stack_trace")

    def normalized_arguments(self, root, arg_types=None, kwarg_types=None, normalize_to_only_use_kwargs=False):
        """This call's arguments bound to the target's signature, defaults filled in (an ``ArgsKwargsPair``), for
        ``call_function`` and ``call_module`` nodes; None when the signature cannot say (``*args``, builtins).

        >>> import jitorch
        >>> from jitorch.fx import symbolic_trace
        >>> gm = symbolic_trace(lambda x: jitorch.nn.functional.leaky_relu(x, 0.2))
        >>> gm.graph.find_nodes(op="call_function")[0].normalized_arguments(gm).kwargs["inplace"]
        False
        """
        from .operator_schemas import normalize_function, normalize_module

        if self.op == "call_function":
            return normalize_function(self.target, self.args, self.kwargs, arg_types, kwarg_types,
                                      normalize_to_only_use_kwargs)
        if self.op == "call_module":
            return normalize_module(root, self.target, self.args, self.kwargs, normalize_to_only_use_kwargs)
        return None

    def is_impure(self) -> bool:
        """Whether dead-code elimination and CSE must keep this node (inputs, output, in-place and random calls)."""
        from .graph import is_impure

        return is_impure(self)

    # -- printing ----------------------------------------------------------------------------------------------------
    def format_node(self) -> str:
        """One line in the style of ``str(graph)``: ``%add : call_function[target=operator.add](args = (%x, 1))``."""
        if self.op == "placeholder":
            default = f"(default={self.args[0]!r})" if self.args else ""
            return f"%{self.name} : [num_users={len(self.users)}] = placeholder[target={self.target}]{default}"
        if self.op == "output":
            return f"return {self.args[0]}"  # Python's str, as torch: dict keys quoted
        target = _target_name(self.target)
        if self.op == "get_attr":
            return f"%{self.name} : [num_users={len(self.users)}] = get_attr[target={target}]"
        return (f"%{self.name} : [num_users={len(self.users)}] = {self.op}[target={target}]"
                f"(args = {_fmt(self.args)}, kwargs = {_fmt(self.kwargs)})")

    def __repr__(self):
        return self.name


def _fmt(a, sigil="%"):
    """An argument as ``str(graph)`` prints it: nodes as ``%name`` (bare names in the ``return`` line)."""
    if isinstance(a, Node):
        return f"{sigil}{a.name}"
    if isinstance(a, tuple):
        inner = ", ".join(_fmt(x, sigil) for x in a)
        return f"({inner},)" if len(a) == 1 else f"({inner})"
    if isinstance(a, list):
        return "[" + ", ".join(_fmt(x, sigil) for x in a) + "]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k}: {_fmt(v, sigil)}" for k, v in a.items()) + "}"
    return a if isinstance(a, str) and sigil else repr(a)  # torch.fx prints string arguments bare


def _target_name(target) -> str:
    if isinstance(target, str):
        return target
    from ._naming import global_path

    path = global_path(target)
    if path is not None and "." not in path:
        return f"builtins.{path}"  # as torch.fx prints ``builtins.getattr``
    return path or getattr(target, "__name__", repr(target))


_LEAVES = frozenset({Node, int, float, bool, str, type(None)})
