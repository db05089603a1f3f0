"""``GraphModule``: an ``nn.Module`` whose ``forward`` is Python generated from a :class:`Graph`.

The source is registered with :mod:`linecache`, so tracebacks and debuggers show the generated lines. Edit
``gm.graph`` and call :meth:`GraphModule.recompile` to regenerate ``forward``.

>>> import jitorch
>>> from jitorch.fx import symbolic_trace
>>> gm = symbolic_trace(lambda x: x.exp() + 1)
>>> gm(jitorch.zeros(2))
tensor([2., 2.])
"""
from __future__ import annotations

import itertools
import linecache

from .._tensor import Tensor
from ..nn.modules._registration import STATE_VERSION
from ..nn.modules.module import Module
from ..nn.parameter import Parameter
from ._naming import global_path, resolve_path
from .graph import Graph
from .node import Node, map_arg

__all__ = ["GraphModule"]

_FILE_IDS = itertools.count()


def _copy_attr(src, dst, target: str):
    """Copy ``src.<target>`` to ``dst.<target>``, creating empty parent modules on the way."""
    *prefix, last = target.split(".")
    for atom in prefix:
        src = getattr(src, atom)
        if not hasattr(dst, atom) or not isinstance(getattr(dst, atom), Module):
            setattr(dst, atom, Module())
        dst = getattr(dst, atom)
    value = getattr(src, last)
    if isinstance(src, Module) and last in src._buffers:
        dst.register_buffer(last, value, persistent=last not in src._non_persistent_buffers_set)
    elif isinstance(value, Tensor) and last not in getattr(src, "_parameters", {}):
        # A tensor constant (plain attribute on the root) becomes a buffer, as in torch.fx: it then follows
        # ``gm.double()``/``gm.to(...)`` and is saved in the state_dict.
        dst.register_buffer(last, value)
    else:
        setattr(dst, last, value)


def _assign_attr(value, dst, target: str):
    """Install ``value`` (from a dict root) as ``dst.<target>``, creating empty parent modules on the way: a plain
    tensor becomes a buffer and a Parameter a parameter, as torch.fx does."""
    *prefix, last = target.split(".")
    for atom in prefix:
        if not isinstance(getattr(dst, atom, None), Module):
            setattr(dst, atom, Module())
        dst = getattr(dst, atom)
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        dst.register_buffer(last, value)
    else:
        setattr(dst, last, value)


