"""``pad``: constant (any number of dims, negative amounts crop), reflect, replicate and circular padding.

Constant padding is one row whose gradient is the same row with the amounts negated; the other modes concatenate
flipped, repeated or wrapped edge slices along each padded dim, so their gradients are slices and sums.

>>> import jitorch
>>> from jitorch.nn._spatial_pad import pad
>>> pad(jitorch.arange(4.0).reshape(1, 1, 4), (2, 1), mode="reflect")
tensor([[[2., 1., 0., 1., 2., 3., 2.]]])
"""
from __future__ import annotations

from .._dispatch import apply
from .._memory_format import contiguous_format, suggested_format
from ..amp._cast_mode import autocast_policy
from ..ops.movement import CAT, CONTIGUOUS
from ..ops.pad_ops import CONSTANT_PAD

__all__ = ["pad"]

_MODES = ("constant", "reflect", "replicate", "circular")


def _pairs(input, pad):
    """``[(dim, left, right)]`` for the dims ``pad`` names, last dim first (PyTorch's order)."""
    return [(input.dim() - 1 - i, int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(len(pad) // 2)]


def _constant(input, pad, value, fmt):
    amounts = [(0, 0)] * input.dim()
    for dim, lo, hi in _pairs(input, pad):
        size = input.shape[dim]
        if size + lo + hi < 0:
            raise RuntimeError(f"The input size {size}, plus negative padding {lo} and {hi} resulted in a negative "
                               f"output size, which is invalid. Check dimension {dim} of your input.")
        if size + min(lo, 0) + min(hi, 0) < 0:
            # ATen crops before it pads: the positive side cannot give back elements the crops removed.
            raise RuntimeError(f"narrow(): length must be non-negative: negative padding ({lo}, {hi}) crops more "
                               f"than the {size} elements of dimension {dim}")
        amounts[dim] = (lo, hi)
    return apply(CONSTANT_PAD, input, pads=tuple(amounts), value=0 if value is None else value, fmt=fmt)


def _unsupported(n, input):
    return NotImplementedError(
        f"Padding size {2 * n} is not supported for {input.dim()}D input tensor.\n"
        "Supported combinations for non-constant padding:\n"
        "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
        "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
        "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")


def _pad_dim(x, dim, lo, hi, mode, fmt):
    """Pad one dim by concatenating edge pieces (flipped, repeated or wrapped): cheap views with cheap gradients; the
    concatenation is written in ``fmt`` (None: as the array module's follows its pieces)."""
    size = x.shape[dim]
    parts = []
    if lo > 0:
        if mode == "reflect":
            parts.append(x.narrow(dim, 1, lo).flip(dim))
        elif mode == "replicate":
            parts.append(x.narrow(dim, 0, 1).expand(_expanded(x, dim, lo)))
        else:
            parts.append(x.narrow(dim, size - lo, lo))
    parts.append(x.narrow(dim, max(-lo, 0), max(size - max(-lo, 0) - max(-hi, 0), 0)))
    if hi > 0:
        if mode == "reflect":
            parts.append(x.narrow(dim, size - 1 - hi, hi).flip(dim))
        elif mode == "replicate":
            parts.append(x.narrow(dim, size - 1, 1).expand(_expanded(x, dim, hi)))
        else:
            parts.append(x.narrow(dim, 0, hi))
    if len(parts) == 1:
        return parts[0]
    return apply(CAT, *parts, dim=dim) if fmt is None else apply(CAT, *parts, dim=dim, fmt=fmt)


def _expanded(x, dim, n):
    shape = list(x.shape)
    shape[dim] = n
    return shape


def _check_non_constant(mode, input, pairs, n):
    lead = input.dim() - n
    if any(s == 0 for s in input.shape[1:]):  # only the first dim (a batch) may be empty
        raise RuntimeError(f"Expected {n + 1}D or {n + 2}D (batch mode) tensor with possibly 0 batch size and other "
                           f"non-zero dimensions for input, but got: {list(input.shape)}")
    for dim, lo, hi in pairs:
        size = input.shape[dim]
        if mode == "reflect" and (lo >= size or hi >= size):
            argument = 4 + 2 * (input.dim() - 1 - dim)  # ATen numbers the pad pairs from the last dim
            raise RuntimeError(f"Argument #{argument}: Padding size should be less than the corresponding input "
                               f"dimension, but got: padding ({lo}, {hi}) at dimension {dim} of input "
                               f"{list(input.shape)}")
        if mode == "circular" and (lo > size or hi > size):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if size + lo + hi < 0 or (mode == "circular" and size + min(lo, 0) + min(hi, 0) <= 0):
            axis = "DHW"[3 - n + (dim - lead)]
            raise RuntimeError(f"input ({axis}: {size}) is too small. Calculated output {axis}: {size + lo + hi}")


def pad(input, pad, mode="constant", value=None):
    """Pad ``input``; ``pad`` lists ``(left, right)`` amounts starting from the last dim.

    ``constant`` pads any number of dims with ``value`` (negative amounts crop); ``reflect``, ``replicate`` and
    ``circular`` pad the last 1, 2 or 3 dims of a (batched) input, as PyTorch does.
    """
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.dim():
        raise RuntimeError(f"Padding length should be less than or equal to two times the input dimension but got "
                           f"padding length {len(pad)} and input of dimension {input.dim()}")
    if mode == "constant":
        return _constant(input, pad, value, suggested_format(input))
    if mode not in _MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    n = len(pad) // 2
    if n not in (1, 2, 3) or input.dim() not in (n + 1, n + 2):
        raise _unsupported(n, input)
    pairs = _pairs(input, pad)
    _check_non_constant(mode, input, pairs, n)
    # ATen's reflection and replication kernels write the input's suggested memory format (channels-last or
    # row-major, whatever other strides it has); its circular padding is row-major. The last concatenation writes it.
    fmt = contiguous_format if mode == "circular" else suggested_format(input)
    return (_edges_fp32 if (mode, n) in _CPU_FP32_PADS else _edges)(input, pairs, mode, fmt)


def _edges(input, pairs, mode, fmt):
    out, fresh = input, False
    last = max((i for i, (_, lo, hi) in enumerate(pairs) if lo > 0 or hi > 0), default=None)
    for i, (dim, lo, hi) in enumerate(pairs):
        if mode == "circular" and (lo < 0 or hi < 0):
            size = out.shape[dim]
            out = out.narrow(dim, max(-lo, 0), size - max(-lo, 0) - max(-hi, 0))
            lo, hi = max(lo, 0), max(hi, 0)
        if lo or hi:
            out = _pad_dim(out, dim, lo, hi, mode, fmt if i == last else None)
            fresh = lo > 0 or hi > 0  # a concatenation, else a narrowed view
    # Nothing added last (zero amounts, crops): a view, copied into a new tensor as ATen's kernels write one.
    return out if fresh else apply(CONTIGUOUS, out, fmt=None if fmt is contiguous_format else fmt)


# torch's CPU autocast runs these kernels (reflection_pad1d/2d, replication_pad1d/2d/3d) in float32; the others
# (reflection_pad3d, circular) are not on its lists.
_CPU_FP32_PADS = {("reflect", 1), ("reflect", 2), ("replicate", 1), ("replicate", 2), ("replicate", 3)}
_edges_fp32 = autocast_policy(cpu="fp32")(_edges)
