"""float16 <-> float32 conversion of a dense buffer as one LLVM loop per direction, for `jitorch.ops.half_cast`.

NumPy converts float16 one element at a time in software (about 7 ns an element here, 200x torch); x86's F16C
converts 8 or 16 lanes an instruction (``vcvtps2ph``/``vcvtph2ps``), rounding to nearest even with NaN, infinities
and subnormals as IEEE says, so the results are NumPy's bit for bit. LLVM's ``fpext``/``fptrunc`` lower to those
instructions when the host has F16C; without it they would become calls into a runtime library the JIT does not
link, so `half_cast_function` returns None there and callers keep NumPy's conversion.

What the float32 -> float16 loop's body emits::

    %sp = getelementptr float, ptr %src, i64 %i
    %v = load float, ptr %sp, align 4
    %c = fptrunc float %v to half
    %dp = getelementptr half, ptr %dst, i64 %i
    store half %c, ptr %dp, align 2

>>> import numpy as np
>>> x = np.array([1.0, 65520.0, 2.0 ** -25 * 3, -0.0], np.float32)  # 65520: up to inf; 1.5 ulps: to 2 (even)
>>> out = np.empty(4, np.float16)
>>> f = half_cast_function("f32", "f16")
>>> if f is not None:
...     f(x.ctypes.data, out.ctypes.data, 4)
...     print(out.tolist() == [1.0, float("inf"), 2.0 ** -23, -0.0])
... else:
...     print(True)
True
"""
from __future__ import annotations

import ctypes

from .llvm_compile import compile_function
from .llvm_host import target_info
from .llvm_objcache import default_cache

__all__ = ["half_cast_function"]

_TYPES = {"f16": ("half", 2), "f32": ("float", 4)}

_IR = """define void @{name}(ptr noalias nocapture readonly %src, ptr noalias nocapture writeonly %dst,
                          i64 %n) nounwind {{
entry:
  %go = icmp sgt i64 %n, 0
  br i1 %go, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %sp = getelementptr {src}, ptr %src, i64 %i
  %v = load {src}, ptr %sp, align {src_align}
  %c = {conv} {src} %v to {dst}
  %dp = getelementptr {dst}, ptr %dst, i64 %i
  store {dst} %c, ptr %dp, align {dst_align}
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""

_functions: dict = {}


def half_cast_function(src, dst):
    """``f(src_address, dst_address, n)`` converting ``n`` dense elements from IR dtype ``src`` to ``dst`` (one of
    them "f16", the other "f32"), compiled once per direction; None where the host CPU lacks F16C."""
    key = (src, dst)
    if key not in _functions:
        _functions[key] = _compile(src, dst) if "+f16c" in target_info()["features"].split(",") else None
    return _functions[key]


def _compile(src, dst):
    (src_type, src_align), (dst_type, dst_align) = _TYPES[src], _TYPES[dst]
    name = f"jitorch_cast_{src}_{dst}_v1"
    ir = _IR.format(name=name, src=src_type, dst=dst_type, src_align=src_align, dst_align=dst_align,
                    conv="fpext" if src == "f16" else "fptrunc")
    address = compile_function(ir, name, default_cache())
    return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address)
