"""ATen's CPU Box-Muller blocks (``normal_fill``) as two LLVM functions, bit for bit.

``normal_fill`` turns each block of 16 uniforms in place into normals: ``u = data[j]``, ``v = data[j + 8]`` give
``radius = sqrt(-2 log(1 - u))``, ``theta = 2 pi v``, ``data[j] = fma(radius * cos(theta), std, mean)`` and
``data[j + 8] = fma(radius * sin(theta), std, mean)`` for ``j < 8``.

- float32 (``float_blocks``): ATen's x86 build computes the block with ``avx_mathfun.h``'s Cephes polynomials
  (``log256_ps``, ``sincos256_ps``), and GCC contracted some of their multiply-adds into FMAs. The contractions
  below were found by experiment against torch 2.13: every ``y * x + p`` Horner step, the range reduction
  ``x + y * DP``, ``y * z + e * Q1`` (the first product fused), the cosine's ``y * z - z / 2`` and the sine's
  ``y * x + x``. glibc's ``logf``/``cosf`` (or NumPy's) differ from it in the last bit of about 2% of samples.
- float64 (``double_blocks``): glibc's ``log``, ``cos`` and ``sin`` (the calls are marked ``nobuiltin``, so LLVM
  neither folds nor merges them into ``sincos``), as ATen's scalar template calls them.

>>> import numpy as np
>>> data = np.full(16, 0.5, np.float32)
>>> float_blocks(data, 0.0, 1.0)
>>> round(float(data[0]), 5), round(float(data[8]), 5)  # sqrt(2 log 2) * (cos pi, sin pi)
(-1.17741, -0.0)
"""
from __future__ import annotations

import ctypes
import math
import struct

import numpy as np

from .llvm_mt19937 import address_of

__all__ = ["float_blocks", "double_blocks", "fused_affine", "uniform_function", "uniforms_from_raw"]


def _f32(value):
    """An LLVM float constant: the float32 rounding of ``value``, spelled as its double's bits."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(np.float32(value))))[0]


def _f64(value):
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]


# avx_mathfun.h's constants (Cephes).
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
          2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
_LOG_Q1, _LOG_Q2, _SQRTHF = -2.12194440e-4, 0.693359375, 0.707106781186547524
_DP = (-0.78515625, -2.4187564849853515625e-4, -3.77489497744594108e-8)
_SIN_P = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COS_P = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)
_FOPI = 1.27323954473516


def _pairs_ir(name, ty, declarations, body, attributes=""):
    """The loop both Box-Muller kernels share: ``pairs // 8`` blocks of 16 values, lane ``i`` of a block pairing
    value ``i`` (``%u``) with value ``i + 8`` (``%v``); ``body`` turns them into ``%n1``/``%n2``, stored back as
    ``n * std + mean``. ``ty`` is ``float`` or ``double``."""
    align, suffix = (4, "f32") if ty == "float" else (8, "f64")
    return f"""{declarations}
