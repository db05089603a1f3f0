"""Kernel-body emission for `llvm_emit`: the values at one point of the iteration space (loads, constants, casts,
comparisons, arithmetic and the `llvm_math`/`llvm_trig` functions), and what becomes of them: a store, an
accumulation into a reduction's slot, or an index reduction's (best, flat index) update.

A load or store at index ``(i_0, ..., i_n)`` addresses ``offset + sum(i_d * stride_d)`` of its buffer (zero strides
drop out); booleans are ``i1`` values and ``i8`` in memory. `BodyEmitter` is the base of `llvm_emit`'s emitter, which
owns the loops around these bodies and sets the attributes it reads (``k``, ``b``, ``nouter``, ``accs``,
``acc_values``, ``trig_small``).

>>> from jitorch.codegen.codeblock import LLVMBuilder
>>> b = LLVMBuilder()
>>> _cast(b, "%x", "f32", "i64"), _float_op(b, "mul", ["%x", "%y"], "float")
('%t3', '%t4')
>>> print(b)
  %t0 = fptosi float %x to i64
  %t1 = call float @llvm.fabs.f32(float %x)
  %t2 = fcmp olt float %t1, 0x43E0000000000000
  %t3 = select i1 %t2, i64 %t0, i64 -9223372036854775808
  %t4 = fmul float %x, %y
"""
from __future__ import annotations

from . import llvm_fmod, llvm_math, llvm_trig
from .codeblock import LLVM_TYPES, llvm_const
from .ir import ARG_REDUCTIONS, FLOATS, STORAGE
from .ir_params import Sym

_MEM_TYPES = dict(LLVM_TYPES, bool="i8")
_FCMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
_ICMP = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}


