"""NAdam, Adamax, RAdam and ASGD updates as one generated kernel per parameter, with `_fused`'s machinery.

The unfused updates (``torch/optim/{nadam,adamax,radam,asgd}.py``'s single-tensor loops, which PyTorch runs for CPU
tensors) dispatch ten to fifteen tensor ops per parameter and make as many passes over memory; here one kernel reads
the parameter, its gradient and its state once. The kernels compute the single-tensor loop's expressions in its
order, each op rounded to the parameter's dtype and each Python scalar rounded to it first (as ATen's CPU kernels
round ``value``/``alpha``), so the result is torch's within rounding of the FMAs ATen's vectorized loops use.

Per-step scalars (bias corrections, NAdam's ``mu`` products, ASGD's ``eta``/``mu``) come from small arrays filled in
Python each step; what selects the arithmetic (weight decay and its kind, ``maximize``, the side of ``lerp``'s weight,
RAdam's rectification, ASGD's averaging) selects the kernel. Tensors outside `_fused._usable`'s domain (half or
complex dtypes, CUDA, non-contiguous state) make the functions return ``False`` with nothing changed: the optimizer
then runs its tensor-op update, which computes the same.

>>> import numpy as np, jitorch
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> w.grad = jitorch.tensor([2.0, -2.0])
>>> state = {"exp_avg": jitorch.zeros(2), "exp_inf": jitorch.zeros(2), "step": jitorch.tensor(0.0)}
>>> fused_adamax([w], [w.grad], [state["exp_avg"]], [state["exp_inf"]], [state["step"]], beta1=0.9, beta2=0.999,
...              lr=0.1, weight_decay=0.0, eps=1e-8, maximize=False)
True
>>> w
tensor([ 0.9000, -0.9000], requires_grad=True)
"""
from __future__ import annotations

import numpy as np

from .._dtype import get_default_dtype
from ..codegen.ir import FLOAT_IR_DTYPES, Store, load, op
from ..ops.native_eager import launch_arrays
from ._fused import (
    _GRAIN, _build, _check_shapes, _grad_terms, _kernel, _lerp, _lerp_scalars, _scalar, _Scalars, _second_moment,
    _usable, _wd_mode,
)
from ._kernels import ARRAY_OPS
from ._step_capture import count_up

__all__ = ["fused_nadam", "fused_adamax", "fused_radam", "fused_asgd"]


def _in_domain(name, params, *aligned):
    """Whether the kernels take these tensors (`_usable`: contiguous float CPU arrays of one dtype), their shapes
    then checked against the parameters' (`_check_shapes` raises torch's error)."""
    if not params or not _usable(params, *aligned):
        return False
    _check_shapes(name, params, *aligned)
    return True


def _host_scalars(*tensor_lists):
    """Whether the 0-d state tensors the update reads and writes in Python (counts, products) are host arrays."""
    return all(type(t._data) is np.ndarray for tensors in tensor_lists for t in tensors)


_touched = ARRAY_OPS.touched  # bumps each tensor's version after the kernel wrote its array


def _launch(ck, arrays, scalars, n_scalars):
    n = arrays[0].size
    launch_arrays(ck, [*arrays, *(scalars,) * n_scalars], n, _GRAIN, extent=n)


# -- NAdam ----------------------------------------------------------------------------------------------------------
_NADAM_SCALARS = ("w1", "w1_minus_1", "beta2", "one_minus_beta2", "weight_decay", "decay", "bc2", "eps",
                  "grad_coef", "avg_coef")
# Buffers: 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4.. scalars.


def _nadam_ir(dt, maximize, wd_mode, small_weight):
    s = _Scalars(_NADAM_SCALARS, 4, dt)
    p, g = _grad_terms(s, load(0, dt), load(1, dt), maximize, wd_mode)
    m = _lerp(s, load(2, dt), g, small_weight)
    v = _second_moment(s, load(3, dt), g)
    denom = op("add", op("sqrt", op("div", v, s("bc2"))), s("eps"))
    p = op("add", p, op("div", op("mul", s("grad_coef"), g), denom))
    p = op("add", p, op("div", op("mul", s("avg_coef"), m), denom))
    return _build(dt, 4, s, [Store(2, m), Store(3, v), Store(0, p)])


