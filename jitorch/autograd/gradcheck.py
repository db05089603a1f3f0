"""``gradcheck`` / ``gradgradcheck``: compare autograd's Jacobian with central finite differences.

>>> import jitorch
>>> x = jitorch.rand(3, dtype=jitorch.float64, requires_grad=True)
>>> jitorch.autograd.gradcheck(lambda t: (t.sin() * t).sum(), (x,))
True
"""
from __future__ import annotations

import numpy as np

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(RuntimeError):
    pass


def _tensors(xs):
    from .._tensor import Tensor

    return [x for x in xs if isinstance(x, Tensor)]


def _outputs(func, inputs):
    from .._tensor import Tensor

    out = func(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, Tensor) and (o.is_floating_point() or o.is_complex())]


def _numerical_jacobian(func, inputs, x, output_index, eps):
    """Columns d out / d x[j] by central differences (one per element of ``x``)."""
    cols = []
    data = x._data
    for idx in np.ndindex(*data.shape):
        orig = data[idx].copy()
        # Grad mode stays on: gradgradcheck's function itself calls autograd.grad.
        data[idx] = orig + eps
        plus = _outputs(func, inputs)[output_index]._host().astype(np.float64).ravel().copy()
        data[idx] = orig - eps
        minus = _outputs(func, inputs)[output_index]._host().astype(np.float64).ravel().copy()
        data[idx] = orig
        cols.append((plus - minus) / (2 * eps))
    n_out = _outputs(func, inputs)[output_index]._data.size
    return np.stack(cols, axis=1) if cols else np.zeros((n_out, 0))


def _analytical_jacobian(func, inputs, diff_inputs, output_index):
    from . import grad
    from .. import _creation

    out = _outputs(func, inputs)[output_index]
    n = out._data.size
    jacs = [np.zeros((n, x._data.size)) for x in diff_inputs]
    if not out._requires_grad:
        return jacs
    for i in range(n):
        onehot = np.zeros(n, dtype=out._data.dtype)
        onehot[i] = 1
        g_out = _creation.tensor(onehot.reshape(out._data.shape), device=out.device)
        grads = grad(out, diff_inputs, g_out, retain_graph=True, allow_unused=True)
        for j, g in enumerate(grads):
            if g is not None:
                if g._data.shape != diff_inputs[j]._data.shape:
                    raise GradcheckError(f"gradcheck: grad for input {j} has shape {list(g.shape)}, expected "
                                         f"{list(diff_inputs[j].shape)}")
                jacs[j][i] = g._host().astype(np.float64).ravel()
    return jacs


def _as_real_function(func, inputs):
    """``func`` over real tensors: complex inputs enter as their ``[..., 2]`` real views and complex outputs leave as
    theirs. PyTorch's complex gradient (``dL/dx + i dL/dy``) is the real view of the real function's gradient, so both
    Jacobians are compared as real matrices, as ``torch.autograd.gradcheck`` does."""
    from .._movement_extra import view_as_complex, view_as_real
    from .._tensor import Tensor

    complex_at = {i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.is_complex()}
    if not complex_at:
        return lambda *args: _real_outputs(func(*args)), inputs
    real_inputs = tuple(view_as_real(x.detach()).clone().requires_grad_(x._requires_grad) if i in complex_at else x
                        for i, x in enumerate(inputs))

    def real_func(*args):
        return _real_outputs(func(*(view_as_complex(a) if i in complex_at else a for i, a in enumerate(args))))

    return real_func, real_inputs


def _real_outputs(out):
    from .._movement_extra import view_as_real
    from .._tensor import Tensor

    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(view_as_real(o) if isinstance(o, Tensor) and o.is_complex() else o for o in outs)


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0,
              check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True, fast_mode=False,
              masked=None):
    """True when autograd's gradients match finite differences (use float64 inputs that require grad)."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    func, inputs = _as_real_function(func, inputs)
    diff_inputs = [x for x in _tensors(inputs) if x._requires_grad]
    if not diff_inputs:
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    for x in diff_inputs:
        if x.dtype.name not in ("float64", "complex128"):
            import warnings

            warnings.warn(f"gradcheck: input of dtype {x.dtype} is not double precision; the check may fail "
                          "spuriously", stacklevel=2)
    outs = _outputs(func, inputs)
    for k in range(len(outs)):
        analytical = _analytical_jacobian(func, inputs, diff_inputs, k)
        for j, x in enumerate(diff_inputs):
            numerical = _numerical_jacobian(func, inputs, x, k, eps)
            bad = ~np.isclose(analytical[j], numerical, rtol=rtol, atol=atol)
            if bad.any():
                msg = (f"Jacobian mismatch for output {k} with respect to input {j},\n"
                       f"numerical:{numerical}\nanalytical:{analytical[j]}\n")
                if raise_exception:
                    raise GradcheckError(msg)
                return False
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3, gen_non_contig_grad_outputs=False,
                  raise_exception=True, nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
                  check_batched_grad=False, check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False,
                  masked=False):
    """``gradcheck`` of the first derivative: checks second-order gradients."""
    from . import grad
    from .. import _creation

    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    outs = _outputs(func, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = tuple(_creation.tensor(rng.standard_normal(o._data.shape), dtype=o.dtype, device=o.device,
                                              requires_grad=True) for o in outs)
    grad_outputs = tuple(grad_outputs) if isinstance(grad_outputs, (tuple, list)) else (grad_outputs,)
    n_in = len(inputs)
    diff_positions = [i for i, x in enumerate(inputs) if hasattr(x, "_data") and x._requires_grad]

    def first_derivative(*args):
        xs, gs = args[:n_in], args[n_in:]
        outputs = _outputs(func, xs)
        diff = [xs[i] for i in diff_positions]
        grads = grad(outputs, diff, gs, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivative, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
