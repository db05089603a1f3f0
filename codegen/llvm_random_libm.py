"""ATen's CPU transforms of float64 uniforms into other distributions (``TransformationHelper.h``), bit for bit: one
generated LLVM loop each, calling glibc's ``log1p``/``log``/``tan``/``exp`` as ATen does (NumPy's vectorized
``log1p``, ``tan``, ``exp`` differ from glibc's in the last bit of some values). The calls are ``nobuiltin``, so LLVM
neither folds nor replaces them; ``fma`` is where GCC contracted ATen's multiply-add.

- ``exponential``: ``-1 / lambda * log1p(-u)``
- ``cauchy``: ``fma(sigma, tan(pi * (u - 0.5)), median)``
- ``geometric``: ``ceil(log(u) / log1p(-p))``
- ``exp``: ``exp(x)`` (``log_normal_``: the exponential of ``normal_distribution<double>``'s samples)

>>> import numpy as np
>>> u = np.array([0.5, 0.25])
>>> transform("geometric", u, np.log1p(-0.5)).tolist()
[1.0, 2.0]
"""
from __future__ import annotations

import ctypes
import math
import struct

import numpy as np

from .llvm_mt19937 import address_of

__all__ = ["transform"]

_PI = "0x%016X" % struct.unpack("<Q", struct.pack("<d", math.pi))[0]
# Each body reads %u and the parameters %a, %b and defines %o.
_BODIES = {
    "exponential": """  %nu = fneg double %u
  %l = call double @log1p(double %nu) #0
  %o = fmul double %a, %l""",
    "cauchy": f"""  %c = fsub double %u, 0.5
  %t = fmul double {_PI}, %c
  %tn = call double @tan(double %t) #0
  %o = call double @llvm.fma.f64(double %b, double %tn, double %a)""",
    "geometric": """  %l = call double @log(double %u) #0
  %q = fdiv double %l, %a
  %o = call double @llvm.ceil.f64(double %q)""",
    "exp": """  %o = call double @exp(double %u) #0""",
}


def _ir(name, body):
    return f"""declare double @log1p(double)
declare double @log(double)
declare double @tan(double)
declare double @exp(double)
declare double @llvm.fma.f64(double, double, double)
declare double @llvm.ceil.f64(double)

define void @{name}(ptr noalias %data, i64 %n, double %a, double %b) nounwind {{
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %p = getelementptr double, ptr %data, i64 %i
  %u = load double, ptr %p, align 8
{body}
  store double %o, ptr %p, align 8
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}

attributes #0 = {{ nobuiltin nounwind }}
"""


_functions: dict = {}


def transform(kind, values, a=0.0, b=0.0):
    """``values`` (a float64 array) transformed in place by ``kind`` with parameters ``a``, ``b`` (exponential:
    ``a = -1 / lambda``; cauchy: ``a = median, b = sigma``; geometric: ``a = log1p(-p)``); returns it."""
    fn = _functions.get(kind)
    if fn is None:
        from .llvm_compile import compile_function
        from .llvm_objcache import default_cache

        name = f"jitorch_torch_transform_{kind}_v1"
        address = compile_function(_ir(name, _BODIES[kind]), name, default_cache())
        fn = _functions[kind] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double,
                                                 ctypes.c_double)(address)
    if values.dtype != np.float64 or not values.flags.c_contiguous or not values.flags.writeable:
        raise ValueError(f"transform({kind!r}): expected a writable contiguous float64 array, got {values.dtype}")
    fn(address_of(values), values.size, float(a), float(b))
    return values
