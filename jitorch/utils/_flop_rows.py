"""jitorch's rows restated as the ATen calls torch runs for them, for ``FlopCounterMode``: ``aten_calls(name, args,
attrs, out)`` gives ``(aten op name, argument shapes, keyword arguments)`` per call, with torch's argument order, so
torch's formulas (and a user's ``custom_mapping``) apply unchanged.

>>> import jitorch
>>> aten_calls("matmul", [jitorch.ones(2, 3, 4), jitorch.ones(4, 5)], {}, None)
[('mm', ((6, 4), (4, 5)), {})]
"""
from __future__ import annotations

import math

import numpy as np

from ..autograd.graph_task import current_graph_task_id

__all__ = ["aten_calls"]


def _shape(t):
    return None if t is None else tuple(t.shape)


class _Operand:
    """What torch's matmul decides by: an operand's shape, strides and whether it requires grad."""

    def __init__(self, shape, strides, requires_grad):
        self.shape, self.strides, self.requires_grad = tuple(shape), tuple(strides), requires_grad

    @classmethod
    def of(cls, t):
        return cls(t.shape, t.stride(), t.requires_grad)

    @property
    def mT(self):  # noqa: N802 - torch's name
        return _Operand(self.shape[:-2] + self.shape[-2:][::-1], self.strides[:-2] + self.strides[-2:][::-1],
                        self.requires_grad)


def _should_fold(a, b):
    # ATen's should_fold: a batch folds into one matrix product (mm or mv) when that needs no copy, or when the
    # smaller operand requires grad (folding saves a large gradient in the backward).
    larger = len(a.shape) >= len(b.shape)
    t1, dim_t2 = (a, len(b.shape)) if larger else (b.mT, len(a.shape))
    if not (len(t1.shape) >= 3 and dim_t2 in (1, 2)):
        return False
    if (b if larger else a).requires_grad:
        return True
    if len(a.shape) == 2:
        return False
    if math.prod(t1.shape) == 0:
        return True
    return all(t1.strides[i] == t1.strides[i + 1] * t1.shape[i + 1] for i in range(len(t1.shape) - 2))


def _matmul_calls(a, b):
    """The products torch's matmul runs for operands ``a`` and ``b`` (`_Operand`)."""
    da, db = len(a.shape), len(b.shape)
    if db == 1 and da <= 2:
        return []  # dot or mv: torch has no formula for them
    if da <= 2 and db == 2:
        return [("mm", (((1,) + a.shape) if da == 1 else a.shape, b.shape), {})]
    if _should_fold(a, b):
        big, small = (a, b) if da >= db else (b.mT, a.mT)
        if len(small.shape) == 1:
            return []  # a folded mv
        return [("mm", ((math.prod(big.shape[:-1]), big.shape[-1]), small.shape), {})]
    a_shape = (1,) + a.shape if da == 1 else a.shape
    b_shape = b.shape + (1,) if db == 1 else b.shape
    batch = math.prod(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    return [("bmm", ((batch,) + a_shape[-2:], (batch,) + b_shape[-2:]), {})]


def _linear(args, attrs, out):
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    # torch's linear: addmm for 2-D inputs and (flattened) contiguous ones with a bias, else matmul(x, w.t()).
    if bias is not None and (x.dim() == 2 or x.is_contiguous()):
        m, k = math.prod(x.shape[:-1]), x.shape[-1]
        return [("addmm", (_shape(bias), (m, k), (k, w.shape[0])), {})]
    return _matmul_calls(_Operand.of(x), _Operand.of(w).mT)


def _linear_backward(args, attrs, out):
    g, x = _shape(args[0]), _shape(args[1])  # (the weight is not passed when its gradient is not needed)
    m, k, n = math.prod(x[:-1]), x[-1], g[-1]
    needs = attrs.get("needs", (True, True, True))
    calls = [("mm", ((m, n), (n, k)), {})] if needs[0] else []
    return calls + ([("mm", ((n, m), (m, k)), {})] if needs[1] else [])


def _matmul(args, attrs, out):
    return _matmul_calls(_Operand.of(args[0]), _Operand.of(args[1]))


def _einsum(args, attrs, out):
    shapes = [_shape(t) for t in args]
    lhs, arrow, rhs = attrs["equation"].replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) < 2 or len(terms) != len(shapes):
        return []
    n_ellipsis = max((len(s) - len(t) + 3 for t, s in zip(terms, shapes) if "..." in t), default=0)
    extra = "".join(chr(0x100 + i) for i in range(n_ellipsis))  # letters no equation uses
    terms = [t.replace("...", extra[n_ellipsis - (len(s) - len(t) + 3):]) for t, s in zip(terms, shapes)]
    if arrow:
        output = set(rhs.replace("...", extra))
    else:  # implicit: the broadcast dimensions and the letters used once
        joined = "".join(terms)
        output = set(extra) | {c for c in joined if joined.count(c) == 1}
    sizes = {}
    for term, shape in zip(terms, shapes):
        for c, n in zip(term, shape):
            sizes[c] = max(sizes.get(c, 1), n)
    # torch contracts left to right (without opt_einsum), first summing away the letters no one else needs; a pair
    # with nothing to contract is a product, not a bmm.
    calls, left = [], set(terms[0])
    for i in range(1, len(terms)):
        later = output.union(*terms[i + 1:])
        right = set(terms[i])
        left, right = {c for c in left if c in later or c in right}, {c for c in right if c in later or c in left}
        contracted = (left & right) - later
        if contracted:
            b, m, n, k = (math.prod(sizes[c] for c in group) for group in
                          ((left & right) & later, left - right, right - left, contracted))
            calls.append(("bmm", ((b, m, k), (b, k, n)), {}))
        left = (left | right) - contracted
    return calls


