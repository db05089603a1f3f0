"""Activation checkpointing: ``checkpoint(fn, *args)`` keeps none of ``fn``'s intermediate values for the backward
and recomputes them when the backward needs them, trading compute for memory (``torch.utils.checkpoint``).

- ``use_reentrant=False`` (recommended): ``fn`` runs with autograd recording as usual, then the values its nodes
  saved are dropped; the first node of the region that needs them reruns ``fn`` (with the random state it had, so
  dropout draws the same masks) and refills every node. Works with ``autograd.grad``, keyword arguments, inputs
  that do not require grad and nested checkpoints.
- ``use_reentrant=True`` (PyTorch's default when the flag is not given, with a warning): ``fn`` runs under
  ``no_grad`` inside an autograd Function whose backward reruns it and calls ``backward`` on the result, so the
  parameters' ``.grad`` fill during the outer backward; at least one input must require grad, and
  ``autograd.grad`` cannot reach parameters through it (as in PyTorch).

>>> import jitorch
>>> lin = jitorch.nn.Linear(4, 4)
>>> x = jitorch.randn(2, 4, requires_grad=True)
>>> y = checkpoint(lambda t: lin(t).tanh(), x, use_reentrant=False)
>>> y.sum().backward()
>>> x.grad.shape, lin.weight.grad.shape
(jitorch.Size([2, 4]), jitorch.Size([4, 4]))
"""
from __future__ import annotations

import contextlib
import warnings
import weakref

from .. import _random
from .._dispatch import is_compiling, sync_views
from ..amp.autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled
from .._tensor import Tensor
from ..autograd import backward as _backward
from ..autograd.function import Function
from ..autograd.grad_mode import enable_grad, no_grad
from ..autograd.graph import Deferred, _version_error, recording_nodes

__all__ = ["checkpoint", "checkpoint_sequential", "noop_context_fn", "CheckpointError", "check_backward_validity",
           "detach_variable", "set_checkpoint_early_stop", "set_checkpoint_debug_enabled"]


class CheckpointError(RuntimeError):
    """The recomputation did not do what the forward did (torch's class, so ``except CheckpointError`` works)."""


def check_backward_validity(inputs):
    if not any(isinstance(a, Tensor) and a.requires_grad for a in inputs):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)


