"""Eager CPU ``cumsum`` of float32 arrays as two small LLVM functions: ATen's loop, a float64 running sum from 0
rounded to float32 at each output, one pass.

NumPy's ``cumsum(dtype=float64)`` casts through buffers and runs its accumulate loop an element at a time (1000x1000
along dim 1: 7.7 ms, torch 0.9 ms). Starting from ``0.0`` as ATen does makes ``-0.0`` inputs give ``0.0``, as torch's.
A scan along the last dim keeps the sum in a register; along another dim a float64 row of sums (one per inner
element) is updated a row at a time, which vectorizes.

>>> import numpy as np
>>> x = np.full((1000, 3), -0.0, np.float32)
>>> x[:, 1] = 0.5
>>> cumsum_float32(x, 0)[-2:]  # torch's zeros are positive: 0.0 + -0.0
array([[  0. , 499.5,   0. ],
       [  0. , 500. ,   0. ]], dtype=float32)
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from ..codegen.llvm_compile import compile_function
from ..codegen.llvm_objcache import default_cache

__all__ = ["cumsum_float32"]

MIN_SIZE = 256  # below this NumPy's call costs less than the kernel's (10 elements: 2.9 us against 3.9)
_NAMES = ("jitorch_cumsum_f32_last_v1", "jitorch_cumsum_f32_inner_v1")

_LAST_IR = """define void @jitorch_cumsum_f32_last_v1(ptr noalias %x, ptr noalias %out, i64 %rows, i64 %n) nounwind {
entry:
  %any = icmp sgt i64 %rows, 0
  %long = icmp sgt i64 %n, 0
  %go = and i1 %any, %long
  br i1 %go, label %row, label %done
row:
  %r = phi i64 [0, %entry], [%r.next, %row.end]
  %base = mul i64 %r, %n
  %xr = getelementptr float, ptr %x, i64 %base
  %or = getelementptr float, ptr %out, i64 %base
  br label %elem
elem:
  %i = phi i64 [0, %row], [%i.next, %elem]
  %acc = phi double [0.0, %row], [%acc.next, %elem]
  %p = getelementptr float, ptr %xr, i64 %i
  %v = load float, ptr %p, align 4
  %vd = fpext float %v to double
  %acc.next = fadd double %acc, %vd
  %o = fptrunc double %acc.next to float
  %q = getelementptr float, ptr %or, i64 %i
  store float %o, ptr %q, align 4
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %elem, label %row.end
row.end:
  %r.next = add i64 %r, 1
  %rmore = icmp slt i64 %r.next, %rows
  br i1 %rmore, label %row, label %done
done:
  ret void
}
"""

_INNER_IR = """define void @jitorch_cumsum_f32_inner_v1(ptr noalias %x, ptr noalias %out, ptr noalias %acc, i64 %rows,
                                                   i64 %n, i64 %inner) nounwind {
entry:
  %any = icmp sgt i64 %rows, 0
  %long = icmp sgt i64 %n, 0
  %wide = icmp sgt i64 %inner, 0
  %go0 = and i1 %any, %long
  %go = and i1 %go0, %wide
  br i1 %go, label %row, label %done
row:
  %r = phi i64 [0, %entry], [%r.next, %row.end]
  br label %zero
zero:
  %z = phi i64 [0, %row], [%z.next, %zero]
  %zp = getelementptr double, ptr %acc, i64 %z
  store double 0.0, ptr %zp, align 8
  %z.next = add i64 %z, 1
  %zmore = icmp slt i64 %z.next, %inner
  br i1 %zmore, label %zero, label %step
step:
  %i = phi i64 [0, %zero], [%i.next, %step.end]
  %ri = mul i64 %r, %n
  %line = add i64 %ri, %i
  %base = mul i64 %line, %inner
  %xs = getelementptr float, ptr %x, i64 %base
  %os = getelementptr float, ptr %out, i64 %base
  br label %elem
elem:
  %j = phi i64 [0, %step], [%j.next, %elem]
  %ap = getelementptr double, ptr %acc, i64 %j
  %a = load double, ptr %ap, align 8
  %p = getelementptr float, ptr %xs, i64 %j
  %v = load float, ptr %p, align 4
  %vd = fpext float %v to double
  %a.next = fadd double %a, %vd
  store double %a.next, ptr %ap, align 8
  %o = fptrunc double %a.next to float
  %q = getelementptr float, ptr %os, i64 %j
  store float %o, ptr %q, align 4
  %j.next = add i64 %j, 1
  %jmore = icmp slt i64 %j.next, %inner
  br i1 %jmore, label %elem, label %step.end
step.end:
  %i.next = add i64 %i, 1
  %imore = icmp slt i64 %i.next, %n
  br i1 %imore, label %step, label %row.end
row.end:
  %r.next = add i64 %r, 1
  %rmore = icmp slt i64 %r.next, %rows
  br i1 %rmore, label %row, label %done
done:
  ret void
}
"""

_functions: dict = {}


def _function(which):
    fn = _functions.get(which)
    if fn is None:
        ir = _LAST_IR if which == "last" else _INNER_IR
        address = compile_function(ir, _NAMES[which != "last"], default_cache())
        args = [ctypes.c_void_p] * (2 if which == "last" else 3) + [ctypes.c_int64] * (2 if which == "last" else 3)
        fn = _functions[which] = ctypes.CFUNCTYPE(None, *args)(address)
    return fn


def cumsum_float32(a, dim):
    """``a.cumsum(dim)`` as torch's CPU kernel computes it, for a C-contiguous float32 NumPy array ``a`` of at
    least ``MIN_SIZE`` elements; None otherwise (the caller scans its own way)."""
    if type(a) is not np.ndarray or a.dtype != np.float32 or a.size < MIN_SIZE or not a.flags.c_contiguous:
        return None
    dim = dim % a.ndim
    rows, n, inner = math.prod(a.shape[:dim]), a.shape[dim], math.prod(a.shape[dim + 1:])
    out = np.empty(a.shape, np.float32)
    x_ptr, out_ptr = a.ctypes.data, out.ctypes.data
    if inner == 1:
        _function("last")(x_ptr, out_ptr, rows, n)
    else:
        acc = np.empty(inner, np.float64)
        _function("inner")(x_ptr, out_ptr, acc.ctypes.data, rows, n, inner)
    return out
