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
import warnings
import weakref
from dataclasses import dataclass, field

from .._tensor import Tensor
from ..autograd.grad_mode import GradState
from ..nn.modules.module import Module
from .backend import CompiledGraph
from .guards import first_failure, guard_values
from .lower import clear_kernel_cache, kernel_cache_stats
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
    """One compiled specialization: its guards, how to run it (``None``: eagerly), and what it cost."""

    guards: list
    run: object = None
    break_reason: str | None = None
    kernel_ops: list = field(default_factory=list)  # the forward's fused kernels
    backward_kernel_ops: list = field(default_factory=list)  # a training entry's backward kernels
    plan: object = None  # a training entry's TrainingPlan
    trace_s: float = 0.0
    compile_s: float = 0.0


class CompiledFunction:
    """The callable `compile` returns for a function (and the forward of an `OptimizedModule`)."""

    def __init__(self, fn, *, fullgraph=False, backend="jitorch", recompile_limit=None, module=None):
        self._fn, self.fullgraph, self.backend = fn, fullgraph, backend
        self._module = module
        self._limit = recompile_limit
        self.entries: list[Entry] = []  # inference specializations
        self.train_entries: list[Entry] = []  # forward + backward specializations (some input requires grad)
        self._fell_back = False
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
        self._fell_back = False

    def _needs_grad(self, tensors):
        if not GradState.enabled:
            return False
        params = self._module.parameters() if self._module is not None else ()
        return any(t._requires_grad for t in tensors) or any(p._requires_grad for p in params)

    def _grad_flags(self, args, kwargs):
        """The ``requires_grad`` of every tensor argument and parameter: a training entry is specialized on them."""
        flags = tuple(a._requires_grad if isinstance(a, Tensor) else None for a in list(args) + list(kwargs.values()))
        params = self._module.parameters() if self._module is not None else ()
        return flags + tuple(p._requires_grad for p in params)

    def __call__(self, *args, **kwargs):
        fn = self._fn
        if self.backend == "eager":
            return fn(*args, **kwargs)
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
        if self.backend == "jitorch" and any(t.device.type != "cpu" for t in tensors):
            return fn(*args, **kwargs)
        training = self._needs_grad(tensors)
        if training and self.backend != "jitorch":
            return fn(*args, **kwargs)  # a callable backend is handed inference graphs only
        guards = guard_values(args, kwargs, self._module)
        # Training specializations live apart, so ``entries`` keeps meaning "inference graphs".
        entries = self.entries
        if training:
            guards.append(("requires_grad", self._grad_flags(args, kwargs)))
            entries = self.train_entries
        key = [v for _, v in guards]
        for entry in entries:
            if [v for _, v in entry.guards] == key:
                if entry.run is None:
                    return fn(*args, **kwargs)
                return entry.run(tuple(args) + tuple(kwargs.values()))
        if self._fell_back:
            return fn(*args, **kwargs)
        if len(entries) >= self.recompile_limit:
            self._fell_back = True
            warnings.warn(f"jitorch.compile: {getattr(fn, '__name__', fn)!s} reached recompile_limit "
                          f"({self.recompile_limit}); failing guard: {first_failure(entries[-1].guards, guards)}"
                          "; running eagerly from now on", RuntimeWarning, stacklevel=2)
            return fn(*args, **kwargs)
        if training:
            return self._compile_training(guards, args, kwargs)
        return self._compile(guards, args, kwargs)

    def _break(self, entries, entry, reason, result):
        """Record why this specialization runs eagerly and return the eager ``result`` (or raise for fullgraph)."""
        if self.fullgraph:
            entries.pop()
            raise RuntimeError(f"jitorch.compile(fullgraph=True): cannot capture one graph: {reason}")
        entry.break_reason = reason
        return result

    def _compile_training(self, guards, args, kwargs):
        start = time.perf_counter()
        traced = trace(self._fn, args, kwargs)
        entry = Entry(guards, trace_s=time.perf_counter() - start)
        self.train_entries.append(entry)
        if traced.break_reason is not None:
            return self._break(self.train_entries, entry, traced.break_reason, traced.result)
        llvm_before = kernel_cache_stats()["compile_s"]
        try:
            plan = compile_training(self._fn, args, kwargs, self._module, traced.result)
        except Unsupported as err:
            # The trace ran the function eagerly with autograd recording: its result is this call's answer.
            return self._break(self.train_entries, entry, str(err), traced.result)
        module = self._module

        def run(flat):
            params = tuple(module.parameters()) if module is not None else ()
            return plan(params + tuple(flat))

        entry.run, entry.kernel_ops, entry.backward_kernel_ops = run, plan.forward_kernels, plan.backward_kernels
        entry.plan = plan
        out = run(tuple(args) + tuple(kwargs.values()))  # the first run compiles the forward kernels
        entry.compile_s = kernel_cache_stats()["compile_s"] - llvm_before
        return out

    def _compile(self, guards, args, kwargs):
        start = time.perf_counter()
        traced = trace(self._fn, args, kwargs)
        entry = Entry(guards, trace_s=time.perf_counter() - start)
        self.entries.append(entry)
        reason = traced.break_reason
        if reason is None and GradState.enabled and any(
                isinstance(v, Tensor) and v._requires_grad for v in traced.gm.__dict__.values()):
            reason = "a tensor captured by the function requires grad (inference-only backend)"
        if reason is not None:
            return self._break(self.entries, entry, reason, traced.result)
        flat = tuple(args) + tuple(kwargs.values())
        llvm_before = kernel_cache_stats()["compile_s"]
        if callable(self.backend):
            compiled = self.backend(traced.gm, list(flat))
            entry.run = lambda call_args: compiled(*call_args)
            out = entry.run(flat)
        else:
            graph = CompiledGraph(traced.gm)
            entry.run, entry.kernel_ops = graph, graph.kernel_ops
            out = graph(flat)  # the first run compiles the kernels for these strides
        entry.compile_s = kernel_cache_stats()["compile_s"] - llvm_before
        return out