def detach_variable(inputs):
    """``inputs`` (a tuple) with each tensor detached, keeping its ``requires_grad`` (custom checkpoint Functions)."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"Only tuple of tensors is supported. Got Unsupported input type: {type(inputs).__name__}")
    return tuple(a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in inputs)


@contextlib.contextmanager
def set_checkpoint_early_stop(enable):
    """Accepted for PyTorch compatibility: jitorch's recomputation always reruns the whole function, as torch's does
    under ``set_checkpoint_early_stop(False)`` (trailing ops and forward hooks of the region run again)."""
    yield


@contextlib.contextmanager
def set_checkpoint_debug_enabled(enabled):
    """Accepted for PyTorch compatibility (jitorch's mismatch errors already name the differing op)."""
    yield


def noop_context_fn():
    """The default ``context_fn``: no context around the forward or the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def _rng_states(args=()):
    # A CUDA generator first used inside the region must exist now, or its forward draws could not be replayed.
    for a in args:
        if isinstance(a, Tensor) and a.is_cuda:
            _random.cuda_generator(a.device.index)
    states = [(_random.default_generator, _random.default_generator.get_state())]
    return states + [(g, g.get_state()) for g in _random._cuda_generators.values()]


def _autocast_state():
    return {dev: (is_autocast_enabled(dev), get_autocast_dtype(dev)) for dev in ("cpu", "cuda")}


def _autocast_as(state):
    """A context entering the autocast ``state`` of the forward (the backward usually runs outside it)."""
    stack = contextlib.ExitStack()
    for dev, (enabled, dtype) in state.items():
        if enabled:
            stack.enter_context(autocast(dev, dtype=dtype))
        elif is_autocast_enabled(dev):
            stack.enter_context(autocast(dev, enabled=False))
    return stack


@contextlib.contextmanager
def _rng_as_at_forward(states):
    """Run with the generators as they were at the forward, then put back their current states."""
    if states is None:
        yield
        return
    now = _rng_states()
    for gen, state in states:
        gen.set_state(state)
    try:
        yield
    finally:
        for gen, state in now:
            gen.set_state(state)


def _versions(args):
    return [(a, a._version) for a in args if isinstance(a, Tensor)]


def _check_unchanged(versions):
    for t, version in versions:
        if t._version != version:
            raise RuntimeError(
                f"checkpoint: an input of the checkpointed function ({t.dtype} {list(t.shape)}) was modified in place "
                f"after the forward (version {version} -> {t._version}); the recomputation would see other values. "
                "Clone the input before modifying it.")


def _outside_saved(nodes):
    """``(weakref, version, node name)`` of the tensors the region's nodes saved that it did not make (parameters,
    closed-over tensors): the recomputation saves them again, so their version checks must happen here."""
    inside = {id(n) for n in nodes}
    watched = []
    for n in nodes:
        saved = n._saved_in
        if saved is None:
            continue
        for a, v in zip(saved, n._saved_in_versions):
            if isinstance(a, Tensor) and v is not None and (a.grad_fn is None or id(a.grad_fn) not in inside):
                watched.append((weakref.ref(a), v, n.name()))
    return watched


def _saved_meta(node):
    """Shape and dtype of each tensor ``node`` saved (those saved-tensor hooks packed are skipped)."""
    ins, outs = node._saved_in, node._saved_out
    meta = []
    if type(ins) in (tuple, list):
        meta += [(tuple(a.shape), str(a.dtype).rpartition(".")[2]) for a in ins if isinstance(a, Tensor)]
    if type(outs) is tuple:
        meta += [(tuple(e[0].shape), e[0].dtype.name) for e in outs if type(e) is tuple]
    return meta


def _without_reentrant(function, preserve, context_fn, args, kwargs, check_meta=True):
    flat = list(args) + list(kwargs.values())
    # Stale views are regenerated outside the region, so the forward and the recomputation record the same ops.
    sync_views(flat)
    rng = _rng_states(flat) if preserve else None
    versions, amp = _versions(flat), _autocast_state()
    forward_ctx, recompute_ctx = context_fn()
    with recording_nodes() as region, forward_ctx:
        out = function(*args, **kwargs)
    if not region.nodes:
        return out
    watched = _outside_saved(region.nodes)
    # Taken before the values are dropped: a recomputation that saves other shapes would otherwise fail later as an
    # unrelated shape error inside some backward (torch checks the same metadata).
    metas = [_saved_meta(n) for n in region.nodes] if check_meta else None
    # Weak: the nodes hold this closure (through their Deferred), which must not keep them alive in turn.
    nodes = [weakref.ref(n) for n in region.nodes]

    def fill():
        _check_unchanged(versions)
        for ref, version, name in watched:
            t = ref()
            if t is not None and t._version != version:
                raise _version_error(t, version, name)
        with _rng_as_at_forward(rng), _autocast_as(amp), enable_grad(), recording_nodes() as again, recompute_ctx:
            function(*args, **kwargs)
        olds = [r() for r in nodes]
        differ = [f"{a.name()} vs {b.name()}" for a, b in zip(olds, again.nodes)
                  if a is not None and type(a) is not type(b)]
        if len(again.nodes) != len(nodes) or differ:
            raise CheckpointError(
                f"checkpoint: recomputing the checkpointed function recorded {len(again.nodes)} ops where its "
                f"forward recorded {len(nodes)} (first difference: {differ[0] if differ else 'the count'}); it must "
                "run the same ops each time (no control flow on values that change between the runs)")
        for old, new, meta in zip(olds, again.nodes, metas or ()):
            if old is not None and _saved_meta(new) != meta:
                raise CheckpointError(
                    f"checkpoint: recomputing the checkpointed function saved tensors of other shapes or dtypes than "
                    f"its forward did for {new.name()}: (shape, dtype) {meta} in the forward, {_saved_meta(new)} "
                    "recomputed; it must compute the same shapes each time (pass determinism_check='none' to skip "
                    "this check)")
        for old, new in zip(olds, again.nodes):
            if old is None:
                continue
            if type(old._saved_in) is Deferred:
                old._saved_in, old._saved_in_versions = new._saved_in, new._saved_in_versions
            if type(old._saved_out) is Deferred:
                old._saved_out = new._saved_out

    deferred = Deferred(fill)
    for node in region.nodes:
        if node._saved_in is not None:
            node._saved_in = deferred
        if node._saved_out is not None:
            node._saved_out = deferred
    return out


class _Reentrant(Function):
    """``use_reentrant=True``: the forward under ``no_grad``; the backward reruns it and backpropagates inside."""

    @staticmethod
    def forward(ctx, function, preserve, *args):
        ctx.function, ctx.rng = function, _rng_states(args) if preserve else None
        ctx.args, ctx.versions, ctx.amp = args, _versions(args), _autocast_state()
        return function(*args)

    @staticmethod
    def backward(ctx, *grads):
        _check_unchanged(ctx.versions)
        inputs = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in ctx.args]
        with _rng_as_at_forward(ctx.rng), _autocast_as(ctx.amp), enable_grad():
            outs = ctx.function(*inputs)
        outs = (outs,) if isinstance(outs, Tensor) else tuple(outs)
        pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        _backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in inputs)


def checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn, determinism_check="default",
               debug=False, early_stop=True, preserve_rng_state=True, **kwargs):
    """``function(*args, **kwargs)``, its intermediate values recomputed in the backward instead of kept.

    A recomputation that records other ops than the forward always raises ``CheckpointError``; one that saves
    tensors of other shapes or dtypes raises it too unless ``determinism_check="none"``. ``debug`` and
    ``early_stop`` are accepted for PyTorch compatibility (the recomputation reruns all of ``function``).

    >>> import jitorch
    >>> x = jitorch.ones(3, requires_grad=True)
    >>> checkpoint(lambda t: (t * 3).exp(), x, use_reentrant=False).sum().backward()
    >>> round(x.grad[0].item(), 3)
    60.257
    """
    if use_reentrant is None:
        warnings.warn("jitorch.utils.checkpoint: the use_reentrant parameter should be passed explicitly; "
                      "use_reentrant=False is recommended (PyTorch's default without it is use_reentrant=True, used "
                      "here)", stacklevel=2)
        use_reentrant = True
    if determinism_check not in ("default", "none"):
        raise ValueError(f"checkpoint: determinism_check should be 'default' or 'none', got {determinism_check!r}")
    if not use_reentrant:
        return _without_reentrant(function, preserve_rng_state, context_fn, args, kwargs,
                                  check_meta=determinism_check == "default")
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if context_fn is not noop_context_fn:
        raise ValueError("Passing `context_fn` is only supported when use_reentrant=False.")
    if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        with no_grad():
            return function(*args)
    if is_compiling():
        # The reentrant backward writes the parameters' .grad as a side effect a compiled graph cannot hold; the
        # non-reentrant form gives the same gradients as graph outputs.
        return _without_reentrant(function, preserve_rng_state, context_fn, args, kwargs)
    return _Reentrant.apply(function, preserve_rng_state, *args)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Run ``functions`` (a ``Sequential`` or a list of modules) in ``segments`` chunks, checkpointing all but the
    last, which runs normally (its values are needed at once by the backward).

    >>> import jitorch
    >>> net = jitorch.nn.Sequential(jitorch.nn.Linear(3, 3), jitorch.nn.ReLU(), jitorch.nn.Linear(3, 1))
    >>> checkpoint_sequential(net, 2, jitorch.randn(2, 3, requires_grad=True), use_reentrant=False).shape
    jitorch.Size([2, 1])
    """
    if use_reentrant is None:
        warnings.warn("jitorch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed "
                      "explicitly; use_reentrant=False is recommended (True is used here, as PyTorch does)",
                      stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    functions = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if not 0 < segments <= max(len(functions), 1):
        raise ValueError(f"checkpoint_sequential: segments must be in 1..{len(functions)}, got {segments}")
    size = len(functions) // segments

    def run(start, end):
        def forward(x):
            for f in functions[start:end + 1]:
                x = f(x)
            return x
        return forward

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant, preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)
