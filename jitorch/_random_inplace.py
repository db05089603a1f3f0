"""In-place samplers of ``Tensor``: ``uniform_``, ``normal_``, ``random_``, ``bernoulli_``, ``exponential_``,
``log_normal_``, ``cauchy_`` and ``geometric_``, with PyTorch's argument checks.

Each draws from the generator of the tensor's device (``jitorch._random``) and writes the draw with ``copy_``, so a
tensor of a graph gets torch's zero gradient for the overwritten value, and a leaf that requires grad is refused
outside ``no_grad``. The checks run before the draw, in ATen's order, with its exception types: a scalar argument out
of range is a ``RuntimeError``; a dtype without a kernel a ``NotImplementedError`` naming ATen's kernel (``"normal_
kernel_cpu" not implemented for 'Long'``), except the continuous distributions ATen guards by name (exponential,
Cauchy: ``RuntimeError``). Some of ATen's kernels skip an empty tensor before looking at its dtype; so do these.

``random_`` draws ATen's ranges: ``random_()`` is ``[0, 2**digits]`` for a floating dtype (every integer it holds
exactly: 2048 for float16, 2**53 for float64) and ``[0, max]`` for an integer one, ``random_(to)`` is ``[0, to)``,
``random_(from, None)`` is ``[from, that upper end]`` and ``random_(-2**63, None)`` every int64.

>>> import jitorch
>>> float(jitorch.empty(20000, dtype=jitorch.bfloat16).random_().max()) <= 256
True
>>> jitorch.empty(3).cauchy_(0.0, -1.0)
Traceback (most recent call last):
RuntimeError: cauchy_ expects sigma > 0.0, but found sigma=-1
"""
from __future__ import annotations

import math
import operator
import warnings

import numpy as np

from . import _random
from ._dispatch import TORCH_TYPE_NAMES
from ._tensor import Tensor
from .autograd.grad_mode import GradState

