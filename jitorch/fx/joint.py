"""``make_joint``: record the forward *and* the backward of a function as one graph of op-table primitives.

The function runs under :mod:`make_fx`'s recording mode; then ``jitorch.autograd.grad`` runs on its outputs while
the mode is still active. Backward formulas are written in jitorch ops, so their primitives land in the same graph,
reading the forward's nodes wherever they use a saved tensor. The result is the *joint graph* that the compiler
partitions into a forward and a backward and fuses: it takes ``(inputs..., tangents...)`` and returns
``(outputs..., gradients of the inputs that require grad...)``.

Every node carries ``node.meta["phase"]``: ``"forward"`` for the inputs and the forward's ops, ``"backward"`` for the
tangents and the ops the backward ran, ``"output"`` for the output node. Forward nodes never read backward nodes.

>>> import jitorch
>>> from jitorch.fx.joint import make_joint
>>> x = jitorch.tensor([1.0, 2.0], requires_grad=True)
>>> gm = make_joint(lambda x: (x * x).sum())(x)
>>> loss, grad = gm(jitorch.tensor([3.0, 4.0]))
>>> loss, grad
(tensor(25.), tensor([6., 8.]))
>>> sorted({n.meta["phase"] for n in gm.graph.nodes})
['backward', 'forward', 'output']
"""
from __future__ import annotations

import contextlib
import functools

from .._dispatch import pop_mode, push_mode
from .._tensor import Tensor
from ..autograd import grad as autograd_grad
from ..autograd.engine import leaf_hooks_suppressed
from ..autograd.graph import Node
from ..nn.modules.module import Module
from .graph import Graph
from .graph_module import GraphModule
from ._created import noting_created
from .make_fx import _RecordingMode, value_reads_guard

__all__ = ["make_joint", "make_joint_for_module", "FORWARD", "BACKWARD"]

FORWARD, BACKWARD, OUTPUT = "forward", "backward", "output"


def _flat_tensors(result, what):
    """The function's outputs as a list of tensors (a Tensor, or a tuple/list of them)."""
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"make_joint: {what} must be tensors, got {type(o).__name__}")
    return outs


def _mark_phase(graph, phase):
    """Label every node not labelled yet: the nodes appended since the previous call belong to ``phase``."""
    for node in graph.nodes:
        node.meta.setdefault("phase", phase)


def _differentiated(outs, tangents):
    """The (outputs, seeds) pairs to differentiate; with no tangents, the first output is a scalar loss."""
    if tangents is None:
        loss = outs[0]
        if loss.numel() != 1:
            raise RuntimeError("make_joint: without tangents the (first) output must be a scalar loss, got shape "
                               f"{tuple(loss.shape)}; pass tangents=(...) for the outputs")
        return [loss], None
    if len(tangents) != len(outs):
        raise RuntimeError(f"make_joint: got {len(tangents)} tangents for {len(outs)} outputs")
    # A None tangent: that output is not differentiated (an index, a count returned beside the loss).
    pairs = [(o, t) for o, t in zip(outs, tangents) if t is not None]
    return [o for o, _ in pairs], [t for _, t in pairs]


class _CallBoundary(Node):
    """Stands in for the ``grad_fn`` of tensor arguments while a call is recorded: it has no next edges, so the
    recorded backward ends at the call's inputs (their gradients are captured there)."""

    def __init__(self, real, outputs):
        super().__init__((), None)
        self.real = real
        self._out_meta = (None,) * outputs

    def apply(self, grads):
        return ()

    def name(self):
        return self.real.name()


@contextlib.contextmanager
def _inputs_end_the_backward(args):
    """Records the call with its tensor arguments' histories cut off. Through them the backward ran (and freed) the
    caller's nodes before the call: an earlier compiled call whose output feeds this one (a recurrent step compiled,
    then called in a loop) failed its own backward. The arguments stay the same objects and stay non-leaves (the
    function may read them by name, or ask ``is_leaf``)."""
    cut = {id(a): a for a in args if isinstance(a, Tensor) and a.grad_fn is not None}
    outputs = {}
    for a in cut.values():
        outputs[a.grad_fn] = max(outputs.get(a.grad_fn, 0), a._output_nr + 1)
    boundary = {real: _CallBoundary(real, n) for real, n in outputs.items()}
    saved = [(a, a.grad_fn) for a in cut.values()]
    for a, real in saved:
        a.grad_fn = boundary[real]
    try:
        yield
    finally:
        for a, real in saved:
            a.grad_fn = real


