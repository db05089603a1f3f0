"""``jitorch.compile``: trace on first call, fuse pointwise chains into LLVM kernels, guard, and fall back to eager.

>>> import jitorch
>>> @jitorch.compile
... def f(x):
...     return jitorch.tanh(x) * 2 + 1
>>> f(jitorch.zeros(3))
tensor([1., 1., 1.])
"""
from __future__ import annotations

import time
from importlib.util import find_spec
import warnings
import weakref
from dataclasses import dataclass, field

from .._dispatch import MODES
from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..nn.modules.container import ModuleList
from ..nn.modules.module import Module
from ..optim._fused import CompiledOptimizerStep
from ..optim.optimizer import Optimizer
from .backend import CompiledGraph, whole_call_runner
from .functionalize import CompileState, functionalize_intermediates
from .guards import first_failure, guard_values
from .lower import clear_kernel_cache, kernel_cache_stats
from .optimized_module import OptimizedModule
from .replay import Replay, _compile_outputs
from .reached import modules_named_by
from .segment_training import backward_kernels, compile_training_segment
from .trace import trace
from .training import Unsupported, compile_training

__all__ = ["compile", "CompiledFunction", "OptimizedModule", "config", "reset"]

_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_LIVE = weakref.WeakSet()  # every CompiledFunction, so reset() can clear their caches


class _Config:
    """Process-wide settings (``jitorch.compiler.config``); ``recompile_limit`` as in ``torch._dynamo.config``."""

    recompile_limit = 8


config = _Config()


@dataclass
class Entry:
    """One specialization: its guards and how it runs.

    ``run(args, kwargs)`` is a compiled graph (no break), a `Replay` of recorded segments (graph breaks), or ``None``
    (eagerly, ``break_reason`` says why).
    """

    guards: list
    run: object = None
    break_reason: str | None = None
    replay: Replay | None = None
    kernel_ops: list = field(default_factory=list)  # the forward's fused kernels
    backward_kernel_ops: list = field(default_factory=list)  # a training entry's backward kernels
    plan: object = None  # a training entry's TrainingPlan
    breaks: list = field(default_factory=list)  # the graph breaks recorded (segments.Break)
    trace_s: float = 0.0
    compile_s: float = 0.0