__all__ = ["fmt_number", "cpp_type_name", "not_implemented"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# std::numeric_limits<T>::digits: the bits of the significand, so every integer up to 2**digits is exact.
_DIGITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
# c10's TypeMeta names, which ATen's bounds messages print ("to - 1 is out of bounds for unsigned char").
_CPP_NAMES = {"bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short int", "int32": "int",
              "int64": "long int", "float16": "c10::Half", "bfloat16": "c10::BFloat16", "float32": "float",
              "float64": "double", "complex64": "c10::complex<float>", "complex128": "c10::complex<double>"}
_UNSET = object()


def fmt_number(x):
    """A number as C++'s ``operator<<`` prints it in ATen's messages: ``-1``, ``1.5``, ``3e+38``, ``nan``."""
    return str(x) if isinstance(x, int) else "%g" % x


def cpp_type_name(dtype):
    return _CPP_NAMES[dtype.name]


def not_implemented(kernel, dtype):
    return NotImplementedError(f'"{kernel}" not implemented for \'{TORCH_TYPE_NAMES[dtype.name]}\'')


def _continuous_only(t, kernel):
    if not t.dtype.is_floating_point:
        raise not_implemented(kernel, t.dtype)


def _refuses_grad_leaves(fn):
    """Torch's autograd check, which runs before any of the sampler's own: the write is recorded, so a leaf that
    requires grad cannot take it outside ``no_grad``."""
    def sampler(self, *args, **kwargs):
        if GradState.enabled and self._requires_grad and self.grad_fn is None:
            raise RuntimeError(f"{fn.__name__[1:]}: a leaf Variable that requires grad is being used in an in-place "
                               f"operation.")
        return fn(self, *args, **kwargs)
    sampler.__name__, sampler.__qualname__, sampler.__doc__ = fn.__name__[1:], fn.__name__[1:], fn.__doc__
    return sampler


def _gen(self, generator):
    """(the generator drawing for ``self``, where it draws: ``_random._rng``, looked up now as captures patch it)."""
    gen = _random._generator_for(generator, self.device)
    return gen, _random._rng(gen)


def _real_draw(self, draw):
    """``draw(shape)`` for a real tensor; for a complex one the real and imaginary parts are two independent
    draws of the real dtype, as ATen samples ``view_as_real(self)``."""
    shape = self._data.shape
    if not self.dtype.is_complex:
        return _in_memory_order(self, draw, shape)
    parts = _in_memory_order(self, draw, shape + (2,))
    return parts[..., 0] + 1j * parts[..., 1]


def _through_float(self, values):
    """A float64 CPU draw for a float16/bfloat16 tensor rounded to float32 first: c10 converts a double sample to a
    half type through float (the value, rounded twice, can differ from a direct rounding)."""
    if self.dtype.name in ("float16", "bfloat16") and getattr(values, "dtype", None) == np.float64:
        return values.astype(np.float32)
    return values


def _in_memory_order(self, draw, shape):
    """``draw(shape)``, its numbers laid out in ``self``'s memory order: ATen's serial kernels fill a strided tensor
    in the order TensorIterator walks it, the largest stride outermost (a transposed view takes its draws as the
    untransposed one)."""
    if len(shape) < 2 or self.is_contiguous():
        return draw(shape)
    strides = tuple(self.stride()) + ((1,) if len(shape) > self.dim() else ())  # complex: the parts innermost
    order = sorted(range(len(shape)), key=lambda d: -abs(strides[d]) if shape[d] != 1 else 0)
    values = draw(tuple(shape[d] for d in order))
    return values.transpose(np.argsort(order))


def _cpu_draw_dtype(real, half=False):
    """The NumPy dtype a CPU draw for a tensor of the real dtype ``real`` asks the stream for: float64 draws 53-bit
    uniforms, the others float32 ones (torch's opmath); ``half`` keeps float16/bfloat16 (``normal_`` draws them
    a block at a time)."""
    if real.name == "float64":
        return np.float64
    return real.np if half and real.name in ("float16", "bfloat16") else np.float32


# -- continuous distributions -----------------------------------------------------------------------------------
def _uniform_(self, from_=0.0, to=1.0, *, generator=None):
    from_, to = float(from_), float(to)
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise not_implemented("check_uniform_bounds", self.dtype)
    real = self.dtype.to_real() if self.dtype.is_complex else self.dtype
    from . import _dtype

    info = _dtype.finfo(real)
    for value, what in ((from_, "from"), (to, "to")):
        if not info.min <= value <= info.max:  # NaN fails too
            raise RuntimeError(f"uniform_: {what} is out of bounds for {cpp_type_name(real)}")
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={fmt_number(from_)} > "
                           f"to={fmt_number(to)}")
    if to - from_ > info.max:
        raise RuntimeError(f"uniform_ expects to-from <= std::numeric_limits<{TORCH_TYPE_NAMES[real.name]}>::max(), "
                           f"but found to={fmt_number(to)} and from={fmt_number(from_)} which result in to-from to "
                           f"exceed the limit")
    gen, rng = _gen(self, generator)
    kw = _random._draw_kw(gen, self) if gen._on_device else {"dtype": _cpu_draw_dtype(real)}
    return _random._fill_from(self, _real_draw(self, lambda s: _random.half_uniform(
        rng.uniform(from_, to, s, **kw), real.np, from_, to)))


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {fmt_number(std)}")
    if self.numel() == 0:
        return self
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise not_implemented("normal_kernel_cpu", self.dtype)
    if self.dtype.is_complex:
        std = std / math.sqrt(2)  # each part gets half the variance
    gen, rng = _gen(self, generator)
    if gen._on_device:
        kw = _random._draw_kw(gen, self)
    else:  # ATen's path depends on the dtype and on whether the tensor is contiguous
        real = self.dtype.to_real() if self.dtype.is_complex else self.dtype
        kw = {"dtype": _cpu_draw_dtype(real, half=True), "contiguous": self.is_contiguous()}
    return _random._fill_from(self, _real_draw(self, lambda s: rng.normal(mean, std, s, **kw)))


def _exponential_(self, lambd=1.0, *, generator=None):
    if not lambd > 0.0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={fmt_number(lambd)}")
    if self.numel() == 0:
        return self
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"exponential_: Exponential distribution is a continuous probability distribution. dtype "
                           f"must be a floating point but you specified {TORCH_TYPE_NAMES[self.dtype.name]}")
    gen, rng = _gen(self, generator)
    kw = _random._draw_kw(gen, self)
    draw = _in_memory_order(self, lambda s: rng.exponential(1.0 / lambd, s, **kw), self._data.shape)
    return _random._fill_from(self, _through_float(self, draw))


def _log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    if not std > 0.0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={fmt_number(std)}")
    if self.numel() == 0:
        return self
    _continuous_only(self, "log_normal_cpu")
    gen, rng = _gen(self, generator)
    kw = _random._draw_kw(gen, self)
    draw = _in_memory_order(self, lambda s: rng.lognormal(mean, std, s, **kw), self._data.shape)
    return _random._fill_from(self, _through_float(self, draw))


