"""Non-reentrant activation checkpointing (``checkpoint(..., use_reentrant=False)``), as torch's: saved-tensor hooks.

While the function runs, every tensor a node saves goes through the region's pack hook, which keeps only a small
``_Holder`` (and the tensor's shape, dtype and device). The first unpack in the backward reruns the function with the
random and autocast state of the forward under a second pair of hooks that collects, in order, the tensors it saves;
the ``i``-th recomputed tensor answers the ``i``-th holder. With early stop (the default) the recomputation stops as
soon as it has saved as many tensors as the forward did, so the ops, Python code and forward hooks after the last
saving op do not run again. Saved-tensor hooks entered inside the function keep their tensors (nothing is recomputed
for them); hooks around the checkpoint see its inputs only, as in torch.

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True)
>>> y = run_without_reentrant(lambda t: t.sin().exp(), True, noop_context_fn, "default", False, True, (x,), {})
>>> type(y.grad_fn._saved_out[0].value).__name__
'_Holder'
"""
from __future__ import annotations

import contextlib
import weakref

from .. import _random
from .._dispatch import sync_views
from .._tensor import Tensor
from ..amp.autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled
from ..autograd import saved_hooks
from ..autograd.grad_mode import GradState, enable_grad
from ..autograd.graph import _version_error, recording_nodes

__all__ = ["run_without_reentrant", "noop_context_fn", "CheckpointError", "settings", "rng_states", "rng_as_at_forward",
           "autocast_state", "autocast_as"]


class CheckpointError(RuntimeError):
    """The recomputation did not save what the forward saved (torch's class, so ``except CheckpointError`` works)."""


# ``set_checkpoint_early_stop`` / ``set_checkpoint_debug_enabled``: None defers to the call's own argument.
settings = {"early_stop": None, "debug": None}

_DEBUG_TIP = ("\nTip: To see a more detailed error message, either pass `debug=True` to\n"
              "`torch.utils.checkpoint.checkpoint(...)` or wrap the code block\n"
              "with `with torch.utils.checkpoint.set_checkpoint_debug_enabled(True):` to\n"
              "enable checkpoint-debug mode globally.\n")


def noop_context_fn():
    """The default ``context_fn``: no context around the forward or the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def rng_states(args=()):
    # A CUDA generator first used inside the region must exist now, or its forward draws could not be replayed.
    for a in args:
        if isinstance(a, Tensor) and a.is_cuda:
            _random.cuda_generator(a.device.index)
    states = [(_random.default_generator, _random.default_generator.get_state())]
    return states + [(g, g.get_state()) for g in _random._cuda_generators.values()]


@contextlib.contextmanager
def rng_as_at_forward(states):
    """Run with the generators as they were at the forward, then put back their current states."""
    if states is None:
        yield
        return
    now = rng_states()
    for gen, state in states:
        gen.set_state(state)
    try:
        yield
    finally:
        for gen, state in now:
            gen.set_state(state)


def autocast_state():
    return {dev: (is_autocast_enabled(dev), get_autocast_dtype(dev)) for dev in ("cpu", "cuda")}


def autocast_as(state):
    """A context entering the autocast ``state`` of the forward (the backward usually runs outside it)."""
    stack = contextlib.ExitStack()
    for dev, (enabled, dtype) in state.items():
        if enabled:
            stack.enter_context(autocast(dev, dtype=dtype))
        elif is_autocast_enabled(dev):
            stack.enter_context(autocast(dev, enabled=False))
    return stack


class _Holder:
    """What a node of the region keeps in place of a saved tensor; the recomputed tensor is found by it."""

    __slots__ = ("__weakref__",)


class _Stop(Exception):
    """Raised by the recomputation's pack hook once every tensor the forward saved is recomputed (early stop)."""


def _stop():
    raise _Stop


def _meta(t):
    return {"shape": t.shape, "dtype": t.dtype, "device": t.device}