def _conv_args(attrs, transposed, groups):
    return (None, attrs["stride"], attrs["padding"], attrs["dilation"], transposed, [0] * len(attrs["stride"]),
            groups)


def _convolution(args, attrs, out):
    x, w, o = _shape(args[0]), _shape(args[1]), _shape(out)
    groups = attrs.get("groups", 1)
    if current_graph_task_id() != -1:  # in a backward: the input's gradient of a transposed convolution
        return [("convolution_backward", (x, o, w) + _conv_args(attrs, True, groups) + ([True, False],),
                 {"out_shape": [o, None]})]
    return [("convolution", (x, w) + _conv_args(attrs, False, groups), {"out_shape": o})]


def _convolution_transpose(args, attrs, out):
    x, w, o = _shape(args[0]), _shape(args[1]), _shape(out)
    groups = attrs.get("groups", 1)
    if current_graph_task_id() != -1:  # in a backward: the input's gradient of a convolution
        return [("convolution_backward", (x, o, w) + _conv_args(attrs, False, groups) + ([True, False],),
                 {"out_shape": [o, None]})]
    return [("convolution", (x, w) + _conv_args(attrs, True, groups), {"out_shape": o})]


def _convolution_weight(args, attrs, out):
    # The weight's gradient from (input, output's gradient); a transposed convolution's comes with the two swapped,
    # which torch's transposed formula counts the same.
    x, g = _shape(args[0]), _shape(args[1])
    groups = attrs.get("groups", 1)
    w = (g[1], x[1] // groups) + tuple(attrs["kernel"])
    return [("convolution_backward", (g, x, w) + _conv_args(attrs, False, groups) + ([False, True],),
             {"out_shape": [None, w]})]


def _attention_kernel(q):
    # torch counts its CUDA attention kernels (flash for half precision, memory-efficient otherwise); its CPU kernel
    # has no formula, so attention on the CPU counts nothing.
    if q.device.type != "cuda":
        return None
    half = str(q.dtype).split(".")[-1] in ("float16", "bfloat16")
    return "_scaled_dot_product_flash_attention" if half else "_scaled_dot_product_efficient_attention"


def _sdpa(args, attrs, out):
    kernel = _attention_kernel(args[0])
    return [] if kernel is None else [(kernel, tuple(_shape(t) for t in args[:3]), {})]


def _sdpa_backward(args, attrs, out):
    kernel = _attention_kernel(args[1])
    return [] if kernel is None else [(kernel + "_backward", tuple(_shape(t) for t in args[:4]), {})]


_ROWS = {
    "linear": _linear, "linear_backward": _linear_backward, "matmul": _matmul, "einsum": _einsum,
    "convolution": _convolution, "convolution_transpose": _convolution_transpose,
    "convolution_weight": _convolution_weight, "scaled_dot_product_attention": _sdpa,
    "scaled_dot_product_attention_backward": _sdpa_backward,
}


def aten_calls(name, args, attrs, out):
    """The ATen calls (name, shapes, keywords) torch runs for jitorch row ``name``; [] for rows without FLOPs."""
    translate = _ROWS.get(name)
    return [] if translate is None else translate(args, attrs, out)