def _cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    if not sigma > 0.0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={fmt_number(sigma)}")
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"cauchy_: Cauchy distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {cpp_type_name(self.dtype)}")
    gen, rng = _gen(self, generator)
    if gen._on_device:
        draw = median + sigma * rng.standard_cauchy(self._data.shape, **_random._draw_kw(gen, self))
    else:  # torch's stream: ATen's fused multiply-add
        draw = _in_memory_order(self, lambda s: rng.cauchy(median, sigma, s), self._data.shape)
    return _random._fill_from(self, _through_float(self, draw))


# -- discrete distributions -------------------------------------------------------------------------------------
def _geometric_(self, p, *, generator=None):
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={fmt_number(p)}")
    if self.numel() == 0:
        return self
    if self.dtype.is_complex or self.dtype.name == "bool":
        raise not_implemented("geometric_cpu", self.dtype)
    rng = _gen(self, generator)[1]
    draw = _in_memory_order(self, lambda s: rng.geometric(p, s), self._data.shape)
    return _random._fill_from(self, _through_float(self, draw))


def _bernoulli_(self, p=0.5, *, generator=None):
    gen = _random._generator_for(generator, self.device)
    if isinstance(p, Tensor):
        if self.dtype.is_complex:
            raise not_implemented("bernoulli_tensor_cpu_self_", self.dtype)
        if not p.dtype.is_floating_point:
            raise not_implemented("bernoulli_tensor_cpu_p_", p.dtype)
        p = p.detach().to(self.device).expand(self.shape)  # torch's expand error for a shape that does not fit
        if not gen._on_device:  # a device range check would read the probabilities on the host (see _random_device)
            probs = p._host()
            if probs.size and not bool(((probs >= 0) & (probs <= 1)).all()):
                raise RuntimeError("bernoulli_: Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
        probs = p._data
    else:
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={fmt_number(p)}")
        if self.dtype.is_complex:
            raise not_implemented("bernoulli_scalar_cpu_", self.dtype)
        probs = float(p)
    rng = _random._rng(gen)
    if gen._on_device:
        draw = rng.bernoulli(probs, self._data.shape, _random._draw_kw(gen, self)["dtype"])
    else:  # ATen: float64 uniforms against a number or float64 probabilities, float32 ones against the others
        wide = isinstance(probs, float) or probs.dtype == np.float64
        draw = _in_memory_order(self, lambda s: rng.random(s, dtype=np.float64 if wide else np.float32),
                                self._data.shape) < probs
    return _random._fill_from(self, draw)


# -- random_: integers over ATen's ranges -----------------------------------------------------------------------
def _int_arg(value, what):
    if isinstance(value, (bool, float)) or not hasattr(value, "__index__"):
        raise TypeError(f"random_(): argument '{what}' must be int, not {type(value).__name__}")
    value = operator.index(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"random_: {what}={value} does not fit in int64 (Overflow when unpacking long long)")
    return value


def _through(value, dtype):
    """``static_cast<int64_t>(static_cast<scalar_t>(value))`` of ATen: ``value`` rounded to the float dtype (ties
    to even; float16 and bfloat16 through float32, as c10 converts) and back; overflow gives INT64_MIN (x86)."""
    steps = (24, _DIGITS[dtype.name]) if dtype.name in ("float16", "bfloat16") else (_DIGITS[dtype.name],)
    for digits in steps:
        mag, shift = abs(value), abs(value).bit_length() - digits
        if shift > 0:
            q, r = divmod(mag, 1 << shift)
            q += r > (1 << (shift - 1)) or (r == (1 << (shift - 1)) and q & 1)
            value = (q << shift) * (1 if value >= 0 else -1)
    from . import _dtype

    if abs(value) > _dtype.finfo(dtype).max or not _INT64_MIN <= value <= _INT64_MAX:
        return _INT64_MIN
    return value


def _update_from(from_, dtype):
    # ATen's update_from: a 'from' the dtype rounds down to is moved up to the next number the dtype holds.
    plus1 = _through(from_ + 1, dtype)
    if plus1 < from_:
        from_ = plus1 + (1 << (abs(from_ + 1).bit_length() - 1 - _DIGITS[dtype.name] + 1))
    return from_


def _update_to(to, dtype):
    minus1 = _through(to - 1, dtype)
    if minus1 >= to:
        to = minus1 - (1 << (abs(to - 1).bit_length() - 1 - _DIGITS[dtype.name] + 1))
    return to


_BOUNDS: dict = {}  # dtype -> (lo, hi, digits): finfo/iinfo cost more than a small draw


def _bounds(dtype):
    from . import _dtype

    if dtype.is_floating_point:
        info = _dtype.finfo(dtype)
        return info.min, info.max, _DIGITS[dtype.name]
    if dtype.name == "bool":
        return 0, 1, None
    if not dtype.is_complex:
        info = _dtype.iinfo(dtype)
        return info.min, info.max, None
    raise RuntimeError("random_: check_random_bounds handles only integral, floating-point and boolean types")


def _check_in_range(dtype, from_, to_inc):
    """ATen's check_from_to_in_range: both ends inside the dtype; for floats, a warning past 2**digits."""
    bounds = _BOUNDS.get(dtype)
    if bounds is None:
        bounds = _BOUNDS[dtype] = _bounds(dtype)
    lo, hi, digits = bounds
    for value, what in ((from_, "from"), (to_inc, "to - 1")):
        if not lo <= value <= hi:
            raise RuntimeError(f"random_: {what} is out of bounds for {cpp_type_name(dtype)}")
    if dtype.is_floating_point:
        for value, what in ((from_, "from"), (to_inc, "to - 1")):
            if not -(1 << digits) <= value <= 1 << digits:
                warnings.warn(f"random_: {what} is out of bounds [-(2^{digits}), 2^{digits}]. Due to precision "
                              f"limitations {cpp_type_name(dtype)} can support discrete uniform distribution only "
                              f"within this range. This warning will become an error in version 1.7 release, please "
                              f"fix the code in advance", UserWarning, stacklevel=4)


def _top(dtype):
    """The upper end of ``random_()``/``random_(from, None)``: 2**digits for floats, the largest value otherwise."""
    from . import _dtype

    if dtype.is_floating_point:
        return 1 << _DIGITS[dtype.name]
    return 1 if dtype.name == "bool" else int(_dtype.iinfo(dtype).max)


def _random_bounds(self, from_, to):
    """The inclusive ``(low, high)`` ``random_(from_, to)`` draws (``to`` None: up to the dtype's top), checked
    as ATen's random_from_to_impl; None when the tensor is empty and nothing is drawn."""
    dt = self.dtype
    if to is not None:
        if from_ >= to:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to}")
        if dt.is_floating_point:
            from_, to = _update_from(from_, dt), _update_to(to, dt)
            if from_ >= to:
                raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than 'to' casted to dtype, but "
                                   f"got from={from_} >= to={to}")
        _check_in_range(dt, from_, to - 1)
        return (from_, to - 1) if self.numel() else None
    if from_ != _INT64_MIN:
        if dt.is_complex:
            raise RuntimeError("random_: random_from_to_impl handles only integral, floating-point and boolean types")
        top = _top(dt)
        if dt.is_floating_point:
            from_ = _update_from(from_, dt)
            if from_ >= top:
                raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' "
                                   f"casted to dtype, but got from={from_} > to_inc={top}")
        _check_in_range(dt, from_, top)
        return (from_, top) if self.numel() else None
    if not self.numel():
        return None
    if dt.name in ("int64", "float32", "float64", "bfloat16"):
        return _INT64_MIN, _INT64_MAX
    if dt.name == "float16" or dt.name == "bool" or dt.is_complex:
        raise not_implemented("random_full_64_bits_range_kernel_cpu", dt)
    raise RuntimeError("random_: random_full_64_bits_range_kernel_cpu handles only int64, double, float and bfloat16")


