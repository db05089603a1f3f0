"""Higher-order derivatives of whole functions (``torch.autograd.functional``): ``vjp``, ``jvp``, ``jacobian``,
``hessian``, ``vhp`` and ``hvp``, all composed of reverse-mode ``autograd.grad`` calls (forward products by the
double-backward trick), with torch's argument and result conventions: a tensor in, a tensor out; tuples in, tuples
out; results detached unless ``create_graph``.

>>> import jitorch
>>> from jitorch.autograd.functional import hessian, jacobian
>>> x = jitorch.tensor([1.0, 2.0])
>>> jacobian(lambda q: q ** 2, x)
tensor([[2., 0.],
        [0., 4.]])
>>> hessian(lambda q: (q ** 3).sum(), x)
tensor([[ 6.,  0.],
        [ 0., 12.]])
"""
from __future__ import annotations

from .. import _creation
from .._tensor import Tensor
from .grad_mode import enable_grad, is_grad_enabled, set_grad_enabled

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


def _as_tuple(x, arg_name, fn_name):
    is_tuple = isinstance(x, tuple)
    items = x if is_tuple else (x,)
    for i, el in enumerate(items):
        if not isinstance(el, Tensor):
            what = f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors"
            raise TypeError(f"{what} but the value at index {i} has type {type(el)}." if is_tuple else
                            f"{what} but the given {arg_name} has type {type(el)}.")
    return is_tuple, items


def _unpack(res, to_unpack):
    """Undo the tuple wrapping: ``to_unpack`` is one flag, or (outer, inner) for tuples of tuples."""
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        return res if to_unpack[0] else res[0]
    return res if to_unpack else res[0]


def _prepare(inputs, create_graph, need_graph):
    # Inputs that already require grad keep their history (a view) only when the result will be differentiated.
    return tuple(x.view_as(x) if create_graph and x.requires_grad else x.detach().requires_grad_(need_graph)
                 for x in inputs)


def _finish(items, create_graph):
    if isinstance(items[0], Tensor):
        return items if create_graph else tuple(x.detach() for x in items)
    return tuple(_finish(x, create_graph) for x in items)


def _check_v(v, other, is_other_tuple):
    if len(v) != len(other):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}."
                           if is_other_tuple else "The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, other)):
        if a.shape != b.shape:
            raise RuntimeError(f"{f'Entry {i} in ' if is_other_tuple else ''}v has invalid size: should be "
                               f"{b.shape} but got {a.shape}.")