define void @{name}(ptr noalias %data, i64 %pairs, {ty} %mean, {ty} %std) nounwind {{
entry:
  %blocks = lshr i64 %pairs, 3
  %any = icmp sgt i64 %blocks, 0
  br i1 %any, label %outer, label %done
outer:
  %b = phi i64 [0, %entry], [%b.next, %outer.end]
  %base = shl i64 %b, 4
  br label %loop
loop:
  %lane = phi i64 [0, %outer], [%lane.next, %loop]
  %iu = add i64 %base, %lane
  %iv = add i64 %iu, 8
  %pu = getelementptr {ty}, ptr %data, i64 %iu
  %pv = getelementptr {ty}, ptr %data, i64 %iv
  %u = load {ty}, ptr %pu, align {align}
  %v = load {ty}, ptr %pv, align {align}
{body}  %o1 = call {ty} @llvm.fma.{suffix}({ty} %n1, {ty} %std, {ty} %mean)
  %o2 = call {ty} @llvm.fma.{suffix}({ty} %n2, {ty} %std, {ty} %mean)
  store {ty} %o1, ptr %pu, align {align}
  store {ty} %o2, ptr %pv, align {align}
  %lane.next = add i64 %lane, 1
  %more = icmp slt i64 %lane.next, 8
  br i1 %more, label %loop, label %outer.end
outer.end:
  %b.next = add i64 %b, 1
  %bmore = icmp slt i64 %b.next, %blocks
  br i1 %bmore, label %outer, label %done
done:
  ret void
}}
{attributes}"""


def _float_ir(name):
    horner = []
    prev = _f32(_LOG_P[0])
    for k, p in enumerate(_LOG_P[1:]):
        horner.append(f"  %h{k} = call float @llvm.fma.f32(float {prev}, float %x, float {_f32(p)})")
        prev = f"%h{k}"
    horner = "\n".join(horner)
    body = f"""  ; log256_ps(1 - u): 1 - u lies in (0, 1], never denormal, so the clamp and the invalid mask do nothing
  %u1 = fsub float 1.0, %u
  %bits = bitcast float %u1 to i32
  %ebits = lshr i32 %bits, 23
  %eint = sub i32 %ebits, 127
  %ef = sitofp i32 %eint to float
  %e0 = fadd float %ef, 1.0
  %mbits = and i32 %bits, -2139095041
  %mbits2 = or i32 %mbits, 1056964608
  %m = bitcast i32 %mbits2 to float
  %small = fcmp olt float %m, {_f32(_SQRTHF)}
  %tmp = select i1 %small, float %m, float 0.0
  %x0 = fsub float %m, 1.0
  %esub = select i1 %small, float 1.0, float 0.0
  %e = fsub float %e0, %esub
  %x = fadd float %x0, %tmp
  %z = fmul float %x, %x
{horner}
  %y9 = fmul float {prev}, %x
  %eq1 = fmul float %e, {_f32(_LOG_Q1)}
  %y10 = call float @llvm.fma.f32(float %y9, float %z, float %eq1)
  %zh = fmul float %z, 0.5
  %y11 = fsub float %y10, %zh
  %xy = fadd float %x, %y11
  %eq2 = fmul float %e, {_f32(_LOG_Q2)}
  %log = fadd float %xy, %eq2
  %m2 = fmul float {_f32(-2.0)}, %log
  %radius = call float @llvm.sqrt.f32(float %m2)
  ; sincos256_ps(2 pi v): v >= 0, so the argument's sign bit is clear
  %th = fmul float {_f32(2 * math.pi)}, %v
  %ty = fmul float %th, {_f32(_FOPI)}
  %ji = fptosi float %ty to i32
  %j1 = add i32 %ji, 1
  %j = and i32 %j1, -2
  %jf = sitofp i32 %j to float
  %swap4 = and i32 %j, 4
  %sign_sin = shl i32 %swap4, 29
  %sel2 = and i32 %j, 2
  %poly = icmp eq i32 %sel2, 0
  %r1 = call float @llvm.fma.f32(float %jf, float {_f32(_DP[0])}, float %th)
  %r2 = call float @llvm.fma.f32(float %jf, float {_f32(_DP[1])}, float %r1)
  %r = call float @llvm.fma.f32(float %jf, float {_f32(_DP[2])}, float %r2)
  %jc = sub i32 %j, 2
  %njc = xor i32 %jc, -1
  %cos4 = and i32 %njc, 4
  %sign_cos = shl i32 %cos4, 29
  %rz = fmul float %r, %r
  %c1 = call float @llvm.fma.f32(float {_f32(_COS_P[0])}, float %rz, float {_f32(_COS_P[1])})
  %c2 = call float @llvm.fma.f32(float %c1, float %rz, float {_f32(_COS_P[2])})
  %c3 = fmul float %c2, %rz
  %rzh = fmul float %rz, 0.5
  %nrzh = fneg float %rzh
  %c4 = call float @llvm.fma.f32(float %c3, float %rz, float %nrzh)
  %yc = fadd float %c4, 1.0
  %s1 = call float @llvm.fma.f32(float {_f32(_SIN_P[0])}, float %rz, float {_f32(_SIN_P[1])})
  %s2 = call float @llvm.fma.f32(float %s1, float %rz, float {_f32(_SIN_P[2])})
  %s3 = fmul float %s2, %rz
  %ys = call float @llvm.fma.f32(float %s3, float %r, float %r)
  %sv = select i1 %poly, float %ys, float %yc
  %cv = select i1 %poly, float %yc, float %ys
  %svb = bitcast float %sv to i32
  %cvb = bitcast float %cv to i32
  %sb = xor i32 %svb, %sign_sin
  %cb = xor i32 %cvb, %sign_cos
  %sin = bitcast i32 %sb to float
  %cos = bitcast i32 %cb to float
  %n1 = fmul float %radius, %cos
  %n2 = fmul float %radius, %sin
"""
    return _pairs_ir(name, "float", """declare float @llvm.fma.f32(float, float, float)
declare float @llvm.sqrt.f32(float)
""", body)


def _double_ir(name):
    body = f"""  %u1 = fsub double 1.0, %u
  %lg = call double @log(double %u1) #0
  %m2 = fmul double -2.0, %lg
  %radius = call double @llvm.sqrt.f64(double %m2)
  %th = fmul double {_f64(2 * math.pi)}, %v
  %cos = call double @cos(double %th) #0
  %sin = call double @sin(double %th) #0
  %n1 = fmul double %radius, %cos
  %n2 = fmul double %radius, %sin
"""
    return _pairs_ir(name, "double", """declare double @llvm.fma.f64(double, double, double)
declare double @llvm.sqrt.f64(double)
declare double @log(double)
declare double @cos(double)
declare double @sin(double)
""", body, "\nattributes #0 = { nobuiltin nounwind }\n")


def _affine_ir(name, ty, suffix):
    align = 4 if ty == "float" else 8
    return f"""declare {ty} @llvm.fma.{suffix}({ty}, {ty}, {ty})

