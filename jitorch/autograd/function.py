"""User-defined differentiable operations: ``jitorch.autograd.Function``.

>>> import jitorch
>>> class Cube(jitorch.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x ** 3
...     @staticmethod
...     def backward(ctx, g):
...         (x,) = ctx.saved_tensors
...         return 3 * x ** 2 * g
>>> x = jitorch.tensor(2.0, requires_grad=True)
>>> Cube.apply(x).backward()
>>> x.grad
tensor(12.)
"""
from __future__ import annotations

import functools

from .._tensor import Tensor
from . import forward_ad, function_jvp, saved_hooks
from .forward_ad_shadow import forget_shadows
from .graph import Node, ViewCreation, _version_error
from .grad_mode import GradState, no_grad

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """Methods available on ``ctx`` inside ``forward``/``setup_context`` and ``backward``."""

    def save_for_backward(self, *tensors):
        from .._tensor import Tensor

        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument {i} is of type "
                                f"{type(t).__name__}")
        self._to_save = tensors

    _saved_for_forward = ()
    _jvp_running = False

    def save_for_forward(self, *tensors):
        self._saved_for_forward = tensors

    def mark_dirty(self, *tensors):
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tensors

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    @property
    def saved_tensors(self):
        from .._tensor import Tensor

        if self._jvp_running:  # inside ``jvp``: what ``save_for_forward`` kept
            return tuple(self._saved_for_forward)
        if self._saved is None:
            from .graph import _FREED_MSG

            raise RuntimeError(_FREED_MSG)
        out = []
        for kind, item, version in self._saved:
            if kind == "packed":
                out.append(item.unpack())
            elif kind == "input":
                if item is not None and item._version != version:
                    raise _version_error(item, version, self.name())
                out.append(item)
            else:  # an output of this function: rebuilt without a reference cycle
                data, counter, saved_version = item
                if counter[0] != saved_version:
                    raise _version_error(Tensor._make(data), saved_version, self.name(), current=counter[0],
                                         producer=self, output_nr=version)
                t = Tensor._make(data)
                if GradState.enabled:
                    t.grad_fn, t._output_nr, t._requires_grad = self, version, True
                out.append(t)
        return tuple(out)

    saved_variables = saved_tensors


