"""Text emission helpers: `CodeBlock` owns indentation, `LLVMBuilder` adds SSA names and intrinsic bookkeeping.

Emitters never build indentation or number temporaries by hand; they call these.
"""
from __future__ import annotations

import struct
from contextlib import contextmanager

LLVM_TYPES = {"f32": "float", "f64": "double", "i32": "i32", "i64": "i64", "bool": "i1"}


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

    def intrinsic(self, base, ty, *args, arg_types=None, overloads=None):
        """Call LLVM intrinsic ``base`` overloaded on ``ty`` (``llvm.fabs`` -> ``@llvm.fabs.f32``), or on the types
        ``overloads`` (``llvm.ldexp`` on ``("float", "i32")`` -> ``@llvm.ldexp.f32.i32``)."""
        arg_types = arg_types or [ty] * len(args)
        suffix = ".".join({"float": "f32", "double": "f64"}.get(t, t) for t in (overloads or (ty,)))
        name = f"{base}.{suffix}"
        self.declared[name] = f"declare {ty} @{name}({', '.join(arg_types)})"
        return self.emit(f"call {ty} @{name}({', '.join(f'{t} {a}' for t, a in zip(arg_types, args))})")

    def declarations(self):
        return sorted(self.declared.values())
