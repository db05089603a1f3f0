"""Text emission helpers: `CodeBlock` owns indentation, `LLVMBuilder` adds SSA names and intrinsic bookkeeping.

Emitters never build indentation or number temporaries by hand; they call these.
"""
from __future__ import annotations

import struct
from contextlib import contextmanager

# bfloat16 values live as their bits (i16): `llvm_body` converts them with integer operations, exactly.
LLVM_TYPES = {"f32": "float", "f64": "double", "i32": "i32", "i64": "i64", "bool": "i1", "f16": "half", "bf16": "i16"}


class CodeBlock:
    """Lines of code with an indentation depth.

    >>> cb = CodeBlock()
    >>> cb.line("entry:")
    >>> with cb.indented():
    ...     cb.line("ret void")
    >>> print(cb)
    entry:
      ret void
    """

    def __init__(self, indent="  "):
        self.lines, self.depth, self.indent = [], 0, indent

    def line(self, text):
        self.lines.append(self.indent * self.depth + text)

    @contextmanager
    def indented(self):
        self.depth += 1
        try:
            yield self
        finally:
            self.depth -= 1

    def __str__(self):
        return "\n".join(self.lines)


def llvm_const(value, ty):
    """An LLVM literal for ``value`` of type ``ty``; floats are written as exact hex doubles.

    >>> llvm_const(0.5, "float"), llvm_const(3, "i64"), llvm_const(float("inf"), "double")
    ('0x3FE0000000000000', '3', '0x7FF0000000000000')
    """
    if ty in ("float", "double"):
        if ty == "float":
            value = struct.unpack("<f", struct.pack("<f", float(value)))[0]
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]
    if ty == "i1":
        return "true" if value else "false"
    return str(int(value))


def vector_splat(dst, ty, lanes, scalar):
    """The instructions (unindented) that set ``dst`` to a ``<lanes x ty>`` vector with ``scalar`` in every lane: an
    insert into lane 0 and a shuffle of lane 0 everywhere, the form LLVM lowers to one broadcast.

    >>> print("\\n".join(vector_splat("%s", "float", 4, "%a")))
    %s.i = insertelement <4 x float> poison, float %a, i64 0
    %s = shufflevector <4 x float> %s.i, <4 x float> poison, <4 x i32> zeroinitializer
    """
    vt = f"<{lanes} x {ty}>"
    return [f"{dst}.i = insertelement {vt} poison, {ty} {scalar}, i64 0",
            f"{dst} = shufflevector {vt} {dst}.i, {vt} poison, <{lanes} x i32> zeroinitializer"]


def vector_mask(dst, lanes, bound, first=0):
    """The instructions (unindented) that set ``dst`` to the ``<lanes x i1>`` mask of lanes ``k`` with
    ``first + k < bound`` (signed; ``bound`` an i64 value): the lanes of a masked load or store that are in range.

    >>> print("\\n".join(vector_mask("%m", 4, "%left", first=4)))
    %m.b.i = insertelement <4 x i64> poison, i64 %left, i64 0
    %m.b = shufflevector <4 x i64> %m.b.i, <4 x i64> poison, <4 x i32> zeroinitializer
    %m = icmp slt <4 x i64> <i64 4, i64 5, i64 6, i64 7>, %m.b
    """
    ids = ", ".join(f"i64 {first + k}" for k in range(lanes))
    return vector_splat(f"{dst}.b", "i64", lanes, bound) + [f"{dst} = icmp slt <{lanes} x i64> <{ids}>, {dst}.b"]


class LLVMBuilder(CodeBlock):
    """A function body under construction: instructions are indented, labels are not, temporaries are numbered.

    >>> b = LLVMBuilder()
    >>> b.label("entry")
    >>> t = b.emit("fadd float %x, 1.0")
    >>> y = b.intrinsic("llvm.sqrt", "float", t)
    >>> print(b)
    entry:
      %t0 = fadd float %x, 1.0
      %t1 = call float @llvm.sqrt.f32(float %t0)
    >>> b.declarations()
    ['declare float @llvm.sqrt.f32(float)']
    """

    def __init__(self):
        super().__init__()
        self.depth, self.count, self.declared = 1, 0, {}

    def label(self, name):
        self.lines.append(f"{name}:")

    def emit(self, text):
        """Emit ``%tN = text`` and return ``%tN``."""
        name = f"%t{self.count}"
        self.count += 1
        self.line(f"{name} = {text}")
        return name

    def intrinsic(self, base, ty, *args, arg_types=None, overloads=None, flags=""):
        """Call LLVM intrinsic ``base`` overloaded on ``ty`` (``llvm.fabs`` -> ``@llvm.fabs.f32``), or on the types
        ``overloads`` (``llvm.ldexp`` on ``("float", "i32")`` -> ``@llvm.ldexp.f32.i32``), with fast-math ``flags``
        (``"nnan "``: ``call nnan float @llvm.maxnum.f32(...)``)."""
        arg_types = arg_types or [ty] * len(args)
        suffix = ".".join({"float": "f32", "double": "f64"}.get(t, t) for t in (overloads or (ty,)))
        name = f"{base}.{suffix}"
        self.declared[name] = f"declare {ty} @{name}({', '.join(arg_types)})"
        return self.emit(f"call {flags}{ty} @{name}({', '.join(f'{t} {a}' for t, a in zip(arg_types, args))})")

    def declarations(self):
        return sorted(self.declared.values())
