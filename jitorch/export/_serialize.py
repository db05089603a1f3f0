"""``torch.export.save`` / ``load``: an `ExportedProgram` as a zip archive.

The archive holds ``exported_program.json`` (the graph node by node, its signature, range constraints, input and
output structure), ``state_dict.pt``, ``constants.pt`` and ``example_inputs.pt`` (jitorch's checkpoint format,
read back with the weights-only unpickler) and ``extra_files/<name>``. Nothing in it is unpickled as code: call
targets are op-table rows by name or functions under ``jitorch.``, ``operator.`` and ``math.``, and the other
values of node arguments are plain JSON with tags for tuples, slices, dtypes and devices. The format is jitorch's
own (torch's ``.pt2`` archives hold ATen graphs, which jitorch does not read).

>>> import io, jitorch
>>> from jitorch.export import export
>>> ep = export(jitorch.nn.Linear(4, 2), (jitorch.randn(3, 4),))
>>> buf = io.BytesIO(); save(ep, buf); _ = buf.seek(0)
>>> ep2 = load(buf)
>>> x = jitorch.randn(3, 4)
>>> bool((ep2.module()(x) == ep.module()(x)).all())
True
"""
from __future__ import annotations

import io
import json
import math
import os
import zipfile

import numpy as np

from .._device import device as _device
from .._dtype import dtype as _dtype
from ..fx._naming import global_path, resolve_path
from ..fx.graph import Graph
from ..fx.make_fx import Primitive, _primitive
from ..fx.node import Node
from ..nn.parameter import Parameter
from ..utils._pytree_keys import treespec_dumps, treespec_loads
from .dynamic_shapes import Symbol, ValueRanges, int_oo
from .graph_signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                              SymIntArgument, TensorArgument)

__all__ = ["save", "load", "SerializeError"]

FORMAT = 1
_ROOTS = ("jitorch.", "operator.", "math.")
_ARGS = {"tensor": TensorArgument, "symint": SymIntArgument}


class SerializeError(RuntimeError):
    """A value in the graph that the archive format cannot hold."""


def _np_dtype(name):
    import jitorch

    found = getattr(jitorch, name, None)
    return found.np if isinstance(found, _dtype) else np.dtype(name)


def _enc(v, where):
    if isinstance(v, Node):
        return {"node": v.name}
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else {"float": repr(float(v))}
    if isinstance(v, complex):
        return {"complex": [v.real, v.imag]}
    if isinstance(v, tuple) and not hasattr(v, "_fields"):
        return {"tuple": [_enc(x, where) for x in v]}
    if isinstance(v, list):
        return {"list": [_enc(x, where) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[_enc(k, where), _enc(x, where)] for k, x in v.items()]}
    if isinstance(v, slice):
        return {"slice": [_enc(v.start, where), _enc(v.stop, where), _enc(v.step, where)]}
    if v is Ellipsis:
        return {"ellipsis": None}
    if isinstance(v, _dtype):
        return {"dtype": v.name}
    if isinstance(v, np.dtype):
        return {"np_dtype": v.name}
    if isinstance(v, _device):
        return {"device": str(v)}
    if type(v).__name__ == "memory_format":
        return {"memory_format": str(v).rsplit(".", 1)[-1]}
    raise SerializeError(f"torch.export.save: {where} holds a {type(v).__name__} ({v!r}), which the archive format "
                         "cannot hold")


def _dec(v, env):
    import jitorch

    if not isinstance(v, dict):
        return v
    (tag, x), = v.items()
    if tag == "node":
        return env[x]
    if tag == "float":
        return float(x)
    if tag == "complex":
        return complex(*x)
    if tag in ("tuple", "list"):
        items = [_dec(i, env) for i in x]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        return {_dec(k, env): _dec(i, env) for k, i in x}
    if tag == "slice":
        return slice(*(_dec(i, env) for i in x))
    if tag == "ellipsis":
        return Ellipsis
    if tag == "dtype":
        return getattr(jitorch, x)
    if tag == "np_dtype":
        return _np_dtype(x)
    if tag == "device":
        return jitorch.device(x)
    if tag == "memory_format":
        return getattr(jitorch, x)
    raise SerializeError(f"torch.export.load: unknown value tag {tag!r} (an archive from a newer jitorch?)")


def _target(node):
    t = node.target
    if node.op != "call_function":
        return t
    if isinstance(t, Primitive):
        return {"primitive": t.op.name, "inplace": t.inplace}
    path = global_path(t)
    if path is None or not path.startswith(_ROOTS):
        raise SerializeError(f"torch.export.save: node {node.name!r} calls {t!r}, which is neither an op-table "
                             "row nor a function under jitorch., operator. or math.")
    return {"function": path}


def _load_target(op, t):
    if op != "call_function":
        return t
    if "primitive" in t:
        name = t["primitive"]
        if "::" in name:  # a jitorch.library operator: its row exists once the op is traced or looked up here
            from ..library._registry import REGISTRY

            entry = REGISTRY.get(name)
            if entry is None:
                raise SerializeError(f"torch.export.load: the program calls the custom op {name}, which is not "
                                     f"defined in this process: define custom op {name} (import the module that "
                                     "defines it) before export.load")
            entry.row()
        return _primitive(name, t["inplace"])
    if not t["function"].startswith(_ROOTS):
        raise SerializeError(f"torch.export.load: refusing to import {t['function']!r}")
    return resolve_path(t["function"])


_META = ("sym_shape", "sym", "device", "stride")


