"""``fused=True`` optimizer updates: one generated LLVM kernel per (update rule, dtype, flags) that reads each
element of the parameter, its gradient and its state once and writes the new values back in the same pass.

The unfused update (`_kernels.ARRAY_OPS`) makes one NumPy pass per primitive (Adam: ``lerp_``, ``mul_``,
``addcmul_``, ``sqrt``, ``div_``, ``add_``, ``addcdiv_``; nine passes over memory and three temporaries); the fused
kernel makes one. The arithmetic follows PyTorch's CPU fused kernels (``FusedAdamKernel.cpp``,
``FusedSGDKernel.cpp``): scalars rounded to the parameter's dtype, the ``lerp`` branch on the size of its weight,
AMSGrad's maximum, decoupled (AdamW) or L2 weight decay, ``maximize``, and AMP's ``grad_scale`` (the gradient is
unscaled in place) / ``found_inf`` (the step is skipped and Adam's count rolled back).

Every hyperparameter is read from a small scalar array at run time (the learning rate of a scheduler, the bias
corrections of each step), so a kernel compiles once per flag set and dtype, not once per step. Structural flags
(AMSGrad, maximize, weight decay on/off, Nesterov, first momentum step) select the kernel. The kernel is compiled for
a 1-D iteration space and run over each parameter's element range (``kernel(0, numel, *addresses)``, split over
jitorch's threads for large parameters: `native_eager.launch`).

Float32 and float64 CPU tensors that are contiguous take the fused kernel; anything else (half precision, complex,
CUDA, non-contiguous state) returns ``False`` from `fused_adam`/`fused_sgd` so the caller runs the unfused update,
which computes torch's per-op values.

SGD with momentum (``_fused_sgd._sgd_ir("f32", False, False, True, False, False, False)``) emits this IR; the scalar
array holds ``weight_decay, momentum, 1 - dampening, lr, grad_scale``, and buffers 0 and 2 are read and written::

    kernel (1099511627776,) reduce=0
      buf0 f32 strides=(1,) offset=0        param
      buf1 f32 strides=(1,) offset=0        grad
      buf2 f32 strides=(1,) offset=0        momentum_buffer
      buf3 f32 strides=(0,) offset=0        scalars[0] ... buf7: scalars[4]
      ...
      %0 = load buf1
      %1 = load buf5
      %2 = load buf2
      %3 = load buf4
      %4 = mul %2 %3
      %5 = fma %0 %1 %4
      %6 = load buf6
      %7 = neg %6
      %8 = load buf0
      %9 = fma %5 %7 %8
      store buf2 %5
      store buf0 %9

>>> import jitorch
>>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
>>> opt = jitorch.optim.Adam([w], lr=0.1, fused=True)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w
tensor([ 0.9000, -0.9000], requires_grad=True)
"""
from __future__ import annotations

import math
import threading

import numpy as np

from ..codegen.ir import FLOAT_IR_DTYPES, Buffer, Kernel, Store, load, op
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from .._tensor import Tensor
from ..ops.native_eager import launch_arrays
from ._kernels import count_up

__all__ = ["fused_adam", "fused_sgd", "fused_kernel_count"]

# The kernel's nominal length: the loop runs over [0, numel) passed at each call, so one kernel serves every size.
_SPAN = 1 << 40
_GRAIN = 1 << 15  # elements a chunk takes at least, when a large parameter's update is split over threads
_lock = threading.Lock()
_KERNELS: dict[tuple, object] = {}


def fused_kernel_count():
    """How many fused optimizer kernels this process has compiled (one per update rule, dtype and flag set)."""
    return len(_KERNELS)


def _kernel(key, build):
    ck = _KERNELS.get(key)
    if ck is None:
        with _lock:
            ck = _KERNELS.get(key)
            if ck is None:
                ck = _KERNELS[key] = compile_kernel(build(), cache=default_cache())
    return ck


class _Scalars:
    """Names scalar slots: ``s("lr")`` loads slot ``lr`` of the scalar array (buffer ``first + index``)."""

    def __init__(self, names, first, dt):
        self.names, self.first, self.dt = names, first, dt

    def __call__(self, name):
        return load(self.first + self.names.index(name), self.dt)

    def buffers(self):
        return [Buffer(self.dt, (0,), offset=i) for i in range(len(self.names))]