class BodyEmitter:
    """The per-point half of a kernel emitter: evaluates expression DAGs into LLVM values and stores or accumulates
    them (subclassed by `llvm_emit`'s emitter, which provides the loops and the reduction slots)."""

    def _accumulate(self, store, slot, value, flags="reassoc ", ty=None):
        b, dt = self.b, store.value.dtype
        ty = ty or LLVM_TYPES[dt]
        old = b.emit(f"load {ty}, ptr {slot}")
        if dt in FLOATS:
            if store.reduce in ("sum", "prod"):
                new = b.emit(f"{'fadd' if store.reduce == 'sum' else 'fmul'} {flags}{ty} {old}, {value}")
            else:
                name = {"max": "llvm.maximum", "min": "llvm.minimum", "maxnum": "llvm.maxnum"}[store.reduce]
                # maxnum serves only row statistics that a nan poisons anyway (softmax's shift: the nan element's
                # exp makes the row's sum nan, whatever max it got), so its nan handling may go: ``nnan`` lets the
                # vectorizer keep a plain vmaxps per lane (LLVM otherwise checks every vector for nan and leaves
                # for a scalar loop; row softmax on 64-wide rows took 1.4x as long). LLVM 22 wants ``nsz`` too: with
                # ``nnan`` alone it still checks each vector for nan and leaves rows under 64 floats to a scalar
                # loop (softmax over 48-wide rows 1.5 -> 1.2 ns an element). A tie of -0.0 and 0.0 may give either,
                # which shifts an element by the same zero.
                new = b.intrinsic(name, ty, old, value, flags="nnan nsz " if store.reduce == "maxnum" else "")
        elif dt == "bool":
            new = b.emit(f"{'or' if store.reduce in ('sum', 'max', 'maxnum') else 'and'} i1 {old}, {value}")
        else:
            opcode = {"sum": "add", "prod": "mul"}.get(store.reduce)
            new = b.emit(f"{opcode} {ty} {old}, {value}") if opcode else \
                b.intrinsic(f"llvm.s{store.reduce[:3]}", ty, old, value)
        b.line(f"store {ty} {new}, ptr {slot}")

    def _extremum_in_block(self, store, j, value):
        """A float max/min within a block: ``llvm.maxnum`` with ``nnan nsz`` (one vector max per vector: LLVM's
        NaN-propagating ``llvm.maximum`` takes a compare and blends, and its reduction was 3.6x slower than torch's
        amax over 64-wide rows; without ``nsz`` the loop beside the flag is not vectorized; which of -0.0 and 0.0 a
        tie gives is unspecified, as in torch, whose lanes decide it) and ``flag |= isnan(value)``;
        `_nan_if_flagged` restores the NaN at the block's end. Emits, per point::

            %t5 = call nnan nsz float @llvm.maxnum.f32(float %t4, float %t3)
            %t6 = fcmp uno float %t3, %t3
        """
        b, ty = self.b, LLVM_TYPES[store.value.dtype]
        slot, flag = self.accs[j][1], self.nan_flags[j]
        old = b.emit(f"load {ty}, ptr {slot}")
        new = b.intrinsic("llvm.maxnum" if store.reduce == "max" else "llvm.minnum", ty, old, value, flags="nnan nsz ")
        b.line(f"store {ty} {new}, ptr {slot}")
        nan = b.emit(f"zext i1 {b.emit(f'fcmp uno {ty} {value}, {value}')} to i8")
        seen = b.emit(f"load i8, ptr {flag}")
        b.line(f"store i8 {b.emit(f'or i8 {seen}, {nan}')}, ptr {flag}")

    def _nan_if_flagged(self, store, j, part):
        """A block's max/min ``part``, or NaN when the block saw one (its ``nnan`` max is then unspecified)."""
        b, ty = self.b, LLVM_TYPES[store.value.dtype]
        seen = b.emit(f"icmp ne i8 {b.emit(f'load i8, ptr {self.nan_flags[j]}')}, 0")
        return b.emit(f"select i1 {seen}, {ty} {llvm_const(float('nan'), ty)}, {ty} {part}")

    def _arg_update(self, store, slots, value, idx):
        """best, index := value, flat index where ``value`` beats best (strictly: the first extreme wins; a nan
        beats any number and no later value beats a nan)."""
        b, dt = self.b, store.value.dtype
        ty = LLVM_TYPES[dt]
        best = b.emit(f"load {ty}, ptr {slots[0]}")
        sign = "gt" if store.reduce == "argmax" else "lt"
        if dt in FLOATS:
            beats = b.emit(f"fcmp o{sign} {ty} {value}, {best}")
            nan_first = b.emit(f"and i1 {b.emit(f'fcmp uno {ty} {value}, 0.0')}, "
                               f"{b.emit(f'fcmp ord {ty} {best}, 0.0')}")
            beats = b.emit(f"or i1 {beats}, {nan_first}")
        else:
            beats = b.emit(f"icmp {'u' if dt == 'bool' else 's'}{sign} {ty} {value}, {best}")
        flat = "0"
        for d in range(self.nouter, len(self.k.shape)):
            scaled = flat if flat == "0" else b.emit(f"mul nsw i64 {flat}, {self.k.shape[d]}")
            flat = idx[d] if scaled == "0" else b.emit(f"add nsw i64 {scaled}, {idx[d]}")
        old = b.emit(f"load i64, ptr {slots[1]}")
        b.line(f"store {ty} {b.emit(f'select i1 {beats}, {ty} {value}, {ty} {best}')}, ptr {slots[0]}")
        b.line(f"store i64 {b.emit(f'select i1 {beats}, i64 {flat}, i64 {old}')}, ptr {slots[1]}")

    def _address(self, buf, idx):
        b, buffer = self.b, self.k.buffers[buf]
        terms = [(i, s) for i, s in zip(idx, buffer.strides) if s]
        offset = str(buffer.offset)
        for i, s in terms:
            term = i if s == 1 else b.emit(f"mul nsw i64 {i}, {s}")
            offset = term if offset == "0" else b.emit(f"add nsw i64 {offset}, {term}")
        return b.emit(f"getelementptr {_MEM_TYPES[buffer.dtype]}, ptr %buf{buf}, i64 {offset}")

    def _store(self, buf, idx, value, dtype):
        if dtype == "bool":
            value = self.b.emit(f"zext i1 {value} to i8")
        self.b.line(f"store {_MEM_TYPES[dtype]} {value}, ptr {self._address(buf, idx)}")

    def _point(self, idx, stores=None, blocked=False):
        """The innermost body: evaluate the DAG of ``stores`` ((index, Store) pairs) once, then store or accumulate."""
        if stores is None:
            stores = list(enumerate(self.k.stores))
        values = {}
        for e in self.k.nodes([s for _, s in stores]):
            values[e] = self.acc_values[e.value] if e.op == "acc" else \
                self._expr(e, [values[a] for a in e.args], idx)
        for j, s in stores:
            if s.reduce in ARG_REDUCTIONS:
                self._arg_update(s, self.accs[j], values[s.value], idx)
            elif blocked and j in self.nan_flags:
                self._extremum_in_block(s, j, values[s.value])
            elif s.reduce:
                self._accumulate(s, self.accs[j][1 if blocked else 0], values[s.value])
            else:
                self._store(s.buffer, idx, values[s.value], s.value.dtype)

    def _expr(self, e, args, idx):
        b, ty, dt = self.b, LLVM_TYPES[e.dtype], e.dtype
        if e.op == "load":
            v = b.emit(f"load {_MEM_TYPES[dt]}, ptr {self._address(e.value, idx)}")
            return b.emit(f"icmp ne i8 {v}, 0") if dt == "bool" else v
        if e.op == "const":
            return str(e.value) if isinstance(e.value, Sym) else llvm_const(e.value, ty)
        if e.op == "cast":
            return _cast(b, args[0], e.args[0].dtype, dt)
        if e.op == "where":
            return b.emit(f"select i1 {args[0]}, {ty} {args[1]}, {ty} {args[2]}")
        src = e.args[0].dtype
        sty = LLVM_TYPES[src]
        if e.op in _FCMP:
            if src in FLOATS:
                return b.emit(f"fcmp {_FCMP[e.op]} {sty} {args[0]}, {args[1]}")
            # bool is i1: compared signed, true would be -1 < false; NumPy orders False < True.
            pred = _ICMP[e.op].replace("s", "u", 1) if src == "bool" and e.op not in ("eq", "ne") else _ICMP[e.op]
            return b.emit(f"icmp {pred} {sty} {args[0]}, {args[1]}")
        if dt in FLOATS and e.op in ("sin", "cos") and self.trig_small:
            return (llvm_trig.sin if e.op == "sin" else llvm_trig.cos)(b, args[0], ty, small=True)
        if dt in FLOATS:
            return _float_op(b, e.op, args, ty)
        return _int_op(b, e.op, args, ty)