class GraphModule(Module):
    """A Module made from ``root`` (a Module, or a dict of attributes) and ``graph``.

    Only what the graph references (``get_attr`` and ``call_module`` targets) is copied from ``root``.
    """

    def __new__(cls, *args, **kwargs):
        # Each instance gets its own class so ``forward`` can be a real method that recompile() replaces.
        if not cls.__dict__.get("_one_per_instance", False):
            cls = type(cls.__name__, (cls,), {"_one_per_instance": True, "__module__": cls.__module__})
        return super().__new__(cls)

    def __init__(self, root, graph: Graph, class_name: str = "GraphModule"):
        super().__init__()
        type(self).__name__ = class_name
        type(self).__qualname__ = class_name
        if isinstance(root, Module):
            self.training = root.training
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    _copy_attr(root, self, node.target)
        elif isinstance(root, dict):
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    if node.target not in root:
                        raise RuntimeError(f"Node '{node.name}' references '{node.target}', which is missing from "
                                           "the dict of attributes passed as root")
                    _assign_attr(root[node.target], self, node.target)
        else:
            raise TypeError(f"GraphModule root must be a Module or a dict, got {type(root).__name__}")
        self.meta: dict = {}  # free-form, for passes (torch's GraphModule.meta)
        self.graph = graph

    @property
    def graph(self) -> Graph:
        return self.__dict__["_graph"]

    @graph.setter
    def graph(self, g: Graph):
        self.__dict__["_graph"] = g
        g.owning_module = self
        self.recompile()

    @property
    def code(self) -> str:
        """The generated source of ``forward``."""
        return self.__dict__["_code"]

    def recompile(self):
        """Regenerate ``forward`` from ``self.graph``; call it after editing the graph."""
        pc = self.graph.python_code("self")
        src = pc.src
        filename = f"<eval_with_key>.{next(_FILE_IDS)}"
        # mtime None marks a non-file entry, which linecache.checkcache leaves alone.
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        namespace = dict(pc.globals)
        exec(compile(src, filename, "exec"), namespace)
        type(self).forward = namespace["forward"]
        self.__dict__["_code"] = src
        return pc

    def print_readable(self, print_output: bool = True, include_stride: bool = False, include_device: bool = False,
                       colored: bool = False, **kwargs) -> str:
        """The generated module as a class definition; printed unless ``print_output`` is False. torch's formatting
        switches (``include_stride``, ``colored``...) are accepted; the code carries no type annotations to adjust.
        Child GraphModules (from ``split_module``, say) are printed as nested classes named after their attribute."""
        text = _readable(self, type(self).__name__)
        if print_output:
            print(text)
        return text

    def __str__(self):
        return f"{super().__str__()}\n\n\n\n{self.code}"

    # -- submodules ----------------------------------------------------------------------------------------------------
    def add_submodule(self, target: str, m: Module) -> bool:
        """Install ``m`` at the dotted path ``target``, creating empty parent modules; False when a parent on the
        path exists and is not a Module."""
        *prefix, last = target.split(".")
        mod = self
        for atom in prefix:
            sub = getattr(mod, atom, None)
            if sub is None:
                sub = Module()
                mod.add_module(atom, sub)
            if not isinstance(sub, Module):
                return False
            mod = sub
        mod.add_module(last, m)
        return True

    def delete_submodule(self, target: str) -> bool:
        """Remove the submodule at ``target``; False when there is none (the path or the module is missing)."""
        *prefix, last = target.split(".")
        mod = self
        for atom in prefix:
            mod = getattr(mod, atom, None)
            if not isinstance(mod, Module):
                return False
        if last not in mod._modules:
            return False
        del mod._modules[last]
        STATE_VERSION[0] += 1  # a captured step reaching this module tree must see the change
        return True

    def delete_all_unused_submodules(self):
        """Remove the submodules no ``call_module`` or ``get_attr`` node uses (nor their parents)."""
        used = set()
        for node in self.graph.nodes:
            if node.op in ("call_module", "get_attr"):
                atoms = node.target.split(".")
                used.update(".".join(atoms[:i]) for i in range(1, len(atoms) + 1))
                if node.op == "call_module":  # the module's own children are used by it
                    used.update(f"{node.target}.{name}" for name, _ in self.get_submodule(node.target).named_modules()
                                if name)
        for name, _ in sorted(self.named_modules(), key=lambda t: -t[0].count(".")):
            if name and name not in used:
                self.delete_submodule(name)

    def to_folder(self, folder, module_name: str = "FxModule"):
        """Write the module as a Python package: ``module.py`` (a class with the generated ``forward``),
        ``state_dict.pt`` and ``attributes.pkl`` (submodules, constants and the functions the code names); then
        ``from folder import <module_name>`` builds it again."""
        from ._folder import write_folder

        write_folder(self, folder, module_name)

    # -- copying and pickling ----------------------------------------------------------------------------------------
    def __reduce__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("_graph", "_code")}
        return _rebuild, (type(self).__name__, state, _serialize(self.graph))

    def __deepcopy__(self, memo):
        import copy

        # Unlike pickling, a deep copy keeps each node's ``meta`` (ShapeProp results, stack traces).
        state = {k: v for k, v in self.__dict__.items() if k not in ("_graph", "_code")}
        gm = GraphModule.__new__(GraphModule)
        memo[id(self)] = gm
        Module.__init__(gm)
        gm.__dict__.update(copy.deepcopy(state, memo))
        type(gm).__name__ = type(gm).__qualname__ = type(self).__name__
        gm.graph = copy.deepcopy(self.graph, memo)
        return gm

    def __copy__(self):
        gm = GraphModule(self, self.graph)
        gm.meta = getattr(self, "meta", {})  # shared, as in torch
        return gm


def _readable(gm, class_name):
    body = "".join(f"    {line}\n" for line in gm.code.splitlines())
    nested = [_readable(child, name) for name, child in gm.named_children() if isinstance(child, GraphModule)]
    nested = "".join("\n" + "".join(f"    {line}\n" if line else "\n" for line in n.splitlines()) for n in nested)
    return f"class {class_name}(jitorch.nn.Module):\n{body}{nested}"


class _NodeRef:
    def __init__(self, name):
        self.name = name


def _serialize(graph: Graph) -> list:
    """The graph as plain rows; call targets are stored as import paths where they have one."""
    rows = []
    for n in graph.nodes:
        target = n.target
        if n.op == "call_function":
            path = global_path(target)
            target = ("path", path) if path else ("object", target)
        ref = lambda x: _NodeRef(x.name)
        rows.append((n.op, n.name, target, map_arg(n.args, ref), map_arg(n.kwargs, ref)))
    return rows


def _deserialize(rows) -> Graph:
    g = Graph()
    env: dict[str, Node] = {}
    unref = lambda a: env[a.name] if isinstance(a, _NodeRef) else a
    from .node import map_aggregate

    for op, name, target, args, kwargs in rows:
        if op == "call_function":
            target = resolve_path(target[1]) if target[0] == "path" else target[1]
        env[name] = g.create_node(op, target, map_aggregate(args, unref), map_aggregate(kwargs, unref), name=name)
    return g


def _rebuild(class_name, state, rows):
    gm = GraphModule.__new__(GraphModule)
    Module.__init__(gm)
    gm.__dict__.update(state)
    type(gm).__name__ = type(gm).__qualname__ = class_name
    gm.graph = _deserialize(rows)
    return gm