def _grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None):
    """``autograd.grad`` over the outputs that require grad; None for inputs nothing reaches."""
    from . import grad

    grad_outputs = (None,) * len(outputs) if grad_outputs is None else grad_outputs
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return grad([o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True, create_graph=create_graph,
                retain_graph=retain_graph)


def double_vjp(outputs, inputs, tangents, create_graph=False, strict=False, custom_jvps=False):
    """``J tangents`` (one entry per output, None where no input reaches it) by the double-vjp trick: ``J^T u`` is
    linear in a cotangent ``u`` (zeros: only its graph matters), so its vjp against ``tangents`` is ``J tangents``.
    ``custom_jvps``: custom Functions contribute their ``jvp`` (forward AD), not their ``backward``.
    Call it with grad mode on."""
    from .function_jvp import transposed_jvps

    cotangents = tuple(_creation.zeros_like(o, requires_grad=True) for o in outputs)
    for c in cotangents:  # the trick's own leaves: `func._reaches_outside` does not count them as the caller's
        c._func_input = True
    with transposed_jvps(custom_jvps):
        grad_inputs = _grad(outputs, inputs, cotangents, create_graph=True)
    for i, g in enumerate(grad_inputs if strict else ()):
        if g is None:
            raise RuntimeError(f"The output of the user-provided function is independent of input {i}. This is not "
                               "allowed in strict mode.")
    return _grad(grad_inputs, cotangents, tangents, create_graph)


def _zeros_for_none(grads, refs, strict, what):
    out = []
    for i, (g, ref) in enumerate(zip(grads, refs)):
        if g is None:
            if strict:
                raise RuntimeError(f"The {what} is independent of input {i}. This is not allowed in strict mode.")
            g = _creation.zeros_like(ref)
        out.append(g)
    return tuple(out)


def _call(func, inputs, fn_name, strict):
    is_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", fn_name)
    if strict:
        for i, out in enumerate(outputs):
            if not out.requires_grad:
                raise RuntimeError(f"Output {i} of the user-provided function does not require gradients. The "
                                   "outputs must be computed in a differentiable manner from the input when running "
                                   "in strict mode.")
    return is_tuple, outputs


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``; ``v`` may be omitted when ``func`` returns one element."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prepare(inputs, create_graph, True)
        is_outputs_tuple, outputs = _call(func, inputs, "vjp", strict)
        if v is not None:
            v = _prepare(_as_tuple(v, "v", "vjp")[1], create_graph, False)
            _check_v(v, outputs, is_outputs_tuple)
        elif len(outputs) != 1 or outputs[0].nelement() != 1:
            raise RuntimeError("The vector v can only be None if the user-provided function returns a single Tensor "
                               "with a single element.")
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _zeros_for_none(_grad(outputs, inputs, v, create_graph), inputs, strict,
                              "output of the user-provided function")
    return (_unpack(_finish(outputs, create_graph), is_outputs_tuple),
            _unpack(_finish(res, create_graph), is_inputs_tuple))


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)`` by the double-backward trick (the vjp is linear in its cotangent)."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _prepare(inputs, create_graph, True)
        if v is not None:
            v = _prepare(_as_tuple(v, "v", "jvp")[1], create_graph, False)
            _check_v(v, inputs, is_inputs_tuple)
        elif len(inputs) != 1 or inputs[0].nelement() != 1:
            raise RuntimeError("The vector v can only be None if the input to the user-provided function is a single "
                               "Tensor with a single element.")
        is_outputs_tuple, outputs = _call(func, inputs, "jvp", strict)
        res = double_vjp(outputs, inputs, v, create_graph, strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _zeros_for_none(res, outputs, strict, "gradient with respect to the input")
    return (_unpack(_finish(outputs, create_graph), is_outputs_tuple),
            _unpack(_finish(res, create_graph), is_outputs_tuple))


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """d outputs / d inputs, each block shaped ``output.shape + input.shape`` (one backward per output element;
    ``vectorize`` and ``strategy`` give the same values)."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
                             'function has more outputs than inputs, "forward-mode" tends to be more performant. '
                             'Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        _check_forward_mode(create_graph, strict, vectorize)
    if strict and vectorize:
        raise RuntimeError("torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
                           "supported together. Please either set `strict=False` or `vectorize=False`.")
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, create_graph, True)
        is_outputs_tuple, outputs = _call(func, inputs, "jacobian", strict)
        blocks = []
        for i, out in enumerate(outputs):
            rows = [[] for _ in inputs]
            flat = out.reshape(-1)
            for j in range(flat.nelement()):
                grads = _grad((flat[j],), inputs, retain_graph=True, create_graph=create_graph)
                for k, (g, x) in enumerate(zip(grads, inputs)):
                    if g is None:
                        if strict:
                            raise RuntimeError(f"Output {i} of the user-provided function is independent of input "
                                               f"{k}. This is not allowed in strict mode.")
                        g = _creation.zeros_like(x)
                    rows[k].append(g)
            blocks.append(tuple(_stack(r).view(out.shape + x.shape) if r else  # an empty output: no rows
                                _creation.zeros(out.shape + x.shape, dtype=x.dtype, device=x.device)
                                for r, x in zip(rows, inputs)))
    return _unpack(_finish(tuple(blocks), create_graph), (is_outputs_tuple, is_inputs_tuple))


def _check_forward_mode(create_graph, strict, vectorize):
    """torch's refusals of a forward-mode Jacobian (the values would be the reverse mode's)."""
    if create_graph:
        raise NotImplementedError("torch.autograd.functional.jacobian: `create_graph=True` and "
                                  '`strategy="forward-mode"` are not supported together (yet). Please either set '
                                  '`create_graph=False` or `strategy="reverse-mode"`.')
    if strict:
        raise RuntimeError('torch.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` are not '
                           'supported together (yet). Please either set `strict=False` or '
                           '`strategy="reverse-mode"`.')
    if not vectorize:
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse Hessian is"
                                  "only implemented for `vectorize=True`.")


def _stack(rows):
    from .._movement import stack

    return stack(rows)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a function returning one element: the Jacobian of its gradient."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def single_output(*inp):
        out = func(*inp)
        is_out_tuple, outs = _as_tuple(out, "outputs of the user-provided function", "hessian")
        if is_out_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.nelement() != 1:
            raise RuntimeError("The Tensor returned by the function given to hessian should contain a single element")
        return out.squeeze()

    def jac_func(*inp):
        jac = jacobian(single_output, inp, create_graph=True, strict=strict)
        if strict:
            _check_jacobian_depends(jac if isinstance(jac, tuple) else (jac,))
        return jac

    res = jacobian(jac_func, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize,
                   strategy=outer_jacobian_strategy)
    return _unpack(res, (is_inputs_tuple, is_inputs_tuple))


def _check_jacobian_depends(jac):
    for i, g in enumerate(jac):
        if g is None or not g.requires_grad:
            raise RuntimeError("While computing the hessian, found that the jacobian of the user-provided function "
                               f"with respect to input {i} is independent of the input. This is not allowed in strict "
                               "mode. You should ensure that your function is twice differentiable and that the "
                               "jacobian depends on the inputs (this would be violated by a linear function for "
                               "example).")


def _hessian_products(func, inputs, v, create_graph, strict, fn_name, trick):
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", fn_name)
        inputs = _prepare(inputs, create_graph, True)
        if v is not None:
            v = _prepare(_as_tuple(v, "v", fn_name)[1], create_graph, False)
            _check_v(v, inputs, is_inputs_tuple)
        elif len(inputs) != 1 or inputs[0].nelement() != 1:
            raise RuntimeError("The vector v can only be None if the input to the user-provided function is a single "
                               "Tensor with a single element.")
        is_outputs_tuple, outputs = _call(func, inputs, fn_name, strict)
        if is_outputs_tuple:
            raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
        if outputs[0].nelement() != 1:
            raise RuntimeError(f"The Tensor returned by the function given to {fn_name} should contain a single "
                               "element")
        jac = _grad(outputs, inputs, create_graph=True)
        if strict:
            _check_jacobian_depends(jac)
        if trick:  # H v as the cotangent-derivative of (d/dx jac . u): torch's hvp
            probes = tuple(_creation.zeros_like(x, requires_grad=True) for x in inputs)
            double_back = _grad(jac, inputs, probes, create_graph=True)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        res = _grad(double_back, probes, v, create_graph) if trick else _grad(jac, inputs, v, create_graph)
        res = _zeros_for_none(res, inputs, strict, "jacobian of the user-provided function")
    return _finish(outputs, create_graph)[0], _unpack(_finish(res, create_graph), is_inputs_tuple)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)`` for a function returning one element."""
    return _hessian_products(func, inputs, v, create_graph, strict, "vhp", trick=False)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` for a function returning one element."""
    return _hessian_products(func, inputs, v, create_graph, strict, "hvp", trick=True)
