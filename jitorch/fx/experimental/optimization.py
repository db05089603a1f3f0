"""Inference rewrites of ``torch.fx.experimental.optimization``: fold BatchNorm into the conv/linear before it
(:func:`fuse`), drop Dropout layers (:func:`remove_dropout`), and cut a subgraph out as its own module.

>>> import jitorch
>>> from jitorch import nn
>>> from jitorch.fx.experimental.optimization import fuse
>>> m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
>>> [type(c).__name__ for c in fuse(m).children()]
['Conv2d', 'ReLU']
"""
from __future__ import annotations

import copy

from ... import nn
from ...nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval
from ..graph import Graph
from ..graph_module import GraphModule
from ..interpreter import Transformer
from ..node import Node
from ..tracer import symbolic_trace

__all__ = ["matches_module_pattern", "replace_node_module", "fuse", "remove_dropout", "extract_subgraph"]


def _parent_name(target: str) -> tuple[str, str]:
    *parent, name = target.rsplit(".", 1)
    return parent[0] if parent else "", name


def matches_module_pattern(pattern, node: Node, modules: dict) -> bool:
    """Whether ``node`` and its first argument are ``call_module`` nodes of exactly the two types of ``pattern``
    (the argument's first)."""
    if len(node.args) == 0:
        return False
    for expected_type, current in zip(pattern, (node.args[0], node)):
        if not isinstance(current, Node) or current.op != "call_module" or not isinstance(current.target, str):
            return False
        if current.target not in modules or type(modules[current.target]) is not expected_type:
            return False
    return True


def replace_node_module(node: Node, modules: dict, new_module) -> None:
    """Install ``new_module`` where ``node``'s target module was (in the model and in ``modules``)."""
    if not isinstance(node.target, str):
        raise AssertionError(f"Expected str target, got {type(node.target)}")
    parent_name, name = _parent_name(node.target)
    modules[node.target] = new_module
    setattr(modules[parent_name], name, new_module)


_PATTERNS = ((nn.Conv1d, nn.BatchNorm1d), (nn.Conv2d, nn.BatchNorm2d), (nn.Conv3d, nn.BatchNorm3d),
             (nn.Linear, nn.BatchNorm1d))


def fuse(model, inplace: bool = False, no_trace: bool = False):
    """Fold each BatchNorm that only follows a conv or linear layer into that layer's weights, for inference (the
    BatchNorm's running statistics are used). Works on a deep copy unless ``inplace``."""
    if not inplace:
        model = copy.deepcopy(model)
    fx_model = model if no_trace and isinstance(model, GraphModule) else symbolic_trace(model)
    modules = dict(fx_model.named_modules())
    new_graph = copy.deepcopy(fx_model.graph)
    for pattern in _PATTERNS:
        for node in new_graph.nodes:
            if not matches_module_pattern(pattern, node, modules) or len(node.args[0].users) > 1:
                continue  # the layer's output is also read elsewhere: it must stay unfused
            first, bn = modules[node.args[0].target], modules[node.target]
            if not bn.track_running_stats:
                continue
            fused = fuse_linear_bn_eval(first, bn) if pattern[0] is nn.Linear else fuse_conv_bn_eval(first, bn)
            replace_node_module(node.args[0], modules, fused)
            node.replace_all_uses_with(node.args[0])
            new_graph.erase_node(node)
    return GraphModule(fx_model, new_graph)


class _DropoutRemover(Transformer):
    def call_module(self, target, args, kwargs):
        if isinstance(self.submodules[target], nn.Dropout):
            if len(args) != 1:
                raise AssertionError(f"Expected 1 arg for Dropout, got {len(args)}")
            return args[0]
        return super().call_module(target, args, kwargs)


def remove_dropout(model):
    """``model`` traced, with its ``nn.Dropout`` layers taken out."""
    return _DropoutRemover(symbolic_trace(model)).transform()


def extract_subgraph(orig_module, nodes: list, inputs: list, outputs: list) -> GraphModule:
    """A module running ``nodes`` (of a graph of ``orig_module``), taking ``inputs`` and returning ``outputs``."""
    new_graph = Graph()
    env: dict = {}
    for node in inputs:
        env[node] = new_graph.placeholder(node.name)
    for node in nodes:
        env[node] = new_graph.node_copy(node, lambda x: env[x])
    new_graph.output([env[out] for out in outputs])
    new_graph.lint()
    return GraphModule(orig_module, new_graph)
