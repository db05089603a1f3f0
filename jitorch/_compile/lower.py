"""Lower a fused group to one codegen IR kernel, compile it with LLVM, and run it on NumPy arrays.

Each member's expression comes from its row's ``Pointwise`` string (`expr.parse_expr`), with its operands cast to
the dtype the row computes in (what the eager dispatcher's promotion does). Inputs become strided buffers over the
group's shape (stride 0 where they broadcast); outputs are fresh C-contiguous NumPy arrays, so no buffer overlaps
another (the LLVM backend marks them all ``noalias``). Compiled kernels are cached in memory by their canonical IR
text, so equal groups in different graphs share machine code; their object code is also cached on disk
(`codegen.llvm_objcache.default_cache`: ``$JITORCH_CACHE_DIR`` or ~/.cache/jitorch), so a new process loads it
instead of compiling.

>>> import numpy as np
>>> from jitorch.codegen.ir import load
>>> print(node_expr_for("mul", [load(0, "f32"), 2], "f32"))
mul[f32](load[f32](0), const[f32](2.0))
"""
from __future__ import annotations

import operator
import threading
import time

import numpy as np

from ..codegen.ir import (IR_DTYPES, NP_TYPES, STORAGE, STORAGE_IR_DTYPES, Buffer, Expr, Kernel, Store, load, op,
                          reduced, simplify)
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_host import storage_dtypes
from ..codegen.llvm_objcache import default_cache
from ..fx.node import Node
from ..ops import native_eager
from ..ops.table import OPS
from ..runtime import host_cache
from ..runtime.host_pointer import data_address
from . import lower_rows
from .expr import Unfusable, parse_expr

__all__ = ["IR_DTYPES", "FUSED_DTYPES", "Passes", "GroupKernel", "node_expr", "node_expr_for", "clear_kernel_cache",
           "kernel_cache_stats"]

# What fused groups hold: the dtypes kernels compute in, and float16/bfloat16, which they load, compute in float32
# and round once per row (`node_expr_for`).
FUSED_DTYPES = {**IR_DTYPES, **STORAGE_IR_DTYPES}
_NP = {v: k for k, v in FUSED_DTYPES.items()}
# Rows that take a Python number as float32 with a half or bfloat16 tensor (ATen's mul and div: its "opmath"); every
# other row rounds the number to the tensor's dtype first (through float32, as ATen converts a Scalar).
_NUMBER_IN_FLOAT32 = ("mul", "div")
# Below this many elements a kernel runs on the calling thread: waking workers costs more than it saves.
PARALLEL_MIN = native_eager.PARALLEL_MIN  # one threshold for eager and compiled kernels

_lock = threading.Lock()
_KERNELS: dict[str, object] = {}
_STATS = {"compiles": 0, "hits": 0, "compile_s": 0.0}


def clear_kernel_cache():
    with _lock:
        _KERNELS.clear()
        _STATS.update(compiles=0, hits=0, compile_s=0.0)


def kernel_cache_stats():
    """``{"compiles", "hits", "compile_s", "entries"}`` of the in-memory kernel cache."""
    with _lock:
        return dict(_STATS, entries=len(_KERNELS))


def memo_build(table, stats, lock, key, build):
    """``table[key]``, built by ``build()`` on a miss (outside ``lock``: compiles take long); counts hits, compiles
    and compile seconds in ``stats``. Shared by the LLVM kernels here and the CUDA programs of lower_cuda.py."""
    with lock:
        found = table.get(key)
        if found is not None:
            stats["hits"] += 1
            return found
    start = time.perf_counter()
    built = build()
    with lock:
        stats["compiles"] += 1
        stats["compile_s"] += time.perf_counter() - start
        return table.setdefault(key, built)


def _compiled(kernel):
    return memo_build(_KERNELS, _STATS, _lock, str(kernel), lambda: compile_kernel(kernel, cache=default_cache()))


