"""The capture mode: runs every op eagerly (so capture produces real values) and records a replay step for it.

Pushed on ``jitorch._dispatch.MODES`` by ``CPUGraph.capture_begin``. The recorded program is a flat list of steps
over static arrays: the arrays of tensors made before the capture are read by reference, the arrays of tensors made
inside it are written in place by each replay.

>>> import jitorch
>>> from jitorch.cpu import CPUGraph, graph
>>> x = jitorch.ones(2); g = CPUGraph()
>>> with graph(g):
...     y = x * 3
>>> _ = x.copy_(jitorch.tensor([1.0, 2.0])); g.replay(); y
tensor([3., 6.])
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from .._dispatch import apply_inplace, eager, run_below
from .._tensor import Tensor
from ..ops.table import OPS
from ..ops.conv_layouts import STASH
from ._steps import inplace_step, kernel_step, plan_operands, restore_step, root_of, window_keeping_step

__all__ = ["CaptureMode", "Record"]


@dataclass
class Record:
    """One replay step with what the native lowering needs: the closure ``fn`` plus its operands, structured.

    ``kind`` is ``"kernel"`` (``op`` on ``datas`` into ``outs``; None entries are aliases), ``"inplace"`` (``datas[0]``
    is the target, ``outs == [target]``), ``"draw"`` (``fn`` refills ``outs[0]`` from the generator) or
    ``"restore"`` (copy ``datas[0]``, a snapshot, into ``outs[0]``).
    """

    kind: str
    fn: object
    description: str
    op: object = None
    datas: list = field(default_factory=list)
    casts: tuple = ()
    cnp: object = None
    attrs: dict = field(default_factory=dict)
    outs: list = field(default_factory=list)

# Rows the dispatcher runs with ``cast_check=False`` (copy_, fill_, zero_): the mode hook does not receive the flag.
_NO_CAST_CHECK = {OPS["copy"], OPS["fill"]} if "fill" in OPS else {OPS["copy"]}
_CONVOLUTION = OPS["convolution"]


class CaptureMode:
    """The ``MODES`` entry of one capture. ``abort`` is the graph's way to end the capture on an error."""

    # Optimizers update with tensor ops (not raw array arithmetic) while this is set, so their updates are recorded.
    records_updates = True
    # conv2d keeps its window matrix for the weight gradient: the replay of its step refills it.
    keeps_conv_windows = True

    def __init__(self, abort):
        self.abort = abort
        self.records: list[Record] = []  # replay steps, in op order
        self.prologue: list[Record] = []  # restores of tensors created inside the capture and later mutated
        self.handles: list = []  # (weakref to a tensor made inside, its root array): who may still read a buffer
        self.born: dict[int, np.ndarray] = {}  # id -> root array of tensors created inside the capture
        self.written: dict[int, np.ndarray] = {}  # id -> root arrays some step writes
        self.pending_draw = None  # set by the RNG hook between a draw and the sampler wrapping it
        # (what, read, value): Python values the capture baked into its steps (an optimizer's lr); replay checks
        # ``read() == value`` first, as a replay with a changed lr would silently keep the captured one.
        self.value_guards: list = []
        self.cleared: set = set()  # ids of tensors whose .grad the captured code set to None (`_grad_binds`)
        # id -> (weakref to a tensor made outside the capture that a step reads, the array it held, a description):
        # steps read that very array, so a tensor given new storage (``resize_``, ``x.data = y``) would be ignored.
        self.inputs: dict = {}

    # -- bookkeeping used by the hooks ----------------------------------------------------------------------------
    def note_born(self, array):
        if type(array) is np.ndarray:
            root = root_of(array)
            self.born.setdefault(id(root), root)

    def add_step(self, record):
        self.records.append(record)
        for array in record.outs:
            if array is None:
                continue
            root = root_of(array)
            self.written[id(root)] = root

    def note_inputs(self, tensors):
        """Remember the tensors made outside the capture that the steps read, with the arrays they read."""
        for t in tensors:
            d = t._data
            root = root_of(d)
            if id(t) not in self.inputs and id(root) not in self.born and id(root) not in self.written:
                self.inputs[id(t)] = (weakref.ref(t), d, f"buf{id(d) & 0xffff:04x}{list(d.shape)}:{d.dtype}")

    def guard_value(self, what, read, value):
        """Note that the steps recorded so far depend on the Python value ``read()`` being ``value``."""
        self.value_guards.append((what, read, value))

    def fail(self, message):
        """End the capture, then raise: the caller's ``with`` sees the error with no mode left pushed."""
        self.abort()
        raise RuntimeError(message)

    def _check(self, op, tensors_in):
        if self.pending_draw is not None:
            self.fail(f"CPU graph capture: the random sampler drawing with '{self.pending_draw[1]}' is not "
                      "supported yet (rand, randn, randint, randperm, normal and the in-place samplers are)")
        for t in tensors_in:
            if type(t._data) is not np.ndarray:
                self.fail(f"CPU graph capture: '{op.name}' got a tensor on {t.device}; a CPU graph records CPU "
                          "tensors only (use jitorch.cuda graphs for the GPU)")

    _run = run_below  # ``self._run(fn, *args)``: fn runs with this mode popped

    # -- the MODES protocol ---------------------------------------------------------------------------------------
    def dispatch(self, op, args, attrs):
        args = tuple(Tensor._make(a) if type(a) is np.ndarray else a for a in args)
        tensors_in = [a for a in args if isinstance(a, Tensor)]
        self._check(op, tensors_in)
        self.note_inputs(tensors_in)
        result = eager(op, args, attrs)
        outs = result if isinstance(result, tuple) else (result,)
        in_arrays = [t._data for t in tensors_in]
        targets = []
        for o in outs:
            d = o._data
            if type(d) is np.ndarray:
                self.handles.append((weakref.ref(o), root_of(d)))
            # An empty result needs no step (NumPy says an empty view shares no memory with its input, so without
            # this a view of an empty input would be a step writing that input, or a read-only broadcast refused).
            if d.size == 0 or any(np.may_share_memory(d, a) for a in in_arrays):
                targets.append(None)  # a view of an input: it follows the input without a step
            elif not d.flags.writeable:
                self.fail(f"CPU graph capture: '{op.name}' produced a read-only array that replay cannot refill")
            else:
                targets.append(d)
        if all(t is None for t in targets):
            return result
        datas, casts, cnp = plan_operands(op, args)
        if op is _CONVOLUTION and STASH.want and STASH.cols is not None and targets[0] is not None:
            # conv2d keeps the window matrix for its weight gradient (`conv_ops.windows_kept_under`): the step
            # refills that very array, which the gradient's step reads.
            cols = STASH.cols[1]
            self.add_step(Record("kernel", window_keeping_step(op, datas, casts, cnp, attrs, targets[0], cols),
                                 self._describe(op, args, outs), op, datas, casts, cnp, attrs, [targets[0], cols]))
            return result
        self.add_step(Record("kernel", kernel_step(op, datas, casts, cnp, attrs, targets),
                             self._describe(op, args, outs), op, datas, casts, cnp, attrs, targets))
        return result

    def dispatch_inplace(self, op, self_tensor, args, attrs):
        args = tuple(Tensor._make(a) if type(a) is np.ndarray else a for a in args)
        tensors_in = [self_tensor] + [a for a in args if isinstance(a, Tensor)]
        self._check(op, tensors_in)
        self.note_inputs(tensors_in)
        target = self_tensor._data
        root = root_of(target)
        self.handles.append((weakref.ref(self_tensor), root))
        if id(root) in self.born and id(root) not in self.written:
            # Made inside the capture (a creation function, not an op): replay must start from its initial value,
            # as a CUDA graph re-runs the fill, so later replays do not compound the mutation.
            snapshot = root.copy()
            self.prologue.append(Record("restore", restore_step(root, snapshot), "restore", datas=[snapshot],
                                        outs=[root]))
            self.written[id(root)] = root
        before = len(self.records)
        owner = self_tensor._base if self_tensor._base is not None else self_tensor
        node_before = owner.grad_fn
        self._run(apply_inplace, op, self_tensor, *args, cast_check=op not in _NO_CAST_CHECK, **attrs)
        if owner.grad_fn is not node_before:  # this op recorded autograd history (under no_grad it does not)
            self._record_saved_old_value(self_tensor, target, before)
        datas, casts, cnp = plan_operands(op, (self_tensor,) + args)
        self.add_step(Record("inplace", inplace_step(op, target, datas, casts, cnp, attrs),
                             self._describe(op, (self_tensor,) + args, (self_tensor,), inplace=True), op, datas, casts,
                             cnp, attrs, [target]))
        return self_tensor

    def _record_saved_old_value(self, self_tensor, target, at):
        """An in-place op whose backward reads the value it overwrote (``y.mul_(w)``: the gradient of ``w`` is
        ``g * y_old``) makes autograd keep a copy of the old value; that copy must be taken again by each replay,
        before the op's step, or every backward replay would read the capture's value."""
        base = self_tensor._base
        node = base.grad_fn if base is not None else self_tensor.grad_fn
        while node is not None:
            saved = getattr(node, "_saved_in", None)
            old = saved[0] if saved else None
            if isinstance(old, Tensor) and type(old._data) is np.ndarray and old._data is not target and \
                    old._data.base is None and old._data.shape == target.shape and not np.shares_memory(old._data,
                                                                                                       target):
                copy = OPS["clone"]
                self.records.insert(at, Record("kernel", kernel_step(copy, [target], (), None, {}, [old._data]),
                                               "saved old value = clone(target)", copy, [target], (), None, {},
                                               [old._data]))
                self.written[id(old._data)] = old._data
                return
            # A view written in place: the row's node is the base's CopySlices' last input.
            nxt = getattr(node, "next_functions", ())
            node = nxt[-1][0] if nxt and type(node).__name__ == "CopySlices" else None

    @staticmethod
    def _describe(op, args, outs, inplace=False):
        def show(a):
            if isinstance(a, Tensor):
                return f"buf{id(a._data) & 0xffff:04x}{list(a._data.shape)}:{a._data.dtype}"
            return repr(a)
        name = op.name + ("_" if inplace else "")
        return f"{', '.join(show(o) for o in outs)} = {name}({', '.join(show(a) for a in args)})"
