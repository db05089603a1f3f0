"""``make_tensor``: a random tensor of a given shape and dtype for tests (``torch.testing.make_tensor``).

Values follow torch's rules for ranges (floats and ints in ``[-9, 9]`` by default, unsigned from 0, ``low``/``high``
clamped to the dtype) but come from jitorch's generator, so they differ from torch's numbers.

>>> import jitorch
>>> from jitorch.testing import make_tensor
>>> t = make_tensor(2, 3, dtype=jitorch.float32, device="cpu", low=-1, high=1)
>>> t.shape, t.dtype, bool((t >= -1).all() and (t < 1).all())
(jitorch.Size([2, 3]), jitorch.float32, True)
"""
from __future__ import annotations

import math

__all__ = ["make_tensor"]


def make_tensor(*shape, dtype, device, low=None, high=None, requires_grad=False, noncontiguous=False,
                exclude_zero=False, memory_format=None):
    import jitorch
    from .. import _dtype as d

    if len(shape) == 1 and isinstance(shape[0], (list, tuple, jitorch.Size)):
        shape = tuple(shape[0])
    if low is not None and high is not None and low > high:
        raise ValueError(f"`low` must be less than or equal to `high`, but got {low} > {high}")
    if (low is not None and math.isnan(low)) or (high is not None and math.isnan(high)):
        raise ValueError(f"`low` and `high` cannot be NaN, but got low={low} and high={high}")
    if dtype == d.bool:
        result = jitorch.randint(0, 2, shape, device=device).to(d.bool)
    elif dtype in (d.uint8, d.int8, d.int16, d.int32, d.int64):
        info = jitorch.iinfo(dtype)
        lo = max(info.min, -9 if low is None else math.ceil(low))
        hi = min(info.max, 10 if high is None else math.ceil(high) if high != low else high + 1)
        lo = max(lo, 0) if dtype == d.uint8 else lo
        result = jitorch.randint(lo, hi, shape, device=device, dtype=dtype)
    else:
        lo = -9.0 if low is None else float(low)
        hi = 9.0 if high is None else float(high)
        real = d.float32 if dtype == d.complex64 else d.float64 if dtype == d.complex128 else dtype
        result = jitorch.rand(shape, device=device, dtype=d.float64) * (hi - lo) + lo
        if dtype in (d.complex64, d.complex128):
            imag = jitorch.rand(shape, device=device, dtype=d.float64) * (hi - lo) + lo
            result = jitorch.complex(result.to(real), imag.to(real))
        else:
            result = result.to(dtype)
    if exclude_zero:
        # torch replaces zeros by the smallest positive step of the dtype (1 for integers).
        tiny = 1 if not (result.is_floating_point() or result.is_complex()) else jitorch.finfo(
            d.float32 if dtype == d.complex64 else d.float64 if dtype == d.complex128 else dtype).tiny
        result = jitorch.where(result == 0, jitorch.full_like(result, tiny), result)
    if noncontiguous and result.numel() > 1:
        doubled = jitorch.stack([result, result], -1).reshape(*result.shape[:-1], -1)
        result = doubled[..., ::2]
    if requires_grad:
        result.requires_grad_(True)
    return result
