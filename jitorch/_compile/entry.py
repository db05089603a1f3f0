"""``jitorch.compile``: the public entry point over `api.CompiledFunction` (and CPU capture, optimizer steps).

>>> import jitorch
>>> @jitorch.compile
... def f(x):
...     return jitorch.tanh(x) * 2 + 1
>>> f(jitorch.zeros(3))
tensor([1., 1., 1.])
"""
from __future__ import annotations

from importlib.util import find_spec

from .._inductor import config as inductor_config
from ..nn.modules.module import Module
from ..optim._fused import CompiledOptimizerStep
from ..optim.optimizer import Optimizer
from .api import CompiledFunction
from .optimized_module import OptimizedModule

__all__ = ["compile"]

_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_EAGER_BACKENDS = ("aot_eager", "aot_eager_decomp_partition", "aot_ts")
# Inductor's tuning knobs that scripts pass through ``options``: accepted and ignored (jitorch has its own code
# generator; none of them changes what a call computes).
_INDUCTOR_OPTIONS = frozenset({
    "max_autotune", "max_autotune_pointwise", "max_autotune_gemm", "epilogue_fusion", "shape_padding",
    "coordinate_descent_tuning", "freezing", "force_same_precision", "triton.cudagraphs", "triton.cudagraph_trees",
    "trace.enabled", "trace.graph_diagram", "aggressive_fusion", "layout_optimization", "cpp_wrapper",
    "size_asserts", "benchmark_kernel", "fallback_random", "debug", "verbose_progress",
})


def compile(model=None, *, fullgraph=False, dynamic=None, mode=None, backend="jitorch", options=None,
            disable=False):
    """Compile a function or a Module; usable as ``@jitorch.compile`` or ``@jitorch.compile(...)``.

    The ``"jitorch"`` backend traces the call on its real inputs, fuses chains of pointwise ops over one shape into
    LLVM kernels and runs the rest eagerly. When grad mode is on and an input or parameter requires grad, it
    compiles the forward and the backward (see `jitorch._compile.training`; those specializations are kept in
    ``train_entries``); random draws outside ops (``jitorch.rand``), in-place forward ops on a training call's
    inputs or on values seen through a view or alias, and untraceable backwards run eagerly, and so does a backward with
    ``create_graph=True``; in-place ops on the graph's own values (``ReLU(inplace=True)``, ``h += b``) become
    out-of-place nodes, and so do writes into their views and into tensors the call made
    (``out[:, i] = ...``, ``mask[:, 0] = 1``: `view_writes`). Dropout is compiled: its mask is a graph node drawn
    afresh on every call, in eager's order, so with the same seed a compiled call draws eager's masks. In-place
    buffer updates (BatchNorm's running statistics, ``num_batches_tracked``) of the compiled Module, or of the
    modules a compiled function names (``self``, closure cells, globals), are graph values written back into the
    buffers after each run, and so are an inference call's writes into its own (whole, host) arguments
    (``x.add_(1)``, ``out=o``); those modules' parameters are graph inputs, guarded by layout (``functional_call``
    with new tensors reuses the graph) in training and by identity in inference, and their ``training`` flags are
    guarded. A callable backend only ever gets inference graphs. Shapes: with ``dynamic=None`` (the default) a
    call that misses the guards of compiled graphs only in some dimensions' sizes, one of which changed twice (its
    third size), makes those dimensions symbolic: one specialization then serves every size >= 2 there (sizes 0 and
    1 stay specialized), its graph fitted over probe traces, comparisons on sizes guarded; a size's first call runs
    eagerly, its second compiles it (`dynamic_shapes`); ``dynamic=True`` tries every dimension from the first call,
    ``dynamic=False`` specializes every size. A Python float or int argument is specialized on the first call; a
    call differing only in such values compiles once more with them as graph inputs where the graph uses them as an
    operand of add/sub/mul/div (``x * lr``: a learning-rate schedule never recompiles again), as torch's automatic
    dynamic numbers (`number_inputs`). Outputs that eager lays out in another order than row-major (``x.t() * 2``,
    channels-last) keep eager's strides (`output_layout`). Any other call that misses every guard retraces, up to
    ``recompile_limit`` (``options`` or ``jitorch.compiler.config``), then runs eagerly with one warning.
    A graph break (a tensor value read into Python: ``.item()``, ``if x.sum() > 0``; an op with a data-dependent
    shape; an in-place write into a view of an input) splits the call into compiled segments: later calls rerun the
    Python with the ops deferred, run each segment compiled, and record a new branch when a value read differs from
    every recorded one (see `jitorch._compile.replay`). ``fullgraph=True`` raises at the first break, naming the line.
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
    unknown = sorted(k for k in options if k not in _INDUCTOR_OPTIONS and k not in inductor_config.OPTION_NAMES)
    if unknown:
        raise RuntimeError(f"jitorch.compile: unexpected optimization option(s) {unknown}; accepted: "
                           f"'recompile_limit' and Inductor's tuning options (ignored here)")
    if backend == "inductor":  # code written for torch.compile's default keeps working
        backend = "jitorch"
    if backend in _EAGER_BACKENDS:  # torch's debugging backends compute eager's results: so does running eagerly
        backend = "eager"
    if backend == "jitorch" and _optimizer_step(model):
        return CompiledOptimizerStep(model)
    if not callable(backend) and backend not in ("jitorch", "eager"):
        raise RuntimeError(f"jitorch.compile: unknown backend {backend!r}; expected 'jitorch' ('inductor'), 'eager' "
                           f"({', '.join(repr(b) for b in _EAGER_BACKENDS)}) or a callable")
    if mode == "reduce-overhead" and backend == "jitorch" and find_spec("jitorch._compile.reduce_overhead"):
        from .reduce_overhead import compile_reduce_overhead  # CPU graph capture and replay

        if isinstance(model, Module):
            return OptimizedModule(model, compile_reduce_overhead(model, module=model))
        if _bound_call_impl(model):
            return compile_reduce_overhead(model, module=model.__self__)
        return compile_reduce_overhead(model)
    if _bound_call_impl(model):
        # ``Module.compile``: the module's own call, hooks included, guarded on that module's state.
        return CompiledFunction(model, fullgraph=fullgraph, backend=backend, recompile_limit=limit,
                                module=model.__self__, dynamic=dynamic)
    if isinstance(model, Module):
        compiled = CompiledFunction(model, fullgraph=fullgraph, backend=backend, recompile_limit=limit, module=model,
                                    dynamic=dynamic)
        return OptimizedModule(model, compiled)
    if not callable(model):
        raise TypeError(f"jitorch.compile: expected a function or a Module, got {type(model).__name__}")
    return CompiledFunction(model, fullgraph=fullgraph, backend=backend, recompile_limit=limit, dynamic=dynamic)


def _bound_call_impl(fn):
    """Whether ``fn`` is a module's bound ``_call_impl`` (what ``Module.compile`` compiles)."""
    return isinstance(getattr(fn, "__self__", None), Module) and getattr(fn, "__func__", None) is Module._call_impl


def _optimizer_step(fn):
    """Whether ``fn`` is an optimizer's bound ``step`` (it writes arrays directly: no graph can stand for it)."""
    owner = getattr(fn, "__self__", None)
    return isinstance(owner, Optimizer) and getattr(fn, "__name__", None) == "step"
