"""The frame of a serial rejection sampler as an LLVM function (`llvm_samplers` fills in one draw): ATen's CPU
samplers walk their output in row-major order, taking 53-bit uniforms from torch's stream one at a time, as many as
each draw's rejection rounds need. The stream is drawn ahead into a buffer, so the generated loop cannot know in
advance whether the buffer covers a draw: a draw that runs past its end is abandoned, its uniforms (and the cached
normal) put back as they were when it began, and the function returns that draw's index for the caller to refill
the buffer from the same stream and call again. A draw depends only on its parameters and the uniforms it reads,
so the restarted draw is the one the uninterrupted loop would make.

The generated function (llvmlite's IR builder, text compiled by `llvm_compile`)::

    i64 sampler(ptr first, ptr second, ptr out, i64 start, i64 stop, ptr uniforms, i64 n_uniforms, ptr state)

draws ``out[i]`` for ``i`` from ``start`` while the buffer lasts and returns the first index not drawn (``stop``
when all are). ``state`` is three int64: the next uniform's position in the buffer, whether a second Box-Muller
normal is cached (``normal_distribution<double>``'s, ATen's gamma sampler draws its normals through it) and that
normal's bits. libm functions are glibc's, called as external symbols declared ``nobuiltin`` (LLVM neither folds
nor replaces them), since ATen's results depend on their last bits; floating-point operations are never contracted.
"""
from __future__ import annotations

import math

import llvmlite.binding as llvm
from llvmlite import ir

__all__ = ["SamplerFrame", "DOUBLE", "FLOAT", "I64"]

DOUBLE, FLOAT, I64, BOOL = ir.DoubleType(), ir.FloatType(), ir.IntType(64), ir.IntType(1)
_PTR = ir.PointerType()
_TWO_PI = 2.0 * math.pi
# The glibc functions the samplers call, by name: (result type, argument types).
_LIBM = {name: (DOUBLE, (DOUBLE,)) for name in ("log", "exp", "lgamma", "log1p", "sin", "cos")}
_LIBM.update(pow=(DOUBLE, (DOUBLE, DOUBLE)), log1pf=(FLOAT, (FLOAT,)))


def const(value, ty=DOUBLE):
    """An LLVM constant of ``ty`` (float constants are rounded to ``ty`` as a C literal is)."""
    return ir.Constant(ty, value)