class BackwardCFunction(Node, FunctionCtx):
    """The node of one ``Function.apply`` call; it is also the ``ctx`` the user's methods receive."""

    _function = None
    materialize_grads = True
    _to_save = ()
    _dirty = ()
    _non_differentiable = ()
    _saved = ()

    _positions = ()  # index of each tensor argument among the forward arguments (edges exist for tensors only)
    _num_args = 0

    @property
    def needs_input_grad(self):
        flags = [False] * self._num_args
        for edge, pos in zip(self.next, self._positions):
            flags[pos] = edge is not None
        return tuple(flags)

    def apply(self, grads):
        fn = self._function
        if function_jvp.active() and not function_jvp.native(fn):  # forward AD's trick: the jvp's transpose
            result = function_jvp.transposed_jvp(self, fn, grads)
        else:
            backward = fn.backward if fn.backward is not Function.backward else fn.vjp
            result = backward(self, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        n = self._num_args
        if len(result) < n or any(g is not None for g in result[n:]):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients (expected {n}, got "
                               f"{len(result)})")
        tensor_positions = set(self._positions)
        for pos in range(n):
            if pos not in tensor_positions and result[pos] is not None:
                raise RuntimeError(f"function {self.name()} returned a gradient different than None at position "
                                   f"{pos + 1}, but the corresponding forward input was not a Variable")
        grads = tuple(result[pos] for pos in self._positions)
        for i, g in enumerate(grads):
            if g is None:
                continue
            if not isinstance(g, Tensor):
                raise RuntimeError(f"expected Variable or None (got {type(g).__name__})")
            meta = self.in_meta[i] if self.in_meta is not None else None
            if meta is not None and not _expandable(meta[0], g._data.shape):
                # The engine sums a broadcast gradient down to the input's shape; any other shape is the backward's
                # mistake, reported here rather than as a failed sum deep in the engine.
                raise RuntimeError(f"Function {self.name()} returned an invalid gradient at index {i} - got "
                                   f"{list(g._data.shape)} but expected shape compatible with {list(meta[0])}")
        return grads

    def release(self):
        self._saved = None
        self._freed = True

    def materialize(self, grads):
        if not self.materialize_grads:
            return grads
        # Outputs that are not tensors (an int, None) get None as their gradient, never a materialized zero.
        return tuple(None if meta[1] is None else g
                     for g, meta in zip(Node.materialize(self, grads), self._out_meta))


def _expandable(shape, to):
    if len(shape) > len(to):
        return False
    return all(a == b or a == 1 for a, b in zip(reversed(shape), reversed(to)))


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        cls._backward_cls = type(f"{name}Backward", (BackwardCFunction,), {"_function": cls})


class Function(metaclass=_FunctionMeta):
    """Subclass with static ``forward(ctx, *args)`` and ``backward(ctx, *grads)``; call ``YourFn.apply(*args)``.

    ``forward(*args)`` plus ``setup_context(ctx, inputs, output)`` (the newer style) also works.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError(function_jvp.JVP_MISSING)

    # jitorch's own Functions that stand in for eager ops (compiled regions) set this: views they return are
    # rebased after an in-place write to their base as eager views are, instead of refused as a custom Function's.
    _eager_views = False

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        from .._dispatch import _edge, sync_views
        from .._tensor import Tensor

        # A view whose base was written in place since: its history is regenerated first, as every op's inputs
        # are (else ``v = y[:2]; y.mul_(2); F.apply(v)`` would differentiate around the ``mul_``).
        sync_views(args)
        ctx = cls._backward_cls.__new__(cls._backward_cls)
        ctx._positions = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor))
        ctx._num_args = len(args)
        Node.__init__(ctx, tuple(_edge(args[i]) for i in ctx._positions), {})
        uses_setup = cls.setup_context is not Function.setup_context
        with no_grad():
            outputs = cls.forward(*args, **kwargs) if uses_setup else cls.forward(ctx, *args, **kwargs)
        if uses_setup:
            cls.setup_context(ctx, args, outputs)
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        record = GradState.enabled and any(e is not None for e in ctx.next)
        dirty = {id(t) for t in ctx._dirty}
        nondiff = {id(t) for t in ctx._non_differentiable}
        inputs = {id(a) for a in args if isinstance(a, Tensor)}
        final = []
        for o in outs:
            if isinstance(o, Tensor):
                if id(o) in dirty:
                    o._bump_version()
                    if record and o.grad_fn is None and o._requires_grad:
                        raise RuntimeError("a leaf Variable that requires grad has been used in an in-place operation.")
                elif id(o) in inputs and record:
                    o = o.view_as(o)  # returning an input unchanged still gets this function's history
            final.append(o)
        if record:
            tensor_outs = [(nr, o) for nr, o in enumerate(final) if isinstance(o, Tensor)]
            ctx._out_meta = tuple((o._data.shape, o.dtype, o.device) if isinstance(o, Tensor) else ((), None, None)
                                  for o in final)
            ctx.in_meta = tuple((args[i]._data.shape, args[i]._data.dtype) if args[i]._requires_grad else None
                                for i in ctx._positions)
            if forward_ad._LEVELS and not function_jvp.native(cls):  # tangents from ``jvp``, not from shadows
                ctx._arg_meta = tuple((args[i].shape, args[i].dtype, args[i].device) for i in ctx._positions)
                forget_shadows([o for _, o in tensor_outs])
            for nr, o in tensor_outs:
                if id(o) in nondiff or id(outs[nr]) in nondiff or not (o.is_floating_point() or o.is_complex()):
                    continue  # (as torch: integer and bool outputs are never differentiable)
                o.grad_fn, o._output_nr, o._requires_grad = ctx, nr, True
                if o._base is not None and not cls._eager_views and not (id(o) in dirty and id(o) in inputs):
                    # This function is the view's history: a later in-place write could not be rebased onto its
                    # custom backward, so torch refuses one (for every output of a function with several).
                    kind = "multi" if len(final) > 1 else "custom"
                    o._nograd_view = ViewCreation(kind, f"Output {nr} of {cls.__name__}")
                elif o._nograd_view is not None:
                    o._nograd_view = None
                if id(o) in dirty and o._base is not None:
                    # A view written in place by the function: its base's history must include it (CopySlices).
                    from ..ops.inplace_views import rebase_view

                    rebase_view(o, o)
        out_ids = {id(o): nr for nr, o in enumerate(final) if isinstance(o, Tensor)}
        out_ids.update({id(o): nr for nr, o in enumerate(outs) if isinstance(o, Tensor)})
        saved = []
        for t in ctx._to_save:
            if t is None:
                saved.append(("input", None, None))
            elif saved_hooks.active():
                mine = record and id(t) in out_ids and t.grad_fn is ctx
                saved.append(("packed", saved_hooks.pack(t, ctx if mine else None, out_ids.get(id(t), 0)), None))
            elif record and id(t) in out_ids and t.grad_fn is ctx:
                saved.append(("output", (t._data, t._version_counter(), t._version), out_ids[id(t)]))
            else:
                if t._inference and record:
                    from .graph import INFERENCE_SAVED_MSG

                    raise RuntimeError(INFERENCE_SAVED_MSG)
                saved.append(("input", t, t._version))
        ctx._saved = tuple(saved)
        ctx._to_save = ()
        return final[0] if single else tuple(final)


def once_differentiable(fn):
    """Decorate a ``backward`` that is not itself differentiable: it runs without recording, and under
    ``create_graph`` its gradients carry a node that raises torch's error when differentiated."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = fn(ctx, *args)
        if not GradState.enabled or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        # Leaves requiring grad, so the error node is recorded over them (torch's ``fake_requires_grad``).
        leaves = [o.detach().requires_grad_() if isinstance(o, Tensor) and (o.is_floating_point() or o.is_complex())
                  else o for o in outs]
        wrapped = _DelayedError.apply(*leaves)
        wrapped = wrapped if isinstance(wrapped, tuple) else (wrapped,)
        return wrapped[0] if single else wrapped
    return wrapper


class _DelayedError(Function):
    """Passes gradients through unchanged; differentiating them raises (torch's ``DelayedError`` node)."""

    @staticmethod
    def forward(ctx, *grads):
        return grads if len(grads) != 1 else grads[0]

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")