# -- Adam / AdamW ---------------------------------------------------------------------------------------------------
_ADAM_SCALARS = ("w1", "w1_minus_1", "beta2", "one_minus_beta2", "weight_decay", "decay", "step_size",
                 "bc2_sqrt", "eps", "grad_scale")
# Buffers: 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq (a placeholder without AMSGrad), 5.. scalars.

# torch's fused Adam (``FusedAdamKernel.cpp``) runs its AVX-512 loop over 64-byte vectors, then a scalar loop over
# the rest that the compiler vectorizes by halves (32 bytes) and finishes one element at a time; contracted to
# fused multiply-adds differently there, the last ``(n % lanes) % (lanes / 2)`` elements round the second moment as
# ``fma(v, beta2, (1 - beta2) * g * g)`` where the rest (and every element of the per-op update) rounds
# ``fma((1 - beta2) * g, g, v * beta2)``.
_TORCH_VECTOR_BYTES = 64


def _scalar_tail(n, itemsize):
    """How many of a parameter's last elements torch's fused Adam updates in its scalar loop."""
    lanes = _TORCH_VECTOR_BYTES // itemsize
    return n % lanes % (lanes // 2)


def _grad_terms(s, p, g, maximize, wd_mode):
    """The gradient and parameter after ``maximize`` and weight decay (L2 into the gradient, or decoupled)."""
    if maximize:
        g = op("neg", g)
    if wd_mode == "decoupled":
        p = op("mul", p, s("decay"))
    elif wd_mode == "l2":
        g = op("fma", p, s("weight_decay"), g)  # ``g.add(p, alpha=weight_decay)``: ATen's multiply-add
    return p, g


def _wd_mode(weight_decay, decoupled):
    """The kernel's weight decay kind: ``None`` without decay, else ``"decoupled"`` (AdamW's) or ``"l2"``."""
    return None if weight_decay == 0 else "decoupled" if decoupled else "l2"


def _lerp(s, m, g, small_weight):
    """``m.lerp_(g, w1)`` as ATen's vectorized lerp: one multiply-add from the end nearer the weight."""
    diff = op("sub", g, m)
    if small_weight:
        return op("fma", s("w1"), diff, m)
    return op("fma", s("w1_minus_1"), diff, g)


def _lerp_scalars(beta1, dtype):
    """`_lerp`'s ``(w1, w1 - 1, small weight)``: the weight ``1 - beta1`` rounded to the dtype, as ATen's lerp
    takes it, and ``w1 - 1`` (exact)."""
    w1 = float(dtype.type(1.0 - beta1))
    return w1, w1 - 1.0, abs(w1) < 0.5


def _second_moment(s, v, g, scalar_tail=False):
    """``v.mul_(beta2).addcmul_(g, g, value=1 - beta2)``: ATen's ``fmadd(value * g, g, v)`` (``scalar_tail``: the
    contraction of torch's fused scalar loop)."""
    scaled_square = op("mul", op("mul", s("one_minus_beta2"), g), g)
    if scalar_tail:
        return op("fma", v, s("beta2"), scaled_square)
    return op("fma", op("mul", s("one_minus_beta2"), g), g, op("mul", v, s("beta2")))


def _build(dt, n_arrays, scalars, stores):
    """The kernel over ``n_arrays`` element-wise arrays followed by the ``scalars``' slots."""
    buffers = [Buffer(dt, (1,)) for _ in range(n_arrays)] + scalars.buffers()
    return Kernel((_SPAN,), tuple(buffers), tuple(stores))


def _adam_ir(dt, amsgrad, maximize, wd_mode, small_weight, scaled, scalar_tail=False):
    """The Adam update over buffers param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq and the scalars."""
    s = _Scalars(_ADAM_SCALARS, 5, dt)
    p, g = load(0, dt), load(1, dt)
    stores = []
    if scaled:  # AMP: the gradient is unscaled in place, as PyTorch's fused kernel does
        g = op("div", g, s("grad_scale"))
        stores.append(Store(1, g))
    p, g = _grad_terms(s, p, g, maximize, wd_mode)
    m = _lerp(s, load(2, dt), g, small_weight)
    v = _second_moment(s, load(3, dt), g, scalar_tail)
    second = v
    if amsgrad:
        second = op("max", load(4, dt), v)
        stores.append(Store(4, second))
    denom = op("add", op("div", op("sqrt", second), s("bc2_sqrt")), s("eps"))
    p = op("sub", p, op("div", op("mul", s("step_size"), m), denom))
    stores += [Store(2, m), Store(3, v), Store(0, p)]
    return _build(dt, 5, s, stores)


def _usable(*tensor_lists):
    """Whether every tensor is a contiguous float32/float64 CPU array of one dtype (the fused kernel's domain)."""
    dtype = None
    for tensors in tensor_lists:
        for t in tensors:
            a = t._data
            if type(a) is not np.ndarray or a.dtype not in FLOAT_IR_DTYPES or not a.flags.c_contiguous:
                return False
            if dtype is None:
                dtype = a.dtype
            elif a.dtype != dtype:
                return False
    return True


def _check_shapes(name, params, *aligned):
    """Each parameter's state and gradient must have its shape: the kernel walks the parameter's elements through
    every pointer, so a state loaded from another model (``load_state_dict``) would be read and written out of
    bounds. torch fails there too, on the mismatched broadcast."""
    for i, p in enumerate(params):
        for tensors in aligned:
            t = tensors[i]
            if t is not None and t._data.shape != p._data.shape:
                raise RuntimeError(f"{name}: parameter {i} has shape {list(p._data.shape)} but its gradient or "
                                   f"optimizer state has shape {list(t._data.shape)}; was the optimizer's state dict "
                                   "loaded from another model?")


def _scalar(v):
    return float(v.item()) if isinstance(v, Tensor) else float(v)


def _amp(grad_scale, found_inf):
    """``(skip, scale)`` for AMP's ``grad_scale``/``found_inf`` tensors (the gradient is divided by the scale, as
    torch's fused kernels do: a multiply by its reciprocal differs in the last bit)."""
    skip = found_inf is not None and _scalar(found_inf) == 1.0
    return skip, None if grad_scale is None else _scalar(grad_scale)


def launch_split(ck, tail_ck, arrays, scalar_arrays, tail):
    """``ck`` over the parameters' elements but the last ``tail``, ``tail_ck`` over those (torch's fused kernels
    round their scalar loop's elements their own way)."""
    n = arrays[0].size
    if n > tail:
        launch_arrays(ck, [*arrays, *scalar_arrays], n - tail, _GRAIN, extent=n - tail)
    if tail:
        launch_arrays(tail_ck, [*(a.reshape(-1)[n - tail:] for a in arrays), *scalar_arrays], tail, _GRAIN,
                      extent=tail)


def per_op_lr_terms(lr, bias_correction1, weight_decay):
    """``(lr / bias_correction1, 1 - lr * weight_decay)`` as torch's per-op Adam computes them: with a tensor ``lr``
    in its dtype (tensor ops; the step size then reaches ``addcdiv_`` as that rounded value), else in double."""
    data = lr._data if isinstance(lr, Tensor) else None
    if type(data) is np.ndarray and data.dtype.kind == "f":
        kind = data.dtype.type
        rate = kind(data.reshape(-1)[0])
        return float(rate / kind(bias_correction1)), float(kind(1) - rate * kind(weight_decay))
    lr = _scalar(lr)
    return lr / bias_correction1, 1.0 - lr * weight_decay


def fused_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, amsgrad, beta1, beta2, lr,
               weight_decay, eps, maximize, decoupled_weight_decay, grad_scale=None, found_inf=None, as_fused=True):
    """Adam/AdamW with one fused kernel call per parameter; ``False`` (nothing changed) when a tensor is outside
    the kernel's domain (the caller then runs the unfused update).

    ``as_fused``: torch's ``fused=True`` values (its scalar loop's contraction at the end of each parameter, the
    bias correction's root by ``std::sqrt``); else those of its per-op (default and foreach) update.
    Advances ``state_steps`` (PyTorch's fused Adam keeps them as float32 tensors) before the update, and rolls them
    back when ``found_inf`` is set, as ``torch._fused_adam_`` does.
    """
    lists = [params, grads, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if amsgrad else [])
    if not _usable(*lists):
        return False
    _check_shapes("adam", *lists)
    lr_given = lr
    beta1, beta2, lr, weight_decay, eps = map(_scalar, (beta1, beta2, lr, weight_decay, eps))
    skip, scale = _amp(grad_scale, found_inf)
    dtype = params[0]._data.dtype if params else None
    w1, w1_minus_1, small = _lerp_scalars(beta1, dtype) if params else (0.0, -1.0, True)
    wd_mode = _wd_mode(weight_decay, decoupled_weight_decay)
    key = ("adam", FLOAT_IR_DTYPES.get(dtype), amsgrad, maximize, wd_mode, small, grad_scale is not None)
    ck = _kernel(key, lambda: _adam_ir(key[1], *key[2:])) if params else None
    tail_ck = _kernel(key + (True,), lambda: _adam_ir(key[1], *key[2:], True)) if params and as_fused else None
    last_step = scalars = None
    for i, param_t in enumerate(params):
        step_t = state_steps[i]
        count_up(step_t)
        if skip:
            step_t._data -= 1
            continue
        step = float(step_t._data)
        if step != last_step:  # the parameters of a group usually share their count: one scalar array for all
            last_step = step
            bc1, bc2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
            if as_fused:  # (torch's fused kernel reads a tensor lr as a double)
                step_size, decay, bc2_sqrt = lr / bc1, 1.0 - lr * weight_decay, math.sqrt(bc2)
            else:
                (step_size, decay), bc2_sqrt = per_op_lr_terms(lr_given, bc1, weight_decay), bc2 ** 0.5
            scalars = np.array([w1, w1_minus_1, beta2, 1.0 - beta2, weight_decay, decay, step_size, bc2_sqrt, eps,
                                1.0 if scale is None else scale], dtype=dtype)
        arrays = [param_t._data, grads[i]._data, exp_avgs[i]._data, exp_avg_sqs[i]._data,
                  (max_exp_avg_sqs[i] if amsgrad else exp_avgs[i])._data]
        launch_split(ck, tail_ck, arrays, (scalars,) * len(_ADAM_SCALARS),
                     _scalar_tail(arrays[0].size, dtype.itemsize) if as_fused else 0)
        param_t._bump_version()
        exp_avgs[i]._bump_version()
        exp_avg_sqs[i]._bump_version()
        if amsgrad:
            max_exp_avg_sqs[i]._bump_version()
        if grad_scale is not None:
            grads[i]._bump_version()
    return True