def _meta(node):
    out = {k: _enc(node.meta[k], node.name) for k in _META if k in node.meta}
    val = node.meta.get("val")
    if isinstance(val, tuple) and len(val) == 2 and isinstance(val[0], tuple):
        out["val"] = [list(val[0]), np.dtype(val[1]).name]
    if "constant" in node.meta:
        out["constant"] = _enc(node.meta["constant"], node.name)
    return out


def _load_meta(meta):
    out = {k: _dec(v, {}) for k, v in meta.items() if k != "val"}
    if "val" in meta:
        out["val"] = (tuple(meta["val"][0]), _np_dtype(meta["val"][1]))
    return out


def _arg(a):
    if isinstance(a, ConstantArgument):
        return {"type": "constant", "name": a.name, "value": _enc(a.value, a.name)}
    return {"type": "symint" if isinstance(a, SymIntArgument) else "tensor", "name": a.name}


def _load_arg(a):
    if a["type"] == "constant":
        return ConstantArgument(a["name"], _dec(a["value"], {}))
    return _ARGS[a["type"]](a["name"])


def _program_json(ep):
    sig = ep.module_call_graph[0].signature
    return {
        "format": FORMAT,
        "graph": [{"op": n.op, "name": n.name, "target": _target(n), "args": _enc(n.args, n.name),
                   "kwargs": _enc(n.kwargs, n.name), "meta": _meta(n)} for n in ep.graph.nodes],
        "inputs": [{"kind": s.kind.name, "arg": _arg(s.arg), "target": s.target, "persistent": s.persistent}
                   for s in ep.graph_signature.input_specs],
        "outputs": [{"kind": s.kind.name, "arg": _arg(s.arg), "target": s.target}
                    for s in ep.graph_signature.output_specs],
        "range_constraints": [[str(k), v.lower, None if v.upper == int_oo else v.upper]
                              for k, v in ep.range_constraints.items()],
        "in_spec": treespec_dumps(sig.in_spec), "out_spec": treespec_dumps(sig.out_spec),
        "forward_arg_names": list(sig.forward_arg_names),
        "submodules": [e.fqn for e in ep.module_call_graph[1:]],
    }


def _tensors_bytes(obj):
    import jitorch

    buf = io.BytesIO()
    jitorch.save(obj, buf)
    return buf.getvalue()


def save(ep, f, *, extra_files=None, opset_version=None, pickle_protocol=2):
    """Write ``ep`` to ``f`` (a path or a binary file object); ``extra_files`` maps names to strings or bytes."""
    from .exported_program import ExportedProgram

    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"The 'ep' parameter must be an instance of 'ExportedProgram', got '{type(ep).__name__}' "
                        "instead.")
    program = json.dumps(_program_json(ep))
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("version", str(FORMAT))
        z.writestr("exported_program.json", program)
        z.writestr("state_dict.pt", _tensors_bytes(dict(ep.state_dict)))
        z.writestr("constants.pt", _tensors_bytes(dict(ep.constants)))
        z.writestr("example_inputs.pt", _tensors_bytes(ep.example_inputs))
        for name, content in (extra_files or {}).items():
            z.writestr(f"extra_files/{name}", content)


def load(f, *, extra_files=None, expected_opset_version=None):
    """Read an ExportedProgram that `save` wrote; fills ``extra_files``'s keys with the stored contents."""
    import jitorch

    from .exported_program import ExportedProgram, ModuleCallEntry, ModuleCallSignature

    if isinstance(f, (str, os.PathLike)):
        f = os.fspath(f)
    with zipfile.ZipFile(f) as z:
        names = set(z.namelist())
        if "exported_program.json" not in names:
            raise RuntimeError("torch.export.load: not an archive written by jitorch.export.save (no "
                               "exported_program.json)")
        data = json.loads(z.read("exported_program.json"))
        if data.get("format", 0) > FORMAT:
            raise RuntimeError(f"torch.export.load: archive format {data['format']} is newer than this jitorch's "
                               f"({FORMAT})")
        state, consts, examples = (jitorch.load(io.BytesIO(z.read(n))) for n in ("state_dict.pt", "constants.pt",
                                                                                  "example_inputs.pt"))
        for name in list(extra_files or {}):
            if f"extra_files/{name}" in names:
                extra_files[name] = z.read(f"extra_files/{name}").decode()
    graph, env = Graph(), {}
    for row in data["graph"]:
        target = _load_target(row["op"], row["target"])
        node = graph.create_node(row["op"], target, _dec(row["args"], env), _dec(row["kwargs"], env),
                                 name=row["name"])
        node.meta = _load_meta(row["meta"])
        env[row["name"]] = node
    inputs = [InputSpec(InputKind[s["kind"]], _load_arg(s["arg"]), s["target"], s["persistent"])
              for s in data["inputs"]]
    outputs = [OutputSpec(OutputKind[s["kind"]], _load_arg(s["arg"]), s["target"]) for s in data["outputs"]]
    made = {}  # a tied parameter (one tensor under several names, one object after unpickling) stays one
    for s in inputs:
        value = state.get(s.target)
        if s.kind == InputKind.PARAMETER and not isinstance(value, Parameter):
            if id(value) not in made:
                made[id(value)] = Parameter(value)
            state[s.target] = made[id(value)]
    ranges = {Symbol(name): ValueRanges(lo, int_oo if hi is None else hi) for name, lo, hi in
              data["range_constraints"]}
    sig = ModuleCallSignature([], [], treespec_loads(data["in_spec"]), treespec_loads(data["out_spec"]),
                              data["forward_arg_names"])
    calls = [ModuleCallEntry("", sig)] + [ModuleCallEntry(fqn, None) for fqn in data["submodules"]]
    return ExportedProgram(None, graph, ExportGraphSignature(inputs, outputs), state, ranges, calls, examples, consts)
