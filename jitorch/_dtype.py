"""dtypes, the default dtype, type promotion exactly as ``torch.result_type``, and ``layout``.

>>> import jitorch
>>> jitorch.result_type(jitorch.tensor([1, 2]), 2.5)
jitorch.float32
"""
from __future__ import annotations

import builtins

import ml_dtypes
import numpy as np

__all__ = ["dtype", "get_default_dtype", "set_default_dtype", "promote_types", "result_type", "finfo", "iinfo",
           "can_cast", "layout", "strided"]

# Category ranks: a higher category wins in mixed promotion.
BOOL, INT, FLOAT, COMPLEX = 0, 1, 2, 3


class dtype:
    """A jitorch dtype: wraps the NumPy dtype that stores it."""

    __slots__ = ("name", "np", "category", "itemsize", "is_signed", "_rank")

    def __init__(self, name, np_dtype, category, rank):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.category = category
        self.itemsize = self.np.itemsize
        self.is_signed = category != BOOL and not name.startswith("uint")
        self._rank = rank

    @property
    def is_floating_point(self):
        return self.category == FLOAT

    @property
    def is_complex(self):
        return self.category == COMPLEX

    def to_real(self):
        return {"complex64": float32, "complex128": float64}.get(self.name, self)

    def to_complex(self):
        if self.category == COMPLEX:
            return self
        if self.category != FLOAT:
            raise RuntimeError(f"Unknown Complex ScalarType for {self}: to_complex() takes a floating or complex dtype")
        return complex128 if self is float64 else complex64  # no complex32: the half types widen to complex64

    def __repr__(self):
        return f"jitorch.{self.name}"

    def __reduce__(self):
        return (_dtype_by_name, (self.name,))


def _dtype_by_name(name):
    return _BY_NAME[name]


bool = dtype("bool", np.bool_, BOOL, 0)  # noqa: A001 - torch exposes torch.bool
uint8 = dtype("uint8", np.uint8, INT, 1)
int8 = dtype("int8", np.int8, INT, 1)
int16 = dtype("int16", np.int16, INT, 2)
int32 = dtype("int32", np.int32, INT, 3)
int64 = dtype("int64", np.int64, INT, 4)
float16 = dtype("float16", np.float16, FLOAT, 1)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16, FLOAT, 1)
float32 = dtype("float32", np.float32, FLOAT, 2)
float64 = dtype("float64", np.float64, FLOAT, 3)
complex64 = dtype("complex64", np.complex64, COMPLEX, 2)
complex128 = dtype("complex128", np.complex128, COMPLEX, 3)
# torch's limited unsigned types: storage, conversion, indexing and most same-dtype ops; promotion with any other
# dtype but a floating one is an error (a floating one wins, as usual).
uint16 = dtype("uint16", np.uint16, INT, 2)
uint32 = dtype("uint32", np.uint32, INT, 3)
uint64 = dtype("uint64", np.uint64, INT, 4)
LIMITED_UNSIGNED = (uint16, uint32, uint64)

ALL = (bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64, complex128, uint16,
       uint32, uint64)
_BY_NAME = {d.name: d for d in ALL}
ALIASES = {
    "half": float16, "float": float32, "double": float64, "long": int64, "int": int32, "short": int16,
    "cfloat": complex64, "cdouble": complex128, "chalf": complex64,
}
_BY_NAME.update(ALIASES)
FROM_NP = {d.np: d for d in ALL}
HALF_NP = (float16.np, bfloat16.np)  # the NumPy dtypes of the half types, which ATen often computes in float32


def from_numpy_dtype(np_dtype) -> dtype:
    try:
        return FROM_NP[np_dtype]
    except KeyError:
        raise TypeError(
            f"can't convert np.ndarray of type numpy.{np.dtype(np_dtype).type.__name__}. The only supported types are: "
            "float64, float32, float16, bfloat16, complex64, complex128, int64, int32, int16, int8, uint64, uint32, "
            "uint16, uint8, and bool."
        ) from None


def to_dtype(d) -> dtype:
    """Accepts a jitorch dtype, a NumPy dtype, a Python type or a name."""
    if isinstance(d, dtype):
        return d
    if d is builtins.float:
        return float64
    if d is builtins.int:
        return int64
    if d is builtins.bool:
        return bool
    if d is builtins.complex:
        return complex128
    if isinstance(d, str):
        if d in _BY_NAME:
            return _BY_NAME[d]
        raise TypeError(f"unknown dtype name {d!r}")
    return from_numpy_dtype(np.dtype(d))


_default_float = float32


def get_default_dtype() -> dtype:
    """The dtype of floating tensors created from Python floats (float32 unless changed)."""
    return _default_float


def set_default_dtype(d) -> None:
    """Set the default floating dtype; only float32 and float64 (and float16/bfloat16) are allowed, as in PyTorch."""
    global _default_float
    d = to_dtype(d)
    if d.category != FLOAT:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default_float = d


def default_complex() -> dtype:
    return complex128 if _default_float is float64 else complex64


