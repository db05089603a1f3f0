"""float16 <-> float32 conversion of dense CPU arrays through the host's F16C instructions (`codegen.llvm_half_cast`):
about 100x NumPy's element-by-element software conversion, and torch's bits (NumPy keeps the payload of a
signalling NaN that torch's conversion quiets).

>>> import numpy as np
>>> x = np.arange(4096, dtype=np.float32).reshape(64, 64).T / 3  # a transposed (column-major) float32 array
>>> h = astype(x, np.float16)  # None on a host without F16C
>>> h is None or bool(h.flags.f_contiguous and (h == x.astype(np.float16)).all())
True
"""
from __future__ import annotations

import numpy as np

from ..codegen.llvm_half_cast import half_cast_function
from ..runtime.host_cache import empty as host_empty
from ..runtime.host_pointer import data_address
from . import bf16_cast

__all__ = ["BF16", "astype", "astype_into", "binary", "bf16_binary", "bf16_row", "converted", "holds"]

# Below this many elements NumPy's loop costs less than the native call (~2 us); NumPy widens faster than it narrows.
MIN_SIZE = 512
_MIN_WIDEN = 2048

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
# Keyed by type characters: hashing a dtype object costs microseconds. (Byte order is checked apart.)
_PAIRS = {("e", "f"): ("f16", "f32"), ("f", "e"): ("f32", "f16"), ("e", "d"): ("f16", "f32")}


def astype(a, dtype):
    """``a.astype(dtype, order="K")`` for a dense float16 NumPy array into float32 or float64, or a float32 one into
    float16, where the host converts natively, and the same for bfloat16 (`bf16_cast`); None for anything else (the
    caller keeps NumPy's conversion)."""
    if type(a) is not np.ndarray or a.size < MIN_SIZE:
        return None
    dtype = np.dtype(dtype)
    pair = _PAIRS.get((a.dtype.char, dtype.char))
    if pair is None:  # bfloat16 ('E') <-> float32 as a generated kernel (any host: its conversion is integer code)
        return bf16_cast.astype(a, dtype) if "E" in (a.dtype.char, dtype.char) else None
    if not (a.dtype.isnative and dtype.isnative and a.flags.aligned) or (
            pair[0] == "f16" and a.size < _MIN_WIDEN):  # (the loop's loads are declared aligned)
        return None
    order = bf16_cast.dense_order(a)
    if order is None:
        return None
    convert = half_cast_function(*pair)
    if convert is None:
        return None
    wide = _F32 if dtype == _F64 else dtype
    # (C order from the host cache: a large buffer comes with its pages already mapped)
    out = host_empty(a.shape, wide) if order == "C" else np.empty(a.shape, wide, order=order)
    convert(data_address(a), data_address(out), a.size)
    return out.astype(_F64, order="K") if dtype == _F64 else out  # (float16 -> float32 -> float64 is exact)


def astype_into(a, out):
    """``np.copyto(out, a)`` for a float16 or bfloat16 array ``a`` and a float32 ``out`` (or the reverse) of one
    shape, both dense in one memory order, converted natively straight into ``out`` (``copy_`` between dtypes: no
    temporary to copy in afterwards); False, with nothing written, where that does not apply."""
    if type(a) is not np.ndarray or type(out) is not np.ndarray or a.shape != out.shape or a.size < _MIN_WIDEN or \
            not (a.dtype.isnative and out.dtype.isnative and a.flags.aligned and out.flags.aligned and
                 out.flags.writeable):
        return False
    if not (a.flags.c_contiguous and out.flags.c_contiguous or a.flags.f_contiguous and out.flags.f_contiguous):
        return False
    chars = (a.dtype.char, out.dtype.char)
    if chars in (("e", "f"), ("f", "e")):
        convert = half_cast_function(*_PAIRS[chars])
    elif chars in (("E", "f"), ("f", "E")) and _BF16 in (a.dtype, out.dtype):
        convert = bf16_cast.converter(*bf16_cast.PAIRS[chars])
    else:
        return False
    if convert is None or np.may_share_memory(a, out):
        return False
    convert(data_address(a), data_address(out), a.size)
    return True


