"""``jitorch.compile(fn, mode="reduce-overhead")``: capture ``fn`` once as a CPU graph, then replay it per call.

The first call runs ``fn`` eagerly (a warm-up: lazy state such as optimizer buffers is made outside the capture, as
PyTorch's CUDA graph trees do); the second captures it on static input buffers and returns the capture's results;
later calls replay. Each call checks every tensor argument against the captured one (shape, dtype, device,
contiguity) and non-tensor arguments (baked into the graph) against the captured ones: a call that differs (the
last, smaller batch; another Python number) captures again, as torch.compile traces again. So does a change of
the compiled module's plain attributes (``self.temperature``) or train/eval mode. A new input is taken by pointer
substitution when the replay is one native call: its address goes into the graph's pointer table, with no copy (it
is copied into the static buffer instead when it overlaps memory the graph writes, e.g. an output of the previous
call passed back in, or when some step replays in Python).

Python numbers an optimizer step reads (``lr``, ``momentum``, ``weight_decay``...) are baked into the capture and
guarded: a call after one changed (an LR scheduler's step) captures again with the new value, never replays the old
one; past `RECAPTURE_WARNING` recaptures a warning says the step would run better uncaptured.

On the CPU each call hands out copies of the graph's outputs (torch.compile's CPU reduce-overhead reuses no
buffers: a script may keep every step's loss). CUDA outputs live in the graph's buffers and are rewritten by the
next call: instead of silently changing, an output of an earlier call raises when used after a later call (a
generation counter per call), as CUDA graph trees do; ``out.clone()`` keeps it.

Not captured (``fallback_reason`` says why): a function whose warm-up read tensor values back into Python
(``if x.sum() > 0``, ``.item()``) runs through the default compiled path, which compiles around such reads; calls
that need autograd (grad mode on and a tensor input, parameter or tensor read by name (a closure's ``w``)
requiring grad: a compiled module's training forward) run through the default compiled path, fused forward and
backward, as torch.compile's reduce-overhead mode compiles them on the CPU; calls mixing CPU and CUDA tensors, and
functions that read Python-level random numbers, run eagerly.

CUDA tensors are captured as a ``jitorch.cuda.CUDAGraph`` (private memory pool, side-stream capture): each call copies
the new inputs into the static ones on the device, replays, and copies back inputs the graph writes in place.

>>> import jitorch
>>> f = compile_reduce_overhead(lambda x: (x * 2).exp())
>>> for v in (0.0, 1.0, 0.5):
...     y = f(jitorch.full((2,), v))
>>> y
tensor([2.7183, 2.7183])
"""
from __future__ import annotations

from ..utils._pytree import flatten_into, tree_flatten, unflatten_from

import warnings

import numpy as np

from .. import _dtype, _subclass
from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..cpu import CPUGraph, graph
from ..cpu._grad_binds import grad_mismatch
from ..cpu._steps import root_of
from ..runtime.host_pointer import byte_span
from ..ops.indexing import IndexOutOfBounds
from ..optim._step_capture import adopting_capturable
from .array_contents import pin_versions
from .guards import _constant, call_hooks, first_failure
from .named_values import NamedValues
from .reduce_overhead_checks import _RESEEDED, _aliased, _describe, _same_value, _self_overlapping, _warm_up
from .reduce_overhead_cuda import CUDAGraphCapture
from .reduce_overhead_replay import CapturedReplay, OverwrittenOutputError, static_copy
from .reduce_overhead_state import CaptureState
from .side_effects import PythonState

__all__ = ["compile_reduce_overhead", "ReduceOverheadFunction", "OverwrittenOutputError"]


_AUTOGRAD = ("autograd: an input, parameter or tensor read by name requires grad, so the call runs through the "
             "default compiled path (fused forward and backward) instead of a replayed capture")
_SIDE_EFFECTS = ("the function changes Python state that outlives the call ({}): a capture replays only the tensor "
                 "work, so calls run through the default compiled path, which reruns the Python on every call")
_UNREPLAYABLE_STEP = ("a capture could not replay its optimizer step ({}), so calls run through the default compiled "
                      "path (compiled forward and backward, the step eager)")