def _promote_same_category(a: dtype, b: dtype) -> dtype:
    if a.category == INT and (a is uint8) != (b is uint8):
        signed = b if a is uint8 else a
        return int16 if signed is int8 else signed
    if a.category == FLOAT and {a.name, b.name} == {"float16", "bfloat16"}:
        return float32
    return a if a._rank >= b._rank else b


def _promote(a: dtype, b: dtype) -> dtype | None:
    if a is b:
        return a
    if (a in LIMITED_UNSIGNED or b in LIMITED_UNSIGNED) and FLOAT not in (a.category, b.category):
        return None  # torch refuses all but a floating partner: see `_refused`
    if a.category != b.category:
        lo, hi = (a, b) if a.category < b.category else (b, a)
        if hi.category == COMPLEX and lo.category == FLOAT and lo is float64:
            return complex128
        return hi
    return _promote_same_category(a, b)


_PROMOTE = {(a, b): _promote(a, b) for a in ALL for b in ALL}
_TORCH_NAMES = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
                "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64", "complex64": "ComplexFloat",
                "complex128": "ComplexDouble"}


def _refused(a, b):
    return RuntimeError(f"Promotion for uint16, uint32, uint64 types is not supported, attempted to promote "
                        f"{_TORCH_NAMES[a.name]} and {_TORCH_NAMES[b.name]}")


def _promoted(a, b):
    result = _PROMOTE[a, b]
    if result is None:
        raise _refused(a, b)
    return result


def promote_types(a, b) -> dtype:
    """The smallest dtype both promote to, as ``torch.promote_types``."""
    return _promoted(to_dtype(a), to_dtype(b))


def scalar_dtype(x) -> dtype:
    """The dtype a Python scalar takes when it is a weak operand (float -> default dtype)."""
    t = type(x)
    if t is builtins.bool or t is np.bool_:
        return bool
    if t is builtins.float:
        return _default_float
    if t is builtins.int:
        return int64
    if t is builtins.complex:
        return default_complex()
    if isinstance(x, np.generic):  # PyTorch treats NumPy scalars like the Python numbers they hold
        return scalar_dtype(x.item())
    if isinstance(x, (builtins.int, builtins.float)):  # subclasses (a traced size: compile's SymSize)
        return scalar_dtype(builtins.float(x) if isinstance(x, builtins.float) else builtins.int(x))
    raise TypeError(f"expected a Tensor or a number, got {t.__name__}")


def _combine_categories(higher, lower):
    # Mirrors c10's ResultTypeState combination: a lower-priority operand only matters if its category is higher.
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.category == COMPLEX:
        return higher
    if lower.category == COMPLEX:
        return higher.to_complex() if higher.category == FLOAT else lower
    if higher.category == FLOAT:
        return higher
    if higher is bool or lower.category == FLOAT:
        return _promoted(higher, lower)
    return higher


def result_type_of(dims, zero_dims, scalars):
    """Promotion of dimensioned tensor dtypes, 0-d tensor dtypes and weak Python-scalar dtypes (lists of dtypes)."""
    acc = [None, None, None]
    for slot, group in enumerate((dims, zero_dims, scalars)):
        for d in group:
            acc[slot] = d if acc[slot] is None else _promoted(acc[slot], d)
    return _combine_categories(acc[0], _combine_categories(acc[1], acc[2]))


def result_type(*operands) -> dtype:
    """``torch.result_type``: the dtype an arithmetic op over these tensors and scalars computes in."""
    from ._tensor import Tensor

    dims, zeros, scalars = [], [], []
    for x in operands:
        if isinstance(x, Tensor):
            (dims if x.dim() else zeros).append(x.dtype)  # dim(): a sparse tensor has no array to ask
        else:
            d = scalar_dtype(x)
            scalars.append(int64 if d is int64 else d)
    return result_type_of(dims, zeros, scalars)


def can_cast(from_, to) -> builtins.bool:
    """``torch.can_cast``: False when the cast lowers the category (float -> int, complex -> float, int -> bool)."""
    return to_dtype(from_).category <= to_dtype(to).category


# c10's names in its "value cannot be converted to type X without overflow" error.
_C_NAMES = {"uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int", "int64": "int64_t",
            "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
            "float16": "c10::Half", "bfloat16": "c10::BFloat16", "float32": "float", "float64": "double"}


def check_parsed_int(value):
    """torch's argument parser reads a Python int Scalar as int64 or uint64 before any dtype enters: refuses
    others."""
    if value.__class__ is int and not -2 ** 63 <= value < 2 ** 64:
        raise OverflowError("can't convert negative int to unsigned" if value < 0 else "int too big to convert")


# The largest finite value of each floating dtype that can overflow from a Python scalar (an int64 never
# overflows float32 or bfloat16, but 70000 overflows float16).
_FLOAT_MAX = {float16: 65504.0, bfloat16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
              float32: float(np.finfo(np.float32).max)}