def fused_nadam(params, grads, exp_avgs, exp_avg_sqs, mu_products, state_steps, *, beta1, beta2, lr, weight_decay,
                momentum_decay, eps, decoupled_weight_decay, maximize):
    """NAdam's update, one kernel call per parameter; ``False`` (nothing changed) outside the kernel's domain.

    Advances ``state_steps`` and multiplies each ``mu_products`` entry (0-d tensors) by this step's ``mu`` in the
    tensor's dtype, as ``mu_product *= mu`` does; the step's coefficients use the product as that tensor holds it.
    """
    if not _host_scalars(mu_products) or not _in_domain("nadam", params, grads, exp_avgs, exp_avg_sqs):
        return False
    beta1, beta2, lr, weight_decay, momentum_decay, eps = map(_scalar, (beta1, beta2, lr, weight_decay,
                                                                        momentum_decay, eps))
    dtype = params[0]._data.dtype
    w1, w1_minus_1, small = _lerp_scalars(beta1, dtype)
    wd_mode = _wd_mode(weight_decay, decoupled_weight_decay)
    key = ("nadam", FLOAT_IR_DTYPES[dtype], maximize, wd_mode, small)
    ck = _kernel(key, lambda: _nadam_ir(*key[1:]))
    last = scalars = None
    for i, param_t in enumerate(params):
        count_up(state_steps[i])
        step = float(state_steps[i]._data)
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
        product_t = mu_products[i]
        held = product_t._data
        held[()] = held[()] * held.dtype.type(mu)
        product_t._bump_version()
        product = float(held[()])
        if (step, product) != last:  # a group's parameters usually share both: one scalar array for all
            last = (step, product)
            scalars = np.array([w1, w1_minus_1, beta2, 1.0 - beta2, weight_decay, 1.0 - lr * weight_decay,
                                1.0 - beta2 ** step, eps, -lr * (1.0 - mu) / (1.0 - product),
                                (-lr * mu_next) / (1.0 - product * mu_next)], dtype=dtype)
        _launch(ck, [param_t._data, grads[i]._data, exp_avgs[i]._data, exp_avg_sqs[i]._data], scalars,
                len(_NADAM_SCALARS))
        _touched(param_t, exp_avgs[i], exp_avg_sqs[i])
    return True


# -- Adamax ---------------------------------------------------------------------------------------------------------
_ADAMAX_SCALARS = ("w1", "w1_minus_1", "beta2", "weight_decay", "eps", "neg_clr")
# Buffers: 0 param, 1 grad, 2 exp_avg, 3 exp_inf, 4.. scalars.


def _adamax_ir(dt, maximize, decay, small_weight):
    s = _Scalars(_ADAMAX_SCALARS, 4, dt)
    p, g = _grad_terms(s, load(0, dt), load(1, dt), maximize, "l2" if decay else None)
    m = _lerp(s, load(2, dt), g, small_weight)
    # torch.maximum (NaN-propagating, as llvm.maximum) of the decayed norm and |g| + eps
    u = op("max", op("mul", load(3, dt), s("beta2")), op("add", op("abs", g), s("eps")))
    p = op("add", p, op("div", op("mul", s("neg_clr"), m), u))
    return _build(dt, 4, s, [Store(2, m), Store(3, u), Store(0, p)])


def fused_adamax(params, grads, exp_avgs, exp_infs, state_steps, *, beta1, beta2, lr, weight_decay, eps, maximize):
    """Adamax's update, one kernel call per parameter; ``False`` (nothing changed) outside the kernel's domain."""
    if not _in_domain("adamax", params, grads, exp_avgs, exp_infs):
        return False
    beta1, beta2, lr, weight_decay, eps = map(_scalar, (beta1, beta2, lr, weight_decay, eps))
    dtype = params[0]._data.dtype
    w1, w1_minus_1, small = _lerp_scalars(beta1, dtype)
    key = ("adamax", FLOAT_IR_DTYPES[dtype], maximize, weight_decay != 0, small)
    ck = _kernel(key, lambda: _adamax_ir(*key[1:]))
    for i, scalars in _each_step(state_steps, lambda step: np.array(
            [w1, w1_minus_1, beta2, weight_decay, eps, -(lr / (1 - beta1 ** step))], dtype=dtype)):
        _launch(ck, [params[i]._data, grads[i]._data, exp_avgs[i]._data, exp_infs[i]._data], scalars,
                len(_ADAMAX_SCALARS))
        _touched(params[i], exp_avgs[i], exp_infs[i])
    return True


def _each_step(state_steps, make):
    """``(i, make(step))`` per parameter after advancing its step count; ``make`` runs again only when the count
    changes (a group's parameters usually share it: one scalar array, one kernel for all)."""
    last = made = None
    for i, step_t in enumerate(state_steps):
        count_up(step_t)
        step = float(step_t._data)
        if step != last:
            last, made = step, make(step)
        yield i, made


# -- RAdam ----------------------------------------------------------------------------------------------------------
_RADAM_SCALARS = ("w1", "w1_minus_1", "beta2", "one_minus_beta2", "weight_decay", "decay", "bc1", "lr", "eps",
                  "one", "bc2_sqrt", "rect")
# Buffers: 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4.. scalars.