class CompiledFunction:
    """The callable `compile` returns for a function (and the forward of an `OptimizedModule`)."""

    def __init__(self, fn, *, fullgraph=False, backend="jitorch", recompile_limit=None, module=None):
        self._fn, self.fullgraph, self.backend = fn, fullgraph, backend
        self._module = module
        self._reached_key, self._reached = None, None  # a function's modules (see _owner)
        self._limit = recompile_limit
        self.entries: list[Entry] = []  # inference specializations
        self.train_entries: list[Entry] = []  # forward + backward specializations (some input requires grad)
        self._branches = 0  # branches recorded after a specialization's first call (they count as recompiles)
        self._fell_back = False
        self._warned = False
        self.__wrapped__ = fn
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            if hasattr(fn, attr):
                try:
                    setattr(self, attr, getattr(fn, attr))
                except (AttributeError, TypeError):
                    pass
        _LIVE.add(self)

    @property
    def recompile_limit(self):
        return self._limit if self._limit is not None else config.recompile_limit

    def reset(self):
        self.entries.clear()
        self.train_entries.clear()
        self._branches = 0
        self._fell_back = self._warned = False

    def _compiles(self):
        return len(self.entries) + len(self.train_entries) + self._branches

    def _take_branch(self):
        """The budget a replay asks for before recording a new branch."""
        if self._compiles() >= self.recompile_limit:
            return False
        self._branches += 1
        return True

    def _warn_limit(self, failing):
        if not self._warned:
            self._warned = True
            warnings.warn(f"jitorch.compile: {getattr(self._fn, '__name__', self._fn)!s} reached recompile_limit "
                          f"({self.recompile_limit}); failing guard: {failing}; running eagerly from now on",
                          RuntimeWarning, stacklevel=3)

    def __call__(self, *args, **kwargs):
        fn = self._fn
        if self.backend == "eager" or MODES:
            # Inside another trace (a compiled function calling this one) the outer recorder must see every op.
            return fn(*args, **kwargs)
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
        # One traversal of the module per call: guards, grad flags and the training plan's inputs share it.
        owner = self._owner()
        params = tuple(owner.parameters()) if owner is not None else ()
        training = GradState.enabled and (any(t._requires_grad for t in tensors)
                                          or any(p._requires_grad for p in params))
        if training and self.backend != "jitorch":
            return fn(*args, **kwargs)  # a callable backend is handed inference graphs only
        guards = guard_values(args, kwargs, owner, params)
        # Training specializations live apart, so ``entries`` keeps meaning "inference graphs".
        entries = self.entries
        if training:
            # The ``requires_grad`` of every tensor argument and parameter: a training entry is specialized on them.
            flags = tuple(a._requires_grad if isinstance(a, Tensor) else None
                          for a in list(args) + list(kwargs.values()))
            guards.append(("requires_grad", flags + tuple(p._requires_grad for p in params)))
            entries = self.train_entries
        key = [v for _, v in guards]
        for entry in entries:
            if [v for _, v in entry.guards] == key:
                if entry.run is None:
                    return fn(*args, **kwargs)
                if entry.plan is not None:
                    return entry.plan(params + tuple(args) + tuple(kwargs.values()))
                return entry.run(args, kwargs)
        if self._fell_back:
            return fn(*args, **kwargs)
        if self._compiles() >= self.recompile_limit:
            self._fell_back = True
            last = (entries or self.entries or self.train_entries)[-1].guards
            self._warn_limit(first_failure(last, guards))
            return fn(*args, **kwargs)
        if training:
            return self._compile_training(guards, args, kwargs)
        return self._compile(guards, args, kwargs)

    def _eager_entry(self, entry, reason, result):
        """Record why this specialization runs eagerly and return the eager ``result``."""
        if self.fullgraph:
            raise RuntimeError(f"jitorch.compile(fullgraph=True): cannot capture one graph: {reason}")
        entry.break_reason = reason
        return result

    def _owner(self):
        """The module whose parameters and buffers the compiled code reads: the compiled module, or for a function
        the modules it reaches by name (``self``, closure cells, globals it names) gathered in a `ModuleList`, so a
        ``@compile`` training step over a global ``model`` trains compiled (parameters as graph inputs, buffer
        updates functional) and is guarded on their identities and ``training`` flags."""
        if self._module is not None:
            return self._module
        found = modules_named_by(self._fn)
        key = tuple(id(m) for m in found)
        if key != self._reached_key:
            self._reached_key = key
            self._reached = ModuleList(found) if found else None
        return self._reached

    def _buffers(self):
        """Buffers whose in-place updates the graph records functionally (see `_owner`)."""
        owner = self._owner()
        return tuple(owner.buffers()) if owner is not None else ()

    def _compile_training(self, guards, args, kwargs):
        start = time.perf_counter()
        buffers = self._buffers()
        # Compiling runs the function more than once: the call's own draws and buffer updates happen once.
        before = CompileState(buffers)
        traced = trace(self._fn, args, kwargs, fullgraph=self.fullgraph, buffers=buffers)
        after = CompileState(buffers)
        entry = Entry(guards, trace_s=time.perf_counter() - start, breaks=traced.info.graph_breaks)
        self.train_entries.append(entry)
        if traced.info.hidden_write is not None:
            return self._eager_entry(entry, traced.info.hidden_write, traced.result)
        if traced.break_reason is not None:
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
            tensors += list(self._owner().parameters()) if self._owner() is not None else []
            if not traced.info.graph_breaks or any(a.is_cuda for a in tensors):
                # Random draws outside ops without a break keep eager numbers; segment replay runs on the host only.
                return self._eager_entry(entry, traced.break_reason, traced.result)
            # Each segment between breaks gets its own compiled forward and backward (segment_training.py).
            llvm_before = kernel_cache_stats()["compile_s"]
            self._segmented(entry, traced.info, training=True)
            after.restore()  # the stages compiled ahead ran on the recording's inputs
            entry.compile_s = kernel_cache_stats()["compile_s"] - llvm_before
            return traced.result
        llvm_before = kernel_cache_stats()["compile_s"]
        try:
            plan = compile_training(self._fn, args, kwargs, self._owner(), traced.result)
        except Unsupported as err:
            # The trace ran the function eagerly with autograd recording: its result is this call's answer.
            after.restore()
            return self._eager_entry(entry, str(err), traced.result)
        before.restore()  # the compiled run below is this call
        module = self._owner()

        def run(args, kwargs):
            params = tuple(module.parameters()) if module is not None else ()
            return plan(params + tuple(args) + tuple(kwargs.values()))

        entry.run, entry.kernel_ops, entry.backward_kernel_ops = run, plan.forward_kernels, plan.backward_kernels
        entry.plan = plan
        out = run(args, kwargs)  # the first run compiles the forward kernels
        entry.compile_s = kernel_cache_stats()["compile_s"] - llvm_before
        return out

    def _compile(self, guards, args, kwargs):
        start = time.perf_counter()
        buffers = self._buffers()
        before = CompileState(buffers)
        traced = trace(self._fn, args, kwargs, fullgraph=self.fullgraph, buffers=buffers)
        info = traced.info
        entry = Entry(guards, trace_s=time.perf_counter() - start, breaks=info.graph_breaks)
        self.entries.append(entry)
        if info.hidden_write is not None or info.unsound is not None:
            return self._eager_entry(entry, info.hidden_write or info.unsound, traced.result)
        if traced.writes and callable(self.backend):
            return self._eager_entry(entry, "the call updates module buffers in place (a callable backend is handed "
                                            "graphs without side effects)", traced.result)
        llvm_before = kernel_cache_stats()["compile_s"]
        if traced.gm is None:
            if callable(self.backend):  # a callable backend is handed whole graphs only
                return self._eager_entry(entry, traced.break_reason, traced.result)
            if any(a.is_cuda for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)):
                # Segment replay defers ops on host-side lazy arrays; CUDA calls with graph breaks stay eager.
                return self._eager_entry(entry, f"{traced.break_reason} (graph breaks on CUDA run eagerly)",
                                         traced.result)
            self._segmented(entry, info)
        elif callable(self.backend):
            compiled = self.backend(traced.gm, list(args) + list(kwargs.values()))
            entry.run = lambda args, kwargs: compiled(*args, *kwargs.values())
        else:
            if functionalize_intermediates(traced.gm):  # ReLU(inplace=True) and friends fuse and go native
                traced.gm.recompile()
            graph = CompiledGraph(traced.gm)
            entry.kernel_ops = graph.kernel_ops
            entry.run = whole_call_runner(graph, traced.writes)
        if entry.replay is None:
            # The first run compiles the kernels for these strides. It is this call: the trace's draws and buffer
            # updates are undone first (a graph without breaks writes no other outside tensor: such writes break).
            before.restore()
            result = entry.run(args, kwargs)
        else:
            result = traced.result
        entry.compile_s = kernel_cache_stats()["compile_s"] - llvm_before
        return result

    def _segmented(self, entry, info, training=False):
        """Graph breaks: compile each recorded segment; later calls replay the Python with the segments compiled.

        ``training``: the segments' values that require grad are compiled with their backward (`SegmentRun`),
        ahead on the recording's own inputs.
        """
        replay = Replay(info.root, self._take_branch, training=training, buffers=self._buffers())
        for seg in info.root.walk():
            nodes, upto = seg.record_outputs, len(seg.steps)
            if training and any(n.meta.get("rg") for n in nodes):
                # Autograd kept values alive that the replay drops: the ones read later are what it flushes.
                nodes = [n for n in nodes if n.meta.get("used")]
                if nodes and seg.untrainable is None:
                    compile_training_segment(seg, nodes, upto, info.examples.get(seg))
            elif nodes:
                seg.compiled[(tuple(n.name for n in nodes), upto)] = _compile_outputs(seg, nodes, upto)
        info.examples.clear()
        fn = self._fn

        def run(args, kwargs):
            before, logged = kernel_cache_stats()["compile_s"], len(replay.kernel_log)
            out = replay.call(fn, args, kwargs)
            if replay.info is not None:
                entry.breaks += replay.info.graph_breaks
                replay.info.examples.clear()
            if replay.limit_hit:
                self._warn_limit(replay.bailed)
            if training and len(replay.kernel_log) != logged:
                entry.backward_kernel_ops = backward_kernels(replay.root)
            entry.compile_s += kernel_cache_stats()["compile_s"] - before
            return out

        entry.run, entry.replay = run, replay
        entry.break_reason = "; ".join(b.describe() for b in entry.breaks) or None
        if training:
            entry.backward_kernel_ops = backward_kernels(info.root)

    @staticmethod
    def segment_kernels(entry):
        """The fused kernels of every compiled segment graph of ``entry``."""
        if entry.replay is None:
            return entry.kernel_ops
        ops = []
        for seg in entry.replay.root.walk():
            for graph in seg.compiled.values():
                ops += graph.kernel_ops
        return ops


