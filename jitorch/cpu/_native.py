"""The recorded steps of a CPU graph as native code: fused groups, planned buffers, one call per replay.

`NativeReplay(records, visible)` lowers a capture:

1. each step becomes an item (`_native_items`): an elementwise step (`_lower.elementwise`), a reduction, a matrix
   product, a copy (the restore prologue), a random draw (run first, from Python, so each replay still advances the
   generator), or a Python step (the recorded closure, with the reason the native backend refused it);
2. consecutive elementwise items over one iteration space fuse into one loop: a value a later member reads at the
   same element stays in a register, and is stored only if someone else can see the buffer;
3. buffers: tensors the user holds (``visible``), inputs and anything a Python step touches keep their NumPy
   arrays at fixed addresses; the other intermediates are internal: stored only when read outside their group, in
   one arena where buffers whose live ranges do not overlap share memory;
4. the items between Python steps become native `codegen.llvm_program.Program` s over one pointer table.

When no step falls back, ``replay()`` is the draws plus ONE native call (``native`` is True).

>>> import jitorch
>>> from jitorch.cpu import CPUGraph, graph
>>> x = jitorch.ones(4); g = CPUGraph()
>>> with graph(g):
...     y = (x * 2 + 1).tanh()
>>> g.replay(); g.native, g.native_report()["calls"]
(True, 1)
"""
from __future__ import annotations

import math

import numpy as np

from .._compile.lower import IR_DTYPES
from ..codegen.ir import Buffer, Kernel, Store, load, simplify
from ..codegen.llvm_objcache import default_cache
from ..codegen.llvm_pool import split_threads
from ..codegen.llvm_program import Copy, Ref, call_for, compile_program
from ..runtime.threads import get_num_threads
from ._lower import blas_address, element_strides, product_call, view_of
from ._native_items import _checked, _classify, _draws_in_order, _joins, _key, _note

__all__ = ["NativeReplay"]

_ALIGN = 64
# Elementwise items this small move ahead of a larger loop they do not touch (scalars: step counts, bias
# corrections); larger ones would carry everything after them ahead of the loop, in loops of their own.
HOIST_MAX = 64


def _independent(group, item):
    """Whether ``item`` commutes with ``group``'s loop: it reads no memory the group writes and writes none it reads
    or writes. By address ranges, not by root arrays: two arrays over the same bytes can have different roots
    (``from_dlpack`` of two views of one tensor, ``frombuffer``)."""
    written = [it.payload.out for it in group["members"]]
    touched = written + [a for it in group["members"] for a in it.payload.operands if isinstance(a, np.ndarray)]
    if any(isinstance(a, np.ndarray) and np.may_share_memory(a, w) for a in item.operands for w in written):
        return False
    return not any(np.may_share_memory(item.out, t) for t in touched)


