"""One trace of a module for ``export``: make_fx's primitives on the (flattened) inputs, made functional.

The module runs once under make_fx's recording mode (real values, host reads of input-dependent values refused),
with the sizes it reads recorded (`_compile.sym_sizes.recording_sizes`, for dynamic dimensions) and its buffers,
inputs and random generators put back afterwards: exporting changes nothing the caller can see. In-place writes
into the module's parameters and buffers and into the inputs then become out-of-place nodes (`Traced.writes`:
the last value of each written tensor, which the exported graph returns), and so do the in-place ops on the
graph's own values (``ReLU(inplace=True)``).

>>> import jitorch
>>> bn = jitorch.nn.BatchNorm1d(2)
>>> flat, spec = flatten_inputs((jitorch.randn(4, 2),), {})
>>> t = trace_module(bn, flat, spec)
>>> list(t.writes), int(bn.num_batches_tracked)
([('buffer', 'num_batches_tracked'), ('buffer', 'running_mean'), ('buffer', 'running_var')], 0)
"""
from __future__ import annotations

import re

from .._compile.functionalize import CompileState, functional_ops, functionalize_intermediates
from .._compile.sym_sizes import recording_sizes
from .._tensor import Tensor
from ..fx._fake import DataDependentOutputException
from ..fx.graph_module import GraphModule
from ..fx.make_fx import Primitive, _primitive, record_graph
from ..utils._pytree import tree_flatten, tree_unflatten
from ..utils._pytree_keys import GetAttrKey, MappingKey, SequenceKey, tree_flatten_with_path
from ._errors import data_dependent
from .dynamic_shapes import argument_names

__all__ = ["Traced", "flatten_inputs", "leaf_names", "trace_module", "module_tensors"]


def flatten_inputs(args, kwargs):
    """``(leaves, spec)`` of the call's ``(args, kwargs)``, as torch's ``in_spec``."""
    return tree_flatten((tuple(args), dict(kwargs)))


def _key(k):
    if isinstance(k, SequenceKey):
        return str(k.idx)
    if isinstance(k, MappingKey):
        return str(k.key)
    return k.name if isinstance(k, GetAttrKey) else str(k)


def leaf_names(mod, args, kwargs):
    """A placeholder name per input leaf, as torch's: the argument's name, then the keys inside it (``ys_1_z``)."""
    names = argument_names(mod, args, kwargs)
    out = []
    for path, _ in tree_flatten_with_path((tuple(args), dict(kwargs)))[0]:
        which = path[1]
        top = names[which.idx] if isinstance(which, SequenceKey) else str(which.key)
        name = "_".join([top] + [_key(k) for k in path[2:]])
        out.append(re.sub(r"\W", "_", name))
    return out


def module_tensors(mod):
    """``{id: (kind, fqn, tensor, persistent)}`` of the module's parameters and buffers (first name of a tied one)."""
    out = {}
    for fqn, p in mod.named_parameters():
        out.setdefault(id(p), ("parameter", fqn, p, None))
    for prefix, m in mod.named_modules():
        for name, b in m._buffers.items():
            if b is not None:
                fqn = f"{prefix}.{name}" if prefix else name
                out.setdefault(id(b), ("buffer", fqn, b, name not in m._non_persistent_buffers_set))
    return out


class Traced:
    """A trace: ``gm`` (its constants are the module's tensors and the tensors the call made), ``recording``
    (sizes read and creation recipes), ``out_spec``, and ``writes``: ``{(kind, fqn or input index): node}``."""

    def __init__(self, gm, recording, out_spec, writes):
        self.gm, self.recording, self.out_spec, self.writes = gm, recording, out_spec, writes

    @property
    def extra(self):
        """What must agree between traces at different sizes besides the graph."""
        return self.out_spec, tuple(self.writes)


def trace_module(mod, flat, in_spec, decompositions=None):
    """Trace ``mod`` called on ``tree_unflatten(flat, in_spec)``; see the module docstring."""
    specs = []

    def call(*leaves):
        args, kwargs = tree_unflatten(list(leaves), in_spec)
        out, spec = tree_flatten(mod(*args, **kwargs))
        specs.append(spec)
        return out

    state = CompileState(list(mod.buffers()) + [t for t in flat if isinstance(t, Tensor)])
    try:
        with recording_sizes() as rec:
            graph, root = record_graph(call, flat, decompositions, refuse_value_reads=True)
    except DataDependentOutputException as err:
        raise data_dependent(err) from err
    finally:
        state.restore()
    gm = GraphModule(root, graph)
    tensors = module_tensors(mod)
    owners = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            found = tensors.get(id(getattr(gm, node.target)))
            if found is not None:
                owners[node] = found[:2]
        elif node.op == "placeholder":
            i = int(node.target[3:])
            if isinstance(flat[i], Tensor):
                owners[node] = ("input", i)
    writes = _functionalize(graph, owners)
    functionalize_intermediates(gm)
    return Traced(gm, rec, specs[0], writes)


def _functionalize(graph, owners):
    """In-place writes into ``owners`` (node -> key) as out-of-place nodes; ``{key: node of the last value}`` in
    order of first write. Later readers already read the write's node, which the new one replaces."""
    writes = {}
    for node in list(graph.nodes):
        target = node.target
        if not (node.op == "call_function" and isinstance(target, Primitive) and target.inplace and node.args
                and node.args[0] in owners):
            continue
        old = node.args[0]
        names = functional_ops(target.op)
        with graph.inserting_before(node):
            new = graph.call_function(_primitive(names[0]), node.args, dict(node.kwargs))
            new.meta = dict(node.meta)
            if len(names) > 1:  # the written tensor keeps its dtype and shape
                new = graph.call_function(_primitive("copy"), (old, new))
                new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        owners[new] = owners[old]
        writes[owners[old]] = new
    return writes
