"""A graph segment's values compiled for training: a joint forward + backward graph, split, both halves fused, run
as one `jitorch.autograd.Function` (see `segment_training` for how a flush is cut into such stages).

`SegmentPlan` records the joint graph of a stage graph (placeholders, then the recorded ops) on example inputs, as
`training.compile_training` does for a whole call: one output requires grad, any others are marked
non-differentiable. A double backward (``create_graph=True``) differentiates an eager rerun (`interpret`).

>>> import jitorch
>>> from jitorch.fx.graph import Graph
>>> from jitorch.fx.graph_module import GraphModule
>>> from jitorch.fx.make_fx import _primitive
>>> g = Graph()
>>> x = g.placeholder("x")
>>> x.meta.update(val=((2,), jitorch.float32.np), rg=True)
>>> y = g.call_function(_primitive("exp"), (x,))
>>> y.meta.update(val=((2,), jitorch.float32.np), rg=True)
>>> _ = g.output((y,))
>>> xs = jitorch.tensor([0.0, 1.0], requires_grad=True)
>>> plan = SegmentPlan(GraphModule(jitorch.nn.Module(), g), [xs])
>>> plan.kernel_ops, plan.backward_kernels
([['exp']], [['exp', 'mul']])
>>> (out,) = plan([xs])
>>> out.backward(jitorch.ones(2)); xs.grad
tensor([1.0000, 2.7183])
"""
from __future__ import annotations

import operator

import numpy as np

from .._dispatch import pop_mode, push_mode
from .._tensor import Tensor
from ..autograd import grad as autograd_grad
from ..autograd.function import Function
from ..autograd.grad_mode import GradState, enable_grad, set_grad_enabled
from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.joint import BACKWARD, FORWARD, OUTPUT, _mark_phase
from ..fx.make_fx import _RecordingMode
from ..fx.node import Node, map_aggregate
from ..nn.modules.module import Module
from .backend import CompiledGraph
from .decompose import decompose
from .functionalize import functionalize_intermediates
from .training import Unsupported, _annotate, _check
from .training_function import eager_saved_outputs, own_outputs
from .training_partition import snapshot_for_backward, split_joint

__all__ = ["SegmentPlan", "interpret"]


def interpret(gm, values):
    """Run a stage graph eagerly on ``values``: each op under the grad mode it was recorded with, and the reads the
    recorder saw through a detached alias (``meta["detach"]``: their positions among the op's tensors) detached."""
    env, it = {}, iter(values)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = next(it)
        elif n.op == "call_function":
            if n.target is operator.getitem:
                env[n] = env[n.args[0]][n.args[1]]
                continue
            detach, pos = n.meta.get("detach", ()), [0]

            def read(a, detach=detach, pos=pos):
                if not isinstance(a, Node):
                    return a
                value, k = env[a], pos[0]
                pos[0] += 1
                return value.detach() if k in detach else value

            args, kwargs = map_aggregate(n.args, read), map_aggregate(n.kwargs, read)
            with set_grad_enabled(n.meta.get("grad", GradState.enabled)):
                env[n] = n.target(*args, **kwargs)
        elif n.op == "output":
            return tuple(env[a] for a in n.args[0])
        else:
            raise Unsupported(f"stage graph node {n.name} has op {n.op!r}")
    raise Unsupported("stage graph without an output")


def _joint(gm, flat, diff):
    """The joint forward + backward graph of a stage: placeholders ``(*flat, *tangents of the diff outputs)``,
    results ``(*outputs, *gradients of the flat inputs that require grad)``; also the values it was recorded on."""
    graph, root = Graph(), Module()
    mode = _RecordingMode(graph, root)
    leaves, wrt = [], []
    for i, (a, p) in enumerate(zip(flat, (n for n in gm.graph.nodes if n.op == "placeholder"))):
        node = graph.placeholder(f"arg{i}")
        node.meta = {k: v for k, v in p.meta.items() if k in ("val", "stride")}
        if isinstance(a, Tensor):
            # A fresh leaf per input: the joint's backward must stop at the stage's inputs (their histories are
            # earlier stages' and eager ops', which autograd reaches through the Function's edges).
            leaf = a.detach()
            if a._requires_grad:
                leaf.requires_grad_()
                wrt.append(leaf)
            mode.bind(leaf, node)
            a = leaf
        leaves.append(a)
    _mark_phase(graph, FORWARD)
    outs_meta = [o.meta["val"] for o in next(n for n in gm.graph.nodes if n.op == "output").args[0]]
    tangents = [Tensor._make(np.ones(shape, dtype)) for (shape, dtype), d in zip(outs_meta, diff) if d]
    for i, t in enumerate(tangents):
        mode.bind(t, graph.placeholder(f"tangent{i}"))
    _mark_phase(graph, BACKWARD)
    push_mode(mode)
    try:
        outs = interpret(gm, leaves)
        _mark_phase(graph, FORWARD)
        if tuple(bool(o._requires_grad) for o in outs) != diff:
            raise Unsupported("the stage's outputs require grad differently than recorded")
        grads = autograd_grad([o for o, d in zip(outs, diff) if d], wrt, grad_outputs=tangents, allow_unused=True)
        _mark_phase(graph, BACKWARD)
    finally:
        pop_mode()
    result = tuple(mode.arg(o) for o in outs) + tuple(None if g is None else mode.arg(g) for g in grads)
    _mark_phase(graph, BACKWARD)
    graph.output(result)
    _mark_phase(graph, OUTPUT)
    return GraphModule(root, graph), leaves + tangents


