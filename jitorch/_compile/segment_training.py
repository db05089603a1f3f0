"""Graph breaks under autograd: each segment between breaks runs with its own compiled forward and backward.

A training specialization with graph breaks is replayed like an inference one (replay.py): the Python reruns with
the ops deferred, and each segment is flushed at its break. When values of a flush require grad, `SegmentRun` plans
the flush as *stages*. A stage is the segment's ops some live values need, compiled as a `segment_plan.SegmentPlan`
(a joint forward + backward graph, both halves fused, run as one `jitorch.autograd.Function`). Each live value that
requires grad is the one differentiable output of its own stage, which takes the live values it is computed from as
inputs. So its ``grad_fn`` is that Function's: a hook, ``retain_grad`` or ``autograd.grad`` on it sees the whole
gradient, an output nobody differentiates never runs its backward (an input only it reaches gets no gradient), as
in eager mode. A stage whose joint graph cannot be compiled runs its ops eagerly (values and autograd exactly
eager's); the live values that do not require grad come from one compiled graph without autograd.

>>> import jitorch
>>> from jitorch._compile.segments import record
>>> from jitorch._compile.replay import Replay
>>> def f(x):
...     y = (x * x).exp()
...     return y * 2 if y.sum() > 0 else y
>>> x = jitorch.tensor([0.5, -1.0], requires_grad=True)
>>> run = Replay(record(f, (x,), {}).root, budget=lambda: True, training=True)
>>> out = run.call(f, (x,), {})
>>> out.grad_fn.name()
'_SegmentStageBackward'
>>> out.backward(jitorch.ones(2))
>>> x.grad.allclose(4 * x.detach() * (x.detach() ** 2).exp())
True
"""
from __future__ import annotations

from .._tensor import Tensor
from ..autograd.grad_mode import enable_grad, no_grad
from ..autograd.view_creation import NO_GRAD_VIEW
from ..fx.graph import Graph
from ..fx.graph_module import GraphModule
from ..fx.node import map_aggregate
from ..nn.modules.module import Module
from .backend import CompiledGraph
from .functionalize import is_random
from .segment_plan import SegmentPlan, _needed, interpret
from .training import Unsupported

__all__ = ["SegmentRun", "TrainingNotes", "compile_training_segment", "backward_kernels"]


class TrainingNotes:
    """What the segment recorder notes for a training replay, beside the graph: each value's ``meta["rg"]`` (it
    requires grad), each op's ``meta["grad"]`` (grad mode) and ``meta["detach"]`` (positions of its tensors read
    through a detached alias), ``meta["used"]`` on values read after their segment's break (autograd keeps others
    alive while recording; a replay does not, so those are what it flushes), and ``Segment.untrainable``.

    The recorder sets ``_pos`` to 0 and ``_detached`` to ``[]`` before mapping an op's tensors, and ``produced``
    maps the id of every recorded tensor and array to its node.
    """

    def use(self, value):
        """Mark the recorded values in ``value`` (a tensor or a structure of them) as read after their break."""
        def mark(a):
            if isinstance(a, Tensor):
                node = self.produced.get(id(a)) or self.produced.get(id(a._data))
                if node is not None:
                    node.meta["used"] = True
            # The leaf itself: map_aggregate rebuilds NamedTuples through their constructors, and one that checks
            # its fields (a PackedSequence: ``batch_sizes`` None means "unpack ``data``") must get them back.
            return a
        map_aggregate(value, mark)

    def _check_identity(self, a, node):
        """Note how ``a``'s autograd identity differs from its node's: a detached read (an alias made without an
        op, ``detach_()``) is kept by position; anything else makes the segment untrainable."""
        pos = self._pos
        self._pos += 1
        rg, want = a._requires_grad, node.meta["rg"]
        if node.op == "placeholder" or self.nodes.get(id(a)) is node:
            if rg == want:
                return
            if not rg and node.op != "placeholder":
                self._detached.append(pos)
                return
        elif not rg:  # an alias without history reads the values only
            if want:
                self._detached.append(pos)
            return
        if self.seg.untrainable is None:
            from .segments import user_location  # segments imports this module

            where, source = user_location()
            self.seg.untrainable = (f"{where}: a tensor's requires_grad changed outside the traced ops "
                                    f"(requires_grad_() on a detached alias or a leaf) ({source}): the rest of "
                                    "the call runs eagerly under autograd")


class _EagerStage:
    """A stage whose joint graph cannot be compiled: its ops run eagerly, with eager autograd."""

    kernel_ops = backward_kernels = ()

    def __init__(self, gm, why):
        self.gm, self.why = gm, why

    def __call__(self, flat):
        with enable_grad():
            return interpret(self.gm, flat)


class _ValueStage:
    """A stage none of whose outputs requires grad: its compiled graph, run without recording autograd."""

    backward_kernels = ()

    def __init__(self, gm):
        self.graph = CompiledGraph(gm)
        # Which outputs the user's code made in grad mode: views among them must not be marked as made in no_grad
        # (torch refuses in-place writes with grad into those, e.g. ``out[:, t] = logits`` after a graph break).
        outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        self.made_with_grad = [getattr(o, "op", None) == "call_function" and o.meta.get("grad", False) for o in outs]

    @property
    def kernel_ops(self):
        return self.graph.kernel_ops

    def __call__(self, flat):
        with no_grad():
            got = self.graph(flat)
        for value, with_grad in zip(got, self.made_with_grad):
            if with_grad and isinstance(value, Tensor) and value._nograd_view is NO_GRAD_VIEW:
                value._nograd_view = None
        return got


