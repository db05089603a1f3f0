"""The operators defined through ``jitorch.library``, one `OperatorEntry` per overload, and how a call runs.

A call binds its arguments to the schema (torch's errors for a missing, extra or mistyped argument), then:

- a ``CompositeImplicitAutograd`` kernel runs as it is: its ops record autograd and traces themselves;
- when an input requires grad, the op's generated ``autograd.Function`` (`_autograd.py`) runs the rest below autograd
  and records one node whose backward is the registered formula (or torch's error at backward time);
- below autograd, with no dispatcher mode active, the kernel of the inputs' device runs on the caller's tensors
  (mutations land in place; outputs that alias an input are refused, as torch). With a mode active (``make_fx``,
  ``jitorch.compile``, fake tensors, vmap's tracer, the profiler) the call is ONE op-table row (`row`): the dispatcher
  hands it to the mode, which records one node, and the row's kernel wraps the arrays back into tensors and runs the
  kernel, or the fake implementation on fake or meta tensors. Mutated inputs go through the row as copies written
  back with ``copy_``, an in-place write the tracers understand (a graph break under ``jitorch.compile``).
"""
from __future__ import annotations

import inspect

import numpy as np

from .._dispatch_modes import MODES
from .._tensor import Tensor
from ..autograd.grad_mode import GradState, no_grad
from ..runtime.devices import memory_owner
from ..runtime.meta import MetaArray

__all__ = ["OperatorEntry", "REGISTRY", "PENDING", "call", "below_autograd", "define", "has_qualname"]

REGISTRY: dict = {}  # "ns::name" or "ns::name.overload" -> OperatorEntry
PENDING: dict = {}  # kernels registered (Library.impl) before their operator's definition: key -> {slot: fn}
_MISSING = object()
_BACKEND = {"cpu": "CPU", "cuda": "CUDA", "meta": "Meta"}
_TYPE_NAMES = {"Tensor": "Tensor", "SymInt": "int", "int": "int", "float": "float", "bool": "bool", "str": "str",
               "Scalar": "number", "ScalarType": "ScalarType", "Device": "Device"}


class OperatorEntry:
    """One overload: its schema and what is registered for it. Kernel slots: a device type (``"cpu"``, ``"cuda"``,
    ``"meta"``), ``None`` (every device: CompositeExplicitAutograd), ``"implicit"`` (CompositeImplicitAutograd) and
    ``"autograd"`` (an Autograd kernel)."""

    def __init__(self, key, schema, owner=None):
        self.key, self.schema, self.owner = key, schema, owner
        self.qualname = schema.name
        self.ns, _, self.opname = schema.name.partition("::")
        self.overload = schema.overload_name or "default"
        self.kernels = dict(PENDING.pop(key, {}))
        self.fake = self.kernels.pop("fake", None)
        self.backward = self.setup_context = None
        self.disabled: set = set()  # device types whose custom_op kernel is switched off (set_kernel_enabled)
        self.function = None  # the generated autograd.Function, made on first use
        self._row = None
        rets = schema.returns
        self.n_returns = len(rets)
        # Returns that alias an input (``Tensor(a!)``, out= overloads) must come back as that very input.
        self.tensor_returns = all(r.base == "Tensor" and not (r.is_list or r.optional or r.alias) for r in rets)
        self.mutated = tuple(i for i, a in enumerate(schema.arguments) if a.mutable)
        self.has_kwonly = any(a.kwarg_only for a in schema.arguments)
        self.tensor_args = tuple((i, a.kind) for i, a in enumerate(schema.arguments) if a.kind != "value")
        # One op-table row holds the call only with a fixed number of Tensor outputs.
        self.rowable = self.tensor_returns and all(schema.arguments[i].kind == "tensor" for i in self.mutated) \
            and self.n_returns + len(self.mutated) > 0

    def __str__(self):
        return f"{self.ns}.{self.opname}.{self.overload}"

    def row(self):
        """The op-table row standing for this operator in traced graphs (made on the first traced call)."""
        if self._row is None:
            from . import _row

            self._row = _row.row_for(self)
        return self._row


def define(key, schema, owner=None):
    """Register (or, for ``custom_op``, replace) the overload ``key`` with ``schema``; returns its entry."""
    entry = REGISTRY[key] = OperatorEntry(key, schema, owner)
    return entry


def has_qualname(qualname):
    return qualname in REGISTRY or any(k.startswith(qualname + ".") for k in REGISTRY)


def call(entry, args, kwargs):
    """``op(*args, **kwargs)`` for a registered operator (see the module docstring)."""
    values = bind(entry, args, kwargs)
    kernels = entry.kernels
    if "implicit" in kernels:
        return kernels["implicit"](*args, **kwargs)
    if "autograd" in kernels:
        pos, kw = split(entry, values)
        return kernels["autograd"](*pos, **kw)
    tensors = flat_tensors(entry, values)
    if GradState.enabled and any(t._requires_grad for t in tensors):
        if entry.owner is None and entry.backward is None:
            # A Library op without an autograd formula: its kernel runs with autograd on (torch's fallback).
            return run_kernel(entry, values, tensors)
        return apply_function(entry, values)
    return below_autograd(entry, values, tensors)