def checked_scalar(value, d, op_name=None, reduced_floats=True):
    """A Python scalar written into a ``d`` tensor (fill, setitem, full, masked_fill), range-checked as c10's
    ``checked_convert``: torch refuses a value that would overflow ``d`` (complex with an imaginary part into a real
    dtype, NaN/inf or out-of-range numbers into an integer dtype, a finite number past a float dtype's largest)
    instead of wrapping it; integers within the magnitude of an unsigned type (``-1`` into uint8) wrap as C++ does.
    ``reduced_floats=False``: setitem does not check half/bfloat16 ranges (the value goes through a double tensor).
    Returns the value NumPy can store."""
    if value.__class__ is float and d.category == FLOAT:  # (the common case first)
        limit = _FLOAT_MAX.get(d)
        # c10 refuses a finite number past the largest finite value (rounding aside); inf and nan convert
        if limit is None or -limit <= value <= limit or value != value or abs(value) == float("inf") or not (
                reduced_floats or d is float32):
            return value
        raise _overflow(d, op_name)
    if isinstance(value, np.generic):
        value = value.item()
    if value.__class__ is int and not -2 ** 63 <= value < 2 ** 64:
        check_parsed_int(value)
    if d.category == COMPLEX or d.category == BOOL or isinstance(value, builtins.bool):
        return value
    if isinstance(value, complex):
        if value.imag != 0:
            raise _overflow(d, op_name)
        value = value.real
    if d.category == FLOAT:
        if isinstance(value, float):
            return checked_scalar(float(value), d, op_name, reduced_floats)  # (a float subclass: plain)
        if (reduced_floats or d is float32) and not -_FLOAT_MAX.get(d, 2 ** 64) <= value <= _FLOAT_MAX.get(d, 2 ** 64):
            raise _overflow(d, op_name)
        return float(value) if value >= 2 ** 63 else value  # (a uint64 Scalar)
    info = np.iinfo(d.np)
    if isinstance(value, float):
        if not np.isfinite(value) or not info.min <= value <= info.max:
            raise _overflow(d, op_name)
        return int(value)
    if d.name == "uint8" and -info.max <= value < 0:
        return value % (info.max + 1)  # C++'s unsigned wrap, which c10 lets through for integers
    if not info.min <= value <= info.max:
        raise _overflow(d, op_name)
    return value


def _overflow(d, op_name):
    return RuntimeError(f"value cannot be converted to type {_C_NAMES[d.name] if op_name is None else op_name} "
                        "without overflow")


class finfo:
    """Machine limits of a floating dtype, as ``torch.finfo``."""

    def __init__(self, type=None):
        d = to_dtype(type) if type is not None else _default_float
        if d.category == COMPLEX:  # torch describes the real and imaginary parts
            d = d.to_real()
        if d.category != FLOAT:
            raise TypeError("torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                            "'torch.finfo'")
        info = ml_dtypes.finfo(d.np) if d is bfloat16 else np.finfo(d.np)
        self.dtype = d.name
        self.bits = info.bits
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = self.smallest_normal = float(info.tiny)
        self.resolution = 10.0 ** -int(info.precision)  # torch's: exactly 1e-06 for float32, not its float32 value

    def __repr__(self):
        # C++ stream formatting, as torch prints it: six significant digits (``:g``)
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype, as ``torch.iinfo``."""

    def __init__(self, type):
        d = to_dtype(type)
        if d.category == BOOL:
            raise TypeError("torch.bool is not supported by torch.iinfo")
        if d.category != INT:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to handle 'torch.iinfo'")
        info = np.iinfo(d.np)
        self.dtype = d.name
        self.bits = info.bits
        self.max = int(info.max)
        self.min = int(info.min)

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


class layout:
    """``torch.layout``: how a tensor's elements are stored. jitorch tensors are dense (``strided``) or
    ``sparse_coo`` (jitorch/sparse); torch's other layouts exist as names, so checkpoints and comparisons that carry
    them round-trip. One object per name:
    pickling writes the name (``jitorch.save`` as torch's ``torch.serialization._get_layout('torch.strided')``).

    >>> import pickle
    >>> strided, pickle.loads(pickle.dumps(strided)) is strided
    (jitorch.strided, True)
    """

    __slots__ = ("name",)
    _by_name: dict = {}

    def __new__(cls, name):
        known = cls._by_name.get(name)
        if known is None:
            known = cls._by_name[name] = object.__new__(cls)
            known.name = name
        return known

    def __repr__(self):
        return f"jitorch.{self.name}"

    def __reduce__(self):
        return self.name  # a module global of this module, as torch.layout pickles


strided = layout("strided")
sparse_coo, sparse_csr, sparse_csc = layout("sparse_coo"), layout("sparse_csr"), layout("sparse_csc")
sparse_bsr, sparse_bsc, jagged = layout("sparse_bsr"), layout("sparse_bsc"), layout("jagged")
_mkldnn = layout("_mkldnn")


def fills_exactly(value, dtype):
    """Whether ``ndarray.fill(value)`` stores what the fill row's ``full`` does (the same conversion of a checked
    scalar ``value``): floats into NumPy's float types, integers into integer types, and into float types while a
    double holds them exactly."""
    kind = dtype.kind
    if type(value) is float:
        return kind == "f"
    return type(value) is int and (kind in "iu" or kind == "f" and -_EXACT_IN_DOUBLE <= value <= _EXACT_IN_DOUBLE)


_EXACT_IN_DOUBLE = 1 << 53
