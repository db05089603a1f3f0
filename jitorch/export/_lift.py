"""The exported graph: a trace with the module's state lifted to inputs, and its signature.

torch's conventions: placeholders for every parameter (``p_<fqn>``), then every buffer (``b_<fqn>``), then the
tensors the code closed over or made from data (``c_lifted_tensor_<k>``; ``zeros(n)``, ``arange(n)`` and the other
creation calls are nodes of the graph), then the user's inputs, flattened (``x``,
``ys_0``...; a non-tensor input keeps a placeholder, its value baked in); outputs: the new values of the written
buffers (``BUFFER_MUTATION``), parameters and inputs, in input order, then the user's outputs, flattened. Sizes
that depend on a dynamic dimension are computed from the inputs (`_symbolic.Symbolizer`), and each placeholder and
node carries ``meta["sym_shape"]`` (its shape with symbols) next to make_fx's ``meta["val"]`` (the traced sizes).

>>> import jitorch
>>> from jitorch.export import export
>>> ep = export(jitorch.nn.BatchNorm1d(2), (jitorch.randn(4, 2),))
>>> [s.arg.name for s in ep.graph_signature.input_specs]
['p_weight', 'p_bias', 'b_running_mean', 'b_running_var', 'b_num_batches_tracked', 'input']
>>> [str(s) for s in ep.graph_signature.output_specs][2:]
["copy_2: BUFFER_MUTATION target='num_batches_tracked'", 'getitem: USER_OUTPUT']
"""
from __future__ import annotations

import re

from ..fx.graph import Graph
from ..fx.node import Node
from ..fx.passes.shape_prop import extract_tensor_metadata
from .._tensor import Tensor
from ._symbolic import Symbolizer, remap
from ._trace import module_tensors, state_keys
from .dynamic_shapes import Symbol, ValueRanges
from .graph_signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                              TensorArgument)

__all__ = ["Lifted", "lift"]

_MUTATION = {"parameter": OutputKind.PARAMETER_MUTATION, "buffer": OutputKind.BUFFER_MUTATION,
             "input": OutputKind.USER_INPUT_MUTATION}


class Lifted:
    """``graph``, ``signature``, ``state_dict`` (parameters and persistent buffers), ``constants`` (non-persistent
    buffers, lifted tensors) and ``range_constraints`` of an export."""

    def __init__(self, graph, signature, state_dict, constants, range_constraints):
        self.graph, self.signature, self.state_dict = graph, signature, state_dict
        self.constants, self.range_constraints = constants, range_constraints


def _tensor_meta(node, t):
    data = t._data
    node.meta.update(val=(tuple(data.shape), data.dtype), stride=tuple(data.strides),
                     tensor_meta=extract_tensor_metadata(t), device=str(t.device))
    return node


