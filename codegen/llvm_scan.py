"""float32 ``cumsum`` and ``cumprod`` as two LLVM functions each (ATen's loop: a float64 running sum from 0, or
product from 1, rounded at each output):
``last`` scans rows along the last dim with the sum in a register, ``inner`` scans along another dim, updating a
float64 row of sums (one per inner element) a row at a time, which vectorizes. `jitorch.ops.native_scan` calls them.

>>> import numpy as np
>>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> out = np.empty_like(x)
>>> cumsum_function("last")(x.ctypes.data, out.ctypes.data, 2, 3)
>>> out.tolist()
[[0.0, 1.0, 3.0], [3.0, 7.0, 12.0]]
"""
from __future__ import annotations

import ctypes

from .llvm_compile import compile_function
from .llvm_objcache import default_cache

__all__ = ["cumsum_function"]

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


def _product_ir(ir):
    """The sum's IR as ATen's cumprod: the same loop with the float64 running product starting from 1."""
    return (ir.replace("cumsum", "cumprod").replace("fadd double", "fmul double")
            .replace("phi double [0.0,", "phi double [1.0,").replace("store double 0.0,", "store double 1.0,"))


def cumsum_function(which, op="sum"):
    """The compiled ``"last"`` (``fn(x, out, rows, n)``) or ``"inner"`` (``fn(x, out, acc, rows, n, inner)``, ``acc``
    a float64 scratch row of ``inner`` running values) scan, a sum or (``op="prod"``) a product, made once per
    process."""
    fn = _functions.get((which, op))
    if fn is None:
        ir = _LAST_IR if which == "last" else _INNER_IR
        name = _NAMES[which != "last"]
        if op == "prod":
            ir, name = _product_ir(ir), name.replace("cumsum", "cumprod")
        address = compile_function(ir, name, default_cache())
        args = [ctypes.c_void_p] * (2 if which == "last" else 3) + [ctypes.c_int64] * (2 if which == "last" else 3)
        fn = _functions[(which, op)] = ctypes.CFUNCTYPE(None, *args)(address)
    return fn
