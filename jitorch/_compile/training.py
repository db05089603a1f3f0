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

from dataclasses import dataclass

import numpy as np

from .._tensor import Tensor
from ..autograd import grad as autograd_grad
from ..autograd.function import Function
from ..autograd.grad_mode import GradState, enable_grad, no_grad
from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.joint import BACKWARD, FORWARD, make_joint
from ..fx.make_fx import Primitive
from ..fx.node import Node, map_aggregate
from ..utils._pytree import tree_flatten, tree_unflatten
from .backend import CompiledGraph, _fetch, write_back
from .decompose import decompose
from .functionalize import CompileState, functionalize, functionalize_intermediates, is_random, rng_state, \
    set_rng_state
from .fusion import fusible, reduction_axes, row_op_axes
from .view_writes import functionalize_view_writes, is_view

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


def _cheap(node):
    """A forward value the backward may recompute: one pointwise row (deterministic, no attributes to honour)."""
    target = node.target
    return node.op == "call_function" and isinstance(target, Primitive) and not target.inplace \
        and target.op.pointwise and "val" in node.meta


def _bytes(node):
    if node.op == "placeholder":  # an input is alive anyway (a parameter, the batch): keeping it costs nothing
        return 0
    shape, dtype = node.meta["val"]
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def recompute_plan(saved):
    """``(saved', recomputed)``: save the inputs of elementwise chains and recompute the chains in the backward.

    Every saved value made by a pointwise row is replaced, transitively, by the inputs of its pointwise chain (the
    chain's boundary: inputs, matmuls, reductions...). The backward recomputes the chain inside its own fused
    kernels, so e.g. GELU's ``x*x``, ``tanh(...)`` and ``1 + tanh(...)`` are no longer kept between the passes. Each
    connected chain is recomputed only when that keeps strictly fewer bytes (a lone ReLU would not: its input is as
    large as its output).
    """
    chains = {}  # node -> the chain (a shared list) it belongs to
    for s in saved:
        if not _cheap(s) or s in chains:
            continue
        chain, stack = [], [s]
        while stack:
            n = stack.pop()
            if n in chains:
                if chains[n] is not chain:  # two saved values share a chain: merge
                    other = chains[n]
                    chain.extend(other)
                    for m in other:
                        chains[m] = chain
                continue
            chains[n] = chain
            chain.append(n)
            stack.extend(a for a in n.all_input_nodes if _cheap(a))
    keep = [s for s in saved if s not in chains]
    recomputed = set()
    for chain in {id(c): c for c in chains.values()}.values():
        members = set(chain)
        boundary = [a for n in chain for a in n.all_input_nodes if a not in members and a.op != "get_attr"]
        boundary = list(dict.fromkeys(boundary))
        old = sum(_bytes(s) for s in saved if s in members)
        new = sum(_bytes(b) for b in boundary if b not in keep)
        if new < old:
            recomputed |= members
            keep += [b for b in boundary if b not in keep]
        else:
            keep += [s for s in saved if s in members and s not in keep]
    return [s for s in saved if s in keep] + [k for k in keep if k not in saved], recomputed