def make_joint(fn, *, decompositions=None, refuse_value_reads=False):
    """``make_joint(fn)(*args, tangents=None)``: the joint forward + backward GraphModule of ``fn`` at ``args``.

    Tensor ``args`` become placeholders (in order), then one placeholder per tangent. The gradients are taken with
    respect to the tensor args with ``requires_grad=True``. Without ``tangents``, ``fn`` returns a scalar loss, or a
    tuple whose first element is the loss (the rest are returned undifferentiated); with ``tangents`` (one per
    output; None for an output not to differentiate, which gets no placeholder), the vector-Jacobian product is
    recorded. The module returns ``(*outputs, *grads)``, one gradient per distinct tensor (an argument passed twice
    gets its whole gradient at its first position only); an input the
    outputs do not depend on gets ``None``. Non-tensor args are baked in, as in :func:`make_fx`.
    ``decompositions`` and ``refuse_value_reads`` are make_fx's (``decomposition_table``, and the refusal of reads
    of input-dependent values in the forward, which ``make_fx(joint=True)`` asks for; the compiler does not).

    >>> import jitorch
    >>> w = jitorch.ones(2, requires_grad=True)
    >>> gm = make_joint(lambda w, x: w * x)(w, jitorch.ones(2), tangents=(jitorch.ones(2),))
    >>> gm(jitorch.ones(2), jitorch.tensor([2.0, 3.0]), jitorch.tensor([1.0, 10.0]))
    (tensor([2., 3.]), tensor([ 2., 30.]))
    """
    @functools.wraps(fn)
    def record(*args, tangents=None):
        graph, root = Graph(), Module()
        mode = _RecordingMode(graph, root, decompositions)
        wrt = {}  # id -> tensor: a tensor passed twice gets its gradient once, as eager accumulates it once
        for i, a in enumerate(args):
            node = graph.placeholder(f"arg{i}")
            if isinstance(a, Tensor):
                mode.bind(a, node)
                if a.requires_grad:
                    wrt.setdefault(id(a), a)
        wrt = list(wrt.values())
        if not wrt:
            raise RuntimeError("make_joint: no tensor argument requires grad, so there is no backward to record")
        _mark_phase(graph, FORWARD)
        if tangents is not None:
            tangents = list(tangents)
            _flat_tensors([t for t in tangents if t is not None], "tangents")
            for i, t in enumerate(tangents):
                if t is not None:
                    mode.bind(t, graph.placeholder(f"tangent{i}"))
            _mark_phase(graph, BACKWARD)
        push_mode(mode)
        try:
            with _inputs_end_the_backward(args):
                with noting_created(mode.created), value_reads_guard(mode, refuse_value_reads):
                    outs = _flat_tensors(fn(*args), "outputs")
                _mark_phase(graph, FORWARD)
                roots, seeds = _differentiated(outs, tangents)
                # create_graph=False: the backward's ops run without building another autograd graph, but the
                # mode still records each of them.
                with leaf_hooks_suppressed():  # the leaves' hooks run at backward time, on the real gradients
                    grads = autograd_grad(roots, wrt, grad_outputs=seeds, allow_unused=True)
            _mark_phase(graph, BACKWARD)
        finally:
            pop_mode()
        result = tuple(mode.arg(o) for o in outs) + tuple(None if g is None else mode.arg(g) for g in grads)
        _mark_phase(graph, BACKWARD)  # constants first seen as outputs (a gradient that is a fresh zeros tensor)
        graph.output(result)
        _mark_phase(graph, OUTPUT)
        return GraphModule(root, graph)
    return record


def make_joint_for_module(module, loss_fn):
    """``make_joint_for_module(module, loss_fn)(x, *extra)``: joint graph of ``loss_fn(module(x), *extra)``.

    The module's parameters are lifted into the first placeholders, so the GraphModule is called as
    ``gm(*module.parameters(), x, *extra)`` (any values of those shapes) and returns
    ``(loss, *grads of the parameters that require grad, *grads of x / extra when they require grad)``.
    Buffers stay constants of the graph.

    >>> import jitorch
    >>> from jitorch import nn
    >>> lin = nn.Linear(2, 1)
    >>> gm = make_joint_for_module(lin, lambda y: y.sum())(jitorch.ones(3, 2))
    >>> [tuple(g.shape) for g in gm(*lin.parameters(), jitorch.ones(3, 2))[1:]]
    [(1, 2), (1,)]
    """
    def record(x, *extra, tangents=None):
        params = list(module.parameters())

        def run(*flat):
            # ``flat`` starts with the very parameter objects the module holds: the recording mode binds them
            # to placeholders by identity, so the module's own forward reads the placeholders.
            return loss_fn(module(flat[len(params)]), *flat[len(params) + 1:])

        return make_joint(run)(*params, x, *extra, tangents=tangents)
    return record
