"""``split_module``: cut a traced module into submodules ``submod_<k>``, one per partition a callback assigns.

``split_callback(node)`` gives each computing node its partition (any hashable, usually an int). Each partition
becomes a GraphModule taking the values it reads from outside (the graph's inputs or other partitions' results)
and returning those it computes that are read outside; the top module calls the partitions in an order that
respects their dependencies (first appearance breaks ties) and returns what the original returned. ``get_attr``
nodes are copied into each partition that reads them, with their attributes.

>>> import jitorch
>>> from jitorch.fx import symbolic_trace
>>> gm = symbolic_trace(lambda x: ((x + 1) * 2).relu())
>>> split = split_module(gm, gm, lambda node: 0 if node.name == "add" else 1)
>>> [name for name, _ in split.named_children()], float(split(jitorch.tensor(1.0)))
(['submod_0', 'submod_1'], 4.0)
"""
from __future__ import annotations

import operator

from ..graph import Graph
from ..graph_module import GraphModule
from ..node import map_arg

__all__ = ["split_module"]


class _Partition:
    def __init__(self, key):
        self.key, self.name = key, f"submod_{key}"
        self.nodes, self.inputs, self.outputs = [], {}, {}  # inputs/outputs: insertion-ordered sets of nodes
        self.depends_on: set = set()


def _order(partitions):
    """The partitions in an order where each comes after those it reads from (Kahn), else first appearance."""
    done, ordered = set(), []
    pending = list(partitions.values())
    while pending:
        ready = next((p for p in pending if p.depends_on <= done), None)
        if ready is None:
            names = sorted(p.name for p in pending)
            raise RuntimeError(f"split_module: partitions {names} read each other's results (a cycle); assign the "
                               "nodes so that the partitions form a DAG")
        pending.remove(ready)
        done.add(ready.key)
        ordered.append(ready)
    return ordered


def split_module(m, root_m, split_callback, qualname_map=None, keep_original_order=False,
                 keep_original_node_name=False):
    """Split the GraphModule ``m`` (attributes taken from ``root_m``) by ``split_callback``; returns the new
    GraphModule. ``qualname_map``, when a dict, is filled with ``"submod_k.attr" -> original qualified name`` for
    the modules and attributes each partition uses."""
    partitions: dict = {}
    owner: dict = {}  # node -> its partition (computing nodes only)
    for node in m.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        key = split_callback(node)
        part = partitions.setdefault(key, _Partition(key))
        part.nodes.append(node)
        owner[node] = part
    for part in partitions.values():
        for node in part.nodes:
            for used in node.all_input_nodes:
                source = owner.get(used)
                if source is part or used.op == "get_attr":
                    continue
                part.inputs.setdefault(used)
                if source is not None:
                    source.outputs.setdefault(used)
                    part.depends_on.add(source.key)
    for used in m.graph.find_nodes(op="output")[0].all_input_nodes:
        if used in owner:
            owner[used].outputs.setdefault(used)

    top, env = Graph(), {}
    children = {}
    for node in m.graph.find_nodes(op="placeholder"):
        env[node] = top.node_copy(node)
    for part in _order(partitions):
        sub, sub_env = Graph(), {}
        for used in part.inputs:
            sub_env[used] = sub.placeholder(used.name)
        for node in part.nodes:
            for used in node.all_input_nodes:
                if used.op == "get_attr" and used not in sub_env:
                    sub_env[used] = sub.node_copy(used)
                    if qualname_map is not None:
                        qualname_map[f"{part.name}.{used.target}"] = used.target
            sub_env[node] = sub.node_copy(node, sub_env.__getitem__)
            if node.op == "call_module" and qualname_map is not None:
                qualname_map[f"{part.name}.{node.target}"] = node.target
        results = [sub_env[n] for n in part.outputs]
        sub.output(results[0] if len(results) == 1 else tuple(results))
        children[part.name] = GraphModule(root_m, sub, part.name)
        call = top.call_module(part.name, tuple(env[n] for n in part.inputs))
        if len(results) == 1:
            env[next(iter(part.outputs))] = call
        else:
            for i, n in enumerate(part.outputs):
                env[n] = top.call_function(operator.getitem, (call, i))
    def result(n):
        if n not in env:  # an attribute returned as it is: read by the top module
            env[n] = top.node_copy(n)
            children[n.target] = _fetch(root_m, n.target)
        return env[n]

    top.output(map_arg(m.graph.find_nodes(op="output")[0].args[0], result))
    return GraphModule(children, top)


def _fetch(root, target):
    for atom in target.split("."):
        root = getattr(root, atom)
    return root