def below_autograd(entry, values, tensors=None):
    """The op on bound ``values`` without recording autograd: the kernel, or one row while a mode is active."""
    if tensors is None:
        tensors = flat_tensors(entry, values)
    if GradState.enabled:
        with no_grad():
            return below_autograd(entry, values, tensors)
    if MODES and entry.rowable and tensors:
        return run_row(entry, values)
    return run_kernel(entry, values, tensors)


def run_kernel(entry, values, tensors, fake=False):
    """Select and run the kernel on ``values``; check its outputs; bump the mutated inputs' versions."""
    fn = select(entry, values, tensors, fake)
    pos, kw = split(entry, values)
    out = fn(*pos, **kw)
    check_output(entry, out, fn, tensors)
    for i in entry.mutated:  # torch's ADInplaceOrView bump, on top of the kernel's own writes
        v = values[i]
        for t in (v,) if isinstance(v, Tensor) else v or ():
            if t is not None:
                t._bump_version()
    return out


def flat_tensors(entry, values):
    """The tensors among the bound values, in argument order (lists expanded, Nones skipped)."""
    out = []
    for i, kind in entry.tensor_args:
        v = values[i]
        if kind == "tensor":
            out.append(v)
        elif kind == "tensor_opt":
            if v is not None:
                out.append(v)
        elif v:
            out.extend(t for t in v if t is not None)
    return out


def split(entry, values):
    """``(positional, keyword-only)`` values, as kernels receive them."""
    if not entry.has_kwonly:
        return values, {}
    args = entry.schema.arguments
    return [v for a, v in zip(args, values) if not a.kwarg_only], \
        {a.name: v for a, v in zip(args, values) if a.kwarg_only}


# -- binding ----------------------------------------------------------------------------------------------------------
def bind(entry, args, kwargs):
    """The value of every schema argument, defaults filled in; torch's errors for bad calls."""
    schema = entry.schema
    params = schema.arguments
    npos = len(schema.positional)
    if len(args) > npos:
        if entry.has_kwonly:
            raise RuntimeError(f"{entry.qualname}() takes {npos} positional argument(s) but {len(args)} was/were "
                               f"given.  Declaration: {schema}")
        raise RuntimeError(f"{entry.qualname}() expected at most {npos} argument(s) but received {len(args)} "
                           f"argument(s). Declaration: {schema}")
    values = list(args)
    values.extend([_MISSING] * (len(params) - len(args)))
    unknown = []
    for k, v in kwargs.items():
        i = schema.index.get(k)
        if i is None:
            unknown.append(k)
        elif i < len(args):
            raise RuntimeError(f"{entry.qualname}() got multiple values for argument '{k}'. Declaration: {schema}")
        else:
            values[i] = v
    for i, p in enumerate(params):
        v = values[i]
        if v is _MISSING:
            if not p.has_default:
                raise RuntimeError(f"{entry.qualname}() is missing value for argument '{p.name}'. Declaration: "
                                   f"{schema}")
            values[i] = list(p.default) if isinstance(p.default, list) else p.default
        else:
            values[i] = _checked(entry, p, i, v)
    if unknown:
        raise RuntimeError(f"Unknown keyword argument '{unknown[0]}' for operator '{entry.qualname}'. Schema: {schema}")
    return values


def _checked(entry, p, i, v):
    if p.optional and v is None:
        return v
    if p.is_list:
        if isinstance(v, (list, tuple)) and all(_is(p.base, e) or (p.elem_optional and e is None) for e in v):
            return list(v)
    elif _is(p.base, v):
        return v.item() if isinstance(v, Tensor) and p.base != "Tensor" else v
    type_name = _TYPE_NAMES.get(p.base, p.base)
    if p.is_list:
        type_name = f"List[{'Optional[' + type_name + ']' if p.elem_optional else type_name}]"
    if p.optional:
        type_name = f"Optional[{type_name}]"
    raise RuntimeError(f"{entry.qualname}() Expected a value of type '{type_name}' for argument '{p.name}' but instead "
                       f"found type '{type(v).__name__}'.\nPosition: {i}\nValue: {v!r}\nDeclaration: {entry.schema}\n"
                       f"Cast error details: Unable to cast {v!r} to {p.base}")