def converted(a, dtype):
    """``a.astype(dtype, order="K", copy=False)``, natively where `astype` converts."""
    out = astype(a, dtype) if a.dtype != dtype else None
    return a.astype(dtype, order="K", copy=False) if out is None else out


# NumPy's float16 loops of these widen both operands to float32, compute and narrow the result once; so does torch.
# Narrowing a float32 sum, difference, product or quotient of two halves rounds it as if computed exactly (24 bits
# >= 2 * 11 + 2: double rounding is innocuous), so the three native passes give NumPy's and torch's bits.
# Comparisons of the widened values are exact, and their bool results need no narrowing.
EXACT_IN_FLOAT32 = frozenset({np.add, np.subtract, np.multiply, np.true_divide, np.maximum, np.minimum, np.greater,
                              np.greater_equal, np.less, np.less_equal, np.equal, np.not_equal})

_KEEP_FIRST_ON_TIES = frozenset({np.maximum, np.minimum})


def binary(ufunc, x, y, number_in_float32=False):
    """``ufunc(x, y)`` for a float16 array ``x`` (dense, at least `_MIN_WIDEN` elements) and a float16 array ``y``
    (broadcastable) or a Python number, as NumPy computes it, through native widening and narrowing; None where that
    does not apply. A number is rounded to float16 first (NumPy's and ATen's add and sub), or with
    ``number_in_float32`` taken as float32 (ATen's mul and div: its "opmath"). C-contiguous operands of one shape
    (or a number) take one generated pass (`_one_pass`), the others three: widen, compute, narrow. A bfloat16 ``x``
    goes to `bf16_binary`."""
    if ufunc not in EXACT_IN_FLOAT32 or x.dtype != _F16 or x.size < _MIN_WIDEN:
        return bf16_binary(ufunc, x, y, number_in_float32) if x.dtype == _BF16 else None
    if type(y) in (int, float):
        if not holds(y):  # overflow, as NumPy warns of it, stays NumPy's
            return None
        wide_y = np.float32(y) if number_in_float32 else scalar_as(y, _F16)
        if (out := _one_pass(ufunc, x, wide_y)) is not None:
            return out
    elif getattr(y, "dtype", None) != _F16:
        return None
    elif y.shape == x.shape and (out := _one_pass(ufunc, x, y)) is not None:
        return out
    else:
        wide_y = astype(y, _F32) if y.size >= _MIN_WIDEN else None
        wide_y = y.astype(_F32) if wide_y is None else wide_y
    wide_x = astype(x, _F32)
    if wide_x is None:
        return None
    # Of two equal zeros float16's maximum/minimum keep the first operand, float32's the second: swapped, the same.
    out = ufunc(wide_y, wide_x) if ufunc in _KEEP_FIRST_ON_TIES else ufunc(wide_x, wide_y)
    if out.dtype != _F32:
        return out
    narrow = astype(out, _F16)
    return out.astype(_F16) if narrow is None else narrow


BF16 = _BF16 = bf16_cast.BF16
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def bf16_binary(ufunc, x, y, number_in_float32=False):
    """`binary` for a bfloat16 array ``x`` (at least `bf16_cast.MIN_SIZE` elements): ``y`` a bfloat16 array of its
    shape or a Python number, as ATen computes it (float32 math, the result rounded once: exact for add, sub, mul and
    div of two bfloat16 values, 24 >= 2 * 8 + 2 bits), in one generated pass; None elsewhere (maximum and minimum,
    broadcasts, other layouts), where ml_dtypes' loops give the same bits. A number is rounded to bfloat16 through
    float32, as ATen's Scalar conversion does, or with ``number_in_float32`` taken as float32 (mul and div)."""
    if ufunc not in _ONE_PASS or x.dtype != _BF16 or x.size < bf16_cast.MIN_SIZE:
        return None
    if type(y) in (int, float):
        if not -_FLOAT32_MAX <= y <= _FLOAT32_MAX:  # NaN, inf and float32 overflows stay ml_dtypes'
            return None
        y = np.float32(y) if number_in_float32 else scalar_as(y, _BF16)
    elif getattr(y, "dtype", None) != _BF16 or y.shape != x.shape:
        return None
    return _one_pass(ufunc, x, y)