define void @{name}(ptr noalias %data, i64 %n, {ty} %scale, {ty} %shift) nounwind {{
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %p = getelementptr {ty}, ptr %data, i64 %i
  %x = load {ty}, ptr %p, align {align}
  %y = call {ty} @llvm.fma.{suffix}({ty} %x, {ty} %scale, {ty} %shift)
  store {ty} %y, ptr %p, align {align}
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""


def _uniform_ir(name, wide):
    """raw 32-bit draws (uint32) -> [0, 1): float32 from a draw's low 24 bits, float64 from the low 53 bits
    of ``(first << 32) | second`` of a pair (``uniform_real_distribution``; every value is exact)."""
    if wide:
        body = """  %j = shl i64 %i, 1
  %ph = getelementptr i32, ptr %raw, i64 %j
  %hi32 = load i32, ptr %ph, align 4
  %j1 = add i64 %j, 1
  %pl = getelementptr i32, ptr %raw, i64 %j1
  %lo32 = load i32, ptr %pl, align 4
  %hi = zext i32 %hi32 to i64
  %lo = zext i32 %lo32 to i64
  %hm = and i64 %hi, 2097151
  %hs = shl i64 %hm, 32
  %w = or i64 %hs, %lo
  %f = uitofp i64 %w to double
  %v = fmul double %f, 0x3CA0000000000000
  %po = getelementptr double, ptr %out, i64 %i
  store double %v, ptr %po, align 8"""
    else:
        body = """  %pr = getelementptr i32, ptr %raw, i64 %i
  %r = load i32, ptr %pr, align 4
  %m = and i32 %r, 16777215
  %f = uitofp i32 %m to float
  %v = fmul float %f, 0x3E70000000000000
  %po = getelementptr float, ptr %out, i64 %i
  store float %v, ptr %po, align 4"""
    return f"""define void @{name}(ptr noalias %raw, ptr noalias %out, i64 %n) nounwind {{
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
{body}
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""


_IR = {"f32": lambda name: _float_ir(name), "f64": lambda name: _double_ir(name),
       "affine_f32": lambda name: _affine_ir(name, "float", "f32"),
       "affine_f64": lambda name: _affine_ir(name, "double", "f64")}
_functions: dict = {}
_UNIFORM = {}  # wide -> the ctypes function of `_uniform_ir`


def _function(kind):
    fn = _functions.get(kind)
    if fn is None:
        from .llvm_compile import compile_function
        from .llvm_objcache import default_cache

        name = f"jitorch_torch_normal_fill_{kind}_v2"
        ir = _IR[kind](name)
        scalar = ctypes.c_float if kind.endswith("f32") else ctypes.c_double
        address = compile_function(ir, name, default_cache())
        fn = _functions[kind] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, scalar, scalar)(address)
    return fn


def _blocks(kind, dtype, data, mean, std):
    if data.dtype != dtype or not data.flags.c_contiguous or not data.flags.writeable or data.size % 16:
        raise ValueError(f"normal_fill: expected a writable contiguous {dtype} array of whole 16-blocks, got "
                         f"{data.dtype} of size {data.size}")
    _function(kind)(address_of(data), data.size // 2, mean, std)


def float_blocks(data, mean, std):
    """Turn float32 uniforms ``data`` (a contiguous array, size a multiple of 16) into normals in place, as ATen."""
    _blocks("f32", np.float32, data, mean, std)


def double_blocks(data, mean, std):
    """`float_blocks` for float64 (glibc's log/cos/sin, ATen's fma)."""
    _blocks("f64", np.float64, data, mean, std)


def fused_affine(data, scale, shift):
    """``data = fma(data, scale, shift)`` in place (float32 or float64, contiguous): ATen's ``x * (to - from) +
    from`` and ``normal * std + mean``, which GCC compiled into one fused multiply-add."""
    kind = "affine_f32" if data.dtype == np.float32 else "affine_f64"
    if data.dtype not in (np.float32, np.float64) or not data.flags.c_contiguous or not data.flags.writeable:
        raise ValueError(f"fused_affine: expected a writable contiguous float32/float64 array, got {data.dtype}")
    _function(kind)(address_of(data), data.size, scale, shift)


def uniform_function(wide):
    """The generated ``(raw address, out address, n)`` conversion of raw 32-bit draws into [0, 1) uniforms: one
    float32 per draw, or (``wide``) one float64 per pair of draws."""
    fn = _UNIFORM.get(wide)
    if fn is None:
        from .llvm_compile import compile_function
        from .llvm_objcache import default_cache

        name = f"jitorch_torch_uniform_{'f64' if wide else 'f32'}_v2"
        address = compile_function(_uniform_ir(name, wide), name, default_cache())
        fn = _UNIFORM[wide] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address)
    return fn


def uniforms_from_raw(raw, wide):
    """[0, 1) uniforms from raw 32-bit draws ``raw`` (a contiguous uint32 array), as `uniform_function`."""
    n = raw.size // 2 if wide else raw.size
    out = np.empty(n, np.float64 if wide else np.float32)
    uniform_function(wide)(address_of(raw), address_of(out), n)
    return out
