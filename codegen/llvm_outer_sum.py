"""ATen's cascade sum over an outer (strided) axis, vectorized across a contiguous kept axis, as one LLVM function
per load dtype (`outer_sum_function`): ``x.sum(0)`` of a bfloat16, float16 or float32 matrix in torch's float32
order, bit for bit.

ATen's ``multi_row_sum`` (``SumKernel.cpp``) sums a column of ``n`` rows in four float32 levels: each row is added
into level 0; after every ``2 ** level_power`` rows (``level_power = max(4, ceil(log2(n)) // 4)``), level 0 is added
into level 1 and cleared, then, for ``j`` from 1 while ``i & (mask << j * level_power) == 0`` (``i``: rows done),
level ``j`` into level ``j + 1``. Rows left after the last full block go into level 0, and the result is
``((level0 + level1) + level2) + level3``. The order is per column, so summing ``WIDTH`` columns as one vector (and
the last columns one at a time) gives every column torch's bits whatever the vector width; half types widen as
they load and the caller rounds the float32 result once (ATen's output starts at zero and adds it once).
"""
from __future__ import annotations

import ctypes

from .llvm_compile import compile_function
from .llvm_host import storage_dtypes
from .llvm_objcache import default_cache

__all__ = ["LEVELS", "WIDTH", "level_power", "outer_sum_function"]

LEVELS = 4
WIDTH = 32  # columns per vector: four AVX2 float registers per level
_MEMORY = {"f32": ("float", 4), "f16": ("half", 2), "bf16": ("i16", 2)}
_functions: dict = {}


def level_power(n):
    """ATen's ``max(4, CeilLog2(n) // 4)``.

    >>> level_power(1000), level_power(2 ** 24)
    (4, 6)
    """
    return max(4, (max(n, 1) - 1).bit_length() // LEVELS)


def outer_sum_function(dtype):
    """``f(in, out, n, cols, row_stride, level_power, batches, batch_stride, out_stride)``: for each of ``batches``
    blocks at ``in + b * batch_stride`` (strides in elements), ``out[b * out_stride + c]`` (float32) becomes the
    cascade sum over
    ``n`` rows ``row_stride`` apart of the widened elements ``c`` in ``0..cols-1`` (unit stride). None where the
    host cannot load ``dtype`` (float16 without F16C).

    >>> import numpy as np
    >>> f = outer_sum_function("f32")
    >>> x, out = np.arange(200, dtype=np.float32).reshape(40, 5), np.empty(5, np.float32)
    >>> f(x.ctypes.data, out.ctypes.data, 40, 5, 5, level_power(40), 1, 0, 5); out.tolist()
    [3900.0, 3940.0, 3980.0, 4020.0, 4060.0]
    """
    if dtype not in _functions:
        if dtype != "f32" and dtype not in storage_dtypes():
            _functions[dtype] = None
        else:
            name = f"jitorch_outer_sum_{dtype}_v2"
            address = compile_function(_emit(dtype, name), name, default_cache())
            _functions[dtype] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, *(ctypes.c_int64,) * 7)(
                address)
    return _functions[dtype]