def _radam_ir(dt, maximize, wd_mode, small_weight, rectified):
    s = _Scalars(_RADAM_SCALARS, 4, dt)
    p, g = _grad_terms(s, load(0, dt), load(1, dt), maximize, wd_mode)
    m = _lerp(s, load(2, dt), g, small_weight)
    v = _second_moment(s, load(3, dt), g)
    update = op("mul", op("div", m, s("bc1")), s("lr"))
    if rectified:
        # bias_correction2 ** 0.5 / (sqrt(v) + eps) is Tensor.__rtruediv__: reciprocal, then the product
        adaptive = op("mul", op("div", s("one"), op("add", op("sqrt", v), s("eps"))), s("bc2_sqrt"))
        update = op("mul", op("mul", update, adaptive), s("rect"))
    return _build(dt, 4, s, [Store(2, m), Store(3, v), Store(0, op("sub", p, update))])


def fused_radam(params, grads, exp_avgs, exp_avg_sqs, state_steps, *, beta1, beta2, lr, weight_decay, eps,
                decoupled_weight_decay, maximize):
    """RAdam's update, one kernel call per parameter; ``False`` (nothing changed) outside the kernel's domain."""
    if not _in_domain("radam", params, grads, exp_avgs, exp_avg_sqs):
        return False
    beta1, beta2, lr, weight_decay, eps = map(_scalar, (beta1, beta2, lr, weight_decay, eps))
    dtype = params[0]._data.dtype
    w1, w1_minus_1, small = _lerp_scalars(beta1, dtype)
    wd_mode = _wd_mode(weight_decay, decoupled_weight_decay)
    rho_inf = 2 / (1 - beta2) - 1

    def kernel_and_scalars(step):
        bias_correction2 = 1 - beta2 ** step
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        rectified = rho_t > 5.0
        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5 \
            if rectified else 1.0
        key = ("radam", FLOAT_IR_DTYPES[dtype], maximize, wd_mode, small, rectified)
        return _kernel(key, lambda: _radam_ir(*key[1:])), np.array(
            [w1, w1_minus_1, beta2, 1.0 - beta2, weight_decay, 1.0 - lr * weight_decay, 1 - beta1 ** step, lr, eps,
             1.0, bias_correction2 ** 0.5, rect], dtype=dtype)

    for i, (ck, scalars) in _each_step(state_steps, kernel_and_scalars):
        _launch(ck, [params[i]._data, grads[i]._data, exp_avgs[i]._data, exp_avg_sqs[i]._data], scalars,
                len(_RADAM_SCALARS))
        _touched(params[i], exp_avgs[i], exp_avg_sqs[i])
    return True


# -- ASGD -----------------------------------------------------------------------------------------------------------
_ASGD_SCALARS = ("weight_decay", "decay", "neg_eta", "mu")
# Buffers: 0 param, 1 grad, 2 ax, 3.. scalars.


def _asgd_ir(dt, maximize, decay, averaging):
    s = _Scalars(_ASGD_SCALARS, 3, dt)
    p, g = _grad_terms(s, load(0, dt), load(1, dt), maximize, "l2" if decay else None)
    p = op("add", op("mul", p, s("decay")), op("mul", g, s("neg_eta")))
    ax = p
    if averaging:
        ax = load(2, dt)
        ax = op("add", ax, op("mul", op("sub", p, ax), s("mu")))
    return _build(dt, 3, s, [Store(0, p), Store(2, ax)])


def fused_asgd(params, grads, axs, mus, etas, state_steps, *, lambd, lr, t0, alpha, weight_decay, maximize):
    """ASGD's update, one kernel call per parameter; ``False`` (nothing changed) outside the kernel's domain.

    Each parameter's ``eta`` and ``mu`` (0-d tensors) are read as this step's values, then set for the next step
    as torch's single-tensor loop sets them (the Python value rounded into the tensor's dtype).
    """
    if not _host_scalars(mus, etas) or not _in_domain("asgd", params, grads, axs):
        return False
    lambd, lr, t0, alpha, weight_decay = map(_scalar, (lambd, lr, t0, alpha, weight_decay))
    dtype = params[0]._data.dtype
    last = scalars = ck = None
    default = get_default_dtype().np.type
    for i, param_t in enumerate(params):
        count_up(state_steps[i])
        eta_t, mu_t = etas[i], mus[i]
        eta, mu = float(eta_t._data), float(mu_t._data)
        if (eta, mu) != last:
            last = (eta, mu)
            key = ("asgd", FLOAT_IR_DTYPES[dtype], maximize, weight_decay != 0, mu != 1)
            ck = _kernel(key, lambda key=key: _asgd_ir(*key[1:]))
            scalars = np.array([weight_decay, 1 - lambd * eta, -eta, mu], dtype=dtype)
        _launch(ck, [param_t._data, grads[i]._data, axs[i]._data], scalars, len(_ASGD_SCALARS))
        _touched(param_t, axs[i])
        step = float(state_steps[i]._data)
        # as torch.as_tensor(value) (the default dtype) copied in: the state may be float64 after a state dict load
        eta_t._data[()] = default(lr / ((1 + lambd * lr * step) ** alpha))
        mu_t._data[()] = default(1 / max(1, step - t0))
        _touched(eta_t, mu_t)
    return True
