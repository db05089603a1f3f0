"""How a `CompiledFunction` turns a guard miss on sizes into a dynamic specialization (see dynamic_shapes.py).

`dims_to_make_dynamic` picks the dimensions (``dynamic=None``: the ones that changed twice over the entries, and
those marked before; ``dynamic=True``: all of size >= 2, or when they hold more sizes than a specialization has
symbols, those seen at two sizes); `dynamic_inference` and `dynamic_training` probe the call
through the same trace the static path uses (`trace.trace` or `training.joint_for`) and return the
`DynamicSpec` with what runs this call, or ``None`` with the reason kept for ``explain``.

>>> import jitorch
>>> f = jitorch.compile(lambda x: x.relu() + 1)
>>> _ = f(jitorch.ones(4, 3)), f(jitorch.ones(6, 3))
>>> sorted(f._dynamic_dims)  # one change: two specializations
[]
>>> _ = f(jitorch.ones(8, 3))
>>> sorted(f._dynamic_dims)
[('arg0', 0)]
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .._tensor import Tensor
from .backend import CompiledGraph, whole_call_runner
from .dynamic_shapes import MAX_SYMBOLS, NotDynamic, build_dynamic, changed_dims, every_dim
from .guards import argument_names
from .output_layout import LaidOutPlan, eager_layouts, relaying
from .functionalize import CompileState, functionalize_intermediates
from .trace import trace
from .training import Unsupported, joint_for, plan_from_joint

RETRIES = 3  # dynamic attempts per set of dimensions

__all__ = ["Instance", "dims_to_make_dynamic", "dynamic_inference", "dynamic_training"]


@dataclass
class Instance:
    """A dynamic specialization instantiated at one size: ``run(args, kwargs, params)`` and its kernels."""

    run: object
    kernel_ops: list = field(default_factory=list)
    plan: object = None  # a training size's TrainingPlan


def dims_to_make_dynamic(cf, entries, guards, args, kwargs, changes=2):
    """``[(argument name, dim)]`` for this call's new specialization, or ``[]`` to specialize every size
    (``changes``: how often a dimension's size changed before it is made dynamic)."""
    if cf.dynamic is False:
        return []
    if cf.dynamic is True:
        dims = every_dim(args, kwargs)
        named = dict(zip(argument_names(args, kwargs), list(args) + list(kwargs.values())))
        if len({named[name]._data.shape[d] for name, d in dims}) > MAX_SYMBOLS:
            # More sizes than symbols (a (B, T, C) input): the dimensions seen at two sizes, from the second call.
            dims = changed_dims(entries, guards, 1)
    else:
        cf._dynamic_dims.update(changed_dims(entries, guards, changes))
        dims = sorted(cf._dynamic_dims)
    named = dict(zip(argument_names(args, kwargs), list(args) + list(kwargs.values())))
    for name, d in dims:
        t = named.get(name)
        if not isinstance(t, Tensor) or d >= t._data.ndim or t._data.shape[d] < 2 or not t._data.flags.c_contiguous:
            return []  # sizes 0 and 1 stay specialized, as in torch; strided inputs keep exact guards
    if not dims or cf._dynamic_failed.get(frozenset(dims), 0) >= RETRIES:
        return []
    return dims


def _attempt(cf, dims, make, entry):
    try:
        return make()
    except (NotDynamic, Unsupported) as err:
        # Tried again at later sizes: probes next to a kink (``if x.shape[1] > 4`` probed from 4) fail where later
        # sizes, all past it, fit.
        cf._dynamic_failed[frozenset(dims)] = cf._dynamic_failed.get(frozenset(dims), 0) + 1
        entry.dynamic_reason = str(err)
        return None


def dynamic_inference(cf, fn, entry, dims, guards, args, kwargs, buffers, writes):
    """An inference specialization of ``fn`` (the call's function over its flat arguments) over ``dims``: ``(spec,
    Instance for this call)`` or ``None``."""
    nargs, keys = len(args), tuple(kwargs)
    # The memory order of the latest trace's outputs: a size is built right after its own trace (or, for the
    # template's own call, after the probes, whose outputs are in the same order at other sizes).
    layouts = [None]

    def builder(flat):
        t = trace(fn, tuple(flat[:nargs]), dict(zip(keys, flat[nargs:])), buffers=buffers)
        if t.gm is None or t.info.hidden_write is not None or t.info.unsound is not None:
            raise NotDynamic(t.break_reason or t.info.hidden_write or t.info.unsound)
        layouts[0] = eager_layouts(t.result)
        return t.gm, tuple(id(b) for b in t.writes)

    def build(gm):
        if functionalize_intermediates(gm):
            gm.recompile()
        graph = CompiledGraph(gm)
        # eager's memory order for outputs of permuted values (output_layout.py)
        runner = relaying(whole_call_runner(graph, writes, lambda a, k: fn(*a, **k)), layouts[0])
        return Instance(lambda a, k, params: runner(a, k), graph.kernel_ops)

    restoring = _restoring(buffers)
    return _attempt(cf, dims, lambda: _with_instance(
        build_dynamic(builder, args, kwargs, dims, build, guards, restoring), args, kwargs), entry)


def dynamic_training(cf, fn, entry, dims, guards, args, kwargs, module, layouts=None):
    """A training specialization of ``fn`` over ``dims``: ``(spec, Instance for this call)`` or ``None``; its
    outputs are handed out in eager's ``layouts`` (`output_layout.eager_layouts` of the call's trace)."""
    nargs, keys = len(args), tuple(kwargs)
    specs = []

    def builder(flat):
        try:
            spec = joint_for(fn, tuple(flat[:nargs]), dict(zip(keys, flat[nargs:])), module, None)
        except Unsupported as err:
            raise NotDynamic(str(err)) from err
        specs.append(spec)
        return spec.joint, spec.extra

    def build(joint):
        plan = plan_from_joint(specs[0], joint)  # the first trace is the call's own sizes: its output structure
        if layouts is not None:
            plan = LaidOutPlan(plan, layouts)
        return Instance(lambda a, k, params: plan(params + tuple(a) + tuple(k.values())), plan.forward_kernels, plan)

    def restoring(fn):
        try:
            return _restoring(tuple(module.buffers()) if module is not None else ())(fn)
        finally:
            del specs[1:]  # the probes' and later sizes' specs hold graphs of their own: keep only the call's

    def make():
        spec = build_dynamic(builder, args, kwargs, dims, build, guards, restoring)
        del specs[1:]
        return _with_instance(spec, args, kwargs)

    return _attempt(cf, dims, make, entry)


def _restoring(buffers):
    """``run(fn)``: ``fn()`` with the buffers and random generators as they were before it (a trace's updates)."""
    def run(fn):
        state = CompileState(buffers)
        try:
            return fn()
        finally:
            state.restore()
    return run


def _with_instance(spec, args, kwargs):
    sizes = spec.sizes(list(args) + list(kwargs.values()))
    return spec, spec.at(sizes)