def node_expr_for(name, operands, out_dtype):
    """The IR expression of row ``name`` over ``operands`` (IR expressions or numbers), producing ``out_dtype``."""
    row = OPS[name]
    if row.promotion == "compare":
        dtypes = {x.dtype for x in operands if isinstance(x, Expr)}
        if len(dtypes) != 1:
            raise Unfusable("a comparison of mixed dtypes")
        compute = dtypes.pop()
        if compute in STORAGE:  # widening is exact: compared in float32, with a number rounded to the dtype first
            if compute not in storage_dtypes():
                raise Unfusable(f"{compute} kernels on this CPU (no F16C)")
            operands = [_widen(x) if isinstance(x, Expr) else _rounded_number(x, compute) for x in operands]
            compute = "f32"
        if compute not in ("f32", "f64") and any(isinstance(x, float) for x in operands):
            raise Unfusable("an integer tensor compared with a float number promotes")
    elif out_dtype in STORAGE:
        if out_dtype not in storage_dtypes():
            raise Unfusable(f"{out_dtype} kernels on this CPU (no F16C)")
        compute = "f32"
        operands = [_storage_operand(x, out_dtype, name, row) for x in operands]
    else:
        compute = out_dtype
        operands = [x.dtype != compute and not (row.masks and x.dtype == "bool") and _cast_to(x, compute) or x
                    if isinstance(x, Expr) else x for x in operands]
    if compute == "bool":
        raise Unfusable("bool arithmetic")  # NumPy's bool add is "or"; keep such rows eager
    expr = parse_expr(row.fusion.expr, operands, compute)
    if expr.dtype != out_dtype:
        if expr.dtype == "bool" or out_dtype == "bool":
            raise Unfusable(f"{name}: {expr.dtype} result for a {out_dtype} output")
        expr = op("cast", expr, dtype=out_dtype)
    return expr


def _cast_to(x, dtype):
    if x.dtype == "bool" or dtype == "bool":
        raise Unfusable(f"cast {x.dtype} -> {dtype}")
    if x.dtype in STORAGE:  # exact through float32
        return op("cast", _widen(x), dtype=dtype)
    return op("cast", x, dtype=dtype)


def _widen(x):
    return op("cast", x, dtype="f32") if isinstance(x, Expr) and x.dtype in STORAGE else x


def _rounded_number(x, dtype):
    """A Python number as ATen converts a Scalar for a half or bfloat16 op: to float32, then to ``dtype``."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return x
    try:
        return float(NP_TYPES[dtype](np.float32(x)))
    except OverflowError:  # (an integer past float's range: eager decides)
        raise Unfusable(f"the number {x} as {dtype}") from None


def _storage_operand(x, out_dtype, name, row):
    """An operand of a row whose result is float16 or bfloat16, as that row computes in float32: a tensor of the
    result's dtype widened (exactly), a mask kept, a number rounded to the result's dtype first where ATen does.
    Operands of other dtypes (a float32 0-d tensor, integers) convert as eager's kernels decide: kept eager."""
    if not isinstance(x, Expr):
        return x if name in _NUMBER_IN_FLOAT32 else _rounded_number(x, out_dtype)
    if x.dtype == out_dtype or x.dtype in STORAGE and name == "to_copy":
        return _widen(x)
    if row.masks and x.dtype == "bool" or x.dtype == "f32" and name == "to_copy":  # (narrowed once, at the end)
        return x
    raise Unfusable(f"{name}: a {x.dtype} operand of a {out_dtype} result")


def node_expr(node, operands):
    """`node_expr_for` for a traced node (its row, and its output dtype from ``meta["val"]``)."""
    return node_expr_for(node.target.op.name, operands, FUSED_DTYPES[node.meta["val"][1]])


class Passes:
    """Stores placed in passes: `reduce` makes an accumulator, and each store goes to the first pass after every
    accumulator it reads is final. Shared by fused groups (`GroupKernel`) and the row ops of CPU graph replay.

    >>> b = Passes(); x = load(1, "f32"); shifted = op("sub", x, b.reduce("max", x))
    >>> b.stores[0].phase, b._phase(shifted)  # the max accumulates in pass 0; x - max is ready in pass 1
    (0, 1)
    """

    def __init__(self):
        self.stores: list = []
        self._reductions: dict = {}

    def reduce(self, kind, value):
        """An accumulator of ``kind`` over ``value`` (one store per distinct reduction)."""
        key = (kind, value)
        if key not in self._reductions:
            self.stores.append(Store(None, value, kind, self._phase(value)))
            self._reductions[key] = reduced(len(self.stores) - 1, self.stores[-1].dtype)
        return self._reductions[key]

    def _phase(self, e, memo=None):
        """The first pass in which ``e`` can be evaluated: after every accumulator it reads is final."""
        memo = {} if memo is None else memo
        if e not in memo:
            memo[e] = self.stores[e.value].phase + 1 if e.op == "acc" else \
                max((self._phase(a, memo) for a in e.args), default=0)
        return memo[e]

    def _stash(self):
        """Keep an expensive value of an earlier pass in the output it feeds instead of recomputing it: softmax's
        ``exp(x - max)`` is stored in pass 1 (where the sum needs it anyway) and rescaled in place in pass 2."""
        for j, s in enumerate(list(self.stores)):
            if s.buffer is None or s.row or s.phase == 0:
                continue
            best = None
            for e in Kernel_nodes(s.value):
                if e.dtype == s.value.dtype and self._phase(e) < s.phase and _expensive(e):
                    best = e if best is None or _size(e) > _size(best) else best
            if best is not None:
                self.stores.append(Store(s.buffer, best, phase=self._phase(best)))
                self.stores[j] = Store(s.buffer, _substitute(s.value, best, load(s.buffer, s.value.dtype)),
                                       phase=s.phase)


