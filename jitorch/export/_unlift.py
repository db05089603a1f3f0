"""``ExportedProgram.module()``: the exported graph as a callable GraphModule that owns its state again.

The lifted placeholders become ``get_attr`` reads of the parameters, buffers and constants, registered at their
fully qualified names (``self.bn.running_mean``; the tensors are the program's own, shared with ``ep.state_dict``).
The module takes the original arguments: ``checked_leaves`` checks their structure against ``_in_spec`` (torch's
``ValueError`` text), ``_guards_fn`` checks each input against the export (ranks, static sizes, dynamic sizes in
their range and equal where they share a symbol, dtypes, devices, the values of non-tensor inputs: torch's
``AssertionError("Guard failed: x.size()[0] == 2")``), the new values of written buffers and inputs are copied into
them (``copy_``; `write_state` for parameters and buffers), and the outputs take their original structure
(``_out_spec``).

>>> import jitorch
>>> from jitorch.export import export
>>> m = export(jitorch.nn.Linear(4, 2), (jitorch.randn(3, 4),)).module()
>>> m(jitorch.randn(3, 4)).shape
jitorch.Size([3, 2])
>>> m(jitorch.randn(5, 4))
Traceback (most recent call last):
AssertionError: Guard failed: input.size()[0] == 3 (the program was exported for input of shape (3, 4); ...
"""
from __future__ import annotations

import operator

from .._tensor import Tensor
from ..autograd.grad_mode import no_grad
from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.make_fx import _primitive
from ..fx.node import Node
from ..nn.modules.module import Module
from ..nn.parameter import Parameter
from ..utils._pytree import tree_flatten, tree_unflatten
from .graph_signature import InputKind, OutputKind

__all__ = ["checked_leaves", "unlift", "GuardsFn", "write_state"]


def checked_leaves(args_kwargs, spec):
    """The leaves of ``(args, kwargs)``, which must have the structure ``spec`` the program was exported with."""
    leaves, got = tree_flatten(args_kwargs)
    if got != spec:
        raise ValueError(f"Trying to flatten user inputs with exported input tree spec: \n{spec}\nbut actually got "
                         f"inputs with tree spec of: \n{got}.\nPlease check that the inputs have the same number and "
                         "type of args and kwargs as the ones you used when tracing.")
    return leaves


def write_state(dest, value):
    """A written parameter or buffer takes its new value outside autograd: the program's write was a state update
    (``weight.clamp_`` under ``no_grad``, running statistics), and a parameter is a leaf that requires grad."""
    with no_grad():
        dest.copy_(value)


class GuardsFn(Module):
    """Checks the flattened inputs of a call against the export: ``checks`` per input ``(name, kind, expected)``,
    ``ranges`` ``{symbol name: (lo, hi)}``."""

    def __init__(self, checks, ranges):
        super().__init__()
        self.checks, self.ranges = checks, ranges

    def forward(self, *leaves):
        sizes = {}
        for (name, kind, expected), value in zip(self.checks, leaves):
            if kind == "constant":
                if value != expected:
                    raise AssertionError(f"Guard failed: {name} == {expected!r} (got {value!r}): the program was "
                                         f"exported with {name} = {expected!r} baked in; export again for another "
                                         "value")
                continue
            shape, dtype, device = expected
            if not isinstance(value, Tensor):
                raise AssertionError(f"Guard failed: {name} is a Tensor (got {type(value).__name__})")
            got = tuple(value.shape)
            if len(got) != len(shape):
                raise AssertionError(f"Guard failed: {name}.dim() == {len(shape)} (got shape {got}; the program was "
                                     f"exported for {name} of shape {_shown(shape)})")
            for d, (want, n) in enumerate(zip(shape, got)):
                where = f"{name}.size()[{d}]"
                if isinstance(want, int):
                    if n != want:
                        raise AssertionError(
                            f"Guard failed: {where} == {want} (the program was exported for {name} of shape "
                            f"{_shown(shape)}; got {got}: mark dimension {d} dynamic with torch.export.Dim in "
                            "dynamic_shapes to accept other sizes)")
                    continue
                lo, hi = self.ranges[want]
                if n < lo:
                    raise AssertionError(f"Guard failed: {where} >= {lo} (got {n}; {want} has the range [{lo}, {hi}])")
                if n > hi:
                    raise AssertionError(f"Guard failed: {where} <= {hi} (got {n}; {want} has the range [{lo}, {hi}])")
                first = sizes.setdefault(want, (where, n))
                if first[1] != n:
                    raise AssertionError(f"Guard failed: {where} == {first[0]} (got {n} and {first[1]}: both are "
                                         f"the dynamic size {want})")
            if value._data.dtype.name != dtype:
                raise AssertionError(f"Guard failed: {name}.dtype == torch.{dtype} (got {value.dtype}); cast the "
                                     "input or export again with an input of that dtype")
            if str(value.device) != device:
                raise AssertionError(f"Guard failed: {name}.device == {device} (got {value.device})")