def lift(mod, traced, fit, syms, flat, names):
    """The `Lifted` export of ``traced`` (the template trace of ``mod`` on the flat inputs named ``names``)."""
    gm, recipes = traced.gm, traced.recording.recipes
    graph = Graph()
    sym = Symbolizer(graph, fit, names=[s.name for s in syms])
    marked = {node: sym.mark(gm, node, recipes) for node in gm.graph.nodes}
    entries = module_tensors(mod)
    keys = state_keys(entries)
    inputs, env, state, consts, by_key = [], {}, {}, {}, {}

    def state_input(kind, target, t, name, persistent=None):
        ph = _tensor_meta(graph.placeholder(name), t)
        inputs.append(InputSpec(kind, TensorArgument(ph.target), target, persistent))
        return ph

    for kind, fqn, t, persistent in entries:  # one input per name: a tied tensor has several, as in torch
        prefix, which = ("p", InputKind.PARAMETER) if kind == "parameter" else ("b", InputKind.BUFFER)
        by_key[(kind, fqn)] = state_input(which, fqn, t, f"{prefix}_{_stripped(fqn)}", persistent)
        (state if persistent is not False else consts)[fqn] = t
    lifted = {}  # id of a constant -> its placeholder
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        obj = getattr(gm, node.target)
        found = keys.get(id(obj))
        if found is not None:
            env[node] = by_key[found]
        elif not _made_in_graph(marked[node][3]):
            if id(obj) not in lifted:
                target = f"lifted_tensor_{len(lifted)}"
                lifted[id(obj)] = state_input(InputKind.CONSTANT_TENSOR, target, obj, f"c_{target}")
                consts[target] = obj
            env[node] = lifted[id(obj)]
    users = {}
    for node in gm.graph.find_nodes(op="placeholder"):
        i = int(node.target[3:])
        ph = graph.placeholder(names[i])
        ph.meta = dict(node.meta)
        if isinstance(flat[i], Tensor):
            ph.meta.update(sym_shape=sym.shape(marked[node][2]), device=str(flat[i].device))
            arg = TensorArgument(ph.target)
        else:
            ph.meta["constant"] = flat[i]
            arg = ConstantArgument(ph.target, flat[i])
        inputs.append(InputSpec(InputKind.USER_INPUT, arg, None))
        env[node] = users[i] = by_key[("input", i)] = ph
    sym.sources = [(users[s.uses[0][0]], s.uses[0][1]) for s in syms]

    out_node = None
    for node in gm.graph.nodes:
        if node in env or node.op == "placeholder":
            continue
        args, kwargs, meta, const = marked[node]
        if node.op == "output":
            out_node = node
            continue
        if node.op == "get_attr":  # a tensor a creation function made: made in the graph
            fn, fargs, fkwargs = const[1], sym.resolve(const[2]), sym.resolve(const[3])
            new = graph.call_function(fn, tuple(fargs), dict(fkwargs), name=getattr(fn, "__name__", None))
        else:
            new = graph.create_node(node.op, node.target, remap(sym.resolve(args), env),
                                    remap(sym.resolve(kwargs), env), name=node.name)
        new.meta = dict(node.meta)
        shape = sym.shape(meta)
        if shape is not None:
            new.meta["sym_shape"] = shape
        env[node] = new
    outputs, specs = [], []
    for spec in inputs:  # the written state, in input order
        key = next((k for k, ph in by_key.items() if ph.target == spec.arg.name), None)
        if key in traced.writes:
            new = env[traced.writes[key]]
            outputs.append(new)
            target = spec.arg.name if key[0] == "input" else key[1]
            specs.append(OutputSpec(_MUTATION[key[0]], TensorArgument(_arg_name(new)), target))
    for value in remap(out_node.args[0], env):
        outputs.append(value)
        arg = (TensorArgument(_arg_name(value)) if isinstance(value, Node) else ConstantArgument("", value))
        specs.append(OutputSpec(OutputKind.USER_OUTPUT, arg, None))
    graph.output(tuple(outputs))
    graph.lint()
    ranges = {Symbol(s.name): ValueRanges(s.lo, s.hi) for s in syms}
    return Lifted(graph, ExportGraphSignature(inputs, specs), state, consts, ranges)


def _stripped(fqn):
    """torch's placeholder stem of a state's name: dots to ``_``, a leading ``self_`` dropped (``self_attn.w`` ->
    ``attn_w``, as torch's placeholder naming pass does)."""
    name = fqn.replace(".", "_")
    return re.sub(r"[^a-zA-Z0-9]", "_", name[len("self_"):] if name.startswith("self_") else name)


def _arg_name(node):
    """A value's name in the signature: a placeholder's target (its parameter name), else the node's name."""
    return node.target if node.op == "placeholder" else node.name


def _made_in_graph(const):
    """Whether a constant is made by a creation call in the graph (``zeros(n, 4)``, as torch records ``aten.zeros``)
    rather than lifted: everything a creation function made from sizes; ``tensor(data)`` is lifted, as torch's."""
    return isinstance(const, tuple) and const[:1] == ("recipe",) and getattr(const[1], "__name__", "") != "tensor"