class SamplerFrame:
    """One sampler function being built: the element loop around a draw, the buffer's uniform reader, the cached
    normal, libm calls and mutable variables. ``draw(frame, index)`` emits one draw (it may branch back in loops and
    call ``uniform``/``normal``) and returns its value, of ``out_type``; ``frame.b`` is the builder."""

    def __init__(self, name, out_type, draw):
        self.module = ir.Module(name=name)
        self.module.triple = llvm.get_process_triple()
        self.name = name
        fn = ir.Function(self.module, ir.FunctionType(I64, [_PTR, _PTR, _PTR, I64, I64, _PTR, I64, _PTR]), name)
        fn.attributes.add("nounwind")
        self.function = fn
        self.first, self.second, out, start, stop, self._uniforms, self._n_uniforms, state = fn.args
        self._libm = {}
        entry, setup = fn.append_basic_block("entry"), fn.append_basic_block("setup")
        self._allocas = ir.IRBuilder(entry)  # variables live in the entry block, where mem2reg promotes them
        self.b = ir.IRBuilder(setup)
        self._pos, self._has_normal, self._normal = (self.var(I64), self.var(I64), self.var(DOUBLE))
        state_at = [self.b.gep(state, [const(k, I64)], source_etype=I64) for k in range(3)]
        for var, at in zip((self._pos, self._has_normal), state_at):
            self.b.store(self.b.load(at, typ=I64), var)
        self.b.store(self.b.bitcast(self.b.load(state_at[2], typ=I64), DOUBLE), self._normal)
        index = self.var(I64, start)
        head, body, short, done = (fn.append_basic_block(n) for n in ("element", "draw", "short", "done"))
        self.b.branch(head)

        self.b.position_at_end(head)
        i = self.b.load(index, typ=I64)
        self.b.cbranch(self.b.icmp_signed("<", i, stop), body, done)

        self.b.position_at_end(body)
        saved = [self.b.load(v, typ=t) for v, t in ((self._pos, I64), (self._has_normal, I64), (self._normal, DOUBLE))]
        self._short = short
        value = draw(self, i)
        self.b.store(value, self.b.gep(out, [i], source_etype=out_type))
        self.b.store(self.b.add(i, const(1, I64)), index)
        self.b.branch(head)

        self.b.position_at_end(short)  # the draw ran out of uniforms: undo it, and report where it began
        for var, value in zip((self._pos, self._has_normal, self._normal), saved):
            self.b.store(value, var)
        self.b.branch(done)

        self.b.position_at_end(done)
        for var, at in zip((self._pos, self._has_normal), state_at):
            self.b.store(self.b.load(var, typ=I64), at)
        self.b.store(self.b.bitcast(self.b.load(self._normal, typ=DOUBLE), I64), state_at[2])
        self.b.ret(self.b.load(index, typ=I64))
        self._allocas.branch(setup)

    # -- building blocks for a draw ---------------------------------------------------------------------------
    def var(self, ty, initial=None):
        """A mutable variable of ``ty`` (an entry-block alloca), set to ``initial`` where given."""
        slot = self._allocas.alloca(ty)
        slot.type = _PTR  # an opaque pointer (llvmlite types an alloca's pointer, which LLVM 17+ cannot parse)
        if initial is not None:
            self.b.store(initial, slot)
        return slot

    def block(self, name):
        return self.function.append_basic_block(name)

    def param(self, which, ty, index):
        """Element ``index`` of the ``first`` or ``second`` input array, of ``ty``."""
        base = self.first if which == 0 else self.second
        return self.b.load(self.b.gep(base, [index], source_etype=ty), typ=ty)

    def libm(self, name, *args):
        """A call of glibc's ``name`` (a key of ``_LIBM``), declared ``nobuiltin``."""
        fn = self._libm.get(name)
        if fn is None:
            result, params = _LIBM[name]
            fn = self._libm[name] = ir.Function(self.module, ir.FunctionType(result, params), name)
            fn.attributes.add("nobuiltin")
            fn.attributes.add("nounwind")
        return self.b.call(fn, args)

    def intrinsic(self, name, x):
        """``llvm.<name>`` (``sqrt``, ``floor``, ``ceil``, ``fabs``) of ``x``: exact, as C's."""
        fn = self.module.declare_intrinsic(f"llvm.{name}", [x.type])
        return self.b.call(fn, [x])

    def uniform(self):
        """The buffer's next 53-bit uniform (``uniform_real_distribution<double>(0, 1)``); where the buffer is
        spent, the draw is abandoned (see the module's docstring)."""
        pos = self.b.load(self._pos, typ=I64)
        got = self.block("uniform")
        self.b.cbranch(self.b.icmp_signed("<", pos, self._n_uniforms), got, self._short)
        self.b.position_at_end(got)
        value = self.b.load(self.b.gep(self._uniforms, [pos], source_etype=DOUBLE), typ=DOUBLE)
        self.b.store(self.b.add(pos, const(1, I64)), self._pos)
        return value

    def normal(self):
        """``normal_distribution<double>(0, 1)``'s next sample as ATen draws it: the cached one if any, else
        Box-Muller on two uniforms ``u1``, ``u2``: ``r = sqrt(-2 log1p(-u2))``, ``r cos(2 pi u1)`` returned and
        ``r sin(2 pi u1)`` cached."""
        result = self.var(DOUBLE)
        cached, fresh, joined = self.block("normal.cached"), self.block("normal.fresh"), self.block("normal")
        has = self.b.load(self._has_normal, typ=I64)
        self.b.cbranch(self.b.icmp_signed("!=", has, const(0, I64)), cached, fresh)

        self.b.position_at_end(cached)
        self.b.store(self.b.load(self._normal, typ=DOUBLE), result)
        self.b.store(const(0, I64), self._has_normal)
        self.b.branch(joined)

        self.b.position_at_end(fresh)
        u1 = self.uniform()
        u2 = self.uniform()
        radius = self.intrinsic("sqrt", self.b.fmul(const(-2.0), self.libm("log1p", self.b.fneg(u2))))
        theta = self.b.fmul(const(_TWO_PI), u1)
        self.b.store(self.b.fmul(radius, self.libm("sin", theta)), self._normal)
        self.b.store(const(1, I64), self._has_normal)
        self.b.store(self.b.fmul(radius, self.libm("cos", theta)), result)
        self.b.branch(joined)

        self.b.position_at_end(joined)
        return self.b.load(result, typ=DOUBLE)

    def ir(self):
        """The module as LLVM IR text."""
        return str(self.module)