def compile(model=None, *, fullgraph=False, dynamic=None, mode=None, backend="jitorch", options=None,
            disable=False):
    """Compile a function or a Module; usable as ``@jitorch.compile`` or ``@jitorch.compile(...)``.

    The ``"jitorch"`` backend traces the call on its real inputs, fuses chains of pointwise ops over one shape into
    LLVM kernels and runs the rest eagerly. When grad mode is on and an input or parameter requires grad, it
    compiles the forward and the backward (see `jitorch._compile.training`; those specializations are kept in
    ``train_entries``); random draws outside ops (``jitorch.rand``), in-place forward ops on inputs or on values
    seen through a view or alias, and untraceable backwards run eagerly, and so does a backward with
    ``create_graph=True``; in-place ops on the graph's own values (``ReLU(inplace=True)``, ``h += b``) become
    out-of-place nodes. Dropout is compiled: its mask is a graph node drawn afresh on every call, in eager's order,
    so with the same seed a compiled call draws eager's masks. In-place buffer updates (BatchNorm's running
    statistics, ``num_batches_tracked``) of the compiled Module, or of the modules a compiled function names
    (``self``, closure cells, globals), are graph values written back into the buffers after each run; those
    modules' parameters are graph inputs and their identities and ``training`` flags are guarded. A callable
    backend only ever gets inference graphs. Shapes are always specialized (``dynamic`` is accepted and ignored); a
    call that misses every guard retraces, up to
    ``recompile_limit`` (``options`` or ``jitorch.compiler.config``), then runs eagerly with one warning.
    A graph break (a tensor value read into Python: ``.item()``, ``if x.sum() > 0``; an op with a data-dependent
    shape; an in-place write into an input) splits the call into compiled segments: later calls rerun the Python
    with the ops deferred, run each segment compiled, and record a new branch when a value read differs from every
    recorded one (see `jitorch._compile.replay`). ``fullgraph=True`` raises at the first break, naming the line.
    Under autograd each segment between breaks gets its own compiled forward and backward, the break itself and
    in-place ops running eagerly (see `jitorch._compile.segment_training`); on CUDA a break makes that
    specialization run eagerly. ``mode="reduce-overhead"`` uses CPU graph capture and replay when
    ``jitorch._compile.reduce_overhead`` is present.
    ``jitorch.compile(opt.step)`` returns the optimizer step with its Adam/AdamW/SGD groups updated by fused
    kernels (`jitorch.optim._fused.CompiledOptimizerStep`).
    ``backend="eager"`` calls the function untouched; a callable backend receives ``(GraphModule, example_inputs)``
    and what it returns is called instead; ``disable=True`` returns ``model`` itself.

    >>> import jitorch
    >>> lin = jitorch.nn.Linear(3, 2)
    >>> opt = jitorch.compile(lin)
    >>> list(opt.state_dict()) == list(lin.state_dict())
    True
    """
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, mode=mode, backend=backend,
                                 options=options, disable=disable)
    if disable:
        return model
    if mode not in _MODES:
        raise RuntimeError(f"jitorch.compile: unrecognized mode={mode!r}; expected one of {_MODES[1:]}")
    options = dict(options or {})
    limit = options.pop("recompile_limit", None)
    if options:
        raise RuntimeError(f"jitorch.compile: unrecognized options {sorted(options)}")
    if backend == "inductor":  # code written for torch.compile's default keeps working
        backend = "jitorch"
    if backend == "jitorch" and _optimizer_step(model):
        return CompiledOptimizerStep(model)
    if not callable(backend) and backend not in ("jitorch", "eager"):
        raise RuntimeError(f"jitorch.compile: unknown backend {backend!r}; expected 'jitorch', 'eager' or a callable")
    if mode == "reduce-overhead" and backend == "jitorch" and find_spec("jitorch._compile.reduce_overhead"):
        from .reduce_overhead import compile_reduce_overhead  # CPU graph capture and replay

        if isinstance(model, Module):
            return OptimizedModule(model, compile_reduce_overhead(model, module=model))
        return compile_reduce_overhead(model)
    if isinstance(model, Module):
        compiled = CompiledFunction(model, fullgraph=fullgraph, backend=backend, recompile_limit=limit, module=model)
        return OptimizedModule(model, compiled)
    if not callable(model):
        raise TypeError(f"jitorch.compile: expected a function or a Module, got {type(model).__name__}")
    return CompiledFunction(model, fullgraph=fullgraph, backend=backend, recompile_limit=limit)


def _optimizer_step(fn):
    """Whether ``fn`` is an optimizer's bound ``step`` (it writes arrays directly: no graph can stand for it)."""
    owner = getattr(fn, "__self__", None)
    return isinstance(owner, Optimizer) and getattr(fn, "__name__", None) == "step"


def reset():
    """Forget every compiled graph and kernel (``torch.compiler.reset``)."""
    for cf in list(_LIVE):
        cf.reset()
    clear_kernel_cache()