class NativeReplay:
    """The native form of a recorded step list (see the module notes). Call it to replay."""

    def __init__(self, records, visible):
        self.records = list(records)
        self.roots: dict[int, np.ndarray] = {}
        items = _draws_in_order(_checked([it for r in self.records for it in _classify(r)]))
        self.draws = [it.rec.fn for it in items if it.kind == "draw"]
        # Checks a step made eagerly (nll_loss's target range) run before the replay: nothing has changed yet.
        self.checks = list(dict.fromkeys(it.check[0] for it in items if it.check is not None))
        # The arrays they read: a replay must not take such an input by address (the check would read the old one).
        self.checked = {id(view_of(it.check[1])[0]) for it in items if it.check is not None}
        items = [it for it in items if it.kind != "draw"]
        for it in items:
            for a in it.reads + it.writes:
                root = view_of(a)[0]
                self.roots.setdefault(id(root), root)
        self.fallbacks = [(it.rec.description, it.reason) for it in items if it.kind == "py"]
        units = self._group(items)
        self.internal = self._internal(units, visible)
        self._plan(units)

    # -- grouping ---------------------------------------------------------------------------------------------
    @staticmethod
    def _group(items):
        """Units in order: ``("ew", [items])`` fused groups, or single items.

        A tiny elementwise item (at most `HOIST_MAX` elements) that cannot join the open group but shares no
        buffer the group writes (nor writes one it reads) runs before the group instead, in a side group of its
        own: an optimizer's bias corrections (0-d) between the moment updates and the parameter update of one
        tensor would otherwise cut its one pass in four (Adam over a 512 x 784 weight: 233 us in four loops, 155
        in one)."""
        units, group, side = [], None, None

        def new(it):
            fresh = {"shape": it.payload.shape, "members": [it], "written": {}, "read": {}}
            _note(fresh, it.payload)
            return fresh

        def close():
            for g in (side, group):
                if g is not None:
                    units.append(("ew", g["members"]))
            return None, None

        for it in items:
            if it.kind == "ew" and group is not None and _joins(group, it.payload):
                group["members"].append(it)
                _note(group, it.payload)
                continue
            if (it.kind == "ew" and group is not None and _independent(group, it.payload)
                    and math.prod(it.payload.shape) <= HOIST_MAX < math.prod(group["shape"])):
                if side is not None and _joins(side, it.payload):
                    side["members"].append(it)
                    _note(side, it.payload)
                else:
                    if side is not None:
                        units.append(("ew", side["members"]))
                    side = new(it)
                continue
            group, side = close()
            if it.kind == "ew":
                group = new(it)
            else:
                units.append((it.kind, [it]))
        close()
        return units

    def _internal(self, units, visible):
        """Roots no one outside the native code can observe: intermediates born at a kernel step, held by nobody."""
        first_write, python_roots, candidates = {}, set(), set()
        for u, (kind, members) in enumerate(units):
            for it in members:
                if kind == "py":
                    rec = it.rec
                    for a in list(rec.datas) + list(rec.outs):
                        if isinstance(a, np.ndarray):
                            python_roots.add(id(view_of(a)[0]))
                    continue
                for a in it.writes:
                    root = view_of(a)[0]
                    first_write.setdefault(id(root), (u, it, a))
        for rid, (_, it, a) in first_write.items():
            if (it.rec.kind == "kernel" and a is self.roots[rid] and a.flags.c_contiguous and rid not in visible
                    and rid not in python_roots):
                candidates.add(rid)
        # An internal root must be written before anything reads it in each replay.
        for u, (kind, members) in enumerate(units):
            for it in members:
                for a in it.reads:
                    rid = id(view_of(a)[0])
                    if rid in candidates and first_write[rid][0] > u:
                        candidates.discard(rid)
        return candidates

    # -- planning and code ------------------------------------------------------------------------------------
    def _plan(self, units):
        readers: dict[int, set] = {}
        for u, (_, members) in enumerate(units):
            for it in members:
                for a in it.reads:
                    readers.setdefault(id(view_of(a)[0]), set()).add(u)
        segments, calls, uses = [], [], {}  # uses: internal root -> [first, last] call index (over all segments)
        ncall = 0

        def use(array):
            rid = id(view_of(array)[0])
            if rid in self.internal:
                span = uses.setdefault(rid, [ncall, ncall])
                span[1] = ncall

        for u, (kind, members) in enumerate(units):
            if kind == "py":
                if calls:
                    segments.append(("native", calls))
                    calls = []
                segments.append(("python", members[0].rec.fn))
                continue
            if kind == "ew":
                built = self._fused(members, u, readers)
                if built is None:
                    continue
                kernel, arrays = built
                for a in arrays:
                    use(a)
                calls.append(("kernel", kernel, arrays))
            elif kind == "red":
                it = members[0]
                use(it.reads[0])
                use(it.writes[0])
                calls.append(("kernel", it.payload, [it.reads[0], it.writes[0]]))
            elif kind == "kern":  # a kernel built whole (row ops, copies): its arrays per IR buffer
                kernel, arrays = members[0].payload
                for a in arrays:
                    use(a)
                calls.append(("kernel", kernel, arrays))
            elif kind == "gemm":
                spec = members[0].payload
                for a in (spec["a"], spec["b"], spec["c"]):
                    use(a)
                calls.append(("gemm", spec, None))
            elif kind == "copy":
                rec = members[0].rec
                calls.append(("copy", rec.outs[0], rec.datas[0]))
            ncall += 1
        if calls:
            segments.append(("native", calls))
        self._arena(uses)
        self.slots: dict[int, int] = {}
        addresses = []
        for rid, root in self.roots.items():
            if rid not in self.internal:
                self.slots[rid] = len(addresses)
                addresses.append(root.__array_interface__["data"][0])
        self.arena_slot = len(addresses)
        addresses.append(self.arena.__array_interface__["data"][0])
        self.blas_slots = {}
        for dt in ("f32", "f64"):
            address = blas_address(dt)
            if address is not None:
                self.blas_slots[dt] = len(addresses)
                addresses.append(address)
        self.table = np.array(addresses, dtype=np.uint64)
        self.static_table = self.table.copy()
        self.table_words = memoryview(self.table).cast("B").cast("Q")
        self.static_words = memoryview(self.static_table).cast("B").cast("Q")
        self.table_address = self.table.__array_interface__["data"][0]
        self.segments = []
        self.program_calls = []  # every native call in order (bench/ replays subsets of them: the BLAS floor)
        for kind, body in segments:
            if kind == "python":
                self.segments.append(("python", body))
            else:
                lowered = [self._call(c) for c in body]
                self.program_calls += lowered
                self.segments.append(("native", compile_program(lowered, default_cache())))

    def _fused(self, members, unit, readers):
        """(IR kernel, arrays per buffer) for one fused group, or None when it stores nothing anyone reads."""
        shape = members[0].payload.shape
        buffers, arrays, env = {}, [], {}

        def buffer(a):
            k = _key(a, shape)
            if k not in buffers:
                buffers[k] = len(arrays)
                arrays.append(a)
            return buffers[k]

        last = {}
        for it in members:
            item = it.payload
            exprs = []
            for a in item.operands:
                if isinstance(a, np.ndarray):
                    k = _key(a, shape)
                    exprs.append(env[k] if k in env else load(buffer(a), IR_DTYPES[a.dtype]))
                else:
                    exprs.append(a)
            k = _key(item.out, shape)
            env[k] = item.expr(exprs)
            last[k] = item.out
        stores = []
        for k, out in last.items():
            rid = k[0]
            if rid in self.internal and not (readers.get(rid, set()) - {unit}):
                continue  # read only inside this loop: it stays in registers
            stores.append(Store(buffer(out), env[k]))
        if not stores:
            return None
        bufs = tuple(Buffer(IR_DTYPES[a.dtype], element_strides(a, shape)) for a in arrays)
        # The rewrites compiled graphs make too (GELU's ``1 + tanh`` as one exp and a division: 254 -> ~150 us for
        # a 16 x 64 x 512 block's forward).
        return Kernel(shape, bufs, tuple(simplify(stores))), arrays

    def _arena(self, uses):
        """Offsets for the internal roots that are materialized; roots with disjoint live ranges share bytes."""
        placed, self.offsets = [], {}
        for rid, (start, stop) in sorted(uses.items(), key=lambda kv: kv[1][0]):
            size = -(-self.roots[rid].nbytes // _ALIGN) * _ALIGN
            offset = 0
            for other_off, other_size, o_start, o_stop in sorted(placed):
                if o_stop < start or o_start > stop or other_off + other_size <= offset:
                    continue
                if other_off >= offset + size:
                    break
                offset = other_off + other_size
            placed.append((offset, size, start, stop))
            self.offsets[rid] = offset
        total = max((o + s for o, s, _, _ in placed), default=0)
        self.arena = np.zeros(max(total, _ALIGN), dtype=np.uint8)

    def _ref(self, array):
        root, offset = view_of(array)
        rid = id(root)
        if rid in self.internal:
            return Ref(self.arena_slot, self.offsets[rid] + offset)
        return Ref(self.slots[rid], offset)

    def _call(self, call):
        kind = call[0]
        if kind == "kernel":
            return call_for(call[1], [self._ref(a) for a in call[2]], split_threads(get_num_threads()))
        if kind == "copy":
            return Copy(self._ref(call[1]), self._ref(call[2]), call[1].nbytes)
        return product_call(call[1], self._ref(call[1]["a"]), self._ref(call[1]["b"]), self._ref(call[1]["c"]),
                            self.blas_slots.get(call[1]["dtype"]))

    # -- use ------------------------------------------------------------------------------------------------------
    @property
    def native(self):
        """True when a replay is the draws plus one native call (no step fell back to Python)."""
        return len(self.segments) <= 1 and all(kind == "native" for kind, _ in self.segments)

    def slot_of(self, array):
        """The table slot holding ``array``'s address when ``array`` is a whole static root, else None."""
        root, offset = view_of(array)
        if root is not array or id(root) in self.internal or id(root) in self.checked:
            return None
        if any(other is not root and np.may_share_memory(other, root) for other in self.roots.values()):
            # Another root over these bytes (an operand view an eager kernel rebuilt from the address, without a
            # base chain): its slot holds the same address, which substituting this slot alone would not move.
            return None
        return self.slots.get(id(root))

    def __call__(self):
        for check in self.checks:
            check()
        for draw in self.draws:
            draw()
        for kind, fn in self.segments:
            if kind == "native":
                fn(self.table_address)
            else:
                fn()