class _Frame:
    """One checkpointed call: its inputs, the holders its nodes keep, and the recomputed tensors they answer to."""

    def __init__(self, recompute, early_stop, check_meta, debug):
        self.recompute_fn, self.early_stop, self.check_meta, self.debug = recompute, early_stop, check_meta, debug
        self.holders = []  # weakrefs, in save order
        self.metas = []  # the forward's metadata per saved tensor (None without the determinism check)
        self.saved = []  # (weakref, version, grad_fn) per saved tensor: version checks of those from outside
        self.watched = []
        self.recomputed = weakref.WeakKeyDictionary()  # holder -> recomputed tensor
        self.inputs = self.versions = ()
        self.forward_done = False
        self.forward_ops = ()  # debug: the node names the forward recorded

    def save_inputs(self, args):
        """Inputs as torch's frame saves them: through the hooks around the checkpoint when there are any, else
        version-checked at the recomputation."""
        if saved_hooks.active():
            self.inputs = [saved_hooks.pack(a) if isinstance(a, Tensor) else a for a in args]
        else:
            self.inputs = args
            self.versions = [(a, a._version) for a in args if isinstance(a, Tensor)]

    def get_inputs(self):
        for t, version in self.versions:
            if t._version != version:
                raise _version_error(t, version, "checkpoint")
        return [a.unpack() if type(a) is saved_hooks.Packed else a for a in self.inputs]

    def pack(self, t):
        holder = _Holder()
        self.holders.append(weakref.ref(holder))
        self.metas.append(_meta(t) if self.check_meta else None)
        self.saved.append((weakref.ref(t), t._version, t.grad_fn))
        return holder

    def unpack(self, holder):
        if holder not in self.recomputed:
            self.recompute()
        return self.recomputed[holder]

    def finish_forward(self, region_nodes):
        """Keep the version checks of saved tensors the region did not make (parameters, closed-over tensors):
        the recomputation saves them again, so a change in place since would otherwise go unnoticed."""
        inside = {id(n) for n in region_nodes}
        self.watched = [(ref, v) for ref, v, fn in self.saved if fn is None or id(fn) not in inside]
        self.saved = []
        self.forward_done = True
        if self.debug:
            self.forward_ops = [n.name() for n in region_nodes]

    def recompute(self):
        with enable_grad():  # inputs packed by outer hooks get their history back only with grad mode on
            inputs = self.get_inputs()
        for ref, version in self.watched:
            t = ref()
            if t is not None and t._version != version:
                raise _version_error(t, version, "checkpoint")
        values, expected = [], len(self.holders)
        ignore_count = False

        def pack(t):
            nonlocal ignore_count
            t = t.detach() if t.requires_grad else t
            if len(values) >= expected:
                if not self.forward_done:  # a backward inside the function ran before its forward finished
                    ignore_count = True
                    return t
                raise CheckpointError("torch.utils.checkpoint: trying to save more tensors during recomputation "
                                      "than during the original forward pass.\n" + _DEBUG_TIP)
            values.append(t)
            if self.early_stop and len(values) == expected:
                saved_hooks.after_op(_stop)
            return t

        try:
            with saved_hooks.saved_tensors_hooks(pack, lambda t: t), enable_grad(), recording_nodes() as again:
                self.recompute_fn(*inputs)
        except _Stop:
            pass
        except CheckpointError as e:
            raise self._with_log(e, again.nodes) from None
        finally:
            saved_hooks._after.clear()  # a stop asked for inside an op that raised
        if not ignore_count and len(values) != expected:
            raise self._with_log(CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the original forward and "
                f"recomputation.\nNumber of tensors saved during forward: {expected}\nNumber of tensors saved "
                f"during recomputation: {len(values)}.\n" + _DEBUG_TIP), again.nodes)
        differ = ""
        for i, ref in enumerate(self.holders[:len(values)]):
            if ref() is not None and self.check_meta and self.metas[i] != _meta(values[i]):
                differ += (f"tensor at position {i}:\nsaved metadata: {self.metas[i]}\n"
                           f"recomputed metadata: {_meta(values[i])}\n")
        if differ:
            raise self._with_log(CheckpointError(
                "torch.utils.checkpoint: Recomputed values for the following tensors have different metadata than "
                f"during the forward pass.\n{differ}.\n" + _DEBUG_TIP), again.nodes)
        for ref, value in zip(self.holders, values):
            holder = ref()
            if holder is not None:
                self.recomputed[holder] = value

    def _with_log(self, error, recomputed_nodes):
        if not self.debug:
            return error
        forward = "\n".join(self.forward_ops)
        again = "\n".join(n.name() for n in recomputed_nodes)
        return CheckpointError(f"{error}\nbecause you passed `debug=True` to `torch.utils.checkpoint.checkpoint()`, "
                               f"the ops of both runs:\n\nOperations executed during the original forward:\n\n"
                               f"{forward}\n\nOperations executed during recomputation:\n\n{again}\n")


def run_without_reentrant(function, preserve, context_fn, determinism_check, debug, early_stop, args, kwargs):
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got {determinism_check}")
    if settings["debug"] if settings["debug"] is not None else debug:
        if context_fn is not noop_context_fn:
            raise ValueError("debug=True is incompatible with non-default context_fn")
        debug = True
    flat = list(args) + list(kwargs.values())
    # Stale views are regenerated outside the region, so the forward and the recomputation record the same ops.
    sync_views(flat)
    forward_ctx, recompute_ctx = context_fn()
    rng = rng_states(flat) if preserve else None
    amp = autocast_state()

    def recompute(*inputs):
        with rng_as_at_forward(rng), autocast_as(amp), recompute_ctx:
            function(*inputs, **kwargs)

    if not GradState.enabled:
        return function(*args, **kwargs)
    stop = settings["early_stop"] if settings["early_stop"] is not None else early_stop
    frame = _Frame(recompute, stop, determinism_check == "default", debug)
    frame.save_inputs(args)
    # The frame lives as long as the nodes whose holders its hooks made (the unpack hook holds it).
    with saved_hooks.saved_tensors_hooks(frame.pack, frame.unpack), recording_nodes() as region:
        suppressed = True
        with forward_ctx:
            out = function(*args, **kwargs)
            suppressed = False
        if suppressed:
            raise RuntimeError("torch.utils.checkpoint: the forward context provided by context_fn suppressed an "
                               "exception raised during the checkpointed forward. This is not supported because "
                               "checkpoint cannot return a value for a failed forward.")
    frame.finish_forward(region.nodes)
    return out