# -- jitorch.compile(opt.step) --------------------------------------------------------------------------------------
_FUSABLE = ("Adam", "AdamW", "SGD")


class CompiledOptimizerStep:
    """What ``jitorch.compile(opt.step)`` returns: the step with every eligible group updated by the fused kernels.

    An optimizer's update writes the parameters' arrays directly, which no traced graph would repeat, so instead of
    tracing it the step runs as written with ``fused=True`` for the parameter groups of Adam, AdamW and SGD whose
    parameters are float32/float64 CPU tensors and that are neither ``differentiable`` nor ``foreach=True`` (one
    pass per parameter instead of one per arithmetic op, as torch.compile's generated optimizer kernels). Other
    optimizers and groups run their usual step. The groups' own ``fused`` settings are restored after every call.

    >>> import jitorch
    >>> w = jitorch.tensor([1.0, -1.0], requires_grad=True)
    >>> opt = jitorch.optim.SGD([w], lr=0.1)
    >>> step = jitorch.compile(opt.step)
    >>> (w * w).sum().backward()
    >>> step()
    >>> w, opt.param_groups[0]["fused"]
    (tensor([ 0.8000, -0.8000], requires_grad=True), None)
    """

    def __init__(self, step):
        self.__wrapped__ = self._step = step
        self.optimizer = step.__self__
        for attr in ("__name__", "__qualname__", "__doc__"):
            setattr(self, attr, getattr(step, attr, None))

    def _eligible(self, group):
        if type(self.optimizer).__name__ not in _FUSABLE or group.get("fused") or group.get("differentiable") \
                or group.get("foreach") or "fused" not in group:
            return False
        return all(type(p._data) is np.ndarray and p._data.dtype in FLOAT_IR_DTYPES for p in group["params"])

    def __call__(self, *args, **kwargs):
        switched = [g for g in self.optimizer.param_groups if self._eligible(g)]
        for group in switched:
            group["fused"] = True
        try:
            return self._step(*args, **kwargs)
        finally:
            for group in switched:
                group["fused"] = None


from ._fused_sgd import fused_sgd  # noqa: E402 - split for size; re-exported here