def _random_(self, *args, to=_UNSET, generator=None):
    """``random_()``, ``random_(to)``, ``random_(from, to)`` (``to=None``: up to the dtype's top), as torch."""
    if len(args) > 2 or (len(args) == 2 and to is not _UNSET):
        raise TypeError(f"random_() takes at most 2 positional arguments (from, to), got {len(args)} and to={to}")
    if len(args) == 2:
        to = args[1]
    if not args and to is _UNSET:
        if not self.numel():
            return self
        if self.dtype.is_complex:
            raise not_implemented("random_kernel_cpu", self.dtype)
        bounds = (0, _top(self.dtype))
    else:
        if not args:
            from_, to = 0, to
            if to is None:
                raise TypeError("random_(): 'to' may be None only with a 'from': random_(from, None)")
        elif to is _UNSET:
            from_, to = 0, args[0]
        else:
            from_ = args[0]
        from_ = _int_arg(from_, "from")
        to = None if to is None else _int_arg(to, "to")
        bounds = _random_bounds(self, from_, to)
        if bounds is None:
            return self
    rng = _gen(self, generator)[1]
    draw = _in_memory_order(self, lambda s: rng.integers(bounds[0], bounds[1], s, endpoint=True), self._data.shape)
    return _random._fill_from(self, draw)


for _fn in (_uniform_, _normal_, _random_, _bernoulli_, _exponential_, _log_normal_, _cauchy_, _geometric_):
    setattr(Tensor, _fn.__name__[1:], _refuses_grad_leaves(_fn))