def split_joint(gm, n_outs, recompute=True):
    """``(forward_gm, backward_gm, n_saved)`` from a joint GraphModule whose first ``n_outs`` results are outputs.

    With ``recompute`` the backward recomputes cheap elementwise values instead of receiving them (`recompute_plan`).
    """
    nodes = list(gm.graph.nodes)
    results = nodes[-1].args[0]
    outs, grads = results[:n_outs], results[n_outs:]
    fwd = [n for n in nodes if n.meta.get("phase") == FORWARD]
    bwd = [n for n in nodes if n.meta.get("phase") == BACKWARD]
    fwd_set = set(fwd)
    saved = []  # forward values the backward reads (constants are copied instead: they cost nothing to keep)
    for n in [a for b in bwd for a in b.all_input_nodes] + [g for g in grads if isinstance(g, Node)]:
        if n in fwd_set and n.op != "get_attr" and n not in saved:
            saved.append(n)
    recomputed = set()
    if recompute:
        saved, recomputed = recompute_plan(saved)

    fg, fmap = Graph(), {}
    for n in fwd:
        fmap[n] = fg.node_copy(n, fmap.__getitem__)
    fg.output(tuple(fmap[o] for o in outs) + tuple(fmap[s] for s in saved))

    bg, bmap = Graph(), {}
    for s in saved:
        bmap[s] = bg.placeholder(f"saved_{s.name}")
        bmap[s].meta = dict(s.meta)

    def lookup(a):
        if a not in bmap:  # a forward constant first read here
            bmap[a] = bg.node_copy(a)
        return bmap[a]

    # A recomputed chain is copied once per kind of reader, right before its first reader. Readers that fuse
    # (pointwise rows, reductions) get a copy that fuses into their own kernel and reads only the chain's inputs;
    # a library call (a matmul reading GELU's output) gets a copy whose kernel writes just the value it reads.
    # One shared copy would make its kernel write every intermediate that some fused reader needs.
    copies = {True: {}, False: {}}

    def recompute(a, fused):
        done = copies[fused]
        if a not in done:
            done[a] = bg.node_copy(a, lambda p: recompute(p, fused) if p in recomputed else lookup(p))
        return done[a]

    for n in [n for n in bwd if n.op == "placeholder"]:
        bmap[n] = bg.node_copy(n, lookup)
    for n in [n for n in bwd if n.op != "placeholder"]:
        fused = _fuses(n)
        bmap[n] = bg.node_copy(n, lambda a: recompute(a, fused) if a in recomputed else lookup(a))
    bg.output(tuple(None if g is None else recompute(g, False) if g in recomputed else lookup(g) for g in grads))
    return GraphModule(gm, fg), GraphModule(gm, bg), len(saved)


def _fuses(node):
    """Whether the fusion pass may put ``node`` in a kernel (then recomputed values it reads fuse in with it)."""
    return fusible(node) or reduction_axes(node) is not None or row_op_axes(node) is not None


def own_outputs(outs, inputs):
    """Outputs of a compiled forward as tensors of their own: a view of one of the graph's intermediates (the Python
    runner's slice of a product) is cut from that base, which has no autograd history; the native runner's outputs
    never have one. Otherwise an in-place write into the output would rebase it on the history-less base and lose
    the Function's gradient. Views of an input (or of an input's base) or of another output keep their base."""
    keep = {id(a) for a in inputs if isinstance(a, Tensor)}
    keep |= {id(a._base) for a in inputs if isinstance(a, Tensor) and a._base is not None}
    keep |= {id(o) for o in outs if isinstance(o, Tensor)}
    return tuple(Tensor._make(o._data) if isinstance(o, Tensor) and o.__dict__.get("_base") is not None
                 and id(o._base) not in keep else o for o in outs)


def eager_saved_outputs(gm, n_outs):
    """Indices of the first ``n_outs`` outputs of ``gm`` that eager autograd keeps for the backward: made (through
    views) by a row that saves its output (``exp``, ``tanh``, ``softmax``...). Eagerly, a write into such a value
    before the backward raises; the compiled backward recomputes it or keeps its own copy, so the compiled Function
    saves these outputs too, and the same write raises there."""
    found = []
    for i, o in enumerate(_output_nodes(gm, n_outs)):
        made = (_view_chain(o) or [o])[-1]
        if isinstance(made, Node) and made.op == "call_function" and isinstance(made.target, Primitive) and \
                made.target.op.saves in ("outputs", "both") and not made.target.inplace:
            found.append(i)
    return tuple(found)


def as_output_dtypes(grads, dtypes):
    """Upstream gradients in their outputs' dtypes: the engine hands a root gradient over as the caller gave it
    (``out64.backward(grad32)``), and the compiled backward reads its memory as the traced tangent's dtype."""
    return tuple(g if g is None or g.dtype == d else g.to(d) for g, d in zip(grads, dtypes))


