"""``torch.export``: a module traced ahead of time into one functional graph of jitorch primitives.

``export(model, args)`` runs the model once under make_fx (the op-table primitives it dispatches, with shapes and
dtypes), turns in-place writes of its buffers and inputs into returned values, and lifts its parameters, buffers
and constants to inputs (`_lift`). The program is in the form torch's ``export(...).run_decompositions()``
returns: functional, its writes of buffers, parameters and inputs in the signature (``BUFFER_MUTATION`` outputs),
where torch's ``export`` alone keeps in-place ``copy_`` nodes in its graph. Python control flow is resolved while
tracing: a branch on sizes is specialized (or must hold over a dynamic dimension's whole range), a branch on values
raises `GuardOnDataDependentSymNode` naming the line. ``dynamic_shapes`` with `Dim` makes dimensions symbolic
(`_fit`): the graph computes the sizes it needs from its inputs and runs every size in range. ``ep.module()`` is a
callable GraphModule with the state; ``save``/``load`` write and read a zip archive (JSON graph and signature,
tensors in torch's checkpoint format).

>>> import jitorch
>>> import jitorch.nn as nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
>>> ep = export(model, (jitorch.randn(6, 4),))
>>> [s.kind.name for s in ep.graph_signature.output_specs]
['BUFFER_MUTATION', 'BUFFER_MUTATION', 'BUFFER_MUTATION', 'USER_OUTPUT']
>>> m = ep.module()
>>> m(jitorch.randn(6, 4)).shape, int(m.get_buffer("1.num_batches_tracked"))
(jitorch.Size([6, 8]), 1)
>>> ep = export(model.eval(), (jitorch.randn(6, 4),), dynamic_shapes={"input": {0: Dim("batch", min=2, max=64)}})
>>> ep.module()(jitorch.randn(10, 4)).shape, ep.range_constraints
(jitorch.Size([10, 8]), {s0: VR[2, 64]})
"""
from __future__ import annotations

from ..nn.modules.module import Module
from ._errors import GuardOnDataDependentSymNode, UserError, UserErrorType
from ._fit import fit_dynamic
from ._lift import lift
from ._trace import flat_call_inputs, leaf_names, trace_module
from .dynamic_shapes import Dim, DimHint, ValueRanges, argument_names, dims, int_oo, resolve
from .exported_program import CallSpec, ExportedProgram, ModuleCallEntry, ModuleCallSignature
from .graph_signature import (ConstantArgument, ExportBackwardSignature, ExportGraphSignature, InputKind, InputSpec,
                              OutputKind, OutputSpec, SymIntArgument, TensorArgument)
from ._serialize import load, save

__all__ = ["export", "export_for_training", "save", "load", "Dim", "dims", "DimHint",
           "ExportedProgram", "ExportGraphSignature", "ExportBackwardSignature", "InputKind", "InputSpec",
           "OutputKind", "OutputSpec", "TensorArgument", "SymIntArgument", "ConstantArgument", "CallSpec",
           "ModuleCallEntry", "ModuleCallSignature", "ValueRanges", "default_decompositions", "UserError",
           "UserErrorType", "GuardOnDataDependentSymNode", "int_oo"]


def export(mod, args, kwargs=None, *, dynamic_shapes=None, strict=False, preserve_module_call_signature=(),
           prefer_deferred_runtime_asserts_over_guards=False):
    """``torch.export.export``: an `ExportedProgram` of ``mod(*args, **kwargs)``; see the module docstring.

    ``strict`` is accepted (jitorch always traces by running the Python, as torch's non-strict mode);
    ``preserve_module_call_signature`` is accepted and changes nothing (submodules are traced through).

    ``forward`` and the module's hooks run once per trace: once, or with ``dynamic_shapes`` once per probe size
    (3^n + n for n symbols, and one per size below the example's down to each range's minimum). The module's
    parameters and buffers (written in place or reassigned), the inputs and the random generators are put back
    after each trace; other Python side effects (a counter attribute, a list appended to, a print) happen each
    time.
    """
    if not isinstance(mod, Module):
        raise ValueError(f"Expected `mod` to be an instance of `torch.nn.Module`, got {type(mod)}.")
    if not isinstance(args, tuple):
        raise UserError(UserErrorType.INVALID_INPUT,
                        f"Expecting `args` to be a tuple of example positional inputs, got {type(args)}")
    kwargs = dict(kwargs or {})
    return _export_impl(mod, args, kwargs, resolve(mod, args, kwargs, dynamic_shapes))


export_for_training = export  # torch 2.5-2.8's name for the same entry point


def default_decompositions():
    """The decompositions ``run_decompositions()`` applies by default: none (jitorch's graphs are primitives)."""
    return {}


def _export_impl(mod, args, kwargs, dyn, decompositions=None):
    flat, in_spec = flat_call_inputs(args, kwargs)
    names = leaf_names(mod, args, kwargs)
    template, fit, syms = fit_dynamic(lambda inputs: trace_module(mod, inputs, in_spec, decompositions), flat,
                                      dyn, names)
    lifted = lift(mod, template, fit, syms, flat, names)
    signature = ModuleCallSignature([], [], in_spec, template.out_spec, argument_names(mod, args, kwargs))
    call_graph = [ModuleCallEntry("", signature)] + [ModuleCallEntry(name, None)
                                                     for name, _ in mod.named_modules() if name]
    return ExportedProgram(None, lifted.graph, lifted.signature, lifted.state_dict, lifted.range_constraints,
                           call_graph, (tuple(args), kwargs), lifted.constants)


def _export_dims(ep):
    """The ``[(flat index, dim, Dim)]`` of ``ep``'s user inputs, from their symbolic shapes (to trace it again)."""
    made, out, i = {}, [], 0
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        node = next(n for n in ep.graph.find_nodes(op="placeholder") if n.target == spec.arg.name)
        for d, size in enumerate(node.meta.get("sym_shape") or ()):
            if isinstance(size, str):
                vr = next(v for k, v in ep.range_constraints.items() if str(k) == size)
                out.append((i, d, made.setdefault(size, Dim(size, min=vr.lower, max=vr.upper))))
        i += 1
    return out

