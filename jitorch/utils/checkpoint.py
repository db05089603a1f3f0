"""Activation checkpointing: ``checkpoint(fn, *args)`` keeps none of ``fn``'s intermediate values for the backward
and recomputes them when the backward needs them, trading compute for memory (``torch.utils.checkpoint``).

- ``use_reentrant=False`` (recommended): ``fn`` runs with autograd recording as usual, but the tensors its nodes
  save go through saved-tensor hooks that keep only placeholders; the first unpack in the backward reruns ``fn``
  (with the random state it had, so dropout draws the same masks) up to its last saving op and answers every
  placeholder (``_checkpoint_frame.py``). Works with ``autograd.grad``, keyword arguments, inputs that do not
  require grad, double backward and nested checkpoints.
- ``use_reentrant=True`` (PyTorch's default when the flag is not given, with a warning): ``fn`` runs under
  ``no_grad`` inside an autograd Function whose backward reruns it and calls ``backward`` on the result, so the
  parameters' ``.grad`` fill during the outer backward; at least one input must require grad, and ``autograd.grad``
  or ``backward(inputs=...)`` through it raise (as in PyTorch).
- Selective checkpointing (``create_selective_checkpoint_contexts``) needs torch's ATen op overloads and is refused.

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
import enum
import warnings

from .._dispatch import is_compiling
from .._tensor import Tensor
from ..autograd import backward as _backward
from ..autograd.engine import is_checkpoint_valid
from ..autograd.function import Function
from ..autograd.grad_mode import enable_grad, no_grad
from ._checkpoint_frame import (CheckpointError, autocast_as, autocast_state, noop_context_fn, rng_as_at_forward,
                                rng_states, run_without_reentrant, settings)

__all__ = ["checkpoint", "checkpoint_sequential", "noop_context_fn", "CheckpointError", "check_backward_validity",
           "detach_variable", "set_checkpoint_early_stop", "set_checkpoint_debug_enabled", "CheckpointPolicy",
           "SelectiveCheckpointContext", "create_selective_checkpoint_contexts"]


def check_backward_validity(inputs):
    if not any(isinstance(a, Tensor) and a.requires_grad for a in inputs):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)


def detach_variable(inputs):
    """``inputs`` (a tuple) with each tensor detached, keeping its ``requires_grad`` (custom checkpoint Functions)."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"Only tuple of tensors is supported. Got Unsupported input type: {type(inputs).__name__}")
    return tuple(a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in inputs)


@contextlib.contextmanager
def _setting(name, value):
    prev, settings[name] = settings[name], value
    try:
        yield
    finally:
        settings[name] = prev


def set_checkpoint_early_stop(enable):
    """Whether the non-reentrant checkpoints run inside stop their recomputation once every saved tensor is back
    (overrides ``early_stop``; needed around the forward only)."""
    return _setting("early_stop", enable)


def set_checkpoint_debug_enabled(enabled):
    """Whether checkpoints run inside add the ops of both runs to their errors (overrides ``debug``; None: defer)."""
    return _setting("debug", enabled)


class SelectiveCheckpointContext:
    """What a selective-checkpoint policy gets first (torch's class)."""

    def __init__(self, *, is_recompute, op_output=None):
        self.is_recompute, self.op_output = is_recompute, op_output


class CheckpointPolicy(enum.Enum):
    """Per op of a selectively checkpointed region: keep its output (``*_SAVE``) or recompute it."""

    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_CPU_OFFLOAD = 4
    PREFER_CPU_OFFLOAD = 5


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):
    """torch's selective activation checkpointing names ops by their ATen overloads (``torch.ops.aten.mm.default``),
    which jitorch's op rows are not: refused with that reason rather than run with a policy that never matches."""
    if not isinstance(policy_fn_or_list, list) and not callable(policy_fn_or_list):
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    raise NotImplementedError(
        "create_selective_checkpoint_contexts: jitorch has no ATen operator overloads (torch.ops.aten.*) to hand a "
        "selective checkpoint policy, so it cannot choose which ops to save; use checkpoint(..., use_reentrant=False) "
        "without context_fn to recompute the whole region, or checkpoint a smaller function")