def _columns(dtype, width, p, after):
    """The IR blocks summing ``width`` columns from ``%c{p}`` of batch ``%inb`` into ``%outb``: entered at label
    ``{p}init``, leaving to ``after``."""
    mem, align = _MEMORY[dtype]
    vf, vm = f"<{width} x float>", f"<{width} x {mem}>"
    acc = [f"%{p}acc{k}" for k in range(LEVELS)]

    def row(r, tag):  # row ``r``'s widened columns
        lines = [f"  %{p}{tag}o = mul i64 {r}, %rs", f"  %{p}{tag}o2 = add i64 %{p}{tag}o, %c{p}",
                 f"  %{p}{tag}ptr = getelementptr {mem}, ptr %inb, i64 %{p}{tag}o2",
                 f"  %{p}{tag}raw = load {vm}, ptr %{p}{tag}ptr, align {align}"]
        if dtype == "bf16":
            lines += [f"  %{p}{tag}z = zext {vm} %{p}{tag}raw to <{width} x i32>",
                      f"  %{p}{tag}s = shl <{width} x i32> %{p}{tag}z, <{', '.join(['i32 16'] * width)}>",
                      f"  %{p}{tag}v = bitcast <{width} x i32> %{p}{tag}s to {vf}"]
        elif dtype == "f16":
            lines.append(f"  %{p}{tag}v = fpext {vm} %{p}{tag}raw to {vf}")
        else:
            lines[-1] = lines[-1].replace(f"%{p}{tag}raw =", f"%{p}{tag}v =")
        return lines

    def add_into(k, value, tag):  # acc[k] += value
        return [f"  %{p}{tag}l = load {vf}, ptr {acc[k]}", f"  %{p}{tag}a = fadd {vf} %{p}{tag}l, {value}",
                f"  store {vf} %{p}{tag}a, ptr {acc[k]}"]

    def flush(j, tag):  # acc[j] += acc[j - 1]; acc[j - 1] = 0
        return [f"  %{p}{tag}lo = load {vf}, ptr {acc[j - 1]}", *add_into(j, f"%{p}{tag}lo", tag),
                f"  store {vf} zeroinitializer, ptr {acc[j - 1]}"]

    lines = [f"{p}init:", *(f"  store {vf} zeroinitializer, ptr {a}" for a in acc), f"  br label %{p}outer",
             f"{p}outer:", f"  %{p}i = phi i64 [0, %{p}init], [%{p}i2, %{p}f1], [%{p}i2, %{p}f2], [%{p}i2, %{p}f3]",
             f"  %{p}end = add i64 %{p}i, %step", f"  %{p}full = icmp sle i64 %{p}end, %n",
             f"  br i1 %{p}full, label %{p}inner, label %{p}rest",
             f"{p}inner:", f"  %{p}j = phi i64 [%{p}i, %{p}outer], [%{p}j2, %{p}inner]", *row(f"%{p}j", "in"),
             *add_into(0, f"%{p}inv", "inacc"), f"  %{p}j2 = add i64 %{p}j, 1",
             f"  %{p}more = icmp slt i64 %{p}j2, %{p}end", f"  br i1 %{p}more, label %{p}inner, label %{p}f1",
             f"{p}f1:", f"  %{p}i2 = add i64 %{p}i, %step", *flush(1, "f1"),
             f"  %{p}s1 = and i64 %{p}i2, %mask1", f"  %{p}b1 = icmp ne i64 %{p}s1, 0",
             f"  br i1 %{p}b1, label %{p}outer, label %{p}f2",
             f"{p}f2:", *flush(2, "f2"), f"  %{p}s2 = and i64 %{p}i2, %mask2", f"  %{p}b2 = icmp ne i64 %{p}s2, 0",
             f"  br i1 %{p}b2, label %{p}outer, label %{p}f3",
             f"{p}f3:", *flush(3, "f3"), f"  br label %{p}outer",
             f"{p}rest:", f"  %{p}left = icmp slt i64 %{p}i, %n", f"  br i1 %{p}left, label %{p}tail, label %{p}fin",
             f"{p}tail:", f"  %{p}r = phi i64 [%{p}i, %{p}rest], [%{p}r2, %{p}tail]", *row(f"%{p}r", "t"),
             *add_into(0, f"%{p}tv", "tacc"), f"  %{p}r2 = add i64 %{p}r, 1",
             f"  %{p}tmore = icmp slt i64 %{p}r2, %n", f"  br i1 %{p}tmore, label %{p}tail, label %{p}fin",
             f"{p}fin:"]
    total = f"%{p}fin0"
    lines.append(f"  {total} = load {vf}, ptr {acc[0]}")
    for k in range(1, LEVELS):
        lines += [f"  %{p}fl{k} = load {vf}, ptr {acc[k]}", f"  %{p}fin{k}x = fadd {vf} {total}, %{p}fl{k}"]
        total = f"%{p}fin{k}x"
    lines += [f"  %{p}optr = getelementptr float, ptr %outb, i64 %c{p}",
              f"  store {vf} {total}, ptr %{p}optr, align 4", f"  br label %{after}"]
    return lines


def _emit(dtype, name):
    # Columns in vectors of WIDTH, then of 8 (the few columns ATen's ``row_sum`` takes), then one at a time.
    widths = (("v", WIDTH), ("u", 8), ("s", 1))
    allocas = [f"  %{p}acc{k} = alloca <{width} x float>" for p, width in widths for k in range(LEVELS)]
    lines = [f"define void @{name}(ptr noalias nocapture readonly %in, ptr noalias nocapture writeonly %out, "
             "i64 %n, i64 %cols, i64 %rs, i64 %lp, i64 %batches, i64 %bs, i64 %os) nounwind {",
             "entry:", *allocas,
             "  %step = shl i64 1, %lp", "  %m = sub i64 %step, 1", "  %mask1 = shl i64 %m, %lp",
             "  %lp2 = mul i64 %lp, 2", "  %mask2 = shl i64 %m, %lp2",
             *(f"  %{p}lim = and i64 %cols, {-width}" for p, width in widths),
             "  %any = icmp sgt i64 %batches, 0", "  br i1 %any, label %batch, label %done",
             "batch:", "  %a = phi i64 [0, %entry], [%a2, %bnext]",
             "  %ino = mul i64 %a, %bs", f"  %inb = getelementptr {_MEMORY[dtype][0]}, ptr %in, i64 %ino",
             "  %outo = mul i64 %a, %os", "  %outb = getelementptr float, ptr %out, i64 %outo",
             f"  br label %{widths[0][0]}head"]
    start, came_from = "0", "batch"
    for k, (p, width) in enumerate(widths):
        after = widths[k + 1][0] + "head" if k + 1 < len(widths) else "bnext"
        lines += [f"{p}head:", f"  %c{p} = phi i64 [{start}, %{came_from}], [%c{p}2, %{p}next]",
                  f"  %{p}go = icmp slt i64 %c{p}, %{p}lim", f"  br i1 %{p}go, label %{p}init, label %{after}",
                  *_columns(dtype, width, p, f"{p}next"),
                  f"{p}next:", f"  %c{p}2 = add i64 %c{p}, {width}", f"  br label %{p}head"]
        start, came_from = f"%c{p}", f"{p}head"
    lines += ["bnext:", "  %a2 = add i64 %a, 1", "  %bgo = icmp slt i64 %a2, %batches",
              "  br i1 %bgo, label %batch, label %done",
              "done:", "  ret void", "}"]
    return "\n".join(lines) + "\n"