class SegmentPlan:
    """One stage compiled for training: forward and backward `CompiledGraph` s; ``diff`` flags the output that
    requires grad (exactly one), ``wrt`` indexes the inputs that do. Raises `Unsupported` when the joint graph
    cannot be compiled."""

    def __init__(self, gm, flat):
        self.gm = gm
        outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        self.n_outs, self.diff = len(outs), tuple(bool(o.meta.get("rg")) for o in outs)
        if sum(self.diff) != 1:
            # With several, a backward reaching only some would run the others' backward on zeros.
            raise Unsupported(f"a compiled stage has one output that requires grad, got {sum(self.diff)}")
        self.wrt = [i for i, a in enumerate(flat) if isinstance(a, Tensor) and a._requires_grad]
        self.eager_saved = tuple(i for i in eager_saved_outputs(gm, self.n_outs) if self.diff[i])
        try:
            joint, values = _joint(gm, flat, self.diff)
        except Unsupported:
            raise
        except Exception as err:  # anything the joint trace cannot follow runs eagerly
            raise Unsupported(f"joint trace failed: {type(err).__name__}: {err}") from err
        functionalize_intermediates(joint)
        # Inputs the flush writes into after this stage ran (a module buffer's update): the backward reads copies.
        written = [i for i, p in enumerate(n for n in gm.graph.nodes if n.op == "placeholder") if p.meta.get("written")]
        if written:
            inputs = [n for n in joint.graph.nodes if n.op == "placeholder"]
            snapshot_for_backward(joint, [inputs[i] for i in written])
        _check(joint)
        _annotate(joint, values)
        if decompose(joint):
            _annotate(joint, values)  # the inlined nodes' shapes
        try:
            self._split(joint, True)
        except AssertionError:  # fusion cannot schedule some recomputed chains (see compile_training)
            try:
                self._split(joint, False)
            except AssertionError as err:
                raise Unsupported(f"fusion cannot schedule the stage: {err}") from err

    def _split(self, joint, recompute):
        fwd, bwd, self.n_saved = split_joint(joint, self.n_outs, recompute)
        self.fwd, self.bwd = CompiledGraph(fwd), CompiledGraph(bwd)

    @property
    def kernel_ops(self):
        return self.fwd.kernel_ops

    @property
    def backward_kernels(self):
        return self.bwd.kernel_ops

    def __call__(self, flat):
        with enable_grad():  # a flush inside ``no_grad`` still gives values computed with grad their history
            return _SegmentStage.apply(self, *flat)


class _SegmentStage(Function):
    """One run of a `SegmentPlan`: the compiled forward now, the compiled backward when gradients arrive."""

    _eager_views = True  # a compiled region: its returned views behave as eager views

    @staticmethod
    def forward(ctx, plan, *flat):
        res = plan.fwd(flat)
        outs = own_outputs(res[:plan.n_outs], flat)
        # The inputs are kept (not saved) for a double backward only, which checks their versions itself: saving
        # them would make an in-place write eager autograd allows raise at backward.
        ctx.plan, ctx.flat = plan, flat
        ctx.versions = tuple(a._version if isinstance(a, Tensor) else None for a in flat)
        # The output eager autograd would keep for the backward is saved too: a write into it then raises, as eagerly.
        checked = [outs[i] for i in plan.eager_saved]
        ctx.n_checked = len(checked)
        ctx.save_for_backward(*res[plan.n_outs:], *checked)
        ctx.mark_non_differentiable(*(o for o, d in zip(outs, plan.diff) if not d))
        ctx.set_materialize_grads(False)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        plan, flat = ctx.plan, ctx.flat
        saved = ctx.saved_tensors
        saved = saved[:len(saved) - ctx.n_checked]
        (grad,) = [g for g, d in zip(grads, plan.diff) if d]
        if grad is None:
            return (None,) * (1 + len(flat))
        if GradState.enabled:
            # create_graph=True: the compiled backward builds no graph, so differentiate an eager rerun instead.
            for a, v in zip(flat, ctx.versions):
                if isinstance(a, Tensor) and a._version != v:
                    raise RuntimeError("one of the variables needed for gradient computation has been modified by an "
                                       "inplace operation: an input of a compiled graph segment is at version "
                                       f"{a._version}; expected version {v} instead (double backward reruns the "
                                       "segment on its inputs)")
            with enable_grad():
                (out,) = [o for o, d in zip(interpret(plan.gm, flat), plan.diff) if d]
                got = autograd_grad([out], [flat[i] for i in plan.wrt], grad_outputs=[grad], create_graph=True,
                                    allow_unused=True)
        else:
            got = plan.bwd(tuple(saved) + (grad,))
        full = [None] * len(flat)
        for i, g in zip(plan.wrt, got):
            full[i] = g
        return (None, *full)


def _needed(nodes, stop):
    needed, stack = set(), list(nodes)
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            if n not in stop:
                stack.extend(n.all_input_nodes)
    return needed
