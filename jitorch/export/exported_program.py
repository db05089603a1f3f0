"""``ExportedProgram``: what ``jitorch.export.export`` returns.

It holds the functional graph (``graph_module``/``graph``: state lifted to inputs, written buffers returned: the
form torch's ``export(...).run_decompositions()`` returns, mutations functionalized in the signature), its
``graph_signature``, the ``state_dict`` (parameters and persistent buffers, shared with the exported module) and
``constants``, ``range_constraints`` of its symbolic sizes, the ``example_inputs``, and the input/output structure
(``call_spec``, ``module_call_graph``). ``module()`` gives a callable module; ``run_decompositions`` a program whose
ops a table decomposed further (jitorch's graphs are already made of op-table primitives, torch's core set's
counterpart, so without a table it is a copy). Printing shows the graph with shapes, the signature and the ranges.

>>> import jitorch
>>> from jitorch.export import export
>>> ep = export(jitorch.nn.Linear(4, 2), (jitorch.randn(3, 4),))
>>> print(ep)  # doctest: +ELLIPSIS
ExportedProgram:
    class GraphModule(jitorch.nn.Module):
        def forward(self, p_weight: "f32[2, 4]", p_bias: "f32[2]", input: "f32[3, 4]"):
            input_1 = input
            linear: "f32[3, 2]" = _linear(input_1, p_weight, p_bias);  input_1 = p_weight = p_bias = None
            return (linear,)
<BLANKLINE>
Graph signature:
    # inputs
    p_weight: PARAMETER target='weight'
    p_bias: PARAMETER target='bias'
    input: USER_INPUT
<BLANKLINE>
    # outputs
    linear: USER_OUTPUT
<BLANKLINE>
Range constraints: {}
<BLANKLINE>
"""
from __future__ import annotations

import copy
import re
import types
from collections import namedtuple

from ..fx.graph_module import GraphModule
from ..nn.modules.module import Module
from ._unlift import unlift

__all__ = ["ExportedProgram", "CallSpec", "ModuleCallEntry", "ModuleCallSignature", "annotated_code"]

CallSpec = namedtuple("CallSpec", ["in_spec", "out_spec"])
ModuleCallSignature = namedtuple("ModuleCallSignature", ["inputs", "outputs", "in_spec", "out_spec",
                                                         "forward_arg_names"])
ModuleCallEntry = namedtuple("ModuleCallEntry", ["fqn", "signature"])

# torch's short dtype names in printed graphs
_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64", "int32": "i32",
          "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "b8", "complex64": "c64", "complex128": "c128"}


def _annotation(node):
    if "sym" in node.meta and node.meta["sym"] is not None:
        return f'"Sym({node.meta["sym"]})"'
    val = node.meta.get("val")
    if not (isinstance(val, tuple) and len(val) == 2 and isinstance(val[0], tuple)):
        return None
    shape = node.meta.get("sym_shape") or val[0]
    name = getattr(val[1], "name", str(val[1]))
    return f'"{_SHORT.get(name, name)}[{", ".join(str(s) for s in shape)}]"'


def annotated_code(gm):
    """``gm.code`` with each placeholder and node annotated with its dtype and (symbolic) shape, as torch prints."""
    nodes = {n.name: n for n in gm.graph.nodes}
    params = {}
    for n in gm.graph.find_nodes(op="placeholder"):
        ann = _annotation(n)
        params[n.target] = f"{n.target}: {ann}" if ann else n.target
    lines = gm.code.strip("\n").splitlines()
    head = re.match(r"def forward\((.*)\):", lines[0])
    names = [p.strip() for p in head.group(1).split(",")] if head else []
    out = [f"def forward({', '.join(params.get(p, p) for p in names)}):"]
    for line in lines[1:]:
        m = re.match(r"(\s+)(\w+) = (.*)", line)
        node = nodes.get(m.group(2)) if m else None
        ann = _annotation(node) if node is not None and node.op != "placeholder" else None
        out.append(f"{m.group(1)}{m.group(2)}: {ann} = {m.group(3)}" if ann else line)
    return "\n".join(out)


def _train(self, mode=True):
    raise NotImplementedError("Calling train() is not supported yet.")


