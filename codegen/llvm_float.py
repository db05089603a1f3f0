"""Floating-point arithmetic emitted into an `LLVMBuilder`: `Float` keeps the formulas of `llvm_math` and
`llvm_trig` readable, and adds the error-free transformations (`Float.two_sum`, `Float.two_prod`) that carry a
result's rounding error exactly, for the arguments that need more than one double of precision.
"""
from __future__ import annotations

import struct

from .codeblock import llvm_const

# (integer type of the same width, mantissa bits, exponent bias, exponent mask) per floating type.
INT_FIELDS = {"float": ("i32", 23, 127, 0xFF), "double": ("i64", 52, 1023, 0x7FF)}


class Float:
    """Arithmetic on one floating type, emitting into a builder.

    >>> from .codeblock import LLVMBuilder
    >>> f = Float(LLVMBuilder(), "double")
    >>> s, err = f.two_sum("%a", "%b")
    >>> print(f.b)
      %t0 = fadd double %a, %b
      %t1 = fsub double %t0, %a
      %t2 = fsub double %t0, %t1
      %t3 = fsub double %a, %t2
      %t4 = fsub double %b, %t1
      %t5 = fadd double %t3, %t4
    """

    def __init__(self, b, ty):
        self.b, self.ty = b, ty

    def c(self, v):
        return llvm_const(v, self.ty)

    def bin(self, opcode, x, y):
        return self.b.emit(f"{opcode} {self.ty} {x}, {y}")

    def add(self, x, y):
        return self.bin("fadd", x, y)

    def sub(self, x, y):
        return self.bin("fsub", x, y)

    def mul(self, x, y):
        return self.bin("fmul", x, y)

    def div(self, x, y):
        return self.bin("fdiv", x, y)

    def neg(self, x):
        return self.b.emit(f"fneg {self.ty} {x}")

    def cmp(self, pred, x, y):
        return self.b.emit(f"fcmp {pred} {self.ty} {x}, {y}")

    def select(self, cond, x, y):
        return self.b.emit(f"select i1 {cond}, {self.ty} {x}, {self.ty} {y}")

    def call(self, name, *args):
        return self.b.intrinsic(f"llvm.{name}", self.ty, *args)

    def fma(self, x, y, z):
        """x * y + z as ``llvm.fmuladd``: one fused instruction where the target has FMA, mul+add elsewhere."""
        return self.call("fmuladd", x, y, z)

    def poly(self, x, coeffs):
        """Horner evaluation of ``coeffs[0] + coeffs[1] x + ...`` (one fmuladd per coefficient)."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def isnan(self, x):
        return self.cmp("uno", x, x)

    def two_sum(self, x, y):
        """(s, e) with s = fl(x + y) and s + e = x + y exactly, whichever operand is larger (Knuth's 2Sum)."""
        s = self.add(x, y)
        y_part = self.sub(s, x)
        x_part = self.sub(s, y_part)
        return s, self.add(self.sub(x, x_part), self.sub(y, y_part))

    def fast_two_sum(self, x, y):
        """(s, e) with s + e = x + y exactly, given |x| >= |y| or x a multiple of ulp(y) (Dekker's Fast2Sum):
        ``%t0 = fadd double %x, %y``, ``%t1 = fsub double %t0, %x``, ``%t2 = fsub double %y, %t1``."""
        s = self.add(x, y)
        return s, self.sub(y, self.sub(s, x))

    def two_prod(self, x, y):
        """(p, e) with p = fl(x * y) and p + e = x * y exactly: e is one ``llvm.fma`` (always fused, unlike
        `fma`, whose unfused fallback would lose the error this exists to keep): ``%t0 = fmul double %a, %b``,
        ``%t1 = fneg double %t0``, ``%t2 = call double @llvm.fma.f64(double %a, double %b, double %t1)``."""
        p = self.mul(x, y)
        return p, self.call("fma", x, y, self.neg(p))


def float_bits(value, ty):
    """The bit pattern of ``value`` as a ``ty`` (``float`` or ``double``), an unsigned integer.

    >>> hex(float_bits(1.0, "float")), hex(float_bits(-2.0, "double"))
    ('0x3f800000', '0xc000000000000000')
    """
    fmt = "<f" if ty == "float" else "<d"
    return int.from_bytes(struct.pack(fmt, value), "little")