class _Reentrant(Function):
    """``use_reentrant=True``: the forward under ``no_grad``; the backward reruns it and backpropagates inside."""

    @staticmethod
    def forward(ctx, function, preserve, *args):
        ctx.function, ctx.rng = function, rng_states(args) if preserve else None
        ctx.amp = autocast_state()
        ctx.args = [None if isinstance(a, Tensor) else a for a in args]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        return function(*args)

    @staticmethod
    def backward(ctx, *grads):
        if not is_checkpoint_valid():
            raise RuntimeError("When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or "
                               "passing an `inputs` parameter to .backward(). To resolve this error, you can either "
                               "set use_reentrant=False, or call .backward() without passing the `inputs` argument.")
        tensors = iter(ctx.saved_tensors)
        args = [next(tensors) if a is None else a for a in ctx.args]
        inputs = detach_variable(tuple(args))
        with rng_as_at_forward(ctx.rng), autocast_as(ctx.amp), enable_grad():
            outs = ctx.function(*inputs)
        outs = (outs,) if isinstance(outs, Tensor) else tuple(outs)
        pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        _backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in inputs)


_REENTRANT_WARNING = (
    "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting in PyTorch 2.9, "
    "calling checkpoint without use_reentrant will raise an exception. use_reentrant=False is recommended, but if you "
    "need to preserve the current default behavior, you can pass use_reentrant=True. Refer to docs for more details "
    "on the differences between the two variants.")

_SEQUENTIAL_WARNING = (
    "torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed explicitly. In "
    "version 2.9 we will raise an exception if use_reentrant is not passed. use_reentrant=False is recommended, but "
    "if you need to preserve the current default behavior, you can pass use_reentrant=True. Refer to docs for more "
    "details on the differences between the two variants.")


def checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn, determinism_check="default",
               debug=False, early_stop=True, **kwargs):
    """``function(*args, **kwargs)``, its intermediate values recomputed in the backward instead of kept.

    Non-reentrant (see ``_checkpoint_frame``): a recomputation that saves fewer tensors than the forward, or (with
    ``determinism_check="default"``) tensors of other shapes, dtypes or devices, raises ``CheckpointError``;
    ``debug=True`` adds the ops both runs recorded to it. ``early_stop`` (default) ends the recomputation once every
    saved tensor is back. The warnings (``use_reentrant`` not passed) carry torch's text, so filters written for
    torch apply.

    >>> import jitorch
    >>> x = jitorch.ones(3, requires_grad=True)
    >>> checkpoint(lambda t: (t * 3).exp(), x, use_reentrant=False).sum().backward()
    >>> round(x.grad[0].item(), 3)
    60.257
    """
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not use_reentrant:
        return run_without_reentrant(function, preserve, context_fn, determinism_check, debug, early_stop, args,
                                     kwargs)
    if context_fn is not noop_context_fn or debug is not False:
        raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
    if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        with no_grad():
            return function(*args)
    if is_compiling():
        # The reentrant backward writes the parameters' .grad as a side effect a compiled graph cannot hold; the
        # non-reentrant form gives the same gradients as graph outputs.
        return run_without_reentrant(function, preserve, context_fn, "default", False, early_stop, args, {})
    return _Reentrant.apply(function, preserve, *args)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Run ``functions`` (a ``Sequential`` or a list of modules) in ``segments`` chunks, checkpointing all but the
    last, which runs normally (its values are needed at once by the backward).

    >>> import jitorch
    >>> net = jitorch.nn.Sequential(jitorch.nn.Linear(3, 3), jitorch.nn.ReLU(), jitorch.nn.Linear(3, 1))
    >>> checkpoint_sequential(net, 2, jitorch.randn(2, 3, requires_grad=True), use_reentrant=False).shape
    jitorch.Size([2, 1])
    """
    if use_reentrant is None:
        warnings.warn(_SEQUENTIAL_WARNING, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    functions = list(functions.children()) if hasattr(functions, "children") else list(functions)
    # torch's arithmetic, so a bad count fails as there: 0 divides by zero, more segments than functions makes a
    # zero range step, and a negative count runs everything unsegmented.
    if segments == 0:
        raise ZeroDivisionError(f"checkpoint_sequential: segments must be positive, got {segments}")
    size = len(functions) // segments
    if segments > 1 and size == 0:
        raise ValueError(f"checkpoint_sequential: {segments} segments for {len(functions)} functions (range() arg 3 "
                         "must not be zero)")

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