def _stage_graph(seg, outs, cuts, needed):
    """A graph over ``(*seg.placeholders, *cuts)`` computing ``outs``: earlier stages' values come in as inputs."""
    graph, env = Graph(), {}
    # A module buffer the segment updates functionally: the flush writes its new values into this input's memory.
    written = {n.args[0] for n in seg.graph.nodes if n.meta.get("functional")}
    for p in seg.placeholders:
        env[p] = graph.node_copy(p)
        if p in written:
            env[p].meta["written"] = True
    for c in cuts:
        env[c] = graph.placeholder(f"cut_{c.name}")
        env[c].meta = dict(c.meta)
    for n in seg.graph.nodes:
        if n.op != "placeholder" and n in needed and n not in env:
            env[n] = graph.node_copy(n, env.__getitem__)
    graph.output(tuple(env[o] for o in outs))
    return GraphModule(Module(), graph)


class SegmentRun:
    """How a training flush computes the live values ``nodes`` of ``seg`` (steps before ``upto``): stages in order.

    ``SegmentRun(seg, nodes, upto)(flat)`` returns one tensor per node, with its autograd history; ``flat`` holds
    the values bound to ``seg.placeholders``. Each stage is compiled on its first run.
    """

    def __init__(self, seg, nodes, upto):
        for n, _ in seg.steps[:upto]:
            if getattr(n.target, "inplace", False):
                raise Unsupported(f"in-place {n.target.__name__}() in a segment under autograd")
        self.nodes = list(nodes)
        order = {n: i for i, n in enumerate(seg.graph.nodes)}
        # One stage per live value that requires grad, with the others it is computed from as inputs: a Function
        # with one differentiable output runs its backward exactly when eager autograd would reach that value. A
        # value that requires grad and that two stages would compute becomes a stage of its own (not recomputed).
        cuts = {n for n in self.nodes if n.meta.get("rg")}
        # Each random row is a stage of its own, run once per flush in program order (never recomputed by two
        # stages, never skipped): the generator advances as in eager mode, and the backward reads the drawn values.
        cuts |= {n for n, _ in seg.steps[:upto] if is_random(n)}
        while True:
            users = {}
            for c in cuts:
                for n in _needed([c], cuts - {c}):
                    if n not in cuts and n.op != "placeholder" and n.meta.get("rg"):
                        users.setdefault(n, set()).add(c)
            shared = {n for n, cs in users.items() if len(cs) > 1}
            if not shared:
                break
            cuts |= shared - set().union(*(_needed([n], ()) - {n} for n in shared))  # the latest of them first
        self.stages = []  # [outputs, stage inputs beyond seg's placeholders, graph, runner (None until the first run)]
        for c in sorted(cuts, key=order.__getitem__):
            self._add(seg, [c], cuts - {c}, order)
        plain = [n for n in self.nodes if not n.meta.get("rg")]
        if plain:
            self._add(seg, plain, cuts, order)

    def _add(self, seg, outs, stop, order):
        needed = _needed(outs, stop)
        inputs = sorted(needed & stop, key=order.__getitem__)
        self.stages.append([outs, inputs, _stage_graph(seg, outs, inputs, needed), None])

    @property
    def kernel_ops(self):
        return [k for st in self.stages if st[3] is not None for k in st[3].kernel_ops]

    @property
    def backward_kernels(self):
        return [k for st in self.stages if st[3] is not None for k in st[3].backward_kernels]

    @property
    def eager_stages(self):
        """Why each stage that runs eagerly does (an empty list: every stage is compiled)."""
        return [st[3].why for st in self.stages if isinstance(st[3], _EagerStage)]

    def _runner(self, stage, inputs):
        outs, _, gm, runner = stage
        if runner is None:
            if any(o.meta.get("rg") for o in outs):
                try:
                    runner = SegmentPlan(gm, inputs)
                except Unsupported as err:
                    runner = _EagerStage(gm, str(err))
            else:
                try:
                    runner = _ValueStage(gm)
                except AssertionError as err:  # a graph the fusion pass cannot schedule: its ops run eagerly
                    runner = _EagerStage(gm, f"fusion cannot schedule the stage: {err}")
            stage[3] = runner
        return runner

    def __call__(self, flat, forward_only=False):
        """The live values, in the order of ``nodes``; ``forward_only`` computes them without any autograd (used
        to compile the stages ahead on the recording's inputs)."""
        values = {}
        for stage in self.stages:
            outs, cuts = stage[0], stage[1]
            inputs = tuple(flat) + tuple(values[c] for c in cuts)
            runner = self._runner(stage, inputs)
            if forward_only:
                with no_grad():
                    got = runner.fwd(inputs)[:runner.n_outs] if isinstance(runner, SegmentPlan) else runner(inputs)
                # Later stages are compiled for inputs that require grad as these will.
                got = [g.detach().requires_grad_() if o.meta.get("rg") else g for o, g in zip(outs, got)]
            else:
                got = runner(inputs)
            values.update(zip(outs, got))
        return [values[n] for n in self.nodes]


def compile_training_segment(seg, nodes, upto, examples):
    """Compile a segment's stages for its recorded live values ahead, on the values it was recorded with."""
    if examples is None or len(examples) != len(seg.placeholders):
        return
    try:
        run = SegmentRun(seg, nodes, upto)
    except Unsupported:  # in-place steps: a training replay runs them eagerly
        return
    flags = tuple(a._requires_grad for a in examples)
    try:
        run(examples, forward_only=True)  # compiles each stage (and its forward kernels)
    except Exception:  # the recording's inputs changed since (a later in-place write): compile at the first replay
        return
    seg.compiled[(tuple(n.name for n in nodes), upto, flags)] = run


def backward_kernels(root):
    """The backward kernels of every compiled stage under ``root``."""
    return [k for seg in root.walk() for run in seg.compiled.values() for k in getattr(run, "backward_kernels", ())]
