"""Training through ``jitorch.compile``: a joint forward + backward graph, split in two, each half fused.

When grad mode is on and an input (or a compiled Module's parameter) requires grad, `compile_training` records the
joint graph with :func:`jitorch.fx.joint.make_joint` (the outputs' upstream gradients are its tangents), splits it
into a forward graph returning ``(*outputs, *saved)`` — every forward value the backward reads — and a backward
graph taking ``(*saved, *tangents)`` and returning the input gradients, compiles each with `CompiledGraph`, and
wraps the pair in one `jitorch.autograd.Function`. Dropout's masks are random nodes of the forward, drawn afresh per
call and saved for the backward (never recomputed); a compiled Module's buffer updates (BatchNorm's running
statistics) are forward outputs written back into the buffers after each call (`functionalize`). A double backward
(``create_graph=True``) cannot go through the compiled backward (it builds no graph), so that backward reruns the
function eagerly and differentiates it.

>>> import jitorch
>>> x = jitorch.tensor([1.0, 2.0], requires_grad=True)
>>> plan = compile_training(lambda x: (x * x + 1).sum(), (x,), {}, None, None)
>>> plan.forward_kernels, plan.backward_kernels
([['mul', 'add', 'sum']], [['mul', 'mul', 'add']])
>>> plan((x,)).backward()
>>> x.grad
tensor([2., 4.])
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .._tensor import Tensor
from ..autograd.grad_mode import no_grad
from ..fx.graph_module import GraphModule
from ..fx.joint import BACKWARD, FORWARD, make_joint
from ..fx.make_fx import Primitive
from ..fx.node import Node, map_aggregate
from ..utils._pytree import tree_flatten, tree_unflatten
from .backend import CompiledGraph, _fetch
from .decompose import decompose
from .functionalize import functionalize, functionalize_intermediates, is_random
from .training_function import _aliased_outputs, _CompiledTraining, _output_nodes, _sibling_outputs, as_output_dtypes, \
    eager_saved_outputs
from .training_partition import snapshot_written_buffers, split_joint
from .view_writes import functionalize_view_writes

__all__ = ["JointSpec", "TrainingPlan", "Unsupported", "as_output_dtypes", "compile_training", "joint_for",
           "plan_from_joint"]


class Unsupported(Exception):
    """The joint graph cannot be compiled; the message says why and the call runs eagerly."""


def _annotate(gm, values):
    """Run the joint graph once on ``values`` to record each node's ``meta["val"]`` (the fusion pass needs shapes
    and dtypes, and ``make_joint``'s recorder does not store them)."""
    env = {}
    placeholders = iter(values)
    with no_grad():
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(placeholders)
            elif node.op == "get_attr":
                env[node] = _fetch(gm, node.target)
            elif node.op == "call_function":
                args = map_aggregate(node.args, lambda a: env[a] if isinstance(a, Node) else a)
                kwargs = map_aggregate(node.kwargs, lambda a: env[a] if isinstance(a, Node) else a)
                env[node] = node.target(*args, **kwargs)
            elif node.op != "output":
                raise Unsupported(f"joint graph node {node.name} has op {node.op!r}")
            val = env.get(node)
            if isinstance(val, Tensor):
                node.meta["val"] = (tuple(val._data.shape), val._data.dtype)


def _check(gm):
    """Refuse what a replayed joint graph would get wrong (a module's buffer updates were made functional first:
    `functionalize`)."""
    for node in gm.graph.nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, Primitive) and target.inplace \
                and node.meta.get("phase") == FORWARD:
            # An in-place forward op reorders reads and writes around saved values (and eager would refuse it on a
            # leaf that requires grad): keep eager semantics.
            raise Unsupported(f"in-place op {target.op.name} in the forward")
    for value in (*gm.__dict__.values(), *gm.__dict__.get("_buffers", {}).values()):  # constants are buffers
        if isinstance(value, Tensor) and value._requires_grad:
            raise Unsupported("a tensor captured by the function requires grad (it is not a graph input)")