def _float_op(b, name, args, ty):
    simple = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}
    if name in simple:
        return b.emit(f"{simple[name]} {ty} {args[0]}, {args[1]}")
    if name == "neg":
        return b.emit(f"fneg {ty} {args[0]}")
    intrinsics = {"abs": "llvm.fabs", "sqrt": "llvm.sqrt", "max": "llvm.maximum", "min": "llvm.minimum"}
    if name in intrinsics:
        return b.intrinsic(intrinsics[name], ty, *args)
    if name == "rsqrt":
        return b.emit(f"fdiv {ty} {llvm_const(1, ty)}, {b.intrinsic('llvm.sqrt', ty, args[0])}")
    if name == "pow":
        return llvm_math.pow(b, args[0], args[1], ty)
    if name == "fmod":
        return llvm_fmod.fmod(b, args[0], args[1], ty)
    if name == "fma":  # always fused (``llvm.fmuladd`` may split): one vfmadd per vector on x86-64 with FMA
        return b.intrinsic("llvm.fma", ty, *args)
    return llvm_math.FUNCTIONS[name](b, args[0], ty)


def _int_op(b, name, args, ty):
    if ty == "i1":
        logical = {"and": "and", "or": "or", "max": "or", "min": "and", "add": "or", "mul": "and"}
        if name == "not":
            return b.emit(f"xor i1 {args[0]}, true")
        if name not in logical:
            raise NotImplementedError(f"llvm backend: {name} on bool")
        return b.emit(f"{logical[name]} i1 {args[0]}, {args[1]}")
    simple = {"add": "add", "sub": "sub", "mul": "mul"}
    if name in simple:
        return b.emit(f"{simple[name]} {ty} {args[0]}, {args[1]}")
    if name == "neg":
        return b.emit(f"sub {ty} 0, {args[0]}")
    if name == "abs":
        return b.intrinsic("llvm.abs", ty, args[0], "false", arg_types=[ty, "i1"])
    if name in ("max", "min"):
        return b.intrinsic(f"llvm.s{name}", ty, *args)
    raise NotImplementedError(f"llvm backend: {name} on {ty}")