_GRAD_STATES = ("the parameters' gradients change between stored and accumulated from call to call (gradient "
                "accumulation over micro-batches: {}), so calls run through the default compiled path")
# Captures redone because the parameters' .grad changed kind before a function goes to the default path for good.
GRAD_RECAPTURES = 2
_ALIASED = ("tensor arguments share memory (one tensor passed twice, overlapping views): a capture holds one "
            "buffer per argument, so the call runs eagerly")
_SELF_OVERLAPPING = ("a tensor argument has elements sharing memory (an expanded tensor): a capture would hold a dense "
                     "copy of it, on which an in-place write does not raise as eager's does, so the call runs eagerly")
_HOST_READS = ("the function reads tensor values back into Python (item(), bool(), tolist(), printing): a capture "
               "would freeze them, so calls run through the default compiled path, which compiles around them")
# Captures redone for changed hyperparameters before the warning that the step would run better uncaptured.
RECAPTURE_WARNING = 8


class ReduceOverheadFunction(CapturedReplay, CUDAGraphCapture):
    """The callable `compile_reduce_overhead` returns. ``generation`` counts graph runs; ``graph`` is the `CPUGraph`."""

    def __init__(self, fn, module=None):
        self.fn, self.module = fn, module
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.graph = None
        self.calls = 0
        self.generation = 0
        self.fallback_reason = None
        self._live = []  # outputs handed out by the latest call (poisoned by the next one)
        self.cuda = False  # captured as a CUDA graph
        self.viewed_inputs = ()  # the arguments a CPU capture's outputs view
        self.recaptures = 0  # captures redone because a baked-in Python value (an optimizer's lr) changed
        self.named = NamedValues(fn, module)  # plain values the code reads by name, baked into a capture
        self.state = CaptureState(fn, module)  # the modules and optimizers it reaches
        self._named_at_capture = self._state_at_capture = None
        self._default = None  # the default-mode compiled function that runs calls needing autograd
        # Why every call runs through the default compiled path (Python state changed or output written, values
        # read into Python, an optimizer a capture cannot replay, alternating gradients), or None.
        self._compiled_instead = None
        self._grad_recaptures = 0  # captures redone because a parameter's .grad changed kind (`_GRAD_STATES`)
        self._number_recaptures = 0  # captures redone because a Python number argument changed
        # A capture carries no autograd: calls whose warm-up output required grad (`_grad_seen`) take the default
        # path in grad mode.
        self._grad_seen = False

    # -- checks ---------------------------------------------------------------------------------------------------
    def _needs_eager(self, leaves):
        if self.named.random_source is not None:
            return self.named.random_reason()
        tensors = [t for t in leaves if isinstance(t, Tensor)]
        on_cuda = [type(t._data) is not np.ndarray for t in tensors]
        if any(on_cuda) and not all(on_cuda):
            return "a mix of CPU and CUDA tensor arguments: no single graph covers both, so the call runs eagerly"
        if len(tensors) > 1 and not any(on_cuda) and _aliased([t._data for t in tensors]):
            return _ALIASED
        if not GradState.enabled:
            return None
        params = list(self.module.parameters()) if self.module is not None else []
        # A tensor requiring grad read by name (a closure's ``w``) shows in the warm-up's output (`_grad_seen`); a
        # whole training step reading a global model returns a detached loss and is captured, backward included.
        if any(t.requires_grad for t in tensors + params) or self._grad_seen:
            return _AUTOGRAD
        return None

    def _compile_instead(self, reason, warn=True):
        """From now on every call runs through the default compiled path, for ``reason``."""
        self.fallback_reason = self._compiled_instead = reason
        if warn:
            warnings.warn(f"jitorch.compile(mode='reduce-overhead') of {self.__name__}: {reason}", stacklevel=3)

    def _uncaptured(self, reason, args, kwargs):
        """Run a call that is not replayed: through the default compiled path when it needs autograd or reads
        values back to Python (it compiles around those), else eagerly."""
        if reason is not _AUTOGRAD and reason is not self._compiled_instead:
            return self.fn(*args, **kwargs)
        if self._default is None:
            from .api import CompiledFunction  # the default mode; imported here, as entry.py does, to keep api light

            self._default = CompiledFunction(self.fn, module=self.module)
        return self._default(*args, **kwargs)

    def _mismatch(self, leaves):
        """How the arguments differ from the captured ones (layout of a tensor, a non-tensor value), or None."""
        fast = self.fast_layouts
        if len(leaves) == len(fast) and all(
                f is None and _same_value(new, static, key) or
                f is not None and type(new) is Tensor and type(new._data) is np.ndarray and new._data.shape == f[0]
                and new._data.dtype == f[1] and new._data.flags.c_contiguous == f[2]
                for f, new, static, key in zip(fast, leaves, self.static, self.array_keys)):
            return None  # the common case, without building device and dtype objects
        if len(leaves) != len(self.static):
            return f"{len(leaves)} arguments, {len(self.static)} at capture"
        for i, (static, new) in enumerate(zip(self.static, leaves)):
            if isinstance(static, Tensor):
                if not isinstance(new, Tensor):
                    return f"argument {i} is a {type(new).__name__}, a Tensor at capture"
                want = self.layouts[i]
                got = (tuple(new.shape), new.dtype, new.device, new.is_contiguous())
                if got != want:
                    return f"argument {i} is {_describe(new)}, captured as shape {list(want[0])}, dtype {want[1]}"
            elif not _same_value(new, static, self.array_keys[i]):
                return f"non-tensor argument {i} is {new!r}, {static!r} at capture"
        return None

    def _only_numbers_changed(self, leaves):
        """Whether the arguments differ from the captured ones only in Python numbers (not bools)."""
        if len(leaves) != len(self.static):
            return False
        differing = [(static, new) for static, new, key in zip(self.static, leaves, self.array_keys)
                     if not isinstance(static, Tensor) and not _same_value(new, static, key)]
        return bool(differing) and all(type(a) in (int, float) and type(b) in (int, float) for a, b in differing)

    def _viewed_layout_changed(self, leaves):
        """An output views an argument laid out otherwise than at capture: the view cannot be rebuilt on it."""
        for i in self.viewed_inputs:
            if leaves[i]._data.strides != self.static[i]._data.strides:
                return f"an output views argument {i}, whose strides {leaves[i].stride()} differ from the capture's"
        return None

    # -- capture --------------------------------------------------------------------------------------------------
    def _capture(self, spec, leaves):
        self._named_at_capture = self._baked_values()
        pin_versions([v for _, v in self._named_at_capture])  # large arrays' contents at capture
        self._state_at_capture = self.state.values()
        # NumPy arguments are baked in (``jitorch.tensor(a)``, ``float(a.sum())``): guarded by value as the default
        # mode guards them, so ``a *= 2`` between calls captures again; taken before the capture runs the function
        self.array_keys = [_constant(t) if type(t) is np.ndarray else None for t in leaves]
        pin_versions(self.array_keys)
        self.captured_spec = spec
        if any(isinstance(t, Tensor) and type(t._data) is not np.ndarray for t in leaves):
            return self._capture_cuda(spec, leaves)
        self.static = [Tensor._make(static_copy(t._data)) if isinstance(t, Tensor) else t for t in leaves]
        self.fast_layouts = [(t._data.shape, t._data.dtype, t._data.flags.c_contiguous) if isinstance(t, Tensor)
                             and t.is_contiguous() == t._data.flags.c_contiguous else None if not isinstance(t, Tensor)
                             else (None, None, None) for t in leaves]
        self.layouts = [(tuple(t.shape), t.dtype, t.device, t.is_contiguous()) if isinstance(t, Tensor) else None
                        for t in leaves]
        g = CPUGraph()
        args, kwargs = unflatten_from(spec, self.static)
        with graph(g), adopting_capturable():
            out = self.fn(*args, **kwargs)
        self._state_at_capture = self.state.values()  # as replays continue from it (state made by the capture)
        self.graph = g
        self.out_spec_leaves = []
        self.out_spec = flatten_into(out, self.out_spec_leaves)
        native = g._build()
        self.native = native if native is not None and native.native else None
        self.slots = [None] * len(self.static)
        static_roots = {id(t._data): i for i, t in enumerate(self.static) if isinstance(t, Tensor)}
        written = {}
        if native is not None:
            for rec in native.records:
                for a in rec.outs:
                    if a is not None:
                        root = root_of(a)
                        written[id(root)] = root
        # Memory the replay writes: static roots (intermediates the native code keeps in its arena are not used).
        internal = native.internal if native is not None else set()
        self.written_spans = [byte_span(r) for rid, r in written.items() if rid not in internal]
        self.written_spans += [byte_span(native.arena)] if native is not None else []
        self.mutated = [isinstance(t, Tensor) and id(t._data) in written for t in self.static]
        if self.native is not None:
            self.slots = [self.native.slot_of(t._data) if isinstance(t, Tensor) else None for t in self.static]
        # How each output maps onto memory: ("input", i, offset, strides) for views of a static input, else graph.
        self.out_kinds = []
        for o in self.out_spec_leaves:
            if isinstance(o, Tensor) and type(o._data) is np.ndarray:
                root = root_of(o._data)
                i = static_roots.get(id(root))
                if i is not None:
                    off = o._data.__array_interface__["data"][0] - root.__array_interface__["data"][0]
                    self.out_kinds.append(("input", i, off, o._data.strides))
                    continue
                self.out_kinds.append(("graph",))
            else:
                self.out_kinds.append(("value",))
        # (an argument whose copy is row-major, not laid out as it, gets copies of its views: `_hand_out`)
        self.viewed_inputs = sorted({k[1] for k in self.out_kinds if k[0] == "input"
                                     and leaves[k[1]]._data.strides == self.static[k[1]]._data.strides})
        return out

    # -- calls ----------------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self.module is not None and call_hooks(list(self.module.modules())):
            return self.fn(*args, **kwargs)  # a capture would replay the hooks' first results: see guards.call_hooks
        leaves = []
        spec = flatten_into((args, kwargs), leaves)
        if _subclass._enabled and _subclass.hears_calls(leaves):
            return self.fn(*args, **kwargs)  # a subclass's handler hears each op eagerly (api.py)
        if any(isinstance(t, Tensor) and t.is_meta for t in leaves):
            return self.fn(*args, **kwargs)  # shapes only: nothing to capture or replay
        self.calls += 1
        if self.graph is not None:
            # A baked-in hyperparameter moved, or the arguments differ from the captured ones (the last, smaller
            # batch; another Python number): this call captures again, as torch.compile would trace again.
            grads = None if self.cuda else grad_mismatch(self.graph._grads, True)
            # (`grad_mismatch(eager=True)` covers the graph's own gradient check)
            mismatch = None
            changed = grads or (None if self.cuda else self.graph.changed_value(grads=False)) or \
                self._changed_named_value() or (mismatch := self._mismatch(leaves)) or \
                self._viewed_layout_changed(leaves) or \
                ("the arguments' containers differ from the captured call's" if spec != self.captured_spec else None)
            if changed is not None and changed is mismatch and self._only_numbers_changed(leaves):
                self._number_recaptures += 1
                if self._number_recaptures > 1:
                    # A learning rate or a step count that moves every call: each call would capture again. The
                    # default compiled path takes such numbers as inputs after their first change (torch's floats).
                    self._compile_instead(f"a number argument changes between calls ({changed})", warn=False)
                    return self._uncaptured(self._compiled_instead, args, kwargs)
            if changed is not None:
                self._recapture(changed)
                self._grad_recaptures += grads is not None
                if self._grad_recaptures > GRAD_RECAPTURES:
                    # Micro-batches of gradient accumulation alternate between storing and adding: each call would
                    # capture again. The default compiled path runs them (forward and backward compiled).
                    self._compile_instead(_GRAD_STATES.format(grads))
        if self.graph is None:
            reason = self._needs_eager(leaves) or (_SELF_OVERLAPPING if _self_overlapping(leaves) else None)
            if reason is not None or self.calls == 1:
                if reason is not None and self.fallback_reason is None:
                    self.fallback_reason = reason
                    if reason is not _AUTOGRAD:  # the default compiled path is what torch runs there too
                        warnings.warn(f"jitorch.compile(mode='reduce-overhead') of {self.__name__}: {reason}",
                                      stacklevel=2)
                if reason is not None:
                    return self._uncaptured(reason, args, kwargs)
                state = PythonState(self.fn, self.module, args, kwargs)
                out, reads, refusals, printed = _warm_up(self.fn, args, kwargs)
                if GradState.enabled and any(isinstance(o, Tensor) and o.requires_grad for o in tree_flatten(out)[0]):
                    self._grad_seen = True  # reached through something the name walk does not follow
                changed = state.changes() + [what if what.startswith(_RESEEDED[:8]) else f"writes output ({what})"
                                             for what in printed]
                if changed:  # torch replays these on every call; a capture would skip them
                    self._compile_instead(_SIDE_EFFECTS.format(", ".join(changed[:6])))
                elif reads:
                    self._compile_instead(_HOST_READS, warn=False)  # (torch.compile breaks the graph there too)
                elif refusals:
                    self._compile_instead(_UNREPLAYABLE_STEP.format("; ".join(refusals)))
                return out
            if self._compiled_instead is not None:
                return self._uncaptured(self._compiled_instead, args, kwargs)
            self._capture(spec, leaves)
            for i, mutated in enumerate(self.mutated):
                if mutated:  # the capture ran on a private copy: in-place updates of an input reach the caller
                    if self.cuda:
                        leaves[i]._data[...] = self.static[i]._data
                    else:
                        np.copyto(leaves[i]._data, self.static[i]._data)
            return self._hand_out(list(self.out_spec_leaves), leaves)
        reason = self._needs_eager(leaves)
        if reason is not None:
            return self._uncaptured(reason, args, kwargs)
        try:
            return self._replay_cuda(leaves) if self.cuda else self._replay(leaves)
        except IndexOutOfBounds:
            # An index row's own bounds error from the replay's check: eager's functions word it per op (gather's
            # RuntimeError, index_select's "index out of range in self"); the eager call raises eager's error.
            return self.fn(*args, **kwargs)

    def _baked_values(self):
        """What a capture bakes in besides its tensors: the values the code reads by name (a global ``SCALE``,
        ``cfg.temperature``); the modules and optimizers it reaches are `CaptureState`'s."""
        # (Python floats and float creation functions take the default dtype of the capture)
        return self.named.values() + [("default_dtype", _dtype._default_float)]

    def _changed_named_value(self):
        """The first baked-in value (`_baked_values`) that differs from the capture's."""
        now = self._baked_values()
        if now != self._named_at_capture:
            return first_failure(self._named_at_capture, now)
        return self.state.changed(self._state_at_capture)

    def _recapture(self, changed):
        self.recaptures += 1
        if self.recaptures == RECAPTURE_WARNING:
            warnings.warn(f"jitorch.compile(mode='reduce-overhead') of {self.__name__}: captured again "
                          f"{self.recaptures} times because a Python value the step reads changed ({changed}); each "
                          "capture costs an eager call and a native compile. A learning-rate schedule changing lr "
                          "every step is better served by mode=None", stacklevel=3)
        # The old graph's outputs keep their buffers (nothing rewrites them any more): they stay valid.
        self._live = []
        self.graph = None


def compile_reduce_overhead(fn, *, module=None):
    """``fn`` as a captured-and-replayed CPU graph (see the module notes); ``module``: the Module ``fn`` runs, if any.

    >>> import jitorch
    >>> f = compile_reduce_overhead(lambda a, b: a @ b + 1)
    >>> for _ in range(3):
    ...     out = f(jitorch.ones(2, 3), jitorch.ones(3, 2))
    >>> out
    tensor([[4., 4.],
            [4., 4.]])
    """
    return ReduceOverheadFunction(fn, module=module)
