"""``nn.init``: in-place parameter initializers (uniform, normal, Xavier/Glorot, Kaiming/He, orthogonal, ...).

Every initializer runs under ``no_grad``, fills the tensor in place and returns it; ``generator=`` selects the
random stream. Fan-in/fan-out follow PyTorch: ``size(1) * receptive field`` and ``size(0) * receptive field``.

>>> import jitorch
>>> from jitorch import nn
>>> w = jitorch.empty(3, 5)
>>> nn.init.calculate_gain("relu") ** 2
2.0000000000000004
>>> bool(nn.init.xavier_uniform_(w).abs().max() <= (6 / 8) ** 0.5)
True
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import _creation, _dtype, linalg
from ..autograd.grad_mode import no_grad

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_",
           "uniform", "normal", "constant", "eye", "dirac", "xavier_uniform", "xavier_normal", "kaiming_uniform",
           "kaiming_normal", "orthogonal", "sparse"]

_LINEAR_FNS = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (``leaky_relu`` takes its negative slope as ``param``)."""
    if nonlinearity in _LINEAR_FNS or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif (not isinstance(param, bool) and isinstance(param, int)) or isinstance(param, float):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive_field_size = 1
    for s in tensor.shape[2:]:
        receptive_field_size *= s
    return tensor.size(1) * receptive_field_size, tensor.size(0) * receptive_field_size


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with samples of U(a, b)."""
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with samples of N(mean, std²)."""
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fill with samples of N(mean, std²) restricted to [a, b] (``a``, ``b`` are absolute bounds).

    The draws are torch's (2.13) rejection samplers, so a seeded stream gives torch's values: when [a, b] holds more
    than 30% of the normal's mass, normal draws with the rejected ones redrawn; otherwise uniform candidates on
    [a, b] accepted with probability pdf / peak, rejected ones redrawn.
    """
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                      "be incorrect.", stacklevel=2)
    if tensor.is_meta:  # nothing to fill, and no draw from the CPU generator (torch's meta kernels draw none)
        return tensor

    def norm_cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    with no_grad():
        if norm_cdf((b - mean) / std) - norm_cdf((a - mean) / std) > 0.3:
            # the bounds rounded to the tensor's dtype, so the rejection test sees representable values
            lo, hi = tensor.new_tensor(a, device="cpu").item(), tensor.new_tensor(b, device="cpu").item()
            result = tensor.normal_(mean, std, generator=generator)
            while True:
                rejected = result.lt(lo) | result.gt(hi)
                if not rejected.any():
                    break
                redrawn = _creation.empty_like(result).normal_(mean, std, generator=generator)
                result = redrawn.where(rejected, result)
            if tensor is not result:
                tensor.copy_(result)
            return tensor
        mode = max(a, min(mean, b))
        log_peak = -0.5 * ((mode - mean) / std) ** 2
        candidates = _creation.empty_like(tensor)
        accept_buf = _creation.empty_like(tensor)
        tensor.uniform_(a, b, generator=generator)
        candidates.copy_(tensor)
        candidates.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)  # log pdf relative to the peak
        pending = accept_buf.uniform_(generator=generator).log_().gt(candidates)
        if not pending.any():
            return tensor
        result = tensor
        while True:
            candidates.uniform_(a, b, generator=generator)
            result = candidates.where(pending, result)
            candidates.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)
            pending = accept_buf.uniform_(generator=generator).log_().gt(candidates).where(pending, pending)
            if not pending.any():
                break
        return tensor.copy_(result)


def constant_(tensor, val):
    """Fill with ``val``."""
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    """Fill with 1."""
    return constant_(tensor, 1.0)


def zeros_(tensor):
    """Fill with 0."""
    with no_grad():
        return tensor.zero_()


def eye_(tensor):
    """Fill a 2-D tensor with the identity matrix (ones on the main diagonal, zeros elsewhere)."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with no_grad():
        return tensor.copy_(_creation.eye(*tensor.shape, dtype=tensor.dtype, device=tensor.device))


def dirac_(tensor, groups=1):
    """Fill a 3-, 4- or 5-D (convolution weight) tensor with the Dirac delta: the convolution is the identity."""
    dims = tensor.dim()
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tensor.shape
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per_group = sizes[0] // groups
    values = np.zeros(tuple(sizes), dtype=np.float64)
    centre = tuple(s // 2 for s in sizes[2:])
    for g in range(groups):
        for d in range(min(out_per_group, sizes[1])):
            values[(g * out_per_group + d, d) + centre] = 1
    with no_grad():
        return tensor.copy_(_creation.from_numpy(values))


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot uniform: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot normal: N(0, std²) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform: U(-bound, bound) with ``bound = gain * sqrt(3 / fan)`` (``fan`` chosen by ``mode``)."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal: N(0, std²) with ``std = gain / sqrt(fan)`` (``fan`` chosen by ``mode``)."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def orthogonal_(tensor, gain=1, generator=None):
    """Fill with a (semi-)orthogonal matrix (trailing dims flattened), scaled by ``gain``."""
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0 or tensor.is_meta:  # a meta tensor: nothing to fill, and torch's meta kernels draw none
        return tensor
    rows = tensor.size(0)
    cols = tensor.numel() // rows
    with no_grad():
        # Drawn in the tensor's dtype, as torch: float32 and float64 normals advance torch's stream differently.
        flat = tensor.new_empty((rows, cols)).normal_(0, 1, generator=generator)
        if flat.dtype not in (_dtype.float32, _dtype.float64, _dtype.complex64, _dtype.complex128):
            flat = flat.double()  # LAPACK has no half-precision QR; round once at the copy below
        if rows < cols:
            flat = flat.t()
        q, r = linalg.qr(flat)
        q = q * r.diagonal().sign()  # makes the decomposition unique, so q is uniformly distributed
        if rows < cols:
            q = q.t()
        return tensor.copy_((q * gain).reshape(tuple(tensor.shape)))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """Fill a 2-D tensor with N(0, std²) samples and zero a ``sparsity`` fraction of each column, as torch does.

    The normals are drawn in the tensor's own dtype, as torch (its stream advances differently for float32 and
    float64 draws), so seeded inits match torch's values. The zeroed rows come from ``randperm`` on ``generator``
    too; torch's ``sparse_`` does not pass it on (its rows always come from the default generator)."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    if tensor.is_meta:  # nothing to fill, and no draw from the CPU generator
        return tensor
    from .._random import randperm

    rows, cols = tensor.shape
    num_zeros = math.ceil(sparsity * rows)
    with no_grad():
        tensor.normal_(0, std, generator=generator)
        for col in range(cols):
            tensor[randperm(rows, generator=generator)[:num_zeros], col] = 0
    return tensor


def _deprecated(fn):
    new_name = fn.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        warnings.warn(f"`nn.init.{old_name}` is now deprecated in favor of `nn.init.{new_name}`.", FutureWarning,
                      stacklevel=2)
        return fn(*args, **kwargs)
    deprecated_init.__doc__ = f"Deprecated alias of ``{new_name}``."
    deprecated_init.__name__ = old_name
    return deprecated_init


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)