class _CompiledTraining(Function):
    """One call of a `TrainingPlan`: the compiled forward now, the compiled backward when gradients arrive."""

    _eager_views = True  # a compiled region: its returned views behave as eager views

    @staticmethod
    def forward(ctx, plan, *flat):
        # A double backward reruns the function eagerly: it must draw the masks this forward draws.
        ctx.rng = None
        if plan.random:
            ctx.rng = rng_state(cuda=any(isinstance(a, Tensor) and a.is_cuda for a in flat))
        res = plan.fwd(flat)
        n, k = plan.n_outs, len(plan.writes)
        res = own_outputs(res[:n], flat) + tuple(res[n:])
        if not all(plan.diff):
            # A non-differentiable output is a tensor of its own even when the graph returns the same value twice
            # (``loss, loss.detach()``): marking it must not mark the differentiable one.
            res = tuple(Tensor._make(o._data) if i < n and not plan.diff[i] else o for i, o in enumerate(res))
        write_back(plan.writes, res[n:n + k])
        ctx.plan = plan
        ctx.dtypes = tuple(o.dtype for o, d in zip(res[:n], plan.diff) if d)
        ctx.mark_non_differentiable(*(o for o, d in zip(res[:n], plan.diff) if not d))
        # Saved through save_for_backward so an in-place change before backward raises, as in eager autograd; the
        # outputs eager autograd would keep too (their values are not what the compiled backward reads).
        checked = [res[i] for i in plan.eager_saved]
        ctx.n_checked = len(checked)
        # Non-tensor arguments (a flag, a count in a tuple of inputs) are kept aside: only tensors are saved.
        ctx.others = [(i, a) for i, a in enumerate(flat) if not isinstance(a, Tensor)]
        ctx.n_flat = len(flat) - len(ctx.others)
        ctx.save_for_backward(*(a for a in flat if isinstance(a, Tensor)), *res[n + k:], *checked)
        return res[:n] if plan.tuple_out or n > 1 else res[0]

    @staticmethod
    def backward(ctx, *grads):
        plan = ctx.plan
        saved = ctx.saved_tensors
        flat, saved_values = list(saved[:ctx.n_flat]), saved[ctx.n_flat:len(saved) - ctx.n_checked]
        for i, a in ctx.others:
            flat.insert(i, a)
        grads = as_output_dtypes([g for g, d in zip(grads, plan.diff) if d], ctx.dtypes)
        if GradState.enabled:
            # The engine turns grad mode on for a backward exactly when create_graph=True; the compiled backward
            # builds no graph, so differentiate an eager rerun instead.
            # The rerun draws the forward's numbers and leaves the generators and buffers as they are now.
            now = CompileState(plan.writes)
            if ctx.rng is not None:
                set_rng_state(ctx.rng)
            try:
                with enable_grad():
                    outs = [o for o in tree_flatten(plan.eager(flat))[0] if isinstance(o, Tensor)]
                    outs = [o for o, d in zip(outs, plan.diff) if d]
                    wrt = [flat[i] for i in plan.wrt]
                    got = autograd_grad(outs, wrt, grad_outputs=list(grads), create_graph=True, allow_unused=True)
            finally:
                now.restore()
        else:
            got = plan.bwd(tuple(saved_values) + tuple(grads))
        full = [None] * len(flat)
        for i, g in zip(plan.wrt, got):
            full[i] = g
        return (None, *full)


def _output_nodes(gm, n_outs):
    """The first ``n_outs`` outputs of ``gm`` (nodes, or constants)."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return list(out[:n_outs]) if isinstance(out, (tuple, list)) else [out]


def _view_chain(node):
    """The nodes ``node`` views through view rows, nearest first (empty when it is not a view)."""
    chain = []
    while is_view(node):
        node = node.args[0]
        chain.append(node)
    return chain


def _view_roots(gm, n_outs):
    """``(outputs, {output: the nodes it views through view rows, nearest first})`` of ``gm``'s first outputs."""
    outs = [o for o in _output_nodes(gm, n_outs) if isinstance(o, Node)]
    return set(outs), {o: _view_chain(o) for o in outs}


def _aliased_outputs(gm, n_outs):
    """Whether one of the first ``n_outs`` outputs of ``gm`` is a view (through view rows) of another of them."""
    mine, chains = _view_roots(gm, n_outs)
    return any(n in mine for chain in chains.values() for n in chain)


def _sibling_outputs(gm, n_outs):
    """Two outputs viewing one intermediate that is not an output (``y[:, :2], y[:, 1:3]``): compiled outputs are
    cut from such a base, so a write into one would not reach the other's gradient."""
    mine, chains = _view_roots(gm, n_outs)
    roots = [chain[-1] for o, chain in chains.items() if chain and chain[-1] not in mine
             and chain[-1].op != "placeholder"]
    return len(roots) != len(set(roots))


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
    return JointSpec(joint, len(outs), tuple_out, wrt, call, [b for b, _ in writes], diff, structure)


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