class TrainingPlan:
    """A compiled forward/backward pair for one specialization; call with the flat inputs (parameters first)."""

    def __init__(self, fwd_gm, bwd_gm, n_outs, tuple_out, wrt, eager, n_saved, writes, diff, structure):
        self.fwd, self.bwd = CompiledGraph(fwd_gm), CompiledGraph(bwd_gm)
        self.structure = structure  # how the tensor outputs go back into the call's dicts and lists
        self.diff = diff  # per output: differentiated (the backward takes its gradient) or non-differentiable
        self.n_saved = n_saved  # forward values kept for the backward
        self.n_outs, self.tuple_out, self.wrt, self.eager = n_outs, tuple_out, wrt, eager
        # Buffers the forward updates: it returns their new values after the outputs (written back each call).
        self.writes = tuple(writes)
        self.random = any(is_random(n) for n in fwd_gm.graph.nodes)
        self.eager_saved = eager_saved_outputs(fwd_gm, n_outs)
        # Outputs that are inputs as they are (``return y, self.weight``): eager returns the tensor itself.
        places = {n: i for i, n in enumerate(n for n in fwd_gm.graph.nodes if n.op == "placeholder")}
        self.input_outputs = tuple((i, places[o]) for i, o in enumerate(_output_nodes(fwd_gm, n_outs))
                                   if isinstance(o, Node) and o in places)
        if _aliased_outputs(fwd_gm, n_outs):
            # The native runner hands out plain arrays: a view output would lose its view of the other output, and
            # a write into it the gradient through that one. The Python runner's outputs keep their bases.
            self.fwd.native_reason = "an output is a view of another output"

    @property
    def forward_kernels(self):
        return self.fwd.kernel_ops

    @property
    def backward_kernels(self):
        return self.bwd.kernel_ops

    @property
    def kernel_ops(self):
        return self.forward_kernels + self.backward_kernels

    def __call__(self, flat):
        out = _CompiledTraining.apply(self, *flat)
        if self.input_outputs:
            outs = list(out) if self.tuple_out or self.n_outs > 1 else [out]
            for i, k in self.input_outputs:
                outs[i] = flat[k]  # its gradient reaches the input directly, as eager's
            out = tuple(outs) if self.tuple_out or self.n_outs > 1 else outs[0]
        return out if self.structure is None else rebuild_outputs(self.structure, out)


@dataclass
class JointSpec:
    """A call's joint graph (annotated and decomposed) and what a `TrainingPlan` over it needs besides."""

    joint: GraphModule
    n_outs: int  # the call's outputs
    tuple_out: bool
    wrt: list  # flat indices of the inputs that require grad
    call: object  # the function over the flat inputs (the eager double backward reruns it)
    writes: list  # buffers the forward updates, in the order of their values after the outputs
    diff: tuple  # per output: whether it is differentiated (has a tangent)
    structure: tuple | None  # `output_structure` of the result: None for a tensor or a tuple of them

    @property
    def extra(self):
        """What must be equal between two traces for one template to stand for both (see dynamic_shapes.py)."""
        return (self.n_outs, self.tuple_out, tuple(self.wrt), tuple(id(b) for b in self.writes), self.diff,
                repr(self.structure))


def compile_training(fn, args, kwargs, module, traced_result, recompute=True):
    """Build a `TrainingPlan` for ``fn(*args, **kwargs)``; raises `Unsupported` when it must run eagerly.

    ``traced_result`` is what a plain trace of the call returned (its output structure and shapes); ``None`` runs
    the function once to learn them. A compiled Module's parameters lead the flat inputs so they get gradients.
    """
    spec = joint_for(fn, args, kwargs, module, traced_result)
    return plan_from_joint(spec, spec.joint, recompute)


def joint_for(fn, args, kwargs, module, traced_result):
    """The `JointSpec` of ``fn(*args, **kwargs)`` (see `compile_training`)."""
    keys = tuple(kwargs)
    params = list(module.parameters()) if module is not None else []
    user = tuple(args) + tuple(kwargs[k] for k in keys)
    flat = tuple(params) + user
    nargs, nparams = len(args), len(params)

    def call(values):
        # Parameters are read by the module itself (by identity): ``values`` only places them in the joint graph.
        rest = values[nparams:]
        return fn(*rest[:nargs], **dict(zip(keys, rest[nargs:])))

    def rerun(values):
        # The eager double backward reruns the call on the parameters it ran with: ``functional_call`` (a MAML
        # inner step, ``torch.func.grad``) has put the module's own back by then, so those are swapped in again.
        with _parameters_as(module, values[:nparams]):
            return call(values)

    result = traced_result if traced_result is not None else call(flat)
    structure = output_structure(result)
    tuple_out = structure is not None or isinstance(result, tuple)
    outs = [o for o in tree_flatten(result)[0] if isinstance(o, Tensor)]
    if not outs:
        raise Unsupported("an output with no tensor in it (a tensor, or dicts, lists and tuples of them)")
    # Outputs returned beside the loss that eager autograd does not differentiate (indices, counts, detached
    # values) are forward outputs without a tangent, marked non-differentiable as eager leaves them.
    diff = tuple(bool(o._requires_grad and o.dtype.is_floating_point) for o in outs)
    if not any(diff):
        raise Unsupported("no output is a floating-point tensor that requires grad")
    # Only their shapes and dtypes matter.
    tangents = [Tensor._make(np.ones_like(o._data)) if d else None for o, d in zip(outs, diff)]

    def tensors_of(*values):
        return tuple(o for o in tree_flatten(call(values))[0] if isinstance(o, Tensor))

    try:
        joint = make_joint(tensors_of)(*flat, tangents=tangents)
    except Exception as err:  # anything the joint trace cannot follow runs eagerly, as an uncompiled call would
        raise Unsupported(f"joint trace failed: {type(err).__name__}: {err}") from err
    if any(n.meta.get("phase") == BACKWARD and is_random(n) for n in joint.graph.nodes):
        # A draw in the backward (activation checkpointing recomputing a dropout) must repeat the forward's numbers:
        # eager restores the generator around it, a graph would draw afresh (other masks, the generator advanced).
        raise Unsupported("the backward draws random numbers (a checkpointed region recomputes a random op)")
    # A module's buffer updates (BatchNorm's running statistics) become forward outputs written back per call.
    writes = functionalize(joint, list(module.buffers()) if module is not None else [])
    if writes:
        out_node = next(n for n in joint.graph.nodes if n.op == "output")
        results = out_node.args[0]
        out_node.args = (results[:len(outs)] + tuple(n for _, n in writes) + results[len(outs):],)
        snapshot_written_buffers(joint, [b for b, _ in writes])
    functionalize_intermediates(joint)  # ReLU(inplace=True) and friends on the graph's own values
    functionalize_view_writes(joint)  # ``out[:, i] = h``, ``mask[:, 0] = 1`` into the graph's values and clones
    _check(joint)
    values = list(flat) + [t for t in tangents if t is not None]
    _annotate(joint, values)
    if decompose(joint):
        _annotate(joint, values)  # the inlined nodes' shapes
    # One index per distinct tensor, as make_joint returns its gradients: a tensor passed twice (a parameter also
    # given as an argument) must not get its gradient twice.
    first = {}
    for i, a in enumerate(flat):
        if isinstance(a, Tensor) and a._requires_grad:
            first.setdefault(id(a), i)
    wrt = list(first.values())
    return JointSpec(joint, len(outs), tuple_out, wrt, rerun, [b for b, _ in writes], diff, structure)