def _eval(self, mode=True):
    raise NotImplementedError("Calling eval() is not supported yet.")


def _indent(text, n):
    return "\n".join((" " * n + line) if line.strip() else "" for line in text.splitlines())


class ExportedProgram:
    """An exported module: see the module docstring."""

    def __init__(self, root, graph, graph_signature, state_dict, range_constraints, module_call_graph,
                 example_inputs=None, constants=None, *, verifiers=None):
        self._graph_module = root if isinstance(root, GraphModule) else GraphModule(root or Module(), graph)
        self._graph_signature = graph_signature
        self._state_dict = state_dict
        self._range_constraints = range_constraints
        self._module_call_graph = module_call_graph
        self._example_inputs = example_inputs
        self._constants = constants if constants is not None else {}
        self._verifiers = verifiers
        call = module_call_graph[0].signature
        names = list(call.forward_arg_names)
        nkw = len(call.in_spec.children_specs[1].context or []) if call.in_spec.num_children == 2 else 0
        self._forward_call = (names[:len(names) - nkw], names[len(names) - nkw:])

    # -- the program ---------------------------------------------------------------------------------------------------
    @property
    def graph_module(self):
        return self._graph_module

    @property
    def graph(self):
        return self._graph_module.graph

    @property
    def graph_signature(self):
        return self._graph_signature

    @property
    def state_dict(self):
        return self._state_dict

    @property
    def constants(self):
        return self._constants

    @property
    def tensor_constants(self):
        return self._constants

    @property
    def range_constraints(self):
        return self._range_constraints

    @property
    def module_call_graph(self):
        return self._module_call_graph

    @property
    def example_inputs(self):
        return self._example_inputs

    @property
    def call_spec(self):
        sig = self._module_call_graph[0].signature
        return CallSpec(sig.in_spec, sig.out_spec)

    @property
    def verifiers(self):
        return self._verifiers or ()

    @property
    def dialect(self):
        return "ATEN"

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def named_parameters(self):
        for name in self._graph_signature.parameters:
            yield name, self._state_dict[name]

    def buffers(self):
        for _, b in self.named_buffers():
            yield b

    def named_buffers(self):
        for name in self._graph_signature.buffers:
            yield name, self._state_dict.get(name, self._constants.get(name))

    # -- using it ------------------------------------------------------------------------------------------------------
    def module(self, check_guards=True):
        """A GraphModule taking the original arguments, with the parameters and buffers at their names; it checks
        its inputs against the export (``check_guards``) and writes the new values of written buffers into them.
        Its ``train()`` and ``eval()`` raise torch's ``NotImplementedError``: the program was traced in one mode
        (export the module again in the other)."""
        gm = unlift(self, guards=check_guards)
        gm.train = types.MethodType(_train, gm)
        gm.eval = types.MethodType(_eval, gm)
        return gm

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Unable to call ExportedProgram directly. You should use `exported_program.module()` "
                           "instead.")

    def run_decompositions(self, decomp_table=None, decompose_custom_triton_ops=False):
        """A new ExportedProgram. jitorch's exported graphs are already op-table primitives (what torch decomposes
        to), so without ``decomp_table`` this is a copy; with one (op name or ``Primitive`` -> function of jitorch
        ops) the program is traced again with those ops replaced by what the functions record."""
        if not decomp_table:
            return ExportedProgram(copy.deepcopy(self._graph_module), None, copy.deepcopy(self._graph_signature),
                                   self._state_dict, self._range_constraints, self._module_call_graph,
                                   self._example_inputs, self._constants, verifiers=self._verifiers)
        from . import _export_dims, _export_impl

        args, kwargs = self._example_inputs or ((), {})
        return _export_impl(unlift(self, guards=False), args, kwargs, _export_dims(self), decomp_table)

    def validate(self):
        self.graph.lint()

    def __str__(self):
        code = annotated_code(self._graph_module)
        body = _indent(f"class GraphModule(jitorch.nn.Module):\n{_indent(code, 4)}", 4)
        return (f"ExportedProgram:\n{body}\n\nGraph signature:{_indent(str(self._graph_signature), 4)}\n\n"
                f"Range constraints: {self._range_constraints}\n")

    __repr__ = __str__

