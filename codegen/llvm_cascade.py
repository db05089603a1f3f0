"""ATen's cascade sum of an ``nll_loss`` reduction, as one scalar LLVM function per dtype (`cascade_sum_function`;
`picked_cascade_function`: the batch's values gathered from the log-probability rows at the targets and negated
inside, for float32/float64 batches with no ignored target).

ATen's ``nll_loss`` over a batch does not sum its picked values pairwise: it keeps eight partial sums in the
input's own dtype. Each batch entry ``b`` is added into bin 0; then, for level ``j`` from 0 while
``b & (mask << j * level_power) == 0``, bin ``j`` is added into bin ``j + 1`` and cleared (``mask`` is
``2 ** level_power - 1``, ``level_power = max(4, ceil(log2(batch)) // 8)``). An ignored entry adds nothing and
flushes nothing. The result is ``((0 + bin 0) + bin 1) + ... + bin 7``. Every addition rounds to the dtype:
float16 and bfloat16 values are held widened to float32 and rounded after each addition (c10's ``Half`` and
``BFloat16`` arithmetic), so a loss gives torch's bits in every float dtype. What one entry's addition into bin 0 and
a flush of level 0 emit, for float32::

      %t16 = load float, ptr %t0
      %t17 = fadd float %t16, %t12
      store float %t17, ptr %t0
      %t18 = mul i64 %lp, 0
      %t19 = shl i64 %t9, %t18
      %t20 = and i64 %b, %t19
      %t21 = icmp ne i64 %t20, 0
      br i1 %t21, label %next, label %flush0
    flush0:
      %t22 = load float, ptr %t0
      %t23 = load float, ptr %t1
      %t24 = fadd float %t23, %t22
      store float %t24, ptr %t1
      store float 0.0, ptr %t0
"""
from __future__ import annotations

import ctypes

from .codeblock import LLVMBuilder
from .llvm_body import storage_cast
from .llvm_compile import compile_function
from .llvm_host import storage_dtypes
from .llvm_objcache import default_cache

__all__ = ["LEVELS", "level_power", "cascade_sum_function", "picked_cascade_function"]

LEVELS = 8
_MEMORY = {"f32": ("float", 4), "f64": ("double", 8), "f16": ("half", 2), "bf16": ("i16", 2)}
_functions: dict = {}


def level_power(batch):
    """ATen's ``max(4, ceil(log2(batch)) // 8)``.

    >>> level_power(128), level_power(2 ** 40)
    (4, 5)
    """
    return max(4, (max(batch, 1) - 1).bit_length() // LEVELS)


def cascade_sum_function(dtype):
    """``f(values, positions, n, level_power, out)``: the cascade sum of ``n`` values of IR dtype ``dtype`` (f32,
    f64, f16 or bf16) at batch positions ``positions`` (int64; a null pointer: ``0..n-1``), written to ``out[0]``
    in ``dtype``; None where the host cannot build it (f16 without F16C).

    >>> import numpy as np
    >>> f = cascade_sum_function("f32")
    >>> v, out = np.arange(1, 101, dtype=np.float32), np.zeros(1, np.float32)
    >>> f(v.ctypes.data, None, v.size, level_power(100), out.ctypes.data); float(out[0])
    5050.0
    """
    if dtype not in _functions:
        if dtype in ("f16", "bf16") and dtype not in storage_dtypes():
            _functions[dtype] = None
        else:
            name = f"jitorch_cascade_sum_{dtype}_v1"
            address = compile_function(_emit(dtype, name), name, default_cache())
            _functions[dtype] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                 ctypes.c_int64, ctypes.c_void_p)(address)
    return _functions[dtype]


def picked_cascade_function(dtype):
    """``f(logp, targets, n, row_stride, level_power, out)``: the cascade sum of ``-logp[i * row_stride +
    targets[i]]`` for ``i`` in ``0..n-1`` (``targets`` int64, each a column in range: the caller checked), written
    to ``out[0]``: a whole batch's ``nll_loss`` sum in one call, the gather and negation inside (the picked values'
    array, its negation and the sum's call took three times the sum on a small batch). ``dtype`` is f32 or f64.

    >>> import numpy as np
    >>> f = picked_cascade_function("f32")
    >>> logp, targets = -np.arange(6, dtype=np.float32).reshape(2, 3), np.array([2, 0])
    >>> out = np.zeros(1, np.float32)
    >>> f(logp.ctypes.data, targets.ctypes.data, 2, 3, level_power(2), out.ctypes.data); float(out[0])
    5.0
    """
    key = ("picked", dtype)
    if key not in _functions:
        name = f"jitorch_cascade_picked_{dtype}_v1"
        address = compile_function(_emit(dtype, name, picked=True), name, default_cache())
        _functions[key] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                           ctypes.c_int64, ctypes.c_void_p)(address)
    return _functions[key]