def bf16_row(xp, ufunc, a, b, number_in_float32=False, commutes=False):
    """For a row's kernel: `bf16_binary` of ``a`` and ``b`` where they are NumPy operands, with a number first
    swapped where ``ufunc`` ``commutes``; None where that does not apply."""
    if getattr(a, "dtype", None) is not _BF16:  # (NumPy keeps one bfloat16 dtype object: float32 rows pay ~0.1 us)
        if not commutes or getattr(b, "dtype", None) is not _BF16 or type(a) not in (int, float):
            return None
        a, b = b, a
    return bf16_binary(ufunc, a, b, number_in_float32) if xp is np else None


# ufunc -> IR primitive of the one-pass kernels (not maximum/minimum: their ties of zeros are NumPy's own).
_ONE_PASS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div", np.greater: "gt",
             np.greater_equal: "ge", np.less: "lt", np.less_equal: "le", np.equal: "eq", np.not_equal: "ne"}
_COMPARES = frozenset({"gt", "ge", "lt", "le", "eq", "ne"})
_kernels: dict = {}


def _one_pass(ufunc, x, y):
    """``ufunc(x, y)`` for C-contiguous float16 (or bfloat16) arrays of one shape, or ``y`` a float32 number, as one
    generated kernel (the half loads widened, the float32 result narrowed once: `codegen.llvm_body.storage_cast`);
    None where that does not apply."""
    name = _ONE_PASS.get(ufunc)
    number = type(y) is np.float32
    if name is None or not x.flags.c_contiguous or not (number or y.flags.c_contiguous) or not (
            x.dtype.isnative and (number or y.dtype.isnative)):
        return None
    storage = "bf16" if x.dtype == _BF16 else "f16"
    key = (name, number, storage)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = _one_pass_kernel(name, number, storage)
    if kernel is False:
        return None
    from .native_eager import _GRAIN, launch_arrays

    out = host_empty(x.shape, np.bool_ if name in _COMPARES else x.dtype)
    launch_arrays(kernel, [x, np.array([y]) if number else y, out], x.size, _GRAIN, x.size)
    return out


def _one_pass_kernel(name, number, storage):
    from ..codegen.ir import Buffer, Kernel, Store, load, op
    from ..codegen.llvm_compile import compile_kernel
    from ..codegen.llvm_host import storage_dtypes
    from ..codegen.llvm_objcache import default_cache
    from .native_eager import _GENERIC_SIZE

    if storage not in storage_dtypes():
        return False
    wide = op("cast", load(0, storage), dtype="f32")
    other = load(1, "f32") if number else op("cast", load(1, storage), dtype="f32")
    value = op(name, wide, other)
    value = value if value.dtype == "bool" else op("cast", value, dtype=storage)
    buffers = (Buffer(storage, (1,)), Buffer("f32", (0,)) if number else Buffer(storage, (1,)),
               Buffer(value.dtype, (1,)))
    return compile_kernel(Kernel((_GENERIC_SIZE,), buffers, (Store(2, value),)), cache=default_cache())


def scalar_as(number, dtype):
    """A Python number as ATen converts a Scalar for a float16/bfloat16 op (to float32, then to ``dtype``), widened
    back to float32 (exactly) for the float32 arithmetic that follows."""
    return np.float32(dtype.type(np.float32(number)))


def holds(number, dtype=_F16):
    """Whether a Python number is within float16's range (or bfloat16's: float32's, as it rounds through float32;
    NaN is not)."""
    if dtype == _BF16:
        return -_FLOAT32_MAX <= number <= _FLOAT32_MAX
    return -65504 <= number <= 65504