def _is(base, v):
    if base == "Tensor":
        return isinstance(v, Tensor)
    if isinstance(v, Tensor):  # a 0-d tensor stands for a number, as torch accepts
        return v.ndim == 0 and base in ("int", "SymInt", "float", "Scalar", "bool")
    if base in ("int", "SymInt"):
        return isinstance(v, (int, np.integer))
    if base == "float":
        return isinstance(v, (int, float, np.integer, np.floating))
    if base == "bool":
        return isinstance(v, bool)
    if base == "str":
        return isinstance(v, str)
    if base == "Scalar":
        return isinstance(v, (int, float, complex))
    if base == "ScalarType":
        from .._dtype import dtype

        return isinstance(v, dtype)
    if base == "Device":
        from .._device import device

        return isinstance(v, (str, int, device))
    return True


# -- kernels ----------------------------------------------------------------------------------------------------------
def device_type(entry, values, tensors):
    if tensors:
        data = tensors[0]._data
        return "cpu" if type(data) is np.ndarray else "meta" if type(data) is MetaArray else tensors[0].device.type
    for a, v in zip(entry.schema.arguments, values):  # a factory op: its ``device`` argument
        if a.base == "Device" and v is not None:
            from .._device import device

            return device(v).type
    return "cpu"


def select(entry, values, tensors, fake=False):
    """The kernel for the inputs' device; on fake or meta tensors the fake implementation."""
    dev = "meta" if fake else device_type(entry, values, tensors)
    kernels = entry.kernels
    if dev == "meta":
        fn = kernels.get("meta") or entry.fake
        if fn is not None:
            return fn
        if entry.n_returns == 0:
            return _returns_none  # torch's trivial fake kernel of an op that only mutates
        if entry.owner is not None:
            raise RuntimeError(f"There was no fake impl registered for {entry.owner}. This is necessary for "
                               "torch.compile/export/fx tracing to work. Please use "
                               f"`{entry.owner._init_fn.__name__}.register_fake` to add an fake impl.")
    elif dev in entry.disabled:
        return entry.owner._init_fn
    fn = kernels.get(dev) or kernels.get(None)
    if fn is None:
        backend = _BACKEND.get(dev, dev.upper())
        have = sorted(_BACKEND.get(k, "CompositeExplicitAutograd") for k in kernels if k in _BACKEND or k is None)
        if entry.fake is not None and "Meta" not in have:
            have.append("Meta")
        raise NotImplementedError(
            f"Could not run '{entry.qualname}' with arguments from the '{backend}' backend. This could be because the "
            f"operator doesn't exist for this backend. '{entry.qualname}' is only available for these backends: "
            f"[{', '.join(have)}]. Register a kernel with torch.library.impl / register_kernel (device type "
            f"{dev!r}).")
    return fn


def _returns_none(*args, **kwargs):
    return None


def check_output(entry, out, fn, tensors):
    """torch's checks of what a kernel returned: the schema's structure, and no output aliasing an input or another
    output (an op whose result is its input would break autograd and functional graphs)."""
    schema = entry.schema
    rets = schema.returns
    if not rets:
        if out is not None:
            raise RuntimeError(f"Expected PythonKernelHolder for {entry.qualname} to return None but it returned "
                               "something else instead.")
        return
    if schema.returns_tuple:
        if not isinstance(out, (tuple, list)):
            raise TypeError(f"Object of type '{type(out).__name__}' is not an instance of 'sequence'")
        if len(out) != len(rets):
            raise RuntimeError(f"{entry.qualname}: the implementation returned {len(out)} values but the schema "
                               f"declares {len(rets)}: {schema}")
        outs = out
    else:
        outs = (out,)
    produced = []
    for r, o in zip(rets, outs):
        if r.base != "Tensor" or (r.optional and o is None):
            continue
        items = o if r.is_list and isinstance(o, (list, tuple)) else (o,)
        for item in items:
            if not isinstance(item, Tensor):
                raise RuntimeError(f"Unable to cast {item!r} to Tensor")
        if r.alias is None:
            produced.extend(items)
    if produced:
        _check_aliasing(entry, produced, fn, tensors)


def _check_aliasing(entry, outs, fn, inputs):
    ids = {id(t) for t in inputs}
    roots = {id(memory_owner(t._data)) for t in inputs if type(t._data) is not MetaArray}
    for o in outs:
        if type(o._data) is MetaArray:  # every meta array views one shared zero page: no aliasing to see
            continue
        root = id(memory_owner(o._data))
        if id(o) in ids or root in roots:
            name = entry.owner._init_fn.__name__ if entry.owner is not None else entry.opname
            raise RuntimeError(
                f"{name} (with implementation in {inspect.getmodule(fn)}): The output of this custom operator (1) "
                "must not also be an input to this custom operator and (2) may not alias any inputs to this custom "
                "operator or other returns. The most common way to trigger this error is if we have y = "
                "custom_op(x) and y and x are the same Tensor. Please instead return a clone of the offending output "
                "tensor(s) (e.g. return x.clone()) or refactor the custom operator to not return y.")
        ids.add(id(o))
        roots.add(root)


# The autograd Function and the op-table row build on the functions above (they import this module).
from ._autograd import apply_function  # noqa: E402
from ._row import run_row  # noqa: E402
