"""Autograd of a registered operator: one generated ``jitorch.autograd.Function`` per operator, as torch's
``make_autograd_impl``, so ``ctx`` is a Function's ctx (``save_for_backward``, ``saved_tensors``,
``needs_input_grad``, ``mark_non_differentiable``) and custom ops share the Function machinery with everything else.

The Function's arguments are the schema's positional arguments with Tensor lists expanded, then one `_Layout` that
rebuilds them; its forward runs the op below autograd and calls the registered ``setup_context(ctx, inputs, output)``
(``keyword_only_inputs`` too when the schema has keyword-only arguments), its backward the registered formula, whose
per-argument gradients (a list for a Tensor list) are flattened back. Without a formula, backward raises torch's
error, at backward time.

>>> import jitorch
>>> @jitorch.library.custom_op("doc_ag::cube", mutates_args=())
... def cube(x: jitorch.Tensor) -> jitorch.Tensor:
...     return x ** 3
>>> cube.register_autograd(lambda ctx, g: 3 * ctx.saved_tensors[0] ** 2 * g,
...                        setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))
>>> x = jitorch.tensor(2.0, requires_grad=True)
>>> y = cube(x)
>>> y.grad_fn.name(), jitorch.autograd.grad(y, x)
('GeneratedBackwardFor_doc_ag_cube_defaultBackward', (tensor(12.),))
"""
from __future__ import annotations

from .._tensor import Tensor
from ..autograd.function import BackwardCFunction, Function
from . import _registry

__all__ = ["apply_function"]


class _Layout:
    """How the Function's flat arguments rebuild the op's values: ``sizes[i]`` is None for one value, n for a list of
    n tensors. Not a tensor, so the Function gives it no edge (its gradient is the trailing None)."""

    __slots__ = ("values", "sizes", "list_out")

    def __init__(self, values, sizes):
        self.values, self.sizes, self.list_out = values, sizes, False

    def rebuild(self, flat):
        values, pos = list(self.values), 0
        for i, n in enumerate(self.sizes):
            if n is None:
                values[i] = flat[pos]
                pos += 1
            else:
                values[i] = list(flat[pos:pos + n])
                pos += n
        return values

    def structure(self, flat):
        """Per-argument entries of ``flat`` (lists for the Tensor lists), as ``needs_input_grad`` shows them."""
        out, pos = [], 0
        for n in self.sizes:
            out.append(flat[pos] if n is None else list(flat[pos:pos + n]))
            pos += 1 if n is None else n
        return tuple(out)


class _CustomOpCtx(BackwardCFunction):
    """The ctx (and node) of a custom op's Function: ``needs_input_grad`` per schema argument, without the layout."""

    _layout = None

    @property
    def needs_input_grad(self):
        flags = BackwardCFunction.needs_input_grad.fget(self)[:-1]
        return self._layout.structure(flags) if self._layout is not None else flags


def _make_function(entry):
    name = f"GeneratedBackwardFor_{entry.ns}_{entry.opname}_{entry.overload}"

    def forward(ctx, *flat):
        layout = flat[-1]
        ctx._layout = layout
        values = layout.rebuild(flat[:-1])
        out = _registry.below_autograd(entry, values)
        if entry.setup_context is not None:  # read at each call: register_autograd may come after the first call
            pos, kw = _registry.split(entry, values)
            if entry.has_kwonly:
                entry.setup_context(ctx=ctx, inputs=tuple(pos), keyword_only_inputs=kw, output=out)
            else:
                entry.setup_context(ctx=ctx, inputs=tuple(pos), output=out)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        integral = [o for o in outs if isinstance(o, Tensor) and not (o.is_floating_point() or o.is_complex())]
        if integral:  # as torch: integer outputs never require grad
            ctx.mark_non_differentiable(*integral)
        if isinstance(out, list):
            layout.list_out = True
            return tuple(out)
        return out

    def backward(ctx, *grads):
        if entry.backward is None:
            raise RuntimeError(f"Trying to backward through {entry} but no autograd formula was registered. "
                               "Please use register_autograd to add one.")
        layout = ctx._layout
        if layout.list_out:
            grads = (list(grads),)
        result = entry.backward(ctx, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        flat = []
        for n, g in zip(layout.sizes, result):
            if n is None:
                flat.append(g)
            elif g is None:
                flat.extend([None] * n)
            elif isinstance(g, (list, tuple)) and len(g) == n:
                flat.extend(g)
            else:
                raise RuntimeError(f"Expected the return from backward to be of the same structure as the inputs: "
                                   f"{entry}'s backward returned {type(g).__name__} for a list of {n} tensors")
        flat.extend(result[len(layout.sizes):])  # too many gradients: the Function's count check names them
        return (*flat, None)

    function = type(name, (Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    function._backward_cls = type(f"{name}Backward", (_CustomOpCtx,), {"_function": function})
    return function


def apply_function(entry, values):
    """Run the op through its generated Function: one autograd node for the call."""
    if entry.function is None:
        entry.function = _make_function(entry)
    flat, sizes, kept = [], [], list(values)
    for a, v in zip(entry.schema.arguments, values):
        if a.kwarg_only:
            continue
        if a.kind == "tensor_list" and v is not None:
            flat.extend(v)
            sizes.append(len(v))
        else:
            flat.append(v)
            sizes.append(None)
    layout = _Layout(kept, sizes)
    out = entry.function.apply(*flat, layout)
    return list(out) if layout.list_out else out
