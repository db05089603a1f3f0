"""One trace of a module for ``export``: make_fx's primitives on the (flattened) inputs, made functional.

The module runs once under make_fx's recording mode (real values, host reads of input-dependent values refused),
with the sizes it reads recorded (`_compile.sym_sizes.recording_sizes`, for dynamic dimensions) and its
parameters, buffers, inputs and random generators put back afterwards: exporting changes nothing the caller can
see. In-place writes into the module's parameters and buffers and into the inputs then become out-of-place nodes
(`Traced.writes`: the last value of each written tensor, which the exported graph returns), and so do the in-place
ops on the graph's own values (``ReLU(inplace=True)``). A parameter or buffer that ``forward`` reassigns
(``self.avg = self.avg * 0.9 + x.mean()``) is a write too: its new value is the written one, and the module gets
its original tensor back.

>>> import jitorch
>>> bn = jitorch.nn.BatchNorm1d(2)
>>> flat, spec = flat_call_inputs((jitorch.randn(4, 2),), {})
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

__all__ = ["Traced", "flat_call_inputs", "leaf_names", "trace_module", "module_tensors", "state_keys"]


def flat_call_inputs(args, kwargs):
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
    """``[(kind, fqn, tensor, persistent)]``: the module's parameters, then its buffers, under every name (a tied
    tensor once per name, as torch lifts it); ``persistent`` is None for a parameter."""
    out = [("parameter", fqn, p, None) for fqn, p in mod.named_parameters(remove_duplicate=False)]
    for prefix, m in mod.named_modules(remove_duplicate=False):
        for name, b in m._buffers.items():
            if b is not None:
                fqn = f"{prefix}.{name}" if prefix else name
                out.append(("buffer", fqn, b, name not in m._non_persistent_buffers_set))
    return out


def state_keys(entries):
    """``{id(tensor): (kind, fqn)}`` over `module_tensors` entries: a tied tensor is read and written under its
    last name, as torch's graph reads it."""
    return {id(t): (kind, fqn) for kind, fqn, t, _ in entries}


def _slots(mod):
    """``{(id(module), kind, name): (module, tensor)}``: every parameter and buffer slot before a trace."""
    return {(id(m), kind, name): (m, t) for m in mod.modules()
            for kind, table in (("parameter", m._parameters), ("buffer", m._buffers)) for name, t in table.items()}


def _reassigned(slots):
    """``[(original tensor, new tensor)]`` of the slots ``forward`` gave another tensor; the originals go back."""
    moved = []
    for (_, kind, name), (m, t) in slots.items():
        table = m._parameters if kind == "parameter" else m._buffers
        now = table.get(name)
        if now is not t:
            table[name] = t
            if isinstance(t, Tensor) and isinstance(now, Tensor):
                moved.append((t, now))
    return moved


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
    specs, slots, moved = [], _slots(mod), []

    def call(*leaves):
        args, kwargs = tree_unflatten(list(leaves), in_spec)
        out, spec = tree_flatten(mod(*args, **kwargs))
        specs.append(spec)
        moved.extend(_reassigned(slots))
        return out + [new for _, new in moved]  # the new values of reassigned slots: outputs of the trace for now

    state = CompileState(list(mod.buffers()) + list(mod.parameters()) + [t for t in flat if isinstance(t, Tensor)])
    try:
        with recording_sizes() as rec:
            graph, root = record_graph(call, flat, decompositions, refuse_value_reads=True)
    except DataDependentOutputException as err:
        raise data_dependent(err) from err
    finally:
        _reassigned(slots)  # forward raised after a reassignment
        state.restore()
    gm = GraphModule(root, graph)
    keys = state_keys(module_tensors(mod))
    owners = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            found = keys.get(id(getattr(gm, node.target)))
            if found is not None:
                owners[node] = found
        elif node.op == "placeholder":
            i = int(node.target[3:])
            if isinstance(flat[i], Tensor):
                owners[node] = ("input", i)
    writes = _functionalize(graph, owners)
    functionalize_intermediates(gm)
    if moved:  # after the passes above, which may replace the nodes of the new values
        out_node = graph.output_node()
        values = list(out_node.args[0])
        n = len(values) - len(moved)
        out_node.args = (values[:n],)
        for (old, _), node in zip(moved, values[n:]):
            writes[keys[id(old)]] = node
        gm.recompile()
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
