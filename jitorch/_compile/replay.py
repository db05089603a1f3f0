"""Replay a graph-broken function: rerun its Python with the ops deferred, and run each segment compiled.

Each op the function dispatches is matched against the recorded segment's next step (the same row, the same
recorded tensors, equal Python constants, outside tensors of the recorded shapes, dtypes and strides) and returns a
`LazyTensor`. At the segment's break the pending segment is *flushed*: one `CompiledGraph` computes every lazy
tensor still alive (the others are intermediates the fused kernels never write to memory), then the break runs for
real: the value is read (its key picks the next segment, or a new branch is recorded from here), or the eager op
runs. Python itself runs exactly as in eager mode, so its side effects happen once per call, in order.

Anything the record did not foresee is never guessed: an op that differs from the record, a read of a lazy
tensor's values outside a break (the `LazyArray` flushes itself) or a branch beyond ``recompile_limit`` computes
what is pending and lets the rest of the call run eagerly.

A ``training`` replay (a specialization where inputs or parameters require grad) also matches each op's grad mode
and which of its tensors require grad against the record, and flushes the values that require grad through
`segment_training.SegmentRun`: compiled forward and backward, the live tensors getting the compiled Function as
their ``grad_fn``. Reading a deferred tensor's ``grad_fn`` (``is_leaf``, hooks, ``backward``) flushes, and an
in-place op, which the compiled segments do not hold, runs the rest of the call eagerly.

>>> import jitorch
>>> from jitorch._compile.segments import record
>>> def f(x):
...     return x * 2 if x.sum() > 0 else x - 1
>>> info = record(f, (jitorch.ones(2),), {})
>>> run = Replay(info.root, budget=lambda: True)
>>> run.call(f, (-jitorch.ones(2),), {}), run.new_branches  # the other branch: recorded on the way
(tensor([-2., -2.]), 1)
>>> run.call(f, (jitorch.ones(2),), {}), run.new_branches
(tensor([2., 2.]), 0)
"""
from __future__ import annotations

import weakref

import numpy as np

from .._dispatch import apply, apply_inplace, pop_mode, push_mode
from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..fx.node import Node
from .functionalize import is_random
from .lazy import LazyArray, LazyTensor, lazy_tensor, realize
from .segments import ESCAPES, RecordInfo, Recorder, Segment, _ModeBase, value_key, watching
from .replay_flush import _Flush
from .replay_flush import _compile_outputs  # noqa: F401 - re-exported

__all__ = ["Replay"]


def _signature(seg):
    """What runs in ``seg``: each step's op and constants, and how it ends (not what follows: later breaks may grow)."""
    cached = seg.__dict__.get("_signature")
    if cached is None:
        def constant(a):
            return "node" if isinstance(a, Node) else repr(a)
        steps = tuple((str(n.target), tuple(constant(a) for a in n.args),
                       tuple((k, constant(v)) for k, v in sorted(n.kwargs.items()))) for n, _ in seg.steps)
        end = seg.end
        cached = seg.__dict__["_signature"] = (steps, None if end is None else (end.kind, end.name))
    return cached


def _same_continuations(brk):
    """Whether ``brk`` has at least two recorded continuations and they all run the same ops with the same
    constants: the value read there does not shape the graph."""
    children = list(brk.children.values())
    return len(children) >= 2 and len({_signature(c) for c in children}) == 1



