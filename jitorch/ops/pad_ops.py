"""The constant padding row (PyTorch's ``constant_pad_nd``): negative amounts crop, so its gradient is the same row
with the amounts negated.

Without ``fmt`` (convolutions and pooling padding their input internally) the result is the array module's padded
copy. With it (``nn.functional.pad``), the result is laid out as ATen's: a new array in ``fmt`` (the caller passes the
input's suggested memory format) whose borders are filled and whose interior is the input, copied in once; a pad that
only crops is a ``preserve_format`` clone of the cropped input.

>>> import jitorch
>>> from jitorch._dispatch import apply
>>> x = jitorch.ones(1, 2, 1, 2).to(memory_format=jitorch.channels_last)
>>> y = apply(CONSTANT_PAD, x, pads=((0, 0), (0, 0), (1, 0), (0, 1)), value=0.0, fmt=jitorch.channels_last)
>>> y[0, 0], y.stride()
(tensor([[0., 0., 0.],
        [1., 1., 0.]]), (12, 1, 6, 2))
"""
from __future__ import annotations

from .._memory_format import empty_in, preserve_copy, suggested_format
from .table import Opaque, defop

__all__ = ["CONSTANT_PAD"]


def _constant_pad_kernel(xp, x, pads, value, fmt=None):
    x = x[tuple(slice(max(-lo, 0), n - max(-hi, 0)) for n, (lo, hi) in zip(x.shape, pads))]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    if fmt is None:
        return xp.pad(x, widths, constant_values=value)
    if not any(lo or hi for lo, hi in widths):
        return preserve_copy(xp, x)
    out = empty_in(xp, tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, widths)), x.dtype, fmt)
    out[tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape, widths))] = x
    for axis, (lo, hi) in enumerate(widths):
        lead = (slice(None),) * axis
        if lo:
            out[lead + (slice(0, lo),)] = value
        if hi:
            out[lead + (slice(out.shape[axis] - hi, None),)] = value
    return out


def _constant_pad_backward(ctx, g):
    from .._dispatch import apply

    pads = tuple((-lo, -hi) for lo, hi in ctx.attrs["pads"])
    if ctx.attrs.get("fmt") is None:
        return apply(CONSTANT_PAD, g, pads=pads, value=0)
    return apply(CONSTANT_PAD, g, pads=pads, value=0, fmt=suggested_format(g))  # ATen's backward is its forward


CONSTANT_PAD = defop("constant_pad_nd", _constant_pad_kernel, _constant_pad_backward, Opaque("padded copy"),
                     grad_name="ConstantPadNdBackward0")
