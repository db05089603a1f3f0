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

import threading
import time

import numpy as np

from ..codegen.ir import Buffer, Expr, Kernel, Store, load, op
from ..codegen.llvm_compile import compile_kernel
from ..codegen.llvm_objcache import default_cache
from ..fx.node import Node
from ..ops.table import OPS
from ..runtime.threads import get_num_threads, parallel_for
from .expr import Unfusable, parse_expr

__all__ = ["IR_DTYPES", "GroupKernel", "node_expr", "node_expr_for", "clear_kernel_cache", "kernel_cache_stats"]

IR_DTYPES = {np.dtype(np.bool_): "bool", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
             np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_NP = {v: k for k, v in IR_DTYPES.items()}
# Below this many elements a kernel runs on the calling thread: waking workers costs more than it saves.
PARALLEL_MIN = 1 << 16

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


def _compiled(kernel):
    text = str(kernel)
    with _lock:
        ck = _KERNELS.get(text)
        if ck is not None:
            _STATS["hits"] += 1
            return ck
    start = time.perf_counter()
    ck = compile_kernel(kernel, cache=default_cache())
    with _lock:
        _STATS["compiles"] += 1
        _STATS["compile_s"] += time.perf_counter() - start
        return _KERNELS.setdefault(text, ck)


def node_expr_for(name, operands, out_dtype):
    """The IR expression of row ``name`` over ``operands`` (IR expressions or numbers), producing ``out_dtype``."""
    row = OPS[name]
    if row.promotion == "compare":
        dtypes = {x.dtype for x in operands if isinstance(x, Expr)}
        if len(dtypes) != 1:
            raise Unfusable("a comparison of mixed dtypes")
        compute = dtypes.pop()
        if compute not in ("f32", "f64") and any(isinstance(x, float) for x in operands):
            raise Unfusable("an integer tensor compared with a float number promotes")
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
    return op("cast", x, dtype=dtype)


def node_expr(node, operands):
    """`node_expr_for` for a traced node (its row, and its output dtype from ``meta["val"]``)."""
    return node_expr_for(node.target.op.name, operands, IR_DTYPES[node.meta["val"][1]])


class GroupKernel:
    """Runs one `fusion.FusedGroup`: ``kernel(input_arrays) -> output_arrays`` (in ``group.outputs`` order).

    The IR depends on the inputs' strides, so one compiled variant is kept per stride pattern (guards make that
    one pattern in practice).
    """

    def __init__(self, group):
        self.group = group
        self.shape = tuple(group.shape)
        self.numel = int(np.prod(self.shape))
        self.in_dtypes = [IR_DTYPES[p.meta["val"][1]] for p in group.inputs]
        self.out_dtypes = [IR_DTYPES[m.meta["val"][1]] for m in group.outputs]
        self.variants: dict[tuple, object] = {}
        ndim = len(self.shape)
        self.out_strides = tuple(int(np.prod(self.shape[d + 1:])) for d in range(ndim))

    def build(self, in_strides):
        """The IR kernel for inputs with these element strides (already broadcast to the group's shape)."""
        g = self.group
        env = {p: load(i, dt) for i, (p, dt) in enumerate(zip(g.inputs, self.in_dtypes))}
        for m in g.nodes:
            env[m] = node_expr(m, [env[a] if isinstance(a, Node) else a for a in m.args])
        buffers = [Buffer(dt, s) for dt, s in zip(self.in_dtypes, in_strides)]
        buffers += [Buffer(dt, self.out_strides) for dt in self.out_dtypes]
        stores = tuple(Store(len(g.inputs) + j, env[m]) for j, m in enumerate(g.outputs))
        return Kernel(self.shape, tuple(buffers), stores)

    def _views(self, arrays):
        views = []
        for a in arrays:
            b = np.broadcast_to(a, self.shape)
            if any(s % b.itemsize for s in b.strides):  # strides the IR cannot express in elements
                b = np.broadcast_to(np.ascontiguousarray(a), self.shape)
            views.append(b)
        return views

    def __call__(self, arrays):
        outs = [np.empty(self.shape, _NP[dt]) for dt in self.out_dtypes]
        if self.numel == 0:
            return outs
        views = self._views(arrays)
        key = tuple(tuple(s // v.itemsize for s in v.strides) for v in views)
        ck = self.variants.get(key)
        if ck is None:
            ck = self.variants[key] = _compiled(self.build(key))
        addrs = [v.__array_interface__["data"][0] for v in views] + [o.ctypes.data for o in outs]
        if self.numel >= PARALLEL_MIN and get_num_threads() > 1:
            inner = max(1, self.numel // max(ck.outer, 1))
            parallel_for(lambda start, stop: ck(start, stop, *addrs), ck.outer, grain=max(1, (1 << 15) // inner))
        else:
            ck(0, ck.outer, *addrs)
        return outs