def _cast(b, value, src, dst):
    """Conversions with C semantics (float -> int truncates; anything -> bool is ``!= 0``); the storage-only dtypes
    convert to and from f32 (`storage_cast`)."""
    s, d = LLVM_TYPES[src], LLVM_TYPES[dst]
    if src == dst:
        return value
    if src in STORAGE or dst in STORAGE:
        return storage_cast(b, value, src, dst)
    if dst == "bool":
        return b.emit(f"fcmp une {s} {value}, 0.0" if src in FLOATS else f"icmp ne {s} {value}, 0")
    if src == "bool":
        return b.emit(f"{'uitofp' if dst in FLOATS else 'zext'} i1 {value} to {d}")
    if src in FLOATS and dst in FLOATS:
        return b.emit(f"{'fpext' if src == 'f32' else 'fptrunc'} {s} {value} to {d}")
    if src in FLOATS:
        # LLVM's fptosi is poison for NaN and out-of-range values (the optimizer may then fold a later sitofp into a
        # trunc: NaN downstream); x86's cvtt* (NumPy's astype: eager) gives the type's minimum, selected here.
        bits = 64 if dst == "i64" else 32
        t = b.emit(f"fptosi {s} {value} to {d}")
        ok = b.emit(f"fcmp olt {s} {b.intrinsic('llvm.fabs', s, value)}, {llvm_const(2.0 ** (bits - 1), s)}")
        return b.emit(f"select i1 {ok}, {d} {t}, {d} {-(1 << (bits - 1))}")
    if dst in FLOATS:
        return b.emit(f"sitofp {s} {value} to {d}")
    return b.emit(f"{'sext' if src == 'i32' else 'trunc'} {s} {value} to {d}")


def storage_cast(b, value, src, dst):
    """f32 to or from a storage-only dtype, rounding to nearest even. f16 is LLVM's ``half`` (F16C converts it);
    bf16 is its bits, widened by a shift and narrowed by integer rounding, with a NaN kept NaN (its sign and the
    quiet bit, as ml_dtypes) and subnormals kept (AVX512-BF16's ``vcvtneps2bf16`` flushes them). f32 -> bf16::

        %t0 = bitcast float %x to i32
        %t1 = lshr i32 %t0, 16
        %t2 = and i32 %t1, 1
        %t3 = add i32 %t2, 32767
        %t4 = add i32 %t0, %t3
        %t5 = lshr i32 %t4, 16
        %t6 = and i32 %t0, 2147483647
        %t7 = icmp ugt i32 %t6, 2139095040
        %t8 = and i32 %t1, 32768
        %t9 = or i32 %t8, 32704
        %t10 = select i1 %t7, i32 %t9, i32 %t5
        %t11 = trunc i32 %t10 to i16
    """
    if src == "f16":
        return b.emit(f"fpext half {value} to float")
    if dst == "f16":
        return b.emit(f"fptrunc float {value} to half")
    if src == "bf16":
        wide = b.emit(f"zext i16 {value} to i32")
        return b.emit(f"bitcast i32 {b.emit(f'shl i32 {wide}, 16')} to float")
    bits = b.emit(f"bitcast float {value} to i32")
    high = b.emit(f"lshr i32 {bits}, 16")
    bias = b.emit(f"add i32 {b.emit(f'and i32 {high}, 1')}, 32767")
    rounded = b.emit(f"lshr i32 {b.emit(f'add i32 {bits}, {bias}')}, 16")
    nan = b.emit(f"icmp ugt i32 {b.emit(f'and i32 {bits}, 2147483647')}, 2139095040")
    quiet = b.emit(f"or i32 {b.emit(f'and i32 {high}, 32768')}, 32704")
    return b.emit(f"trunc i32 {b.emit(f'select i1 {nan}, i32 {quiet}, i32 {rounded}')} to i16")


def fast_extremum(store):
    """Whether a reduction store is a float max or min (`BodyEmitter._extremum_in_block` accumulates its blocks)."""
    return store.reduce in ("max", "min") and store.value.dtype in FLOATS


def total_type(store):
    """The LLVM type of a reduction's running total: float32 sums add their block sums (`llvm_emit.BLOCK` elements,
    or `llvm_columns.COLUMN_BLOCK` rows) in double, so 10^7 terms lose nothing to a large total swallowing small
    block sums."""
    return "double" if store.value.dtype == "f32" and store.reduce == "sum" else LLVM_TYPES[store.value.dtype]