class GroupKernel(Passes):
    """Runs one `fusion.FusedGroup`: ``kernel(input_arrays) -> output_arrays`` (in ``group.outputs`` order).

    The expressions are built once (``structure``); the IR's buffers depend on the inputs' strides, so one compiled
    variant is kept per stride pattern (guards make that one pattern in practice). Buffers are the outputs first,
    then one load slot per (input, shape it broadcasts to): a row value reads its input with zero strides along the
    reduced dimensions, a point value with its broadcast strides.
    """

    def __init__(self, group):
        self.group = group
        self.shape = tuple(group.shape)
        self.reduce_axes = getattr(group, "reduce_axes", 0)
        nouter = len(self.shape) - self.reduce_axes
        self.outer_shape = self.shape[:nouter]
        self.numel = int(np.prod(self.shape))
        self.outer_numel = int(np.prod(self.outer_shape))
        self.out_shapes = [tuple(m.meta["val"][0]) for m in group.outputs]
        self.out_dtypes = [FUSED_DTYPES[m.meta["val"][1]] for m in group.outputs]
        self.variants: dict[tuple, object] = {}
        self.slots: dict[tuple, int] = {}  # (input position, broadcast shape[, "first"]) -> buffer index
        Passes.__init__(self)
        self._structure()

    # -- structure: expressions and stores, independent of strides -------------------------------------------------
    def _load(self, node, shape):
        key = (self.group.inputs.index(node), tuple(shape))
        if key not in self.slots:
            self.slots[key] = len(self.out_dtypes) + len(self.slots)
        return load(self.slots[key], FUSED_DTYPES[node.meta["val"][1]])

    def _first_load(self, e):
        """A load slot read at its row's first element (key ``(input, shape, "first")``: zero strides along the
        reduced dims), for a point slot; None for a row value's slot, constant along the row already."""
        (pos, shape), = (key for key, index in self.slots.items() if index == e.value)
        if shape != self.shape:
            return None
        key = (pos, shape, "first")
        if key not in self.slots:
            self.slots[key] = len(self.out_dtypes) + len(self.slots)
        return load(self.slots[key], e.dtype)

    def _operand(self, env, a, shape):
        if not isinstance(a, Node):
            return a
        return env[a] if a in env else self._load(a, shape)

    def _structure(self):
        g, env = self.group, {}
        spaces = getattr(g, "space", {})
        for m in g.nodes:
            shape = tuple(m.meta["val"][0]) if "val" in m.meta and m.meta["val"] else self.shape
            if m.op == "call_function" and m.target is operator.getitem:
                env[m] = env[m.args[0]][m.args[1]]
                continue
            name = m.target.op.name
            if spaces.get(m, "point") in ("point", "row", "rowsq") and name not in REDUCE_KINDS:
                env[m] = node_expr(m, [self._operand(env, a, shape) for a in m.args])
            elif name in REDUCE_KINDS:
                env[m] = self._reduce(REDUCE_KINDS[name], self._operand(env, m.args[0], self.shape))
            elif name == "native_layer_norm":
                x, w, b = (self._operand(env, a, self.shape) for a in m.args)
                n = int(np.prod(self.shape[len(self.outer_shape):]))
                x0 = lower_rows.first_element(x, self._first_load)
                env[m] = lower_rows.layer_norm(self, x, x0, n, w, b, m.kwargs["eps"])
            else:
                fn = getattr(lower_rows, name.replace("_data", ""))
                env[m] = fn(self, *(self._operand(env, a, self.shape) for a in m.args))
        for j, m in enumerate(g.outputs):
            value = env[m]
            if self.out_shapes[j] == self.shape:
                self.stores.append(Store(j, value, phase=self._phase(value) if self.reduce_axes else 0))
            else:
                self.stores.append(Store(j, value, row=True))
        self.stores = simplify(self.stores)
        self._stash()

    def _reduce(self, kind, value):
        """A reduction of ``value``; float16 and bfloat16 accumulate in float32 and round once, as eager's do."""
        if value.dtype not in STORAGE:
            return self.reduce(kind, value)
        total = self.reduce(kind, _widen(value))
        return total if total.dtype == "i64" else op("cast", total, dtype=value.dtype)

    # -- per stride pattern --------------------------------------------------------------------------------------
    def build(self, slot_strides):
        """The IR kernel for load slots with these element strides (over the group's iteration space)."""
        red = self.reduce_axes
        buffers = []
        for shape, dt in zip(self.out_shapes, self.out_dtypes):
            if shape == self.shape:
                buffers.append(Buffer(dt, _contiguous(self.shape)))
            else:
                buffers.append(Buffer(dt, _contiguous(self.outer_shape) + (0,) * red))
        dtypes = {}
        for key, index in self.slots.items():
            dtypes[index] = FUSED_DTYPES[self.group.inputs[key[0]].meta["val"][1]]
        for index, strides in zip(sorted(dtypes), slot_strides):
            buffers.append(Buffer(dtypes[index], strides))
        return Kernel(self.shape, tuple(buffers), tuple(self.stores), red)

    def _slot_views(self, arrays, xp=np):
        """Per load slot, (array broadcast to its shape, element strides over the iteration space); ``xp`` is the
        arrays' module (CuPy for the CUDA lowering)."""
        red, out = self.reduce_axes, []
        for (pos, shape, *first), _ in sorted(self.slots.items(), key=lambda kv: kv[1]):
            a = arrays[pos]
            b = xp.broadcast_to(a, shape)
            if any(st % b.itemsize for st in b.strides):  # strides the IR cannot express in elements
                b = xp.broadcast_to(xp.ascontiguousarray(a), shape)
            if first:  # the row's first element, seen along the whole row (same data pointer)
                b = xp.broadcast_to(b[(Ellipsis,) + (slice(0, 1),) * red], shape)
            strides = tuple(st // b.itemsize for st in b.strides)
            if shape != self.shape:  # a row value: constant along the reduced dims
                strides = (strides[:len(shape) - red] if len(shape) == len(self.shape) else strides) + (0,) * red
            out.append((b, strides))
        return out

    def __call__(self, arrays):
        outs = [host_cache.empty(shape, _NP[dt]) for shape, dt in zip(self.out_shapes, self.out_dtypes)]
        if (self.outer_numel if self.reduce_axes else self.numel) == 0:
            return outs
        views = self._slot_views(arrays)
        key = tuple(st for _, st in views)
        ck = self.variants.get(key)
        if ck is None:
            ck = self.variants[key] = _compiled(self.build(key))
        addrs = [data_address(o) for o in outs] + [data_address(v) for v, _ in views]
        inner = max(1, self.numel // max(ck.outer, 1))
        native_eager.launch(ck, addrs, self.numel, max(1, (1 << 15) // inner))
        return outs


REDUCE_KINDS = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min", "argmax": "argmax", "argmin": "argmin"}
_EXPENSIVE = ("exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "pow")


def _contiguous(shape):
    return tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))


def Kernel_nodes(e, seen=None):  # noqa: N802
    """Every node under ``e`` (children first)."""
    seen = {} if seen is None else seen
    if e not in seen:
        for a in e.args:
            Kernel_nodes(a, seen)
        seen[e] = None
    return list(seen)


def _expensive(e):
    return any(n.op in _EXPENSIVE for n in Kernel_nodes(e))


def _size(e):
    return len(Kernel_nodes(e))


def _substitute(e, old, new):
    if e == old:
        return new
    if not e.args:
        return e
    return Expr(e.op, [_substitute(a, old, new) for a in e.args], e.dtype, e.value)