class Replay(_Flush, _ModeBase):
    """Runs calls of a specialization; ``budget()`` says whether another branch may be recorded."""

    def __init__(self, root, budget, training=False, buffers=()):
        self.root, self.budget, self.training = root, budget, training
        self.buffers = buffers  # a compiled module's buffers: a new branch records their writes functionally
        self.info = None  # the RecordInfo of a branch recorded during the last call
        self.new_branches = 0
        self.bailed = None  # why the last call finished eagerly, if it did
        self.kernel_log = []  # (segment, CompiledGraph) for every compile
        self.limit_hit = False
        self._recorder = None
        self._pos, self._detached = 0, ()  # the tensor being matched among an op's tensors; the detached reads

    # -- one call ----------------------------------------------------------------------------------------------------
    def call(self, fn, args, kwargs):
        self.live, self.new_branches, self.bailed, self.info = True, 0, None, None
        self._enter(self.root)
        with watching(self):
            push_mode(self)
            try:
                result = fn(*args, **kwargs)
            finally:
                pop_mode()
        return self._finish(result, args, kwargs)

    def _finish(self, result, args, kwargs):
        if self.info is not None:  # a new branch was recorded during this call
            self._recorder.finish(result)
        else:
            seg = self.seg
            if self.live and (self.pos != len(seg.steps) or seg.end.kind != "return"):
                self.bailed = "the function returned earlier than recorded"
            self.flush(upto=self.pos)
        for value in list(args) + list(kwargs.values()) + (list(result) if isinstance(result, (tuple, list))
                                                             else [result]):
            if isinstance(value, Tensor) and type(value.__dict__.get("_data")) is LazyArray:
                realize(value)
        return result

    def _enter(self, seg):
        self.seg, self.pos, self.bound, self.pending = seg, 0, {}, []
        # The LazyArray of each deferred buffer write -> (the buffer, the memory its values go to).
        self.written = weakref.WeakKeyDictionary()
        if self.training and seg.untrainable and self.live:
            self._bail(seg.untrainable)

    # -- matching ----------------------------------------------------------------------------------------------------
    def _match(self, template, value):
        if isinstance(template, Node):
            if not isinstance(value, Tensor):
                return False
            arr = value.__dict__.get("_data")
            pos = self._pos
            self._pos += 1
            rg = value._requires_grad
            if type(arr) is LazyArray:
                if arr.real is None:
                    if arr.owner is not self or arr.node is not template:
                        return False
                    # The record's autograd identity: the tensor itself, or a detached read (an alias, detach_()).
                    alias = type(value) is Tensor or "_lazy_alias" in value.__dict__
                    if rg != (template.meta.get("rg", False) and pos not in self._detached) or alias and rg:
                        return False
                    if type(value) is Tensor:  # an alias made without an op (detach, .data): realize it too
                        value.__class__ = LazyTensor
                        value.__dict__["_lazy_alias"] = True
                        self.pending.append((weakref.ref(arr), weakref.ref(value)))
                    return True
                realize(value)
                arr = value._data
            if template.op != "placeholder" or rg != template.meta.get("rg", False):
                return False
            bound = self.bound.get(template)
            if bound is not None:
                return bound is value
            shape, dtype = template.meta["val"]
            if arr.shape != shape or arr.dtype != dtype or arr.strides != template.meta["stride"] \
                    or value.is_cuda:
                return False
            self.bound[template] = value
            return True
        if isinstance(template, (tuple, list)) and isinstance(value, (tuple, list)):
            return type(template) is type(value) and len(template) == len(value) and all(
                self._match(t, v) for t, v in zip(template, value))
        if isinstance(template, dict) and isinstance(value, dict):
            return template.keys() == value.keys() and all(self._match(template[k], value[k]) for k in template)
        if isinstance(value, Tensor):
            return False
        return same_constant(template, value)

    def adopt(self, arr, t):
        """Realize ``t`` (an alias of ``arr`` made without an op) when ``arr`` is computed."""
        self.pending.append((weakref.ref(arr), weakref.ref(t)))

    def _lazy(self, node):
        shape, dtype = node.meta["val"]
        arr = LazyArray(self, node, (shape, dtype, node.meta["stride"]))
        t = lazy_tensor(arr)
        if node.meta.get("rg"):  # Python may ask before the flush (``if t.requires_grad``)
            t._requires_grad = True
        self.pending.append((weakref.ref(arr), weakref.ref(t)))
        return t

    def _next_step(self, op, inplace, args, attrs):
        if self.pos < len(self.seg.steps):
            node, outs = self.seg.steps[self.pos]
            target = node.target
            self._pos, self._detached = 0, node.meta.get("detach", ())
            recorded_inplace = getattr(target, "inplace", False) or node.meta.get("functional", False)
            if getattr(target, "op", None) is op and recorded_inplace == inplace and len(node.args) == len(args) \
                    and node.meta.get("grad", GradState.enabled) == GradState.enabled \
                    and self._match(node.args, args) and self._match(node.kwargs, attrs):
                self.pos += 1
                return node, outs
        return None

    # -- the mode --------------------------------------------------------------------------------------------------
    def dispatch(self, op, args, attrs):
        if self.live:
            step = self._next_step(op, False, tuple(args), attrs)
            if step is not None:
                outs = step[1]
                return tuple(self._lazy(n) for n in outs) if isinstance(outs, tuple) else self._lazy(outs)
            if self._at_break("eager", op.name):
                self.flush()
                out = self._run(apply, op, *args, **attrs)
                self._enter(self.seg.end.next)
                return out
            self._bail(f"the function ran {op.name}() where the record has something else")
        _realize_all(args)
        return self._run(apply, op, *args, **attrs)

    def dispatch_inplace(self, op, t, args, attrs):
        if self.live:
            # Under autograd a deferred in-place op would need its own functional backward: run it eagerly. A
            # module buffer's write was recorded functionally and needs none.
            step = None
            if not self.training or self._functional_next():
                step = self._next_step(op, True, (t,) + tuple(args), attrs)
            if step is not None:
                node = step[1]
                shape, dtype = node.meta["val"]
                arr = LazyArray(self, node, (shape, dtype, node.meta["stride"]))
                if step[0].meta.get("functional"):
                    self._defer_write(t, step[0], arr)
                t._data = arr
                self.pending.append((weakref.ref(arr), weakref.ref(t)))
                return t
            if self._at_break("eager", op.name + "_"):
                self.flush()
                realize(t)  # a view the flush did not write (``x.view(1, 6).squeeze_(0)``) reads its base now
                _realize_all(args)
                out = self._run(apply_inplace, op, t, *args, **attrs)
                self._enter(self.seg.end.next)
                return out
            self._bail(f"in-place {op.name}_() under autograd runs eagerly with the rest of the call" if self.training
                       else f"the function ran {op.name}_() where the record has something else")
        realize(t)
        _realize_all(args)
        return self._run(apply_inplace, op, t, *args, **attrs)

    def _functional_next(self):
        return self.pos < len(self.seg.steps) and self.seg.steps[self.pos][0].meta.get("functional", False)

    def _defer_write(self, t, node, arr):
        """``t`` (a module buffer) is about to hold ``arr``, its deferred new value: the graph's placeholder for the
        old value reads the old array, and the flush stores the new values into that array (the buffer keeps its
        memory, as the eager write does)."""
        current = t._data
        if type(current) is LazyArray and current in self.written:  # written before in this segment
            self.written[arr] = (t, self.written[current][1])
            return
        if type(current) is LazyArray:
            realize(t)
            current = t._data
        old = node.args[0]
        if old in self.bound:
            self.bound[old] = Tensor._make(current)
        self.written[arr] = (t, current)

    def host_read(self, name, t, fn, args, kwargs):
        if not self.live:
            realize(t)
            return fn(t, *args, **kwargs)
        kind = "escape" if name in ESCAPES else "host"
        if not self._at_break(kind, name):
            self._bail(f"Tensor.{name}() was called where the record has no break")
            realize(t)
            return self._run(fn, t, *args, **kwargs)
        self.flush()
        realize(t)
        value = self._run(fn, t, *args, **kwargs)
        brk = self.seg.end
        if kind == "escape":
            self.live = False
            return value
        key = value_key(name, value)
        child = brk.children.get(key)
        if child is None and name == "item" and type(value) is float and _same_continuations(brk):
            # A float read back only to be logged (``history.append(loss.item())``) rarely repeats: a branch per
            # value would reach recompile_limit in a few steps. Once two values recorded the same continuation
            # (same ops, same constants: the value changed nothing that runs), it is followed for any value. Each
            # op is still matched against it, so a value that does change what runs bails out to eager.
            child = next(reversed(brk.children.values()))
        if child is not None:
            self._enter(child)
        elif self.budget():
            self._record_branch(brk, key)
        else:
            self._bail(f"branch guard at {brk.where}: Tensor.{name}() gave {value!r}, recorded "
                       f"{sorted(map(str, brk.children))}; recompile_limit reached", limit=True)
        return value

    def _record_branch(self, brk, key):
        """Record the rest of this call as a new child of ``brk``: the recorder takes over the mode."""
        self.new_branches += 1
        info = RecordInfo(False, self.buffers)
        seg = brk.children[key] = Segment()
        info.root = seg
        recorder = Recorder(info, seg)
        self._recorder = recorder
        self.info = info
        self.live = False
        self.become(recorder)

    def random_draw(self):
        # A draw outside an op (``multinomial``, ``randperm``) makes a new tensor, bound as a segment input: nothing
        # is frozen. But it takes the generator's numbers now, ahead of the segment's deferred random rows (``rand``,
        # dropout's mask) that eager mode drew first: those draw now, and the rest of the call runs eagerly.
        if self.live and any(is_random(n) for n, _ in self.seg.steps[:self.pos]):
            self._bail("a random draw outside the graph's ops follows its deferred draws (eager's order of draws)")

    def _at_break(self, kind, name):
        end = self.seg.end
        return self.pos == len(self.seg.steps) and end is not None and end.kind == kind and end.name == name

    def _bail(self, why, limit=False):
        self.flush(upto=self.pos)
        self.live, self.bailed = False, why
        self.limit_hit = limit


def _realize_all(values):
    """Aliases still holding a realized `LazyArray` get the plain array before an eager op reads them."""
    for v in values:
        if isinstance(v, Tensor) and type(v.__dict__.get("_data")) is LazyArray:
            realize(v)
        elif isinstance(v, (tuple, list)):
            _realize_all(v)


def same_constant(a, b):
    """Whether a replayed non-tensor argument equals the recorded one (types included: 1, 1.0 and True differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_constant(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float) and a != a:
        return b != b
    try:
        return bool(a == b)
    except Exception:  # an object with an odd __eq__: only itself will do
        return a is b