def _emit(dtype, name, picked=False):
    """The cascade sum's IR; ``picked`` (f32/f64): the values negated as they are gathered from the rows of
    ``%vals`` at ``%targets`` (`picked_cascade_function`), their positions ``0..n-1``."""
    mem, align = _MEMORY[dtype]
    ty = "double" if dtype == "f64" else "float"
    b = LLVMBuilder()

    def rounded(value):  # an addition's result rounded to the dtype (kept widened)
        if dtype in ("f16", "bf16"):
            return storage_cast(b, storage_cast(b, value, "f32", dtype), dtype, "f32")
        return value

    def add(x, y):
        return rounded(b.emit(f"fadd {ty} {x}, {y}"))

    b.label("entry")
    bins = [b.emit(f"alloca {ty}") for _ in range(LEVELS)]
    for slot in bins:
        b.line(f"store {ty} 0.0, ptr {slot}")
    mask = b.emit(f"sub i64 {b.emit('shl i64 1, %lp')}, 1")
    b.line(f"br i1 {b.emit('icmp sgt i64 %n, 0')}, label %loop, label %done")
    b.label("loop")
    b.line("%i = phi i64 [0, %entry], [%i.next, %next]")
    if picked:
        column = b.emit(f"load i64, ptr {b.emit('getelementptr i64, ptr %targets, i64 %i')}, align 8")
        at = b.emit(f"add i64 {b.emit('mul i64 %i, %stride')}, {column}")
        raw = b.emit(f"load {mem}, ptr {b.emit(f'getelementptr {mem}, ptr %vals, i64 {at}')}, align {align}")
        value = b.emit(f"fneg {ty} {raw}")
        b.line("br label %count")
        b.label("count")
        b.line("%b = phi i64 [%i, %loop]")
    else:
        raw = b.emit(f"load {mem}, ptr {b.emit(f'getelementptr {mem}, ptr %vals, i64 %i')}, align {align}")
        value = raw if dtype in ("f32", "f64") else storage_cast(b, raw, dtype, "f32")
        has_positions = b.emit("icmp ne ptr %pos, null")
        b.line(f"br i1 {has_positions}, label %read, label %count")
        b.label("read")
        read = b.emit(f"load i64, ptr {b.emit('getelementptr i64, ptr %pos, i64 %i')}, align 8")
        b.line("br label %count")
        b.label("count")
        b.line(f"%b = phi i64 [{read}, %read], [%i, %loop]")
    b.line(f"store {ty} {add(b.emit(f'load {ty}, ptr {bins[0]}'), value)}, ptr {bins[0]}")
    for j in range(LEVELS - 1):
        level_mask = b.emit(f"shl i64 {mask}, {b.emit(f'mul i64 %lp, {j}')}")
        stop = b.emit(f"icmp ne i64 {b.emit(f'and i64 %b, {level_mask}')}, 0")
        b.line(f"br i1 {stop}, label %next, label %flush{j}")
        b.label(f"flush{j}")
        low, high = (b.emit(f"load {ty}, ptr {bins[k]}") for k in (j, j + 1))
        b.line(f"store {ty} {add(high, low)}, ptr {bins[j + 1]}")
        b.line(f"store {ty} 0.0, ptr {bins[j]}")
    b.line("br label %next")
    b.label("next")
    b.line("%i.next = add i64 %i, 1")
    b.line(f"br i1 {b.emit('icmp slt i64 %i.next, %n')}, label %loop, label %done")
    b.label("done")
    total = "0.0"
    for slot in bins:
        total = add(total, b.emit(f"load {ty}, ptr {slot}"))
    out = total if dtype in ("f32", "f64") else storage_cast(b, total, "f32", dtype)
    b.line(f"store {mem} {out}, ptr %out, align {align}")
    b.line("ret void")
    second = "%targets" if picked else "%pos"
    head = (f"define void @{name}(ptr noalias nocapture readonly %vals, ptr noalias nocapture readonly {second}, "
            f"i64 %n, {'i64 %stride, ' if picked else ''}i64 %lp, ptr noalias nocapture writeonly %out) nounwind {{")
    return "\n".join([*b.declarations(), head, str(b), "}"]) + "\n"