def _shown(shape):
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def input_checks(ep):
    """``GuardsFn.checks`` for ``ep``'s user inputs, from their placeholders' metadata."""
    checks = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        node = next(n for n in ep.graph.find_nodes(op="placeholder") if n.target == spec.arg.name)
        if "constant" in node.meta or "val" not in node.meta:
            checks.append((node.target, "constant", node.meta.get("constant")))
            continue
        shape = node.meta.get("sym_shape") or node.meta["val"][0]
        dtype = node.meta["val"][1].name
        checks.append((node.target, "tensor", (tuple(shape), dtype, node.meta.get("device", "cpu"))))
    return checks


def _install(root, target, value, kind, persistent=True):
    *prefix, last = target.split(".")
    for atom in prefix:
        if not isinstance(getattr(root, atom, None), Module):
            root.add_module(atom, Module())
        root = getattr(root, atom)
    if kind == "parameter" and isinstance(value, Parameter):
        root.register_parameter(last, value)
    elif kind in ("parameter", "buffer"):
        root.register_buffer(last, value, persistent=persistent)
    else:
        setattr(root, last, value)


def unlift(ep, guards=True):
    """The GraphModule ``ep.module()`` returns (``guards=False``: without the input checks, for re-tracing)."""
    graph, root = Graph(), Module()
    sig, lifted = ep.graph_signature, ep.graph
    call = ep._forward_call  # (positional argument names, keyword argument names)
    tops = [graph.placeholder(n) for n in call[0] + call[1]]
    args_kwargs = (tuple(tops[:len(call[0])]), {k: ph for k, ph in zip(call[1], tops[len(call[0]):])})
    flat = graph.call_function(checked_leaves, (args_kwargs, graph.get_attr("_in_spec")))
    env, leaves, by_target = {}, [], {}
    placeholders = {n.target: n for n in lifted.find_nodes(op="placeholder")}
    for spec in sig.input_specs:
        ph = placeholders[spec.arg.name]
        by_target[spec.arg.name if spec.kind == InputKind.USER_INPUT else spec.target] = ph
        if spec.kind == InputKind.USER_INPUT:
            node = graph.call_function(operator.getitem, (flat, len(leaves)), name=ph.name)
            node.meta = dict(ph.meta)
            leaves.append(node)
        else:
            value = ep.state_dict.get(spec.target, ep.constants.get(spec.target))
            kind = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer"}.get(spec.kind, "constant")
            _install(root, spec.target, value, kind, spec.persistent is not False)
            node = graph.get_attr(spec.target)
            node.meta = dict(ph.meta)
        env[ph] = node
    if guards:
        root.add_module("_guards_fn", GuardsFn(input_checks(ep), {str(k): (v.lower, v.upper)
                                                                   for k, v in ep.range_constraints.items()}))
        graph.call_module("_guards_fn", tuple(leaves))
    out = None
    for node in lifted.nodes:
        if node.op == "output":
            out = node.args[0]
        elif node.op != "placeholder":
            env[node] = graph.node_copy(node, lambda n: env[n])
    user = []
    for spec, value in zip(sig.output_specs, out):
        value = env[value] if isinstance(value, Node) else value
        if spec.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT):
            user.append(value)
            continue
        dest = env[by_target[spec.target]]
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            graph.call_function(_primitive("copy", True), (dest, value))
        else:
            graph.call_function(write_state, (dest, value))
    root._in_spec, root._out_spec = ep.call_spec.in_spec, ep.call_spec.out_spec
    graph.output(graph.call_function(tree_unflatten, (user, graph.get_attr("_out_spec"))))
    gm = GraphModule(root, graph)
    gm.meta["exported_program"] = True
    return gm