@contextmanager
def _parameters_as(module, held):
    """``module``'s parameters (in ``parameters()`` order) are ``held`` inside the block; restored after. Nothing
    changes when the module holds them already, or holds another number of them."""
    swapped = []
    current = list(module.parameters()) if module is not None else []
    if len(current) == len(held) and any(p is not h for p, h in zip(current, held)):
        index = {id(p): i for i, p in enumerate(current)}
        for m in module.modules():
            for name, p in list(m._parameters.items()):
                i = index.get(id(p)) if p is not None else None
                if i is not None and held[i] is not p:
                    swapped.append((m, name, p))
                    m._parameters[name] = held[i]
    try:
        yield
    finally:
        for m, name, p in reversed(swapped):
            m._parameters[name] = p


def plan_from_joint(spec, joint, recompute=True):
    """The `TrainingPlan` of ``joint`` (``spec.joint``, or the same graph instantiated at other sizes)."""
    n_fwd = spec.n_outs + len(spec.writes)
    args = (spec.n_outs, spec.tuple_out, spec.wrt, spec.call)
    try:
        fwd_gm, bwd_gm, n_saved = split_joint(joint, n_fwd, recompute)
        if _sibling_outputs(fwd_gm, spec.n_outs):
            raise Unsupported("two outputs are views of one intermediate (a write into one must reach the other)")
        return TrainingPlan(fwd_gm, bwd_gm, *args, n_saved, spec.writes, spec.diff, spec.structure)
    except AssertionError:
        if not recompute:
            raise
        # fusion.partition cannot schedule some backward graphs with recomputed chains (a grouping cycle, reported
        # to the fusion pass): save the values instead.
        fwd_gm, bwd_gm, n_saved = split_joint(joint, n_fwd, False)
        return TrainingPlan(fwd_gm, bwd_gm, *args, n_saved, spec.writes, spec.diff, spec.structure)


_TENSOR = object()  # a tensor's place among a structure's leaves
_CONSTANT_LEAVES = (type(None), bool, int, float, str)


def output_structure(result):
    """``(spec, leaves)`` of a result that is not a tensor or a plain tuple of tensors (``{"loss": l, "logits": y}``,
    lists, nested tuples with None): its tensors are the compiled outputs, its other leaves constants of the trace
    (as an inference graph returns them). None for a tensor or a tuple of tensors; `Unsupported` for other leaves."""
    if isinstance(result, Tensor) or type(result) is tuple and all(isinstance(o, Tensor) for o in result):
        return None
    leaves, spec = tree_flatten(result)
    kept = []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            kept.append(_TENSOR)
        elif isinstance(leaf, _CONSTANT_LEAVES):
            kept.append(leaf)
        else:
            raise Unsupported(f"an output leaf of type {type(leaf).__name__} (tensors, numbers, strings and None in "
                              "tuples, lists and dicts)")
    return spec, tuple(kept)


def rebuild_outputs(structure, tensors):
    """The call's result from the compiled tensor outputs, in the places `output_structure` recorded."""
    spec, leaves = structure
    it = iter(tensors)
    return tree_unflatten([next(it) if leaf is _TENSOR else leaf for leaf in leaves], spec)