class OptimizedModule(Module):
    """A module wrapper whose ``forward`` is compiled; it shares the original's parameters, buffers and submodules
    (the same dicts), so ``state_dict()`` keys are unchanged.
    """

    def __init__(self, mod, compiled):
        super().__init__()
        object.__setattr__(self, "_orig_mod", mod)
        object.__setattr__(self, "_compiled_call", compiled)
        for registry in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            self.__dict__[registry] = mod.__dict__[registry]
        self.training = mod.training

    def forward(self, *args, **kwargs):
        return self._compiled_call(*args, **kwargs)

    def train(self, mode=True):
        self._orig_mod.train(mode)
        self.training = mode
        return self

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_orig_mod"], name)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"


def compile(model=None, *, fullgraph=False, dynamic=None, mode=None, backend="jitorch", options=None,
            disable=False):
    """Compile a function or a Module; usable as ``@jitorch.compile`` or ``@jitorch.compile(...)``.

    The ``"jitorch"`` backend traces the call on its real inputs, fuses chains of pointwise ops over one shape into
    LLVM kernels and runs the rest eagerly. When grad mode is on and an input or parameter requires grad, it
    compiles the forward and the backward (see `jitorch._compile.training`; those specializations are kept in
    ``train_entries``); random ops, in-place forward ops and untraceable backwards run eagerly, and so does a
    backward with ``create_graph=True``. A callable backend only ever gets inference graphs. Shapes are always
    specialized (``dynamic`` is accepted and ignored); a call that misses every guard retraces, up to
    ``recompile_limit`` (``options`` or ``jitorch.compiler.config``), then runs eagerly with one warning. A
    function that reads tensor values into Python (``.item()``, ``if x.sum() > 0``) runs eagerly, or raises with
    ``fullgraph=True``.
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
    if not callable(backend) and backend not in ("jitorch", "eager"):
        raise RuntimeError(f"jitorch.compile: unknown backend {backend!r}; expected 'jitorch', 'eager' or a callable")
    if isinstance(model, Module):
        compiled = CompiledFunction(model, fullgraph=fullgraph, backend=backend, recompile_limit=limit, module=model)
        return OptimizedModule(model, compiled)
    if not callable(model):
        raise TypeError(f"jitorch.compile: expected a function or a Module, got {type(model).__name__}")
    return CompiledFunction(model, fullgraph=fullgraph, backend=backend, recompile_limit=limit)


def reset():
    """Forget every compiled graph and kernel (``torch.compiler.reset``)."""
    for cf in list(_LIVE):
        cf.reset()
    clear_kernel_cache()
